"""What a call allocates besides its arrays: the Python objects of a plan's call, of each
kernel's call, and of a contraction program's. The one count the predicted peak, the
contraction library's workspaces and the passes that fit a plan to ``memory_limit`` read.

tracemalloc counts these objects as a call's memory. The constants are its count on CPython
3.11 with NumPy 2 (the tests hold predicted peaks to measured ones within 10 %, on plans of
a few kB, where the objects weigh as much as the arrays).
"""

from __future__ import annotations

from ..ir import ops

# -- a plan's call ---------------------------------------------------------------------------

# held throughout a call: the call's own, the arena's views and slot lists per step, the
# bound inputs, the output arrays' objects and structure
CALL_BYTES, STEP_BYTES, INPUT_BYTES, OUTPUT_BYTES = 450, 150, 24, 40

# held while one step runs, beyond its kernel's declared workspace, by the kernel's form:
# a generated loop's argument boxing, a ufunc's call. A form not listed declares all it
# holds in its workspace (a GEMM's views: ``GEMM_VIEW_BYTES``).
KERNEL_CALL_BYTES = {"numba-fused": 600, "numpy-ufunc": 700, "numpy-blocked": 700}

# ... and for a step the reference interpreter runs: its call, and per op it runs (parsing
# an einsum, a reduction's NumPy machinery, any other op's result object)
REFERENCE_IMPL = "numpy"
REFERENCE_BYTES, REFERENCE_EINSUM_BYTES = 1100, 1400
REFERENCE_REDUCTION_BYTES, REFERENCE_OP_BYTES = 1500, 250

# -- a contraction program's call (``contraction/program``) ----------------------------------

# per step: the view of the step's place in the arena (kept with the arena), the views a
# GEMM makes of its operands and product, the operand lists (the operands' own counted
# apart: ``OBJECT_BYTES_PER_OPERAND``)
OBJECT_BYTES_PER_STEP = 250
# ... and per operand: the call's key (a shape and a strides tuple per operand) while it
# looks up its program (``PathContraction.run`` makes no tuple of its operands)
OBJECT_BYTES_PER_OPERAND = 104
# a view NumPy makes of an array (an operand without its size-1 dims, or restricted to a
# slice): 104 + 16 x ndim bytes; a list holds 8 bytes an item; a tuple of two
VIEW_BYTES, VIEW_BYTES_PER_DIM, LIST_BYTES_PER_ITEM = 112, 16, 8
PAIR_BYTES = 56
# the views ``run_gemm`` holds at once on the host while its product runs (its operands
# transposed and reshaped into matrices, the product's reshape and permutation), for a step
# of a few labels. A program's per-step allowance covers them on long programs, not at the
# peak step of a short one, so a GEMM step counts them itself.
GEMM_VIEW_BYTES = 1312


def plan_objects_bytes(steps: int, inputs: int, outputs: int) -> int:
    """The objects one call of a plan of ``steps`` steps holds throughout."""
    return CALL_BYTES + STEP_BYTES * steps + INPUT_BYTES * inputs + OUTPUT_BYTES * outputs


def kernel_call_bytes(impl: str, op_kinds=()) -> int:
    """What one call of a kernel of form ``impl`` running ``op_kinds`` holds beyond its
    declared workspace."""
    if impl != REFERENCE_IMPL:
        return KERNEL_CALL_BYTES.get(impl, 0)
    total = REFERENCE_BYTES
    for op in op_kinds:
        if op == "einsum":
            total += REFERENCE_EINSUM_BYTES
        elif op in ops.OPS and ops.OPS[op].kind == ops.REDUCTION:
            total += REFERENCE_REDUCTION_BYTES
        else:
            total += REFERENCE_OP_BYTES
    return total


def call_object_bytes(n_steps: int, n_operands: int) -> int:
    """The objects a contraction program's call of ``n_steps`` steps over ``n_operands``
    operands holds (``OBJECT_BYTES_PER_STEP``, ``OBJECT_BYTES_PER_OPERAND``)."""
    return n_steps * OBJECT_BYTES_PER_STEP + n_operands * OBJECT_BYTES_PER_OPERAND


def view_bytes(ndim: int) -> int:
    """What a view of ``ndim`` dims holds (``VIEW_BYTES``)."""
    return VIEW_BYTES + VIEW_BYTES_PER_DIM * ndim
