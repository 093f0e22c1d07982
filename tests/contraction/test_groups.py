"""Einsum groups (einsum_groups.py): which nodes form one contraction, and its equation."""

import opt_einsum
import pytest

import graphopt as go
from graphopt.contraction.groups import _substituted, contraction_only, find_groups, merge
from graphopt.contraction.paths import play


def test_not_merged_outputs_shared_mixed_dtype():
    g = go.Graph("blocked")
    A, B = g.input("A", (5, 5)), g.input("B", (5, 5))
    F = g.input("F", (5, 5), "float32")
    shared = A @ B                       # two users
    out = A @ A                          # a graph output
    mixed = F @ F                        # float32 into a float64 einsum
    g.output((shared @ B, shared @ A, out @ B, out, mixed @ A))
    groups = find_groups(g.to_ir())
    assert all(len(gr) == 1 for gr in groups)


def test_merge_and_play_agree_with_opt_einsum():
    g = go.Graph("bad_chain")
    A, B, C = (g.input(k, (7, 7)) for k in "ABC")
    g.output(go.einsum("ij,j->i", (A @ B) @ C, g.input("v", (7,))))
    G = g.to_ir()
    (group,) = find_groups(G)
    m = merge(G, group)
    path, info = opt_einsum.contract_path(m.equation, *(G.nodes[u]["shape"] for u in m.operands),
                                          shapes=True, optimize="optimal")
    assert play(m.terms, m.output, m.sizes, path).flops == info.opt_cost


@pytest.mark.parametrize("eq, shapes", [
    ("xy,yz,zw->xw", [(2, 3), (3, 4), (4, 5)]),
    ("ij,jk,kl->", [(2, 3), (3, 4), (4, 2)]),
    ("iij,jk,k->ik", [(3, 3, 4), (4, 5), (5,)]),      # a diagonal
    ("ba,cb,dc->ad", [(3, 2), (4, 3), (2, 4)]),       # labels not in first-use order
    ("i,j,k->kji", [(2,), (3,), (4,)]),               # an outer product, output permuted
])
def test_merging_one_einsum_is_the_general_substitution(eq, shapes):
    # ``merge`` takes a lone einsum's own equation (tensor networks: hundreds of operands);
    # it must be what substituting the group's equations gives, up to the labels' names
    from graphopt.ir.einsum import first_use_equation
    g = go.Graph("one")
    g.output(go.einsum(eq, *[g.input(f"x{i}", s) for i, s in enumerate(shapes)]))
    G = g.to_ir()
    (group,) = find_groups(G)
    fast, general = merge(G, group), _substituted(G, group)
    assert fast.equation == G.nodes[group[0]]["attrs"]["equation"]
    assert fast.operands == general.operands
    assert first_use_equation(fast.terms, fast.output) == \
        first_use_equation(general.terms, general.output)
    rename = dict(zip("".join(fast.terms), "".join(general.terms)))
    assert {rename[c]: d for c, d in fast.sizes.items()} == general.sizes


def test_a_tensor_network_is_one_contraction_only_of_its_inputs():
    g = go.Graph("net")
    x, y, z = (g.input(k, (2, 2)) for k in "xyz")
    g.output(go.einsum("ab,bc,cd->ad", x, y, z))
    assert contraction_only(g.to_ir())
    h = go.Graph("two")
    x, y, z = (h.input(k, (2, 2)) for k in "xyz")
    h.output(go.einsum("ab,bc,cd->ad", x, y, z) + 1.0)     # something else computed too
    assert not contraction_only(h.to_ir())
    k = go.Graph("pair")
    x, y = (k.input(k_, (2, 2)) for k_ in "xy")
    k.output(go.einsum("ab,bc->ac", x, y))                  # a pair of inputs is one too
    assert contraction_only(k.to_ir())
    one = go.Graph("one")
    one.output(go.einsum("ab->ba", one.input("x", (2, 3))))  # simplify makes it a transpose
    assert not contraction_only(one.to_ir())
