"""The reference workloads: each a graph builder, its inputs (fixed seed) and a float64 NumPy
reference. The CLI demo, the tests and the benchmarks build them from here, so the graph a
benchmark times is the graph the tests check and the demo shows.

Each builder takes its sizes and a ``seed`` for the inputs (default: the workload's own fixed
seed); ``benchmarks/workloads.py`` adds the peers (NumPy, opt_einsum,
JAX, torch...) on top. ``ALL`` names them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .frontend import tensor as gb
from .frontend.graph import Graph


@dataclass
class Workload:
    """A graph to compile, the inputs to call it with (by name) and ``reference(**inputs)``:
    the expected output computed in float64/complex128 NumPy without einsum paths."""

    name: str
    description: str
    build: Callable[[], Graph]
    inputs: dict
    reference: Callable
    rtol: float


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def gelu_reference(z: np.ndarray) -> np.ndarray:
    """tanh-approximated GELU, as ``go.gelu`` defines it, computed in the dtype of ``z``."""
    k, c = z.dtype.type(math.sqrt(2 / math.pi)), z.dtype.type(0.044715)
    return 0.5 * z * (1.0 + np.tanh(k * (z + c * z * z * z)))


def softmax_reference(s):
    """Softmax over the last axis, stable (max subtracted), in NumPy."""
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _f64(inputs: dict) -> dict:
    return {k: v.astype(np.complex128 if v.dtype.kind == "c" else np.float64)
            for k, v in inputs.items()}


def mlp(batch: int = 512, d_in: int = 1024, d_hidden: int = 4096, seed=None) -> Workload:
    """``gelu(x @ W1 + b1) @ W2 + b2`` in float32 (``W2`` maps back to ``d_in``)."""
    b, i, h = batch, d_in, d_hidden
    r = _rng(1 if seed is None else seed)
    inputs = {"x": r.standard_normal((b, i), dtype=np.float32),
              "w1": (r.standard_normal((i, h), dtype=np.float32) / np.sqrt(i)).astype(np.float32),
              "b1": r.standard_normal(h, dtype=np.float32),
              "w2": (r.standard_normal((h, i), dtype=np.float32) / np.sqrt(h)).astype(np.float32),
              "b2": r.standard_normal(i, dtype=np.float32)}

    def build():
        g = Graph("mlp")
        x, w1, b1, w2, b2 = (g.input(k, v.shape, "float32") for k, v in inputs.items())
        h1 = gb.gelu(gb.einsum("bi,ih->bh", x, w1) + b1)
        g.output(gb.einsum("bh,hi->bi", h1, w2) + b2)
        return g

    def reference(x, w1, b1, w2, b2):
        a = _f64(dict(x=x, w1=w1, b1=b1, w2=w2, b2=b2))
        return gelu_reference(a["x"] @ a["w1"] + a["b1"]) @ a["w2"] + a["b2"]

    return Workload("mlp", f"gelu(x@W1+b1)@W2+b2, x ({b},{i}), W1 ({i},{h}), float32",
                    build, inputs, reference, rtol=2e-3)


def attention(batch: int = 8, heads: int = 8, seq: int = 256, dim: int = 64,
              seed=None) -> Workload:
    """``softmax(q k^T / sqrt(d)) v`` over (batch, heads), in float32."""
    B, H, Q, D = batch, heads, seq, dim
    r = _rng(2 if seed is None else seed)
    inputs = {k: r.standard_normal((B, H, Q, D), dtype=np.float32) for k in ("q", "k", "v")}

    def build():
        g = Graph("attention")
        q, k, v = (g.input(n, a.shape, "float32") for n, a in inputs.items())
        s = gb.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(D)
        g.output(gb.einsum("bhqk,bhkd->bhqd", gb.softmax(s, axis=-1), v))
        return g

    def reference(q, k, v):
        a = _f64(dict(q=q, k=k, v=v))
        s = np.einsum("bhqd,bhkd->bhqk", a["q"], a["k"]) / math.sqrt(D)
        return np.einsum("bhqk,bhkd->bhqd", softmax_reference(s), a["v"])

    return Workload("attention", f"softmax(q k^T/sqrt(d)) v, b={B} h={H} q=k={Q} d={D}, "
                    "float32", build, inputs, reference, rtol=2e-3)


def chain(n: int = 1024, k: int = 8, seed=None) -> Workload:
    """A 5-matrix chain ``a b c d e`` written left to right, which makes n x n
    intermediates (the good order keeps them k x k)."""
    r = _rng(3 if seed is None else seed)
    shapes = {"a": (n, k), "b": (k, n), "c": (n, k), "d": (k, n), "e": (n, k)}
    inputs = {c: r.standard_normal(s, dtype=np.float32) for c, s in shapes.items()}

    def build():
        g = Graph("chain")
        a, b, c, d, e = (g.input(x, v.shape, "float32") for x, v in inputs.items())
        ab = gb.einsum("ij,jk->ik", a, b)
        abc = gb.einsum("ik,kl->il", ab, c)
        abcd = gb.einsum("il,lm->im", abc, d)
        g.output(gb.einsum("im,mn->in", abcd, e))
        return g

    def reference(a, b, c, d, e):
        m = _f64(dict(a=a, b=b, c=c, d=d, e=e))
        return m["a"] @ (m["b"] @ (m["c"] @ (m["d"] @ m["e"])))

    return Workload("chain", f"5-matrix chain written in a bad order, sizes {n} and {k}, "
                    "float32", build, inputs, reference, rtol=1e-3)


def mps_ring_equation(sites: int) -> str:
    """<psi|psi> of a periodic MPS: per site a ket ``k_i p_i k_i+1`` and a bra
    ``b_i p_i b_i+1`` (``opt_einsum.get_symbol`` labels: Unicode past 52)."""
    from opt_einsum import get_symbol

    terms, n = [], sites
    for i in range(n):
        k0, k1 = get_symbol(i), get_symbol((i + 1) % n)
        b0, b1 = get_symbol(n + i), get_symbol(n + (i + 1) % n)
        p = get_symbol(2 * n + i)
        terms += [k0 + p + k1, b0 + p + b1]
    return ",".join(terms) + "->"


def mps_ring(sites: int = 12, bond: int = 32, phys: int = 2, seed=None) -> Workload:
    """The norm of a periodic matrix-product state: one einsum over 2 * sites complex128
    tensors (each site and its conjugate) and 3 * sites labels."""
    r = _rng(4 if seed is None else seed)
    inputs = {f"a{i}": (r.standard_normal((bond, phys, bond)) +
                        1j * r.standard_normal((bond, phys, bond))) / bond for i in range(sites)}
    equation = mps_ring_equation(sites)

    def build():
        g = Graph("mps_ring")
        operands = []
        for t in (g.input(k, v.shape, "complex128") for k, v in inputs.items()):
            operands += [t, gb.conj(t)]
        g.output(gb.einsum(equation, *operands))
        return g

    def reference(**arrays):
        # the transfer-matrix product around the ring: no einsum path involved
        m = np.eye(bond * bond, dtype=complex)
        for i in range(sites):
            a = arrays[f"a{i}"]
            t = np.tensordot(a, a.conj(), axes=([1], [1]))        # (k0, k1, b0, b1)
            m = m @ t.transpose(0, 2, 1, 3).reshape(bond * bond, bond * bond)
        return np.trace(m)

    return Workload("mps_ring", f"MPS ring norm, {sites} sites, bond {bond}, physical {phys}, "
                    "complex128", build, inputs, reference, rtol=1e-8)


def elementwise_body(m, x, y, half, one, eps):
    """12 elementwise ops in namespace ``m`` (graphopt, NumPy, jax.numpy, torch)."""
    a = m.exp(x * half)
    b = a * y + one
    c = m.tanh(b)
    d = m.sqrt(m.abs(c) + eps)
    e = m.maximum(d, y)
    return (e / (a + one)) - c * half


def elementwise(n: int = 4 << 20, seed=None) -> Workload:
    """A 12-op elementwise chain over two float32 vectors (memory-bound)."""
    r = _rng(5 if seed is None else seed)
    inputs = {"x": r.standard_normal(n, dtype=np.float32),
              "y": r.standard_normal(n, dtype=np.float32)}

    def build():
        g = Graph("elementwise")
        x, y = g.input("x", (n,), "float32"), g.input("y", (n,), "float32")
        g.output(elementwise_body(gb, x, y, 0.5, 1.0, 1e-3))
        return g

    def reference(x, y):
        a = _f64(dict(x=x, y=y))
        return elementwise_body(np, a["x"], a["y"], 0.5, 1.0, 1e-3)

    return Workload("elementwise", f"12-op elementwise chain over {n} float32", build, inputs,
                    reference, rtol=1e-4)


def redundant(n: int = 1024, seed=None) -> Workload:
    """One n x n GEMM written twice under other label names, plus a dead GEMM."""
    r = _rng(6 if seed is None else seed)
    inputs = {"a": r.standard_normal((n, n), dtype=np.float32),
              "b": r.standard_normal((n, n), dtype=np.float32)}

    def build():
        g = Graph("redundant")
        a, b = g.input("a", (n, n), "float32"), g.input("b", (n, n), "float32")
        y1 = gb.einsum("ij,jk->ik", a, b)
        y2 = gb.einsum("xy,yz->xz", a, b)          # the same product, other index names
        gb.einsum("ij,kj->ik", a, b).sum()          # a dead branch: never output
        g.output(y1 + y2)
        return g

    def reference(a, b):
        m = _f64(dict(a=a, b=b))
        return 2 * (m["a"] @ m["b"])

    return Workload("redundant", f"one {n}x{n} GEMM written twice + a dead GEMM, float32",
                    build, inputs, reference, rtol=1e-3)


def small_body(m, einsum, a, b, c):
    """10 ops on small matrices in namespace ``m`` with its ``einsum``."""
    x = einsum("ij,jk->ik", a, b)       # 1
    y = m.tanh(x) + c                   # 2, 3
    z = einsum("ij,kj->ik", y, a)       # 4
    w = m.exp(z * 0.01) * b             # 5, 6, 7
    v = w - a                           # 8
    return m.maximum(v, c) * 0.5        # 9, 10


def small(n: int = 16, seed=None) -> Workload:
    """10 ops on n x n float32: per-call overhead."""
    r = _rng(7 if seed is None else seed)
    inputs = {k: r.standard_normal((n, n), dtype=np.float32) for k in ("a", "b", "c")}

    def build():
        g = Graph("small")
        a, b, c = (g.input(k, (n, n), "float32") for k in inputs)
        g.output(small_body(gb, gb.einsum, a, b, c))
        return g

    def reference(a, b, c):
        m = _f64(dict(a=a, b=b, c=c))
        return small_body(np, lambda eq, x, y: np.einsum(eq, x, y), m["a"], m["b"], m["c"])

    return Workload("small", f"10 ops on {n}x{n} float32: per-call overhead", build, inputs,
                    reference, rtol=1e-4)


def tanh_chain(layers: int = 12, n: int = 256, seed=None):
    """``(f, x, w)``: ``f(x, w) = sum(tanh(...tanh(x @ w)... @ w))`` in NumPy (``layers``
    deep, float64 ``n x n``), whose gradient holds every layer's value for the backward pass
    (what recomputation under ``memory_limit`` is measured on), and its inputs."""
    def f(x, w):
        y = x
        for _ in range(layers):
            y = np.tanh(y @ w)
        return np.sum(y)

    r = _rng(0 if seed is None else seed)
    return f, r.standard_normal((n, n)) * 0.1, r.standard_normal((n, n)) * 0.05


ALL = {"mlp": mlp, "attention": attention, "chain": chain, "mps_ring": mps_ring,
       "elementwise": elementwise, "redundant": redundant, "small": small}
