"""The reference backend: every step is the interpreter's NumPy semantics, written into the
planned buffer. It runs the whole plan path (lowering, arena, pool, profiler, report)
wherever NumPy runs."""

from __future__ import annotations

import numpy as np

from ..analysis.fused import runs_along_path
from ..contraction.value import contraction_of
from ..ir import ops
from ..ir.interpreter import eval_node, node_peak_bytes
from ..runtime.kernel import Kernel
from .base import Backend, register_backend
from .path_kernel import host_path_kernel


@register_backend
class NumpyBackend(Backend):
    """The reference backend: every node through the interpreter's NumPy semantics."""
    name = "numpy"
    install_hint = "numpy is a core dependency"
    runs_contraction_paths = True

    def kernel(self, G, n, ctx) -> Kernel:
        return reference_kernel(G, n)

    def workspace_bytes(self, G, n) -> int:
        return reference_workspace_bytes(G, n)


def reference_workspace_bytes(G, n) -> int:
    """What ``reference_kernel`` of node ``n`` declares: an einsum run along its path, its
    contraction's workspace; any other node, the interpreter's result before it is copied
    into ``out`` with what its NumPy form holds beside it (``node_peak_bytes``)."""
    d = G.nodes[n]
    if d["op"] == "einsum" and runs_along_path(G, n):
        return contraction_of(G, n).workspace_bytes
    return node_peak_bytes(G, n)


def reference_kernel(G, n) -> Kernel:
    """Node ``n`` by the interpreter's semantics, copied into the planned buffer."""
    d = G.nodes[n]
    if d["op"] == "einsum" and runs_along_path(G, n):
        # along its contraction's path, so that what its intermediates hold is what the
        # plan predicts (the interpreter's own form allocates what no rule here counts)
        return host_path_kernel(G, n)

    def fn(args, out):
        res = eval_node(G, n, args)
        if out is None:
            return res
        np.copyto(out, res, casting="no")
        return out

    fn.__name__ = f"ref_{d['op']}_{n}"
    # the interpreter's result before it is copied into ``out`` (outputs are preallocated
    # too), with what its NumPy form holds beside it, and a fused node's body values
    nbytes = reference_workspace_bytes(G, n)
    call = ops.OPS[d["op"]].impl
    src = (f"# reference: {d['op']} {d['attrs'] if d['op'] not in ('fused', 'const') else ''}"
           f"\nout[...] = {getattr(call, '__qualname__', d['op'])}(args, attrs)")
    return Kernel(fn.__name__, fn, src, impl="numpy", node=n, workspace_bytes=nbytes)
