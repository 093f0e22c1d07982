"""The contraction value: made by the passes for every einsum node, checked by ``verify``,
kept by save/load, and read (never derived again) by the cost model and the kernels."""

import numpy as np
import opt_einsum
import pytest
from opt_einsum.testing import rand_equation

import graphopt as go
from graphopt import ir
from graphopt.analysis import cost
from graphopt.contraction.paths import default_path
from graphopt.contraction.program import build
from graphopt.contraction.rates import DEVICE_RATES, HOST_RATES
from graphopt.contraction.slicing.run import contraction_workspace_bytes
from graphopt.contraction.value import Contraction, contraction_of, pair_workspace_bytes
from graphopt.errors import GraphError


def _network(n=7, seed=3):
    eq, shapes = rand_equation(n, 3, seed=seed, d_min=2, d_max=5)
    g = go.Graph("network")
    g.output(go.einsum(eq, *(g.input(f"t{k}", s) for k, s in enumerate(shapes))))
    return eq, shapes, g


def _value(eq, shapes, path=None, rates=HOST_RATES, dtype="float64", **slicing):
    return Contraction.build(eq, shapes, dtype, [dtype] * len(shapes), path, rates, **slicing)


def test_a_pair_is_one_step_in_the_form_the_rates_give():
    big = _value("ij,jk->ik", [(16, 16), (16, 16)])
    small = _value("ij,jk->ik", [(4, 4), (4, 4)])
    outer = _value("ij,kl->ijkl", [(8, 8), (8, 8)])
    assert big.path == ((0, 1),) and big.forms == ("gemm",)
    assert small.forms == ("einsum",) and outer.forms == ("einsum",)
    # on a device every pair a GEMM maps is one, however small or outer
    assert _value("ij,jk->ik", [(4, 4), (4, 4)], rates=DEVICE_RATES).forms == ("gemm",)
    assert _value("ij,kl->ijkl", [(8, 8), (8, 8)], rates=DEVICE_RATES).forms == ("gemm",)
    assert not big.along_path and big.workspace_bytes == \
        pair_workspace_bytes("ij,jk->ik", big.shapes, "float64", "gemm")


def test_many_operands_run_along_the_default_path_and_count_its_flops():
    eq, shapes = rand_equation(6, 3, seed=1, d_min=2, d_max=5)
    c = _value(eq, shapes)
    assert c.along_path and list(c.path) == default_path(eq, shapes)
    assert c.flops == opt_einsum.contract_path(eq, *shapes, shapes=True,
                                               optimize=list(c.path))[1].opt_cost
    assert len(c.forms) == len(c.path)
    assert c.workspace_bytes == contraction_workspace_bytes(
        eq, shapes, c.path, (), None, "float64", 1, ["float64"] * len(shapes),
        forms=c.forms)


def test_relabeled_keeps_the_path_and_forms_and_renames_the_slices():
    c = _value("ab,bc,cd->ad", [(4, 5), (5, 6), (6, 7)], slices=("c",), blocks=(2,))
    r = c.relabeled({"a": "x", "b": "y", "c": "z", "d": "w", ",": ",", "-": "-", ">": ">"})
    assert r.equation == "xy,yz,zw->xw" and r.slices == ("z",) and r.blocks == (2,)
    assert r.path == c.path and r.forms == c.forms and r.flops == c.flops
    assert r.check("xy,yz,zw->xw", c.shapes, "float64", c.operand_dtypes) is None


def test_check_names_what_does_not_fit():
    c = _value("ab,bc,cd->ad", [(4, 5), (5, 6), (6, 7)])
    dtypes = c.operand_dtypes
    assert c.check(c.equation, c.shapes, "float64", dtypes) is None
    assert "equation" in c.check("ab,bc,cd->da", c.shapes, "float64", dtypes)
    assert "made for operands" in c.check(c.equation, [(4, 5), (5, 6), (6, 8)], "float64",
                                          dtypes)
    bad_path = Contraction(c.equation, c.shapes, "float64", dtypes, ((0, 5),), ("gemm",))
    assert "does not fit" in bad_path.check(c.equation, c.shapes, "float64", dtypes)
    short = Contraction(c.equation, c.shapes, "float64", dtypes, c.path, ("gemm",))
    assert "forms" in short.check(c.equation, c.shapes, "float64", dtypes)
    sliced = Contraction(c.equation, c.shapes, "float64", dtypes, c.path, c.forms, ("q",),
                         (1,))
    assert "slices" in sliced.check(c.equation, c.shapes, "float64", dtypes)


def test_verify_refuses_an_einsum_whose_contraction_is_not_its_own():
    _, _, g = _network()
    plan = go.compile(g, backend="numpy", cache=False)
    G = ir.copy_graph(plan.graph)
    (n,) = [m for m in G if G.nodes[m]["op"] == "einsum"]
    held = G.nodes[n]["attrs"]["contraction"]
    G.nodes[n]["attrs"] = dict(G.nodes[n]["attrs"], contraction=Contraction(
        held.equation, held.shapes, held.dtype, held.operand_dtypes, held.path[:-1],
        held.forms[:-1]))
    with pytest.raises(GraphError, match="its contraction does not fit it"):
        ir.verify(G)


def test_the_value_round_trips_through_json_and_save_and_load(tmp_path):
    c = _value("ab,bc,cd->ad", [(4, 5), (5, 6), (6, 7)], slices=("b",), blocks=(3,),
               workers=2)
    assert Contraction.from_dict(c.to_dict()) == c
    with pytest.raises(GraphError, match="a contraction must be a dict"):
        Contraction.from_dict({"equation": "ab->a"})
    _, _, g = _network()
    plan = go.compile(g, backend="numpy", cache=False, memory_limit=None)
    go.save(plan.graph, tmp_path / "optimized.json")
    G = go.load(tmp_path / "optimized.json").to_ir()
    held = [d["attrs"]["contraction"] for _, d in plan.graph.nodes(data=True)
            if d["op"] == "einsum"]
    loaded = [d["attrs"]["contraction"] for _, d in G.nodes(data=True) if d["op"] == "einsum"]
    assert loaded == held and all(isinstance(c, Contraction) for c in loaded)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("opt_level", [0, 1, 2])
def test_every_einsum_of_a_compiled_graph_holds_the_contraction_the_cost_model_counts(
        backend, opt_level):
    g = go.Graph("mixed")
    a, b, c = (g.input(k, (8, 8)) for k in "abc")
    g.output(go.exp(go.einsum("ij,jk,kl->il", a, b, c)) @ a)
    plan = go.compile(g, backend=backend, opt_level=opt_level, cache=False)
    G = plan.graph
    einsums = [n for n in G if G.nodes[n]["op"] == "einsum"] + [
        m for n in G if G.nodes[n]["op"] == "fused"
        for m, d in G.nodes[n]["attrs"]["graph"].nodes(data=True) if d["op"] == "einsum"]
    assert einsums
    for n in G:
        if G.nodes[n]["op"] == "einsum":
            assert cost.node_flops(G, n) == contraction_of(G, n).flops
    assert plan.report["contraction"].details["flops_after"] == cost.graph_flops(G)


def test_the_kernel_runs_what_the_compile_planned(monkeypatch):
    eq, shapes, g = _network(9, seed=5)
    plan = go.compile(g, backend="numba", cache=False)
    planned = []
    real = build.build_program
    monkeypatch.setattr("graphopt.contraction.program.run.build_program",
                        lambda *a, **k: planned.append(1) or real(*a, **k))
    arrays = [np.random.default_rng(k).standard_normal(s) for k, s in enumerate(shapes)]
    np.testing.assert_allclose(plan(*arrays), opt_einsum.contract(eq, *arrays), rtol=1e-10)
    assert planned == []      # the first call found the program the compile planned


def test_a_sliced_contraction_holds_its_slices_and_the_workspace_the_pass_bounded():
    # slicing the output label i costs no FLOPs: the pass slices it to fit a quarter of the
    # intermediate's bytes
    eq, (i, a) = "ia,ib,ic,abc->i", (256, 32)
    g = go.Graph("sliced")
    g.output(go.einsum(eq, *(g.input(f"t{k}", s) for k, s in
                             enumerate([(i, a), (i, a), (i, a), (a, a, a)]))))
    limit = 8 * i * a * a // 4
    plan = go.compile(g, backend="numpy", cache=False, memory_limit=limit, threads=1)
    (n,) = [m for m in plan.graph if plan.graph.nodes[m]["op"] == "einsum"]
    c = contraction_of(plan.graph, n)
    (s,) = plan.report["slicing"].details["sliced"]
    assert c.slices and list(c.slices) == s["slices"] and list(c.blocks) == s["slice_blocks"]
    assert c.workers == s["slice_workers"] == 1
    assert c.workspace_bytes == s["predicted_peak_bytes"] <= limit
    assert plan.steps[0].kernel.workspace_bytes == c.workspace_bytes
    arrays = [np.random.default_rng(k).standard_normal(x) for k, x in
              enumerate([(i, a), (i, a), (i, a), (a, a, a)])]
    np.testing.assert_allclose(plan(*arrays), np.einsum(eq, *arrays), rtol=1e-9)
