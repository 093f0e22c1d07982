"""Testing kit for graphopt and for users' own passes (docs/trust.md).

``graphs()``, ``einsum_equations()`` and ``inputs_for(graph)`` are hypothesis strategies;
``assert_pass_preserves_semantics(pass_)`` property-tests a pass against the interpreter;
``check_same_semantics(G, H, name)`` compares two IRs on random inputs;
``checked_run(pass_, graph)`` runs a pass once with every check a pass owes;
``check_against_oracle(G, outputs, inputs)`` holds outputs to a float64/complex128 NumPy
oracle with propagated error bounds (``oracle.py``), and ``random_case(seed)`` makes the
random graphs the differential fuzzer feeds it (``fuzz.py``);
``assert_plan_matches_interpreter(graph, plan, inputs)`` is the one "compile and compare
with the interpreter" check (``plans.py``); ``assert_grad_correct(graph)`` holds
``go.grad``/``go.vjp`` to float64 finite differences on every backend (``gradcheck.py``).
"""

from .fuzz import random_case
from .gradcheck import assert_grad_correct, gradient_graph
from .oracle import check_against_oracle, oracle
from .plans import assert_plan_matches_interpreter, output_leaves, plan_tolerance
from .semantics import (
    assert_pass_preserves_semantics,
    check_pass_once,
    check_same_semantics,
    checked_run,
    graph_text,
    tolerance,
)
from .strategies import einsum_equations, graphs, inputs_for

__all__ = ["graphs", "einsum_equations", "inputs_for", "assert_pass_preserves_semantics",
           "check_same_semantics", "check_pass_once", "checked_run", "graph_text", "tolerance",
           "check_against_oracle", "oracle", "random_case", "assert_plan_matches_interpreter",
           "output_leaves", "plan_tolerance", "assert_grad_correct", "gradient_graph"]
