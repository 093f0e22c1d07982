"""The benchmark harness's smoke mode, so it does not rot (benchmarks measure; nothing here
is timed)."""

import json
import os
import pathlib
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import run  # noqa: E402


def _results(main, args, tmp_path):
    """What benchmark ``main`` wrote with ``--json``, after it returned 0."""
    out = tmp_path / "results.json"
    assert main([*args, "--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_quick_run_checks_every_peer_against_numpy(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert run.main(["--quick", "--workloads", "small,chain,elementwise", "--peers",
                     "graphopt,numpy,opt_einsum", "--no-subprocess", "--mode", "default",
                     "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert set(res["workloads"]) == {"small", "chain", "elementwise"}
    for name, row in res["workloads"].items():
        g = row["peers"]["graphopt"]
        assert g["correct"] and g["median_ms"] > 0 and g["repeats"] >= 5, name
        assert row["peers"]["numpy"]["correct"], name
        assert row["graphopt"]["backend"] == "numba"
    assert "skipped" in res["workloads"]["elementwise"]["peers"]["opt_einsum"]
    assert "| small |" in capsys.readouterr().out


@pytest.mark.slow
def test_both_modes_run_pinned_and_default_in_their_own_processes(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert run.main(["--quick", "--workloads", "small", "--peers", "graphopt,numpy",
                     "--no-subprocess", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    pinned, default = res["modes"]["pinned"], res["modes"]["default"]
    assert pinned["mode"] == "pinned" and len(pinned["cores"]) == 1
    assert default["mode"] == "default" and len(default["cores"]) >= 1
    for r in (pinned, default):
        assert r["workloads"]["small"]["peers"]["graphopt"]["correct"]
    text = capsys.readouterr().out
    assert "parallel speedup (pinned ms / default ms)" in text and "| small |" in text


def test_concurrency_benchmark_checks_every_result(tmp_path):
    from benchmarks import concurrency

    out = tmp_path / "conc.json"
    assert concurrency.main(["--quick", "--workloads", "small,attention", "--threads", "4",
                             "--calls", "2", "--repeat", "1", "--min-ms", "0",
                             "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    for name, r in res["workloads"].items():
        assert r["correct"] and r["calls"] == 8 and r["concurrent_ms"] > 0, name
    assert 0 < res["workloads"]["small"]["python_floor"] < 10   # a sub-ms plan gets a floor


def test_concurrency_rounds_grow_until_a_sequential_round_takes_min_ms(tmp_path):
    from benchmarks import concurrency

    out = tmp_path / "conc.json"
    assert concurrency.main(["--quick", "--workloads", "small", "--threads", "2", "--calls",
                             "1", "--repeat", "1", "--min-ms", "5", "--json", str(out)]) == 0
    r = json.loads(out.read_text())["workloads"]["small"]
    assert r["calls"] > 2 and r["sequential_ms"] >= 2.5, r


def test_slices_benchmark_checks_every_result(capsys):
    from benchmarks import slices

    # 256 x 16 x 16 intermediates (512 KiB) under a 128 KiB limit: sliced over i
    assert slices.main(["--size", "256", "--bond", "16", "--limit", str(2 ** 17)]) == 0
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| graphopt")]
    assert len(rows) == 3
    for r in rows:
        diff = float(r.rstrip(" |").rsplit("|", 1)[1])
        assert diff < 1e-12, r
    # their steps average under threads.WORKER_MIN_FLOPS: one slice at a time even with two
    # threads (two at once ran slower; at the default sizes they run two at once)
    assert rows[2].split("|")[3].strip() == "1"


def test_memory_benchmark_sets_the_measured_peak_beside_the_prediction(tmp_path):
    pytest.importorskip("cotengra")
    from benchmarks import memory

    rows = _results(memory.main, ["--mode", "default", "--instances", "lattice",
                                  "--fractions", "0.25"], tmp_path)
    assert [r["fraction"] for r in rows] == [None, 0.25]
    assert rows[1]["limit"] == int(rows[0]["predicted"] * 0.25) and rows[1]["slices"] > 1
    for r in rows:   # a 10x10 lattice: arrays, not Python objects, dominate
        # slices run at once are predicted as if their peaks coincided (an upper bound):
        # how far the measure falls below it depends on how the threads interleave
        low = 0.9 / r["at_once"]
        assert low <= r["ratio"] <= 1.1 and r["within_limit"], r


def test_recompute_benchmark_fits_the_limit_and_keeps_the_gradients(tmp_path):
    from benchmarks import recompute

    rows = _results(recompute.main, ["--mode", "default", "--chains", "6x64",
                                     "--limits", str(3 * 64 * 64 * 8 + 8192)], tmp_path)
    free, limited = rows
    assert free["limit"] is None and free["arena"] > limited["arena"]
    assert limited["solver"].startswith("checkpoints") and limited["measured"] <= limited["limit"]
    assert free["equal"] and limited["equal"] and limited["extra_gflop"] > 0


def test_benchmark_children_run_without_the_old_openblas_overrides(monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.setenv("OPENBLAS_L2_SIZE", "1048576")
    env = run.child_env()
    assert "OPENBLAS_CORETYPE" not in env and "OPENBLAS_L2_SIZE" not in env
    assert env.get("PATH") == os.environ.get("PATH")


@pytest.mark.slow
def test_sliced_networks_benchmark_runs_within_the_limit_and_checks_results(tmp_path):
    pytest.importorskip("cotengra")
    from benchmarks import sliced_networks

    (row,) = _results(sliced_networks.main, ["--mode", "default", "--instances",
                                             "lattice5x6", "--fractions", "16"], tmp_path)
    assert row["slices"] > 1 and row["measured_peak"] <= row["limit"], row
    assert row["max_rel_diff"] < 1e-12 and row["cotengra_max_rel_diff"] < 1e-12, row
    # the path searched with its slices costs fewer FLOPs than slicing the unsliced one
    assert row["flops"] < row["flops_unsliced_path"], row
    assert "| lattice5x6 (30 tensors) | 1/16 of the peak |" in sliced_networks.table([row])


def test_integer_networks_benchmark_checks_results_and_peaks(tmp_path):
    pytest.importorskip("cotengra")
    from benchmarks import integer_networks

    (row,) = _results(integer_networks.main, ["--mode", "default", "--instances",
                                              "randreg30", "--dtypes", "int32"], tmp_path)
    assert row["exact"] and row["numpy_ms"] > 0 and row["opt_einsum_ms"] > 0, row
    assert abs(row["measured_peak"] / row["predicted_peak"] - 1) <= 0.1, row
    assert "| randreg30 (30 tensors) | int32 |" in integer_networks.table([row])


@pytest.mark.slow
def test_first_contract_benchmark_contracts_distinct_networks_against_peers(tmp_path):
    pytest.importorskip("cotengra")
    from benchmarks import first_contract

    eqs = {first_contract.INSTANCES["tree"][1](1000 + seed)[0] for seed in range(3)}
    assert len(eqs) == 3        # each network is new: no compiled plan is reused
    (row,) = _results(first_contract.main, ["--mode", "default", "--instances", "tree",
                                            "--networks", "3"], tmp_path)
    assert row["max_rel_diff"] < 1e-12 and row["tensors"] == [60, 60], row
    assert row["graphopt_ms"] > 0 and row["opt_einsum_over_graphopt"] > 0, row
    assert "| tree (cotengra tree_equation 60 tensors" in first_contract.table([row])


def test_networks_end_to_end_in_a_fresh_process_and_the_table_s_medians(tmp_path, monkeypatch):
    """``benchmarks.networks``' fresh-process measure: after a small unrelated network, the
    instance end to end by graphopt, its cache where it was told, or by quimb (its first
    contraction, and its network built from the arrays, where quimb is installed); the table's
    end-to-end columns, search and run and from the arrays, are the fresh processes'
    medians where they were taken, else the one measurement."""
    pytest.importorskip("cotengra")
    from benchmarks import networks

    monkeypatch.setenv("GRAPHOPT_CACHE_DIR", str(tmp_path / "outer"))   # (restored after)
    saved = str(tmp_path / "network.npz")
    eq, arrays, _ = networks.INSTANCES["tree"][1]()
    networks._save_network(saved, eq, arrays)
    loaded_eq, loaded = networks._load_network(saved)
    assert loaded_eq == eq and all(np.array_equal(a, b) and a.dtype == b.dtype
                                   for a, b in zip(arrays, loaded, strict=True))
    got = networks.first_in_process("tree", str(tmp_path / "cache"), "graphopt", saved)
    assert set(got) == {"graphopt", "graphopt_search_run"}, got
    assert 0 < got["graphopt_search_run"] < got["graphopt"], got
    got = networks.first_in_process("tree", str(tmp_path / "cache"), "quimb")
    assert set(got) == {"quimb", "quimb_build"}, got
    assert (got["quimb"] is None) == (got["quimb_build"] is None), got
    assert got["quimb"] is None or got["quimb"] > 0 and got["quimb_build"] > 0, got
    row = {"graphopt": {"end_to_end_seconds": 1.0, "graph_build_seconds": 0.25,
                        "second_process_end_to_end_seconds": 0.5,
                        "second_process_graph_build_seconds": 0.125},
           "quimb_end_to_end_seconds": 2.0, "quimb_build_seconds": 0.5}
    assert networks._end_to_end(row) == {"search_run": (0.75, 0.375, 2.0),
                                         "from_arrays": (1.0, 0.5, 2.5)}
    row["fresh_processes"] = {
        "graphopt_first_median": 0.9, "graphopt_second_median": 0.4,
        "graphopt_first_search_run_median": 0.7, "graphopt_second_search_run_median": 0.3,
        "quimb_median": 1.5, "quimb_from_arrays_median": 1.75}
    assert networks._end_to_end(row) == {"search_run": (0.7, 0.3, 1.5),
                                         "from_arrays": (0.9, 0.4, 1.75)}


def test_networks_peer_run_in_a_child_process_and_its_limit():
    """opt_einsum's run along a given path goes to a child process: its result comes back
    equal to opt_einsum's in this process with its median seconds; past its limit it comes
    back as ``(None, None)`` (the benchmark then says so, not hang on a peer), and the table
    shows the limit."""
    import opt_einsum

    from benchmarks import networks

    rng = np.random.default_rng(3)
    eq = "ab,bc,cd->ad"
    arrays = [rng.normal(size=(4, 5)), rng.normal(size=(5, 6)), rng.normal(size=(6, 3))]
    seconds, got = networks._peer_run(eq, arrays, [(1, 2), (0, 1)], limit=120)
    assert seconds > 0 and got.shape == (4, 3), (seconds, got)
    np.testing.assert_allclose(got, opt_einsum.contract(eq, *arrays), rtol=1e-13)
    assert networks._peer_run(eq, arrays, [(1, 2), (0, 1)], limit=0.01) == (None, None)
    row = {"opt_einsum_cotengra_path_run_seconds": None,
           "opt_einsum_cotengra_path_over_seconds": 300.0}
    assert networks._peer_ms(row) == "over 300 s"
    assert networks._peer_ms({"opt_einsum_cotengra_path_run_seconds": 0.0025}) == "2.5"
