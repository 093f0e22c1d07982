"""The "compile and compare with the interpreter" check (graphopt/testing/plans.py) catches
what it promises to catch: wrong values, outputs reused across calls, written inputs."""

import numpy as np
import pytest

import graphopt as go
from graphopt.testing import assert_plan_matches_interpreter, output_leaves, plan_tolerance


def graph():
    g = go.Graph("g")
    x = g.input("x", (4, 3), "float32")
    g.output({"y": go.exp(x).sum(axis=0), "z": x * 2})
    return g


class Doctored:
    """A real plan whose results a test spoils."""

    def __init__(self, plan, spoil):
        self.plan, self.spoil = plan, spoil
        self.backend, self.options, self.graph = plan.backend, plan.options, plan.graph
        self.report = plan.report

    def __call__(self, **inputs):
        return self.spoil(self.plan(**inputs), inputs)


@pytest.fixture
def inputs(rng):
    return {"x": rng.standard_normal((4, 3)).astype("float32")}


def test_a_correct_plan_passes_on_every_host_backend(inputs):
    for backend in ("numpy", "numba"):
        assert_plan_matches_interpreter(graph(), go.compile(graph(), backend=backend), inputs)


def test_wrong_values_fail(inputs):
    def off(out, _):
        return {"y": out["y"] * np.float32(1.01), "z": out["z"]}

    plan = Doctored(go.compile(graph(), backend="numpy"), off)
    with pytest.raises(AssertionError, match="output 0: max abs error"):
        assert_plan_matches_interpreter(graph(), plan, inputs)


def test_an_output_reused_by_the_next_call_fails(inputs):
    kept = {}

    def reuse(out, _):
        z = kept.setdefault("z", out["z"])
        z[...] = out["z"]
        return {"y": out["y"], "z": z}

    plan = Doctored(go.compile(graph(), backend="numpy", cache=False), reuse)
    with pytest.raises(AssertionError, match="output 1 reused across calls"):
        assert_plan_matches_interpreter(graph(), plan, inputs)


def test_a_written_input_fails(inputs):
    def scribble(out, ins):
        ins["x"][0, 0] += 1
        return out

    plan = Doctored(go.compile(graph(), backend="numpy"), scribble)
    with pytest.raises(AssertionError, match="input 'x' was written to"):
        assert_plan_matches_interpreter(graph(), plan, inputs, calls=1)


def test_fast_math_widens_the_tolerance_only_where_the_backend_runs_it():
    g = go.Graph("f64")
    x = g.input("x", (4,), "float64")
    g.output(go.exp(x))
    G = g.to_ir()
    exact = plan_tolerance(G, go.compile(g, backend="numba", fast_math=False))
    assert exact[0] < 1e-5
    assert plan_tolerance(G, go.compile(g, backend="numba")) == (1e-5, 1e-5)
    assert plan_tolerance(G, go.compile(g, backend="numpy")) == exact


def test_output_leaves_keep_the_output_order():
    assert output_leaves({"b": 1, "a": 2}) == [1, 2]
    assert output_leaves((1, 2)) == [1, 2] and output_leaves(3) == [3]
