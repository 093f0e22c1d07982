"""The cupy GPU backend: the CUDA kernel generator (``kernels/``, its public face
``codegen``) and the backend (``backend``)."""
