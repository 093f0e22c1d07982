"""Property tests of the fusion pass and of the kernels generated for its groups, on
graphopt.testing's random graphs, with the interpreter as the oracle."""

import warnings

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphopt import ir
from graphopt.analysis.fused import INDEXING, classify
from graphopt.ir import ops
from graphopt.ir.interpreter import run_graph
from graphopt.passes import PassContext
from graphopt.passes.fusion import fusion
from graphopt.testing import assert_pass_preserves_semantics, graphs
from graphopt.testing.semantics import compare_outputs, random_inputs, tolerance

FUSIBLE = ("unary", "binary", "reduce", "matmul", "softmax", "layout", "const", "compare",
           "astype", "shared", "einsum")


def test_fusion_preserves_semantics():
    assert_pass_preserves_semantics(fusion, max_examples=40)


def test_fusion_preserves_semantics_on_fusion_heavy_graphs():
    assert_pass_preserves_semantics(fusion, max_examples=40, ops=FUSIBLE, max_nodes=24,
                                    dtypes=("float32", "float64", "int32", "bool", "complex64"))


def _member_kind_ok(sub, n) -> bool:
    op = sub.nodes[n]["op"]
    if op in ("input", "const"):
        return op == "input" or np.prod(sub.nodes[n]["shape"]) == 1
    return op in INDEXING or op == "einsum" or ops.OPS[op].kind in (ops.ELEMENTWISE,
                                                                    ops.REDUCTION)


@settings(max_examples=60)
@given(graphs(max_nodes=24, ops=FUSIBLE))
def test_fused_groups_are_well_formed(g):
    G = g.to_ir()
    res = fusion(G, PassContext())
    H, details = res.graph, res.record
    ir.verify(H)
    assert nx.is_directed_acyclic_graph(H)
    fused = [n for n in ir.topo_order(H) if H.nodes[n]["op"] == "fused"]
    assert details["kernels"] == len(fused) == len(details["groups"])
    assert sorted(details["fused_nodes"]) == sorted(fused)
    by_node = dict(zip(details["fused_nodes"], zip(details["groups"], details["patterns"])))
    for f in fused:
        attrs = H.nodes[f]["attrs"]
        sub = attrs["graph"]
        ir.verify(sub)
        ops.infer("fused", [H.nodes[u]["shape"] for u in ir.operands(H, f)],
                  [H.nodes[u]["dtype"] for u in ir.operands(H, f)], attrs)
        ins = sub.graph["inputs"]
        assert [sub.nodes[i]["name"] for i in ins] == [f"in{k}" for k in range(len(ins))]
        assert len(ins) == len(ir.operands(H, f))
        (root,) = sub.graph["outputs"]
        members = [n for n in sub if sub.nodes[n]["op"] not in ("input", "const")]
        assert all(_member_kind_ok(sub, n) for n in sub)
        # only the root's value leaves the group; every other member is used inside it
        assert all(sub.out_degree(n) > 0 for n in sub if n != root)
        assert classify(sub, members, root)[0] == attrs["pattern"]
        group, pattern = by_node[f]
        assert pattern == attrs["pattern"]
        assert sorted(group) == sorted(sub.nodes[n]["op"] for n in members)
        # a lone op only where it absorbed a constant or its NumPy form is several passes
        assert len(members) > 1 or any(sub.nodes[n]["op"] == "const" for n in sub) or \
            sub.nodes[root]["op"] in ("gelu", "sigmoid", "relu")
    for r in details["rejected"]:
        assert r["reason"] and r["node"] in G and G.nodes[r["node"]]["op"] == r["op"]
    # idempotent: nothing left to fuse into a fused node
    again = fusion(H, PassContext())
    assert again.record["kernels"] == 0
    assert ir.structural_hash(again.graph) == ir.structural_hash(H)


numba_codegen = pytest.importorskip("graphopt.backends.numba.codegen")


@pytest.mark.slow
@settings(max_examples=20)
@given(graphs(max_nodes=16, ops=FUSIBLE,
              dtypes=("float32", "float64", "int32", "bool", "complex128")),
       st.booleans())
def test_generated_kernels_equal_the_interpreter(g, fast_math):
    H = fusion(g.to_ir(), PassContext()).graph
    rng = np.random.default_rng(0)
    for f in [n for n in H if H.nodes[n]["op"] == "fused"]:
        sub, pattern = H.nodes[f]["attrs"]["graph"], H.nodes[f]["attrs"]["pattern"]
        args = random_inputs(sub, rng)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = run_graph(sub, args)[0]
            try:
                k = numba_codegen.build_fused_kernel(sub, pattern, fast_math=fast_math)
            except numba_codegen.UnsupportedKernel:
                continue
            got = k.fn(args)
        rt = max([tolerance(sub.nodes[n]["dtype"])[0] for n in sub] + [1e-5 if fast_math
                                                                       else 0.0])
        diff = compare_outputs(expected, got, rt, rt)
        assert diff is None, f"{diff}\n{k.source}"
