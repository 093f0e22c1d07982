"""The reference backend: every step is the interpreter's NumPy semantics, written into the
planned buffer. It runs the whole plan path (lowering, arena, pool, profiler, report)
wherever NumPy runs."""

from __future__ import annotations

import numpy as np

from .. import ir, ops, threads
from ..fused import runs_along_path
from ..gemm import BLAS_DTYPES
from ..interpreter import eval_node, node_peak_bytes
from ..kernel import Kernel
from .base import Backend, register_backend
from .cpu_gemm import threaded_matmul


@register_backend
class NumpyBackend(Backend):
    """The reference backend: every node through the interpreter's NumPy semantics."""
    name = "numpy"
    install_hint = "numpy is a core dependency"
    runs_contraction_paths = True

    def kernel(self, G, n, ctx) -> Kernel:
        return reference_kernel(G, n)


def reference_kernel(G, n) -> Kernel:
    """Node ``n`` by the interpreter's semantics, copied into the planned buffer."""
    d = G.nodes[n]
    if d["op"] == "einsum" and runs_along_path(G, n):
        # along its path (opt_einsum's greedy one, as the interpreter's, where the
        # contraction pass gave it none: below opt_level 2, or bool operands), so that
        # what its intermediates hold is predicted (the interpreter's form counted only
        # the result: a 12-tensor lattice measured 26 kB against 8 bytes predicted)
        return sliced_kernel(G, n)

    def fn(args, out):
        res = eval_node(G, n, args)
        if out is None:
            return res
        np.copyto(out, res, casting="no")
        return out

    fn.__name__ = f"ref_{d['op']}_{n}"
    # the interpreter's result before it is copied into ``out`` (outputs are preallocated
    # too), with what its NumPy form holds beside it, and a fused node's body values
    nbytes = node_peak_bytes(G, n)
    call = ops.OPS[d["op"]].impl
    src = (f"# reference: {d['op']} {d['attrs'] if d['op'] not in ('fused', 'const') else ''}"
           f"\nout[...] = {getattr(call, '__qualname__', d['op'])}(args, attrs)")
    return Kernel(fn.__name__, fn, src, impl="numpy", node=n, workspace_bytes=nbytes)


def sliced_kernel(G, n) -> Kernel:
    """An einsum with ``slices`` (or a multi-operand ``path``): run along its path, one slice
    at a time, so its intermediates stay within the memory limit the slicing pass met."""
    from ..contraction_program import PathContraction
    from ..paths import default_path
    from ..sliced_contraction import contraction_workspace_bytes, sliced_contract

    d = G.nodes[n]
    a = d["attrs"]
    eq, path = a["equation"], a.get("path")
    slices, blocks = list(a.get("slices", ())), a.get("slice_blocks")
    most = int(a.get("slice_workers", 1))    # the slicing pass's bound for the memory limit
    operands = ir.operands(G, n)
    shapes = [G._node[u]["shape"] for u in operands]
    # the kernel's own program keeps its arenas (one per slice in flight) between calls
    program = PathContraction(eq, path or default_path(eq, shapes), keep_arenas=True)
    workspace = contraction_workspace_bytes(eq, shapes, program.path, slices, blocks,
                                            d["dtype"], most,
                                            [G._node[u]["dtype"] for u in operands],
                                            contraction=program)

    def fn(args, out):
        workers = min(most, threads.current_threads())
        # each step's GEMM is split over the call's threads (one each inside a worker)
        return sliced_contract(eq, program.path, slices, args, out=out, blocks=blocks,
                               workers=workers, matmul=threaded_matmul, contraction=program)

    fn.__name__ = f"ref_sliced_einsum_{n}"
    src = (f"# reference: einsum {eq!r} along path {path}, sliced over {slices} "
           f"(blocks {blocks}), up to {most} slices at once\n"
           "sliced_contract(equation, path, slices, args, out, blocks, workers)")
    return Kernel(fn.__name__, fn, src, impl="numpy-sliced", node=n, uses_threads=True,
                  # slices run in parallel on graphopt's workers, and a product in a dtype
                  # BLAS does not multiply is cut over them: BLAS stays on one thread
                  blas_only_threads=not (slices and most > 1) and d["dtype"] in BLAS_DTYPES,
                  held_bytes=program.idle_arena_bytes, release=program.release_arenas,
                  details={"slices": slices, "slice_blocks": blocks, "path": path,
                           "slice_workers": most},
                  workspace_bytes=workspace)
