"""The scalar-semantics table, op by op: every elementwise op and reduction, on every dtype
both kernel generators take, through the numba generator and through the CUDA generator
(its C run on the host by g++), on NumPy's corner values (zeros of both signs, ties, NaN,
infinities, the integer extremes), against the interpreter.

Exact ops must agree bit for bit (NaN for NaN, the sign of a zero); transcendentals,
sigmoid/GELU, powers, complex division and float sums within the dtype's tolerance. Where
a generator refuses an op, the table's refusal must say why. The CUDA generator runs the
whole matrix (one g++ run); the numba generator runs the cases that cover each rule of the
table in the default suite and the whole matrix under ``thorough``.
"""

from __future__ import annotations

import itertools
import operator
import re
import tempfile
import warnings

import numpy as np
import pytest

import graphopt as go
from graphopt.analysis.fused import node_subgraph
from graphopt.backends import scalar_semantics as ss
from graphopt.backends.cupy import codegen as cg
from graphopt.backends.numba import codegen as nc
from graphopt.backends.numba.kernels.source import SUPPORTED as NUMBA_DTYPES
from graphopt.ir.interpreter import run_graph
from graphopt.testing.semantics import compare_outputs, tolerance
from tests.backends.cuda_host import needs_gxx, run_all_on_host  # noqa: E402

DTYPES = ["bool", "int32", "int64", "float32", "float64", "complex64", "complex128"]
UNARY = ["neg", "abs", "exp", "log", "sqrt", "tanh", "sin", "cos", "square", "reciprocal",
         "conj", "relu", "sigmoid", "gelu", "real", "imag"]
BINARY = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le",
          "gt", "ge"]
REDUCTIONS = ["sum", "mean", "max", "min"]
MIXED = [("int32", "float32"), ("int32", "int64"), ("bool", "int32"), ("float32", "float64"),
         ("int64", "float32"), ("float32", "complex64"), ("float64", "complex64")]
# how the graph builder spells each binary op
BUILD = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
         "div": operator.truediv, "pow": operator.pow, "maximum": go.maximum,
         "minimum": go.minimum, "eq": operator.eq, "ne": operator.ne, "lt": operator.lt,
         "le": operator.le, "gt": operator.gt, "ge": operator.ge}
INEXACT = set(ss.MATH) | {"sigmoid", "gelu", "pow", "sum", "mean"}

# Each rule of the table, and the cases of the default suite that exercise it for numba
# (op/dtypes): loop dtypes of mixed operands, bool logic, NaN and ties in maximum/minimum,
# the integer reciprocal, integer wrapping, complex refusals, accumulators and identities,
# the logistic of reals and of integers, casts.
CORE = {"add/int32/float32", "div/int32/int32", "eq/int64/float32", "sub/int32/int32",
        "mul/int32/int32", "add/bool/bool", "mul/bool/bool", "maximum/bool/bool",
        "maximum/float64/float64", "minimum/float32/float32", "maximum/int64/int64",
        "reciprocal/int32", "reciprocal/int64", "reciprocal/float32", "neg/int32",
        "abs/int32", "abs/complex64", "square/int64", "maximum/complex64/complex64",
        "lt/float32/complex64", "relu/complex128", "max/complex64", "relu/float32",
        "sum/float32", "mean/int32", "max/float64", "min/int64", "max/bool", "sum/bool",
        "sigmoid/int32", "sigmoid/float32", "gelu/int32", "gelu/float64", "pow/int64/int64",
        "pow/float32/float32", "exp/complex64", "astype/float64/int32",
        "astype/complex64/bool", "where/float32/int64", "imag/float32", "real/complex128"}


def corner_values(dtype: str, exponent: bool = False) -> np.ndarray:
    """NumPy's corner cases of ``dtype``; ``exponent``: integer powers NumPy computes."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return np.array([False, True])
    if dt.kind == "i":
        if exponent:
            return np.array([0, 1, 2, 3, 5, 31], dtype)
        i = np.iinfo(dt)
        return np.array([0, 1, -1, 2, -2, 3, -7, 100, i.min, i.max, i.min + 1, i.max - 1],
                        dtype)
    reals = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 20.0, -20.0, 1e-30, 1e30, 700.0, -700.0,
             np.nan, np.inf, -np.inf]
    if dt.kind == "f":
        return np.array(reals, dtype)
    # complex: finite parts (the host shim's std::complex is not CUDA's thrust::complex on
    # infinities and NaN; NumPy's special values there are the numba tests' business)
    parts = [0.0, -0.0, 1.0, -1.5, 0.5, 3.0]
    return np.array([complex(r, i) for r in parts for i in parts], dtype)


def _case(key, build, values):
    g = go.Graph()
    try:
        out = build(g)
    except go.GraphError:
        return None
    g.output(out)
    return key, g.to_ir(), values


def cases():
    """(key, IR with one op, input arrays) for every op and dtype the graph builder takes."""
    out = []
    for op, dt in itertools.product(UNARY, DTYPES):
        v = corner_values(dt)
        out.append(_case(f"{op}/{dt}", lambda g, op=op, dt=dt, v=v:
                         getattr(go, op)(g.input("x", v.shape, dt)), [v]))
    pairs = [(a, a) for a in DTYPES] + MIXED + [(b, a) for a, b in MIXED]
    for op, (a, b) in itertools.product(BINARY, pairs):
        va, vb = corner_values(a), corner_values(b, exponent=op == "pow")
        if op == "pow" and "complex" in a + b:   # the phase of an overflowed power is noise
            vb = vb[np.isfinite(vb) & (np.abs(vb) <= 20)]
        x, y = np.repeat(va, len(vb)), np.tile(vb, len(va))
        out.append(_case(f"{op}/{a}/{b}", lambda g, op=op, a=a, b=b, x=x, y=y:
                         BUILD[op](g.input("x", x.shape, a), g.input("y", y.shape, b)),
                         [x, y]))
    for op, dt in itertools.product(REDUCTIONS, DTYPES):
        v = corner_values(dt)
        if op == "mean" and v.dtype.kind == "i":   # float64 sums of these are exact
            v = v[np.abs(v.astype(np.float64)) < 2**40]
        v = np.resize(v, (6, 8))
        out.append(_case(f"{op}/{dt}", lambda g, op=op, dt=dt, v=v:
                         getattr(go, op)(g.input("x", v.shape, dt), axis=1), [v]))
    for a, b in itertools.product(DTYPES, DTYPES):
        v = corner_values(a)
        out.append(_case(f"astype/{a}/{b}", lambda g, a=a, b=b, v=v:
                         g.input("x", v.shape, a).astype(b), [v]))
    for c, t in [("bool", "float32"), ("float32", "int64"), ("int32", "complex64"),
                 ("complex64", "float64")]:
        vc, vt = corner_values(c), corner_values(t)
        n = min(len(vc), len(vt))
        out.append(_case(f"where/{c}/{t}", lambda g, c=c, t=t, n=n: go.where(
            g.input("c", (n,), c), g.input("x", (n,), t), g.input("y", (n,), t)),
            [vc[:n], vt[:n], vt[::-1][:n].copy()]))
    return [c for c in out if c is not None]


CASES = cases()


def _op(G) -> str:
    return G.nodes[G.graph["outputs"][0]]["op"]


def _operand_dtypes(G) -> list[str]:
    return [G.nodes[i]["dtype"] for i in G.graph["inputs"]]


def _complex_operand(G) -> bool:
    return any(np.dtype(t).kind == "c" for t in _operand_dtypes(G))


def reference(G, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run_graph(G, list(args))[0]


def assert_same(key, expected, got, op, dtype, complex_operand=False):
    got = np.asarray(got)
    assert got.dtype == expected.dtype and got.shape == expected.shape, key
    # complex division and abs round differently by platform (Smith's method, hypot)
    if op in INEXACT or (op in ("div", "abs") and complex_operand):
        rt, at = tolerance(dtype)
        diff = compare_outputs(expected, got, rt, at)
        assert diff is None, f"{key}: {diff}"
        return
    if expected.dtype.kind in "fc":
        for part in ((np.real, np.imag) if expected.dtype.kind == "c" else (np.real,)):
            e, g = part(expected), part(got)
            same = (e == g) | (np.isnan(e) & np.isnan(g))
            same &= (np.signbit(e) == np.signbit(g)) | np.isnan(e)
            bad = np.flatnonzero(~same)
            assert not bad.size, f"{key}: at {bad[:5]} expected {e.flat[bad[:5]]}, got " \
                                 f"{g.flat[bad[:5]]}"
    else:
        bad = np.flatnonzero(expected != got)
        assert not bad.size, f"{key}: at {bad[:5]} expected {expected.flat[bad[:5]]}, got " \
                             f"{got.flat[bad[:5]]}"


def test_the_matrix_covers_every_op_and_rule():
    keys = {k for k, _, _ in CASES}
    assert CORE <= keys, sorted(CORE - keys)
    assert {_op(G) for _, G, _ in CASES} >= set(ss.UFUNCS) | {"relu", "sigmoid", "gelu",
                                                               "real", "imag", "astype",
                                                               "where", *REDUCTIONS}


def test_loop_dtypes_are_numpys_own():
    for op, a, b in itertools.product(["add", "div", "pow", "eq", "maximum"], DTYPES, DTYPES):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                expected = getattr(np, ss.UFUNCS[op].__name__)(np.ones(1, a), np.ones(1, b))
            except TypeError:
                continue
        loop, res = ss.loop_dtypes(op, [a, b], expected.dtype.name)
        assert res == expected.dtype.name and np.result_type(*loop) == np.dtype(loop[0])


def test_reductions_accumulate_wide_and_start_at_the_identity():
    assert ss.reduction("sum", "float32", "float32") == ss.Reduction("float64", 0, "add")
    assert ss.reduction("mean", "int32", "float64").acc == "float64"
    assert ss.reduction("max", "int32", "int32").identity == np.iinfo(np.int32).min
    assert ss.reduction("min", "float64", "float64").identity == np.inf
    assert ss.reduction("max", "bool", "bool") == ss.Reduction("bool", False, "or")


def _numba_params():
    out = []
    for key, G, args in CASES:
        marks = [] if key in CORE else [pytest.mark.thorough]
        out.append(pytest.param(key, G, args, marks=marks, id=key))
    return out


@pytest.mark.parametrize("key,G,args", _numba_params())
def test_numba_generator_follows_the_table(key, G, args):
    pytest.importorskip("numba")
    op, n = _op(G), G.graph["outputs"][0]
    reason = ss.refusal(op, _operand_dtypes(G), G.nodes[n]["dtype"])
    dtypes = {d["dtype"] for _, d in G.nodes(data=True)}
    if reason or not dtypes <= set(NUMBA_DTYPES):
        with pytest.raises(nc.UnsupportedKernel, match=re.escape(reason or "has no numba kernel")):
            nc.build_node_kernel(G, n)
        return
    expected = reference(G, args)
    for fast_math in ((True, False) if op in INEXACT else (False,)):
        k = nc.build_node_kernel(G, n, fast_math=fast_math)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = k.fn(list(args))
        assert_same(f"{key} (fast math {fast_math})", expected, got, op,
                    G.nodes[n]["dtype"], _complex_operand(G))


@needs_gxx
def test_cuda_generator_follows_the_table():
    programs, ran = [], []
    for key, G, args in CASES:
        op = _op(G)
        reason = ss.refusal(op, _operand_dtypes(G), G.nodes[G.graph["outputs"][0]]["dtype"])
        try:
            prog = cg.compile_group(node_subgraph(G, G.graph["outputs"][0]))
        except cg.Unsupported as e:
            int_pow = op == "pow" and np.dtype(_operand_dtypes(G)[0]).kind in "biu"
            assert reason and reason in str(e) or int_pow and ss.INT_POW_NEGATIVE in str(e), \
                f"{key}: refused without the table's reason: {e}"
            continue
        assert reason is None, f"{key}: the table refuses it ({reason}), CUDA emitted it"
        programs.append(prog)
        ran.append((key, G, args))
    assert len(ran) > 300
    with tempfile.TemporaryDirectory() as d, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = run_all_on_host(programs, [a for _, _, a in ran], d)
    failures = []
    for (key, G, args), got in zip(ran, results):
        try:
            assert_same(key, reference(G, args), got, _op(G),
                        G.nodes[G.graph["outputs"][0]]["dtype"], _complex_operand(G))
        except AssertionError as e:
            failures.append(str(e))
    assert not failures, "\n".join(failures)


def test_cuda_integer_power_only_by_an_exponent_known_non_negative():
    """A kernel cannot raise as NumPy does for a negative integer exponent: the CUDA
    generator emits integer powers only by a literal >= 0 (the cupy backend passes scalar
    constants as literals), and refuses the rest, which then run op by op."""
    g = go.Graph()
    x = g.input("x", (12,), "int32")
    g.output(x ** 3)
    G = g.to_ir()
    sub = node_subgraph(G, G.graph["outputs"][0])
    assert "go_ipow(" in cg.compile_group(sub, {1: 3}).source
    for literals in ({}, {1: -1}):
        with pytest.raises(cg.Unsupported, match="Integers to negative integer powers"):
            cg.compile_group(sub, literals)


@needs_gxx
def test_one_op_groups_bind_each_operand_alike_in_both_generators(tmp_path):
    """``x * x``: one input per operand for every backend (the builders used to disagree)."""
    g = go.Graph()
    x = g.input("x", (5,), "float32")
    g.output(x * x)
    G = g.to_ir()
    n = G.graph["outputs"][0]
    assert len(node_subgraph(G, n).graph["inputs"]) == 2
    v = np.linspace(-2, 2, 5, dtype=np.float32)
    expected = v * v
    np.testing.assert_array_equal(nc.build_node_kernel(G, n).fn([v, v]), expected)
    got = run_all_on_host([cg.compile_group(node_subgraph(G, n))], [[v, v]], str(tmp_path))[0]
    np.testing.assert_array_equal(got, expected)
