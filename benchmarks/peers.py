"""Peer adapters: each turns a Workload into a ready-to-time callable, or says why it cannot.

Every peer is imported lazily; one that is not installed is skipped with a note.
"""

from __future__ import annotations

import inspect
import time
import warnings

import numpy as np

PEERS = ("graphopt", "numpy", "opt_einsum", "cotengra", "numexpr", "numba", "jax", "torch",
         "torch.compile")


COTENGRA_SECONDS = 2.0   # the cotengra peer's path-search budget


class Skip(Exception):
    """This peer does not apply to the workload or is not installed."""


def _torch_ns():
    import torch

    class TorchNS:
        exp, tanh, sqrt, abs, maximum, einsum, conj = (torch.exp, torch.tanh, torch.sqrt,
                                                       torch.abs, torch.maximum, torch.einsum,
                                                       torch.conj)

        @staticmethod
        def max(x, axis=None, keepdims=False):
            return torch.amax(x, dim=axis, keepdim=keepdims)

        @staticmethod
        def sum(x, axis=None, keepdims=False):
            return torch.sum(x) if axis is None else torch.sum(x, dim=axis, keepdim=keepdims)

    return torch, TorchNS


def make(peer: str, w, compile_kwargs: dict):
    """Returns ``(fn, args, to_numpy, compile_seconds, note)``: ``fn(*args)`` is one call."""
    names = list(w.inputs)
    arrays = [w.inputs[k] for k in names]
    ident = np.asarray
    if peer == "graphopt":
        import graphopt as go

        t0 = time.perf_counter()
        plan = go.compile(w.build(), **compile_kwargs)
        plan(*arrays)  # first call: any lazy JIT
        return plan, arrays, ident, time.perf_counter() - t0, plan.backend.name
    if peer == "numpy":
        return (lambda *a: w.numpy(**dict(zip(names, a)))), arrays, ident, 0.0, ""
    if peer == "opt_einsum":
        if w.opt_einsum is None:
            raise Skip("no contraction")
        t0 = time.perf_counter()
        fn = w.opt_einsum(w.inputs)
        return (lambda *a: fn(**dict(zip(names, a)))), arrays, ident, time.perf_counter() - t0, ""
    if peer == "cotengra":
        # opt_einsum executing the path cotengra's hyper-optimizer finds in COTENGRA_SECONDS
        if w.opt_einsum is None or "optimize" not in inspect.signature(w.opt_einsum).parameters:
            raise Skip("no multi-operand contraction to order")
        ctg = _require("cotengra")
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opt = ctg.HyperOptimizer(max_time=COTENGRA_SECONDS, minimize="combo",
                                     progbar=False, parallel=False)
            fn = w.opt_einsum(w.inputs, optimize=opt)
        return (lambda *a: fn(**dict(zip(names, a)))), arrays, ident, \
            time.perf_counter() - t0, f"opt_einsum on cotengra's path ({COTENGRA_SECONDS} s search)"
    if peer == "numexpr":
        if w.numexpr is None:
            raise Skip("elementwise workload only")
        _require("numexpr")
        return (lambda *a: w.numexpr(**dict(zip(names, a)))), arrays, ident, 0.0, ""
    if peer == "numba":
        if w.numba is None:
            raise Skip("hand-written loop only for the elementwise workload")
        t0 = time.perf_counter()
        fn = w.numba()
        fn(*arrays)
        return (lambda *a: fn(**dict(zip(names, a)))), arrays, ident, time.perf_counter() - t0, \
            "hand-written njit(parallel=True, fastmath=True)"
    if peer == "jax":
        if w.xp is None:
            raise Skip("no array-API form")
        jax = _require("jax")
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp

        dev = [jax.device_put(a) for a in arrays]
        f = jax.jit(lambda *a: w.xp(jnp, **dict(zip(names, a))))
        t0 = time.perf_counter()
        f(*dev).block_until_ready()
        return ((lambda *a: f(*a).block_until_ready()), dev, ident,
                time.perf_counter() - t0, "jax.jit, CPU")
    if peer in ("torch", "torch.compile"):
        if w.xp is None:
            raise Skip("no array-API form")
        _require("torch")
        torch, ns = _torch_ns()
        tens = [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]

        def f(*a):
            return w.xp(ns, **dict(zip(names, a)))
        t0 = time.perf_counter()
        if peer == "torch.compile":
            f = torch.compile(f)
        with torch.no_grad():
            f(*tens)
        def call(*a):
            with torch.no_grad():
                return f(*a)
        return call, tens, (lambda t: t.numpy()), time.perf_counter() - t0, \
            f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    raise Skip(f"unknown peer {peer!r}")


def _require(mod: str):
    import importlib

    try:
        return importlib.import_module(mod)
    except ImportError:
        raise Skip(f"{mod} is not installed (pip install -e '.[bench]')") from None
