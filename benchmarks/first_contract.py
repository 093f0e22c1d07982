"""The first contraction of networks a user brings, each new: ``go.contract`` end to end.

    python -m benchmarks.first_contract [--instances lattice,tree] [--networks 20]
                                        [--json F] [--mode both|pinned|default]

For each instance kind, ``--networks`` distinct networks from generators nobody on the team
wrote (cotengra's lattice, tree and random-regular equations at random bond sizes, the
einsum-benchmark package's MPS products, quimb's random 2D lattices and random-regular
networks), each contracted once, in one process (each library first in turn), by:

- ``go.contract(eq, *arrays)`` at default settings: the graph built from the equation,
  compiled (path search included; path cache in an empty directory) and called, as a user
  calls it once per network: nothing is reused from an earlier network but what its
  structure shares (a network compiled again would be a cache hit, so none repeats);
- ``opt_einsum.contract(eq, *arrays)`` (its path search and its run);
- quimb's ``TensorNetwork`` of the same arrays and index names, built, then its
  ``contract(all)``: from the arrays, as the other two start (its contraction alone also
  given, as a quimb user holding the network would see it);

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


def _contract_once(library: str, eq: str, arrays, quimb=None) -> tuple:
    """``(seconds, result, seconds of quimb's contraction alone or None)`` of ``library``
    contracting ``eq`` over ``arrays`` once (quimb: its ``TensorNetwork`` built, then
    contracted; ``quimb``: its ``quimb.tensor`` module)."""
    import opt_einsum

    import graphopt as go

    if library == "graphopt":
        return (*_once(go.contract, eq, *arrays), None)
    if library == "opt_einsum":
        return (*_once(opt_einsum.contract, eq, *arrays), None)
    terms, out = eq.split("->")
    built, tn = _once(lambda: quimb.TensorNetwork(
        [quimb.Tensor(a, inds=tuple(t)) for t, a in zip(terms.split(","), arrays)]))
    seconds, result = _once(tn.contract, all, output_inds=tuple(out))
    return built + seconds, result, seconds


def measure(name: str, networks: int) -> dict:
    """Every figure of one instance kind (see the module docstring)."""
    import numpy as np

    _, build = INSTANCES[name]
    quimb = None
    try:
        import quimb.tensor as quimb
    except ImportError:
        pass
    keep = os.environ.get("GRAPHOPT_CACHE_DIR")
    times: dict = {"graphopt": [], "opt_einsum": [], "quimb": [], "quimb_contract": []}
    tensors, worst = [], 0.0
    with tempfile.TemporaryDirectory() as cache:     # an empty path and kernel cache
        os.environ["GRAPHOPT_CACHE_DIR"] = cache
        try:
            for seed in range(networks):
                eq, shapes = build(1000 + seed)
                arrays = _arrays(shapes, seed)
                tensors.append(len(shapes))
                libraries = ["graphopt", "opt_einsum"] + ["quimb"] * (quimb is not None)
                # each library first in turn: what one frees, the next one's first
                # allocations reuse without page faults
                got = {}
                for k in range(len(libraries)):
                    lib = libraries[(seed + k) % len(libraries)]
                    got[lib] = _contract_once(lib, eq, arrays, quimb)
                for lib, (seconds, _, contract_only) in got.items():
                    times[lib].append(seconds)
                    if contract_only is not None:
                        times["quimb_contract"].append(contract_only)
                ref = got["opt_einsum"][1]
                scale = max(float(np.max(np.abs(ref))), 1e-300)
                worst = max(worst, float(np.max(np.abs(np.asarray(got["graphopt"][1]) - ref)))
                            / scale)
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
            if peer in ("opt_einsum", "quimb"):   # network by network, over graphopt's
                row[f"{peer}_over_graphopt"] = statistics.median(
                    p / g for p, g in zip(ts, times["graphopt"]))
    return row


def _cell(row: dict, key: str) -> str:
    return format(row[key], ".2f") if key in row else "–"


def table(rows: list[dict]) -> str:
    out = ["| networks | tensors | graphopt ms | opt_einsum ms | quimb ms (its contraction "
           "alone) | opt_einsum / graphopt | quimb / graphopt | max rel diff |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        head = f"| {r['instance']} ({r.get('description', '')}) x {r['networks']}"
        if "skipped" in r:
            out.append(f"{head} | skipped: {r['skipped']} |" + " |" * 6)
            continue
        quimb = f"{_cell(r, 'quimb_ms')} ({_cell(r, 'quimb_contract_ms')})"
        cells = " | ".join([_cell(r, "graphopt_ms"), _cell(r, "opt_einsum_ms"), quimb,
                            _cell(r, "opt_einsum_over_graphopt"),
                            _cell(r, "quimb_over_graphopt")])
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
