"""The CUDA kernel generator, pure Python (no cupy import; tested on any machine).

- ``expressions.py``: C types, literals, NumPy casts, device helpers, each op's expression
  (from ``scalar_semantics``, the table the numba generator reads too).
- ``emitter.py``: one stage's body, layout ops pushed down to the arguments as view chains.
- ``builder.py``: sub-graph -> stages (``compile_group``), folds into post-maps and alpha.
- ``program.py``: the ``GroupProgram`` and its readable rendering.
- ``contractions.py``, ``cublas.py``: einsum stages (cost model, cuBLAS GEMM calls).
- ``runtime.py``, ``graphs.py``: running stages on cupy; CUDA-graph capture and events.

``backends/cuda_codegen.py`` is the generator's public face; ``backends/cupy_gpu.py`` the
backend.
"""
