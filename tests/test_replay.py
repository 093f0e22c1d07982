"""Structural-hash replay: every benchmark workload, at two scales, on the reference and
the numba backend, at opt_levels 0-2, must optimize to exactly the graph it did when
``tests/data/workload_hashes.json`` was recorded. A refactor that changes any optimized
graph fails here; a change that means to must re-record the file on purpose:

    python -m tests.test_replay > tests/data/workload_hashes.json

The hashes hold for the library versions they were recorded with (opt_einsum picks the
paths; NumPy computes folded constants): under other versions the comparison is skipped,
with the versions named.
"""

from __future__ import annotations

import json
import pathlib
import sys

import networkx
import numpy
import opt_einsum
import pytest

import graphopt as go
from benchmarks.workloads import ALL
from graphopt import ir

GOLDEN = pathlib.Path(__file__).parent / "data" / "workload_hashes.json"
CASES = [(name, scale, backend, level) for name in ALL for scale in (0.125, 1.0)
         for backend in ("numpy", "numba") for level in (0, 1, 2)]


VERSIONS = {"numpy": numpy.__version__, "opt_einsum": opt_einsum.__version__,
            "networkx": networkx.__version__}


def _key(name, scale, backend, level) -> str:
    return f"{name}/{scale}/{backend}/O{level}"


def optimized_hash(name, scale, backend, level) -> str:
    # no path cache: a path kept on disk by an earlier run (searched with another budget or
    # rule) would stand in for what this code's search finds
    plan = go.compile(ALL[name](scale).build(), backend=backend, opt_level=level, cache=False,
                      path_cache=False)
    return ir.structural_hash(plan.graph)


def _golden() -> dict:
    return json.loads(GOLDEN.read_text())


def test_every_case_is_recorded():
    assert sorted(_golden()["hashes"]) == sorted(_key(*c) for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[_key(*c) for c in CASES])
def test_optimized_graph_unchanged(case):
    golden = _golden()
    if golden["versions"] != VERSIONS:
        pytest.skip(f"hashes recorded under {golden['versions']}, this is {VERSIONS}")
    assert optimized_hash(*case) == golden["hashes"][_key(*case)]


if __name__ == "__main__":
    json.dump({"versions": VERSIONS,
               "hashes": {_key(*c): optimized_hash(*c) for c in CASES}}, sys.stdout,
              indent=1, sort_keys=True)
    sys.stdout.write("\n")
