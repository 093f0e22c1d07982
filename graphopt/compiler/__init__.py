"""``compile()``: options, the compile cache, the pass pipeline, lowering to a ``Plan``."""

from .driver import cached_plans, clear_cache, clear_caches, compile

__all__ = ["cached_plans", "clear_cache", "clear_caches", "compile"]
