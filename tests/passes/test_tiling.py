"""The tiling pass: which chains become tiled regions, the tile chosen, and refusals."""

import numpy as np
import pytest

import graphopt as go
from graphopt import ir
from graphopt.passes import PassContext
from graphopt.passes import tiling as tiling_mod
from graphopt.passes.fusion import fusion
from graphopt.passes.tiling import leading_dims, tiling
from graphopt.testing import check_same_semantics


def attention(b=2, h=4, q=64, d=16, mask=False):
    g = go.Graph("attention")
    qs, ks, vs = (g.input(n, (b, h, q, d), "float32") for n in "qkv")
    s = go.einsum("bhqd,bhkd->bhqk", qs, ks) * 0.25
    if mask:
        s = s + g.input("m", (q, q), "float32")
    g.output(go.einsum("bhqk,bhkd->bhqd", go.softmax(s, axis=-1), vs))
    return g


def tile(g, backend="numba"):
    F = fusion(g.to_ir(), PassContext()).graph
    res = tiling(F, PassContext(backend=backend))
    ir.verify(res.graph)
    check_same_semantics(F, res.graph, "tiling")
    return res.graph, res.record


@pytest.fixture
def small_tiles(monkeypatch):
    monkeypatch.setattr(tiling_mod, "TILE_MIN_BYTES", 1 << 16)
    monkeypatch.setattr(tiling_mod, "TILE_BYTES", 1 << 16)


def test_attention_is_one_region_tiled_over_batch_and_heads(small_tiles):
    H, details = tile(attention())
    (region,) = details["regions"]
    assert region["ops"] == ["einsum", "fused", "einsum"]
    # per (b, h): scores and probabilities are 2 x 64 x 64 float32 = 32 KiB; 64 KiB a block
    assert region["tile_dims"] == 2 and region["tile"] == 2 and region["blocks"] == 4
    (f,) = [n for n in H if H.nodes[n]["op"] == "fused"]
    assert H.nodes[f]["attrs"]["pattern"] == "tiled"
    assert H.nodes[f]["attrs"]["srcs"]    # the members' user source lines


def test_small_intermediates_are_left_whole():
    _, details = tile(attention())
    assert details["regions"] == []
    assert "fit in cache whole" in details["rejected"][0]["reason"]


def _tiled_nodes(plan):
    return [n for n, d in plan.graph.nodes(data=True)
            if d["op"] == "fused" and d["attrs"]["pattern"] == "tiled"]


@pytest.mark.parametrize("backend", ["numpy", "dask"])
def test_backends_that_run_regions_whole_skip_the_pass_and_say_so(backend, small_tiles):
    if backend == "dask":
        pytest.importorskip("dask.array")
    numba_plan = go.compile(attention(), backend="numba", cache=False)
    assert _tiled_nodes(numba_plan) and numba_plan.report["tiling"].details["regions"]
    plan = go.compile(attention(), backend=backend, cache=False)
    rec = plan.report["tiling"]
    assert rec.details == {"skipped": f"backend {backend!r} runs a tiled region whole, "
                                      "not block by block"}
    assert rec.changed is False and not _tiled_nodes(plan)


def test_operands_not_indexed_by_the_batch_dims_stop_the_region(small_tiles):
    _, details = tile(attention(mask=True))
    assert details["regions"] == []
    assert "no batch dims" in details["rejected"][0]["reason"]


def test_leading_dims_of_einsums_and_groups():
    g = go.Graph()
    x = g.input("x", (4, 8, 16), "float32")
    w = g.input("w", (16, 16), "float32")
    z = go.einsum("bij,bkj->bik", x, x)             # b leads everything
    g.output((go.einsum("bij,jk->bik", x, w),        # w has no b: not tileable
              go.softmax(z, axis=-1), go.softmax(z * 2.0, axis=0)))
    F = fusion(g.to_ir(), PassContext()).graph
    got = sorted((F.nodes[n]["op"], leading_dims(F, n)) for n in F
                 if F.nodes[n]["op"] in ("einsum", "fused"))
    # a softmax over the last axis keeps (b, i); over axis 0 it is split into a reduction
    # over b (0: b is reduced) and elementwise groups (3: every dim)
    assert [d for op, d in got if op == "einsum"] == [0, 1]
    assert [d for op, d in got if op == "fused"] in ([0, 2, 3], [0, 0, 2, 3])


def test_a_graph_output_ends_the_chain(small_tiles):
    g = go.Graph()
    q, k = (g.input(n, (4, 64, 32), "float32") for n in "qk")
    s = go.einsum("bqd,bkd->bqk", q, k)
    p = go.softmax(s, axis=-1)
    g.output((p, go.einsum("bqk,bkd->bqd", p, k)))
    _, details = tile(g)
    (region,) = details["regions"]
    assert region["ops"] == ["einsum", "fused"]


def test_plan_runs_tiled_regions_like_the_reference(small_tiles, rng):
    go.compiler.clear_cache()
    g = attention(b=2, h=3, q=96, d=8)     # 72 KiB of intermediates per head: one a block
    plan = go.compile(g, backend="numba")
    (k,) = [k for k in plan.kernels if k.impl.startswith("tiled(")]
    assert k.details["blocks"] == 6 and k.details["block"] == (1, 1) and "blas-gemm" in k.impl
    inputs = {n: rng.standard_normal((2, 3, 96, 8), dtype=np.float32) for n in "qkv"}
    ref = go.compile(g, backend="numpy", opt_level=0)(**inputs)
    first = plan(**inputs)
    np.testing.assert_allclose(first, ref, rtol=2e-5, atol=1e-6)
    second = plan(**inputs)
    assert not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, second)
    go.compiler.clear_cache()
