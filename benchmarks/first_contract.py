"""The first contraction of networks a user brings, each new: ``go.contract`` end to end.

    python -m benchmarks.first_contract [--instances lattice,tree] [--networks 20]
                                        [--json F] [--mode both|pinned|default]

For each instance kind, ``--networks`` distinct networks from generators nobody on the team
wrote (cotengra's lattice, tree and random-regular equations at random bond sizes, the
einsum-benchmark package's MPS products, quimb's random 2D lattices and random-regular
networks), each contracted once, in one process, by:

- ``go.contract(eq, *arrays)`` at default settings: the graph built from the equation,
  compiled (path search included; path cache in an empty directory) and called, as a user
  calls it once per network: nothing is reused from an earlier network but what its
  structure shares (a network compiled again would be a cache hit, so none repeats);
- ``opt_einsum.contract(eq, *arrays)`` (its path search and its run);
- quimb's ``TensorNetwork.contract(all)`` on the same arrays and index names (the network
  built beforehand, as its user holds it);

with the medians per kind, the median of quimb's and opt_einsum's time over graphopt's
(network by network), and the largest relative difference of graphopt's result from
opt_einsum's. ``--mode both`` (the default) runs once pinned to one core with one thread per
library, once at the libraries' defaults, each in a child process (as ``benchmarks.run``).
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import tempfile
import time

from .networks import grid_main, symbol_equation


def _cotengra(make, *args):
    def build(seed):
        import cotengra as ctg

        extra = (3,) if make == "randreg_equation" else ()
        inputs, output, shapes, _ = getattr(ctg.utils, make)(*args, *extra, d_min=2, d_max=4,
                                                             seed=seed)
        return symbol_equation(inputs, output), [tuple(s) for s in shapes]
    return build


def _mps_product(seed):
    from einsum_benchmark.generators.quantum_computing.mps_product import matrix_product_state

    eq, shapes = matrix_product_state(n=50, phys_dim_min=2, phys_dim_max=4,
                                      bond_dim=8 + seed % 9, seed=seed)
    return eq, [tuple(s) for s in shapes]


def _quimb(which):
    def build(seed):
        import quimb.tensor as qtn

        if which == "2d":   # a size per seed: networks of one structure and sizes would
            lx, ly, d = 4 + seed % 4, 4 + (seed // 4) % 4, 2 + (seed // 16) % 2  # share a plan
            tn = qtn.TN2D_rand(lx, ly, D=d, seed=seed)
        else:               # a random graph per seed
            tn = qtn.TN_rand_reg(30 + 2 * (seed % 6), 3, D=2 + seed % 2, seed=seed)
        inputs, output, _ = tn.get_inputs_output_size_dict()
        return (symbol_equation([tuple(t) for t in inputs], tuple(output)),
                [tuple(t.shape) for t in tn])
    return build


INSTANCES = {
    "lattice": ("cotengra lattice_equation 6x6, bonds 2-4", _cotengra("lattice_equation",
                                                                        [6, 6])),
    "tree": ("cotengra tree_equation 60 tensors, bonds 2-4", _cotengra("tree_equation", 60)),
    "randreg": ("cotengra randreg_equation 40 tensors, degree 3, bonds 2-4",
                _cotengra("randreg_equation", 40)),
    "mps_product": ("einsum-benchmark matrix_product_state n=50, bond 8-16", _mps_product),
    "tn2d": ("quimb TN2D_rand 4-7 x 4-7, bond 2-3", _quimb("2d")),
    "tn_rand_reg": ("quimb TN_rand_reg 30-40 tensors, degree 3, bond 2-3", _quimb("reg")),
}


def _arrays(shapes, seed):
    import numpy as np

    rng = np.random.default_rng(seed)
    # entries scaled down per tensor, so that products of dozens of tensors stay in range
    return [rng.normal(size=s) / max(1, int(np.prod(s))) ** 0.25 for s in shapes]


def _once(fn, *args, **kwargs) -> tuple[float, object]:
    gc.collect()    # (the searches before leave garbage whose collection lands anywhere)
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t0, out


def measure(name: str, networks: int) -> dict:
    """Every figure of one instance kind (see the module docstring)."""
    import numpy as np
    import opt_einsum

    import graphopt as go

    _, build = INSTANCES[name]
    quimb = None
    try:
        import quimb.tensor as quimb
    except ImportError:
        pass
    keep = os.environ.get("GRAPHOPT_CACHE_DIR")
    times: dict = {"graphopt": [], "opt_einsum": [], "quimb": []}
    tensors, worst = [], 0.0
    with tempfile.TemporaryDirectory() as cache:     # an empty path and kernel cache
        os.environ["GRAPHOPT_CACHE_DIR"] = cache
        try:
            for seed in range(networks):
                eq, shapes = build(1000 + seed)
                arrays = _arrays(shapes, seed)
                tensors.append(len(shapes))
                t, got = _once(go.contract, eq, *arrays)
                times["graphopt"].append(t)
                t, ref = _once(opt_einsum.contract, eq, *arrays)
                times["opt_einsum"].append(t)
                scale = max(float(np.max(np.abs(ref))), 1e-300)
                worst = max(worst, float(np.max(np.abs(np.asarray(got) - ref))) / scale)
                if quimb is not None:
                    terms, out = eq.split("->")
                    tn = quimb.TensorNetwork([quimb.Tensor(a, inds=tuple(t))
                                              for t, a in zip(terms.split(","), arrays)])
                    t, _ = _once(tn.contract, all, output_inds=tuple(out))
                    times["quimb"].append(t)
        finally:
            if keep is None:
                del os.environ["GRAPHOPT_CACHE_DIR"]
            else:
                os.environ["GRAPHOPT_CACHE_DIR"] = keep
    row = {"instance": name, "description": INSTANCES[name][0], "networks": networks,
           "tensors": [min(tensors), max(tensors)], "max_rel_diff": worst}
    for peer, ts in times.items():
        if ts:
            row[f"{peer}_ms"] = statistics.median(ts) * 1e3
            if peer != "graphopt":   # network by network: each peer's time over graphopt's
                row[f"{peer}_over_graphopt"] = statistics.median(
                    p / g for p, g in zip(ts, times["graphopt"]))
    return row


def _cell(row: dict, key: str) -> str:
    return format(row[key], ".2f") if key in row else "–"


def table(rows: list[dict]) -> str:
    out = ["| networks | tensors | graphopt ms | opt_einsum ms | quimb ms | opt_einsum / "
           "graphopt | quimb / graphopt | max rel diff |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        head = f"| {r['instance']} ({r.get('description', '')}) x {r['networks']}"
        if "skipped" in r:
            out.append(f"{head} | skipped: {r['skipped']} |" + " |" * 6)
            continue
        cells = " | ".join(_cell(r, k) for k in ("graphopt_ms", "opt_einsum_ms", "quimb_ms",
                                                  "opt_einsum_over_graphopt",
                                                  "quimb_over_graphopt"))
        out.append(f"{head} | {r['tensors'][0]}-{r['tensors'][1]} | {cells} | "
                   f"{r['max_rel_diff']:.1e} |")
    return "\n".join(out)


def main(argv=None) -> int:
    return grid_main("benchmarks.first_contract", __doc__, argv, INSTANCES, "networks", "20",
                     int, measure,
                     lambda name, n: {"instance": name, "description": INSTANCES[name][0],
                                      "networks": n},
                     table)


if __name__ == "__main__":
    sys.exit(main())
