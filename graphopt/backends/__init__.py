"""Backends: one per module, registered by name (see ``base.py`` for the protocol)."""

from .base import BACKENDS, Backend, get_backend, register_backend
from . import numpy_ref  # noqa: F401  (registers "numpy")

__all__ = ["BACKENDS", "Backend", "get_backend", "register_backend"]

import importlib as _importlib
import importlib.util as _importlib_util

for _name in ("numba_cpu", "cupy_gpu", "dask_dist"):
    if _importlib_util.find_spec(f"{__name__}.{_name}") is not None:  # TEMP during development
        _importlib.import_module(f".{_name}", __name__)
