"""Tensor networks from generators nobody on the team wrote: path cost, search and run time.

    python -m benchmarks.networks [--budget 2] [--instances lattice,mps_norm]
                                  [--processes 3] [--peer-limit 60]
                                  [--json F] [--mode both|pinned|default]

Instances come from cotengra's generators (lattice, random-regular, tree, hyper), the
einsum-benchmark package (an MPS product) and quimb (an MPS norm, an MPS-MPO-MPS energy, a
PEPS norm, a random circuit amplitude), each skipped with a note where its package is
missing. For each, in one process:

- path cost (FLOPs as opt_einsum counts them, and the combo cost both searches minimize) of
  opt_einsum's greedy order, of cotengra's hyper-optimizer given ``--budget`` seconds (at
  its defaults but for the objective: graphopt's combo cost, ``minimize="combo-32"``, as
  cotengra counts FLOPs), and of graphopt's anytime search given the same budget
  (``path_search.find_path``) and at its default budget;
- graphopt end to end at default settings: the graph built from the equation (as
  ``go.contract`` builds it), ``go.compile`` with its plan, path and kernel caches empty,
  then one call (path search and numba compilation included); again as a second process
  would (path and kernels from the disk cache); its graph-building, compile and
  path-search seconds, and the median call; opt_einsum
  executing cotengra's path (median call, in a child process given ``--peer-limit``
  seconds: past them the table says so); quimb's own ``contract(all)`` (end to end: its
  first call in the process, path search included; median call), on quimb's networks and
  on the others as a quimb ``TensorNetwork`` of the same arrays and index names, and what
  building that ``TensorNetwork`` takes;
- the same end-to-end times as medians over ``--processes`` triples of fresh processes
  (``first_in_process``: each contracts a small unrelated network with its library first,
  then this one once; graphopt's reads the network's arrays from a file, so that neither
  quimb nor cotengra is imported in it unless graphopt imports it; graphopt's second on
  the path and kernel cache its first left), the figures the table shows where they were
  taken. The table
  gives them two ways (``_end_to_end``): search and run (graphopt's compile and call of
  its graph against quimb's contraction of its network, each library's object already
  built, as the issue's "search + run" reads) and from the arrays (each library's object
  built first: graphopt's graph, quimb's ``TensorNetwork``);
- the largest relative difference of graphopt's result from opt_einsum's, float64/complex128.

``--mode both`` (the default) runs the instances once pinned to one core with one thread per
library, once at the libraries' defaults, each in a child process (as ``benchmarks.run``).
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import math
import os
import statistics
import sys
import tempfile
import time
import warnings

from .run import main_per_mode

# --------------------------------------------------------------------------- the instances


def _from_cotengra(which):
    import cotengra as ctg

    make = {
        "lattice": lambda: ctg.utils.lattice_equation([10, 10], d_min=2, d_max=4, seed=0),
        "randreg": lambda: ctg.utils.randreg_equation(80, 3, d_min=2, d_max=2, seed=1),
        "tree": lambda: ctg.utils.tree_equation(150, d_min=2, d_max=4, seed=2),
        "hyper": lambda: ctg.utils.rand_equation(60, 3, n_out=2, n_hyper_in=4, n_hyper_out=1,
                                                 d_min=2, d_max=3, seed=3),
    }[which]
    inputs, output, shapes, _ = make()
    eq = ",".join("".join(t) for t in inputs) + "->" + "".join(output)
    return eq, _random_arrays(shapes, seed=len(inputs)), None


def _random_arrays(shapes, seed, dtype="float64"):
    import numpy as np

    rng = np.random.default_rng(seed)
    # entries of unit mean square scaled down per tensor, so that products of hundreds of
    # tensors stay in range
    return [rng.normal(size=s).astype(dtype) / math.sqrt(max(1, math.prod(s)) ** 0.5)
            for s in shapes]


def _mps_product():
    from einsum_benchmark.generators.quantum_computing.mps_product import matrix_product_state

    eq, shapes = matrix_product_state(n=100, phys_dim_min=2, phys_dim_max=4, bond_dim=16,
                                      seed=0)
    return eq, _random_arrays(shapes, seed=4), None


def _quimb_tn(which):
    import numpy as np
    import quimb.tensor as qtn

    if which == "mps_norm":
        psi = qtn.MPS_rand_state(60, 32, dtype="complex128", seed=0)
        tn = psi.H & psi
    elif which == "mps_mpo_mps":
        psi = qtn.MPS_rand_state(40, 32, seed=1)
        bra, mpo, ket = qtn.tensor_network_align(psi.H, qtn.MPO_ham_heis(40), psi)
        tn = bra & mpo & ket
    elif which == "peps_norm":
        tn = qtn.PEPS.rand(5, 5, bond_dim=3, seed=2).make_norm()
    else:   # a random 1D circuit's amplitude: U3 layers and CZ bricks (hyper indices)
        n, depth = 20, 10
        circ = qtn.Circuit(n)
        rng = np.random.default_rng(3)
        for d in range(depth):
            for q in range(n):
                circ.apply_gate("U3", *rng.uniform(0, 2 * np.pi, 3), q)
            for q in range(d % 2, n - 1, 2):
                circ.apply_gate("CZ", q, q + 1)
        tn = circ.amplitude_tn("0" * n)
    eq = tn.get_equation(output_inds=())
    return eq, [np.asarray(t.data) for t in tn], tn


def _quimb_network(terms, output, arrays):
    """The network as a quimb ``TensorNetwork`` (one tensor per term, its labels as index
    names), or None without quimb: quimb contracts it as it would its own."""
    try:
        import quimb.tensor as qtn
    except ImportError:
        return None
    return qtn.TensorNetwork([qtn.Tensor(a, inds=tuple(t)) for t, a in zip(terms, arrays)])


def _instance(description, make, *args):
    return description, lambda: make(*args)


INSTANCES = {
    "lattice": _instance("cotengra lattice_equation 10x10, bonds 2-4", _from_cotengra, "lattice"),
    "randreg": _instance("cotengra randreg_equation 80 tensors, degree 3", _from_cotengra,
                         "randreg"),
    "tree": _instance("cotengra tree_equation 150 tensors", _from_cotengra, "tree"),
    "hyper": _instance("cotengra rand_equation 60 tensors, hyper indices", _from_cotengra,
                       "hyper"),
    "mps_product": _instance("einsum-benchmark matrix_product_state n=100", _mps_product),
    "mps_norm": _instance("quimb MPS norm, 60 sites, bond 32, complex", _quimb_tn, "mps_norm"),
    "mps_mpo_mps": _instance("quimb MPS-MPO-MPS Heisenberg energy, 40 sites, bond 32",
                             _quimb_tn, "mps_mpo_mps"),
    "peps_norm": _instance("quimb PEPS norm 5x5, bond 3", _quimb_tn, "peps_norm"),
    "circuit": _instance("quimb random circuit amplitude, 20 qubits, depth 10", _quimb_tn,
                         "circuit"),
}

# ------------------------------------------------------------------------------- measuring


def _median_call(fn, min_time=0.5, min_repeat=3, max_repeat=200) -> float:
    fn()
    times, start = [], time.perf_counter()
    while len(times) < min_repeat or (time.perf_counter() - start < min_time
                                      and len(times) < max_repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _terms(eq):
    ins, out = eq.split("->")
    return ins.split(","), out


def symbol_equation(inputs, output) -> str:
    """A generator's ``inputs`` and ``output`` (sequences of index names) as an equation in
    opt_einsum's symbols, named in order of first use."""
    import opt_einsum as oe

    symbols: dict = {}

    def sym(ix):
        return symbols.setdefault(ix, oe.get_symbol(len(symbols)))

    return ",".join("".join(map(sym, t)) for t in inputs) + "->" + "".join(map(sym, output))


def _cotengra_path(eq, sizes, budget):
    import cotengra as ctg

    from graphopt.contraction.search.searchers import COTENGRA_MINIMIZE

    terms, out = _terms(eq)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt = ctg.HyperOptimizer(max_time=budget, max_repeats=10**6,
                                 minimize=COTENGRA_MINIMIZE, progbar=False, parallel=False)
        t0 = time.perf_counter()
        opt.search([tuple(t) for t in terms], tuple(out), sizes)
        return [tuple(p) for p in opt.path], time.perf_counter() - t0


def _graphopt_end_to_end(name: str, eq: str, arrays) -> tuple:
    """``(plan, result, build s, compile s, end-to-end s)``: the graph ``go.contract``
    builds from the equation and arrays (``jit.contract_graph``), compiled at default
    settings (cache=True) and called once."""
    import graphopt as go
    from graphopt.frontend.jit import contract_graph

    t0 = time.perf_counter()
    g = contract_graph(eq, arrays, name)
    built = time.perf_counter()
    plan = go.compile(g)
    compiled = time.perf_counter()
    return plan, plan(*arrays), built - t0, compiled - built, time.perf_counter() - t0


def first_in_process(name: str, cache: str, library: str = "graphopt",
                     network: str | None = None) -> dict:
    """In this process, which has contracted nothing yet: a small unrelated network
    contracted once by ``library`` (what earlier work with it in a process would have set
    up: imports, BLAS, code caches), then ``name`` end to end by ``library`` alone, after a
    garbage collection: one library a process, since the memory one frees serves the
    other's first allocations without page faults (quimb's first contraction of the lattice
    took 2.5 ms less after 5 MB was allocated and freed), and what one imports (quimb and
    the generators import cotengra, 20-30 ms) is not imported for the other: graphopt's
    process reads the network from ``network`` (an ``.npz`` of ``_save_network``), made
    by the parent (None: made here). Seconds: graphopt's ``{"graphopt": the graph built,
    compiled and called (``_graphopt_end_to_end``, path and kernel cache ``cache``),
    "graphopt_search_run": compiled and called (its search and run, as quimb's contraction
    of a network it holds)}``, or quimb's ``{"quimb": its first ``contract(all)``,
    "quimb_build": its ``TensorNetwork`` built from the same arrays and index names}``
    (None without quimb)."""
    import numpy as np

    rng = np.random.default_rng(0)
    # (large enough that graphopt's steps are GEMMs, as quimb's tensordot's are: BLAS set up)
    warm = [rng.normal(size=s) for s in ((8, 9), (9, 10), (10, 8))]
    if library == "graphopt":
        import graphopt as go

        os.environ["GRAPHOPT_CACHE_DIR"] = cache
        go.contract("ab,bc,ca->", *warm)
        eq, arrays = _load_network(network) if network else INSTANCES[name][1]()[:2]
        gc.collect()
        _, _, build, _, seconds = _graphopt_end_to_end(name, eq, arrays)
        return {"graphopt": seconds, "graphopt_search_run": seconds - build}
    small = _quimb_network(["ab", "bc", "ca"], "", warm)
    if small is not None:
        small.contract(all, output_inds=())
    eq, arrays, tn = INSTANCES[name][1]()
    terms, out = _terms(eq)
    gc.collect()
    got = {"quimb": None, "quimb_build": None}
    t0 = time.perf_counter()
    built = _quimb_network(terms, out, arrays)
    if built is not None:
        got["quimb_build"] = time.perf_counter() - t0
        gc.collect()
        t0 = time.perf_counter()
        (tn if tn is not None else built).contract(all, output_inds=tuple(out))
        got["quimb"] = time.perf_counter() - t0
    return got


def _child(args: list, timeout: float | None = None) -> str:
    """The last line ``python -m benchmarks.networks *args`` prints, run in a child process
    from the repository's root (``subprocess.TimeoutExpired`` past ``timeout`` seconds)."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from .run import child_env

    done = subprocess.run([sys.executable, "-m", "benchmarks.networks", *args], cwd=root,
                          capture_output=True, text=True, check=True, timeout=timeout,
                          env=child_env())
    return done.stdout.strip().splitlines()[-1]


def _fresh_processes(name: str, processes: int) -> dict:
    """``first_in_process`` in ``processes`` triples of fresh processes: graphopt's first
    and second on a new empty cache (the second on the path and kernels the first left on
    disk), and quimb's. The times, and their medians: graphopt's first and second, from
    the arrays and search and run alone, and quimb's contraction and its network built
    and contracted."""
    runs: dict = {"graphopt_first": [], "graphopt_second": [],
                  "graphopt_first_search_run": [], "graphopt_second_search_run": [],
                  "quimb": [], "quimb_from_arrays": []}

    def fresh(library: str, cache: str) -> dict:
        return json.loads(_child(["--first-in-process", name, "--cache", cache,
                                  "--library", library, "--network", network]))

    with tempfile.TemporaryDirectory() as made:
        network = os.path.join(made, "network.npz")
        _save_network(network, *INSTANCES[name][1]()[:2])
        for _ in range(processes):
            with tempfile.TemporaryDirectory() as cache:
                for which in ("graphopt_first", "graphopt_second"):
                    got = fresh("graphopt", cache)
                    runs[which].append(got["graphopt"])
                    runs[which + "_search_run"].append(got["graphopt_search_run"])
                got = fresh("quimb", cache)
                if got["quimb"] is not None:
                    runs["quimb"].append(got["quimb"])
                    runs["quimb_from_arrays"].append(got["quimb"] + got["quimb_build"])
    return dict(runs, **{f"{k}_median": statistics.median(v) if v else None
                         for k, v in runs.items()})


def _save_network(path: str, eq: str, arrays) -> None:
    """``eq`` and ``arrays`` in an ``.npz`` at ``path`` (``_load_network`` reads it)."""
    import numpy as np

    np.savez(path, equation=np.array(eq), **{f"a{i}": a for i, a in enumerate(arrays)})


def _load_network(path: str) -> tuple[str, list]:
    """``(eq, arrays)`` that ``_save_network`` wrote to ``path``."""
    import numpy as np

    with np.load(path) as f:
        return str(f["equation"]), [f[f"a{i}"] for i in range(len(f.files) - 1)]


def peer_run(network: str, path_file: str, result: str) -> float:
    """opt_einsum's median call of the network in ``network`` (``_save_network``) along the
    path in ``path_file`` (JSON), its result saved to ``result`` (``.npy``); seconds."""
    import numpy as np
    import opt_einsum

    eq, arrays = _load_network(network)
    with open(path_file) as f:
        path = [tuple(p) for p in json.load(f)]
    expr = opt_einsum.contract_expression(eq, *(a.shape for a in arrays), optimize=path)
    np.save(result, expr(*arrays))
    return _median_call(lambda: expr(*arrays))


def _peer_run(eq: str, arrays, path, limit: float) -> tuple:
    """``(seconds, result)`` of ``peer_run`` in a child process given ``limit`` seconds, or
    ``(None, None)`` where it ran past them: a peer's path can be one that opt_einsum runs
    for many minutes (a hyper network's step through NumPy's einsum iterator ran over ten
    minutes at 4.5 GB, on a path another 1 s search made runnable in 0.5-5 s)."""
    import subprocess

    import numpy as np

    with tempfile.TemporaryDirectory() as made:
        network, path_file, result = (os.path.join(made, f) for f in
                                      ("network.npz", "path.json", "result.npy"))
        _save_network(network, eq, arrays)
        with open(path_file, "w") as f:
            json.dump([list(map(int, p)) for p in path], f)
        try:
            seconds = float(_child(["--peer-run", network, "--path", path_file,
                                    "--result", result], timeout=limit))
        except subprocess.TimeoutExpired:
            return None, None
        return seconds, np.load(result)


def measure(name: str, budget: float, processes: int = 0, peer_limit: float = 60.0) -> dict:
    """Every figure of one instance (see the module docstring); opt_einsum's run along
    cotengra's path is given ``peer_limit`` seconds (``_peer_run``)."""
    import numpy as np
    import opt_einsum

    from graphopt.compiler import driver as compiler
    from graphopt.contraction.paths import label_sizes, play
    from graphopt.contraction.search import anytime as path_search
    from graphopt.contraction.search import cache as path_cache
    from graphopt.contraction.search import searchers as path_searchers

    eq, arrays, tn = INSTANCES[name][1]()
    terms, out = _terms(eq)
    sizes = label_sizes(eq, [a.shape for a in arrays])
    row = {"instance": name, "description": INSTANCES[name][0], "tensors": len(terms),
           "labels": len(sizes), "dtype": str(arrays[0].dtype)}

    def cost(path):
        s = play(terms, out, sizes, path)
        return {"flops": s.flops, "combo": s.combo, "largest": s.largest}

    greedy = path_searchers.greedy(terms, out, sizes)
    row["greedy"] = cost(greedy.path)
    ctg_path, ctg_s = _cotengra_path(eq, sizes, budget)
    row["cotengra"] = dict(cost(ctg_path), search_seconds=ctg_s)
    same, rec = path_search.find_path(terms, out, sizes, time_budget=budget, cache=False)
    row["graphopt_same_budget"] = dict(cost(same.path), search_seconds=rec["seconds"],
                                       searcher=rec["searcher"], trials=rec["trials"])

    def build_compile_call():
        return _graphopt_end_to_end(name, eq, arrays)

    with tempfile.TemporaryDirectory() as cache:     # an empty path and kernel cache
        os.environ["GRAPHOPT_CACHE_DIR"] = cache
        path_cache.clear_memo()
        compiler.clear_cache()   # a first compile
        gc.collect()   # each end-to-end time starts after a collection: the searches before
        # leave garbage whose collection lands anywhere (70 ms)
        plan, got, build_s, compile_s, end_to_end = build_compile_call()
        group = plan.report["contraction"].details["groups"][0]
        search = group.get("search", {})
        run_s = _median_call(lambda: plan(*arrays))
        path_cache.clear_memo()   # as a second process: the path and kernels from disk
        compiler.clear_cache()
        gc.collect()
        _, _, again_build, _, again = build_compile_call()
        del os.environ["GRAPHOPT_CACHE_DIR"]
    row["graphopt"] = {"flops": group["flops_after"], "search_seconds": search.get("seconds"),
                       "searcher": search.get("searcher", group["optimizer"]),
                       "graph_build_seconds": build_s, "compile_seconds": compile_s,
                       "end_to_end_seconds": end_to_end,
                       "second_process_end_to_end_seconds": again,
                       "second_process_graph_build_seconds": again_build, "run_seconds": run_s}
    seconds, ref = _peer_run(eq, arrays, ctg_path, peer_limit)
    row["opt_einsum_cotengra_path_run_seconds"] = seconds
    if ref is None:     # (past the limit: the reference is opt_einsum's on graphopt's path)
        row["opt_einsum_cotengra_path_over_seconds"] = peer_limit
        ref = opt_einsum.contract(eq, *arrays, optimize=same.path)
    scale = max(float(np.max(np.abs(ref))), 1e-300)
    row["max_rel_diff"] = float(np.max(np.abs(np.asarray(got) - ref)) / scale)
    _quimb_network(["ab"], "", [np.ones((2, 2))])    # (quimb imported before the clock)
    t0 = time.perf_counter()
    built = _quimb_network(terms, out, arrays)
    if built is not None:
        row["quimb_build_seconds"] = time.perf_counter() - t0
        tn = tn if tn is not None else built

        def quimb_contract():
            return tn.contract(all, output_inds=tuple(out))
        gc.collect()
        t0 = time.perf_counter()
        quimb_contract()
        row["quimb_end_to_end_seconds"] = time.perf_counter() - t0
        row["quimb_run_seconds"] = _median_call(quimb_contract)
    if processes:
        row["fresh_processes"] = dict(_fresh_processes(name, processes), processes=processes)
    return row


# --------------------------------------------------------------------------------- tables


def _g(x):
    return "–" if x is None else f"{x:.3g}"


def _end_to_end(row: dict) -> dict:
    """A row's end-to-end seconds: ``{"search_run": (graphopt's first, its second
    process, quimb's), "from_arrays": (the same)}``. Search and run: graphopt's compile and
    first call of the graph, quimb's ``contract(all)`` of the network (each library's own
    object built, as a user holds it); from the arrays: each with that object built first
    (quimb's a ``TensorNetwork`` of the arrays and index names). The fresh processes'
    medians where they were taken, else the one measurement; None where quimb is
    missing."""
    fresh = row.get("fresh_processes")
    if fresh:
        return {"search_run": (fresh["graphopt_first_search_run_median"],
                               fresh["graphopt_second_search_run_median"],
                               fresh["quimb_median"]),
                "from_arrays": (fresh["graphopt_first_median"],
                                fresh["graphopt_second_median"],
                                fresh["quimb_from_arrays_median"])}
    go_ = row["graphopt"]
    first, second = go_["end_to_end_seconds"], go_["second_process_end_to_end_seconds"]
    quimb = row.get("quimb_end_to_end_seconds")
    return {"search_run": (first - go_["graph_build_seconds"],
                           second - go_["second_process_graph_build_seconds"], quimb),
            "from_arrays": (first, second,
                            None if quimb is None else quimb + row["quimb_build_seconds"])}


def _ms(x):
    return "–" if x is None else f"{x * 1e3:.3g}"


def _peer_ms(row: dict) -> str:
    over = row.get("opt_einsum_cotengra_path_over_seconds")
    return f"over {over:g} s" if over else _ms(row["opt_einsum_cotengra_path_run_seconds"])


def table(rows: list[dict]) -> str:
    """Markdown: path FLOPs (greedy, cotengra and graphopt at the same budget, graphopt at
    its default) and times (search, run, end to end) against the peers."""
    out = ["| instance | tensors / labels | greedy FLOPs | cotengra FLOPs | graphopt FLOPs "
           "(same budget) | graphopt FLOPs (default) | graphopt search s | graphopt run ms "
           "| oe + cotengra path run ms | graphopt search + run ms (first / second process) "
           "| quimb contract ms | from the arrays ms: graphopt (first / second) / quimb "
           "| max rel diff |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "skipped" in r:
            out.append(f"| {r['instance']} | skipped: {r['skipped']} |" + " |" * 11)
            continue
        go_ = r["graphopt"]
        e2e = _end_to_end(r)
        (first, second, quimb), (a_first, a_second, a_quimb) = \
            e2e["search_run"], e2e["from_arrays"]
        out.append(
            f"| {r['instance']} | {r['tensors']} / {r['labels']} | {_g(r['greedy']['flops'])} "
            f"| {_g(r['cotengra']['flops'])} | {_g(r['graphopt_same_budget']['flops'])} "
            f"| {_g(go_['flops'])} | {_g(go_['search_seconds'])} "
            f"| {_g(go_['run_seconds'] * 1e3)} "
            f"| {_peer_ms(r)} "
            f"| {_ms(first)} / {_ms(second)} | {_ms(quimb)} "
            f"| {_ms(a_first)} / {_ms(a_second)} / {_ms(a_quimb)} "
            f"| {r['max_rel_diff']:.1e} |")
    done = [r for r in rows if "skipped" not in r]
    for what in ("flops", "combo") if done else ():
        # combo (FLOPs + 64 x elements written) is what both searches minimize
        ratio = [r["graphopt_same_budget"][what] / r["cotengra"][what] for r in done]
        gm = math.exp(sum(map(math.log, ratio)) / len(ratio))
        worst = max(zip(ratio, (r["instance"] for r in done)))
        out.append(f"{'' if what == 'combo' else chr(10)}graphopt / cotengra path "
                   f"{'FLOPs' if what == 'flops' else 'combo cost'} at the same budget: "
                   f"geometric mean {gm:.3f}, worst {worst[0]:.3f} ({worst[1]})")
    for what, label in (("search_run", "search + run"), ("from_arrays", "from the arrays")):
        ratios = [(e[2] / e[0], r["instance"]) for r in done
                  for e in [_end_to_end(r)[what]] if e[2] is not None]
        if ratios:
            out.append(f"quimb / graphopt (first process), {label}: " + ", ".join(
                f"{n} {x:.2f}" for x, n in ratios))
    return "\n".join(out)


def run_rows(jobs) -> list[dict]:
    """Each job's row (``jobs``: ``(row stub, thunk)`` pairs), or its stub with "skipped"
    where a package it needs is not installed; each printed as JSON as it comes."""
    rows = []
    for stub, measure_row in jobs:
        try:
            rows.append(measure_row())
        except ImportError as e:
            rows.append(dict(stub, skipped=f"{e.name} is not installed"))
        print(json.dumps(rows[-1], default=str), flush=True)
    return rows


def grid_main(module: str, doc: str, argv, instances, axis: str, default: str, parse,
              measure, stub, table) -> int:
    """``main`` of a benchmark over ``--instances`` x ``--<axis>`` (comma-separated; ``parse``
    reads one ``axis`` item): a row per pair, ``measure(instance, item)``, or ``stub(instance,
    item)`` marked skipped where a package it needs is missing (``run_rows``); ``--mode``
    and ``--json`` as ``main_per_mode`` takes them."""
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", default=",".join(instances))
    p.add_argument(f"--{axis}", default=default)
    p.add_argument("--mode", choices=("both", "pinned", "default"), default="both")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    names = args.instances.split(",")
    items = [parse(x) for x in getattr(args, axis).split(",")]
    return main_per_mode(module, args.mode,
                         ["--instances", ",".join(names), f"--{axis}", ",".join(map(str, items))],
                         lambda: run_rows((stub(n, x), functools.partial(measure, n, x))
                                          for n in names for x in items),
                         table, args.json)


def _run(args) -> list[dict]:
    return run_rows(({"instance": name}, functools.partial(measure, name, args.budget,
                                                          args.processes, args.peer_limit))
                    for name in args.instances)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.networks", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", default=",".join(INSTANCES))
    p.add_argument("--budget", type=float, default=2.0, help="path-search seconds given to "
                   "cotengra and to graphopt for the same-budget comparison")
    p.add_argument("--processes", type=int, default=3, help="triples of fresh processes "
                   "whose end-to-end times the table gives as medians (0: one measurement "
                   "in the benchmark's process)")
    p.add_argument("--peer-limit", type=float, default=60.0, help="seconds opt_einsum's "
                   "run along cotengra's path may take (a child process; past them the "
                   "table says so and the reference is opt_einsum's on graphopt's path)")
    p.add_argument("--mode", choices=("both", "pinned", "default"), default="both")
    p.add_argument("--json", default=None)
    p.add_argument("--peer-run", default=None, help=argparse.SUPPRESS)
    p.add_argument("--path", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    p.add_argument("--first-in-process", default=None, help=argparse.SUPPRESS)
    p.add_argument("--cache", default=None, help=argparse.SUPPRESS)
    p.add_argument("--library", default="graphopt", choices=("graphopt", "quimb"),
                   help=argparse.SUPPRESS)
    p.add_argument("--network", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.first_in_process:     # one fresh process of ``_fresh_processes``
        print(json.dumps(first_in_process(args.first_in_process, args.cache, args.library,
                                          args.network)))
        return 0
    if args.peer_run:     # opt_einsum's run of ``_peer_run``
        print(peer_run(args.peer_run, args.path, args.result))
        return 0
    args.instances = args.instances.split(",")
    return main_per_mode("benchmarks.networks", args.mode,
                         ["--budget", str(args.budget), "--instances", ",".join(args.instances),
                          "--processes", str(args.processes),
                          "--peer-limit", str(args.peer_limit)],
                         lambda: _run(args), table, args.json, f", budget {args.budget} s")


if __name__ == "__main__":
    sys.exit(main())
