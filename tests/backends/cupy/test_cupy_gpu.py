"""The cupy backend on a GPU: every result equals the interpreter (docs/trust.md).

Marked ``gpu``; skipped with a reason where cupy or a CUDA device is missing.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphopt as go
from graphopt import ir
from graphopt.backends import BACKENDS, get_backend
from graphopt.passes import PassResult
from graphopt.testing import assert_plan_matches_interpreter, graphs, inputs_for, output_leaves
from graphopt.testing.generators import random_values

cupy = pytest.importorskip("cupy", reason="cupy is not installed (pip install cupy-cuda12x)")
pytestmark = pytest.mark.gpu
if not BACKENDS["cupy"].available():
    pytest.skip("no CUDA device visible to cupy", allow_module_level=True)


def assert_matches(g, plan, inputs: dict, rtol=None):
    """Outputs stay on the device (cupy arrays), and equal the interpreter's."""
    assert all(isinstance(a, cupy.ndarray) for a in output_leaves(plan(**inputs)))
    assert_plan_matches_interpreter(g, plan, inputs, rtol=rtol)


def fuse_all(G, ctx):
    """A pass that makes each output's whole cone one fused node: every op goes through
    the generator's multi-stage programs, whatever the fusion pass decides."""
    H = ir.new_graph(G.graph.get("name", "g"))
    ins = []
    for i in G.graph["inputs"]:
        d = G.nodes[i]
        ins.append(ir.add_node(H, "input", [], d["shape"], d["dtype"], name=d["name"],
                               src=d["src"]))
    H.graph["inputs"] = ins
    outs = []
    for o in G.graph["outputs"]:
        sub = ir.copy_graph(G)
        keep = nx.ancestors(G, o) | {o} | set(G.graph["inputs"])
        sub.remove_nodes_from([n for n in list(sub) if n not in keep])
        for k, i in enumerate(sub.graph["inputs"]):
            sub.nodes[i]["name"] = f"in{k}"
        sub.graph.update(outputs=[o], output_structure={"kind": "tensor"})
        ir.drop_derived(sub)
        d = G.nodes[o]
        outs.append(ir.add_node(H, "fused", ins, d["shape"], d["dtype"],
                                {"graph": sub, "pattern": "whole", "srcs": []}, src=d["src"]))
    H.graph.update(outputs=outs, output_structure=G.graph["output_structure"])
    return PassResult(H, {"fused": len(outs)})




# ------------------------------------------------------------------------- hand graphs


def mlp(dtype="float32", b=64, i=96, h=128):
    g = go.Graph("mlp")
    x, w1 = g.input("x", (b, i), dtype), g.input("w1", (i, h), dtype)
    b1 = g.input("b1", (h,), dtype)
    w2, b2 = g.input("w2", (h, i), dtype), g.input("b2", (i,), dtype)
    g.output(go.einsum("bh,hi->bi", go.gelu(go.einsum("bi,ih->bh", x, w1) + b1), w2) + b2)
    return g


def attention(dtype="float32"):
    g = go.Graph("attention")
    q, k, v = (g.input(n, (2, 3, 16, 8), dtype) for n in "qkv")
    s = go.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(8)
    g.output(go.einsum("bhqk,bhkd->bhqd", go.softmax(s, axis=-1), v))
    return g


def misc(dtype="float64"):
    g = go.Graph("misc")
    x, y = g.input("x", (5, 6), dtype), g.input("y", (6,), dtype)
    z = go.logsumexp(x * y, axis=1) + x.sum() / 3
    t = (x + y).T.sum(axis=0, keepdims=True).T * go.mean(x, axis=1, keepdims=True)
    g.output({"z": z, "t": go.relu(t), "c": go.maximum(x, 0.5) > y, "i": x.astype("int64")})
    return g


HAND = {"mlp": mlp, "attention": attention, "misc": misc}


@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
@pytest.mark.parametrize("name", sorted(HAND))
def test_hand_graphs_match_interpreter(name, opt_level, rng):
    g = HAND[name]()
    G = g.to_ir()
    inputs = {G.nodes[i]["name"]: random_values(rng, G.nodes[i]["shape"], G.nodes[i]["dtype"])
              for i in G.graph["inputs"]}
    plan = go.compile(g, backend="cupy", opt_level=opt_level, cache=False)
    assert_matches(g, plan, inputs)
    assert all(k.source for k in plan.kernels)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "complex64"])
def test_dtypes_through_fused_programs(dtype, rng):
    g = mlp(dtype, b=32, i=48, h=64)
    G = g.to_ir()
    inputs = {G.nodes[i]["name"]: random_values(rng, G.nodes[i]["shape"], dtype)
              for i in G.graph["inputs"]}
    for passes in (None, [fuse_all]):
        plan = go.compile(g, backend="cupy", passes=passes, cache=False)
        # float16: the GPU accumulates products in float32; NumPy's float16 einsum rounds
        # more often, so compare against the interpreter on float16 at its own tolerance x3.
        assert_matches(g, plan, inputs, rtol=3e-2 if dtype == "float16" else None)


def test_inputs_numpy_or_cupy_outputs_cupy_or_host(rng):
    g = mlp()
    G = g.to_ir()
    inputs = {G.nodes[i]["name"]: random_values(rng, G.nodes[i]["shape"], "float32")
              for i in G.graph["inputs"]}
    before = {k: v.copy() for k, v in inputs.items()}
    plan = go.compile(g, backend="cupy")
    on_dev = {k: cupy.asarray(v) for k, v in inputs.items()}
    a, b = plan(**inputs), plan(**on_dev)
    assert isinstance(a, cupy.ndarray) and isinstance(b, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(a), cupy.asnumpy(b), rtol=1e-6)
    host = go.compile(g, backend="cupy", to_host=True)(**inputs)
    assert isinstance(host, np.ndarray)
    np.testing.assert_allclose(host, cupy.asnumpy(a), rtol=1e-6)
    for k in inputs:  # user inputs are never written
        np.testing.assert_array_equal(inputs[k], before[k])
        np.testing.assert_array_equal(cupy.asnumpy(on_dev[k]), before[k])
    c = plan(**on_dev)  # a later call never reuses a returned array
    assert c.data.ptr != b.data.ptr
    np.testing.assert_allclose(cupy.asnumpy(b), cupy.asnumpy(a), rtol=1e-6)


def test_arena_is_one_device_allocation_viewed_at_offsets(rng):
    g = attention()
    plan = go.compile(g, backend="cupy", cache=False)
    arena = plan._new_arena()
    lo = arena.buffer.data.ptr
    hi = lo + arena.buffer.nbytes
    views = [v for v in arena.outs if v is not None]
    assert views, "attention has arena-resident intermediates"
    for s in plan.steps:
        v = arena.outs[s.index]
        if s.offset is not None:
            assert v.data.ptr == lo + s.offset and v.data.ptr + v.nbytes <= hi
    plan.pool.release(arena.buffer)


def test_kernels_report_their_choices(rng):
    plan = go.compile(mlp(), backend="cupy", opt_level=3, cache=False)
    impls = [k.impl for k in plan.kernels]
    assert any("cublas-gemm" in i for i in impls), impls
    contr = [k.details for k in plan.kernels if "contraction" in k.details]
    assert contr and all("timings_ms" in d for d in contr)
    assert any("ElementwiseKernel" in k.source for k in plan.kernels)
    rows = plan.report.to_dict()["kernels"]
    assert any("contraction" in r for r in rows)


def test_eager_fallback_for_unsupported_groups(rng):
    g = go.Graph()
    a, b = g.input("a", (4,), "complex128"), g.input("b", (4,), "complex128")
    g.output(go.maximum(a, b) * 2)
    plan = go.compile(g, backend="cupy", passes=[fuse_all], cache=False)
    assert plan.kernels[0].impl == "cupy-ops"
    assert_matches(g, plan, {"a": random_values(rng, 4, "complex128"),
                             "b": random_values(rng, 4, "complex128")})


# -------------------------------------------------------------------------- properties


@settings(max_examples=20)
@given(data=st.data())
def test_random_graphs_match_interpreter(data):
    g = data.draw(graphs(max_nodes=12))
    inputs = data.draw(inputs_for(g))
    level = data.draw(st.sampled_from([0, 2]))
    plan = go.compile(g, backend="cupy", opt_level=level, cache=False)
    assert_matches(g, plan, inputs)


@settings(max_examples=15)
@given(data=st.data())
def test_random_graphs_as_one_fused_group_match_interpreter(data):
    g = data.draw(graphs(max_nodes=10, dtypes=("float32", "float64", "int64", "complex128")))
    G = g.to_ir()
    if any(G.nodes[o]["op"] in ("input", "const") for o in G.graph["outputs"]):
        return
    inputs = data.draw(inputs_for(g))
    plan = go.compile(g, backend="cupy", passes=[fuse_all], cache=False)
    assert_matches(g, plan, inputs)


@settings(max_examples=10)
@given(data=st.data())
def test_random_float16_graphs(data):
    g = data.draw(graphs(max_nodes=8, dtypes=("float16",), ops=("unary", "binary", "reduce",
                                                                  "layout", "softmax", "astype")))
    inputs = data.draw(inputs_for(g))
    plan = go.compile(g, backend="cupy", cache=False)
    assert_matches(g, plan, inputs)


# --------------------------------------------------------------------------- CUDA graphs


def small():
    g = go.Graph("small")
    a, b, c = (g.input(k, (16, 16), "float32") for k in "abc")
    x = go.einsum("ij,jk->ik", a, b)
    y = go.tanh(x) + c
    z = go.einsum("ij,kj->ik", y, a)
    w = go.exp(z * 0.01) * b - a
    g.output((go.maximum(w, c) * 0.5, y))
    return g


def test_cuda_graph_replay_equals_eager_launches(rng):
    g = small()
    eager = go.compile(g, backend="cupy", cache=False)
    graphed = go.compile(g, backend="cupy", cuda_graph=True, cache=False)
    assert type(graphed).__name__ == "CudaGraphPlan"
    fixed = {k: cupy.asarray(random_values(rng, (16, 16), "float32")) for k in "abc"}
    first = graphed(**fixed)
    snap = [cupy.asnumpy(x) for x in first]
    for step in range(12):
        if step % 3 == 0:   # same device buffers, new contents: the same graph replays
            for v in fixed.values():
                v[...] = cupy.asarray(random_values(rng, (16, 16), "float32"))
            inputs = fixed
        elif step % 3 == 1:  # fresh device arrays: maybe a new graph
            inputs = {k: cupy.asarray(random_values(rng, (16, 16), "float32")) for k in "abc"}
        else:                # host arrays
            inputs = {k: random_values(rng, (16, 16), "float32") for k in "abc"}
        want = eager(**inputs)
        got = graphed(**inputs)
        for w, x in zip(want, got):
            np.testing.assert_allclose(cupy.asnumpy(x), cupy.asnumpy(w), rtol=1e-5, atol=1e-6)
    stats = graphed.graph_stats
    assert stats["replays"] == 13 and 1 <= stats["captures"] <= graphed.max_graphs + 1
    for x, s in zip(first, snap):  # returned arrays were copied out of the graph's buffers
        np.testing.assert_array_equal(cupy.asnumpy(x), s)


def test_cuda_graph_falls_back_to_static_buffers_after_max_graphs(rng):
    plan = go.compile(small(), backend="cupy", cuda_graph=True, cache=False)
    plan.max_graphs = 2
    eager = go.compile(small(), backend="cupy", cache=False)
    keep = []
    for _ in range(5):
        inputs = {k: cupy.asarray(random_values(rng, (16, 16), "float32")) for k in "abc"}
        keep.append(inputs)  # alive: distinct addresses every call
        for w, x in zip(eager(**inputs), plan(**inputs)):
            np.testing.assert_allclose(cupy.asnumpy(x), cupy.asnumpy(w), rtol=1e-5, atol=1e-6)
    assert plan.graph_stats["captures"] == 3 and plan.graph_stats["input_copies"] == 9


def test_returned_arrays_survive_later_graph_replays(rng):
    plan = go.compile(small(), backend="cupy", cuda_graph=True, cache=False)
    inputs = {k: cupy.asarray(random_values(rng, (16, 16), "float32")) for k in "abc"}
    r1 = plan(**inputs)
    snap = [cupy.asnumpy(x) for x in r1]
    inputs["a"][...] += 1
    plan(**inputs)
    for x, s in zip(r1, snap):
        np.testing.assert_array_equal(cupy.asnumpy(x), s)


# ------------------------------------------------------------------- pool, OOM, clock


def test_pool_frees_its_cache_and_retries_once_on_out_of_memory():
    from graphopt.runtime.pool import TensorPool

    backend = get_backend("cupy")
    mp = cupy.get_default_memory_pool()
    mp.free_all_blocks()
    old = mp.get_limit()
    mib = 2**20
    try:
        mp.set_limit(size=mp.used_bytes() + 96 * mib)
        pool = TensorPool(backend)
        a = pool.acquire(64 * mib)
        pool.release(a)         # cached in the pool's free list: the device memory stays held
        del a
        b = pool.acquire(80 * mib)  # does not fit next to the cached 64 MiB: OOM, clear, retry
        assert pool.stats.oom_retries == 1 and pool.stats.bytes_cached == 0
        assert b.nbytes == 80 * mib
        with pytest.raises(cupy.cuda.memory.OutOfMemoryError):
            pool.acquire(200 * mib)  # cannot fit even after clearing: the error surfaces
        assert pool.stats.oom_retries == 2
    finally:
        mp.set_limit(size=old)


def test_event_step_clock_measures_device_time():
    clock = get_backend("cupy").step_clock()
    x = cupy.ones(1 << 24, dtype=cupy.float32)
    clock.mark()
    for _ in range(3):
        x = cupy.sqrt(x * 1.0001)
        clock.mark()
    marks = clock.read()
    assert len(marks) == 4 and all(b >= a for a, b in zip(marks, marks[1:]))
    assert marks[-1] > marks[0]


def test_profile_runs_on_the_device(rng):
    g = attention()
    G = g.to_ir()
    inputs = {G.nodes[i]["name"]: random_values(rng, G.nodes[i]["shape"], "float32")
              for i in G.graph["inputs"]}
    plan = go.compile(g, backend="cupy")
    prof = plan.profile(**inputs, repeat=3)
    assert len(prof.events) == 3 * len(plan.steps)
    assert all(e.end_ns >= e.start_ns for e in prof.events)
