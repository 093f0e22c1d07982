"""Compile and compare with the interpreter: the one check every test of a whole plan uses.

``assert_plan_matches_interpreter(graph, plan, inputs)`` runs ``plan`` twice and the
interpreter (the reference, ``backend="numpy"``'s semantics) once, and holds the plan to
what any plan promises: every output equal within the graphs' tolerance (exact for integer
and bool dtypes, NaN where NaN), of the interpreter's dtype and shape; a second call's
outputs never in the memory of the first's; inputs never written to.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..ir.equivalence import compare_outputs, graph_tolerance
from ..ir.interpreter import interpret
from ..runtime.signature import flatten_outputs

# numba_math's fast-math functions stay within ~4 ulp of float32; where a plan runs with
# fast math (a backend that reads ``fast_math``, left at its default True) a float64 output
# is held to this bound instead of float64's, with margin.
FAST_MATH_TOLERANCE = 1e-5


def output_leaves(value) -> list:
    """A plan's or the interpreter's outputs as a flat list, in output order (nested
    structures depth first)."""
    return flatten_outputs(value, lambda leaf: leaf)[0]


def plan_tolerance(G, plan) -> tuple[float, float]:
    """``(rtol, atol)`` for ``plan``'s outputs against the interpreter's on source IR ``G``."""
    rtol, atol = graph_tolerance(G, plan.graph)
    if "fast_math" in plan.backend.compile_options and plan.options.get("fast_math", True):
        rtol, atol = max(rtol, FAST_MATH_TOLERANCE), max(atol, FAST_MATH_TOLERANCE)
    return rtol, atol


def _host(a):
    return a.get() if not isinstance(a, np.ndarray) and hasattr(a, "get") else a


def assert_plan_matches_interpreter(graph, plan, inputs: dict, *, calls: int = 2,
                                    rtol: float | None = None) -> None:
    """Run ``plan`` ``calls`` times on ``inputs`` (by input name) and assert it matches the
    interpreter on ``graph`` (a ``go.Graph`` or its IR) as the module docstring says.
    Device outputs (cupy) are compared on the host; ``rtol`` overrides ``plan_tolerance``
    (relative and absolute) where a test documents a looser bound."""
    G = graph.to_ir() if hasattr(graph, "to_ir") else graph
    before = {k: np.array(_host(v), copy=True) for k, v in inputs.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # NumPy's overflow/invalid warnings on random values
        expected = output_leaves(interpret(G, **inputs))
        runs = [[_host(a) for a in output_leaves(plan(**inputs))] for _ in range(calls)]
    rtol, atol = plan_tolerance(G, plan) if rtol is None else (rtol, rtol)
    for k, e in enumerate(expected):
        first = runs[0][k]
        assert isinstance(first, np.ndarray), f"output {k} is a {type(first).__name__}"
        problem = compare_outputs(e, first, rtol, atol)
        assert problem is None, f"output {k}: {problem}\n{plan.report}"
        for again in runs[1:]:
            # a later call never overwrites what an earlier one returned, and repeats it
            assert not np.shares_memory(first, again[k]), f"output {k} reused across calls"
            assert compare_outputs(first, again[k], 0, 0) is None or np.isnan(first).any(), \
                f"output {k} differs between calls"
    for k, v in inputs.items():
        assert np.array_equal(before[k], _host(v), equal_nan=True), \
            f"input {k!r} was written to"
