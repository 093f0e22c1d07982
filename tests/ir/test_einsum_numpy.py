"""Running IR einsums on NumPy (``graphopt.einsum_numpy``): ASCII equations, NumPy's C
einsum called directly, promotion, and the reference evaluation of many operands."""

import itertools

import numpy as np
import pytest
from opt_einsum.parser import get_symbol

import graphopt as go
from graphopt.ir.einsum_numpy import evaluate, plain_einsum, promote_operands, to_ascii


def test_plain_einsum_is_numpy_einsum():
    """``plain_einsum`` (NumPy's C einsum, called directly) computes what np.einsum does:
    the promoted dtype, into ``out``, a scalar result."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(3, 4)), rng.integers(-3, 3, size=(4, 5)).astype(np.int8)
    np.testing.assert_array_equal(plain_einsum("ab,bc->ac", [a, b]),
                                  np.einsum("ab,bc->ac", a, b))
    out = np.empty((3, 5))
    assert plain_einsum("ab,bc->ac", [a, b], out) is out
    np.testing.assert_array_equal(out, np.einsum("ab,bc->ac", a, b))
    assert plain_einsum("ab->", [np.array([[True, False]])]) == \
        np.einsum("ab->", [[True, False]])


def test_to_ascii_renames_other_labels_in_order_of_first_use():
    """An ASCII-letter equation is returned as it is; one with other labels gets the
    letters in order of first use, and the same einsum."""
    assert to_ascii("ab,bc->ac") == "ab,bc->ac"
    eq = "αβ,β×->α×"
    assert to_ascii(eq) == "ab,bc->ac"
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(2, 3)), rng.normal(size=(3, 4))
    np.testing.assert_allclose(evaluate(eq, [x, y]), x @ y, rtol=1e-12)


def test_single_step_with_more_than_52_labels_cannot_run_on_numpy():
    labels = "".join(get_symbol(i) for i in range(53))
    with pytest.raises(go.EinsumError, match="52 at most"):
        to_ascii(labels + "->" + labels[:1])


def test_promote_operands_to_the_result_dtype_without_copying_those_in_it():
    """Every operand in NumPy's promotion of all of them: two bool operands with a float
    one are summed as numbers, not as logical or."""
    a = np.array([[True, True]])
    b = np.array([[True], [True]])
    c = np.array([[2.0]])
    got = promote_operands([a, b, c])
    assert [x.dtype for x in got] == [np.float64] * 3
    assert got[2] is c
    assert evaluate("ij,jk,kl->il", [a, b, c])[0, 0] == 4.0
    same = [np.ones(2), np.zeros(2)]
    assert all(x is y for x, y in zip(promote_operands(same), same))


def test_evaluate_many_operands_against_numpy():
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(s) for s in [(2, 3), (3, 4), (4, 2)]]
    for order in itertools.permutations(range(3)):
        terms = ["ab", "bc", "ca"]
        eq = ",".join(terms[i] for i in order) + "->"
        np.testing.assert_allclose(evaluate(eq, [arrays[i] for i in order]),
                                   np.einsum("ab,bc,ca->", *arrays), rtol=1e-12)
