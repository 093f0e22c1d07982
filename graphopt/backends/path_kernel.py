"""The kernel of an einsum node run along its contraction path (``fused.runs_along_path``:
a sliced or many-operand einsum), on any backend whose arrays an array module computes.

The node's ``PathContraction`` plans its steps once per operand shapes and keeps its arenas
(one per slice in flight) between calls; ``sliced_contract`` runs the slices the slicing
pass chose, so the intermediates stay within the memory limit it met. The kernel's
``workspace_bytes`` is ``contraction_workspace_bytes``: on the host the figure that pass
held to the limit; on a device its arrays only, which that figure bounds but for steps that
are not GEMMs, whose results ``cupy.einsum`` makes whole (the compiler holds the plan's
predicted peak to the limit either way).

The host form (``host_path_kernel``) runs slices at once on graphopt's worker threads and
splits each step's GEMM over the call's threads; a device form (cupy) passes its array
module and GEMM and runs the slices one after another.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .. import ir
from ..contract.paths import default_path
from ..contract.program.gemm import BLAS_DTYPES
from ..contract.program.run import PathContraction
from ..contract.slicing.run import contraction_workspace_bytes, sliced_contract
from ..runtime import threads
from ..runtime.kernel import Kernel
from .cpu_gemm import threaded_matmul


def path_kernel(G, n, impl: str, xp=np, matmul: Callable | None = None,
                host_threads: bool = False) -> Kernel:
    """Einsum node ``n`` along its path, slice by slice, as kernel ``impl``: operands and
    arena in array module ``xp``, GEMMs by ``matmul(a, b, c)`` (None: ``xp.matmul``). With
    ``host_threads``, up to the node's ``slice_workers`` slices run at once on the call's
    threads."""
    d = G.nodes[n]
    a = d["attrs"]
    eq, path = a["equation"], a.get("path")
    slices, blocks = list(a.get("slices", ())), a.get("slice_blocks")
    # the slicing pass's bound for the memory limit (1 where slices run one at a time)
    most = int(a.get("slice_workers", 1)) if host_threads else 1
    operands = ir.operands(G, n)
    shapes = [G._node[u]["shape"] for u in operands]
    program = PathContraction(eq, path or default_path(eq, shapes), keep_arenas=True, xp=xp)
    workspace = contraction_workspace_bytes(eq, shapes, program.path, slices, blocks,
                                            d["dtype"], most,
                                            [G._node[u]["dtype"] for u in operands],
                                            contraction=program, device=xp is not np)

    def fn(args, out):
        workers = min(most, threads.current_threads()) if host_threads else 1
        return sliced_contract(eq, program.path, slices, args, out=out, blocks=blocks,
                               workers=workers, matmul=matmul, contraction=program)

    fn.__name__ = f"{impl.replace('-', '_')}_einsum_{n}"
    src = (f"# einsum {eq!r} along path {path}, sliced over {slices} (blocks {blocks}), "
           f"up to {most} slice(s) at once\n"
           "sliced_contract(equation, path, slices, args, out, blocks, workers)")
    return Kernel(fn.__name__, fn, src, impl=impl, node=n, uses_threads=host_threads,
                  # slices run in parallel on graphopt's workers, and a product in a dtype
                  # BLAS does not multiply is cut over them: BLAS stays on one thread
                  blas_only_threads=host_threads and not (slices and most > 1) and
                  d["dtype"] in BLAS_DTYPES,
                  held_bytes=program.idle_arena_bytes, release=program.release_arenas,
                  details={"slices": slices, "slice_blocks": blocks, "path": path,
                           "slice_workers": most},
                  workspace_bytes=workspace)


def host_path_kernel(G, n) -> Kernel:
    """``path_kernel`` on the host: NumPy arrays, each step's GEMM on the call's threads
    (``cpu_gemm.threaded_matmul``), slices at once on graphopt's workers."""
    return path_kernel(G, n, "numpy-sliced", np, threaded_matmul, host_threads=True)
