"""The vector-Jacobian product of every op, written as graph ops: the one place that says how
a cotangent flows back through an op.

A rule takes the op's ``Primal`` (operand and result Tensors, attrs, which operands need a
cotangent) and the result's cotangent, and returns one cotangent per operand (None where
none flows). A rule may return a cotangent of the result's shape and dtype for a broadcast
operand: ``reverse.fit_cotangent`` sums it down to the operand's shape and casts it to the
operand's dtype (its real part for a real operand), one rule for every op.

Complex values follow JAX's convention (``jax.grad``): the cotangent pairs with a tangent
as ``Re(ct * dz)``, so a holomorphic op's rule is ``ct * f'(z)`` (no conjugate) and the
gradient of a real loss ``L(z)`` is ``dL/dx - i dL/dy``; descend along its conjugate.

Tie rules (as JAX's): ``maximum``/``minimum`` give each of two equal operands half the
cotangent; ``max``/``min`` reductions split it evenly among the elements equal to the
result; ``abs`` and ``relu`` have gradient 0 at 0. A NaN result passes no cotangent back
through ``maximum``/``minimum`` and makes a ``max``/``min`` reduction's gradient NaN.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...ir import activations, ops
from .. import tensor as T
from ..tensor import Tensor
from .einsum_vjp import einsum_vjp


@dataclass(frozen=True)
class Primal:
    """One forward op as its VJP rule sees it."""

    args: tuple[Tensor, ...]   # the operands, in order (``x * x`` lists ``x`` twice)
    out: Tensor                # the op's result
    attrs: dict
    needs: tuple[bool, ...]    # operand k takes a cotangent


Rule = Callable[[Primal, Tensor], tuple]
VJP_RULES: dict[str, Rule] = {}
# ops whose results carry no derivative: comparisons (boolean results)
NON_DIFFERENTIABLE = frozenset(ops.COMPARISONS)


def vjp_rule(*names: str):
    """Register the decorated function as the VJP rule of the ops ``names``."""
    def register(fn: Rule) -> Rule:
        for name in names:
            if name in VJP_RULES:
                raise ValueError(f"op {name!r} already has a VJP rule")
            VJP_RULES[name] = fn
        return fn
    return register


def _zero(like: Tensor) -> Tensor:
    """A zero of ``like``'s dtype (a scalar: ``where`` broadcasts it)."""
    return like.graph.const(np.zeros((), dtype=like.dtype))


def _keepdims(ct: Tensor, axes, keepdims: bool, ndim: int) -> Tensor:
    """A reduction's result cotangent reshaped with the reduced axes back as size 1."""
    if keepdims:
        return ct
    shape, it = [], iter(ct.shape)
    for i in range(ndim):
        shape.append(1 if i in axes else next(it))
    return T.reshape(ct, tuple(shape))


# ------------------------------------------------------------------------------ elementwise

@vjp_rule("neg")
def _neg(p, ct):
    return (-ct,)


@vjp_rule("conj")
def _conj(p, ct):
    return (T.conj(ct),)


@vjp_rule("real")
def _real(p, ct):
    return (ct,)       # fit_cotangent makes it complex: Re(ct * dz) = ct * dx


@vjp_rule("imag")
def _imag(p, ct):
    return (ct * -1j,)  # Re(-i ct * (dx + i dy)) = ct * dy


@vjp_rule("abs")
def _abs(p, ct):
    (x,), y = p.args, p.out
    if x.dtype.kind == "c":
        # d|z| = Re(conj(z) dz) / |z|; 0 at z = 0
        safe = T.where(y == 0, 1.0, y)
        return (T.where(y == 0, _zero(ct), ct) * (T.conj(x) / safe),)
    return (T.where(x > 0, ct, T.where(x < 0, -ct, _zero(ct))),)


@vjp_rule("exp")
def _exp(p, ct):
    return (ct * p.out,)


@vjp_rule("log")
def _log(p, ct):
    return (ct / p.args[0],)


@vjp_rule("sqrt")
def _sqrt(p, ct):
    return (ct / (2 * p.out),)


@vjp_rule("tanh")
def _tanh(p, ct):
    return (ct * (1 - T.square(p.out)),)


@vjp_rule("sigmoid")
def _sigmoid(p, ct):
    return (ct * (p.out * (1 - p.out)),)


@vjp_rule("relu")
def _relu(p, ct):
    return (T.where(p.args[0] > 0, ct, _zero(ct)),)


@vjp_rule("gelu")
def _gelu(p, ct):
    # gelu(x) = x s(w), w = 2c (x + k x**3): gelu' = s + x s (1 - s) w'
    (x,) = p.args
    if x.dtype.kind in "biu":
        x = T.astype(x, p.out.dtype)
    s = T.sigmoid(activations.GELU_2C * (x + activations.GELU_K * (x * x * x)))
    dw = activations.GELU_2C * (1 + 3 * activations.GELU_K * T.square(x))
    return (ct * (s + x * s * (1 - s) * dw),)


@vjp_rule("sin")
def _sin(p, ct):
    return (ct * T.cos(p.args[0]),)


@vjp_rule("cos")
def _cos(p, ct):
    return (-ct * T.sin(p.args[0]),)


@vjp_rule("square")
def _square(p, ct):
    return (ct * (2 * p.args[0]),)


@vjp_rule("reciprocal")
def _reciprocal(p, ct):
    return (-ct * T.square(p.out),)


@vjp_rule("add")
def _add(p, ct):
    return ct, ct


@vjp_rule("sub")
def _sub(p, ct):
    return ct, -ct


@vjp_rule("mul")
def _mul(p, ct):
    a, b = p.args
    return (ct * b if p.needs[0] else None), (ct * a if p.needs[1] else None)


@vjp_rule("div")
def _div(p, ct):
    a, b = p.args
    da = ct / b if p.needs[0] else None
    return da, (-ct * p.out / b if p.needs[1] else None)


@vjp_rule("pow")
def _pow(p, ct):
    # JAX's rules: d/da = b a**(b-1), 0 where b == 0; d/db = log(a) a**b, 0 where a == 0
    a, b = p.args
    da = db = None
    if p.needs[0]:
        b_minus_1 = T.where(b == 0, 1, b) - 1
        da = ct * T.where(b == 0, _zero(ct), b * T.pow(a, b_minus_1))
    if p.needs[1]:
        db = ct * (T.log(T.where(a == 0, 1, a)) * p.out)
    return da, db


def _chosen_share(mine: Tensor, other: Tensor, y: Tensor, ct: Tensor) -> Tensor:
    """The cotangent share of ``mine`` in ``maximum``/``minimum``: all where it alone is
    the result, half where both are, none otherwise (NaN results included)."""
    half = T.where(other == y, 0.5, 1.0)
    return T.where(mine == y, ct * half, _zero(ct))


@vjp_rule("maximum", "minimum")
def _extremum(p, ct):
    a, b = p.args
    return (_chosen_share(a, b, p.out, ct) if p.needs[0] else None,
            _chosen_share(b, a, p.out, ct) if p.needs[1] else None)


@vjp_rule("where")
def _where(p, ct):
    cond, _, _ = p.args
    zero = _zero(ct)
    return (None, T.where(cond, ct, zero) if p.needs[1] else None,
            T.where(cond, zero, ct) if p.needs[2] else None)


@vjp_rule("astype")
def _astype(p, ct):
    return (ct,)       # fit_cotangent casts it back to the operand's dtype


# ------------------------------------------------------------------------------- reductions

@vjp_rule("sum")
def _sum(p, ct):
    (x,) = p.args
    ct = _keepdims(ct, p.attrs["axes"], p.attrs["keepdims"], x.ndim)
    return (T.broadcast_to(ct, x.shape),)


@vjp_rule("mean")
def _mean(p, ct):
    (x,) = p.args
    count = int(np.prod([x.shape[a] for a in p.attrs["axes"]]))
    ct = _keepdims(ct, p.attrs["axes"], p.attrs["keepdims"], x.ndim)
    return (T.broadcast_to(ct / max(count, 1), x.shape),)


@vjp_rule("max", "min")
def _reduce_extremum(p, ct):
    (x,) = p.args
    axes, keep = p.attrs["axes"], p.attrs["keepdims"]
    y = _keepdims(p.out, axes, keep, x.ndim)
    chosen = T.astype(x == y, ct.dtype)
    count = T.sum(chosen, axis=axes, keepdims=True)
    return (chosen * (_keepdims(ct, axes, keep, x.ndim) / count),)


# ----------------------------------------------------------------------------------- layout

@vjp_rule("reshape")
def _reshape(p, ct):
    return (T.reshape(ct, p.args[0].shape),)


@vjp_rule("transpose")
def _transpose(p, ct):
    return (T.transpose(ct, tuple(int(i) for i in np.argsort(p.attrs["axes"]))),)


@vjp_rule("broadcast_to")
def _broadcast_to(p, ct):
    return (ct,)       # fit_cotangent sums it back over the broadcast axes


@vjp_rule("slice")
def _slice(p, ct):
    (x,) = p.args
    return (x.graph._add("pad", [ct], {"window": p.attrs["window"], "shape": x.shape}),)


@vjp_rule("pad")
def _pad(p, ct):
    return (ct.graph._add("slice", [ct], {"window": p.attrs["window"]}),)


@vjp_rule("einsum")
def _einsum(p, ct):
    return tuple(einsum_vjp(p.attrs["equation"], p.args, ct, k) if need else None
                 for k, need in enumerate(p.needs))
