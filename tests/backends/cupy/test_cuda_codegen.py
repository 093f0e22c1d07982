"""CPU tests of the CUDA source generator (no cupy, no GPU).

Besides the structure of the generated programs, the emitted C is *run*: a host shim makes
the stage bodies plain C++ (``__device__`` dropped, ``complex`` = ``std::complex``, cupy's
``float16`` a float that rounds on construction), g++ compiles each program once, and each
stage runs the way cupy runs it (ElementwiseKernel: one body per element; ReductionKernel:
``map -> REDUCE -> POST_MAP`` with cupy's macros). Einsum stages run through the GEMM
mapping with NumPy. The result must equal the interpreter.
"""

from __future__ import annotations

import tempfile

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphopt as go
from graphopt import ir
from graphopt.analysis.fused import node_subgraph
from graphopt.backends.cupy import codegen as cg
from graphopt.backends.cupy.kernels.contractions import (
    contraction_candidates,
)
from graphopt.backends.cupy.kernels.cublas import Cublas
from graphopt.contraction.program.gemm import gemm_of, run_gemm, transpose_copy_bytes, view_is_free
from graphopt.contraction.rates import DEVICE_RATES
from graphopt.contraction.value import Contraction
from graphopt.ir.einsum import parse as einsum_parse
from graphopt.ir.interpreter import run_graph
from graphopt.testing import graphs, inputs_for
from graphopt.testing.generators import random_values
from graphopt.testing.semantics import compare_outputs, tolerance
from tests.backends.cuda_host import needs_gxx, run_on_host  # noqa: E402


def _single_output(G, k=0):
    """``G`` with only its ``k``-th output, dead nodes dropped (a whole graph as one group)."""
    H = ir.copy_graph(G)
    o = H.graph["outputs"][k]
    keep = set(nx.ancestors(H, o)) | {o} | set(H.graph["inputs"])
    H.remove_nodes_from([n for n in list(H) if n not in keep])
    H.graph["outputs"] = [o]
    H.graph["output_structure"] = {"kind": "tensor"}
    ir.drop_derived(H)
    return H


def _check(G, inputs: dict, **kw):
    prog = cg.compile_group(G, **kw)
    args = [inputs[G.nodes[i]["name"]] for i in G.graph["inputs"]]
    expected = run_graph(G, args)[0]
    with tempfile.TemporaryDirectory() as d:
        got = run_on_host(prog, args, d)
    rt = max(tolerance(G.nodes[n]["dtype"])[0] for n in G)
    diff = compare_outputs(expected, got, rt, rt)
    assert diff is None, f"{diff}\n{prog.source}"
    return prog


# ------------------------------------------------------------------------------ strings


def test_literals_are_exact_and_typed():
    assert cg.literal(0.5, "float32") == "0.5f"
    assert float(cg.literal(0.1, "float32")[:-1]) == float(np.float32(0.1))
    assert cg.literal(0.1, "float64") == "0.1"
    assert cg.literal(-2**31, "int32") == "(-2147483647 - 1)"
    assert cg.literal(5, "int64") == "5LL"
    assert cg.literal(True, "bool") == "true"
    assert cg.literal(np.inf, "float32") == "__int_as_float(0x7f800000)"
    assert "0x7ff8" in cg.literal(np.nan, "float64")
    assert cg.literal(1 + 2j, "complex64") == "complex<float>(1.0f, 2.0f)"


def test_casts_follow_numpy():
    assert cg.cast("x", "float32", "float32") == "x"
    assert cg.cast("x", "float16", "float32") == "x"          # float16 computes in float
    assert cg.cast("x", "float32", "float16") == "go_f16((float)(x))"
    assert cg.cast("x", "complex64", "float64") == "((double)((x).real()))"
    assert cg.cast("x", "float32", "complex128") == "complex<double>((double)(x))"
    assert cg.cast("x", "int64", "bool") == "((x) != 0)"


def test_unsupported_ops_are_refused():
    g = go.Graph()
    a, b = g.input("a", (3,), "complex64"), g.input("b", (3,), "complex64")
    g.output(go.maximum(a, b))
    with pytest.raises(cg.Unsupported, match="lexicographic"):
        cg.compile_group(g.to_ir())


# ---------------------------------------------------------------------------- structure


def _ir(build):
    g = go.Graph()
    build(g)
    return g.to_ir()


def test_elementwise_group_is_one_kernel_with_readable_source():
    def build(g):
        x, b = g.input("x", (4, 8), "float32"), g.input("b", (8,), "float32")
        g.output(go.gelu(x + b) * 0.5)
    prog = cg.compile_group(_ir(build))
    (s,) = prog.stages
    assert s.kind == "elementwise" and s.dest == "out"
    assert [o.source for o in s.operands] == ["input", "input"]
    assert "go_gelu(" in s.operation and "0.5f" in s.operation and "go_gelu" in s.preamble
    assert "// gelu @" in prog.source and "test_cuda_codegen.py" in prog.source


def test_layout_ops_become_views_of_the_arguments():
    prog = cg.compile_group(_ir(lambda g: g.output(
        (lambda x: x + x.T)(g.input("x", (3, 3), "float64")))))
    chains = [o.chain for o in prog.stages[0].operands]
    assert chains == [(), (("transpose", (1, 0)),)]


def test_softmax_is_two_reductions_and_an_epilogue():
    prog = cg.compile_group(_ir(lambda g: g.output(go.softmax(g.input("x", (4, 8), "float32")))))
    assert [s.kind for s in prog.stages] == ["reduction", "reduction", "elementwise"]
    assert prog.stages[0].reduce_expr == "go_max(a, b)" and prog.stages[1].reduce_expr == "a + b"


def test_elementwise_after_reduction_folds_into_post_map():
    prog = cg.compile_group(_ir(lambda g: g.output(
        go.log(go.sum(go.exp(g.input("x", (4, 8), "float32")), axis=1)) * 2.0)))
    (s,) = prog.stages
    assert s.kind == "reduction" and "post0(a)" in s.post_map_expr and "log(" in s.preamble


def test_contraction_epilogue_runs_in_place_on_the_output():
    def build(g):
        x, w = g.input("x", (4, 8), "float32"), g.input("w", (8, 3), "float32")
        g.output(go.relu(go.einsum("ij,jk->ik", x, w) + g.input("b", (3,), "float32")))
    G = _ir(build)
    prog = cg.compile_group(G)
    assert [(s.kind, s.dest) for s in prog.stages] == [("einsum", "out"), ("elementwise", "out")]
    # When the output buffer is also an operand the contraction may not write it first.
    aliased = cg.compile_group(G, aliased={2})
    assert [s.dest for s in aliased.stages] == ["temp", "out"]


@needs_gxx
def test_scalar_epilogue_folds_into_the_gemm_alpha(rng):
    def build(g):
        q, k = g.input("q", (2, 4, 3), "float32"), g.input("k", (2, 5, 3), "float32")
        g.output(go.einsum("bqd,bkd->bqk", q, k) / 8.0)
    G = _ir(build)
    prog = cg.compile_group(G)
    assert [s.kind for s in prog.stages] == ["einsum"] and prog.stages[0].alpha == 0.125
    assert "alpha = 0.125" in prog.source
    _check(G, {"q": random_values(rng, (2, 4, 3), "float32"),
               "k": random_values(rng, (2, 5, 3), "float32")})
    G2 = _ir(lambda g: g.output(2.0 / go.einsum("ij,jk->ik", g.input("a", (2, 3), "float32"),
                                                g.input("b", (3, 2), "float32"))))
    assert [s.kind for s in cg.compile_group(G2).stages] == ["einsum", "elementwise"]


def test_aliased_reduction_goes_through_a_temporary():
    G = _ir(lambda g: g.output(go.sum(g.input("x", (4, 4), "float32"), axis=0)))
    assert cg.compile_group(G, aliased={0}).via_temp


def test_scalar_constants_become_literals_and_arrays_operands():
    def build(g):
        x = g.input("x", (4,), "float32")
        g.output(x * 3.0 + g.const(np.arange(4, dtype=np.float32)))
    prog = cg.compile_group(_ir(build))
    (s,) = prog.stages
    assert "3.0f" in s.operation
    assert [o.source for o in s.operands] == ["input", "const"]
    np.testing.assert_array_equal(prog.constants[0], np.arange(4))


def test_single_node_subgraph_and_input_literals():
    g = go.Graph()
    x = g.input("x", (4,), "float32")
    g.output(x + 2.0)
    G = g.to_ir()
    (n,) = [m for m in G if G.nodes[m]["op"] == "add"]
    sub = node_subgraph(G, n)
    assert [sub.nodes[i]["name"] for i in sub.graph["inputs"]] == ["in0", "in1"]
    prog = cg.compile_group(sub, literals={1: 2.0})
    assert "2.0f" in prog.stages[0].operation and len(prog.stages[0].operands) == 1


def test_kernel_names_are_structural():
    G1 = _ir(lambda g: g.output(go.exp(g.input("x", (4,), "float32"))))
    G2 = _ir(lambda g: g.output(go.exp(g.input("x", (4,), "float32"))))
    assert cg.compile_group(G1).name == cg.compile_group(G2).name


# --------------------------------------------------------------------------------- GEMM


@pytest.mark.parametrize("eq,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk->ki", [(3, 4), (4, 5)]),                  # swapped operands
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("ijk,kl->lji", [(2, 3, 4), (4, 5)]),             # transposed output
    ("ij,kl->ijkl", [(2, 3), (4, 5)]),                # outer product
    ("iaj,jb->ib", [(3, 2, 4), (4, 5)]),              # 'a' summed before the GEMM
    ("i,i->", [(7,), (7,)]),
    ("bi,bi->b", [(3, 4), (3, 4)]),
])
def test_gemm_plan_matches_numpy_einsum(eq, shapes, rng):
    p = gemm_of(eq, shapes)
    a, b = (rng.standard_normal(s) for s in shapes)
    out = np.empty(einsum_parse(eq, shapes).output_shape)
    run_gemm(np, p, a, b, out)
    np.testing.assert_allclose(out, np.einsum(eq, a, b), rtol=1e-12, atol=1e-12)
    assert DEVICE_RATES.gemm_seconds(p, "float64", True,
                                     transpose_copy_bytes(p, shapes, 8)) > 0


def _colmajor(x, op, ld):
    """What cuBLAS reads for operand descriptor ``(op, ld)`` of row-major matrix view ``x``:
    the stored column-major matrix, with ``op`` applied (it must equal ``x.T``)."""
    R, C = x.shape
    rows, cols = (C, R) if op == 0 else (R, C)
    stored = np.lib.stride_tricks.as_strided(x, shape=(rows, cols),
                                             strides=(x.itemsize, ld * x.itemsize))
    assert ld >= max(1, rows)
    return stored if op == 0 else stored.T


@pytest.mark.parametrize("make", [
    lambda r: r.standard_normal((5, 7)),                      # C-ordered
    lambda r: r.standard_normal((7, 5)).T,                    # F-ordered
    lambda r: r.standard_normal((5, 9))[:, :7],               # padded rows
    lambda r: r.standard_normal((1, 7)), lambda r: r.standard_normal((5, 1)),
    lambda r: r.standard_normal((9, 1)).T,
])
def test_cublas_layout_descriptors_read_the_transpose(make, rng):
    x = make(rng)
    op, ld, bs = Cublas._layout(x)
    np.testing.assert_array_equal(_colmajor(x, op, ld), x.T)
    assert bs == 0


def test_cublas_layout_refuses_general_strides(rng):
    assert Cublas._layout(rng.standard_normal((6, 8))[::2, ::2]) is None


def _device_contraction(eq, shapes, dtype="float32"):
    return Contraction.build(eq, shapes, dtype, [dtype] * len(shapes), None, DEVICE_RATES)


def test_contraction_candidates_follow_the_device_s_form():
    first = lambda eq, shapes: contraction_candidates(  # noqa: E731
        _device_contraction(eq, shapes))[0][0]
    assert first("ij,jk->ik", [(64, 32), (32, 16)]) == "cublas-gemm"
    # on a device every pair that maps onto a GEMM is one, however small or outer
    assert first("ij,jk->ik", [(2, 2), (2, 2)]) == "cublas-gemm"
    assert first("ij,kl->ijkl", [(2, 3), (4, 5)]) == "cublas-gemm"
    assert first("ii,ij->j", [(3, 3), (3, 4)]) == "cupy-einsum"
    assert first("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]) == "opt_einsum-pairwise"
    c = _device_contraction("ijk,kl->lji", [(8, 9, 10), (10, 11)])
    assert c.forms == ("gemm",) and c.device
    assert [impl for impl, _ in contraction_candidates(c)] == ["cublas-gemm", "cupy-einsum"]


def test_gemm_plan_refuses_diagonals():
    assert gemm_of("ii,ij->j", [(3, 3), (3, 4)]) is None


def test_view_is_free_knows_transposed_matrices():
    assert view_is_free((4, 5), (0, 1), (4, 5))
    assert view_is_free((4, 5), (1, 0), (5, 4))          # an F-ordered matrix
    assert not view_is_free((2, 3, 4), (1, 0, 2), (3, 8))  # merging non-adjacent axes


# ----------------------------------------------------------------- emitted C, executed


DTYPE_CASES = ["float32", "float64", "float16", "int32", "int64", "complex64", "bool"]


@needs_gxx
@pytest.mark.parametrize("dtype", DTYPE_CASES)
def test_emitted_elementwise_code_matches_interpreter(dtype, rng):
    def build(g):
        x, y = g.input("x", (3, 4), dtype), g.input("y", (4,), dtype)
        if dtype == "bool":
            g.output(go.where(x, y, x) == (x * y + y))
            return
        z = x * y + x
        if np.dtype(dtype).kind in "fc":
            z = go.exp(go.tanh(z) * 0.5) - go.sigmoid(y) / (go.abs(x) + 1.0)
            z = z + go.square(go.sqrt(go.abs(y) + 0.25)).astype(dtype)
        if np.dtype(dtype).kind in "fi":
            z = go.maximum(z, x.T.T) + go.relu(y - 1)
        g.output(z)
    G = _ir(build)
    vals = {"x": random_values(rng, (3, 4), dtype), "y": random_values(rng, (4,), dtype)}
    _check(G, vals)


@needs_gxx
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "float64"])
def test_emitted_reductions_match_interpreter(dtype, rng):
    def build(g):
        x = g.input("x", (3, 4, 5), dtype)
        s = go.softmax(x.astype("float32") if dtype.startswith("int") else x, axis=1)
        g.output(s.sum(axis=(0, 2)) + go.mean(x, axis=1).max() + go.min(x))
    G = _ir(build)
    _check(G, {"x": random_values(rng, (3, 4, 5), dtype)})


@needs_gxx
def test_float16_rounding_helper_matches_numpy():
    xs = np.array([0.1, 1 / 3, 65504, 65519.9, 65520, 1e-5, 6.1e-5, -2.5e-8, 3e-8, -0.0, 1e30,
                   np.inf, -np.inf, 2049, 2051, 1.0009765625 * 3], dtype=np.float32)
    g = go.Graph()
    x = g.input("x", xs.shape, "float32")
    g.output(x.astype("float16").astype("float32"))
    _check(g.to_ir(), {"x": xs})


@needs_gxx
def test_contraction_group_with_transposed_epilogue_operand(rng):
    def build(g):
        a, b = g.input("a", (4, 6), "float32"), g.input("b", (6, 4), "float32")
        c = go.einsum("ij,jk->ik", a, b)
        g.output(go.tanh(c) + c.T * 0.5)
    _check(_ir(build), {"a": random_values(rng, (4, 6), "float32"),
                        "b": random_values(rng, (6, 4), "float32")})




@pytest.mark.slow
@needs_gxx
@settings(max_examples=12)
@given(data=st.data())
def test_whole_random_graphs_as_one_group_match_interpreter(data):
    """A whole hypothesis graph compiled as one group: every op, layout chains, multiple
    reductions and einsums become stages; the emitted C agrees with the interpreter."""
    g = data.draw(graphs(max_nodes=10, dtypes=("float64", "float32", "int64", "complex128")))
    G = _single_output(g.to_ir())
    if G.nodes[G.graph["outputs"][0]]["op"] in ("input", "const"):
        return
    vals = data.draw(inputs_for(G))
    try:
        cg.compile_group(G)
    except cg.Unsupported:
        return
    _check(G, vals)
