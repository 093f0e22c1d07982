"""Pass instruments: called once per pass that ran, with the graphs before and after."""

from __future__ import annotations

import json

import pytest

import graphopt as go
from graphopt import ir
from graphopt.errors import GraphError
from graphopt.passes import (
    CheckSemantics,
    DumpIR,
    PassContext,
    PassInstrument,
    PassManager,
    PassResult,
    pipeline_for,
)


def _graph():
    g = go.Graph("inst")
    a, b = g.input("a", (3, 4), "float64"), g.input("b", (4, 5), "float64")
    x = go.einsum("ij,jk->ik", a, b)
    g.output(go.exp(x) + go.exp(x))
    return g.to_ir()


class Recorder(PassInstrument):
    def __init__(self):
        self.calls = []

    def after_pass(self, index, name, before, after, ctx):
        self.calls.append((index, name, before.number_of_nodes(), after.number_of_nodes()))


def test_user_instrument_sees_every_pass_that_ran_in_order():
    rec = Recorder()
    passes = pipeline_for(2)
    H, records = PassManager(passes, disable={"cse"}, instruments=[rec]).run(_graph(),
                                                                            PassContext())
    assert [c[1] for c in rec.calls] == [r.name for r in records]
    assert "cse" not in [c[1] for c in rec.calls]
    assert [(c[2], c[3]) for c in rec.calls] == [(r.nodes_before, r.nodes_after)
                                                for r in records]
    assert rec.calls[-1][3] == H.number_of_nodes()


def test_dump_ir_writes_each_pass_output(tmp_path):
    H, records = PassManager(["cse", "dce"], instruments=[DumpIR(str(tmp_path))]).run(_graph())
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["00_cse.json", "01_dce.json"]
    doc = json.loads((tmp_path / "01_dce.json").read_text())
    assert len(doc["nodes"]) == H.number_of_nodes()


def test_check_semantics_names_the_pass_that_changed_the_result():
    def negate(G, ctx):
        H = ir.copy_graph(G)
        (o,) = H.graph["outputs"]
        d = H.nodes[o]
        n = ir.add_node(H, "neg", [o], d["shape"], d["dtype"], {})
        H.graph["outputs"] = [n]
        return PassResult(H, {})
    negate.pass_name = "negate"
    with pytest.raises(GraphError, match="'negate' changed output 0"):
        PassManager([negate], instruments=[CheckSemantics()], debug=False).run(_graph())
