"""Optimization passes, one per module; ``manager.py`` runs them (docs/ARCHITECTURE.md, Passes)."""

from .instruments import CheckSemantics, DumpIR, PassInstrument
from .manager import (
    PASSES,
    PIPELINES,
    PassContext,
    PassManager,
    PassRecord,
    PassResult,
    get_pass,
    pipeline_for,
    register_pass,
    register_pipeline,
)

__all__ = ["PASSES", "PIPELINES", "PassContext", "PassManager", "PassRecord", "PassResult",
           "PassInstrument", "CheckSemantics", "DumpIR", "get_pass", "pipeline_for",
           "register_pass", "register_pipeline"]

# Built-in passes register themselves on import.
from . import (  # noqa: F401, E402
    contraction,
    cse,
    dce,
    fusion,
    memory,
    rematerialize,
    schedule,
    simplify,
    slicing,
    tiling,
)
