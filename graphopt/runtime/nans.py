"""``go.debug_nans``: find the step that first makes a NaN or an infinity, as JAX's
``jax_debug_nans`` does.

While it is on (``go.debug_nans()``, or ``GRAPHOPT_DEBUG_NANS=1`` in the environment the
process starts with), every
plan call checks each step's float or complex result as it is made, and the first one
holding a NaN or an infinity raises a ``GraphError`` naming the step, its ops and the user's
lines, and whether its operands were finite (the step made it) or not (it came in). The
check reads every result once: a debugging mode, not for timing. Plans that run on a dask
cluster, or replay a captured CUDA graph, are not checked.
"""

from __future__ import annotations

import contextlib
import os
import threading

import numpy as np

from ..errors import GraphError


class _State(threading.local):
    on = None       # this thread's setting, None: the environment's (a class attribute: a
                    # plan call reads it without the cost of a missing attribute)


_state = _State()
# the environment's setting, read once (a plan call asks ``enabled`` every time)
_DEFAULT = os.environ.get("GRAPHOPT_DEBUG_NANS", "") == "1"


def enabled() -> bool:
    """Whether results are checked in this thread (``debug_nans``, else the environment as
    the process started)."""
    on = _state.on
    return _DEFAULT if on is None else on


@contextlib.contextmanager
def _restoring(previous):
    try:
        yield
    finally:
        _state.on = previous


def debug_nans(enabled: bool = True):
    """Check every step's result for NaN and infinity (``enabled``), in this thread, from
    now on; used as ``with go.debug_nans():`` the setting before returns at the block's
    end. The first non-finite result raises a ``GraphError`` at the step that made it."""
    previous = _state.on
    _state.on = bool(enabled)
    return _restoring(previous)


def _finite(a) -> bool:
    dtype = getattr(a, "dtype", None)
    if dtype is None or np.dtype(dtype).kind not in "fc":
        return True
    xp = a.__array_namespace__() if hasattr(a, "__array_namespace__") else np
    return bool(xp.all(xp.isfinite(a)))


def check(step, value, operands, G=None) -> None:
    """Raise where ``value``, the result ``step`` just made from ``operands``, holds a NaN
    or an infinity. Where the step is a fused group of ``G`` (the plan's graph) and its
    operands were finite, its members run again one by one through the interpreter, and
    the error names the first member that made one."""
    if _finite(value):
        return
    came_in = [k for k, a in enumerate(operands) if not _finite(a)]
    how = (f"from operand(s) {came_in} that already held one (it came in from an earlier "
           "step or an input)" if came_in else "from finite operands: this step made it")
    op, src = (step.op_kinds[-1] if step.op_kinds else None), ", ".join(step.srcs) or None
    member = None if came_in or G is None else _first_member(G, step.node, operands)
    if member is not None:
        op, src = member
        how += f", at its member {op!r}"
    raise GraphError(f"debug_nans: step {step.index} {step.name} ({' '.join(step.op_kinds)}, "
                     f"{step.dtype}{list(step.shape)}) produced a NaN or an infinity {how}",
                     op=op, src=src, node=step.node)


def _first_member(G, n, operands):
    """``(op, src)`` of the first member of fused node ``n`` whose value, run through the
    interpreter on host copies of ``operands``, is not finite; None for another node."""
    from .. import ir
    from ..ir.interpreter import eval_node

    d = G.nodes[n] if n is not None and n in G else None
    if d is None or d["op"] != "fused":
        return None
    sub = d["attrs"]["graph"]
    env = dict(zip(sub.graph["inputs"], (np.asarray(_host(a)) for a in operands)))
    for m in ir.topo_order(sub):
        if m in env:
            continue
        md = sub.nodes[m]
        env[m] = eval_node(sub, m, [env[u] for u in ir.operands(sub, m)])
        if md["op"] not in ("input", "const") and not _finite(env[m]):
            return md["op"], md.get("src")
    return None


def _host(a):
    get = getattr(a, "get", None)      # a device array's copy on the host
    return get() if callable(get) and not isinstance(a, np.ndarray) else a
