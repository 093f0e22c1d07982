"""The benchmark harness's smoke mode, so it does not rot (benchmarks measure; nothing here
is timed)."""

import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import run  # noqa: E402


def test_quick_run_checks_every_peer_against_numpy(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert run.main(["--quick", "--workloads", "small,chain,elementwise", "--peers",
                     "graphopt,numpy,opt_einsum", "--no-subprocess", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert set(res["workloads"]) == {"small", "chain", "elementwise"}
    for name, row in res["workloads"].items():
        g = row["peers"]["graphopt"]
        assert g["correct"] and g["median_ms"] > 0 and g["repeats"] >= 5, name
        assert row["peers"]["numpy"]["correct"], name
        assert row["graphopt"]["backend"] == "numba"
    assert "skipped" in res["workloads"]["elementwise"]["peers"]["opt_einsum"]
    assert "| small |" in capsys.readouterr().out
