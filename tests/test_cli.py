"""The command line (``graphopt demo``, ``report``, ``cache``, ``--version``) and the runnable
examples."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import graphopt as go
from graphopt import cli

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_demo_checks_against_numpy_and_prints_reports(tmp_path, capsys):
    trace = tmp_path / "trace.json"
    assert cli.main(["demo", "--backend", "numpy", "--trace", str(trace), "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    for name in ("mlp", "attention", "mps_ring"):
        assert f"graphopt report: '{name}'" in out
    assert out.count(" OK") == 3 and "all workloads match NumPy" in out
    assert "max error vs NumPy" in out
    if "profiler not available" not in out:  # the profiler is optional to the demo
        doc = json.loads(trace.read_text())
        assert doc["traceEvents"]
    assert not [p for p in tmp_path.iterdir() if p.name != "trace.json"]  # no temp files left


def test_demo_writes_its_trace_outside_the_working_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "DEMO_WORKLOADS", cli.DEMO_WORKLOADS[:1])
    assert cli.main(["demo", "--backend", "numpy", "--repeat", "1"]) == 0
    written = capsys.readouterr().out.split("Chrome trace written to ")[1].split()[0]
    assert json.loads(pathlib.Path(written).read_text())["traceEvents"]
    assert not list(tmp_path.iterdir())


def test_demo_fails_loudly_on_a_wrong_result(monkeypatch, capsys):
    (build, sizes), *rest = cli.DEMO_WORKLOADS

    def broken(**kw):
        w = build(**kw)
        w.reference = lambda **inputs: np.zeros((64, 256))
        return w

    monkeypatch.setattr(cli, "DEMO_WORKLOADS", [(broken, sizes), *rest])
    assert cli.main(["demo", "--backend", "numpy", "--trace", ""]) == 1
    captured = capsys.readouterr()
    assert "MISMATCH" in captured.out and "FAILED: mlp" in captured.err


def test_demo_seed_changes_the_inputs_only(monkeypatch, capsys):
    seen = []
    build, sizes = cli.DEMO_WORKLOADS[0]

    def recording(**kw):
        w = build(**kw)
        seen.append(w.inputs["x"][0, 0])
        return w

    monkeypatch.setattr(cli, "DEMO_WORKLOADS", [(recording, sizes)])
    for seed in ([], ["--seed", "5"], ["--seed", "5"]):
        assert cli.main(["demo", "--backend", "numpy", "--trace", "", "--repeat", "1",
                         *seed]) == 0
    assert seen[0] != seen[1] == seen[2]
    assert capsys.readouterr().out.count(" OK") == 3


def test_report_command(tmp_path, capsys):
    g = go.Graph("saved")
    x = g.input("x", (3, 4))
    g.output(go.exp(x).sum(axis=0))
    path = tmp_path / "g.json"
    go.save(g, path)
    for fmt, marker in [("text", "graphopt report: 'saved'"), ("markdown", "### graphopt report"),
                        ("json", '"name": "saved"'), ("dot", "digraph")]:
        assert cli.main(["report", str(path), "--backend", "numpy", "--format", fmt]) == 0
        assert marker in capsys.readouterr().out
    (tmp_path / "bad.json").write_text('{"format": "nope"}')
    assert cli.main(["report", str(tmp_path / "bad.json")]) == 2
    assert "malformed graph document" in capsys.readouterr().err
    assert cli.main(["report", str(tmp_path / "missing.json")]) == 2


def test_trace_command_writes_a_perfetto_trace_and_a_timeline(tmp_path, capsys, monkeypatch):
    g = go.Graph("traced")
    x = g.input("x", (16, 8))
    w = g.input("w", (8, 4))
    g.output(go.tanh(go.einsum("ij,jk->ik", x, w)) + 1.0)
    path = tmp_path / "g.json"
    go.save(g, path)
    out = tmp_path / "out"
    assert cli.main(["trace", str(path), "--out", str(out), "--repeat", "3"]) == 0
    shown = capsys.readouterr().out
    assert "max error against the interpreter" in shown and "of peak" in shown
    err = float(shown.split("max error against the interpreter ")[1].split()[0])
    assert err < 1e-12
    doc = json.loads((out / "trace.json").read_text())
    steps = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(steps) == 3 * len({e["name"] for e in steps}) and steps
    assert (out / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # without --out: a new temporary directory, never the working directory
    monkeypatch.chdir(tmp_path / "out")
    before = sorted(os.listdir("."))
    assert cli.main(["trace", str(path), "--repeat", "1", "--backend", "numpy"]) == 0
    assert sorted(os.listdir(".")) == before
    trace = capsys.readouterr().out.split("Perfetto trace: ")[1].split()[0]
    assert os.path.isfile(trace) and "graphopt-trace-" in trace


def test_bench_command_runs_a_suite_of_the_checkout(capsys, monkeypatch):
    assert cli.find_benchmarks() == ROOT
    calls = []
    monkeypatch.setattr(cli.subprocess, "call", lambda cmd, cwd: calls.append((cmd, cwd)) or 0)
    assert cli.main(["bench", "networks", "--budget", "1", "--quick"]) == 0
    assert calls == [([sys.executable, "-m", "benchmarks.networks", "--budget", "1", "--quick"],
                      ROOT)]
    assert cli.main(["bench"]) == 0 and calls[-1][0][2] == "benchmarks.run"
    monkeypatch.setattr(cli, "find_benchmarks", lambda: None)
    assert cli.main(["bench"]) == 2
    assert "clone the repository" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_command_runs_the_quick_suite_for_real():
    out = subprocess.run([sys.executable, "-m", "graphopt", "bench", "run", "--quick",
                          "--workloads", "mlp", "--peers", "graphopt,numpy", "--mode", "pinned",
                          "--min-time", "0.05", "--no-subprocess"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "mlp" in out.stdout and "numpy" in out.stdout


def test_version_and_cache_commands(tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"graphopt {go.__version__}"
    monkeypatch.setenv("GRAPHOPT_CACHE_DIR", str(tmp_path / "cache"))
    assert cli.main(["cache"]) == 0
    assert "(not created yet)" in capsys.readouterr().out
    g = go.Graph("cached")
    x = g.input("x", (64,))
    g.output(go.tanh(x) * 2 + 1)
    go.compile(g, backend="numba", cache=False)(np.ones(64))
    (tmp_path / "cache" / "mine.txt").write_text("not graphopt's")
    assert cli.main(["cache"]) == 0
    shown = capsys.readouterr().out
    kernels = int(shown.split("kernels")[1].split()[0])
    assert str(tmp_path / "cache") in shown and kernels >= 1
    assert cli.main(["cache", "--clear"]) == 0
    assert f"removed {kernels}" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()
                  if p.is_file()) == ["mine.txt"]       # only graphopt's files go
    os.chmod(tmp_path / "cache", 0o777)                 # a directory graphopt would not use
    assert cli.main(["cache", "--clear"]) == 2
    assert "not clearing" in capsys.readouterr().err


def test_python_dash_m_help():
    out = subprocess.run([sys.executable, "-m", "graphopt", "--help"], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0 and "demo" in out.stdout and "report" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "graphopt", "frobnicate"], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


@pytest.mark.slow
@pytest.mark.parametrize("script", ["quickstart.py", "tensor_network.py"])
def test_examples_run(script, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, str(ROOT / "examples" / script)], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "graphopt report" in out.stdout
    assert not list(tmp_path.iterdir())       # its files go to a temporary directory


@pytest.mark.parametrize("argv", [["demo", "--repeat", "0"], ["demo", "--repeat", "x"],
                                  ["demo", "--opt-level", "7"], ["bogus"], []])
def test_usage_errors_exit_2_with_one_line(argv, capsys):       # ISSUE 12: 24
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "error:" in err and "Traceback" not in err
