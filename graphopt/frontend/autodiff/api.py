"""``go.grad``, ``go.value_and_grad`` and ``go.vjp``: on a ``Graph`` they return a new Graph
(the forward ops and their VJPs, one graph for ``go.compile``); on a Python function they
return a function, as JAX's do, that traces and compiles on first call per signature and
composes with ``@go.jit`` (inside a trace it adds its ops to the graph being traced).
"""

from __future__ import annotations

import functools

import numpy as np

from ... import ir
from ...errors import DTypeError, GraphError, InputError
from ...runtime import signature
from .. import eager
from .. import tensor as T
from ..graph import Graph
from ..jit import jit
from ..tensor import Tensor, user_src
from .reverse import backpropagate, is_differentiable, seed_for


def _zeros_like(t: Tensor) -> Tensor:
    """The gradient of a value nothing differentiated depends on."""
    return T.broadcast_to(t.graph.const(np.zeros((), dtype=t.dtype)), t.shape)


def _cotangents(seeds: dict, wrt: list[Tensor]) -> list[Tensor]:
    """Gradients of ``wrt`` (zeros where none flows); the graph is marked as a gradient
    graph for the report (``accounting``)."""
    grads, mark = backpropagate(seeds, wrt)
    G = wrt[0].graph._G
    G.graph["gradient"] = {"backward_from": mark,
                           "wrt": [G.nodes[t.id].get("name") or f"%{t.id}" for t in wrt]}
    return [_zeros_like(w) if c is None else c for w, c in zip(wrt, grads)]


# ------------------------------------------------------------------------------ graph form

def _copy(g: Graph, suffix: str) -> Graph:
    h = Graph(f"{g.name}_{suffix}")
    h._G = ir.copy_graph(g._G)
    h._G.graph["name"] = h.name
    h._names = set(g._names)
    return h


def _outputs_tree(g: Graph, of, src: str):
    """The output node ids of ``g`` as ``g.output`` arranged them; ``of`` picks one entry
    (a dict key or a tuple index) or None takes them all."""
    G = g._G
    if not G.graph["outputs"]:
        raise GraphError(f"graph {g.name!r} has no outputs: call g.output first", op="grad",
                         src=src)
    tree = signature.restructure(G.graph["output_structure"], list(G.graph["outputs"]))
    if of is None:
        return tree
    try:
        return tree[of]
    except (KeyError, IndexError, TypeError):
        keys = list(tree) if isinstance(tree, dict) else (
            list(range(len(tree))) if isinstance(tree, (tuple, list)) else [])
        raise GraphError(f"of={of!r} is not an output of graph {g.name!r}; its outputs are "
                         f"{keys or 'one tensor (of=None)'}", op="grad", src=src) from None


def _wrt_inputs(h: Graph, wrt, src: str) -> list[Tensor]:
    inputs = {h._G.nodes[i]["name"]: Tensor(h, i) for i in h._G.graph["inputs"]}
    if wrt is None:
        names = [n for n, t in inputs.items() if is_differentiable(t)]
        if not names:
            raise DTypeError(f"graph {h.name!r} has no float or complex input to differentiate",
                             op="grad", src=src)
    else:
        names = [wrt] if isinstance(wrt, str) else list(wrt)
    out = []
    for name in names:
        if name not in inputs:
            raise InputError(f"wrt={name!r} is not an input; inputs: {list(inputs)}",
                             op="grad", src=src)
        t = inputs[name]
        if not is_differentiable(t):
            raise DTypeError(f"input {name!r} is {t.dtype.name}: only float and complex "
                             "inputs have gradients", op="grad", src=src)
        out.append(t)
    if len(set(names)) != len(names):
        raise InputError(f"wrt={names!r} names an input twice", op="grad", src=src)
    return out


def _grad_graph(g: Graph, of, wrt, src: str) -> Graph:
    tree = _outputs_tree(g, of, src)
    if not isinstance(tree, int):
        raise GraphError(f"grad differentiates one scalar output, but of={of!r} selects "
                         f"{type(tree).__name__}; name one with of=", op="grad", src=src)
    h = _copy(g, "grad")
    wrt_t = _wrt_inputs(h, wrt, src)
    loss = Tensor(h, tree)
    grads = _cotangents({loss.id: seed_for(loss)}, wrt_t)
    names = [h._G.nodes[t.id]["name"] for t in wrt_t]
    h.output((loss, dict(zip(names, grads))))
    return h


def _fresh_name(h: Graph, base: str) -> str:
    name = base
    while name in h._names:
        name += "_"
    return name


def vjp(g: Graph, wrt=None, of=None) -> Graph:
    """The vector-Jacobian product of graph ``g``: a new Graph with one more input per float
    or complex output (its cotangent, named ``ct`` for a lone output, else ``ct_`` and the
    output's keys and indices joined by ``_``, e.g. ``ct_1_w``) whose outputs are
    ``(outputs, {input name: gradient})``, the gradient being ``sum(ct * d outputs / d
    input)`` under JAX's complex convention.

    Args:
        wrt: input names (default: every float and complex input).
        of: an output key or index (default: all outputs).
    """
    src = user_src()
    if not isinstance(g, Graph):
        raise GraphError(f"go.vjp takes a Graph, got {type(g).__name__}", op="vjp", src=src)
    tree = _outputs_tree(g, of, src)
    h = _copy(g, "vjp")
    wrt_t = _wrt_inputs(h, wrt, src)
    seeds = {}
    for path, n in _leaf_paths(tree):
        t = Tensor(h, n)
        if not is_differentiable(t):
            continue
        base = "_".join(["ct", *map(str, path)])
        name = _fresh_name(h, base if base.isidentifier() else f"ct_{len(seeds)}")
        ct = h.input(name, t.shape, t.dtype.name)
        seeds[n] = ct if n not in seeds else seeds[n] + ct
    if not seeds:
        raise DTypeError("vjp: no output is float or complex", op="vjp", src=src)
    grads = _cotangents(seeds, wrt_t)
    names = [h._G.nodes[t.id]["name"] for t in wrt_t]
    h.output((_as_tensors(h, tree), dict(zip(names, grads))))
    return h


def _leaf_paths(tree, path=()):
    """``(path, node id)`` of every leaf of an output tree, depth first (the order
    ``g.output`` flattens it in); ``path`` holds the dict keys and tuple indices."""
    if isinstance(tree, int):
        yield path, tree
        return
    items = tree.items() if isinstance(tree, dict) else enumerate(tree)
    for k, sub in items:
        yield from _leaf_paths(sub, path + (k,))


def _as_tensors(h: Graph, tree):
    if isinstance(tree, int):
        return Tensor(h, tree)
    if isinstance(tree, dict):
        return {k: _as_tensors(h, v) for k, v in tree.items()}
    return type(tree)(_as_tensors(h, v) for v in tree)


# --------------------------------------------------------------------------- function form

def _argnums(argnums, n_args: int, src: str) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not nums or any(not isinstance(i, int) or not -n_args <= i < n_args for i in nums):
        raise GraphError(f"argnums={argnums!r} does not index the {n_args} positional "
                         "argument(s)", op="grad", src=src)
    return tuple(i % n_args for i in nums)


def _as_variable(x) -> Tensor:
    """A traced argument to differentiate: a Tensor, or (an array or a Python number) a
    constant of the graph being traced. Integer ones are refused by the caller, as
    ``jax.grad`` refuses them."""
    if isinstance(x, Tensor):
        return x
    return T.traced_graph().const(np.asarray(x))


def _function_value_and_grad(fun, argnums, compile_kwargs, with_value: bool):
    def traced(*args, **kwargs):
        src = user_src()
        nums = _argnums(argnums, len(args), src)
        args = list(args)
        for i in nums:
            args[i] = _as_variable(args[i])
            if not is_differentiable(args[i]):
                raise DTypeError(f"argument {i} is {args[i].dtype.name}: only float and "
                                 "complex arguments have gradients", op="grad", src=src)
        out = fun(*args, **kwargs)
        if not isinstance(out, Tensor):
            raise GraphError(f"grad needs the function to return one Tensor, got "
                             f"{type(out).__name__}", op="grad", src=src)
        grads = _cotangents({out.id: seed_for(out)}, [args[i] for i in nums])
        g = grads[0] if isinstance(argnums, int) else tuple(grads)
        return (out, g) if with_value else g

    compiled = jit(traced, **compile_kwargs)
    reference = jit(traced, backend="numpy", opt_level=0)

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
        if any(isinstance(a, Tensor) for a in args) or T.traced_graph() is not None and \
                not eager.jit_disabled():
            return traced(*args, **kwargs)
        src = user_src()
        nums = _argnums(argnums, len(args), src)
        # Python numbers are variables here (jit would take them as static)
        args = [np.asarray(a) if i in nums and not hasattr(a, "shape") else a
                for i, a in enumerate(args)]
        if eager.jit_disabled():   # debugging: the reference interpreter, op by op
            return reference.run_compiled(*args, **kwargs)
        return compiled(*args, **kwargs)

    wrapper.plan_for = compiled.plan_for
    return wrapper


def grad(fun, of=None, wrt=None, *, argnums=0, **compile_kwargs):
    """Reverse-mode gradient.

    ``go.grad(g, of="loss", wrt=["w1", "w2"])`` on a ``Graph``: a new Graph with the same
    inputs whose outputs are ``(loss, {"w1": dloss/dw1, "w2": dloss/dw2})``; ``of`` names a
    real scalar output (a dict key or tuple index; None for a graph with one output),
    ``wrt`` input names (default: every float and complex input).

    ``go.grad(f, argnums=0)`` on a function of arrays returning a real scalar: a function
    returning the gradient with respect to argument(s) ``argnums`` (a tuple of them for a
    tuple), as ``jax.grad``. It traces and compiles per signature (``compile_kwargs`` go to
    ``go.compile``) and, called on Tensors inside ``@go.jit``, adds its ops to the trace.

    Complex parameters follow ``jax.grad``: the result is ``dL/dx - i dL/dy``.
    """
    if isinstance(fun, Graph):
        if compile_kwargs or argnums != 0:
            raise GraphError("go.grad(graph, ...) takes of= and wrt=; argnums and compile "
                             "options are for functions", op="grad", src=user_src())
        return _grad_graph(fun, of, wrt, user_src())
    if of is not None or wrt is not None:
        raise GraphError("go.grad(function) takes argnums=, not of=/wrt= (those are for "
                         "Graphs)", op="grad", src=user_src())
    return _function_value_and_grad(fun, argnums, compile_kwargs, with_value=False)


def value_and_grad(fun, argnums=0, **compile_kwargs):
    """``go.value_and_grad(f, argnums)``: a function returning ``(f(*args), gradient)``, as
    ``jax.value_and_grad`` (see ``grad``)."""
    if isinstance(fun, Graph):
        raise GraphError("go.value_and_grad takes a function; for a Graph, go.grad already "
                         "returns (value, gradients)", op="grad", src=user_src())
    return _function_value_and_grad(fun, argnums, compile_kwargs, with_value=True)
