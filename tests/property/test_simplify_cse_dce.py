"""Property tests of simplify, CSE and DCE on hypothesis graphs (graphopt.testing).

For each pass (its semantics, every registered pass's, in ``test_passes.py``): the
pipeline of the three keeps semantics; running a pass twice equals running it once
(structural hash); after CSE no two nodes share a canonical key; after DCE every node
reaches an output. The opt_level=1 pipeline through ``go.compile`` agrees with the
interpreter, and with NaN, infinities and signed zeros in the inputs simplify keeps where
NaN, infinities and the signs of zeros appear.
"""

from collections import Counter

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

import graphopt as go
from graphopt import ir
from graphopt.ir.interpreter import run_graph
from graphopt.passes import PassContext
from graphopt.passes.cse import cse, node_key
from graphopt.passes.dce import dce
from graphopt.passes.simplify import simplify
from graphopt.testing import (
    assert_pass_preserves_semantics,
    assert_plan_matches_interpreter,
    graph_text,
    graphs,
    inputs_for,
)

PASSES = {"simplify": simplify, "cse": cse, "dce": dce}


def examples(n: int) -> int:
    """``n`` under the CI profile; the active profile's count where it asks for more
    (``--hypothesis-profile=thorough``)."""
    return max(n, settings.default.max_examples)


CTX = PassContext(opt_level=1)
DTYPES = ("float64", "float32", "int64", "complex128")


@st.composite
def rewrite_prone_graphs(draw, max_ops: int = 8):
    """Graphs dense in what simplify rewrites: transposes and reshapes around einsums, and
    elementwise ops with neutral-looking constants (in several dtypes and shapes, so that
    promotion and broadcasting decide whether a rule may fire)."""
    g = go.Graph("rewrite_prone")
    dtype = draw(st.sampled_from(DTYPES))
    x = g.input("x0", tuple(draw(st.lists(st.integers(1, 3), min_size=2, max_size=3))), dtype)
    ts = [x]
    for _ in range(draw(st.integers(1, max_ops))):
        t = ts[-1 - draw(st.integers(0, min(2, len(ts) - 1)))]
        labels = "abc"[:t.ndim]
        kind = draw(st.sampled_from(("transpose", "reshape", "einsum", "einsum2", "neutral",
                                     "astype", "where", "self")))
        if kind == "transpose":
            t = t.transpose(draw(st.permutations(range(t.ndim))))
        elif kind == "reshape":
            t = t.reshape(tuple(draw(st.permutations(t.shape))) + (1,) * draw(st.integers(0, 1)))
        elif kind == "einsum" and t.ndim <= 3:
            out = "".join(draw(st.permutations(labels)))
            t = go.einsum(f"{labels}->{out}", t)
        elif kind == "einsum2" and 1 <= t.ndim <= 3:
            other = g.const(np.arange(1.0, 1.0 + 2 * t.shape[-1]).reshape(t.shape[-1], 2))
            out = "".join(draw(st.permutations(labels[:-1] + "z")))
            t = go.einsum(f"{labels},{labels[-1]}z->{out}", t, other)
        elif kind == "neutral":
            op, v = draw(st.sampled_from((("mul", 1), ("add", 0), ("add", -0.0), ("sub", 0),
                                          ("sub", -0.0), ("div", 1), ("pow", 1), ("pow", 2))))
            if draw(st.booleans()):
                shape = tuple(draw(st.sampled_from((1, d))) for d in t.shape)
                shape = (draw(st.integers(1, 2)),) * draw(st.integers(0, 1)) + shape
                v = g.const(np.full(shape, v, draw(st.sampled_from(DTYPES))))
            f = {"mul": go.mul, "add": go.add, "sub": go.sub, "div": go.div, "pow": go.pow}[op]
            t = f(v, t) if op in ("mul", "add") and draw(st.booleans()) else f(t, v)
        elif kind == "astype":
            t = t.astype(draw(st.sampled_from((t.dtype.name,) + DTYPES)))
        elif kind == "where" and t.dtype.kind != "c":
            value = draw(st.sampled_from((True, False, "mixed")))
            mixed = value == "mixed" and t.ndim > 0 and t.shape[-1] == 2
            cond = g.const(np.array([True, False]) if mixed else value is True)
            t = go.where(cond, t, go.neg(go.neg(t)))
        elif kind == "self":
            t = draw(st.sampled_from((lambda u: u - u, lambda u: go.maximum(u, u),
                                      lambda u: go.conj(go.conj(u)))))(t)
        ts.append(t)
    g.output(tuple(ts[-draw(st.integers(1, min(3, len(ts)))):]))
    return g


def pipeline(G):
    for p in PASSES.values():
        G = p(G, CTX).graph
    return G


def test_pipeline_preserves_semantics():
    assert_pass_preserves_semantics(lambda G, ctx: pipeline(G), max_examples=examples(100))


@pytest.mark.parametrize("name", ["simplify", "pipeline"])
def test_rewrite_prone_graphs_keep_semantics(name):
    p = simplify if name == "simplify" else (lambda G, ctx: pipeline(G))
    assert_pass_preserves_semantics(p, max_examples=examples(150), graphs=rewrite_prone_graphs())


@settings(max_examples=examples(100))
@given(st.one_of(graphs(), rewrite_prone_graphs()))
def test_idempotent(g):
    G = g.to_ir()
    for name, p in PASSES.items():
        once = p(G, CTX).graph
        twice = p(once, CTX)
        assert ir.structural_hash(twice.graph) == ir.structural_hash(once), name
        if name == "simplify":
            assert twice.record["rewrites"] == [], twice.record["rewrites"]


@settings(max_examples=examples(80))
@given(graphs(max_nodes=20))
def test_cse_and_dce_invariants(g):
    G = g.to_ir()
    for H in (cse(G, CTX).graph, pipeline(G)):
        keys = [node_key(H, n) for n in H if H.nodes[n]["op"] != "input"]
        dup = [k for k, c in Counter(keys).items() if c > 1]
        assert not dup, f"structurally equal nodes after CSE: {dup}"
    for H in (dce(G, CTX).graph, pipeline(G)):
        outs = set(H.graph["outputs"])
        reach = set(outs).union(*(nx.ancestors(H, o) for o in outs))
        stray = [n for n in H if n not in reach and H.nodes[n]["op"] != "input"]
        assert not stray, f"nodes that reach no output after DCE: {stray}"
        assert H.graph["inputs"] == G.graph["inputs"]


@settings(max_examples=examples(40))
@given(graphs(max_nodes=14), st.data())
def test_compile_opt_level_1_matches_interpreter(g, data):
    inputs = data.draw(inputs_for(g))
    plan = go.compile(g, backend="numpy", opt_level=1, cache=False)
    assert [r.name for r in plan.report.records] == ["simplify", "cse", "dce", "contraction"]
    assert_plan_matches_interpreter(g, plan, inputs)


def _with_specials(arr: np.ndarray, picks: list[int]) -> np.ndarray:
    specials = [-0.0, np.nan, np.inf, -np.inf]
    out = np.array(arr, copy=True)
    if out.dtype.kind not in "fc" or out.size == 0:
        return out
    flat = out.reshape(-1)
    for k, p in enumerate(picks):
        flat[p % flat.size] = specials[k % len(specials)]
    return out


@settings(max_examples=examples(80))
@given(st.one_of(rewrite_prone_graphs(),
                graphs(dtypes=("float64", "float32", "complex128"),
                       ops=("unary", "binary", "reduce", "layout", "compare", "astype",
                            "const", "shared"))),
       st.data())
def test_simplify_keeps_nan_inf_and_signed_zeros(g, data):
    # No many-label einsums here: numpy.einsum picks its evaluation (e.g. summing a label
    # out of one operand first) by label order, so a relabeled einsum may turn the inf*-x +
    # inf*y that gives nan into (inf)*(inf - x): equal as math, not as IEEE. That is the
    # reassociation any contraction order makes, judged by the tolerance tests above.
    G = g.to_ir()
    H = simplify(G, CTX).graph
    note(graph_text(G))
    note(graph_text(H))
    base = data.draw(inputs_for(G))
    picks = data.draw(st.lists(st.integers(0, 10**6), min_size=1, max_size=5))
    arrays = [_with_specials(base[G.nodes[i]["name"]], picks) for i in G.graph["inputs"]]
    with np.errstate(all="ignore"):
        expected, got = run_graph(G, arrays), run_graph(H, arrays)
    for e, a in zip(expected, got):
        assert e.dtype == a.dtype and e.shape == a.shape
        for part in ((np.real, np.imag) if e.dtype.kind == "c" else (np.real,)):
            pe, pa = part(e), part(a)
            if pe.dtype.kind != "f":
                continue
            assert np.array_equal(np.isnan(pe), np.isnan(pa))
            assert np.array_equal(np.isposinf(pe), np.isposinf(pa))
            assert np.array_equal(np.isneginf(pe), np.isneginf(pa))
            zeros = (pe == 0) & (pa == 0)
            assert np.array_equal(np.signbit(pe[zeros]), np.signbit(pa[zeros])), "signed zero"


def test_the_suite_exercises_the_rules():
    """The strategies do produce graphs on which the rules fire (the suite is not vacuous)."""
    fired: Counter = Counter()

    @settings(max_examples=examples(200))
    @given(st.one_of(graphs(), rewrite_prone_graphs()))
    def collect(g):
        fired.update(simplify(g.to_ir(), CTX).record["rules"])

    collect()
    for rule in ("const_fold", "identity", "identity_layout", "einsum_relabel",
                 "einsum_to_transpose", "transpose_into_einsum"):
        assert fired[rule] > 0, dict(fired)
