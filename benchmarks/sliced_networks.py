"""Tensor networks under a memory limit: graphopt's sliced plans against cotengra's.

    python -m benchmarks.sliced_networks [--instances lattice6x6,randreg50]
                                         [--fractions 4,16] [--json F]
                                         [--mode both|pinned|default]

Networks from cotengra's generators (lattices of bond 6-8, a random 3-regular network of
bond 4), each under ``memory_limit`` = its unsliced predicted peak / each of
``--fractions``. For each, in one process:

- graphopt at default settings (``go.compile(..., memory_limit=)``, path cache off): its
  slices and FLOPs, the FLOPs slicing the unsliced path would have cost (the path search's
  record), compile seconds, the median call, the measured peak (``plan.measure_peak_bytes``)
  against the limit, and the largest relative difference from opt_einsum unsliced;
- cotengra's hyper-optimizer with its trials sliced and reconfigured
  (``slicing_reconf_opts``) to graphopt's largest intermediate per slice, given graphopt's
  compile seconds (at least 1 s), ``minimize="combo-32"``: its slices and FLOPs, and the
  median of its own sliced contraction (``ContractionTree.contract``). cotengra bounds
  intermediates only, not what a call allocates: its peak is not comparable and not shown.

``--mode both`` (the default) runs once pinned to one core with one thread per library,
once at the libraries' defaults, each in a child process (as ``benchmarks.run``).
"""

from __future__ import annotations

import sys
import time
import warnings

from .networks import _median_call, _random_arrays, _terms, grid_main, symbol_equation


def _lattice(rows, cols, bond):
    import cotengra as ctg
    return ctg.utils.lattice_equation([rows, cols], d_min=bond, d_max=bond, seed=0)


def _randreg(n, bond):
    import cotengra as ctg
    return ctg.utils.randreg_equation(n, 3, d_min=bond, d_max=bond, seed=1)


INSTANCES = {
    "lattice5x6": (_lattice, 5, 6, 8),
    "lattice6x6": (_lattice, 6, 6, 8),
    "lattice5x8": (_lattice, 5, 8, 6),
    "randreg50": (_randreg, 50, 4),
}


def _equation(name):
    """``(equation, shapes)`` of instance ``name`` (opt_einsum symbols)."""
    make, *args = INSTANCES[name]
    inputs, output, shapes, _ = make(*args)
    return symbol_equation(inputs, output), [tuple(s) for s in shapes]


def measure(name: str, fraction: int) -> dict:
    """Every figure of one instance under one limit (see the module docstring)."""
    import cotengra as ctg
    import numpy as np
    import opt_einsum

    import graphopt as go
    from graphopt.contraction.search.searchers import COTENGRA_MINIMIZE

    eq, shapes = _equation(name)
    arrays = _random_arrays(shapes, 0)
    g = go.Graph(name)
    g.output(go.einsum(eq, *(g.input(f"t{k}", a.shape) for k, a in enumerate(arrays))))
    unsliced = go.compile(g, cache=False, path_cache=False)
    limit = unsliced.predicted_peak_bytes // fraction
    row = {"instance": name, "tensors": len(shapes), "fraction": f"1/{fraction}",
           "limit": limit, "unsliced_flops": unsliced.report.flops_optimized}
    t0 = time.perf_counter()
    try:
        plan = go.compile(g, cache=False, path_cache=False, memory_limit=limit)
    except go.GraphError as e:
        return dict(row, refused=f"refused: {e.detail[:160]}")
    row["compile_s"] = time.perf_counter() - t0
    (rec,) = plan.report["slicing"].details["sliced"] or [None]
    ref = opt_einsum.contract(eq, *arrays, optimize="greedy")
    scale = float(np.max(np.abs(ref))) or 1.0
    row.update(slices=rec["n_slices"] if rec else 1, flops=rec["flops"] if rec else None,
               flops_unsliced_path=(rec or {}).get("path_search", {}).get("flops_before"),
               searcher=(rec or {}).get("path_search", {}).get("searcher"),
               call_ms=_median_call(lambda: plan(*arrays)) * 1e3,
               measured_peak=plan.measure_peak_bytes(*arrays),
               max_rel_diff=float(np.max(np.abs(plan(*arrays) - ref))) / scale)
    if rec is None:
        return row
    terms, out = _terms(eq)
    sizes = {c: d for t, s in zip(terms, shapes) for c, d in zip(t, s)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt = ctg.HyperOptimizer(
            max_time=max(1.0, row["compile_s"]), max_repeats=10**6, minimize=COTENGRA_MINIMIZE,
            progbar=False, parallel=False,
            slicing_reconf_opts={"target_size": max(1, rec["largest_intermediate_bytes"] // 8)})
        tree = opt.search([tuple(t) for t in terms], tuple(out), sizes)
        ctg_res = tree.contract(arrays)
        row.update(cotengra_slices=tree.nslices, cotengra_flops=2 * int(tree.total_flops()),
                   cotengra_ms=_median_call(lambda: tree.contract(arrays)) * 1e3,
                   cotengra_max_rel_diff=float(np.max(np.abs(ctg_res - ref))) / scale)
    return row


def _g(x, fmt=".3g"):
    return "–" if x is None else format(x, fmt)


def table(rows: list[dict]) -> str:
    out = ["| network | limit | graphopt slices | FLOPs (unsliced path's slicing) | compile s "
           "| call ms | measured peak / limit | cotengra slices | cotengra FLOPs | cotengra ms "
           "| cotengra ms / graphopt ms |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        head = f"| {r['instance']} ({r['tensors']} tensors) | {r['fraction']} of the peak"
        if "refused" in r or "skipped" in r:
            out.append(f"{head} | {r.get('refused') or r['skipped']} |" + " |" * 8)
            continue
        ratio = r["cotengra_ms"] / r["call_ms"] if "cotengra_ms" in r else None
        out.append(
            f"{head} | {r['slices']} | {_g(r['flops'])} ({_g(r['flops_unsliced_path'])}) | "
            f"{r['compile_s']:.2f} | {r['call_ms']:.1f} | "
            f"{r['measured_peak'] / r['limit']:.3f} | {r.get('cotengra_slices', '–')} | "
            f"{_g(r.get('cotengra_flops'))} | {_g(r.get('cotengra_ms'), '.1f')} | "
            f"{_g(ratio, '.2f')} |")
    return "\n".join(out)


def main(argv=None) -> int:
    return grid_main("benchmarks.sliced_networks", __doc__, argv, INSTANCES, "fractions",
                     "4,16", int, measure,
                     lambda name, fraction: {"instance": name, "tensors": 0,
                                             "fraction": f"1/{fraction}"},
                     table)


if __name__ == "__main__":
    sys.exit(main())
