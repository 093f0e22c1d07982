"""numba_math against NumPy: accuracy sweeps over the whole input range (in ulp of the result,
against a float64 reference for float32 and a long-double one for float64), IEEE special
values, overflow/underflow boundaries, and that the functions vectorize inside numba loops."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pathlib
import re
import sys
import tempfile

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from graphopt.backends.numba import numerics as nm  # noqa: E402

OPS = ("exp", "log", "tanh", "sigmoid", "gelu", "sin", "cos", "pow", "sqrt")
DTYPES = ("float32", "float64")
LD = np.longdouble
EXTENDED = np.finfo(LD).nmant >= 63
PI_LD = LD("3.14159265358979323846264338327950288")


def _loop_source() -> str:
    """One loop function per op, both dtypes in one compiled function (few compilations)."""
    src = ["import numba", "from graphopt.backends.numba import numerics as nm"]
    for op in OPS:
        args, call = ("(a, c, oa, b, d, ob)", "({0}[i], {1}[i])") if op == "pow" else \
            ("(a, oa, b, ob)", "({0}[i])")
        src += ["", "", '@numba.njit(cache=True, error_model="numpy")', f"def {op}{args}:",
                "    for i in range(a.size):",
                f"        oa[i] = nm.{op}_f32{call.format('a', 'c')}",
                "    for i in range(b.size):",
                f"        ob[i] = nm.{op}_f64{call.format('b', 'd')}"]
    return "\n".join(src) + "\n"


def _load_loops() -> dict:
    """The loops, from a module written under the kernel cache dir and named by a digest of
    numba_math's source: numba's on-disk cache keys on the caller's file only, so a cached
    loop would otherwise keep calling an edited function's old code."""
    with open(nm.__file__, "rb") as f:
        digest = hashlib.sha256(f.read() + _loop_source().encode()).hexdigest()[:16]
    root = pathlib.Path(os.environ.get("GRAPHOPT_CACHE_DIR", tempfile.gettempdir()))
    path = root / "numba_math_tests" / f"loops_{digest}.py"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(_loop_source())
        os.replace(tmp, path)  # atomic: parallel test processes may race here
    name = f"_numba_math_loops_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # numba's cache re-imports a function's module by name
    spec.loader.exec_module(mod)
    return {op: getattr(mod, op) for op in OPS}


LOOPS = _load_loops()


def fast(op: str, dtype: str, *args) -> np.ndarray:
    """numba_math's ``op`` applied elementwise to 1-d arrays of ``dtype``."""
    args = [np.ascontiguousarray(a, dtype=dtype) for a in args]
    out, other = np.empty_like(args[0]), np.empty(0, "float64" if dtype == "float32" else
                                                  "float32")
    mine = [*args, out]
    theirs = [other] * len(args) + [other.copy()]
    LOOPS[op](*(mine + theirs if dtype == "float32" else theirs + mine))
    return out


def wide(dtype: str):
    """The reference precision: float64 for float32 results, long double for float64."""
    return np.float64 if dtype == "float32" else LD


def reference(op: str, dtype: str, *args) -> np.ndarray:
    """The exact result (to the precision of ``wide(dtype)``), from NumPy."""
    hi = wide(dtype)
    a = [np.asarray(v, dtype=dtype).astype(hi) for v in args]
    x = a[0]
    with np.errstate(all="ignore"):
        if op == "sigmoid":
            e = np.exp(-abs(x))
            return np.where(x >= 0, 1 / (1 + e), e / (1 + e))
        if op == "gelu":
            pi = PI_LD.astype(hi)
            w = 2 * np.sqrt(hi(2) / pi) * (x + hi("0.044715") * (x * x * x))
            e = np.exp(-abs(w))
            return x * np.where(w >= 0, 1 / (1 + e), e / (1 + e))
        if op == "pow":
            return np.power(x, a[1])
        return getattr(np, op)(x)


def ulp(dtype: str, v: np.ndarray) -> np.ndarray:
    """The spacing of ``dtype`` at |v| (v finite in ``dtype``), the largest value included."""
    a = np.abs(v.astype(dtype))
    fi = np.finfo(dtype)
    return np.where(a == fi.max, fi.max - np.nextafter(fi.max, 0, dtype=dtype),
                    np.spacing(np.minimum(a, np.nextafter(fi.max, 0, dtype=dtype))))


def ulp_excess(dtype: str, got: np.ndarray, ref: np.ndarray, bound: nm.Bound) -> np.ndarray:
    """``(|got - ref| - bound.abs) / ulp(ref)`` for finite ``ref`` (in the wide type). Past the
    largest finite ``dtype`` value both count as the next power of two, ``big`` (where inf is
    the correctly rounded result); between the two, in the ulp of the largest value."""
    fi = np.finfo(dtype)
    hi = wide(dtype)
    big = hi(fi.max) + hi(ulp(dtype, np.array(fi.max)))
    g = got.astype(hi)
    g = np.where(np.isinf(g), np.copysign(big, g), g)
    r = np.clip(ref, -big, big)  # past it, inf is the correctly rounded result
    u = ulp(dtype, np.minimum(np.abs(r), hi(fi.max))).astype(hi)
    return (np.abs(g - r) - hi(bound.abs)) / u


def assert_accurate(op: str, dtype: str, args: tuple, got=None) -> float:
    """Fail unless ``op(*args)`` is within ``BOUNDS[(op, dtype)]`` wherever the exact result is
    finite, and equal to it (inf with its sign, NaN) where it is not; returns the worst excess."""
    got = fast(op, dtype, *args) if got is None else got
    ref = reference(op, dtype, *args)
    special = ~np.isfinite(ref)
    bad = special & (got != ref) & ~(np.isnan(got) & np.isnan(ref))
    bad |= ~special & np.isnan(got)
    i = np.flatnonzero(bad)[:3]
    assert not bad.any(), (f"{op} {dtype}: wrong special value at {[a[i] for a in args]}: "
                           f"got {got[i]}, want {ref[i]}")
    bound = nm.BOUNDS[(op, dtype)]
    finite = np.flatnonzero(~special)
    ex = ulp_excess(dtype, got[finite], ref[finite], bound)
    if ex.size:
        j = finite[int(np.argmax(ex))]
        assert ex.max() <= bound.ulp, (
            f"{op} {dtype}: {ex.max():.3f} ulp beyond {bound} at {[a[j] for a in args]}: "
            f"got {got[j]!r}, want {ref[j]!r}")
    return float(ex.max(initial=0.0))


def random_finite(dtype: str, n: int, rng, positive: bool = False) -> np.ndarray:
    """Uniform random bit patterns of finite values: every binade, denormals, both signs."""
    ity, top = (np.uint32, 0x7F7FFFFF) if dtype == "float32" else (np.uint64, 0x7FEFFFFFFFFFFFFF)
    bits = rng.integers(0, top, n, dtype=ity, endpoint=True)
    if not positive:
        bits |= rng.integers(0, 2, n, dtype=ity) << ity(8 * np.dtype(ity).itemsize - 1)
    return bits.view(dtype)


def sweep(op: str, dtype: str, rng) -> tuple:
    """Dense normal-range values plus random values over the whole float range."""
    f32 = dtype == "float32"
    n = 400_000 if f32 else 200_000
    lin = lambda lo, hi: np.linspace(lo, hi, n).astype(dtype)
    every = random_finite(dtype, n // 2, rng)
    if op == "exp":
        lo, hi = (-104.0, 89.0) if f32 else (-746.0, 710.0)
        return (np.concatenate([lin(lo, hi), lin(-1, 1), every]),)
    if op in ("log", "sqrt"):
        pos = random_finite(dtype, n, rng, positive=True)
        return (np.concatenate([pos, lin(0.5, 2.0), 1 + lin(-1e-3, 1e-3)]),)
    if op in ("tanh", "sigmoid", "gelu"):
        return (np.concatenate([lin(-30, 30), lin(-1, 1), every]),)
    if op in ("sin", "cos"):
        u = lambda m: rng.uniform(-m, m, n // 2).astype(dtype)
        every = every[np.abs(every) < nm.TRIG_LIMIT]
        return (np.concatenate([lin(-10, 10), u(1e4), u(1e9), u(nm.TRIG_LIMIT), every]),)
    assert op == "pow"
    # |y ln x| up to ~ the overflow threshold, every magnitude of x, and x < 0 with integer y.
    lim = 88.0 if f32 else 709.0
    x1 = np.exp(rng.uniform(-lim, lim, n))
    y1 = rng.uniform(-1, 1, n) * lim / np.maximum(np.abs(np.log(x1)), 1.0)
    x2 = random_finite(dtype, n // 2, rng, positive=True)
    y2 = rng.uniform(-1.5, 1.5, n // 2)
    x3 = -rng.uniform(0.01, 4.0, n // 4)
    y3 = rng.integers(-40, 40, n // 4).astype(float)
    x4 = 1 + rng.uniform(-1e-4, 1e-4, n // 4)
    y4 = rng.uniform(-1e5, 1e5, n // 4)
    return (np.concatenate([x1, x2, x3, x4]).astype(dtype),
            np.concatenate([y1, y2, y3, y4]).astype(dtype))


def test_registry_is_complete_and_named_for_import():
    assert set(nm.FAST) == {(op, dt) for op in OPS for dt in DTYPES}
    for (op, dt), fn in nm.FAST.items():
        name = f"{op}_{'f32' if dt == 'float32' else 'f64'}"
        assert getattr(nm, name) is fn
        assert isinstance(fn, numba.core.registry.CPUDispatcher)
    assert set(nm.ERROR_BOUNDS) == set(nm.FAST) == set(nm.BOUNDS)
    assert all(isinstance(s, str) and "ulp" in s for s in nm.ERROR_BOUNDS.values())
    assert all(s in nm.__doc__ for s in ("exp", "pow", "ERROR_BOUNDS"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_accuracy_over_the_whole_range(op, dtype):
    if dtype == "float64" and not EXTENDED:
        pytest.skip("long double is not wider than double here: no float64 reference")
    rng = np.random.default_rng(sum(map(ord, op + dtype)))
    assert_accurate(op, dtype, sweep(op, dtype, rng))


def special_inputs(dtype: str) -> np.ndarray:
    fi = np.finfo(dtype)
    vals = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, fi.tiny, -fi.tiny,
            fi.smallest_subnormal, -fi.smallest_subnormal, fi.tiny / 3, -fi.tiny / 3,
            fi.max, -fi.max, 1.0, -1.0, 0.5, -0.5, 2.0, 1e-30, -1e-30, 30.0, -30.0, 100.0,
            -100.0, 1e4, -1e4, 1e30, -1e30]
    return np.array(vals, dtype=dtype)


def assert_same_specials(got, want, where):
    """NaN where NumPy has NaN; inf, zero (with its sign) and +-1 exactly."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=where)
    exact = ~np.isnan(want) & (np.isinf(want) | (want == 0) | (np.abs(want) == 1))
    np.testing.assert_array_equal(got[exact], want[exact], err_msg=where)
    np.testing.assert_array_equal(np.signbit(got[exact]), np.signbit(want[exact]),
                                  err_msg=where)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", [op for op in OPS if op != "pow"])
def test_special_values_match_numpy(op, dtype):
    x = special_inputs(dtype)
    if op in ("sin", "cos"):
        x = x[~(np.abs(x) >= nm.TRIG_LIMIT) | np.isinf(x)]
    got = fast(op, dtype, x)
    with np.errstate(over="ignore"):
        want = reference(op, dtype, x).astype(dtype)
    assert_same_specials(got, want, f"{op} {dtype} at {x}")
    if op not in ("sigmoid", "gelu"):  # NumPy's own ufunc, in the same dtype
        with np.errstate(all="ignore"):
            assert_same_specials(got, getattr(np, op)(x), f"{op} {dtype} at {x}")
    assert_accurate(op, dtype, (x,), got)


@pytest.mark.parametrize("dtype", DTYPES)
def test_pow_ieee_special_cases_match_numpy(dtype):
    fi = np.finfo(dtype)
    v = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 2.5,
         -2.5, fi.max, -fi.max, fi.smallest_subnormal, -fi.smallest_subnormal, 1e-30]
    x, y = (a.ravel().astype(dtype) for a in np.meshgrid(v, v))
    with np.errstate(all="ignore"):
        want = np.power(x, y)
    got = fast("pow", dtype, x, y)
    assert_same_specials(got, want, f"pow {dtype}: x={x}, y={y}")
    if dtype == "float32" or EXTENDED:
        assert_accurate("pow", dtype, (x, y), got)


@pytest.mark.parametrize("dtype", DTYPES)
def test_exp_overflow_and_underflow_boundaries(dtype):
    """Hundreds of consecutive floats around the overflow threshold, the normal/denormal
    boundary and the last denormal: gradual underflow, inf exactly past the threshold."""
    fi = np.finfo(dtype)
    hi = wide(dtype)
    edges = [np.log(hi(fi.max)), np.log(hi(fi.tiny)), np.log(hi(fi.smallest_subnormal) / 2)]
    steps = np.arange(-300, 301)
    x = np.concatenate([np.asarray(e, dtype) + steps * np.spacing(np.asarray(e, dtype))
                        for e in edges]).astype(dtype)
    assert_accurate("exp", dtype, (x,))
    over, under = (np.asarray(e, dtype) for e in (edges[0], edges[2]))
    away = np.array([over + 0.01, over - 0.01, under - 0.01, under + 0.01], dtype)
    got = fast("exp", dtype, away)
    assert np.isinf(got[0]) and np.isfinite(got[1]) and got[2] == 0 and got[3] > 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_saturation_and_tails(dtype):
    """tanh is exactly +-1 and sigmoid exactly 1 once they round there; the lower tails
    underflow gradually instead of flushing to 0 early."""
    f32 = dtype == "float32"
    big = np.array([9.02, 20.0, 1e10] if f32 else [19.1, 40.0, 1e300], dtype)
    np.testing.assert_array_equal(fast("tanh", dtype, np.concatenate([big, -big])),
                                  [1, 1, 1, -1, -1, -1])
    big = np.array([17.4, 50.0, 1e10] if f32 else [37.5, 100.0, 1e300], dtype)
    np.testing.assert_array_equal(fast("sigmoid", dtype, big), 1)
    np.testing.assert_array_equal(fast("gelu", dtype, big), big)
    deep = np.array([-90.0, -1e10] if f32 else [-740.0, -1e300], dtype)  # denormal, then 0
    s = fast("sigmoid", dtype, deep)
    assert 0 < s[0] < np.finfo(dtype).tiny and s[1] == 0
    assert -np.finfo(dtype).tiny < fast("gelu", dtype, np.array([-10.3 if f32 else -21.3],
                                                                dtype))[0] < 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_sin_cos_beyond_the_reduction_limit_is_nan(dtype):
    fi = np.finfo(dtype)
    x = np.array([nm.TRIG_LIMIT, -nm.TRIG_LIMIT, 1e30, fi.max], dtype)
    assert np.isnan(fast("sin", dtype, x)).all() and np.isnan(fast("cos", dtype, x)).all()


def test_sqrt_is_exactly_numpys():
    rng = np.random.default_rng(5)
    for dt in DTYPES:
        x = np.concatenate([random_finite(dt, 10_000, rng), special_inputs(dt)])
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(fast("sqrt", dt, x), np.sqrt(x))


# ------------------------------------------------------------------------- code generation
def _vector_ir(op: str) -> str:
    """Optimized LLVM IR of a fresh (uncached: cached code cannot be inspected) copy of
    ``op``'s test loop; its two loops hold the float32 and the float64 function."""
    loop = numba.njit(error_model="numpy")(LOOPS[op].py_func)
    a, b = np.ones(4, np.float32), np.ones(4, np.float64)
    args = (a, a, a.copy(), b, b, b.copy()) if op == "pow" else (a, a.copy(), b, b.copy())
    loop(*args)
    return loop.inspect_llvm(loop.signatures[0])


@pytest.mark.parametrize("op", OPS)
def test_loops_vectorize_with_everything_inlined(op):
    ir = _vector_ir(op)
    assert re.search(r"<\d+ x float>", ir), f"{op}_f32 loop not vectorized"
    assert re.search(r"<\d+ x double>", ir), f"{op}_f64 loop not vectorized"
    calls = set(re.findall(r"call [^\n]*@\"?([\w.$]+)", ir))
    assert not [c for c in calls if "5numba8numerics" in c], f"not inlined: {calls}"
    assert not [c for c in calls if "raise" in c], f"exception path left in loop: {calls}"


def test_float32_functions_stay_in_float32():
    """A float64 constant or literal would silently widen the float32 arithmetic (and halve
    the vector width); sin/cos and pow use float64 on purpose, gelu only for its argument."""
    for op in ("exp", "log", "tanh", "sigmoid"):
        py_func = nm.FAST[(op, "float32")].py_func
        fn = numba.njit(fastmath={"contract"}, error_model="numpy")(py_func)
        fn(np.float32(0.5))  # a fresh, uncached compile: cached code cannot be inspected
        arith = [ln for ln in fn.inspect_llvm(fn.signatures[0]).splitlines()
                 if re.search(r"= (fadd|fsub|fmul|fdiv|call .*@llvm\.fma)", ln)]
        assert [ln for ln in arith if "float" in ln], f"{op}_f32: no float32 arithmetic seen"
        assert not [ln for ln in arith if "double" in ln], f"{op}_f32 computes in float64"


def test_parallel_loop_and_a_reassociating_caller_agree():
    """Generated kernels run prange loops with fastmath={'reassoc', 'contract'}; the inlined
    pow/tanh must still keep their special values and their double-double accuracy, and the
    parallel loop body must vectorize too."""
    from numba import prange

    @numba.njit(parallel=True, fastmath={"reassoc", "contract"}, error_model="numpy")
    def kernel(x, y, o1, o2):
        for i in prange(x.size):
            o1[i] = nm.pow_f64(x[i], y[i])
            o2[i] = nm.tanh_f64(x[i])

    rng = np.random.default_rng(3)
    x, y = sweep("pow", "float64", rng)
    x = np.concatenate([x, special_inputs("float64")])
    y = np.concatenate([y, np.resize(special_inputs("float64")[::-1], x.size - y.size)])
    o1, o2 = np.empty_like(x), np.empty_like(x)
    kernel(x, y, o1, o2)
    np.testing.assert_array_equal(o1, fast("pow", "float64", x, y))
    np.testing.assert_array_equal(o2, fast("tanh", "float64", x))
    assert re.search(r"<\d+ x double>", kernel.inspect_llvm(kernel.signatures[0])), \
        "the prange body did not vectorize"
