"""Every built-in pass in the registry, property-tested against the interpreter on
generated graphs (``assert_pass_preserves_semantics``): it leaves its input unchanged, its
output verifies and keeps the signature, and it computes what its input does. A pass
registered later is tested without anyone adding it here."""

import pytest

from graphopt.passes import PASSES, PassContext, get_pass
from graphopt.testing import assert_pass_preserves_semantics

BUILTIN = sorted(name for name, p in PASSES.items()
                 if getattr(p, "__module__", "").startswith("graphopt.passes."))
# where a pass acts only under a condition, the context that gives it one: slicing and
# recomputation act under a memory limit (a small one, so that they do)
CONTEXTS = {"slicing": PassContext(memory_limit=4096),
            "rematerialize": PassContext(memory_limit=4096)}


def test_the_registry_holds_every_built_in_pass():
    assert set(BUILTIN) >= {"simplify", "cse", "dce", "contraction", "slicing", "fusion",
                            "tiling", "schedule", "rematerialize", "memory"}


@pytest.mark.parametrize("name", BUILTIN)
def test_every_built_in_pass_preserves_semantics(name):
    assert_pass_preserves_semantics(get_pass(name), max_examples=30,
                                    ctx=CONTEXTS.get(name, PassContext()))
