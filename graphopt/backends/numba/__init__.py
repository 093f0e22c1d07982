"""The numba CPU backend: generated kernels for fused groups (``kernels/``, built and cached
by ``codegen``), BLAS for contractions (``contraction``), tiled regions (``tiled``), fast
math (``numerics/``) and NumPy's scalar corner cases (``scalar``). ``backend`` registers it."""
