"""Running plans: ``Plan`` and its steps, ``Kernel``, binding call arguments, the tensor
pool, and the thread budget (with BLAS's thread count)."""
