"""Whether two IRs compute the same thing: both run by the interpreter on the same bounded
random inputs, outputs compared within the tolerance of the dtypes computed anywhere in
them. The pass manager's semantics check (``GRAPHOPT_DEBUG=1``, ``CheckSemantics``) and the
testing kit use it; it lives below the passes so neither imports the other.
"""

from __future__ import annotations

import numpy as np

from ..errors import GraphError
from .interpreter import run_graph


def random_values(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Bounded random values: floats in [-2, 2], complex within 2, ints in [-3, 3]."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        return rng.integers(-3, 4, size=shape).astype(dt)
    if dt.kind == "c":
        z = rng.uniform(-1.4, 1.4, size=shape) + 1j * rng.uniform(-1.4, 1.4, size=shape)
        return np.asarray(z).astype(dt)
    return np.asarray(rng.uniform(-2, 2, size=shape)).astype(dt)


_TOL = {"float16": 1e-2, "float32": 1e-4, "complex64": 1e-4, "float64": 1e-9,
        "complex128": 1e-9}


def tolerance(dtype) -> tuple[float, float]:
    """``(rtol, atol)`` for comparing values of ``dtype`` computed in different orders.

    ``atol`` is relative to the output's magnitude (``max(1, max|expected|)``), so
    cancellation in a reassociated sum does not count as a difference. Ints and bools
    must match exactly.
    """
    t = _TOL.get(np.dtype(dtype).name, 0.0)
    return t, t


def graph_tolerance(*graphs) -> tuple[float, float]:
    """The loosest tolerance over every dtype computed anywhere in the graphs: a float64
    output of float32 work carries float32 rounding."""
    rt = 0.0
    for G in graphs:
        for _, d in G.nodes(data=True):
            rt = max(rt, tolerance(d["dtype"])[0])
            if d["op"] == "fused":
                rt = max(rt, graph_tolerance(d["attrs"]["graph"])[0])
    return rt, rt


def compare_outputs(expected, actual, rtol: float, atol: float) -> str | None:
    """None if ``actual`` matches ``expected`` (same shape and dtype, values within
    tolerance, NaN where NaN), else what differs."""
    e, a = np.asarray(expected), np.asarray(actual)
    if e.shape != a.shape or e.dtype != a.dtype:
        return f"expected {e.shape} {e.dtype.name}, got {a.shape} {a.dtype.name}"
    if e.dtype.kind in "biu" or (rtol == 0 and atol == 0):
        bad = e != a
        if np.any(bad):
            return f"{int(np.sum(bad))} of {e.size} element(s) differ (exact dtype)"
        return None
    scale = max(1.0, float(np.max(np.abs(e[np.isfinite(e)]), initial=0.0)))
    if np.allclose(a, e, rtol=rtol, atol=atol * scale, equal_nan=True):
        return None
    with np.errstate(all="ignore"):
        err = np.abs(a.astype(complex) - e.astype(complex))
    err = np.where(np.isnan(err), np.inf, err)
    return (f"max abs error {float(np.max(err)):.3g} (rtol {rtol:g}, atol {atol * scale:.3g}); "
            f"{int(np.sum(~np.isclose(a, e, rtol=rtol, atol=atol * scale, equal_nan=True)))} "
            f"of {e.size} element(s) differ")


def random_inputs(G, rng: np.random.Generator) -> list[np.ndarray]:
    """Bounded random values for ``G``'s inputs, in input order."""
    return [random_values(rng, G.nodes[i]["shape"], G.nodes[i]["dtype"])
            for i in G.graph["inputs"]]


def io_signature(G) -> tuple:
    """Input names, shapes and dtypes, output shapes and dtypes, and output structure: what
    a pass must keep."""
    ins = tuple((G.nodes[i].get("name"), tuple(G.nodes[i]["shape"]), G.nodes[i]["dtype"])
                for i in G.graph["inputs"])
    outs = tuple((tuple(G.nodes[o]["shape"]), G.nodes[o]["dtype"]) for o in G.graph["outputs"])
    return ins, outs, repr(G.graph.get("output_structure"))


def check_same_semantics(G_before, G_after, pass_name: str, n_trials: int = 3,
                         seed: int = 0) -> None:
    """Run both IRs on the same random inputs; raise ``GraphError`` naming the pass and the
    first output that differs.

    The signatures (input names/shapes/dtypes, output shapes/dtypes and structure) must
    be equal. A trial on which the *original* graph itself fails is skipped.
    """
    sb, sa = io_signature(G_before), io_signature(G_after)
    for what, x, y in zip(("inputs", "outputs", "output structure"), sb, sa):
        if x != y:
            raise GraphError(f"pass {pass_name!r} changed the graph's {what}: {x} -> {y}")
    rtol, atol = graph_tolerance(G_before, G_after)
    rng = np.random.default_rng(seed)
    for trial in range(n_trials):
        inputs = random_inputs(G_before, rng)
        try:
            expected = run_graph(G_before, inputs)
        except Exception:  # value-dependent failure of the original graph
            continue
        try:
            actual = run_graph(G_after, inputs)
        except Exception as e:
            raise GraphError(f"pass {pass_name!r} produced a graph the interpreter cannot "
                             f"run: {type(e).__name__}: {e}") from e
        for k, (e, a) in enumerate(zip(expected, actual)):
            diff = compare_outputs(e, a, rtol, atol)
            if diff:
                o = G_after.graph["outputs"][k]
                d = G_after.nodes[o]
                raise GraphError(f"pass {pass_name!r} changed output {k} (trial {trial}, "
                                 f"seed {seed}): {diff}", op=d["op"], src=d.get("src"), node=o)
