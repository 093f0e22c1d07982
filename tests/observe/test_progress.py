"""Progress lines (progress.py): shown for slow compiles and sliced runs, never for fast ones."""

import time

import numpy as np
import pytest

import graphopt as go
from graphopt.errors import GraphError
from graphopt.observe import progress


@pytest.fixture
def shown(monkeypatch):
    monkeypatch.setattr(progress, "SHOW_AFTER", 0.05)
    monkeypatch.setattr(progress, "INTERVAL", 0.01)
    go.show_progress(True)
    yield
    go.show_progress(None)


def _graph(name="slow"):
    g = go.Graph(name)
    x = g.input("x", (4, 4))
    g.output(go.exp(x) + 1.0)
    return g


def test_a_slow_compile_shows_its_pass_and_ends_with_its_time(shown, capsys):
    def sleepy(G, ctx):
        time.sleep(0.3)
        return G, {}

    go.compile(_graph(), backend="numpy", passes=["simplify", sleepy, "dce"], cache=False)
    err = capsys.readouterr().err
    assert "[graphopt] compiling 'slow': pass sleepy" in err
    assert "[graphopt] compiling 'slow': done in" in err and err.endswith("\n")
    assert not progress._active                      # the activity is gone


def test_a_fast_compile_prints_nothing(capsys):
    go.show_progress(True)
    try:
        go.compile(_graph("fast"), backend="numpy", cache=False)
    finally:
        go.show_progress(None)
    assert capsys.readouterr().err == ""            # under SHOW_AFTER (1 s): no line


def test_a_sliced_run_counts_its_slices(shown, capsys, monkeypatch):
    from graphopt.contraction.slicing import run as sc

    real = sc._run_slices

    def slow(*args):
        time.sleep(0.2)
        return real(*args)

    monkeypatch.setattr(sc, "_run_slices", slow)
    rng = np.random.default_rng(0)
    a, b = rng.random((8, 6)), rng.random((6, 5))
    got = sc.sliced_contract("ij,jk->ik", [(0, 1)], ["j"], [a, b])
    np.testing.assert_allclose(got, a @ b)
    err = capsys.readouterr().err
    assert "[graphopt] sliced contraction 'ij,jk->ik': slices 0/6" in err
    assert "sliced contraction 'ij,jk->ik': done in" in err


def test_the_environment_switch(monkeypatch, capsys):
    monkeypatch.setattr(progress, "_from_env", progress._UNREAD)
    monkeypatch.setenv("GRAPHOPT_PROGRESS", "1")
    assert progress.enabled()
    monkeypatch.setattr(progress, "_from_env", progress._UNREAD)
    monkeypatch.setenv("GRAPHOPT_PROGRESS", "0")
    assert not progress.enabled()
    monkeypatch.setattr(progress, "_from_env", progress._UNREAD)
    monkeypatch.delenv("GRAPHOPT_PROGRESS")
    assert not progress.enabled()       # pytest's captured stderr is not a terminal
    monkeypatch.setattr(progress, "_from_env", progress._UNREAD)
    monkeypatch.setenv("GRAPHOPT_PROGRESS", "yes")
    with pytest.raises(GraphError, match=r"\$GRAPHOPT_PROGRESS must be 0 or 1"):
        progress.enabled()
    monkeypatch.setattr(progress, "_from_env", progress._UNREAD)


def test_a_long_plan_call_counts_its_steps(shown, capsys, monkeypatch):
    monkeypatch.setattr(progress, "LONG_RUN_FLOPS", 10**8)
    g = go.Graph("chain")
    x = g.input("x", (600, 600))
    g.output(go.tanh(x @ x @ x @ x))
    plan = go.compile(g, backend="numpy", opt_level=0, cache=False)
    assert plan._long_running
    a = np.random.default_rng(0).random((600, 600)) / 600
    monkeypatch.setattr(progress, "SHOW_AFTER", 0.0)
    np.testing.assert_allclose(plan(a), np.tanh(a @ a @ a @ a), rtol=1e-10)
    err = capsys.readouterr().err
    assert "[graphopt] running 'chain': steps " in err and f"/{len(plan.steps)}" in err
    assert "running 'chain': done in" in err
    small = go.compile(_graph("small"), backend="numpy", cache=False)
    assert not small._long_running              # milliseconds: no activity at all


def test_a_short_activity_after_a_long_look_is_still_drawn(monkeypatch, capsys):
    """The drawing thread waits on the activities, not a fixed sleep: one that looked at
    an activity under ``SHOW_AFTER`` and then slept ``INTERVAL`` missed a shorter one
    started meanwhile (the test above failed so on a CI machine)."""
    monkeypatch.setattr(progress, "SHOW_AFTER", 1.0)
    monkeypatch.setattr(progress, "INTERVAL", 5.0)
    go.show_progress(True)
    try:
        with progress.activity("first"):
            time.sleep(0.05)      # the thread looks at it: not due for a second
        monkeypatch.setattr(progress, "SHOW_AFTER", 0.02)
        with progress.activity("second"):
            time.sleep(0.3)
    finally:
        go.show_progress(None)
    err = capsys.readouterr().err
    assert "[graphopt] second" in err and "[graphopt] second: done in" in err, err
    assert "first" not in err
