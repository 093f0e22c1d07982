"""The pass manager's guards: a pass that mutates its input is caught, the IR is verified
after every pass (only the nodes a pass changed are checked again), and a pass's record
says whether it changed the graph."""

from __future__ import annotations

import pytest

import graphopt as go
from graphopt import ir
from graphopt.errors import GraphError
from graphopt.passes import PassContext, PassManager


def _graph():
    g = go.Graph("manager")
    a, b = g.input("a", (3, 4), "float64"), g.input("b", (4, 5), "float64")
    x = go.einsum("ij,jk->ik", a, b)
    g.output(go.exp(x) * 2.0)
    return g.to_ir()


def _node(G, op):
    return next(n for n, d in G.nodes(data=True) if d["op"] == op)


def _run(*passes, debug=False):
    return PassManager(list(passes), debug=debug).run(_graph(), PassContext())


def rebinds_an_attr(G, ctx):
    G.nodes[_node(G, "einsum")]["attrs"]["equation"] = "ij,jk->ki"
    return ir.copy_graph(G)


def appends_to_a_list_in_place(G, ctx):
    G.graph["outputs"].append(G.graph["outputs"][0])
    return ir.copy_graph(G)


def rewires_an_edge(G, ctx):
    e = _node(G, "exp")
    (u, _, key), = G.in_edges(e, keys=True)
    G.remove_edge(u, e, key)
    G.add_edge(G.graph["inputs"][0], e, arg=0)
    return ir.copy_graph(G)


@pytest.mark.parametrize("bad", [rebinds_an_attr, appends_to_a_list_in_place, rewires_an_edge])
@pytest.mark.parametrize("debug", [False, True])
def test_a_pass_that_mutates_its_input_is_caught(bad, debug):
    with pytest.raises(GraphError, match="mutated its input graph"):
        _run(bad, debug=debug)


def wrong_shape(G, ctx):
    H = ir.copy_graph(G)
    H.nodes[_node(H, "exp")]["shape"] = (5, 5)
    return H


def operand_changes_under_an_unchanged_user(G, ctx):
    # the einsum now gives (3, 4): exp (whose own node is untouched) no longer matches it
    H = ir.copy_graph(G)
    n = _node(H, "einsum")
    H.nodes[n]["attrs"]["equation"] = "ij,jk->ij"
    H.nodes[n]["shape"] = (3, 4)
    return H


@pytest.mark.parametrize("bad,node_op", [(wrong_shape, "exp"),
                                         (operand_changes_under_an_unchanged_user, "exp")])
def test_every_node_a_pass_changed_or_fed_is_verified_again(bad, node_op):
    with pytest.raises(GraphError, match="after pass") as info:
        _run(lambda G, ctx: ir.copy_graph(G), bad)
    assert info.value.op == node_op


def test_changed_says_whether_the_graph_changed_and_stale_schedules_are_dropped():
    def schedules(G, ctx):
        H = ir.copy_graph(G)
        H.graph["schedule"] = ir.topo_order(H)
        return H

    def swaps_einsum_operands(G, ctx):   # a structural change that keeps the node count
        H = ir.copy_graph(G)
        n = _node(H, "einsum")
        H.nodes[n]["attrs"]["equation"] = "jk,ij->ik"
        (ua, _, ka), (ub, _, kb) = sorted(H.in_edges(n, keys=True),
                                          key=lambda e: H.edges[e]["arg"])
        H.edges[ua, n, ka]["arg"], H.edges[ub, n, kb]["arg"] = 1, 0
        return H

    H, recs = _run(lambda G, ctx: ir.copy_graph(G), schedules, swaps_einsum_operands)
    assert [r.changed for r in recs] == [False, True, True]
    assert "schedule" not in H.graph        # it described the graph before the change
