"""The kernel of an einsum node run along its contraction path (``fused.runs_along_path``:
a sliced or many-operand einsum), on any backend whose arrays an array module computes.

It runs the node's ``Contraction`` as the passes made it: its path, each step's form, its
slices and how many run at once. Its ``PathContraction`` shares the programs the compile
planned (``program.run.shared_programs``) and keeps its arenas (one per slice in flight)
between calls; ``sliced_contract`` runs the slices. The kernel's ``workspace_bytes`` is the
contraction's (``Contraction.workspace_bytes``): on the host the figure the slicing pass
held to the limit; on a device its arrays only.

The host form (``host_path_kernel``) runs slices at once on graphopt's worker threads and
splits each step's GEMM over the call's threads; a device form (cupy) passes its array
module and GEMM and runs the slices one after another.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..contraction.program.gemm import BLAS_DTYPES
from ..contraction.program.run import PathContraction
from ..contraction.slicing.run import sliced_contract
from ..contraction.value import contraction_of
from ..runtime import threads
from ..runtime.kernel import Kernel
from .cpu_gemm import threaded_matmul


def path_kernel(G, n, impl: str, xp=np, matmul: Callable | None = None,
                host_threads: bool = False) -> Kernel:
    """Einsum node ``n`` along its path, slice by slice, as kernel ``impl``: operands and
    arena in array module ``xp``, GEMMs by ``matmul(a, b, c)`` (None: ``xp.matmul``). With
    ``host_threads``, up to the contraction's ``workers`` slices run at once on the call's
    threads."""
    c = contraction_of(G, n)
    eq, path, slices, blocks = c.equation, c.path, list(c.slices), list(c.blocks) or None
    # the slicing pass's bound for the memory limit (1 where slices run one at a time)
    most = c.workers if host_threads else 1
    program = PathContraction(eq, path, keep_arenas=True, xp=xp, forms=c.forms,
                              device=c.device)

    def fn(args, out):
        workers = min(most, threads.current_threads()) if host_threads else 1
        return sliced_contract(eq, path, slices, args, out=out, blocks=blocks,
                               workers=workers, matmul=matmul, contraction=program)

    fn.__name__ = f"{impl.replace('-', '_')}_einsum_{n}"
    src = (f"# einsum {eq!r}: {c.describe()}\n"
           "sliced_contract(equation, path, slices, args, out, blocks, workers)")
    return Kernel(fn.__name__, fn, src, impl=impl, node=n, uses_threads=host_threads,
                  # slices run in parallel on graphopt's workers, and a product in a dtype
                  # BLAS does not multiply is cut over them: BLAS stays on one thread
                  blas_only_threads=host_threads and not (slices and most > 1) and
                  c.dtype in BLAS_DTYPES,
                  held_bytes=program.idle_arena_bytes, release=program.release_arenas,
                  details={"slices": slices, "slice_blocks": blocks, "path": list(path),
                           "slice_workers": most, "forms": list(c.forms)},
                  workspace_bytes=c.workspace_bytes if most == c.workers else
                  c.sliced(c.slices, c.blocks, most, c.table).workspace_bytes)


def host_path_kernel(G, n) -> Kernel:
    """``path_kernel`` on the host: NumPy arrays, each step's GEMM on the call's threads
    (``cpu_gemm.threaded_matmul``), slices at once on graphopt's workers."""
    return path_kernel(G, n, "numpy-sliced", np, threaded_matmul, host_threads=True)
