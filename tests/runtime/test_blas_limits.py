"""BLAS's thread count as graphopt changes it (graphopt/runtime/blas_limits.py): the libraries are
listed once, and the user's own counts come back (the calls that change them are
tests/test_threads.py's)."""

import sys

import numpy as np

import graphopt as go
from graphopt.runtime import blas_limits, threads


def test_blas_is_listed_once_whatever_is_imported_later(monkeypatch):
    """A listing costs milliseconds, and graphopt calls no BLAS but NumPy's (loaded before
    graphopt): a module imported later, extension or not, brings no new listing."""
    import types

    import threadpoolctl

    first = blas_limits.controllers()
    listed = []

    class Counting(threadpoolctl.ThreadpoolController):
        def __init__(self):
            listed.append(1)
            super().__init__()
    monkeypatch.setattr(threadpoolctl, "ThreadpoolController", Counting)
    for name, file in (("graphopt_test_pure", "/nowhere/graphopt_test_pure.py"),
                       ("graphopt_test_ext", "/nowhere/graphopt_test_ext.cpython-311.so")):
        mod = types.ModuleType(name)
        mod.__file__ = file
        monkeypatch.setitem(sys.modules, name, mod)
        assert blas_limits.controllers() is first
    g = go.Graph("gemm")
    a, b = g.input("a", (256, 128), "float64"), g.input("b", (128, 512), "float64")
    g.output(go.einsum("ij,jk->ik", a, b))
    r = np.random.default_rng(0)
    x, y = r.standard_normal((256, 128)), r.standard_normal((128, 512))
    np.testing.assert_allclose(go.compile(g, threads=2)(a=x, b=y), x @ y, rtol=1e-12,
                               atol=1e-12)
    assert not listed and blas_limits.controllers() is first
    assert any("blas" == lib.user_api for lib in first)   # NumPy's BLAS is among them


def test_the_users_counts_come_back_after_graphopt_set_its_own():
    libs = blas_limits.controllers()
    before = [lib.get_num_threads() for lib in libs]
    with threads._lock:
        blas_limits.set_threads(1)
        assert blas_limits.set_to() == 1 and all(lib.get_num_threads() == 1 for lib in libs)
        blas_limits.set_threads(1)                  # already set: nothing to do
        blas_limits.restore_user()
    assert blas_limits.set_to() is None
    assert [lib.get_num_threads() for lib in libs] == before
