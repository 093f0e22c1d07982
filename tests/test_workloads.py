"""The shared workloads (graphopt/workloads.py): each graph, compiled on the reference
backend, matches its NumPy reference, which computes in float64/complex128 without einsum
paths (transfer matrices for the MPS ring, right-to-left products for the chain)."""

import numpy as np
import pytest

import graphopt as go
from graphopt import workloads

SMALL = {"mlp": {"batch": 16, "d_in": 32, "d_hidden": 64},
         "attention": {"batch": 2, "heads": 2, "seq": 16, "dim": 8},
         "chain": {"n": 32, "k": 4}, "mps_ring": {"sites": 5, "bond": 3},
         "elementwise": {"n": 1000}, "redundant": {"n": 24}, "small": {"n": 16}}


@pytest.mark.parametrize("name", sorted(workloads.ALL))
def test_each_graph_matches_its_float64_reference(name):
    w = workloads.ALL[name](**SMALL[name])
    got = go.compile(w.build(), backend="numpy", opt_level=0)(**w.inputs)
    want = w.reference(**w.inputs)
    assert want.dtype in (np.float64, np.complex128) and got.shape == want.shape
    scale = max(float(np.max(np.abs(want))), 1e-300)
    assert float(np.max(np.abs(got - want))) / scale <= w.rtol, name


def test_a_seed_gives_other_inputs_and_the_same_graph():
    a, b = workloads.mlp(8, 8, 8), workloads.mlp(8, 8, 8, seed=99)
    assert not np.array_equal(a.inputs["x"], b.inputs["x"])
    assert go.ir.structural_hash(a.build().to_ir()) == go.ir.structural_hash(b.build().to_ir())
    np.testing.assert_array_equal(a.inputs["w1"], workloads.mlp(8, 8, 8).inputs["w1"])


def test_the_mps_ring_uses_more_labels_than_letters():
    eq = workloads.mps_ring_equation(20)
    labels = set(eq.replace(",", "").replace("->", ""))
    assert len(labels) == 60 and not all(c.isascii() for c in labels)
