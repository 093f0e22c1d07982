"""Source generators of the numba backend's kernels: the loop-nest form (``source``), one
pass per row level for normalization groups (``rows``), and the NumPy-blocked form
(``blocked``). ``backends/numba_codegen.py`` builds and caches what they generate."""
