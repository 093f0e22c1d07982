"""The einsum VJP on equations nobody here wrote (opt_einsum's own test list: repeated
labels, diagonals, traces, implicit outputs, outer products) and on NumPy's forms
(ellipsis, size-1 broadcasting, interleaved), against float64 finite differences."""

import numpy as np
import pytest
from opt_einsum.testing import build_views
from opt_einsum.tests.test_contract import tests as OPT_EINSUM_EQUATIONS

import graphopt as go
from graphopt.frontend.autodiff.einsum_vjp import _diagonal_mask
from graphopt.testing import assert_grad_correct


def _einsum_graph(eq, shapes, dtype="float64"):
    g = go.Graph("einsum")
    ts = [g.input(f"x{i}", s, dtype) for i, s in enumerate(shapes)]
    g.output(go.einsum(eq, *ts))
    return g


@pytest.mark.parametrize("eq", OPT_EINSUM_EQUATIONS)
def test_opt_einsum_equations(eq):
    shapes = [np.shape(v) for v in build_views(eq)]
    assert_grad_correct(_einsum_graph(eq, shapes), opt_levels=(0, 2), directions=2)


@pytest.mark.parametrize("eq,shapes", [
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("i...", [(2, 3, 4)]),
    ("ij,ij->ij", [(1, 3), (2, 3)]),          # a size-1 label broadcasts
    ("...,...->...", [(2, 3), (3,)]),
    ("ii", [(4, 4)]),
    ("iij->ij", [(2, 2, 3)]),
    ("iii->", [(3, 3, 3)]),
    ("ijij->ij", [(2, 3, 2, 3)]),
])
def test_numpy_forms(eq, shapes):
    assert_grad_correct(_einsum_graph(eq, shapes), opt_levels=(0, 2))


def test_interleaved_form_and_complex_operands(rng):
    g = go.Graph("interleaved")
    a, b = g.input("a", (3, 4), "complex128"), g.input("b", (4, 2), "complex128")
    g.output(go.einsum(a, [0, 1], b, [1, 2], [0, 2]))
    assert_grad_correct(g)


def test_diagonal_cotangent_is_zero_off_the_diagonal_even_for_infinite_cotangents():
    g = go.Graph("diag")
    a = g.input("a", (3, 3))
    g.output(go.einsum("ii->i", a))
    h = go.vjp(g)
    _, d = go.compile(h, backend="numpy")(a=np.ones((3, 3)), ct=np.array([np.inf, 1.0, 2.0]))
    assert np.array_equal(d["a"], np.diag([np.inf, 1.0, 2.0]))   # no 0 * inf = NaN


def test_diagonal_mask():
    m = _diagonal_mask("iji", (3, 2, 3))
    assert m.shape == (3, 1, 3)
    assert np.array_equal(m[:, 0, :], np.eye(3, dtype=bool))
    assert _diagonal_mask("ij", (2, 3)).shape == (1, 1)


def test_many_operand_contraction_gradient_goes_through_path_search(rng):
    """A 20-operand MPS norm: the einsum is split along its path before differentiating,
    so the backward pass shares the steps' intermediates and costs about twice the forward
    (as a whole einsum per operand it would cost about 20 forwards)."""
    n, d, chi = 10, 2, 3
    g = go.Graph("chain")
    ts, terms, syms = [], [], iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    bonds = [next(syms) for _ in range(n - 1)]
    phys = [next(syms) for _ in range(n)]
    for i in range(n):
        left = bonds[i - 1] if i else ""
        right = bonds[i] if i < n - 1 else ""
        shape = tuple(x for x in ((chi,) if left else ()) + (d,) + ((chi,) if right else ()))
        ts.append(g.input(f"t{i}", shape))
        terms.append(left + phys[i] + right)
    norm = go.einsum(",".join(terms) + "," + ",".join(terms) + "->", *ts, *ts)
    g.output(norm)
    grads = assert_grad_correct(g, opt_levels=(2,), directions=1)
    assert set(grads) == {f"t{i}" for i in range(n)}
    facts = go.compile(go.grad(g), backend="numpy").report.gradient
    assert facts["backward_flops"] <= 3 * facts["forward_flops"], facts
