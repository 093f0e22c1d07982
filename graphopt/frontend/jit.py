"""``@go.jit`` (trace a function into a Graph per input signature) and ``go.contract``."""

from __future__ import annotations

import functools
import inspect
import threading
import weakref
from collections import OrderedDict

import numpy as np

from ..errors import GraphError
from . import eager
from .graph import Graph
from .tensor import Tensor, einsum, tracing

# Plans one ``@go.jit`` function keeps (least recently used dropped first).
JIT_CACHE_ENTRIES = 64


def static_key(x):
    """A static argument as a cache key that equals itself exactly when the traced graph
    would be the same: floats by their bits (``nan`` equals ``nan``; ``0.0`` and ``-0.0``
    differ), containers element by element."""
    if isinstance(x, float):
        return ("float", x.hex())
    if isinstance(x, complex):
        return ("complex", x.real.hex(), x.imag.hex())
    if isinstance(x, (tuple, list)):
        return (type(x).__name__, tuple(static_key(v) for v in x))
    if isinstance(x, frozenset):
        return ("frozenset", frozenset(static_key(v) for v in x))
    return x


def _is_array(x) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, Tensor)


def jit(fn=None, **compile_kwargs):
    """Trace ``fn`` on its first call per (shapes, dtypes) into a Graph, compile and cache it.

    Array arguments become graph inputs (named after the parameters); other arguments are
    static: part of the cache key and baked into the graph. ``fn`` returns a Tensor, a
    tuple/list of them or a dict, and the call returns the same structure of arrays.
    ``wrapper.plan_for(*args)`` returns the plan a call would run. Under
    ``go.disable_jit()`` (or ``$GRAPHOPT_DISABLE_JIT=1``) calls run ``fn`` eagerly instead.
    """
    if fn is None:
        return lambda f: jit(f, **compile_kwargs)
    sig = inspect.signature(fn)
    plans: OrderedDict = OrderedDict()
    lock = threading.Lock()

    def signature_of(args, kwargs):
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        arrays, key = [], []
        for pname, v in bound.arguments.items():
            kind = sig.parameters[pname].kind
            items = (list(enumerate(v)) if kind == inspect.Parameter.VAR_POSITIONAL else
                     list(v.items()) if kind == inspect.Parameter.VAR_KEYWORD else [(None, v)])
            for sub, x in items:
                name = pname if sub is None else f"{pname}_{sub}"
                if _is_array(x):
                    arrays.append((name, x))
                    key.append((name, tuple(x.shape), np.dtype(x.dtype).name))
                else:
                    try:
                        hash(x)
                    except TypeError:
                        raise GraphError(f"jit: argument {name!r} of type {type(x).__name__} is "
                                         "neither an array nor hashable (static)") from None
                    key.append((name, "static", type(x).__name__, static_key(x)))
        return bound, arrays, tuple(key)

    def trace(bound, arrays):
        g = Graph(fn.__name__)
        tensors = {name: g.input(name, x.shape, np.dtype(x.dtype).name) for name, x in arrays}
        call_args, call_kwargs = [], {}
        for pname, v in bound.arguments.items():
            kind = sig.parameters[pname].kind
            if kind == inspect.Parameter.VAR_POSITIONAL:
                call_args.extend(tensors.get(f"{pname}_{i}", x) for i, x in enumerate(v))
            elif kind == inspect.Parameter.VAR_KEYWORD:
                call_kwargs.update({k: tensors.get(f"{pname}_{k}", x) for k, x in v.items()})
            elif kind == inspect.Parameter.KEYWORD_ONLY:
                call_kwargs[pname] = tensors.get(pname, v)
            else:
                call_args.append(tensors.get(pname, v))
        with tracing(g):
            out = fn(*call_args, **call_kwargs)
        g.output(_tensorize(g, out))
        return g

    @functools.wraps(fn)
    def plan_for(*args, **kwargs):
        from ..compiler.driver import compile

        bound, arrays, key = signature_of(args, kwargs)
        with lock:
            plan = plans.get(key)
            if plan is not None:
                plans.move_to_end(key)
        if plan is None:
            plan = compile(trace(bound, arrays), **compile_kwargs)
            with lock:
                plans[key] = plan
                while len(plans) > JIT_CACHE_ENTRIES:
                    plans.popitem(last=False)
        return plan, [x for _, x in arrays]

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if eager.jit_disabled():
            return eager.run(fn, args, kwargs)
        return run_compiled(*args, **kwargs)

    def run_compiled(*args, **kwargs):
        plan, arrays = plan_for(*args, **kwargs)
        return plan(*arrays)

    wrapper.plan_for = lambda *a, **k: plan_for(*a, **k)[0]
    wrapper.run_compiled = run_compiled   # the compiled call, under disable_jit too
    wrapper.plans = plans
    return wrapper


def _tensorize(g: Graph, out):
    if isinstance(out, Tensor):
        return out
    if isinstance(out, (tuple, list)):
        return type(out)(_tensorize(g, o) for o in out)
    if isinstance(out, dict):
        return {k: _tensorize(g, v) for k, v in out.items()}
    return g.const(out)


# go.contract's plans by (equation, shapes, dtypes, options): weak, so that the compile
# cache's bounds (``compile_cache.CACHE_ENTRIES`` and its arena bytes) are theirs, and
# ``compiler.clear_cache`` or ``cache=False`` leaves none kept here
_contract_plans: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_contract_lock = threading.Lock()


def contract(eq, *arrays, out=None, **compile_kwargs):
    """One-shot einsum through the compiler: a drop-in for ``np.einsum`` and
    ``opt_einsum.contract``, in the equation form or the interleaved form
    (``contract(a, [0, 1], b, [1, 2], [0, 2])``, any hashable labels). Plans are cached per
    (equation, shapes, dtypes, options). ``out`` receives the result as ``np.einsum``'s does
    (the result's shape, a dtype it casts to safely); ``optimize=True`` is ``"auto"``; other
    keywords are ``go.compile``'s."""
    if not isinstance(eq, str):
        from ..ir.einsum import interleaved_to_equation

        try:
            eq, arrays = interleaved_to_equation((eq, *arrays))
        except GraphError as e:
            raise e.located(op="einsum") from None
    if compile_kwargs.get("optimize") is True:
        compile_kwargs["optimize"] = "auto"
    elif compile_kwargs.get("optimize") is False:
        raise GraphError("go.contract(optimize=False): graphopt always orders a contraction; "
                         "pass optimize='auto' (or a path search name)", op="einsum")
    arrays = [x if _is_array(x) else np.asarray(x) for x in arrays]
    key = (eq, tuple([(tuple(a.shape), np.dtype(a.dtype)) for a in arrays]),
           tuple(sorted((k, repr(v)) for k, v in compile_kwargs.items())))
    with _contract_lock:
        plan = _contract_plans.get(key)
    if plan is None:
        from ..compiler.driver import compile

        plan = compile(contract_graph(eq, arrays), **compile_kwargs)
        with _contract_lock:
            _contract_plans[key] = plan
    result = plan(*arrays)
    return result if out is None else _into(out, result, eq)


def contract_graph(eq: str, arrays, name: str = "contract") -> Graph:
    """The graph ``go.contract`` compiles for ``eq`` over NumPy ``arrays``: an input per
    array (``x0``, ``x1``, ...) and their einsum."""
    g = Graph(name)
    g.output(einsum(eq, *g._array_inputs(arrays, "x")))
    return g


def _into(out, result, eq: str):
    """``result`` written into ``out`` under np.einsum's rules for ``out``."""
    if not isinstance(out, np.ndarray) or out.shape != result.shape:
        raise GraphError(f"einsum {eq!r}: out= must be an ndarray of the result's shape "
                         f"{result.shape}, got {type(out).__name__} "
                         f"{getattr(out, 'shape', '')}", op="einsum")
    if not np.can_cast(result.dtype, out.dtype, "safe"):
        raise GraphError(f"einsum {eq!r}: the result is {result.dtype}, which out= of dtype "
                         f"{out.dtype} cannot hold without loss (np.einsum's 'safe' casting)",
                         op="einsum")
    np.copyto(out, result)
    return out
