"""A contraction's program: each step's form (``forms``), each step of a path planned once
per operand shapes (``build``) and run on one arena (``run``); a step's GEMM (``gemm``), the
product without BLAS (``matmul``), and what ``np.einsum`` allocates (``einsum_bytes``)."""
