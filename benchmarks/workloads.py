"""The benchmark workloads (issue 5): each one as a graphopt graph and as every peer writes it.

A workload supplies the inputs (fixed seed), a graphopt ``Graph`` builder, and one function
per peer family: ``numpy`` (eager NumPy: ``np.einsum(optimize=True)`` + ufuncs), ``opt_einsum``
(``contract_expression`` + NumPy), ``jax`` and ``torch`` (array-API functions the harness wraps
in ``jax.jit`` / ``torch.compile``), ``numexpr`` and ``numba`` (hand-written fused loop) where
they apply. Peers get the same arrays; results are checked against NumPy before timing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import graphopt as go


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


def _rng(seed=0):
    return np.random.default_rng(seed)


def _gelu_np(x):
    k = np.float32(math.sqrt(2 / math.pi))
    return 0.5 * x * (1.0 + np.tanh(k * (x + np.float32(0.044715) * x * x * x)))


# ------------------------------------------------------------------------------------- mlp

def mlp(scale: float = 1.0) -> Workload:
    b, i, h = max(8, int(512 * scale)), max(8, int(1024 * scale)), max(8, int(4096 * scale))
    r = _rng(1)
    inputs = {"x": r.standard_normal((b, i), dtype=np.float32),
              "w1": (r.standard_normal((i, h), dtype=np.float32) / np.sqrt(i)).astype(np.float32),
              "b1": r.standard_normal(h, dtype=np.float32),
              "w2": (r.standard_normal((h, i), dtype=np.float32) / np.sqrt(h)).astype(np.float32),
              "b2": r.standard_normal(i, dtype=np.float32)}

    def build():
        g = go.Graph("mlp")
        x, w1, b1, w2, b2 = (g.input(k, v.shape, "float32") for k, v in inputs.items())
        h1 = go.gelu(go.einsum("bi,ih->bh", x, w1) + b1)
        g.output(go.einsum("bh,hi->bi", h1, w2) + b2)
        return g

    def numpy(x, w1, b1, w2, b2):
        return _gelu_np(x @ w1 + b1) @ w2 + b2

    def xp(m, x, w1, b1, w2, b2):
        h1 = x @ w1 + b1
        h1 = 0.5 * h1 * (1.0 + m.tanh(math.sqrt(2 / math.pi) * (h1 + 0.044715 * h1 * h1 * h1)))
        return h1 @ w2 + b2

    def oe(inp):
        import opt_einsum as oe
        e1 = oe.contract_expression("bi,ih->bh", inp["x"].shape, inp["w1"].shape)
        e2 = oe.contract_expression("bh,hi->bi", (inp["x"].shape[0], inp["w1"].shape[1]),
                                    inp["w2"].shape)
        return lambda x, w1, b1, w2, b2: e2(_gelu_np(e1(x, w1) + b1), w2) + b2

    return Workload("mlp", f"gelu(x@W1+b1)@W2+b2, x ({b},{i}), W1 ({i},{h}), float32", inputs,
                    build, numpy, oe, xp, rtol=2e-3, tags={"gemm"})


# ------------------------------------------------------------------------------- attention

def attention(scale: float = 1.0) -> Workload:
    B, H, Q, D = 8, 8, max(8, int(256 * scale)), 64
    r = _rng(2)
    inputs = {k: r.standard_normal((B, H, Q, D), dtype=np.float32) for k in ("q", "k", "v")}
    inv = 1.0 / math.sqrt(D)

    def build():
        g = go.Graph("attention")
        q, k, v = (g.input(n, a.shape, "float32") for n, a in inputs.items())
        s = go.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(D)
        g.output(go.einsum("bhqk,bhkd->bhqd", go.softmax(s, axis=-1), v))
        return g

    def _softmax(s):
        e = np.exp(s - s.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def numpy(q, k, v):
        s = np.einsum("bhqd,bhkd->bhqk", q, k, optimize=True) * np.float32(inv)
        return np.einsum("bhqk,bhkd->bhqd", _softmax(s), v, optimize=True)

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
        return lambda q, k, v: e2(_softmax(e1(q, k) * np.float32(inv)), v)

    return Workload("attention", f"softmax(q k^T/sqrt(d)) v, b={B} h={H} q=k={Q} d={D}, float32",
                    inputs, build, numpy, oe, xp, rtol=2e-3, tags={"gemm"})


# ----------------------------------------------------------------------------------- chain

def chain(scale: float = 1.0) -> Workload:
    n = max(16, int(1024 * scale))
    r = _rng(3)
    shapes = {"a": (n, 8), "b": (8, n), "c": (n, 8), "d": (8, n), "e": (n, 8)}
    inputs = {k: r.standard_normal(s, dtype=np.float32) for k, s in shapes.items()}

    def build():
        g = go.Graph("chain")
        a, b, c, d, e = (g.input(k, v.shape, "float32") for k, v in inputs.items())
        # Written left to right: (((a b) c) d) e makes n x n intermediates.
        ab = go.einsum("ij,jk->ik", a, b)
        abc = go.einsum("ik,kl->il", ab, c)
        abcd = go.einsum("il,lm->im", abc, d)
        g.output(go.einsum("im,mn->in", abcd, e))
        return g

    def numpy(a, b, c, d, e):
        return np.einsum("ij,jk,kl,lm,mn->in", a, b, c, d, e, optimize=True)

    def xp(m, a, b, c, d, e):
        return (((a @ b) @ c) @ d) @ e

    def oe(inp):
        import opt_einsum as oe
        expr = oe.contract_expression("ij,jk,kl,lm,mn->in", *(v.shape for v in inp.values()))
        return lambda a, b, c, d, e: expr(a, b, c, d, e)

    return Workload("chain", f"5-matrix chain written in a bad order, sizes {n} and 8, float32",
                    inputs, build, numpy, oe, xp, rtol=1e-3, tags={"contraction"})


# --------------------------------------------------------------------------------- mps ring

def mps_ring(scale: float = 1.0, sites: int = 12, bond: int = 32, phys: int = 2) -> Workload:
    bond = max(4, int(bond * scale))
    r = _rng(4)
    inputs = {f"a{i}": (r.standard_normal((bond, phys, bond)) +
                        1j * r.standard_normal((bond, phys, bond))) / bond for i in range(sites)}
    from opt_einsum import get_symbol

    def eq():
        terms, n = [], sites
        for i in range(n):  # ket: bonds k_i, k_{i+1}; bra: b_i, b_{i+1}; shared physical p_i
            k0, k1 = get_symbol(i), get_symbol((i + 1) % n)
            b0, b1 = get_symbol(n + i), get_symbol(n + (i + 1) % n)
            p = get_symbol(2 * n + i)
            terms.append(k0 + p + k1)
            terms.append(b0 + p + b1)
        return ",".join(terms) + "->"

    equation = eq()

    def build():
        g = go.Graph("mps_ring")
        ts = [g.input(k, v.shape, "complex128") for k, v in inputs.items()]
        ops_ = []
        for t in ts:
            ops_ += [t, go.conj(t)]
        g.output(go.einsum(equation, *ops_))
        return g

    def numpy(**kw):
        ops_ = []
        for v in kw.values():
            ops_ += [v, v.conj()]
        return np.einsum(equation, *ops_, optimize="greedy")

    def xp(m, **kw):
        ops_ = []
        for v in kw.values():
            ops_ += [v, m.conj(v)]
        return m.einsum(equation, *ops_)

    def oe(inp):
        import opt_einsum as oe
        shapes = []
        for v in inp.values():
            shapes += [v.shape, v.shape]
        expr = oe.contract_expression(equation, *shapes)

        def run(**kw):
            ops_ = []
            for v in kw.values():
                ops_ += [v, v.conj()]
            return expr(*ops_)
        return run

    return Workload("mps_ring", f"MPS ring norm, {sites} sites, bond {bond}, physical {phys}, "
                    "complex128", inputs, build, numpy, oe, xp, rtol=1e-8, tags={"contraction"})


# ----------------------------------------------------------------------------- elementwise

def elementwise(scale: float = 1.0) -> Workload:
    n = max(1024, int(4 * 2**20 * scale))
    r = _rng(5)
    inputs = {"x": r.standard_normal(n, dtype=np.float32),
              "y": r.standard_normal(n, dtype=np.float32)}

    def body(m, x, y, half, one, eps):
        # 12 ops: exp, mul, add, tanh, abs, sqrt, maximum, div, sub, mul, sigmoid-like, add
        a = m.exp(x * half)
        b = a * y + one
        c = m.tanh(b)
        d = m.sqrt(m.abs(c) + eps)
        e = m.maximum(d, y)
        return (e / (a + one)) - c * half

    def build():
        g = go.Graph("elementwise")
        x, y = g.input("x", (n,), "float32"), g.input("y", (n,), "float32")
        g.output(body(go, x, y, 0.5, 1.0, 1e-3))
        return g

    def numpy(x, y):
        return body(np, x, y, np.float32(0.5), np.float32(1.0), np.float32(1e-3))

    def xp(m, x, y):
        return body(m, x, y, 0.5, 1.0, 1e-3)

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

    return Workload("elementwise", f"12-op elementwise chain over {n} float32", inputs, build,
                    numpy, None, xp, numexpr_fn, numba_factory, rtol=1e-4, tags={"memory"})


# ------------------------------------------------------------------------------- redundant

def redundant(scale: float = 1.0) -> Workload:
    n = max(16, int(1024 * scale))
    r = _rng(6)
    inputs = {"a": r.standard_normal((n, n), dtype=np.float32),
              "b": r.standard_normal((n, n), dtype=np.float32)}

    def build():
        g = go.Graph("redundant")
        a, b = g.input("a", (n, n), "float32"), g.input("b", (n, n), "float32")
        y1 = go.einsum("ij,jk->ik", a, b)
        y2 = go.einsum("xy,yz->xz", a, b)          # the same product, other index names
        go.einsum("ij,kj->ik", a, b).sum()          # a dead branch: never output
        g.output(y1 + y2)
        return g

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

    return Workload("redundant", f"one {n}x{n} GEMM written twice + a dead GEMM, float32",
                    inputs, build, numpy, oe, xp, rtol=1e-3, tags={"gemm"})


# ----------------------------------------------------------------------------------- small

def small(scale: float = 1.0) -> Workload:
    r = _rng(7)
    inputs = {k: r.standard_normal((16, 16), dtype=np.float32) for k in ("a", "b", "c")}

    def body(m, einsum, a, b, c):
        x = einsum("ij,jk->ik", a, b)       # 1
        y = m.tanh(x) + c                   # 2, 3
        z = einsum("ij,kj->ik", y, a)       # 4
        w = m.exp(z * 0.01) * b             # 5, 6, 7
        v = w - a                           # 8
        return m.maximum(v, c) * 0.5        # 9, 10

    def build():
        g = go.Graph("small")
        a, b, c = (g.input(k, (16, 16), "float32") for k in inputs)
        g.output(body(go, go.einsum, a, b, c))
        return g

    def numpy(a, b, c):
        return body(np, lambda eq, *o: np.einsum(eq, *o, optimize=True), a, b, c)

    def xp(m, a, b, c):
        return body(m, m.einsum, a, b, c)

    def oe(inp):
        import opt_einsum as oe
        e1 = oe.contract_expression("ij,jk->ik", (16, 16), (16, 16))
        e2 = oe.contract_expression("ij,kj->ik", (16, 16), (16, 16))
        table = {"ij,jk->ik": e1, "ij,kj->ik": e2}
        return lambda a, b, c: body(np, lambda eq, *o: table[eq](*o), a, b, c)

    return Workload("small", "10 ops on 16x16 float32: per-call overhead", inputs, build, numpy,
                    oe, xp, rtol=1e-4, tags={"overhead"})


ALL = {"mlp": mlp, "attention": attention, "chain": chain, "mps_ring": mps_ring,
       "elementwise": elementwise, "redundant": redundant, "small": small}
