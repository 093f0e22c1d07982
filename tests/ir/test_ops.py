"""Every op against NumPy: values, shapes, dtypes (NumPy promotion, NEP 50 weak scalars)."""

import re
import warnings

import numpy as np
import pytest

import graphopt as go
from graphopt.ir import ops
from graphopt.ir.interpreter import interpret

HERE = re.escape(__file__.rsplit("/", 1)[-1])
REAL = ("float32", "float64")
SMALL_INTS = ("int8", "int16", "uint8", "uint16", "uint32", "uint64")
ALL_NUMERIC = ("int32", "int64") + SMALL_INTS + ("float16", "float32", "float64", "complex64",
                                                 "complex128")


def values(rng, shape, dtype, lo=-2.0, hi=2.0):
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        lo = -3 if dt.kind == "i" else 0
        return rng.integers(lo, lo + 7, size=shape).astype(dt)
    x = rng.uniform(lo, hi, size=shape)
    if dt.kind == "c":
        x = x + 1j * rng.uniform(lo, hi, size=shape)
    return np.asarray(x).astype(dt)


def run(build, *arrays):
    """Build ``build(*tensors)`` over inputs shaped like ``arrays`` and interpret it."""
    g = go.Graph("op")
    ts = [g.input(f"x{i}", a.shape, a.dtype.name) for i, a in enumerate(arrays)]
    g.output(build(*ts))
    G = g.to_ir()
    return interpret(G, *arrays)


def check(got, expected, rtol=None):
    expected = np.asarray(expected)
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    if rtol is None:
        rtol = 1e-5 if expected.dtype in (np.float32, np.complex64) else 1e-12
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol)


# --------------------------------------------------------------------------------- unary

UNARY = {"exp": np.exp, "sqrt": np.sqrt, "abs": np.abs, "neg": np.negative, "tanh": np.tanh,
         "sin": np.sin, "cos": np.cos, "square": np.square, "conj": np.conj, "real": np.real,
         "imag": np.imag}


@pytest.mark.parametrize("dtype", ALL_NUMERIC)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_numpy(name, dtype, rng):
    x = values(rng, (3, 4), dtype)
    if name == "sqrt" and np.dtype(dtype).kind != "c":
        x = np.abs(x)
    fn = getattr(go, name)
    check(run(fn, x), UNARY[name](x))


@pytest.mark.parametrize("dtype", REAL + ("complex128",))
def test_log_and_reciprocal(dtype, rng):
    x = values(rng, (5,), dtype, 0.5, 3.0)
    check(run(go.log, x), np.log(x))
    check(run(go.reciprocal, x), np.reciprocal(x))


def test_reciprocal_of_ints_is_integer_division_as_numpy():
    x = np.array([1, 2, -1, 3], dtype="int64")
    check(run(go.reciprocal, x), np.reciprocal(x))


@pytest.mark.parametrize("dtype", REAL)
def test_activations(dtype):
    x = np.linspace(-30, 30, 61).astype(dtype)
    with np.errstate(over="ignore"):
        check(run(go.sigmoid, x), (1 / (1 + np.exp(-x.astype("float64")))).astype(dtype),
              rtol=1e-5)
    check(run(go.relu, x), np.maximum(x, 0))
    c = np.sqrt(2 / np.pi)
    gelu = 0.5 * x * (1 + np.tanh(c * (x + 0.044715 * x ** 3)))
    check(run(go.gelu, x), gelu.astype(dtype), rtol=1e-5)


def test_sigmoid_does_not_overflow():
    x = np.array([-1000.0, 1000.0, 0.0])
    with np.errstate(all="raise"):
        got = run(go.sigmoid, x)
    np.testing.assert_allclose(got, [0.0, 1.0, 0.5])


# -------------------------------------------------------------------------------- binary

BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
          "maximum": np.maximum, "minimum": np.minimum, "equal": np.equal,
          "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
          "greater": np.greater, "greater_equal": np.greater_equal}
SHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (2, 3)), ((1,), ())]


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("sa,sb", SHAPES)
def test_binary_broadcasting_matches_numpy(name, sa, sb, rng):
    a, b = values(rng, sa, "float64"), values(rng, sb, "float64", 0.5, 2.0)
    check(run(getattr(go, name), a, b), BINARY[name](a, b))


@pytest.mark.parametrize("da", ALL_NUMERIC + ("bool",))
@pytest.mark.parametrize("db", ALL_NUMERIC + ("bool",))
def test_type_promotion_matches_numpy(da, db, rng):
    a, b = values(rng, (2, 3), da), values(rng, (3,), db)
    if "bool" in (da, db):
        check(run(go.mul, a, b), np.multiply(a, b))
        return
    check(run(go.add, a, b), np.add(a, b))
    check(run(go.div, a, b + (b == 0)), np.true_divide(a, b + (b == 0)))
    check(run(lambda x, y: x == y, a, b), np.equal(a, b))


def test_pow_matches_numpy(rng):
    a = values(rng, (3, 4), "float64", 0.1, 2.0)
    b = values(rng, (4,), "float64")
    check(run(go.pow, a, b), np.power(a, b))
    check(run(lambda x: x ** 2, a), a ** 2)
    i = np.array([1, 2, 3], dtype="int32")
    check(run(lambda x: x ** 2, i), i ** 2)
    check(run(lambda x: 2 ** x, i), 2 ** i)
    z = values(rng, (3,), "complex128")
    check(run(lambda x: x ** 0.5, z), z ** 0.5)


def test_integer_to_negative_integer_power_is_a_build_error():
    g = go.Graph()
    x = g.input("x", (3,), "int64")
    with pytest.raises(go.DTypeError, match="negative integer powers") as info:
        x ** -1
    assert "op 'pow'" in str(info.value) and re.search(HERE + r":\d+", str(info.value))


def test_where_matches_numpy(rng):
    c = values(rng, (3, 1), "bool")
    a, b = values(rng, (3, 4), "float32"), values(rng, (4,), "float64")
    check(run(go.where, c, a, b), np.where(c, a, b))
    check(run(lambda cc, aa: go.where(cc, aa, 0.0), c, a), np.where(c, a, np.float32(0)))


# ---------------------------------------------------------------- NEP 50 weak scalars


@pytest.mark.parametrize("dtype,scalar", [
    ("float32", 2.0), ("float32", 2), ("int32", 2), ("int32", 2.5), ("int64", True),
    ("float32", 1j), ("complex64", 2.0), ("float64", 3), ("bool", 1), ("bool", 1.5),
    ("int32", 1j),
])
@pytest.mark.parametrize("op", ["add", "mul", "rsub", "rdiv"])
def test_python_scalars_are_weak_like_numpy2(dtype, scalar, op, rng):
    x = values(rng, (4,), dtype)
    if dtype == "bool" and op == "rsub":
        pytest.skip("numpy: boolean subtract is not supported")
    fns = {"add": lambda t: t + scalar, "mul": lambda t: t * scalar,
           "rsub": lambda t: scalar - t, "rdiv": lambda t: scalar / (t * 0 + 1)}
    with np.errstate(all="ignore"):
        expected = fns[op](x)
    check(run(fns[op], x), expected)


def test_numpy_arrays_and_scalars_are_strong(rng):
    x = values(rng, (4,), "float32")
    check(run(lambda t: t + np.float64(1.5), x), x + np.float64(1.5))
    check(run(lambda t: t * np.ones(4, dtype="float64"), x), x * np.ones(4))
    check(run(lambda t: np.ones(4, dtype="int64") + t, x), np.ones(4, "int64") + x)


def test_python_scalar_out_of_range_is_a_dtype_error():
    g = go.Graph()
    x = g.input("x", (3,), "int32")
    with pytest.raises(go.DTypeError, match="does not fit") as info:
        x + 2 ** 40
    assert "op 'add'" in str(info.value) and re.search(HERE + r":\d+", str(info.value))


# ------------------------------------------------------------------------------ reductions


@pytest.mark.parametrize("name", ["sum", "max", "min", "mean"])
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2), (), (2, 0, 1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions_match_numpy(name, axis, keepdims, rng):
    x = values(rng, (2, 3, 4), "float64")
    check(run(lambda t: getattr(go, name)(t, axis=axis, keepdims=keepdims), x),
          getattr(np, name)(x, axis=axis, keepdims=keepdims))
    check(run(lambda t: getattr(t, name)(axis, keepdims), x),
          getattr(np, name)(x, axis=axis, keepdims=keepdims))


@pytest.mark.parametrize("dtype", ("bool", "int32", "int64", "float32", "complex64") + SMALL_INTS
                         + ("float16",))
def test_reduction_dtypes_match_numpy(dtype, rng):
    x = values(rng, (3, 4), dtype)
    check(run(lambda t: t.sum(axis=0), x), x.sum(axis=0))
    check(run(lambda t: t.mean(), x), x.mean())
    if dtype != "complex64":
        check(run(lambda t: t.max(axis=1), x), x.max(axis=1))


def test_reduction_of_a_scalar():
    x = np.array(2.5)
    check(run(lambda t: t.sum(), x), x.sum())
    check(run(lambda t: go.max(t, keepdims=True), x), np.max(x, keepdims=True))


def test_softmax_and_logsumexp_are_shifted(rng):
    x = values(rng, (3, 5), "float64") * 400  # exp overflows without the max shift
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    with np.errstate(over="raise"):
        got = run(lambda t: go.softmax(t, axis=-1), x)
    check(got, e / e.sum(axis=-1, keepdims=True))
    m = x.max(axis=0, keepdims=True)
    lse = np.log(np.exp(x - m).sum(axis=0, keepdims=True)) + m
    check(run(lambda t: go.logsumexp(t, axis=0, keepdims=True), x), lse)
    check(run(lambda t: go.logsumexp(t, axis=0), x), lse[0])
    check(run(lambda t: go.logsumexp(t), x), np.log(np.exp(x - x.max()).sum()) + x.max())
    f = values(rng, (4, 3), "float32")
    check(run(lambda t: go.softmax(t, axis=0), f),
          (np.exp(f - f.max(0)) / np.exp(f - f.max(0)).sum(0)).astype("float32"))


def test_logsumexp_of_minus_inf_rows_is_minus_inf():
    x = np.array([[-np.inf, -np.inf], [0.0, -np.inf]])
    got = run(lambda t: go.logsumexp(t, axis=1), x)
    np.testing.assert_array_equal(got, [-np.inf, 0.0])


# ---------------------------------------------------------------------------------- layout


def test_layout_ops_match_numpy(rng):
    x = values(rng, (2, 3, 4), "float64")
    check(run(lambda t: go.reshape(t, (4, -1)), x), x.reshape(4, -1))
    check(run(lambda t: t.reshape(6, 4), x), x.reshape(6, 4))
    check(run(lambda t: t.reshape(24), x), x.reshape(24))
    check(run(lambda t: go.transpose(t), x), x.transpose())
    check(run(lambda t: go.transpose(t, (1, -1, 0)), x), np.transpose(x, (1, -1, 0)))
    check(run(lambda t: t.transpose(2, 0, 1), x), x.transpose(2, 0, 1))
    check(run(lambda t: t.transpose((2, 0, 1)), x), x.transpose((2, 0, 1)))
    check(run(lambda t: t.T, x), x.T)
    check(run(lambda t: go.broadcast_to(t, (5, 2, 3, 4)), x),
          np.broadcast_to(x, (5, 2, 3, 4)))
    y = values(rng, (3, 1), "float64")
    check(run(lambda t: go.broadcast_to(t, (2, 3, 4)), y), np.broadcast_to(y, (2, 3, 4)))


@pytest.mark.parametrize("src", ("bool",) + ALL_NUMERIC)
@pytest.mark.parametrize("dst", ("bool",) + ALL_NUMERIC)
def test_astype_matches_numpy(src, dst, rng):
    x = values(rng, (5,), src)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        expected = x.astype(dst)
    check(run(lambda t: t.astype(dst), x), expected)


# ---------------------------------------------------------------------------------- matmul


@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)),
                                   ((4,), (4,)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 2)),
                                   ((4,), (2, 4, 3)), ((2, 3, 4), (4,))])
def test_matmul_matches_numpy(sa, sb, rng):
    a, b = values(rng, sa, "float64"), values(rng, sb, "float64")
    check(run(lambda x, y: x @ y, a, b), a @ b)
    check(run(go.matmul, a, b), np.matmul(a, b))


def test_matmul_mixed_dtypes(rng):
    a, b = values(rng, (3, 4), "float32"), values(rng, (4, 2), "complex128")
    check(run(lambda x, y: x @ y, a, b), a @ b)
    i, f = values(rng, (3, 4), "int32"), values(rng, (4,), "float32")
    check(run(lambda x, y: x @ y, i, f), i @ f)


# ------------------------------------------------------------------------------ registry


def test_registry_knows_every_public_op():
    for name in ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "where", "eq", "ne",
                 "lt", "le", "gt", "ge", "exp", "log", "sqrt", "abs", "neg", "tanh", "sigmoid",
                 "relu", "gelu", "sin", "cos", "square", "reciprocal", "conj", "real", "imag",
                 "sum", "max", "min", "mean", "reshape", "transpose", "broadcast_to", "astype",
                 "einsum", "input", "const", "fused"):
        assert name in ops.OPS
    with pytest.raises(go.GraphError, match=r"unknown op 'nope' \(known ops:"):
        ops.get_op("nope")
    with pytest.raises(ValueError, match="already registered"):
        ops.register_op(ops.OPS["add"])


def test_infer_errors_name_the_op_and_operands():
    with pytest.raises(go.ShapeError, match=r"op 'add'.*\(2, 3\) float64, \(4,\) float64"):
        ops.infer("add", [(2, 3), (4,)], ["float64", "float64"], {})
    with pytest.raises(go.GraphError, match="takes 2 operand"):
        ops.infer("add", [(2, 3)], ["float64"], {})
    with pytest.raises(go.GraphError, match="malformed attrs"):
        ops.infer("sum", [(2, 3)], ["float64"], {"axes": ("a",), "keepdims": False})
    with pytest.raises(go.GraphError, match="malformed attrs"):
        ops.infer("reshape", [(2, 3)], ["float64"], {})
    with pytest.raises(go.DTypeError, match="not supported"):
        ops.infer("neg", [(2,)], ["bool"], {})


@pytest.mark.parametrize("bad", ["float128", "datetime64", "object", "nope", None.__class__])
def test_unsupported_dtypes(bad):
    with pytest.raises(go.DTypeError, match="supported"):
        ops.canonical_dtype(bad)


@pytest.mark.parametrize("spec, name", [
    ("float64", "float64"), (np.float32, "float32"), (np.dtype(">i4"), "int32"),
    ("<c16", "complex128"), (np.dtype("bool"), "bool"), (float, "float64")])
def test_canonical_dtype_names_every_spelling_the_same_twice(spec, name):
    assert ops.canonical_dtype(spec) == name == ops.canonical_dtype(spec)   # (memoized)


def test_canonical_dtype_of_an_unhashable_spec_is_asked_of_numpy():
    with pytest.raises(go.DTypeError, match="unknown dtype"):
        ops.canonical_dtype(["f8"])
    with pytest.raises(go.DTypeError, match="unsupported dtype 'void64'"):
        ops.canonical_dtype([("a", "f8")])      # a structured dtype
