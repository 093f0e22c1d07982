"""Eager mode (``go.disable_jit``, ``$GRAPHOPT_DISABLE_JIT``): a jitted function runs op by
op on real arrays and gives what its compiled plan gives."""

import numpy as np
import pytest

import graphopt as go


def attention(q, k, v):
    s = np.einsum("bqd,bkd->bqk", q, k) / np.sqrt(q.shape[-1])
    return go.softmax(s, axis=-1) @ v, s.var(axis=-1)


def test_eager_equals_compiled(rng):
    f = go.jit(attention)
    q, k, v = (rng.random((2, 4, 8)) for _ in range(3))
    compiled = f(q, k, v)
    with go.disable_jit():
        eager = f(q, k, v)
    assert len(f.plans) == 1            # the eager call compiled nothing
    for c, e in zip(compiled, eager):
        assert type(e) is np.ndarray and e.dtype == c.dtype
        np.testing.assert_allclose(e, c, rtol=1e-12)


def test_eager_runs_python_control_flow_and_prints(rng, capsys):
    @go.jit
    def f(x):
        y = go.exp(x)
        print("max", float(y.max()))           # a traced Tensor could not do this
        return y if y.max() > 1 else -y

    x = rng.random(3)
    with go.disable_jit():
        np.testing.assert_allclose(f(x), np.exp(x))
    assert "max" in capsys.readouterr().out
    with pytest.raises(go.GraphError, match="no value while a graph is built"):
        f(x)


def test_eager_ops_check_shapes_as_tracing_does():
    with go.disable_jit():
        with pytest.raises(go.EinsumError, match="label .j. has size 3 and 4"):
            go.einsum("ij,jk->ik", np.ones((2, 3)), np.ones((4, 5)))


def test_eager_results_never_alias_arguments(rng):
    x = rng.random((3, 4))
    keep = x.copy()
    with go.disable_jit():
        y = go.reshape(x, (4, 3))
        z = go.transpose(x)
        b = go.broadcast_to(x, (2, 3, 4))
    for r in (y, z, b):
        r[...] = 0
        assert r.flags.writeable
    np.testing.assert_array_equal(x, keep)


def test_environment_variable_and_its_validation(rng, monkeypatch):
    from graphopt.frontend import eager

    f = go.jit(lambda x: go.tanh(x) * 2)
    x = rng.random(5)

    def process_with(value):       # the variable is read once per process
        monkeypatch.setenv("GRAPHOPT_DISABLE_JIT", value)
        monkeypatch.setattr(eager, "_from_env", None)

    process_with("1")
    np.testing.assert_allclose(f(x), np.tanh(x) * 2)
    assert len(f.plans) == 0
    process_with("true")
    with pytest.raises(go.GraphError, match="GRAPHOPT_DISABLE_JIT must be 0 or 1"):
        f(x)
    process_with("0")
    np.testing.assert_allclose(f(x), np.tanh(x) * 2)
    assert len(f.plans) == 1


def test_eager_returns_the_structure_with_arrays(rng):
    f = go.jit(lambda x: {"s": go.sum(x), "pair": (x[0], np.float64(2.0))})
    x = rng.random(3)
    with go.disable_jit():
        out = f(x)
    assert isinstance(out["s"], np.ndarray) and out["s"].shape == ()
    assert isinstance(out["pair"], tuple) and out["pair"][1].shape == ()


@pytest.mark.parametrize("convert", [float, int, complex])
def test_a_traced_value_has_no_python_number(convert):
    g = go.Graph("t")
    x = g.input("x", ())
    with pytest.raises(go.GraphError, match="no value while a graph is built.*disable_jit"):
        convert(x)
