"""``assert_grad_correct``: gradients against float64 central finite differences.

The gradient graph (``go.grad`` for a real scalar output, else ``go.vjp`` with a random
cotangent) is compiled per backend and opt level, held to the interpreter on itself
(``assert_plan_matches_interpreter``), and its result checked along random directions ``v``
of each input: ``Re(sum(grad * v))`` (JAX's pairing) against the central difference of
``phi(x) = Re(sum(ct * f(x)))``, where ``f`` is the oracle's float64/complex128 evaluation of
the forward graph (``oracle.py``: it shares none of graphopt's kernels). The difference is
Richardson-extrapolated from steps ``h`` and ``h/2``; their disagreement estimates its own
error, and a direction whose estimate is large against the scale (a kink or a singularity
within ``h``: also seen as second differences that shrink as ``h``, not ``h**2``) or whose
values are not finite is not judged. At least one direction must be.
"""

from __future__ import annotations

import warnings

import numpy as np

from .. import ir
from ..compiler.driver import compile
from ..frontend.autodiff import grad, vjp
from ..frontend.graph import Graph
from ..runtime.signature import restructure
from .oracle import oracle
from .plans import assert_plan_matches_interpreter, output_leaves
from .semantics import graph_text

# Relative tolerance of a gradient, against sum(|grad| |v|), by the narrowest float the
# gradient graph computes in: rounding accumulates through the forward and backward ops.
GRAD_RTOL = {"float64": 1e-6, "float32": 3e-3, "float16": 6e-2}
# A finite difference whose own error estimate exceeds this share of the scale is not judged.
FD_TRUST = 1e-3


def _random_like(rng, shape, dtype) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind == "c":
        return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dt)
    if dt.kind == "f":
        return rng.normal(size=shape).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(dt)
    return rng.integers(0 if dt.kind == "u" else -3, 4, size=shape).astype(dt)


def _narrowest_float(G) -> str:
    sizes = {np.dtype(d["dtype"]).itemsize // (2 if np.dtype(d["dtype"]).kind == "c" else 1)
             for _, d in G.nodes(data=True) if np.dtype(d["dtype"]).kind in "fc"}
    return {2: "float16", 4: "float32"}.get(min(sizes, default=8), "float64")


def has_gradient(graph: Graph) -> bool:
    """Does a gradient flow through ``graph``: a float or complex input and a float or
    complex output (what ``gradient_graph`` needs)?"""
    G = graph._G
    return all(any(np.dtype(G.nodes[i]["dtype"]).kind in "fc" for i in G.graph[k])
               for k in ("inputs", "outputs"))


def gradient_graph(graph: Graph, of=None, wrt=None) -> tuple[Graph, bool]:
    """``(gradient graph, is_vjp)``: ``go.grad`` where the output ``of`` selects is a real
    float scalar, else ``go.vjp`` (a ``ct`` input per float or complex output)."""
    G = graph._G
    tree = restructure(G.graph["output_structure"], list(G.graph["outputs"]))
    chosen = tree if of is None else tree[of]
    if isinstance(chosen, int):
        d = G.nodes[chosen]
        if tuple(d["shape"]) == () and np.dtype(d["dtype"]).kind == "f":
            return grad(graph, of=of, wrt=wrt), False
    return vjp(graph, wrt=wrt, of=of), True


def assert_grad_correct(graph: Graph, of=None, wrt=None, inputs: dict | None = None, *,
                        backends=("numpy",), opt_levels=(0, 2), seed: int = 0,
                        directions: int = 3, rtol: float | None = None,
                        compile_options: dict | None = None) -> dict:
    """Assert the gradients of ``graph`` (``of``/``wrt`` as ``go.grad``'s) are correct on
    every backend and opt level given, as the module docstring says; returns the gradients
    of the first plan (input name -> array).

    ``inputs`` (name -> array) default to standard normal values (ints in [-3, 3]);
    ``compile_options`` go to every ``go.compile`` (a dask ``client``, ``chunks``...).
    """
    rng = np.random.default_rng(seed)
    G = graph.to_ir()
    H, is_vjp = gradient_graph(graph, of, wrt)
    H2, _ = gradient_graph(graph, of, wrt)
    HG = H.to_ir()
    assert ir.structural_hash(HG) == ir.structural_hash(H2.to_ir()), \
        "building the gradient graph twice gave different graphs"
    forward_names = [G.nodes[i]["name"] for i in G.graph["inputs"]]
    if inputs is None:
        inputs = {G.nodes[i]["name"]: _random_like(rng, G.nodes[i]["shape"], G.nodes[i]["dtype"])
                  for i in G.graph["inputs"]}
    cts = {HG.nodes[i]["name"]: _random_like(rng, HG.nodes[i]["shape"], HG.nodes[i]["dtype"])
           for i in HG.graph["inputs"] if HG.nodes[i]["name"] not in inputs}
    call = {**inputs, **cts}
    first = None
    for backend in backends:
        for level in opt_levels:
            plan = compile(H, backend=backend, opt_level=level, cache=False,
                           **(compile_options or {}))
            assert_plan_matches_interpreter(HG, plan, call)
            _, grads = plan(**call)
            if first is None:
                first = {k: np.asarray(v) for k, v in grads.items()}
            _check_directions(G, HG, is_vjp, of, inputs, cts, grads, forward_names, rng,
                              directions, rtol, f"{backend} opt_level={level}")
    return first


def _loss64(G, of, inputs: dict, cts: dict, names, is_vjp: bool) -> float:
    """``Re(sum(ct * f(inputs)))`` by the float64 oracle (``f`` the output ``of`` picks)."""
    values = [b.value for b in oracle(G, [inputs[n] for n in names])]
    tree = restructure(G.graph["output_structure"], values)
    chosen = tree if of is None else tree[of]
    leaves = output_leaves(chosen) if not isinstance(chosen, np.ndarray) else [chosen]
    if not is_vjp:
        return float(np.real(leaves[0]))
    total = 0.0
    ct_leaves = iter(cts[k] for k in cts)
    for v in leaves:
        if np.asarray(v).dtype.kind in "fc":
            total += float(np.real(np.sum(next(ct_leaves) * v)))
    return total


def _finite_difference(G, of, inputs, cts, names, is_vjp, name, x, v, h):
    """``(derivative, its error estimate, kink)`` of ``phi`` along ``v`` at input ``name`` =
    ``x``: central differences at ``h`` and ``h/2``, Richardson-extrapolated. ``kink``: the
    second differences shrink as ``h`` (a jump in the slope), not as ``h**2``."""
    def at(t):
        return _loss64(G, of, dict(inputs, **{name: x + t * v}), cts, names, is_vjp)

    p1, m1, p2, m2, mid = at(h), at(-h), at(h / 2), at(-h / 2), at(0.0)
    d1, d2 = (p1 - m1) / (2 * h), (p2 - m2) / h
    curve1, curve2 = abs(p1 - 2 * mid + m1), abs(p2 - 2 * mid + m2)
    return (4 * d2 - d1) / 3, abs(d2 - d1), curve1 / h, curve2 > 0.35 * curve1


def _check_directions(G, HG, is_vjp, of, inputs, cts, grads, names, rng, directions,
                      rtol, label):
    rtol = rtol or GRAD_RTOL[_narrowest_float(HG)]
    judged = 0
    for name, g in grads.items():
        g = np.asarray(g)
        x = np.asarray(inputs[name])
        wide = np.complex128 if x.dtype.kind == "c" else np.float64
        for _ in range(directions):
            v = _random_like(rng, x.shape, wide)
            want = float(np.real(np.sum(g.astype(wide) * v)))
            scale = float(np.sum(np.abs(g) * np.abs(v)))
            h = 1e-3 * max(1.0, float(np.sqrt(np.mean(np.abs(x) ** 2))) if x.size else 1.0)

            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fd, fd_err, bend, kink = _finite_difference(G, of, inputs, cts, names, is_vjp,
                                                            name, x.astype(wide), v, h)
            trust = FD_TRUST * max(scale, 1e-300)
            if not all(np.isfinite([fd, want, scale])) or fd_err > trust or \
                    kink and bend > trust:
                continue
            judged += 1
            tol = rtol * scale + 10 * fd_err + 1e-12
            assert abs(want - fd) <= tol, (
                f"{label}: gradient of {name!r} along a random direction is {want!r}, finite "
                f"differences give {fd!r} (|diff| {abs(want - fd):.3g} > tol {tol:.3g}, scale "
                f"{scale:.3g})\n{graph_text(G)}")
    assert judged, f"{label}: no direction could be judged (non-finite values or kinks)"


