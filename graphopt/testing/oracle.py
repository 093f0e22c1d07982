"""An oracle that shares none of graphopt's kernels: the graph re-evaluated in float64 /
complex128 NumPy with a propagated error bound per element.

``oracle(G, inputs)`` evaluates the *source* IR (no passes) op by op with every float
promoted to float64 and every complex to complex128 (integers and bools unchanged), and
carries, per element, an absolute error bound ``err`` that the graph computed in its own
dtypes may be off by (first-order propagation through each op's derivative, plus that op's
rounding in its dtype at ``ULPS`` ulp), and an ``uncertain`` mask: elements whose value
class cannot be predicted (a comparison within its error, a log of a value within its error
of 0, overflow past the dtype's range, a float->int cast near a boundary). Everything else
must match: ``|got - value| <= 2 * err`` (graphopt and the oracle's own float64 each within
``err`` of the exact value) with NaN and inf placement exact.

``check_against_oracle(G, outputs, inputs)`` raises ``AssertionError`` naming the output,
the element and the numbers. ``graphopt.testing.fuzz.random_case`` makes the graphs the
differential fuzzer (``tests/property/test_oracle.py``) feeds it.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from .. import ir
from ..ir import ops

# Allowed rounding of one op in ulp of its result (generous: NumPy's SIMD float32
# transcendentals, libm, and numba_math's documented bounds all fit under these).
ARITH_ULPS = 2.0
TRANSCENDENTAL_ULPS = 8.0
_TRANSCENDENTAL = {"exp", "log", "sqrt", "tanh", "sigmoid", "gelu", "sin", "cos", "pow"}


@dataclass
class Bounded:
    """An oracle value: ``value`` (float64/complex128/int/bool), ``err`` (absolute bound,
    float64), ``uncertain`` (bool mask)."""

    value: np.ndarray
    err: np.ndarray
    uncertain: np.ndarray


def _wide(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    return np.dtype(np.complex128) if dt.kind == "c" else \
        np.dtype(np.float64) if dt.kind == "f" else dt


def _eps(dtype) -> float:
    dt = np.dtype(dtype)
    return float(np.finfo(dt).eps) / 2 if dt.kind in "fc" else 0.0


def _tiny(dtype) -> float:
    dt = np.dtype(dtype)
    return float(np.finfo(dt).smallest_subnormal) * 16 if dt.kind in "fc" else 0.0


def _mag(x) -> np.ndarray:
    return np.abs(np.asarray(x)).astype(np.float64)


def _clean(e) -> np.ndarray:
    return np.where(np.isfinite(e), e, np.inf).astype(np.float64)


def oracle(G, inputs) -> list[Bounded]:
    """The outputs of IR ``G`` on ``inputs`` (in ``G.graph['inputs']`` order) as
    ``Bounded`` values."""
    env: dict[int, Bounded] = {}
    for nid, a in zip(G.graph["inputs"], inputs):
        a = np.asarray(a)
        env[nid] = Bounded(a.astype(_wide(a.dtype)), np.zeros(a.shape),
                           np.zeros(a.shape, bool))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in ir.topo_order(G):
            if n in env:
                continue
            env[n] = _node(G, n, [env[u] for u in ir.operands(G, n)])
    return [env[o] for o in G.graph["outputs"]]


def _node(G, n, args: list[Bounded]) -> Bounded:
    d = G.nodes[n]
    op, attrs, dt = d["op"], d["attrs"], d["dtype"]
    if op == "const":
        v = np.asarray(attrs["value"])
        return Bounded(v.astype(_wide(v.dtype)), np.zeros(v.shape), np.zeros(v.shape, bool))
    kind = ops.OPS[op].kind
    vals = [a.value for a in args]
    if op == "astype":
        y = vals[0].astype(_wide(attrs["dtype"]))
    else:
        y = np.asarray(ops.OPS[op].impl(vals, attrs))
        if np.dtype(dt).kind in "fc":
            y = y.astype(_wide(dt))
    if kind in (ops.LAYOUT, ops.SLICE):
        e = np.asarray(ops.OPS[op].impl([a.err for a in args], attrs))
        unc = np.asarray(ops.OPS[op].impl([a.uncertain for a in args], attrs))
        return Bounded(y, e, unc)
    if kind == ops.REDUCTION:
        e, unc = _reduction(op, attrs, args[0], y, dt)
    elif kind == ops.CONTRACTION:
        e, unc = _einsum(attrs["equation"], args, y, dt)
    else:
        e, unc = _elementwise(op, args, y, dt)
        if np.dtype(dt).kind == "c" and op not in ("astype", "where"):
            unc = unc | _complex_range_risk(args, dt)
    e = _clean(e)
    u = _eps(dt)
    if u:
        ulps = TRANSCENDENTAL_ULPS if op in _TRANSCENDENTAL else ARITH_ULPS
        local = ulps * u * _mag(y)
        e = e + np.where(np.isfinite(local), local, 0) + _tiny(dt)
        big = float(np.finfo(np.dtype(dt)).max)
        for part in ((np.real(y), np.imag(y)) if np.iscomplexobj(y) else (y,)):
            mag = _mag(part)
            unc = unc | (np.isfinite(mag) & (mag + e >= big))     # may overflow in ``dt``
        unc = unc | (~np.isfinite(e))
    e = np.where(np.isfinite(_mag(y)), e, 0.0)   # a non-finite value is exact or uncertain
    return Bounded(y, np.broadcast_to(e, y.shape).copy(), np.broadcast_to(unc, y.shape).copy())


def _complex_range_risk(args: list[Bounded], dt):
    """Elements where complex arithmetic in ``dt`` forms products of the parts (or powers of
    ``|a|``) outside its range: NumPy's own result is inf, nan or 0 there, at a finite
    value."""
    fi = np.finfo(np.dtype(dt))
    lim = math.sqrt(float(fi.max)) / 4
    risk = False
    for a in args:
        for part in (np.real(a.value), np.imag(a.value)):
            m = _mag(part)
            risk = risk | (m > lim) | ((m < 1 / lim) & (m > 0))
    return risk


def _any(*masks):
    out = masks[0]
    for m in masks[1:]:
        out = out | m
    return out


def _elementwise(op, args: list[Bounded], y, dt):
    a = args[0]
    x, ea = a.value, a.err
    ax = _mag(x)
    unc = _any(*[b.uncertain for b in args])
    if op in ("neg", "conj", "real", "imag", "abs", "relu", "maximum", "minimum"):
        return np.maximum(ea, args[1].err) if len(args) > 1 else ea, unc
    if op == "exp":
        return _mag(y) * np.expm1(np.minimum(ea, 700.0)), unc
    if op in ("log", "reciprocal"):
        near0 = ax <= ea * 1.01
        e = ea / (ax - ea) if op == "log" else ea / (ax * (ax - ea))
        return np.where(near0, 0.0, e), unc | (near0 & (ea > 0))
    if op == "sqrt":
        near0 = ax <= ea
        return np.sqrt(ax + ea) - np.sqrt(np.maximum(ax - ea, 0)), unc | (near0 & (ea > 0) &
                                                                        (np.real(x) < 0))
    if op in ("tanh", "sin", "cos"):
        if np.iscomplexobj(x):   # |sin'| = |cos| <= 1 + |y|; tanh' = 1 - y^2
            return ea * (1.0 + (_mag(y) ** 2 if op == "tanh" else _mag(y))), unc
        return (ea if op == "tanh" else np.minimum(ea, 2.0)), unc
    if op in ("sigmoid", "gelu"):
        return ea * (0.25 if op == "sigmoid" else 1.2) * (1.0 + np.iscomplexobj(x)), unc
    if op == "square":
        return 2 * ax * ea + ea * ea, unc
    if op == "astype":
        return _astype(args[0], y, dt)
    b = args[1] if len(args) > 1 else None
    if op in ("add", "sub"):
        return ea + b.err, unc
    if op == "mul":
        return _mag(b.value) * ea + ax * b.err + ea * b.err, unc
    if op == "div":
        bb, eb = _mag(b.value), b.err
        near0 = bb <= eb * 1.01
        e = (ax * eb + bb * ea) / (bb * (bb - eb))
        return np.where(near0, 0.0, e), unc | (near0 & (eb > 0))
    if op == "pow":
        return _pow(args[0], b, y, unc, dt)
    if op in ops.COMPARISONS:
        wide = np.complex128 if np.iscomplexobj(x) or np.iscomplexobj(b.value) else np.float64
        gap = _mag(np.asarray(x).astype(wide) - np.asarray(b.value).astype(wide))
        tie = (ea + b.err > 0) & (gap <= 2 * (ea + b.err))
        return np.zeros(np.shape(y)), unc | tie
    if op == "where":
        c, t, f = args
        cond = np.asarray(c.value).astype(bool)
        return np.where(cond, t.err, f.err), (c.uncertain | np.where(cond, t.uncertain,
                                                                     f.uncertain))
    raise NotImplementedError(f"oracle: no error rule for op {op!r}")


def _pow(a: Bounded, b: Bounded, y, unc, dt):
    ax, ea, eb = _mag(a.value), a.err, b.err
    near0 = ax <= ea * 1.01
    log_a = np.abs(np.log(np.where(ax > 0, ax, 1.0)))
    if np.iscomplexobj(a.value) or np.iscomplexobj(b.value):
        # exp(b log a): the rounding of log a (and of its argument, up to pi) is amplified
        # by |b|, as a relative error of the result
        log_a = log_a + np.pi
        rel = _mag(b.value) * ea / np.where(near0, 1.0, ax - ea) + log_a * eb + \
            4 * _eps(dt) * _mag(b.value) * log_a
        e = _mag(y) * np.expm1(np.minimum(rel, 700.0))
        return np.where(near0, 0.0, e), unc | (near0 & (ea > 0))
    negative_base = (np.real(a.value) < 0) & (eb > 0)
    # an exponent within its error of 0: a**0 is 1, but 0**tiny is 0 and inf**tiny inf
    zero_exponent = (eb > 0) & (_mag(b.value) <= eb) & ((ax == 0) | ~np.isfinite(ax))
    negative_base = negative_base | zero_exponent
    with np.errstate(all="ignore"):
        rel = _mag(b.value) * ea / np.where(near0, 1.0, ax - ea) + log_a * eb
    e = _mag(y) * np.expm1(np.minimum(rel, 700.0))
    return np.where(near0, 0.0, e), unc | (near0 & (ea > 0)) | negative_base


def _astype(a: Bounded, y, dt):
    src, dst = np.asarray(a.value).dtype, np.dtype(dt)
    ea, unc = a.err, a.uncertain
    if dst.kind in "fc":
        return (ea if dst.kind == "c" or src.kind != "c" else ea), unc
    x = np.real(a.value) if src.kind == "c" else np.asarray(a.value)
    if dst.kind == "b":
        return np.zeros(np.shape(y)), unc | ((ea > 0) & (_mag(a.value) <= ea))
    if src.kind in "fc":
        lo, hi = np.trunc(x - ea), np.trunc(x + ea)
        info = np.iinfo(dst)
        bad = ~np.isfinite(x) | (x - ea <= info.min) | (x + ea >= info.max) | (lo != hi)
        return np.zeros(np.shape(y)), unc | bad
    return np.zeros(np.shape(y)), unc


def _reduction(op, attrs, a: Bounded, y, dt):
    axes = tuple(attrs["axes"])
    keep = attrs["keepdims"]
    count = math.prod(np.shape(a.value)[i] for i in axes)
    unc = np.any(a.uncertain, axis=axes, keepdims=keep)
    if op in ("max", "min"):
        e = np.max(a.err, axis=axes, keepdims=keep, initial=0.0)
        return e, unc
    mag = np.sum(_mag(a.value), axis=axes, keepdims=keep)
    e = np.sum(a.err, axis=axes, keepdims=keep) + (count + 1) * _eps(dt) * mag
    unc = unc | _partial_sums_may_overflow(mag, dt)
    if op == "mean":
        e = e / max(count, 1)
    return e, unc


def _partial_sums_may_overflow(abs_sum, dt):
    """A sum whose terms' magnitudes add up past ``dt``'s range: a partial sum (in whatever
    order the implementation adds) may overflow although the total fits."""
    dt = np.dtype(dt)
    return abs_sum >= float(np.finfo(dt).max) if dt.kind in "fc" else False


def _einsum(eq, args: list[Bounded], y, dt):
    from ..ir.einsum import split
    from ..ir.einsum_numpy import evaluate

    ins, out = split(eq)
    sizes = {c: s for t, a in zip(ins, args) for c, s in zip(t, np.shape(a.value))}
    summed = math.prod(sizes[c] for c in set("".join(ins)) - set(out))
    mags = [_mag(a.value) for a in args]
    base = np.asarray(evaluate(eq, mags))
    grown = np.asarray(evaluate(eq, [m + a.err for m, a in zip(mags, args)]))
    e = (grown - base) + (summed + len(args) + 1) * _eps(dt) * base
    # an output element is uncertain if any term of its sum has an uncertain factor
    ones = [np.ones(np.shape(a.value)) for a in args]
    hits = sum(np.asarray(evaluate(eq, [a.uncertain.astype(np.float64) if j == k else ones[j]
                                        for j, a in enumerate(args)]))
               for k in range(len(args)))
    return e, (hits > 0) | _partial_sums_may_overflow(base, dt)


def check_against_oracle(G, outputs, inputs, *, label: str = "") -> None:
    """Assert each of ``outputs`` (arrays, in ``G.graph['outputs']`` order) matches the
    oracle of the source IR ``G`` on ``inputs``: within twice the bound where the value class
    is certain, NaN/inf placement exact, dtype and shape exact."""
    for k, (got, want) in enumerate(zip(outputs, oracle(G, inputs))):
        with np.errstate(all="ignore"):
            _check_one(G, k, got, want, label)


def _check_one(G, k, got, want: Bounded, label: str) -> None:
    node = G.nodes[G.graph["outputs"][k]]
    got = np.asarray(got)
    where = f"{label} output {k} ({node['op']} {tuple(node['shape'])} {node['dtype']})"
    assert got.dtype.name == node["dtype"] and got.shape == tuple(node["shape"]), \
        f"{where}: got {got.shape} {got.dtype}"
    _compare(got, want, where)


def _compare(got, want: Bounded, where: str) -> None:
    v = want.value
    if got.dtype.kind in "biu":
        ok = want.uncertain | (got == v)
    elif got.dtype.kind == "c":
        g = got.astype(np.complex128)
        finite_v = np.isfinite(v)
        close = np.abs(g - v) <= 2 * want.err * np.sqrt(2)
        # complex non-finite values: NumPy's and C99's special cases differ in the part
        # (inf+nanj vs nan+nanj); only that the value is not finite is checked
        ok = want.uncertain | np.where(finite_v, np.isfinite(g) & close, ~np.isfinite(g))
    else:
        g = got.astype(np.float64)
        nan_ok = np.isnan(g) == np.isnan(v)
        inf_ok = np.where(np.isinf(v), g == v, ~np.isinf(g))
        close = np.isnan(v) | np.isinf(v) | (np.abs(g - v) <= 2 * want.err)
        ok = want.uncertain | (nan_ok & inf_ok & close)
    if not ok.all():
        _fail(got, v, want, ok, where)


def _fail(got, v, want: Bounded, ok, where: str):
    bad = np.argwhere(~ok)
    i = tuple(bad[0]) if bad.size else ()
    raise AssertionError(f"{where}: {len(bad)} element(s) off the oracle; first at {i}: got "
                         f"{got[i]!r}, oracle {v[i]!r} +- {2 * want.err[i]:.3g}")
