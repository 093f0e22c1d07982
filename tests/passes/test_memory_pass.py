"""The memory pass: in-place reuse, best-fit arena offsets, the plan's invariants."""

import numpy as np
import pytest

import graphopt as go
from graphopt import ir
from graphopt.analysis.liveness import ALIGN, align, assign_arena_offsets, liveness_intervals
from graphopt.errors import GraphError
from graphopt.ir.interpreter import interpret
from graphopt.passes.memory import check_layout, find_inplace, memory
from graphopt.testing import checked_run


def check_plan(G, plan):
    """No two arena values live at the same step share a byte, except an in-place chain;
    offsets aligned; lower bound <= planned <= naive."""
    chain = {}
    for n in plan.intervals:
        r = n
        while r in plan.inplace:
            r = plan.inplace[r]
        chain[n] = r
    items = list(plan.intervals)
    for i, a in enumerate(items):
        assert plan.offsets[a] % ALIGN == 0
        assert plan.sizes[a] == ir.nbytes(G, a)
        for b in items[i + 1:]:
            (s1, e1), (s2, e2) = plan.intervals[a], plan.intervals[b]
            if s1 > e2 or s2 > e1 or not plan.sizes[a] or not plan.sizes[b]:
                continue
            apart = (plan.offsets[a] + plan.sizes[a] <= plan.offsets[b] or
                     plan.offsets[b] + plan.sizes[b] <= plan.offsets[a])
            if not apart:
                assert chain[a] == chain[b] and plan.offsets[a] == plan.offsets[b], (a, b)
                assert e1 == s2 or e2 == s1, "in-place values only meet at the handover"
    assert plan.lower_bound_bytes <= plan.planned_bytes <= plan.naive_bytes
    assert plan.planned_bytes == max((plan.offsets[n] + plan.sizes[n] for n in plan.intervals),
                                     default=0)


def run(G):
    _, res = checked_run(memory, G)
    plan = res.graph.graph["arena_layout"]
    check_plan(res.graph, plan)
    check_layout(res.graph, plan)
    return res.graph, plan, res.record


def test_elementwise_chain_runs_in_place():
    g = go.Graph("chain")
    x = g.input("x", (32, 32))
    a = go.exp(x)              # x is an input: never overwritten
    b = go.tanh(a)
    c = go.sin(b)
    g.output(c.sum())
    G = g.to_ir()
    H, plan, rec = run(G)
    n = {H.nodes[k]["op"]: k for k in H}
    assert plan.inplace == {n["tanh"]: n["exp"], n["sin"]: n["tanh"]}
    assert len({plan.offsets[k] for k in (n["exp"], n["tanh"], n["sin"])}) == 1
    assert rec["planned_bytes"] == rec["lower_bound_bytes"] == 32 * 32 * 8
    assert rec["naive_bytes"] == 3 * 32 * 32 * 8
    assert rec["inplace"] == [[n["tanh"], n["exp"]], [n["sin"], n["tanh"]]]


def test_no_inplace_on_inputs_outputs_or_live_operands():
    g = go.Graph("g")
    x = g.input("x", (16,))
    a = go.exp(x)
    b = go.tanh(a)             # a still used below: not in place
    c = b + a                  # both die here: one of them is reused
    g.output((c, go.exp(c)))   # c is an output: not in the arena
    H, plan, _ = run(g.to_ir())
    outs = set(H.graph["outputs"])
    assert not (set(plan.offsets) & (outs | set(H.graph["inputs"])))
    ops = {k: H.nodes[k]["op"] for k in H}
    tanh = next(k for k, o in ops.items() if o == "tanh")
    assert tanh not in plan.inplace
    assert not (set(plan.inplace) & outs) and not (set(plan.inplace.values()) & outs)


def test_different_sizes_are_not_reused_in_place():
    g = go.Graph("g")
    x = g.input("x", (4, 8))
    a = go.exp(x)
    r = go.real(go.exp(a.astype("complex128")))  # complex -> real halves the bytes
    g.output(r.sum())
    H, plan, _ = run(g.to_ir())
    for n, u in plan.inplace.items():
        assert ir.nbytes(H, n) == ir.nbytes(H, u)


def fused_node(G, operand, member_ops):
    """A hand-built ``elementwise`` fused node applying ``member_ops`` to ``operand``."""
    sub = ir.new_graph("sub")
    d = G.nodes[operand]
    cur = ir.add_node(sub, "input", [], d["shape"], d["dtype"], name="in0")
    sub.graph["inputs"] = [cur]
    for op, attrs in member_ops:
        cur = ir.add_op(sub, op, [cur], attrs)
    sub.graph["outputs"] = [cur]
    return ir.add_op(G, "fused", [operand], {"graph": sub, "pattern": "elementwise"})


@pytest.mark.parametrize("members,inplace", [
    ([("exp", {}), ("tanh", {})], True),
    ([("transpose", {"axes": (1, 0)}), ("exp", {})], False),  # reads out of order
])
def test_fused_groups_in_place_only_when_purely_elementwise(members, inplace):
    G = ir.new_graph("f")
    x = ir.add_node(G, "input", [], (8, 8), "float64", name="x")
    G.graph["inputs"] = [x]
    a = ir.add_op(G, "exp", [x])
    f = fused_node(G, a, members)
    G.graph["outputs"] = [ir.add_op(G, "sum", [f], {"axes": (0, 1), "keepdims": False})]
    ir.verify(G)
    _, plan, _ = run(G)
    assert (plan.inplace == {f: a}) is inplace


def test_assign_arena_offsets_best_fit_reuses_gaps():
    # a and c overlap in time and are big; b fits the hole after a dies; d needs new space.
    intervals = {1: (0, 2), 2: (3, 5), 3: (1, 4), 4: (4, 5)}
    sizes = {1: 1000, 2: 900, 3: 1000, 4: 100}
    offsets, arena = assign_arena_offsets(intervals, sizes, {})
    assert offsets[1] != offsets[3]
    assert offsets[2] == offsets[1]  # best fit: the freed 1000-byte slot
    assert all(o % ALIGN == 0 for o in offsets.values())
    assert arena == max(offsets[n] + sizes[n] for n in sizes)
    assert arena <= sum(align(s) for s in sizes.values())
    # Pairs live together never share bytes.
    for a in intervals:
        for b in intervals:
            (s1, e1), (s2, e2) = intervals[a], intervals[b]
            if a < b and s1 <= e2 and s2 <= e1:
                assert offsets[a] + sizes[a] <= offsets[b] or offsets[b] + sizes[b] <= offsets[a]


def test_assign_arena_offsets_inplace_shares_a_buffer():
    offsets, arena = assign_arena_offsets({1: (0, 1), 2: (1, 2)}, {1: 64, 2: 64}, {2: 1})
    assert offsets == {1: 0, 2: 0} and arena == 64


def test_find_inplace_requires_the_operand_to_die_there():
    g = go.Graph("g")
    x = g.input("x", (4,))
    a = go.exp(x)
    b = go.tanh(a)
    g.output((b * a).sum())
    G = g.to_ir()
    order = ir.topo_order(G)
    iv = liveness_intervals(G, order)
    found = find_inplace(G, order, iv, {n: ir.nbytes(G, n) for n in iv})
    b_id = next(n for n in G if G.nodes[n]["op"] == "tanh")
    assert b_id not in found


def test_numpy_backend_runs_the_planned_arena(rng):
    g = go.Graph("mlp")
    x = g.input("x", (16, 32))
    w = g.input("w", (32, 32))
    h = x
    for _ in range(4):
        h = go.tanh(go.einsum("bi,ij->bj", h, w)) * 0.5 + h
    g.output(h.sum(axis=1))
    plan = go.compile(g, backend="numpy", passes=["schedule", "memory"], cache=False)
    assert plan.memory.inplace and plan.memory.planned_bytes < plan.memory.naive_bytes
    check_plan(plan.graph, plan.memory)
    xa, wa = rng.standard_normal((16, 32)), rng.standard_normal((32, 32)) * 0.2
    want = interpret(g.to_ir(), xa, wa)
    for _ in range(2):  # the second call reuses the arena
        np.testing.assert_allclose(plan(xa, wa), want, rtol=1e-12)


def test_check_memory_plan_rejects_overlap():
    g = go.Graph("g")
    x = g.input("x", (16,))
    a, b = go.exp(x), go.sin(x)
    g.output((a * b).sum())
    H, plan, _ = run(g.to_ir())
    a_id, b_id = (next(n for n in H if H.nodes[n]["op"] == op) for op in ("exp", "sin"))
    assert plan.offsets[a_id] != plan.offsets[b_id]
    plan.offsets[b_id] = plan.offsets[a_id]
    with pytest.raises(GraphError, match="overlap"):
        check_layout(H, plan)


@pytest.mark.parametrize("longest", [3, 12, 30])
def test_best_fit_finds_overlaps_the_same_by_steps_in_python_and_in_numpy(longest, monkeypatch):
    # the overlap test goes by steps where intervals are short (STEP_SCAN_STEPS,
    # STEP_SCAN_BUFFERS_PER_STEP), else a Python scan below VECTOR_SCAN_BUFFERS and NumPy's
    # above: the same offsets every way, and no two overlapping intervals share a byte
    from graphopt.analysis import liveness
    rng = np.random.default_rng(7)
    intervals, sizes = {}, {}
    for n in range(400):
        a = int(rng.integers(0, 400))
        intervals[n] = (a, a + int(rng.integers(0, longest)))
        sizes[n] = int(rng.integers(0, 5000)) if n % 7 else 64 * int(rng.integers(1, 4))
    monkeypatch.setattr(liveness, "STEP_SCAN_STEPS", 0)
    monkeypatch.setattr(liveness, "STEP_SCAN_BUFFERS_PER_STEP", 10**9)
    monkeypatch.setattr(liveness, "VECTOR_SCAN_BUFFERS", 10**6)
    scanned = liveness.assign_arena_offsets(intervals, sizes)
    monkeypatch.setattr(liveness, "VECTOR_SCAN_BUFFERS", 0)
    assert liveness.assign_arena_offsets(intervals, sizes) == scanned
    monkeypatch.setattr(liveness, "STEP_SCAN_STEPS", 10**6)
    assert liveness.assign_arena_offsets(intervals, sizes) == scanned
    offsets, arena = scanned
    for u in intervals:
        for v in intervals:
            if u < v and sizes[u] and sizes[v] and intervals[u][0] <= intervals[v][1] \
                    and intervals[v][0] <= intervals[u][1]:
                assert offsets[u] + sizes[u] <= offsets[v] or offsets[v] + sizes[v] <= offsets[u]
    assert arena >= max(offsets[n] + sizes[n] for n in sizes)


@pytest.mark.parametrize("opt_level", [0, 1, 2])
def test_every_level_s_memory_plan_passes_the_memory_check(opt_level):
    # below opt_level 2 lowering plans every value its own buffer (``naive_layout``):
    # its naive count is the memory pass's (aligned buffers), so naive >= planned holds too
    g = go.Graph("small")
    x = g.input("x", (3,), "float64")
    g.output(go.exp(x * 2.0 + 1.0).sum())
    plan = go.compile(g, backend="numpy", opt_level=opt_level, cache=False)
    check_layout(plan.graph, plan.memory)
    assert plan.memory.naive_bytes >= plan.memory.planned_bytes >= \
        plan.memory.lower_bound_bytes
    assert plan.memory.naive_bytes % ALIGN == 0
