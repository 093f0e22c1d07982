"""The dask backend on a real local dask.distributed cluster (2 worker processes, loopback)."""

import math
import os
import signal

import numpy as np
import opt_einsum
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphopt as go
from graphopt.testing import (
    assert_grad_correct,
    assert_plan_matches_interpreter,
    graphs,
    inputs_for,
)

pytestmark = pytest.mark.dist
distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")

from tests.passes.test_slicing import (  # noqa: E402
    grid_equation,
    network_graph,
    network_inputs,
    reference,
)


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       host="127.0.0.1", dashboard_address=None)
    c = distributed.Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


# -------------------------------------------------------------------- property graphs


@settings(max_examples=6)
@given(graphs(max_nodes=12, max_dim=4), st.data())
def test_random_graphs_match_the_interpreter_on_small_chunks(client, g, data):
    inputs = data.draw(inputs_for(g), label="inputs")
    plan = go.compile(g, backend="dask", chunks=2, client=client, block_kernel="numpy",
                      progress=False, cache=False)
    assert_plan_matches_interpreter(g, plan, inputs)


# --------------------------------------------------------------------- fused kernels


def mlp_graph():
    g = go.Graph("mlp")
    x = g.input("x", (256, 96), "float32")
    w = g.input("w", (96, 128), "float32")
    b = g.input("b", (128,), "float32")
    h = go.gelu(go.einsum("bi,ij->bj", x, w) + b)          # contraction + epilogue
    y = go.exp(h * 0.5) - 1.0                               # elementwise group
    g.output({"y": y, "rowmax": go.tanh(h.max(axis=1)) + 1.0, "mean": y.mean(axis=0)})
    return g


def mlp_inputs(seed=0):
    rng = np.random.default_rng(seed)
    return {"x": (rng.standard_normal((256, 96)) * 0.3).astype("float32"),
            "w": (rng.standard_normal((96, 128)) * 0.3).astype("float32"),
            "b": (rng.standard_normal(128) * 0.3).astype("float32")}


def test_fused_groups_run_generated_numba_kernels_in_the_workers(client):
    pytest.importorskip("numba")
    g = mlp_graph()
    plan = go.compile(g, backend="dask", chunks={"x": (128, 96), "w": (96, 64), "b": 64},
                      block_kernel="numba", client=client, progress=False, cache=False)
    impls = {s.kernel.impl for s in plan.steps}
    assert {"dask-blockwise-contraction", "dask-blockwise-elementwise",
            "dask-blockwise-reduction"} <= impls
    assert_plan_matches_interpreter(g, plan, mlp_inputs())

    def kernels_built():
        from graphopt.backends.numba import codegen as numba_codegen

        return len(numba_codegen._KERNELS)

    assert sum(client.run(kernels_built).values()) > 0


def test_lazy_returns_dask_collections_and_default_client_is_used(client):
    g = mlp_graph()
    plan = go.compile(g, backend="dask", chunks={"x": (64, 96)}, block_kernel="numpy",
                      progress=False, cache=False)   # no client: the default client
    lazy = plan.lazy(**mlp_inputs())
    assert set(lazy) == {"y", "rowmax", "mean"}
    assert all(isinstance(v, da.Array) for v in lazy.values())
    assert lazy["y"].chunks[0] == (64,) * 4
    assert_plan_matches_interpreter(g, plan, mlp_inputs())
    # a dask array input is rechunked where ``chunks`` names it, else keeps its chunks
    xs = da.from_array(mlp_inputs()["x"], chunks=(32, 96))
    assert plan.lazy(**{**mlp_inputs(), "x": xs})["y"].chunks[0] == (64,) * 4
    own = go.compile(g, backend="dask", block_kernel="numpy", cache=False)
    assert own.lazy(**{**mlp_inputs(), "x": xs})["y"].chunks[0] == (32,) * 8


# ------------------------------------------------------------------------------ chunks


def matmul_graph(n=64):
    g = go.Graph("mm")
    a = g.input("a", (n, n), "float64")
    b = g.input("b", (n, n), "float64")
    g.output(go.einsum("ij,jk->ik", a, b))
    return g


def test_contraction_rechunks_only_where_chunks_disagree(client):
    g = matmul_graph()
    same = go.compile(g, backend="dask", chunks=16, client=client, cache=False)
    assert same.details["rechunks"] == [] and same.details["bytes_moved"] == 0
    assert same.steps[0].kernel.details["bytes_moved"] == 0
    mixed = go.compile(g, backend="dask", chunks={"a": (16, 16), "b": (32, 16)},
                       client=client, cache=False)
    (moved,) = mixed.details["rechunks"]
    assert moved["bytes"] == 64 * 64 * 8 and moved["step"] == 0
    assert mixed.steps[0].kernel.details["rechunks"][0]["to"] == [[16, 16, 16, 16]]
    assert "bytes_moved" in mixed.report.to_json()
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((64, 64)), rng.standard_normal((64, 64))
    np.testing.assert_allclose(mixed(a=a, b=b), a @ b, rtol=1e-12)


def test_auto_chunks_follow_chunk_bytes_and_bad_chunks_are_errors(client):
    g = matmul_graph()
    plan = go.compile(g, backend="dask", chunks="auto", chunk_bytes=8 * 32 * 32, client=client,
                      cache=False)
    assert plan.details["input_chunks"]["a"] == [[32, 32], [32, 32]]
    with pytest.raises(go.GraphError, match="unknown input"):
        go.compile(g, backend="dask", chunks={"nope": 4}, cache=False)
    with pytest.raises(go.GraphError, match="chunks"):
        go.compile(g, backend="dask", chunks={"a": (1, 2, 3)}, cache=False)


def test_a_reshape_that_splits_dims_unevenly_over_chunks_runs(client):
    # dask's own reshape refuses (4, 6) -> (6, 4) over chunks of 8 elements
    g = go.Graph("reshape")
    x = g.input("x", (4, 6), "float64")
    g.output((x + 1).reshape(6, 4))
    plan = go.compile(g, backend="dask", chunk_bytes=64, client=client, cache=False)
    a = np.arange(24.0).reshape(4, 6)
    np.testing.assert_array_equal(plan(x=a), (a + 1).reshape(6, 4))


@pytest.mark.parametrize("shape,dtype", [((3, 0, 4), "complex128"), ((0,), "float64"),
                                         ((5, 0), "float32")])
def test_a_zero_size_input_gets_one_empty_chunk(client, shape, dtype):
    g = go.Graph("empty")
    x = g.input("x", shape, dtype)
    g.output(go.exp(x).sum(axis=-1) + 1)
    plan = go.compile(g, backend="dask", chunk_bytes=1024, client=client, cache=False)
    a = np.ones(shape, dtype)
    np.testing.assert_array_equal(plan(x=a), np.exp(a).sum(axis=-1) + 1)


def test_progress_bar_and_dashboard_link_printed_once(client, capsys):
    from graphopt.backends.dask import cluster

    g = matmul_graph(32)
    plan = go.compile(g, backend="dask", chunks=8, client=client, progress=True, cache=False)
    cluster._announced.discard(id(client))
    a = np.eye(32)
    plan(a=a, b=a)
    plan(a=a, b=a)
    out, err = capsys.readouterr()
    assert out.count("100% Completed") == 2
    services = client.scheduler_info().get("services", {})
    assert err.count("dashboard") == (1 if "dashboard" in services else 0)


def test_profile_times_every_step_on_the_cluster(client, tmp_path):
    import json

    g = mlp_graph()
    plan = go.compile(g, backend="dask", chunks={"x": (128, 96)}, block_kernel="numpy",
                      client=client, progress=False, cache=False)
    prof = plan.profile(**mlp_inputs(), repeat=2, warmup=0)
    assert [e.name for e in prof.events] == [s.name for s in plan.steps] * 2
    assert all(e.end_ns > e.start_ns and e.tasks >= 1 for e in prof.events)
    assert plan.steps[0].name in prof.summary()
    prof.to_chrome_trace(tmp_path / "trace.json")
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert len([e for e in trace["traceEvents"] if e["ph"] == "X"]) == len(prof.events)


# ----------------------------------------------------------------------------- slicing


def test_tensor_network_over_the_memory_limit_runs_sliced_on_numpy_and_dask(client):
    eq, bond = grid_equation(4, 5), 7
    g, inputs = network_graph(eq, bond), network_inputs(eq, bond)
    # a quarter of what the unsliced path allocates at once (343 slice tasks)
    limit = go.compile(g, backend="numpy", cache=False).predicted_peak_bytes // 4
    expected = reference(eq, inputs)
    plan = go.compile(g, backend="dask", memory_limit=limit, client=client, progress=False,
                      cache=False)
    (sliced,) = plan.report["slicing"].details["sliced"]
    assert sliced["predicted_peak_bytes"] <= limit
    assert sliced["largest_intermediate_bytes"] < sliced["largest_intermediate_unsliced_bytes"]
    (step,) = plan.steps
    assert step.kernel.impl == "dask-sliced"
    assert step.kernel.details["sliced"]["tasks"] == sliced["n_slices"] > 1
    np.testing.assert_allclose(plan(**inputs), expected, rtol=1e-9)
    on_numpy = go.compile(g, backend="numpy", memory_limit=limit, cache=False)
    np.testing.assert_allclose(on_numpy(**inputs), expected, rtol=1e-9)


class OuterFirst(opt_einsum.paths.PathOptimizer):
    """A path search that always contracts the first and last operands first."""

    def __call__(self, inputs, output, size_dict, memory_limit=None):
        return [(0, len(inputs) - 1)] + [(0, 1)] * (len(inputs) - 2)


def test_output_labels_sliced_become_output_chunks(client):
    # a[i,j] b[j,k] c[k,l] along the path (a c) b: an i*j*k*l intermediate, where i and l,
    # in every step and in the output, are the labels worth slicing
    g = go.Graph("chain")
    rng = np.random.default_rng(5)
    shapes = {"a": (16, 32), "b": (32, 32), "c": (32, 16)}
    ins = [g.input(k, s, "float64") for k, s in shapes.items()]
    g.output(go.einsum("ij,jk,kl->il", *ins))
    vals = {k: rng.standard_normal(s) for k, s in shapes.items()}
    # one i,l slice of the intermediate (8 KiB), its copy for the GEMM with b and b's own,
    # and the sliced loop's own objects (32 kB in all): slicing i and l fits, as the plan
    # runs it (j would be recomputed)
    limit = 40 * 1024
    plan = go.compile(g, backend="dask", passes=["slicing"], memory_limit=limit,
                      optimize=OuterFirst(), client=client, progress=False, cache=False)
    (sliced,) = plan.report["slicing"].details["sliced"]
    assert sliced["largest_intermediate_bytes"] <= limit and set(sliced["slices"]) <= {"i", "l"}
    assert sliced["flops"] == sliced["flops_unsliced"]  # no recomputation
    lazy = plan.lazy(**vals)
    assert math.prod(lazy.numblocks) == sliced["n_slices"] > 1
    np.testing.assert_allclose(plan(**vals), vals["a"] @ vals["b"] @ vals["c"], rtol=1e-10)


def test_budget_no_slicing_can_meet_raises_before_running_anything(client):
    eq, bond = grid_equation(3, 3), 4
    g = network_graph(eq, bond)

    class GraphsSubmitted(distributed.diagnostics.plugin.SchedulerPlugin):
        name = "graphs-submitted"

        def __init__(self):
            self.count = 0

        def update_graph(self, scheduler, **kwargs):
            self.count += 1

    # LocalCluster runs its scheduler in this process: watch it directly. (Counting the
    # scheduler's task groups is racy: it forgets earlier tests' groups at any time.)
    seen = GraphsSubmitted()
    scheduler = client.cluster.scheduler
    scheduler.add_plugin(seen)
    try:
        with pytest.raises(go.GraphError, match=r"slicing: no slicing .* runs within \d+ "
                                                r"bytes .*memory_limit=1000"):
            go.compile(g, backend="dask", memory_limit=1000, client=client, cache=False)
        client.run_on_scheduler(lambda: None)   # a round trip: anything sent has arrived
        assert seen.count == 0
    finally:
        scheduler.remove_plugin(name=seen.name)


# ------------------------------------------------------------------------ fault tolerance


def test_a_worker_killed_mid_run_is_survived(client):
    # 4x5 lattice, bond 8, budget 256 KiB: 64 slice tasks, ~0.5 s on 2 workers. A worker is
    # SIGKILLed as soon as it holds a result of the run (the nanny restarts it; the scheduler
    # recomputes what it held). A run that ends before the kill is tried again.
    eq, bond = grid_equation(4, 5), 8
    g = network_graph(eq, bond)
    plan = go.compile(g, backend="dask", memory_limit=2**18, client=client,
                      progress=False, cache=False, split_every=2)
    killed = False
    for seed in range(3):
        inputs = network_inputs(eq, bond, seed=seed)
        pids = client.run(os.getpid)
        future = client.compute(plan.lazy(**inputs))
        victim = None
        while victim is None and not future.done():
            victim = next((w for w, keys in client.has_what().items() if keys), None)
        if victim is None or future.done():
            future.result()
            continue
        os.kill(pids[victim], signal.SIGKILL)
        killed = True
        np.testing.assert_allclose(future.result(timeout=60), reference(eq, inputs), rtol=1e-9)
        break
    assert killed, "every run finished before a worker could be killed"
    client.wait_for_workers(2, timeout=30)


def test_zero_size_values_and_zero_chunks(client):               # ISSUE 12: 15, 25
    g = go.Graph()
    x = g.input("x", (0, 3), "float64")
    g.output(go.max(x, axis=1))
    out = go.compile(g, backend="dask", client=client)(x=np.zeros((0, 3)))
    assert out.shape == (0,) and out.dtype == np.float64
    g = go.Graph()
    y = g.input("y", (6, 0, 3), "float64")
    g.output(go.exp(y) + 1)
    out = go.compile(g, backend="dask", client=client)(y=np.zeros((6, 0, 3)))
    assert out.shape == (6, 0, 3)
    g = go.Graph()
    z = g.input("z", (4, 10), "float64")
    g.output(go.exp(z))
    with pytest.raises(go.GraphError, match="chunks"):
        go.compile(g, backend="dask", client=client, chunks=(0, 10))(z=np.ones((4, 10)))


def test_gradients_of_an_mlp_loss_on_the_cluster(client):
    """go.grad's graph runs on dask like any graph, and matches finite differences."""
    g = go.Graph("mlp_loss")
    x = g.input("x", (16, 6))
    w = g.input("w", (6, 5))
    b = g.input("b", (5,))
    h = go.gelu(go.einsum("bi,ij->bj", x, w) + b)
    g.output(go.logsumexp(h, axis=1).mean())
    assert_grad_correct(g, wrt=["w", "b"], backends=("dask",), opt_levels=(2,),
                        compile_options=dict(chunks=4, client=client, block_kernel="numpy",
                                             progress=False))


def test_a_ragged_slice_task_takes_the_full_slice_s_arena_layout():
    # a slice task's program for a ragged slice takes the full slice's arena and offsets
    # (as sliced_contract's slices do), so it holds no more than the full slice counted
    from graphopt.backends.dask.lowering import _contract_slice
    from graphopt.contraction.program.run import PathContraction

    eq, path = "ab,bc,cd->ad", [(0, 1), (0, 1)]
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(s) for s in [(6, 40), (40, 40), (40, 21)])
    full = [(6, 40), (40, 40), (40, 9)]         # d sliced in blocks of 9: 21 = 9 + 9 + 3
    ragged = [a, b, c[:, 18:]]                  # the last slice's views
    contract = PathContraction(eq, path)
    got = _contract_slice(contract, full, *ragged)
    np.testing.assert_allclose(got, np.einsum(eq, *ragged), rtol=1e-12)
    programs = {id(p): p for p in contract._programs.values()}
    assert len(programs) == 2         # the full slice's, planned for its layout, and its own
    assert len({p.arena_bytes for p in programs.values()}) == 1
