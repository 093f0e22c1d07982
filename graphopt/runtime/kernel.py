"""What a backend hands lowering: a ``Kernel`` (a compiled step body) and the ``Step`` that
runs it over the plan's slots, and the error a failing step raises. A leaf of the core
(it imports only ``errors``, and the byte count of a call's objects when asked for it)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..errors import GraphError


@dataclass
class Kernel:
    """A compiled step body: ``fn(args, out) -> array`` writes into ``out`` when given.

    ``source`` is readable code (generated source, or the library call it makes) and
    ``impl`` names the implementation chosen (e.g. ``numpy``, ``blas-gemm``, ``numba-fused``).
    ``uses_threads``: the kernel spreads over the call's threads (BLAS, parallel loops or
    blocks); otherwise it runs on the calling thread alone. ``blas_only_threads``: its only
    threads are its GEMMs' (``cpu_gemm.threaded_matmul``), so in a call whose every
    threaded step is such a kernel BLAS may thread the GEMMs itself
    (``threads.enter_call``). ``workspace_bytes``: the most
    memory one call allocates beside ``out`` and frees before it returns (transposed operand
    copies, per-slice intermediates): the plan's predicted peak adds the largest to the
    arena (a reference step's counts the result it computes before copying it into
    ``out``).
    ``held_bytes()``/``release()`` (optional): memory the kernel keeps between calls (a
    contraction program's arenas) and how to give it back; the plan counts it with its own
    idle arenas and releases both together.
    """

    name: str
    fn: Callable
    source: str
    impl: str
    node: int | None = None
    details: dict = field(default_factory=dict)
    uses_threads: bool = False
    blas_only_threads: bool = False
    workspace_bytes: int = 0
    held_bytes: Callable | None = None
    release: Callable | None = None

    def __repr__(self) -> str:
        return f"Kernel({self.name!r}, impl={self.impl!r})"


@dataclass
class Step:
    """One executed step: a kernel, where its operands are, and where its result goes."""

    index: int
    name: str
    node: int | None
    op_kinds: tuple[str, ...]
    kernel: Kernel
    in_slots: tuple[int, ...]
    out_slot: int
    shape: tuple[int, ...]
    dtype: str
    offset: int | None          # arena byte offset, or None for a returned/unplanned value
    is_output: bool
    flops: int
    bytes: int
    srcs: tuple[str, ...] = ()

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize

    @property
    def workspace_bytes(self) -> int:
        """What the kernel allocates beside its result during this step."""
        return self.kernel.workspace_bytes

    @property
    def call_bytes(self) -> int:
        """What the step allocates beside the arena: its kernel's workspace and the objects
        of its call (``analysis.call_bytes``)."""
        from ..analysis.call_bytes import kernel_call_bytes

        return self.kernel.workspace_bytes + kernel_call_bytes(self.kernel.impl, self.op_kinds)


def step_error(step: "Step", e: Exception) -> GraphError:
    """``e``, raised while running ``step``, as a ``GraphError`` naming the step's ops and the
    user's source lines."""
    return GraphError(f"{type(e).__name__} in step {step.index} ({step.name}: "
                      f"{' '.join(step.op_kinds)}): {e}", op=step.op_kinds[-1] if step.op_kinds
                      else None, src=", ".join(step.srcs) or None, node=step.node)
