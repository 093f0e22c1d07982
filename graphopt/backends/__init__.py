"""Backends: one per module, registered by name (see ``base.py`` for the protocol).

Importing a backend module is cheap: numba, cupy and dask are imported only when a backend
builds a plan, and ``available()`` says whether they are installed."""

from . import cupy_gpu, dask_dist, numba_cpu, numpy_ref  # noqa: F401  (register themselves)
from .base import BACKENDS, Backend, get_backend, register_backend

__all__ = ["BACKENDS", "Backend", "get_backend", "register_backend"]
