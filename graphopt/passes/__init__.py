"""Optimization passes, one per module; ``manager.py`` runs them (DESIGN §4)."""

from .manager import (PASSES, PIPELINES, PassContext, PassManager, PassRecord, PassResult,
                      get_pass, pipeline_for, register_pass, register_pipeline)

__all__ = ["PASSES", "PIPELINES", "PassContext", "PassManager", "PassRecord", "PassResult",
           "get_pass", "pipeline_for", "register_pass", "register_pipeline"]

# Built-in passes register themselves on import.
import importlib as _importlib
import importlib.util as _importlib_util

for _name in ("simplify", "cse", "dce", "contraction", "slicing", "fusion", "schedule",
              "memory"):
    if _importlib_util.find_spec(f"{__name__}.{_name}") is not None:  # TEMP during development
        _importlib.import_module(f".{_name}", __name__)
