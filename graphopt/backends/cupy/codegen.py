"""Fused sub-graph -> CUDA C source for ``cupy.ElementwiseKernel`` / ``ReductionKernel``.

Pure Python (no cupy import), so the generated source is tested on any machine. A
sub-graph (a fused node's ``attrs["graph"]``, or one op wrapped as one) compiles to a
``GroupProgram``: stages run in order, each writing a temporary or the step's output.

- Elementwise members are inlined into one expression per stage, one line per node.
- Each reduction and each einsum is its own stage (a ``ReductionKernel``, a contraction);
  elementwise work before a reduction becomes its map expression, elementwise work after
  it its post-map expression when it reads nothing else, else an epilogue stage.
- Layout ops (transpose, broadcast_to, reshape) never move data inside a kernel: they are
  pushed down to the kernel arguments as a *chain* of view operations (elementwise ops
  commute with index remapping), so ``x + x.T`` reads two views of ``x``.
- Values are computed in the compute type of their dtype (float16 in float32, rounded back
  to float16 after every op exactly as NumPy does). Loop dtypes, refusals, integer and NaN
  corner cases, reduction accumulators and the sigmoid/GELU constants come from
  ``scalar_semantics``, the table the numba generator reads too.
"""

from __future__ import annotations

from .kernels.builder import compile_group
from .kernels.expressions import (
    COMPUTE,
    CTYPES,
    HELPERS,
    Unsupported,
    cast,
    helpers_for,
    literal,
    op_expr,
)
from .kernels.program import (
    EinsumStage,
    ElementwiseStage,
    GroupProgram,
    Operand,
    ReductionStage,
    render,
)

__all__ = ["COMPUTE", "CTYPES", "HELPERS", "EinsumStage", "ElementwiseStage", "GroupProgram",
           "Operand", "ReductionStage", "Unsupported", "cast", "compile_group", "helpers_for",
           "literal", "op_expr", "render"]
