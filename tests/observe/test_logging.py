"""graphopt logs through the standard ``logging`` module: each pass's decisions at DEBUG,
slow phases (a compile or a path search of a second or more) at INFO, nothing above
WARNING on a normal compile, and no handler of its own."""

import logging

import numpy as np

import graphopt as go
from graphopt.compiler import driver as compiler
from graphopt.contraction.search import anytime as path_search


def _graph():
    g = go.Graph("logged")
    x = g.input("x", (8, 8))
    g.output(go.softmax(x @ x, axis=-1))
    return g


def test_passes_log_their_decisions_at_debug(caplog):
    with caplog.at_level(logging.DEBUG, logger="graphopt"):
        go.compile(_graph(), cache=False)
    passes = [r.getMessage() for r in caplog.records if r.name == "graphopt.passes.manager"]
    assert any(m.startswith("pass fusion: 7 -> 3 nodes, changed") and "normalization" in m
               for m in passes), passes
    done = [r for r in caplog.records if r.name == "graphopt.compiler.driver"]
    assert len(done) == 1 and done[0].levelno == logging.DEBUG
    assert "compiled 'logged' for backend" in done[0].getMessage()


def test_slow_phases_log_at_info(caplog, monkeypatch):
    monkeypatch.setattr(compiler, "SLOW_COMPILE_SECONDS", 0.0)
    monkeypatch.setattr(path_search, "SLOW_SECONDS", 0.0)
    terms = ["ab", "bc", "cd", "de", "ef", "fg", "gh", "hi", "ij", "jk", "kl", "lm", "ma"]
    g = go.Graph("ring")
    ins = [g.input(f"t{i}", (3, 3)) for i in range(len(terms))]
    g.output(go.einsum(",".join(terms) + "->", *ins))
    with caplog.at_level(logging.INFO, logger="graphopt"):
        go.compile(g, cache=False, path_cache=False)
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any(m.startswith("searching a contraction path for 13 operands") for m in info)
    assert any(m.startswith("path search for 13 operands:") for m in info)
    assert any(m.startswith("compiled 'ring'") for m in info)


def test_a_normal_compile_is_quiet_and_adds_no_handler(caplog):
    with caplog.at_level(logging.INFO, logger="graphopt"):
        go.compile(_graph(), cache=False)(np.ones((8, 8)))
    assert not caplog.records
    assert all(isinstance(h, logging.NullHandler) for h in logging.getLogger("graphopt").handlers)
