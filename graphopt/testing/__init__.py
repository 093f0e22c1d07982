"""Testing kit for graphopt and for users' own passes (DESIGN §8).

``graphs()``, ``einsum_equations()`` and ``inputs_for(graph)`` are hypothesis strategies;
``assert_pass_preserves_semantics(pass_)`` property-tests a pass against the interpreter;
``check_same_semantics(G, H, name)`` compares two IRs on random inputs.
"""

from .semantics import (assert_pass_preserves_semantics, check_pass_once, check_same_semantics,
                        graph_text, tolerance)
from .strategies import einsum_equations, graphs, inputs_for

__all__ = ["graphs", "einsum_equations", "inputs_for", "assert_pass_preserves_semantics",
           "check_same_semantics", "check_pass_once", "graph_text", "tolerance"]
