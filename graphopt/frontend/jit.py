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


def contract(eq, *arrays, out=None, dtype=None, order="K", casting="safe", use_blas=True,
             **compile_kwargs):
    """One-shot einsum through the compiler: a drop-in for ``np.einsum`` and
    ``opt_einsum.contract``, in the equation form or the interleaved form
    (``contract(a, [0, 1], b, [1, 2], [0, 2])``, any hashable labels). Plans are cached per
    (equation, shapes, dtypes, options).

    As ``np.einsum``: ``out`` receives the result (its shape, a dtype ``casting`` allows);
    ``dtype`` casts the operands (by ``casting``, default ``"safe"``) and computes in it;
    ``order`` lays the result out (``"C"``, ``"F"``, ``"A"``: Fortran where every operand
    is; ``"K"``: as computed, C);
    ``optimize=False`` or ``None`` contracts all operands in one step, as NumPy's
    unoptimized einsum; ``True`` is ``"auto"``; an explicit path (opt_einsum's list of
    tuples, or ``np.einsum_path``'s ``["einsum_path", ...]``) is run as given. As
    ``opt_einsum.contract``: ``use_blas`` is accepted (graphopt picks each step's form by
    its rate table; results do not change); ``memory_limit="max_input"`` keeps each
    intermediate within the largest operand (opt_einsum's path search runs with it, and its
    path is run as given), ``-1`` is none, and a number is graphopt's: bytes of the whole
    call, not opt_einsum's elements of one intermediate. Other keywords are
    ``go.compile``'s."""
    if not isinstance(eq, str):
        from ..ir.einsum import interleaved_to_equation

        try:
            eq, arrays = interleaved_to_equation((eq, *arrays))
        except GraphError as e:
            raise e.located(op="einsum") from None
    if not isinstance(use_blas, bool):
        raise GraphError(f"go.contract(use_blas={use_blas!r}): a bool", op="einsum")
    if casting not in ("no", "equiv", "safe", "same_kind", "unsafe"):
        raise GraphError(f"einsum {eq!r}: casting={casting!r} is not 'no', 'equiv', 'safe', "
                         "'same_kind' or 'unsafe'", op="einsum")
    layout = order.upper() if isinstance(order, str) else order
    if layout not in ("C", "F", "A", "K"):
        raise GraphError(f"einsum {eq!r}: order={order!r} is not 'C', 'F', 'A' or 'K'",
                         op="einsum")
    arrays = [x if _is_array(x) else np.asarray(x) for x in arrays]
    if dtype is not None:
        arrays = _cast(arrays, dtype, casting, eq)
    compile_kwargs = _contract_options(eq, compile_kwargs, arrays)
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
    if layout == "A":     # Fortran where every operand is, as NumPy's
        layout = "F" if arrays and all(np.isfortran(np.asarray(a)) for a in arrays) else "C"
    if layout in ("C", "F"):
        result = np.asarray(result, order=layout)
    return result if out is None else _into(out, result, eq, casting)


def contract_expression(eq, *shapes, dtype="float64", **compile_kwargs):
    """opt_einsum's ``contract_expression``: the compiled plan of ``eq`` over operands of
    ``shapes`` (each a shape, or an array whose shape and dtype are taken), in ``dtype``
    where a shape is given. Call it with the arrays (``expr(a, b)``); read its report and
    its predicted peak (``expr.report``, ``expr.predicted_peak_bytes``). Keywords as
    ``contract``'s ``optimize`` and ``memory_limit``, and ``go.compile``'s."""
    from ..compiler.driver import compile

    arrays = [s if _is_array(s) else np.broadcast_to(np.zeros((), dtype), tuple(s))
              for s in shapes]
    return compile(contract_graph(eq, arrays), **_contract_options(eq, compile_kwargs, arrays))


def _contract_options(eq: str, kwargs: dict, arrays) -> dict:
    """``contract``'s keywords as ``compile`` takes them: NumPy's and opt_einsum's meanings
    of ``optimize`` and ``memory_limit`` (see ``contract``). opt_einsum's
    ``memory_limit="max_input"`` bounds each intermediate by the largest operand: its path
    search runs with it, and the path it finds is run as given."""
    kwargs = dict(kwargs)
    optimize = kwargs.get("optimize", "auto")
    if optimize is True:
        optimize = kwargs["optimize"] = "auto"
    elif optimize is False or optimize is None:
        optimize = kwargs["optimize"] = [tuple(range(len(arrays)))]   # one step, as NumPy's
    limit = kwargs.get("memory_limit")
    if isinstance(limit, str) and limit == "max_input":
        del kwargs["memory_limit"]
        if not isinstance(optimize, (list, tuple)):
            import opt_einsum

            name = optimize if optimize in opt_einsum.paths._PATH_OPTIONS or isinstance(
                optimize, opt_einsum.paths.PathOptimizer) else "auto"
            try:
                path, _ = opt_einsum.contract_path(eq, *[a.shape for a in arrays],
                                                   shapes=True, optimize=name,
                                                   memory_limit="max_input")
            except ValueError as e:
                raise GraphError(f"einsum {eq!r}: {e}", op="einsum") from None
            kwargs["optimize"] = [tuple(p) for p in path]
    elif isinstance(limit, (int, np.integer)) and not isinstance(limit, bool) and limit == -1:
        kwargs["memory_limit"] = None
    return kwargs


def _cast(arrays, dtype, casting: str, eq: str) -> list:
    """``arrays`` in ``dtype`` as ``np.einsum(dtype=, casting=)`` casts them."""
    try:
        want = np.dtype(dtype)
    except TypeError as e:
        raise GraphError(f"einsum {eq!r}: dtype={dtype!r} is not a dtype: {e}",
                         op="einsum") from None
    for a in arrays:
        if not np.can_cast(a.dtype, want, casting):
            raise GraphError(f"einsum {eq!r}: cannot cast an operand from {a.dtype} to {want} "
                             f"under casting={casting!r} (np.einsum's rule; pass "
                             "casting='unsafe' to allow it)", op="einsum")
    return [a if a.dtype == want else a.astype(want) for a in arrays]


def contract_graph(eq: str, arrays, name: str = "contract") -> Graph:
    """The graph ``go.contract`` compiles for ``eq`` over NumPy ``arrays``: an input per
    array (``x0``, ``x1``, ...) and their einsum."""
    g = Graph(name)
    g.output(einsum(eq, *g._array_inputs(arrays, "x")))
    return g


def _into(out, result, eq: str, casting: str = "safe"):
    """``result`` written into ``out`` under np.einsum's rules for ``out``."""
    if not isinstance(out, np.ndarray) or out.shape != result.shape:
        raise GraphError(f"einsum {eq!r}: out= must be an ndarray of the result's shape "
                         f"{result.shape}, got {type(out).__name__} "
                         f"{getattr(out, 'shape', '')}", op="einsum")
    if not np.can_cast(result.dtype, out.dtype, casting):
        raise GraphError(f"einsum {eq!r}: the result is {result.dtype}, which out= of dtype "
                         f"{out.dtype} cannot take under casting={casting!r} (np.einsum's "
                         "rule)", op="einsum")
    np.copyto(out, result, casting=casting)
    return out
