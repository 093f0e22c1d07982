"""Integer tensor networks (counting problems): graphopt against NumPy's and opt_einsum's.

    python -m benchmarks.integer_networks [--instances lattice6x6,randreg30]
                                          [--dtypes int64,int32] [--json F]
                                          [--mode both|pinned|default]

Networks from cotengra's generators (lattices, a random 3-regular network, a tree) with
values in {-1, 0, 1}, in each of ``--dtypes``: BLAS multiplies none of these, so every
library runs its own loops. For each, in one process:

- graphopt at default settings (``go.compile``, caches off): compile seconds, the median
  call, the measured peak (``plan.measure_peak_bytes``) against the predicted one;
- opt_einsum executing graphopt's own path (``opt_einsum.contract(..., optimize=path)``:
  its pairwise ``tensordot``/``einsum``), and ``np.einsum(..., optimize=path)`` where the
  network has at most 52 labels (NumPy's limit): medians;
- whether graphopt's result equals opt_einsum's exactly (integers wrap the same way in any
  order).

``--mode both`` (the default) runs once pinned to one core with one thread per library,
once at the libraries' defaults, each in a child process (as ``benchmarks.run``).
"""

from __future__ import annotations

import sys
import time

from .networks import _median_call, grid_main, symbol_equation

INSTANCES = {
    "lattice6x6": ("lattice_equation", [6, 6], 4),
    "lattice5x5": ("lattice_equation", [5, 5], 6),
    "randreg30": ("randreg_equation", 30, 4),
    "tree80": ("tree_equation", 80, 4),
}


def _equation(name):
    """``(equation, shapes)`` of instance ``name`` (opt_einsum symbols)."""
    import cotengra as ctg

    make, arg, bond = INSTANCES[name]
    extra = (3,) if make == "randreg_equation" else ()
    inputs, output, shapes, _ = getattr(ctg.utils, make)(arg, *extra, d_min=bond,
                                                         d_max=bond, seed=0)
    return symbol_equation(inputs, output), [tuple(s) for s in shapes]


def measure(name: str, dtype: str) -> dict:
    """Every figure of one instance in one dtype (see the module docstring)."""
    import numpy as np
    import opt_einsum

    import graphopt as go

    eq, shapes = _equation(name)
    rng = np.random.default_rng(0)
    arrays = [rng.integers(-1, 2, s).astype(dtype) for s in shapes]
    g = go.Graph(name)
    g.output(go.einsum(eq, *(g.input(f"t{k}", a.shape, dtype) for k, a in enumerate(arrays))))
    t0 = time.perf_counter()
    plan = go.compile(g, cache=False, path_cache=False)
    compile_s = time.perf_counter() - t0
    (group,) = plan.report["contraction"].details["groups"]
    path = [tuple(p) for p in group["path"]]
    got = plan(*arrays)
    ref = opt_einsum.contract(eq, *arrays, optimize=path)
    return {"instance": name, "dtype": dtype, "tensors": len(shapes),
            "flops": plan.report.flops_optimized, "compile_s": compile_s,
            "call_ms": _median_call(lambda: plan(*arrays)) * 1e3,
            "opt_einsum_ms": _median_call(
                lambda: opt_einsum.contract(eq, *arrays, optimize=path)) * 1e3,
            # np.einsum takes 52 labels at most
            "numpy_ms": _median_call(lambda: np.einsum(eq, *arrays, optimize=[
                "einsum_path", *path])) * 1e3 if len(set(eq) - set(",->")) <= 52 else None,
            "measured_peak": plan.measure_peak_bytes(*arrays),
            "predicted_peak": plan.predicted_peak_bytes,
            "exact": bool(np.array_equal(got, ref))}


def table(rows: list[dict]) -> str:
    out = ["| network | dtype | FLOPs | graphopt compile s | graphopt call ms "
           "| opt_einsum ms (same path) | np.einsum ms (same path) "
           "| best peer / graphopt | measured / predicted peak | exact |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        head = f"| {r['instance']} ({r['tensors']} tensors) | {r['dtype']}"
        if "skipped" in r:
            out.append(f"{head} | {r['skipped']} |" + " |" * 7)
            continue
        best = min(t for t in (r["opt_einsum_ms"], r["numpy_ms"]) if t is not None)
        numpy_ms = "– (over 52 labels)" if r["numpy_ms"] is None else f"{r['numpy_ms']:.2f}"
        out.append(f"{head} | {r['flops']:.3g} | {r['compile_s']:.3f} | {r['call_ms']:.2f} | "
                   f"{r['opt_einsum_ms']:.2f} | {numpy_ms} | "
                   f"{best / r['call_ms']:.2f} | "
                   f"{r['measured_peak'] / r['predicted_peak']:.3f} | {r['exact']} |")
    return "\n".join(out)


def main(argv=None) -> int:
    return grid_main("benchmarks.integer_networks", __doc__, argv, INSTANCES, "dtypes",
                     "int64,int32", str, measure,
                     lambda name, dtype: {"instance": name, "dtype": dtype, "tensors": 0},
                     table)


if __name__ == "__main__":
    sys.exit(main())
