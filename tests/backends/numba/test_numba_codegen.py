"""Generated numba kernels against the interpreter: every elementwise op, broadcasting,
reductions, strides, in-place, epilogues, the NumPy-blocked form and the kernel caches.

Kernels compile once into the shared cache (tests/conftest.py); shapes are small so most
kernels are single-threaded, and a few large ones cover the ``prange`` loop nests."""

import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import graphopt as go
from graphopt import ir
from graphopt.ir import ops
from graphopt.ir.interpreter import eval_node, run_graph
from graphopt.passes import PassContext
from graphopt.passes.fusion import fusion

numba_codegen = pytest.importorskip("graphopt.backends.numba.codegen")
pytest.importorskip("numba")
from graphopt.backends.numba.codegen import (  # noqa: E402
    UnsupportedKernel,
    build_fused_kernel,
    build_node_kernel,
    build_numpy_blocked,
)

RTOL = {"float32": 2e-6, "complex64": 2e-6, "float64": 1e-13, "complex128": 1e-13}


def kernel_for(g, *, fast_math=False, blocked=False):
    """(fused IR, kernel computing ``g``'s single output node)."""
    H = fusion(g.to_ir(), PassContext()).graph
    (out,) = H.graph["outputs"]
    return H, _kernel(H, out, fast_math, blocked)


def _kernel(H, n, fast_math, blocked):
    d = H.nodes[n]
    if d["op"] == "fused":
        sub, pattern = d["attrs"]["graph"], d["attrs"]["pattern"]
        if blocked:
            return build_numpy_blocked(sub, pattern)
        return build_fused_kernel(sub, pattern, fast_math=fast_math)
    return build_node_kernel(H, n, fast_math=fast_math)


def run_with_kernels(H, arrays, fast_math, blocked, out=None):
    """Every fused, elementwise and reduction node through its generated kernel, the rest
    through the interpreter; returns (outputs, kernel of the first output)."""
    env = dict(zip(H.graph["inputs"], arrays))
    first = None
    for n in ir.topo_order(H):
        d = H.nodes[n]
        if n in env:
            continue
        args = [env[u] for u in ir.operands(H, n)]
        if d["op"] == "const":
            env[n] = d["attrs"]["value"]
        elif d["op"] == "fused" or (d["op"] not in ("einsum", "reshape")
                                    and ops.OPS[d["op"]].kind != ops.SOURCE):
            k = _kernel(H, n, fast_math, blocked and d["op"] == "fused")
            o = out if n == H.graph["outputs"][0] else None
            env[n] = k.fn(args, o)
            if n == H.graph["outputs"][0]:
                first = k
        else:
            env[n] = eval_node(H, n, args)
    return [env[o] for o in H.graph["outputs"]], first


def check(g, inputs, *, fast_math=False, blocked=False, rtol=None, out=None):
    """Run ``g`` with generated kernels, compare with the interpreter; returns the output
    node's kernel."""
    G = g.to_ir()
    H = fusion(G, PassContext()).graph
    arrays = [inputs[G.nodes[i]["name"]] for i in G.graph["inputs"]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = run_graph(G, arrays)[0]
        (got,), k = run_with_kernels(H, arrays, fast_math, blocked, out)
    if out is not None:
        assert got is out
    assert got.shape == expected.shape and got.dtype == expected.dtype
    if expected.dtype.kind in "biu":
        np.testing.assert_array_equal(got, expected)
    else:
        tol = rtol if rtol is not None else RTOL[expected.dtype.name]
        finite = np.isfinite(expected)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
        np.testing.assert_array_equal(got[~finite & ~np.isnan(expected)],
                                      expected[~finite & ~np.isnan(expected)])
        np.testing.assert_allclose(got[finite], expected[finite], rtol=tol,
                                   atol=tol * max(1.0, float(np.max(np.abs(expected[finite]),
                                                                    initial=0))))
    return k


SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e-30, -1e-40, 88.0, -100.0, 1e30, np.inf,
           -np.inf, np.nan, 7.25, -0.75, 2.0]


def special(dtype, shape=(3, 6)):
    vals = np.array(SPECIAL * 3, dtype=np.float64)[: int(np.prod(shape))]
    with np.errstate(all="ignore"):
        return vals.astype(dtype).reshape(shape)


UNARY = ["neg", "abs", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "gelu", "sin", "cos",
         "square", "reciprocal", "conj", "real", "imag"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", UNARY)
def test_every_unary_op_exact_math(op, dtype):
    g = go.Graph()
    x = g.input("x", (3, 6), dtype)
    g.output(getattr(go, op)(x) * 1.0)   # * 1.0: a two-op group, fused
    check(g, {"x": special(dtype)})


BINARY = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "equal", "not_equal",
          "less", "less_equal", "greater", "greater_equal"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", BINARY)
def test_every_binary_op_with_broadcasting(op, dtype):
    g = go.Graph()
    x = g.input("x", (3, 6), dtype)
    y = g.input("y", (6,), dtype)
    g.output(getattr(go, op)(x, y))
    ya = np.array([0.0, -0.0, 2.0, np.nan, -np.inf, 0.5], dtype)
    check(g, {"x": special(dtype), "y": ya})


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "pow", "maximum", "minimum",
                                "less", "equal", "abs", "neg", "square", "reciprocal", "relu",
                                "sigmoid", "gelu", "exp"])
def test_integer_ops_wrap_and_promote_as_numpy(op):
    g = go.Graph()
    x = g.input("x", (2, 7), "int32")
    y = g.input("y", (7,), "int32")
    f = getattr(go, op)
    g.output(f(x, y) if op in BINARY else f(x) + y)
    big = np.iinfo(np.int32).max
    xa = np.array([[0, 1, -1, 2, -2, big, -big - 1], [3, 46341, -46341, 7, 100, -5, 9]],
                  np.int32)
    # a zero divisor: x/0 and 0/0 are inf and nan in float64 (pow: a zero exponent)
    ya = np.array([1, 2, 3, 0, 2, 2, 31], np.int32)
    check(g, {"x": xa, "y": ya})


def test_bool_and_mixed_dtypes_where_astype():
    g = go.Graph()
    b = g.input("b", (4, 5), "bool")
    i = g.input("i", (5,), "int64")
    f = g.input("f", (4, 1), "float32")
    mixed = go.where(b, i, f) + b * i                     # float64 from int64 + float32
    cmp = go.astype(f > 0.5, "int32")
    g.output(mixed * go.astype(cmp, "float64") - go.astype(go.where(f, b, b + b), "float32"))
    rng = np.random.default_rng(1)
    check(g, {"b": rng.random((4, 5)) > 0.5, "i": np.arange(-2, 3),
              "f": np.array([[0.0], [1.0], [np.nan], [-2.0]], np.float32)})


def test_astype_edge_cases():
    g = go.Graph()
    x = g.input("x", (3, 6), "float64")
    c = g.input("c", (6,), "complex64")
    g.output(go.astype(x, "bool") * 1 + go.astype(c, "float32") + go.astype(c, "bool"))
    check(g, {"x": special("float64"), "c": np.array([0, 1j, 2 + 1j, -1, 0.5j, 3],
                                                     np.complex64)})


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_elementwise(dtype):
    g = go.Graph()
    z = g.input("z", (2, 5), dtype)
    w = g.input("w", (5,), dtype)
    e = go.exp(z) * go.conj(w) / (w + 2.0) + go.sqrt(z) - go.log(w + 3.0)
    r = go.tanh(e * 0.1) + go.sin(z) * go.cos(w) + go.reciprocal(w + 1.0)
    g.output(go.astype(go.abs(r) + go.real(r) * go.imag(e), dtype) + go.square(z))
    rng = np.random.default_rng(2)
    za = (rng.standard_normal((2, 5)) + 1j * rng.standard_normal((2, 5))).astype(dtype)
    wa = (rng.standard_normal(5) + 1j * rng.standard_normal(5)).astype(dtype)
    check(g, {"z": za, "w": wa}, rtol=1e-5 if dtype == "complex64" else 1e-12)


def test_broadcasting_patterns_and_indexing_ops():
    g = go.Graph()
    a = g.input("a", (4, 1, 6), "float64")
    b = g.input("b", (3, 1), "float64")
    c = g.input("c", (6, 3, 4), "float64")
    s = g.input("s", (), "float64")
    t = (a + b) * go.transpose(c, (2, 1, 0)) - s
    g.output(go.broadcast_to(go.tanh(t), (2, 4, 3, 6)) * a)
    rng = np.random.default_rng(3)
    check(g, {"a": rng.standard_normal((4, 1, 6)), "b": rng.standard_normal((3, 1)),
              "c": rng.standard_normal((6, 3, 4)), "s": np.array(0.25)})


def test_dims_collapse_to_one_flat_loop_where_contiguous():
    g = go.Graph()
    x = g.input("x", (4, 5, 6), "float32")
    y = g.input("y", (4, 5, 6), "float32")
    z = g.input("z", (5, 6), "float32")
    g.output((x * y + 1.0) * z)
    H, k = kernel_for(g)
    assert k.details["collapsed"] == [4, 30]       # z broadcasts over dim 0 only
    g2 = go.Graph()
    x = g2.input("x", (4, 5, 6), "float32")
    g2.output(go.exp(x) * 2.0 + x)
    H, k = kernel_for(g2)
    assert k.details["collapsed"] == [120] and k.details["mode"] == "flat"
    assert "for i0 in range(120):" in k.source


def test_zero_d_and_empty():
    g = go.Graph()
    x = g.input("x", (), "float32")
    g.output(go.exp(x) * 2.0)
    check(g, {"x": np.array(1.5, np.float32)})
    g = go.Graph()
    x = g.input("x", (0, 3), "float64")
    g.output(((x + 1.0).sum(axis=0), (x * 2.0).mean(axis=1))[0])
    check(g, {"x": np.zeros((0, 3))})


REDUCTIONS = [
    ("sum", (0,), False), ("sum", (1,), True), ("sum", None, False), ("max", (0, 2), False),
    ("min", (1,), False), ("mean", (2,), True), ("mean", None, True), ("max", (1, 2), False),
]


@pytest.mark.parametrize("op,axis,keepdims", REDUCTIONS)
def test_reductions_axes_keepdims(op, axis, keepdims):
    g = go.Graph()
    x = g.input("x", (5, 4, 6), "float64")
    g.output(getattr(go, op)(x * 0.5 - 1.0, axis=axis, keepdims=keepdims))
    rng = np.random.default_rng(4)
    check(g, {"x": rng.standard_normal((5, 4, 6))})


@pytest.mark.parametrize("dtype,op", [("int32", "sum"), ("bool", "sum"), ("int32", "mean"),
                                      ("int64", "max"), ("bool", "min"), ("float32", "sum"),
                                      ("float32", "mean"), ("complex64", "sum"),
                                      ("complex128", "mean")])
def test_reduction_accumulator_dtypes(dtype, op):
    g = go.Graph()
    x = g.input("x", (3, 50), dtype)
    y = g.input("y", (50,), dtype)
    r = getattr(go, op)(x * y, axis=1)
    g.output(r)
    rng = np.random.default_rng(5)
    big = {"int32": np.iinfo(np.int32).max // 7, "int64": 2**40}.get(dtype, 4)
    xa = rng.integers(-big, big, (3, 50)) if dtype in ("int32", "int64") else \
        rng.standard_normal((3, 50)) + (1j * rng.standard_normal((3, 50))
                                        if dtype.startswith("complex") else 0)
    ya = np.ones(50) if dtype in ("int32", "int64") else rng.standard_normal(50)
    k = check(g, {"x": np.asarray(xa).astype(dtype), "y": np.asarray(ya).astype(dtype)},
              rtol=1e-6 if dtype in ("float32", "complex64") else None)
    if (dtype, op) == ("int32", "sum"):
        assert "np.int64" in k.source       # NumPy sums int32 into int64


def test_max_min_propagate_nan_and_reduction_epilogue():
    g = go.Graph()
    x = g.input("x", (3, 6), "float32")
    g.output(go.log(go.max(x, axis=1) + 5.0) * go.min(x))
    xa = special("float32")
    with np.errstate(invalid="ignore"):
        xa[1:] = np.abs(xa[1:]) % 10
    xa[2, 3] = np.nan
    xa[0] = np.linspace(-1, 1, 6)
    H, k = kernel_for(g)
    check(g, {"x": xa})


def test_prologue_hoists_loop_invariants_and_shares_them_with_the_epilogue():
    g = go.Graph()
    x = g.input("x", (4, 9), "float64")
    m = g.input("m", (4, 1), "float64")
    shift = go.where(abs(m) < np.inf, m, 0.0)
    g.output(go.log(go.exp(x - shift).sum(axis=1, keepdims=True)) + shift)
    H, k = kernel_for(g)
    assert k.pattern == "reduction" and k.details["mode"] == "row"
    body = k.source.split("def kernel(")[1]
    # the row's shift (abs, <, where) is computed once per row, before the reduction loop,
    # and the epilogue's "+ shift" reuses it
    loop = body.index("for i1 in range(9):")
    assert body.index("abs(") < loop
    rng = np.random.default_rng(6)
    xa = rng.standard_normal((4, 9))
    ma = xa.max(axis=1, keepdims=True)
    ma[2] = -np.inf
    check(g, {"x": xa, "m": ma})
    assert body.count("abs(") == 1


# --------------------------------------------------------------------- normalization groups


def layer_norm(x, w, axis=-1):
    mu = x.mean(axis=axis, keepdims=True)
    d = x - mu
    return d / go.sqrt((d * d).mean(axis=axis, keepdims=True) + 1e-5) * w


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("which", ["softmax", "layer_norm", "logsumexp", "logsumexp_kept"])
def test_normalization_groups_one_pass_per_reduction_level(which, dtype):
    g = go.Graph()
    x = g.input("x", (5, 3, 16), dtype)
    w = g.input("w", (16,), dtype)
    out = {"softmax": lambda: go.softmax(x * 0.5, axis=-1),
           "layer_norm": lambda: layer_norm(x, w),
           "logsumexp": lambda: go.logsumexp(x, axis=-1),
           "logsumexp_kept": lambda: go.logsumexp(x, axis=-1, keepdims=True)}[which]()
    g.output(out)
    xa = np.resize(special(dtype), (5, 3, 16))
    xa[1, 1] = -np.inf        # a row of -inf: logsumexp's shift guard, softmax's nan
    xa[2, 0] = np.linspace(-3, 3, 16)
    inputs = {"x": xa, "w": np.linspace(0.5, 2, 16).astype(dtype)}
    H = fusion(g.to_ir(), PassContext()).graph
    (f,) = [n for n in H if H.nodes[n]["op"] == "fused"]
    assert H.nodes[f]["attrs"]["pattern"] == "normalization"
    check(g, inputs, rtol=1e-5 if dtype == "float32" else None)
    k = _kernel(H, f, False, False)
    body = k.source.split("def kernel(")[1]
    passes = {"softmax": 3, "layer_norm": 3, "logsumexp": 2, "logsumexp_kept": 2}[which]
    assert body.count("for i1 in") == passes and k.details["mode"] == "rows"


def test_softmax_keeps_exp_in_a_scratch_row_and_sums_float32_in_float64():
    g = go.Graph()
    x = g.input("x", (64, 3000), "float32")
    g.output(go.softmax(x, axis=-1))
    H, k = kernel_for(g, fast_math=True)
    body = k.source.split("def kernel(")[1]
    assert body.count("exp_f32(") == 1 and "s0[i1] = " in body and "= s0[i1]" in body
    # float64 accumulator, through the one add LLVM may re-associate
    assert "acc1 = sum_add(acc1, np.float64(" in body and "fastmath" not in k.source
    assert k.details["parallel"]
    rng = np.random.default_rng(3)
    xa = (rng.standard_normal((64, 3000)) * 4).astype(np.float32)
    xa[5, 17] = np.nan
    got = k.fn([xa], None)
    ex = np.exp(xa.astype(np.float64) - xa.max(-1, keepdims=True))
    ex /= ex.sum(-1, keepdims=True)
    assert np.isnan(got[5]).all() and not np.isnan(np.delete(got, 5, 0)).any()
    np.testing.assert_allclose(np.delete(got, 5, 0), np.delete(ex, 5, 0), rtol=2e-6, atol=1e-12)


@pytest.mark.parametrize("layout", ["c", "transposed"])
def test_normalization_over_two_trailing_axes_and_strided_rows(layout):
    g = go.Graph()
    x = g.input("x", (6, 4, 5), "float64")
    bias = g.input("b", (6, 1, 1), "float64")
    g.output(go.softmax(x + bias, axis=(1, 2)) * 2.0)
    rng = np.random.default_rng(4)
    xa = rng.standard_normal((6, 4, 5))
    if layout == "transposed":
        xa = np.ascontiguousarray(xa.transpose(2, 1, 0)).transpose(2, 1, 0)
    k = check(g, {"x": xa, "b": rng.standard_normal((6, 1, 1))})
    assert k.pattern == "normalization" and k.details["collapsed"] == [6, 20]


@pytest.mark.parametrize("layout", ["transposed", "strided", "fortran"])
def test_non_contiguous_inputs(layout):
    g = go.Graph()
    x = g.input("x", (5, 7), "float32")
    y = g.input("y", (7,), "float32")
    g.output(go.tanh(x) * y + x)
    rng = np.random.default_rng(7)
    base = rng.standard_normal((14, 10)).astype(np.float32)
    xa = {"transposed": base[:7, :5].T, "strided": base[::2, 1:8][:5],
          "fortran": np.asfortranarray(base[:5, :7])}[layout]
    assert not xa.flags.c_contiguous
    ya = base[0, ::1][:7]
    check(g, {"x": xa, "y": ya})


def test_in_place_on_an_operand():
    g = go.Graph()
    x = g.input("x", (6, 8), "float64")
    b = g.input("b", (8,), "float64")
    g.output(go.relu(x * 2.0 + b))
    H, k = kernel_for(g)
    assert k.inplace_ok == (True, False)
    rng = np.random.default_rng(8)
    xa, ba = rng.standard_normal((6, 8)), rng.standard_normal(8)
    expected = np.maximum(xa * 2.0 + ba, 0)
    buf = xa.copy()
    assert k.fn([buf, ba], buf) is buf
    np.testing.assert_array_equal(buf, expected)


def test_transposed_read_is_not_in_place_safe():
    g = go.Graph()
    x = g.input("x", (4, 4), "float64")
    g.output(go.transpose(x) * 2.0 + x)
    H, k = kernel_for(g)
    assert k.inplace_ok == (False,)


def test_contraction_epilogue_runs_in_place_on_the_gemm_output():
    g = go.Graph()
    x = g.input("x", (5, 8), "float32")
    w = g.input("w", (8, 6), "float32")
    b = g.input("b", (6,), "float32")
    g.output(go.gelu(go.einsum("bi,ij->bj", x, w) + b))
    H, k = kernel_for(g)
    assert k.pattern == "contraction" and k.einsum_equation == "bi,ij->bj"
    assert k.einsum_args == (0, 1) and k.inplace_ok == (False, False, False)
    rng = np.random.default_rng(9)
    xa, wa = rng.standard_normal((5, 8)).astype(np.float32), \
        rng.standard_normal((8, 6)).astype(np.float32)
    ba = rng.standard_normal(6).astype(np.float32)
    expected = run_graph(g.to_ir(), [xa, wa, ba])[0]
    out = np.empty((5, 6), np.float32)
    np.matmul(xa, wa, out=out)                    # the backend's BLAS call
    assert k.epilogue([xa, wa, ba], out) is out
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(k.fn([xa, wa, ba]), expected, rtol=1e-5, atol=1e-6)
    assert "def epilogue(args, out)" in k.source and "out[i0, i1]" in k.source


LARGE = 1 << 17   # past PARALLEL_MIN: prange loop nests


def test_parallel_flat_and_nested_loops(rng):
    g = go.Graph()
    x = g.input("x", (LARGE,), "float32")
    g.output(go.sqrt(abs(x * 3.0 - 1.0)) + x)
    xa = rng.standard_normal(LARGE).astype(np.float32)
    k = check(g, {"x": xa}, out=np.empty(LARGE, np.float32))
    assert k.details["parallel"] and "prange(" in k.source
    g = go.Graph()
    x = g.input("x", (512, 257), "float64")
    c = g.input("c", (257,), "float64")
    g.output(x * c + x)
    k = check(g, {"x": rng.standard_normal((512, 257)), "c": rng.standard_normal(257)})
    assert k.details["mode"] == "nest" and k.details["parallel"]


@pytest.mark.parametrize("axis,mode", [(1, "row"), (0, "column"), (None, "full")])
def test_parallel_reductions(axis, mode, rng):
    g = go.Graph()
    x = g.input("x", (384, 520), "float32")
    g.output(go.sum(x * x - 0.5, axis=axis))
    k = check(g, {"x": rng.standard_normal((384, 520)).astype(np.float32)}, rtol=1e-5)
    assert k.details["mode"] == mode and k.details["parallel"]


def test_fast_math_hook_uses_numba_math(rng):
    numba_math = pytest.importorskip("graphopt.backends.numba.numerics")
    if ("tanh", "float32") not in getattr(numba_math, "FAST", {}):
        pytest.skip("numba_math has no tanh_f32")
    g = go.Graph()
    x = g.input("x", (4, 33), "float32")
    g.output(go.tanh(x) * go.exp(x * 0.5))
    xa = (rng.standard_normal((4, 33)) * 4).astype(np.float32)
    xa[0, :4] = [np.inf, -np.inf, np.nan, 0.0]
    fast = check(g, {"x": xa}, fast_math=True, rtol=3e-6)
    exact = check(g, {"x": xa}, fast_math=False)
    assert "tanh_f32(" in fast.source and "FAST[" in fast.source
    assert "np.tanh(" in exact.source and "FAST" not in exact.source


def test_numpy_blocked_alternative(rng):
    g = go.Graph()
    x = g.input("x", (300, 70), "float32")
    y = g.input("y", (70,), "float32")
    t = go.gelu(x * y) + go.sigmoid(x) - go.transpose(go.transpose(x))
    g.output(go.where(t > 0, t, 0.5 * t))
    k = check(g, {"x": rng.standard_normal((300, 70)).astype(np.float32),
                  "y": rng.standard_normal(70).astype(np.float32)}, blocked=True, rtol=1e-5)
    assert k.impl == "numpy-blocked" and "out=" in k.source
    g = go.Graph()
    x = g.input("x", (5, 8), "float64")
    w = g.input("w", (8, 6), "float64")
    g.output(go.tanh(go.einsum("bi,ij->bj", x, w)) * 2.0)
    H, kb = kernel_for(g, blocked=True)
    xa, wa = rng.standard_normal((5, 8)), rng.standard_normal((8, 6))
    out = xa @ wa
    kb.epilogue([xa, wa], out)
    np.testing.assert_allclose(out, np.tanh(xa @ wa) * 2.0, rtol=1e-12)
    with pytest.raises(UnsupportedKernel, match="elementwise and epilogue"):
        kernel_for(_sum_graph(), blocked=True)


def _sum_graph():
    g = go.Graph()
    x = g.input("x", (3, 4), "float64")
    g.output((x * 2.0).sum())
    return g


def test_unsupported_groups_say_why():
    g = go.Graph()
    x = g.input("x", (3,), "float16")
    g.output(x * x + x)
    with pytest.raises(UnsupportedKernel, match="float16"):
        kernel_for(g)
    g = go.Graph()
    z = g.input("z", (3,), "complex64")
    g.output(go.maximum(z, z * 2.0))
    with pytest.raises(UnsupportedKernel, match="complex"):
        kernel_for(g)
    G = _sum_graph().to_ir()
    e = [n for n in G if G.nodes[n]["op"] == "const"][0]
    with pytest.raises(UnsupportedKernel):
        build_node_kernel(G, e)


def test_in_process_cache_is_structural():
    def graph(name):
        g = go.Graph(name)
        x = g.input("x", (7,), "float64")
        g.output(go.exp(x) * 3.0)
        return g
    _, k1 = kernel_for(graph("a"))
    _, k2 = kernel_for(graph("b"))
    assert k1.fn is k2.fn and k2.details["numba_cache"] == "memory"
    assert os.path.dirname(k1.details["module"]) == numba_codegen.cache_dir()


_CHILD = textwrap.dedent("""
    import json, numba, numpy as np, graphopt as go
    numba.njit(lambda: 0)()  # the first compile of a process pays numba's LLVM set-up
    from graphopt.passes import PassContext
    from graphopt.passes.fusion import fusion
    from graphopt.backends.numba.codegen import build_fused_kernel
    g = go.Graph()
    x = g.input("x", (256, 300), "float64")
    g.output(go.gelu(x * 1.25 + 0.5).sum(axis=1) * 2.0)
    H = fusion(g.to_ir(), PassContext()).graph
    (f,) = [n for n in H if H.nodes[n]["op"] == "fused"]
    k = build_fused_kernel(H.nodes[f]["attrs"]["graph"], H.nodes[f]["attrs"]["pattern"],
                           fast_math=False)
    y = k.fn([np.linspace(-2, 2, 256 * 300).reshape(256, 300)])
    print(json.dumps({**k.details, "y": y.tolist()}))
""")


def test_disk_cache_is_reused_by_a_second_process(tmp_path):
    env = {**os.environ, "GRAPHOPT_CACHE_DIR": str(tmp_path)}
    runs = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                           text=True)
        assert p.returncode == 0, p.stderr
        runs.append(json.loads(p.stdout.splitlines()[-1]))
    assert runs[0]["numba_cache"] == "miss" and runs[1]["numba_cache"] == "hit"
    assert runs[0]["module"] == runs[1]["module"]
    assert os.path.dirname(runs[0]["module"]) == str(tmp_path)
    assert runs[0]["parallel"]
    assert runs[1]["compile_seconds"] < runs[0]["compile_seconds"] / 4
    assert runs[0]["y"] == runs[1]["y"]


def test_read_only_operands_and_other_byte_orders():
    g = go.Graph()
    x = g.input("x", (3, 6), "float32")
    table = g.const(np.linspace(-1, 1, 6).astype(np.float32))   # read-only array operand
    g.output(go.exp(x * table) + 1.0)
    xa = special("float32")
    xa.setflags(write=False)
    check(g, {"x": xa})
    H, k = kernel_for(g)
    swapped = xa.astype(">f4")
    np.testing.assert_array_equal(k.fn([swapped, np.asarray(table_value(H))]),
                                  k.fn([xa, np.asarray(table_value(H))]))


def table_value(H):
    (c,) = [n for n in H if H.nodes[n]["op"] == "const"]
    return H.nodes[c]["attrs"]["value"]


@pytest.mark.parametrize("n, releases", [(64, False), (1 << 15, True)])
def test_small_kernels_keep_the_gil_large_ones_release_it(n, releases):
    """Under contention every GIL release is a hand-over and a wait to get it back: a kernel
    below NOGIL_MIN elements keeps it; larger ones (and every parallel one) release it."""
    from graphopt.backends.numba.kernels.source import NOGIL_MIN

    assert (n >= NOGIL_MIN) == releases
    g = go.Graph("gil")
    x = g.input("x", (n,), "float64")
    g.output(go.exp(x) * 2.0 + 1.0)
    plan = go.compile(g, backend="numba", cache=False)
    (k,) = [k for k in plan.kernels if k.impl == "numba-fused"]
    assert f"nogil={releases}" in k.source
    assert ("releases the GIL" if releases else "keeps the GIL") in k.source
    x0 = np.linspace(-1, 1, n)
    np.testing.assert_allclose(plan(x=x0), np.exp(x0) * 2.0 + 1.0, rtol=1e-6)
