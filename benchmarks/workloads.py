"""The benchmark workloads (issue 5): each one as a graphopt graph and as every peer writes it.

The graph, its inputs (fixed seed) and the float64 reference come from
``graphopt.workloads`` (shared with the tests and the CLI demo); this module scales them and
adds one function per peer family: ``numpy`` (eager NumPy: ``np.einsum(optimize=True)`` +
ufuncs), ``opt_einsum`` (``contract_expression`` + NumPy), ``jax`` and ``torch`` (array-API
functions the harness wraps in ``jax.jit`` / ``torch.compile``), ``numexpr`` and ``numba``
(hand-written fused loop) where they apply. Peers get the same arrays; results are checked
against NumPy before timing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import graphopt as go
from graphopt import workloads as shared
from graphopt.workloads import elementwise_body, gelu_reference, small_body, softmax_reference


@dataclass
class Workload:
    name: str
    description: str
    inputs: dict
    build: Callable[[], go.Graph]
    numpy: Callable
    opt_einsum: Callable | None = None     # factory: inputs -> callable(**inputs)
    xp: Callable | None = None             # fn(xp_namespace, **inputs): for jax.numpy / torch
    numexpr: Callable | None = None
    numba: Callable | None = None          # factory: () -> callable(**inputs)
    rtol: float = 1e-4
    tags: set = field(default_factory=set)


def _peers_of(base: shared.Workload, numpy, oe=None, xp=None, numexpr=None, numba=None,
              tags=()) -> Workload:
    return Workload(base.name, base.description, base.inputs, base.build, numpy, oe, xp,
                    numexpr, numba, rtol=base.rtol, tags=set(tags))


# ------------------------------------------------------------------------------------- mlp

def mlp(scale: float = 1.0) -> Workload:
    b, i, h = max(8, int(512 * scale)), max(8, int(1024 * scale)), max(8, int(4096 * scale))
    base = shared.mlp(b, i, h)

    def numpy(x, w1, b1, w2, b2):
        return gelu_reference(x @ w1 + b1) @ w2 + b2

    def xp(m, x, w1, b1, w2, b2):
        h1 = x @ w1 + b1
        h1 = 0.5 * h1 * (1.0 + m.tanh(math.sqrt(2 / math.pi) * (h1 + 0.044715 * h1 * h1 * h1)))
        return h1 @ w2 + b2

    def oe(inp):
        import opt_einsum as oe
        e1 = oe.contract_expression("bi,ih->bh", inp["x"].shape, inp["w1"].shape)
        e2 = oe.contract_expression("bh,hi->bi", (inp["x"].shape[0], inp["w1"].shape[1]),
                                    inp["w2"].shape)
        return lambda x, w1, b1, w2, b2: e2(gelu_reference(e1(x, w1) + b1), w2) + b2

    return _peers_of(base, numpy, oe, xp, tags={"gemm"})


# ------------------------------------------------------------------------------- attention

def attention(scale: float = 1.0) -> Workload:
    B, H, Q, D = 8, 8, max(8, int(256 * scale)), 64
    base = shared.attention(B, H, Q, D)
    inv = 1.0 / math.sqrt(D)

    def numpy(q, k, v):
        s = np.einsum("bhqd,bhkd->bhqk", q, k, optimize=True) * np.float32(inv)
        return np.einsum("bhqk,bhkd->bhqd", softmax_reference(s), v, optimize=True)

    def xp(m, q, k, v):
        s = m.einsum("bhqd,bhkd->bhqk", q, k) * inv
        e = m.exp(s - m.max(s, axis=-1, keepdims=True))
        p = e / m.sum(e, axis=-1, keepdims=True)
        return m.einsum("bhqk,bhkd->bhqd", p, v)

    def oe(inp):
        import opt_einsum as oe
        sh = inp["q"].shape
        e1 = oe.contract_expression("bhqd,bhkd->bhqk", sh, sh)
        e2 = oe.contract_expression("bhqk,bhkd->bhqd", sh[:3] + (sh[2],), sh)
        return lambda q, k, v: e2(softmax_reference(e1(q, k) * np.float32(inv)), v)

    return _peers_of(base, numpy, oe, xp, tags={"gemm"})


# ----------------------------------------------------------------------------------- chain

def chain(scale: float = 1.0) -> Workload:
    base = shared.chain(max(16, int(1024 * scale)), 8)

    def numpy(a, b, c, d, e):
        return np.einsum("ij,jk,kl,lm,mn->in", a, b, c, d, e, optimize=True)

    def xp(m, a, b, c, d, e):
        return (((a @ b) @ c) @ d) @ e

    def oe(inp, optimize="auto"):
        import opt_einsum as oe
        expr = oe.contract_expression("ij,jk,kl,lm,mn->in", *(v.shape for v in inp.values()),
                                      optimize=optimize)
        return lambda a, b, c, d, e: expr(a, b, c, d, e)

    return _peers_of(base, numpy, oe, xp, tags={"contraction"})


# --------------------------------------------------------------------------------- mps ring

def mps_ring(scale: float = 1.0, sites: int = 12, bond: int = 32, phys: int = 2) -> Workload:
    base = shared.mps_ring(sites, max(4, int(bond * scale)), phys)
    equation = shared.mps_ring_equation(sites)

    def with_conjugates(conj, arrays):
        ops_ = []
        for v in arrays:
            ops_ += [v, conj(v)]
        return ops_

    def numpy(**kw):
        return np.einsum(equation, *with_conjugates(np.conj, kw.values()), optimize="greedy")

    def xp(m, **kw):
        return m.einsum(equation, *with_conjugates(m.conj, kw.values()))

    def oe(inp, optimize="auto"):
        import opt_einsum as oe
        expr = oe.contract_expression(equation, *(v.shape for v in inp.values()
                                                  for _ in range(2)), optimize=optimize)
        return lambda **kw: expr(*with_conjugates(np.conj, kw.values()))

    return _peers_of(base, numpy, oe, xp, tags={"contraction"})


# ----------------------------------------------------------------------------- elementwise

def elementwise(scale: float = 1.0) -> Workload:
    base = shared.elementwise(max(1024, int(4 * 2**20 * scale)))

    def numpy(x, y):
        return elementwise_body(np, x, y, np.float32(0.5), np.float32(1.0), np.float32(1e-3))

    def xp(m, x, y):
        return elementwise_body(m, x, y, 0.5, 1.0, 1e-3)

    def numexpr_fn(x, y):
        import numexpr as ne
        a = "exp(x*0.5)"
        c = f"tanh({a}*y + 1)"
        s = f"sqrt(abs({c}) + 0.001)"
        return ne.evaluate(f"where({s} > y, {s}, y) / ({a} + 1) - {c}*0.5",
                           local_dict={"x": x, "y": y})

    def numba_factory():
        import numba

        @numba.njit(parallel=True, fastmath=True, cache=True)
        def kern(x, y, out):
            for i in numba.prange(x.shape[0]):
                a = np.exp(x[i] * np.float32(0.5))
                b = a * y[i] + np.float32(1)
                c = np.tanh(b)
                d = np.sqrt(abs(c) + np.float32(1e-3))
                e = max(d, y[i])
                out[i] = e / (a + np.float32(1)) - c * np.float32(0.5)

        def run(x, y):
            out = np.empty_like(x)
            kern(x, y, out)
            return out
        return run

    return _peers_of(base, numpy, None, xp, numexpr_fn, numba_factory, tags={"memory"})


# ------------------------------------------------------------------------------- redundant

def redundant(scale: float = 1.0) -> Workload:
    base = shared.redundant(max(16, int(1024 * scale)))

    def numpy(a, b):
        y1 = np.einsum("ij,jk->ik", a, b, optimize=True)
        y2 = np.einsum("xy,yz->xz", a, b, optimize=True)
        np.einsum("ij,kj->ik", a, b, optimize=True).sum()
        return y1 + y2

    def xp(m, a, b):
        y1 = m.einsum("ij,jk->ik", a, b)
        y2 = m.einsum("xy,yz->xz", a, b)
        m.sum(m.einsum("ij,kj->ik", a, b))
        return y1 + y2

    def oe(inp):
        import opt_einsum as oe
        s = inp["a"].shape
        e1 = oe.contract_expression("ij,jk->ik", s, s)
        e2 = oe.contract_expression("xy,yz->xz", s, s)
        e3 = oe.contract_expression("ij,kj->ik", s, s)

        def run(a, b):
            y1, y2 = e1(a, b), e2(a, b)
            e3(a, b).sum()
            return y1 + y2
        return run

    return _peers_of(base, numpy, oe, xp, tags={"gemm"})


# ----------------------------------------------------------------------------------- small

def small(scale: float = 1.0) -> Workload:
    base = shared.small(16)

    def numpy(a, b, c):
        return small_body(np, lambda eq, *o: np.einsum(eq, *o, optimize=True), a, b, c)

    def xp(m, a, b, c):
        return small_body(m, m.einsum, a, b, c)

    def oe(inp):
        import opt_einsum as oe
        e1 = oe.contract_expression("ij,jk->ik", (16, 16), (16, 16))
        e2 = oe.contract_expression("ij,kj->ik", (16, 16), (16, 16))
        table = {"ij,jk->ik": e1, "ij,kj->ik": e2}
        return lambda a, b, c: small_body(np, lambda eq, *o: table[eq](*o), a, b, c)

    return _peers_of(base, numpy, oe, xp, tags={"overhead"})


ALL = {"mlp": mlp, "attention": attention, "chain": chain, "mps_ring": mps_ring,
       "elementwise": elementwise, "redundant": redundant, "small": small}
