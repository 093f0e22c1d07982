"""Backends: one per module, registered by name (see ``base.py`` for the protocol).

``numpy_ref`` is the reference; ``numba/``, ``cupy/`` and ``dask/`` each hold one backend
(its ``backend`` module registers it). Importing a backend module is cheap: numba, cupy and
dask are imported only when a backend builds a plan, and ``available()`` says whether they
are installed."""

from . import numpy_ref  # noqa: F401  (the backends register themselves)
from .base import BACKENDS, Backend, get_backend, register_backend
from .cupy import backend as _cupy  # noqa: F401
from .dask import backend as _dask  # noqa: F401
from .numba import backend as _numba  # noqa: F401

__all__ = ["BACKENDS", "Backend", "get_backend", "register_backend"]
