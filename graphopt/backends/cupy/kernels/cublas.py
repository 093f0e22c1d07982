"""cuBLAS strided-batched GEMM called directly through ctypes (the library cupy loaded)."""

from __future__ import annotations

import threading

import numpy as np

from ....errors import GraphError


def _loaded_library(stem: str) -> str:
    """Path of the shared library ``stem`` (e.g. ``libcublas.so``) this process has loaded."""
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if path.rsplit("/", 1)[-1].startswith(stem):
                return path
    import ctypes.util

    found = ctypes.util.find_library(stem[3:].split(".")[0])
    if found is None:
        raise GraphError(f"cannot locate {stem} (cupy's cuBLAS)")
    return found


class Cublas:
    """Strided-batched GEMM through cuBLAS directly (ctypes, the library cupy loaded), on
    the current stream, with a handle and workspace per thread. cupy's own wrappers refuse
    to run while a stream captures a CUDA graph; this one can be captured."""

    WORKSPACE = 32 << 20  # cuBLAS's recommended workspace on Hopper
    # dtype -> (cudaDataType, cublasComputeType, scalar C type); float16 accumulates in float32
    TYPES = {"float16": (2, 68, "f"), "float32": (0, 68, "f"), "float64": (1, 70, "d"),
             "complex64": (4, 68, "F"), "complex128": (5, 70, "D")}
    _local = threading.local()

    @classmethod
    def get(cls) -> "Cublas":
        import cupy

        dev = cupy.cuda.Device().id
        inst = getattr(cls._local, "by_device", {}).get(dev)
        if inst is None:
            inst = cls()
            cls._local.__dict__.setdefault("by_device", {})[dev] = inst
        return inst

    def __init__(self):
        import ctypes

        import cupy

        cupy.cuda.device.get_cublas_handle()  # makes cupy load libcublas into the process
        c = ctypes
        lib = c.CDLL(_loaded_library("libcublas.so"))
        h = c.c_void_p()
        self._check(lib.cublasCreate_v2(c.byref(h)), "cublasCreate")
        self.workspace = cupy.empty(self.WORKSPACE, dtype=cupy.uint8)
        lib.cublasSetWorkspace_v2.argtypes = [c.c_void_p, c.c_void_p, c.c_size_t]
        self._check(lib.cublasSetWorkspace_v2(h, self.workspace.data.ptr, self.WORKSPACE),
                    "cublasSetWorkspace")
        lib.cublasSetStream_v2.argtypes = [c.c_void_p, c.c_void_p]
        f = lib.cublasGemmStridedBatchedEx
        i, ll, p = c.c_int, c.c_longlong, c.c_void_p
        f.argtypes = [p, i, i, i, i, i, p, p, i, i, ll, p, i, i, ll, p, p, i, i, ll, i, i, i]
        f.restype = i
        self._lib, self._handle, self._gemm = lib, h, f
        self._scalars: dict = {}  # (type code, value) -> (pointer, the ctypes box it points to)
        self._by_char = {np.dtype(k).char: v for k, v in self.TYPES.items()}
        self._stream = None       # the stream the handle was last set to (its pointer)

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != 0:
            raise GraphError(f"{what} failed with cuBLAS status {status}")

    @staticmethod
    def _layout(x):
        """``(op, ld, batch_stride)`` that read matrix ``x[..., R, C]`` (row-major indices)
        as its transpose in column-major terms, or None if no single ``ld`` describes it."""
        R, C = x.shape[-2:]
        it = x.itemsize
        sr, sc = x.strides[-2] // it, x.strides[-1] // it
        bs = x.strides[0] // it if x.ndim == 3 and x.shape[0] > 1 else 0
        if (sc == 1 or C == 1) and (R == 1 or sr >= max(1, C)):
            return 0, (sr if R > 1 else max(1, C)), bs        # CUBLAS_OP_N on x^T
        if (sr == 1 or R == 1) and (C == 1 or sc >= max(1, R)):
            return 1, (sc if C > 1 else max(1, R)), bs        # CUBLAS_OP_T on x
        return None

    def _alpha(self, sk: str, value):
        import ctypes as c

        key = (sk, value)
        if key not in self._scalars:
            box = {"f": lambda: c.c_float(value), "d": lambda: c.c_double(value),
                   "F": lambda: (c.c_float * 2)(complex(value).real, complex(value).imag),
                   "D": lambda: (c.c_double * 2)(complex(value).real, complex(value).imag)}[sk]()
            self._scalars[key] = (c.cast(c.pointer(box), c.c_void_p), box)
        return self._scalars[key][0]

    def gemm(self, a, b, c, alpha=1) -> None:
        """``c[i] = alpha * a[i] @ b[i]`` for (batched) row-major matrices; ``c`` is
        C-contiguous."""
        import cupy

        M, K = a.shape[-2:]
        N = b.shape[-1]
        batch = c.shape[0] if c.ndim == 3 else 1
        if M == 0 or N == 0 or batch == 0:
            return
        if K == 0:
            c.fill(0)
            return
        la, lb = self._layout(a), self._layout(b)
        if la is None:
            a = cupy.ascontiguousarray(a)
            la = self._layout(a)
        if lb is None:
            b = cupy.ascontiguousarray(b)
            lb = self._layout(b)
        # by the dtype's one-letter code: NumPy's ``dtype.name`` is a Python property, a
        # visible share of a network's small GEMM steps
        dtype, compute, sk = self._by_char[c.dtype.char]
        alpha, beta = self._alpha(sk, alpha), self._alpha(sk, 0)
        ldc = c.strides[-2] // c.itemsize if M > 1 else max(1, N)
        bc = c.strides[0] // c.itemsize if c.ndim == 3 and batch > 1 else 0
        stream = cupy.cuda.get_current_stream().ptr
        if stream != self._stream:     # (a CUDA graph's capture runs on its own stream)
            self._lib.cublasSetStream_v2(self._handle, stream)
            self._stream = stream
        # Column-major: C^T (N x M) = B^T (N x K) @ A^T (K x M).
        self._check(self._gemm(self._handle, lb[0], la[0], N, M, K, alpha,
                               b.data.ptr, dtype, lb[1], lb[2], a.data.ptr, dtype, la[1], la[2],
                               beta, c.data.ptr, dtype, ldc, bc, batch, compute, -1),
                    "cublasGemmStridedBatchedEx")
