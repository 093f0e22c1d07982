"""Switches read from the environment: one rule for what a yes/no variable may hold."""

from __future__ import annotations

import os

from ..errors import GraphError


def env_flag(name: str, unset=False):
    """``$name`` as a switch: "1" on, "0" off, empty or unset ``unset``; anything else a
    GraphError (a misspelt value never silently means off)."""
    value = os.environ.get(name, "").strip()
    if value not in ("", "0", "1"):
        raise GraphError(f"${name} must be 0 or 1, got {value!r}")
    return unset if value == "" else value == "1"
