"""NumPy's functions on Tensors: every mapped ufunc and function against NumPy itself (values,
shapes, dtypes), through the interpreter and the compiled default backend; basic indexing;
the errors for what has no graph op."""

import re

import numpy as np
import pytest

import graphopt as go
from graphopt.frontend import numpy_api

HERE = re.escape(__file__.rsplit("/", 1)[-1])


def _arrays(rng, *specs):
    out = []
    for shape, dtype in specs:
        x = rng.uniform(-2, 2, size=shape)
        if np.dtype(dtype).kind == "c":
            x = x + 1j * rng.uniform(-2, 2, size=shape)
        if np.dtype(dtype).kind in "iu":
            x = rng.integers(0, 5, size=shape)
        out.append(np.asarray(x).astype(dtype))
    return out


def check(fn, *arrays, rtol=1e-6):
    """``fn`` on Tensors, compiled for the reference and the default backend, equals
    ``fn`` on the arrays themselves (value, shape, dtype)."""
    want = fn(*arrays)
    g = go.Graph("numpy_api")
    ts = [g.input(f"x{i}", a.shape, a.dtype.name) for i, a in enumerate(arrays)]
    out = fn(*ts)
    assert isinstance(out, go.Tensor)
    g.output(out)
    for backend in ("numpy", "auto"):
        got = go.compile(g, backend=backend)(*arrays)
        assert got.shape == np.shape(want) and got.dtype == np.asarray(want).dtype, backend
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-12, err_msg=backend)


F64 = ((3, 4), "float64")
F32 = ((3, 4), "float32")

# one case (or more) per NumPy function a Tensor takes: (function, array specs, call)
FUNCTION_CASES = [
    (np.einsum, (((3, 4), "float64"), ((4, 2), "float64")),
     lambda a, b: np.einsum("ij,jk->ik", a, b, optimize=True)),
    (np.einsum, (((3, 3), "complex128"),), lambda a: np.einsum("ii", a)),
    (np.sum, (F32,), lambda a: np.sum(a, axis=1, keepdims=True)),
    (np.sum, ((((2, 3), "int8")),), lambda a: np.sum(a, dtype=np.int64)),
    (np.mean, (F64,), lambda a: np.mean(a, axis=0)),
    (np.max, (F64,), lambda a: np.max(a, axis=-1)),
    (np.amax, (F64,), lambda a: np.amax(a)),
    (np.min, (F32,), lambda a: np.min(a, axis=(0, 1), keepdims=True)),
    (np.amin, (F64,), lambda a: np.amin(a, 0)),
    (np.var, (F64,), lambda a: np.var(a, axis=1)),
    (np.var, (F32,), lambda a: np.var(a, ddof=1, keepdims=True)),
    (np.var, (((3, 4), "complex128"),), lambda a: np.var(a, axis=0)),
    (np.var, (((3, 4), "int32"),), lambda a: np.var(a, axis=1)),
    (np.std, (F64,), lambda a: np.std(a, axis=0, ddof=1)),
    (np.std, (F32,), lambda a: np.std(a)),
    (np.clip, (F32,), lambda a: np.clip(a, -0.5, 1)),
    (np.clip, (((3, 4), "int64"),), lambda a: np.clip(a, None, 3)),
    (np.where, (F64, F64), lambda a, b: np.where(a > b, a, b * 2)),
    (np.transpose, (((2, 3, 4), "float64"),), lambda a: np.transpose(a, (2, 0, 1))),
    (np.reshape, (F64,), lambda a: np.reshape(a, (2, -1))),
    (np.broadcast_to, (((3, 1), "float64"),), lambda a: np.broadcast_to(a, (2, 3, 5))),
    (np.squeeze, (((3, 1, 4, 1), "float64"),), lambda a: np.squeeze(a)),
    (np.squeeze, (((3, 1, 4, 1), "float64"),), lambda a: np.squeeze(a, axis=1)),
    (np.expand_dims, (F64,), lambda a: np.expand_dims(a, (0, -1))),
    (np.swapaxes, (((2, 3, 4), "float64"),), lambda a: np.swapaxes(a, 0, -1)),
    (np.moveaxis, (((2, 3, 4, 5), "float64"),), lambda a: np.moveaxis(a, [0, 1], [-1, 0])),
    (np.ravel, (F64,), lambda a: np.ravel(a)),
    (np.tensordot, (((2, 3, 4), "float64"), ((3, 4, 5), "float64")),
     lambda a, b: np.tensordot(a, b)),
    (np.tensordot, (((2, 3, 4), "float64"), ((4, 2), "float64")),
     lambda a, b: np.tensordot(a, b, axes=([0, 2], [1, 0]))),
    (np.dot, (((2, 3, 4), "float64"), ((5, 4, 2), "float64")), lambda a, b: np.dot(a, b)),
    (np.dot, (((3, 4), "float64"), ((4,), "float64")), lambda a, b: np.dot(a, b)),
    (np.outer, (((3,), "float64"), ((2, 2), "float64")), lambda a, b: np.outer(a, b)),
    (np.real, (((3, 4), "complex128"),), lambda a: np.real(a)),
    (np.imag, (((3, 4), "complex64"),), lambda a: np.imag(a)),
    (np.astype, (F64,), lambda a: np.astype(a, np.float32)),
    (np.full_like, (F32,), lambda a: np.full_like(a, 2.5) + a),
    (np.zeros_like, (F64,), lambda a: np.zeros_like(a, dtype=np.int32) + a),
    (np.ones_like, (F64,), lambda a: np.ones_like(a) * a),
    (np.shape, (F64,), lambda a: np.reshape(a, np.shape(a)[::-1])),
    (np.ndim, (F64,), lambda a: a * np.ndim(a)),
    (np.size, (F64,), lambda a: a + np.size(a, 1)),
    (np.copy, (F64,), lambda a: np.copy(a) + a.copy()),
    (np.trace, (((4, 4), "float64"),), lambda a: np.trace(a)),
    (np.trace, (((4, 4), "int32"),), lambda a: np.trace(a)),           # widens as np.sum
    (np.trace, (((2, 3, 3), "float32"),), lambda a: np.trace(a, axis1=1, axis2=2)),
    (np.trace, (((3, 3), "int16"),), lambda a: np.trace(a, dtype=np.float32) + a.trace()),
    (np.diagonal, (((4, 4), "complex128"),), lambda a: np.diagonal(a) + a.diagonal()),
    (np.diagonal, (((2, 3, 3), "float64"),), lambda a: np.diagonal(a, axis1=1, axis2=-1)),
    (np.vdot, (((3, 4), "complex128"), ((4, 3), "complex128")), lambda a, b: np.vdot(a, b)),
    (np.vdot, (((6,), "float32"), ((2, 3), "float32")), lambda a, b: np.vdot(a, b)),
    (np.inner, (((2, 3, 4), "float64"), ((5, 4), "float64")), lambda a, b: np.inner(a, b)),
    (np.inner, (((4,), "float64"), ((4,), "float64")), lambda a, b: np.inner(a, b)),
    (np.kron, (((2, 3), "float64"), ((3, 2), "float64")), lambda a, b: np.kron(a, b)),
    (np.kron, (((2, 2, 3), "complex128"), ((3, 2), "complex128")), lambda a, b: np.kron(a, b)),
    (np.linalg.norm, (F64,), lambda a: np.linalg.norm(a)),
    (np.linalg.norm, (((3, 4), "complex128"),), lambda a: np.linalg.norm(a, axis=1)),
    (np.linalg.norm, (((2, 3, 4), "float32"),),
     lambda a: np.linalg.norm(a, "fro", axis=(1, 2), keepdims=True)),
    (np.linalg.norm, (((3, 4), "int64"),), lambda a: np.linalg.norm(a, 2, axis=0)),
]

UFUNC_CASES = [
    (np.add, 2), (np.subtract, 2), (np.multiply, 2), (np.true_divide, 2), (np.power, 2),
    (np.maximum, 2), (np.minimum, 2), (np.equal, 2), (np.not_equal, 2), (np.less, 2),
    (np.less_equal, 2), (np.greater, 2), (np.greater_equal, 2), (np.negative, 1),
    (np.positive, 1), (np.absolute, 1), (np.exp, 1), (np.log, 1), (np.sqrt, 1), (np.tanh, 1),
    (np.sin, 1), (np.cos, 1), (np.square, 1), (np.reciprocal, 1), (np.conjugate, 1),
    (np.matmul, 2), (np.isnan, 1), (np.isinf, 1), (np.isfinite, 1), (np.sign, 1),
]


def test_every_mapping_has_a_case():
    assert {f for f, _, _ in FUNCTION_CASES} == set(numpy_api.FUNCTIONS)
    assert {u for u, _ in UFUNC_CASES} == set(numpy_api.UFUNCS)


@pytest.mark.parametrize("func,specs,call", FUNCTION_CASES,
                         ids=[f"{f.__name__}-{i}" for i, (f, _, _) in enumerate(FUNCTION_CASES)])
def test_numpy_function(func, specs, call, rng):
    arrays = _arrays(rng, *specs)
    check(call, *arrays, rtol=1e-5 if any(a.dtype.itemsize <= 4 for a in arrays) else 1e-10)


@pytest.mark.parametrize("ufunc,nin", UFUNC_CASES, ids=[u.__name__ for u, _ in UFUNC_CASES])
@pytest.mark.parametrize("dtype", ["float32", "complex128"])
def test_numpy_ufunc(ufunc, nin, dtype, rng):
    if ufunc is np.sign and dtype == "complex128":
        pytest.skip("numpy.sign of complex values has no graph form (refused: see below)")
    shapes = [(3, 4), (4, 4)] if ufunc is np.matmul else [(3, 4), (1, 4)]
    arrays = _arrays(rng, *[(s, dtype) for s in shapes[:nin]])
    if ufunc in (np.log, np.sqrt, np.power):
        arrays = [np.abs(a) + 0.5 for a in arrays]
    check(lambda *xs: ufunc(*xs), *arrays, rtol=1e-5 if dtype == "float32" else 1e-12)


def test_ndarray_operand_first_and_ufunc_reduce(rng):
    (a,) = _arrays(rng, F64)
    w = rng.random((3, 4))
    check(lambda x: w + x - np.float32(2) * x, a)
    check(lambda x: np.add.reduce(x).sum() + np.maximum.reduce(x, axis=1, keepdims=True), a)


def test_numpy_scalar_keeps_nep50_dtype(rng):
    g = go.Graph("dt")
    x = g.input("x", (3,), "float32")
    assert np.exp(x).dtype == np.float32
    assert (np.float64(2.0) * x).dtype == np.float64      # a NumPy scalar is strong
    assert (2.0 * x).dtype == np.float32                  # a Python one is weak


@pytest.mark.parametrize("key", [
    0, -1, slice(None), slice(1, None), slice(None, None, -1), slice(3, 0, -2),
    (Ellipsis, 0), (0, Ellipsis, slice(None, 2)), (None, 1, slice(None), None),
    (slice(1, 1),), (slice(5, 0, 2), 0), (Ellipsis,), (slice(-2, None), -3, slice(None, None, 3)),
    (slice(None, None, -1), slice(None, None, -1), slice(None, None, -1)),
])
def test_basic_indexing(key, rng):
    (a,) = _arrays(rng, (((4, 3, 5), "float64")))
    check(lambda x: x[key], a)


def test_indexing_result_is_a_new_array(rng):
    g = go.Graph("view")
    x = g.input("x", (4, 3))
    g.output(x[1:3])
    a = rng.random((4, 3))
    got = go.compile(g)(a)
    got[...] = 0
    assert np.all(a[1:3] != 0)


@pytest.mark.parametrize("key,match", [
    ((0, 0, 0, 0), "too many indices"),
    ((5,), "out of bounds for axis 0 with size 4"),
    ((Ellipsis, Ellipsis), "only one"),
    (([0, 1],), "only basic indexing"),
    ((np.array([True, False, True, False]),), "go.where"),
    ((slice(0, None),) * 2 + (True,), "only basic indexing"),
])
def test_bad_index_is_a_graph_error_at_the_users_line(key, match):
    g = go.Graph("bad")
    x = g.input("x", (4, 3, 2))
    with pytest.raises(go.GraphError, match=match) as e:
        x[key]
    assert re.search(HERE, str(e.value)), str(e.value)


def test_slice_bound_from_the_graph_is_refused():
    g = go.Graph("bad")
    x = g.input("x", (4,))
    with pytest.raises(go.GraphError, match="bounds must be ints"):
        x[: x.sum()]


@pytest.mark.parametrize("call,match", [
    (lambda x: np.log1p(x), r"numpy\.log1p on a Tensor has no graph op; use go\.log\(1 \+ x\)"),
    (lambda x: np.cumsum(x), r"numpy\.cumsum on a Tensor has no graph op.*numpy\.einsum"),
    (lambda x: np.linalg.det(x), r"numpy\.linalg\.det on a Tensor has no graph op"),
    (lambda x: np.concatenate([x, x]), "numpy.concatenate .*selector"),
    (lambda x: np.add.accumulate(x), r"numpy\.add\.accumulate"),
    (lambda x: np.sum(x, out=np.empty(())), "out= not supported"),
    (lambda x: np.exp(x, out=np.empty(4)), "out= not supported"),
    (lambda x: np.clip(x, 0, 1, out=np.empty(4)), "out= not supported"),
    (lambda x: np.where(x > 0), "data-dependent shape"),
    (lambda x: np.ravel(x, order="F"), "order= not supported"),
    (lambda x: np.asarray(x), "symbolic"),
])
def test_unsupported_numpy_call_is_a_graph_error(call, match):
    g = go.Graph("bad")
    x = g.input("x", (4,))
    with pytest.raises(go.GraphError, match=match) as e:
        call(x)
    assert re.search(HERE, str(e.value)), str(e.value)


def test_missing_ndarray_method_names_an_alternative():
    g = go.Graph("bad")
    x = g.input("x", (4,))
    with pytest.raises(AttributeError, match="numpy.ndarray.argmax has no graph op; use"):
        x.argmax()
    assert not hasattr(x, "cumsum")
    with pytest.raises(AttributeError, match="did you mean 'transpose'"):
        x.transpse()


def test_tensor_methods_match_numpy(rng):
    (a,) = _arrays(rng, (((2, 1, 3), "float64")))
    check(lambda x: x.var(axis=2) + x.std() + x.clip(-1, 1).sum(), a)
    check(lambda x: x.squeeze().swapaxes(0, 1).ravel() + x.flatten(), a)
    check(lambda x: x.dot(np.ones(3)), a)


def test_a_numpy_function_traces_unchanged(rng):
    def layer_norm_attention(x, w):      # plain NumPy, not written for graphopt
        h = np.einsum("bsd,de->bse", x, w)
        h = (h - h.mean(axis=-1, keepdims=True)) / np.sqrt(h.var(axis=-1, keepdims=True) + 1e-5)
        s = np.exp(h[..., :4] - np.max(h[..., :4], axis=-1, keepdims=True))
        return np.clip(s / s.sum(axis=-1, keepdims=True), 1e-6, 1.0)

    x, w = rng.random((2, 5, 6)), rng.random((6, 8))
    np.testing.assert_allclose(go.jit(layer_norm_attention)(x, w), layer_norm_attention(x, w),
                               rtol=1e-12)


# NumPy sums in ``dtype=`` and returns it: int32 wraps at 2**31, uint8 at 256, a bool sum is
# ``any``; an integer mean divides the wrapped sum and truncates
_DTYPE_SUMS = [
    (np.array([2**31 - 1, 1], np.int32), np.int32),
    (np.array([255, 1], np.uint8), np.uint8),
    (np.array([True, True]), np.bool_),
    (np.array([[2**31 - 1, 1], [3, 4]], np.int32), np.int16),
    (np.array([[7, 1], [3, 4]], np.int64), np.int32),
    (np.array([1.5, 2.25]), np.float32),
]
_DTYPE_CALLS = {
    "np.sum": np.sum, "np.mean": np.mean,
    "method": lambda t, dtype: t.sum(axis=0, dtype=dtype),
    "add.reduce": lambda t, dtype: np.add.reduce(t, dtype=dtype),
}


def _in_dtype(fn, dtype):
    return lambda t: fn(t, dtype=dtype)


@pytest.mark.parametrize("backend", ["numpy", "numba", "dask"])
@pytest.mark.parametrize("call", list(_DTYPE_CALLS))
def test_sum_in_a_dtype_accumulates_in_it(call, backend):
    fn = _DTYPE_CALLS[call]
    for x, dtype in _DTYPE_SUMS:
        got = go.jit(_in_dtype(fn, dtype), backend=backend)(x)
        want = np.asarray(fn(x, dtype=dtype))
        assert got.dtype == want.dtype and np.array_equal(got, want), (x, dtype, got, want)


def test_iteration_and_unpacking_give_the_first_dim_s_rows(rng):
    (a,) = _arrays(rng, ((3, 4), "float64"))
    check(lambda x: sum(row * i for i, row in enumerate(x)), a)
    check(lambda x: (lambda q, k, v: q * k - v)(*x), a)
    g = go.Graph()
    with pytest.raises(go.GraphError, match="iteration over a 0-d Tensor"):
        list(g.input("s", (), "float64"))


@pytest.mark.parametrize("call,match", [
    (lambda a: np.trace(a, offset=1), r"numpy.trace\(offset=1\): only the main diagonal"),
    (lambda a: np.diagonal(a, axis1=0, axis2=0), "are not two dims of one size"),
    (lambda a: np.linalg.norm(a, 1), r"numpy.linalg.norm\(ord=1\) over 2 axis"),
    (lambda a: np.vdot(a, a[0]), "operands of 12 and 4 elements"),
    (lambda a: np.inner(a, a.T), "last dims of"),
])
def test_products_name_what_has_no_graph_form(call, match):
    g = go.Graph()
    with pytest.raises(go.GraphError, match=match):
        call(g.input("a", (3, 4), "float64"))


def test_an_index_past_the_end_is_numpy_s_index_error():
    g = go.Graph()
    x = g.input("x", (3, 4), "float64")
    with pytest.raises(IndexError, match="index 3 is out of bounds for axis 0 with size 3"):
        x[3]
    with pytest.raises(go.GraphError):          # ... and a GraphError, as every bad input
        x[0, -5]


@pytest.mark.parametrize("dtype", ["float64", "float32", "int32", "uint8", "complex128"])
def test_value_tests_and_sign_are_exact_on_special_values(dtype):
    specials = {"f": [-0.0, 0.0, np.nan, -2.5, 3.0, np.inf, -np.inf], "i": [-3, 0, 4],
                "u": [0, 3, 255], "c": [complex(np.inf, np.nan), complex(np.nan, 1), 1 + 2j,
                                        complex(0, np.inf), 0j]}
    a = np.array(specials[np.dtype(dtype).kind], dtype)
    for f in (np.isnan, np.isinf, np.isfinite) + ((np.sign,) if dtype != "complex128" else ()):
        g = go.Graph()
        g.output(f(g.input("x", a.shape, dtype)))
        for backend in ("numpy", "numba"):
            got, want = go.compile(g, backend=backend, cache=False)(x=a), f(a)
            assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True)
            assert np.array_equal(np.signbit(got), np.signbit(want)), (f, backend)  # -0.0
    g = go.Graph()
    with pytest.raises(go.GraphError, match="numpy.sign of complex128 has no graph form"):
        np.sign(g.input("z", (3,), "complex128"))
