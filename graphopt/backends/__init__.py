"""Backends: one per module, registered by name (see ``base.py`` for the protocol)."""

from .base import BACKENDS, Backend, get_backend, register_backend
from . import numpy_ref  # noqa: F401  (registers "numpy")

__all__ = ["BACKENDS", "Backend", "get_backend", "register_backend"]
