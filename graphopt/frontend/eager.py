"""Eager mode: run ``@go.jit`` functions op by op on real arrays, for debugging.

Inside ``with go.disable_jit():`` (or with ``GRAPHOPT_DISABLE_JIT=1`` in the process's
environment) a jitted function is not traced: it runs as plain Python on the arrays it is
given, so
``print``, breakpoints and data-dependent branches work. NumPy code on those arrays is
NumPy's; every graphopt op (``go.softmax``, ``go.einsum``, ...) runs at once through the
reference interpreter (``interpreter.eval_node``) and returns an ndarray, after the same
shape and dtype checks a traced call makes. Results are new arrays, as a compiled plan's
are (never a view of an argument). The names follow ``jax.disable_jit``.
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np

from .. import ir
from ..errors import GraphError
from ..ir import interpreter, ops
from ..support.env import env_flag
from .graph import Graph
from .tensor import Tensor, tracing

_state = threading.local()
ENV_VAR = "GRAPHOPT_DISABLE_JIT"


def jit_disabled() -> bool:
    """Whether ``@go.jit`` functions run eagerly now: inside ``disable_jit()`` on this
    thread, else by ``$GRAPHOPT_DISABLE_JIT`` ("1" yes; "0" or unset no), read once per
    process at the first jitted call (a lookup per call would cost a tenth of a small
    plan's call; as JAX reads ``JAX_DISABLE_JIT``)."""
    global _from_env
    if _active and getattr(_state, "depth", 0):
        return True
    if _from_env is None:
        _from_env = env_flag(ENV_VAR)
    return _from_env


_from_env: bool | None = None
_active = 0           # disable_jit blocks open on any thread: the common case asks no more
_active_lock = threading.Lock()


@contextlib.contextmanager
def disable_jit():
    """Within the block, ``@go.jit`` functions run op by op with the interpreter (and
    graphopt ops on arrays return arrays)."""
    global _active
    with _active_lock:
        _active += 1
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        with tracing(EagerGraph("eager")):
            yield
    finally:
        _state.depth -= 1
        with _active_lock:
            _active -= 1


class EagerGraph(Graph):
    """A graph whose ops are evaluated as they are added: ``_add`` returns the op's value
    (an ndarray), not a Tensor. Constants are the caller's arrays, held read-only (no
    copy) until the ``disable_jit`` block ends (an op function may reuse them); each op's
    own node is dropped once evaluated."""

    def _const(self, value, src, dtype=None) -> Tensor:
        if not isinstance(value, np.ndarray) or dtype is not None and value.dtype != dtype:
            return super()._const(value, src, dtype)
        try:
            ops.canonical_dtype(value.dtype)
        except GraphError as e:
            raise e.located(op="const", src=src) from None
        value = value.view()            # read-only through this view; the caller's is as it was
        value.setflags(write=False)
        return Tensor(self, ir.add_node(self._G, "const", [], value.shape, value.dtype,
                                        {"value": value}, src=src))

    def _add(self, op, operands, attrs=None, src=None):
        t = super()._add(op, operands, attrs, src=src)
        args = [self._G.nodes[u.id]["attrs"]["value"] for u in operands]
        value = interpreter.eval_node(self._G, t.id, args)
        self._G.remove_node(t.id)
        if value.base is not None or not value.flags.writeable:
            value = value.copy()    # never a view of an operand, as a plan's result
        return value


def run(fn, args, kwargs):
    """``fn(*args, **kwargs)`` eagerly; arrays where a traced call returns arrays."""
    with disable_jit():
        return _as_arrays(fn(*args, **kwargs))


def _as_arrays(out):
    if isinstance(out, (tuple, list)):
        return type(out)(_as_arrays(o) for o in out)
    if isinstance(out, dict):
        return {k: _as_arrays(v) for k, v in out.items()}
    return np.array(out)
