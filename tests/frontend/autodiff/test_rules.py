"""Every op's VJP rule against float64 finite differences (``assert_grad_correct``), and
complex ones against ``jax.grad``'s convention where JAX is installed."""

import numpy as np
import pytest

import graphopt as go
from graphopt.frontend.autodiff.rules import NON_DIFFERENTIABLE, VJP_RULES
from graphopt.ir import ops
from graphopt.testing import assert_grad_correct


def _graph(build, shapes, dtype="float64"):
    g = go.Graph("rule")
    xs = [g.input(f"x{i}", s, dtype) for i, s in enumerate(shapes)]
    g.output(build(*xs))
    return g


def test_every_op_has_a_rule_or_is_declared_non_differentiable():
    leaves = {"input", "const", "fused"}
    missing = set(ops.OPS) - leaves - set(VJP_RULES) - NON_DIFFERENTIABLE
    assert not missing, f"ops without a VJP rule: {sorted(missing)}"


# (name, build, input shapes): positive inputs where the op needs them
CASES = [
    ("neg", lambda a: -a, [(3, 4)]),
    ("abs", lambda a: abs(a), [(3, 4)]),
    ("exp", go.exp, [(3, 4)]),
    ("log", lambda a: go.log(a * a + 0.5), [(3, 4)]),
    ("sqrt", lambda a: go.sqrt(a * a + 0.5), [(3, 4)]),
    ("tanh", go.tanh, [(3, 4)]),
    ("sigmoid", go.sigmoid, [(3, 4)]),
    ("relu", go.relu, [(3, 4)]),
    ("gelu", go.gelu, [(3, 4)]),
    ("sin", go.sin, [(3, 4)]),
    ("cos", go.cos, [(3, 4)]),
    ("square", go.square, [(3, 4)]),
    ("reciprocal", lambda a: go.reciprocal(a * a + 0.5), [(3, 4)]),
    ("add", lambda a, b: a + b, [(3, 4), (4,)]),
    ("sub", lambda a, b: a - b, [(3, 1), (1, 4)]),
    ("mul", lambda a, b: a * b, [(2, 3, 4), (3, 1)]),
    ("mul_self", lambda a: a * a, [(3, 4)]),
    ("div", lambda a, b: a / (b * b + 0.5), [(3, 4), (4,)]),
    ("pow", lambda a, b: (a * a + 0.5) ** b, [(3, 4), (4,)]),
    ("pow_const", lambda a: a ** 3, [(3, 4)]),
    ("maximum", go.maximum, [(3, 4), (4,)]),
    ("minimum", go.minimum, [(3, 4), (3, 1)]),
    ("where", lambda a, b: go.where(a > b, a * 2, b), [(3, 4), (4,)]),
    ("astype", lambda a: go.astype(a, "float32") * 2, [(3, 4)]),
    ("sum", lambda a: a.sum(axis=1), [(3, 4)]),
    ("sum_keepdims", lambda a: a.sum(axis=(0, 2), keepdims=True), [(2, 3, 4)]),
    ("mean", lambda a: a.mean(axis=0), [(3, 4)]),
    ("max", lambda a: a.max(axis=1), [(3, 4)]),
    ("min_all", lambda a: a.min(), [(3, 4)]),
    ("reshape", lambda a: a.reshape(4, 3) * np.arange(12.0).reshape(4, 3), [(3, 4)]),
    ("transpose", lambda a: a.transpose(2, 0, 1) * np.arange(24.0).reshape(4, 2, 3),
     [(2, 3, 4)]),
    ("broadcast_to", lambda a: go.broadcast_to(a, (2, 3, 4)) * np.arange(24.0).reshape(2, 3, 4),
     [(3, 1)]),
    ("slice", lambda a: a[1:, ::2] * 3.0, [(3, 4)]),
    ("softmax", lambda a: go.softmax(a, axis=-1) * np.arange(4.0), [(3, 4)]),
    ("logsumexp", lambda a: go.logsumexp(a, axis=1), [(3, 4)]),
    ("var", lambda a: go.var(a, axis=0), [(3, 4)]),
]


@pytest.mark.parametrize("name,build,shapes", CASES, ids=[c[0] for c in CASES])
def test_rule_matches_finite_differences(name, build, shapes):
    assert_grad_correct(_graph(build, shapes), backends=("numpy",), opt_levels=(0,))


@pytest.mark.parametrize("name,build,shapes", CASES[::3], ids=[c[0] for c in CASES[::3]])
def test_rule_matches_finite_differences_in_float32_on_numba(name, build, shapes):
    pytest.importorskip("numba")
    assert_grad_correct(_graph(build, shapes, "float32"), backends=("numba",),
                        opt_levels=(2,))


def test_comparisons_pass_no_gradient():
    g = _graph(lambda a: go.where(a > 0, 1.0, 2.0) * (a < 1).astype("float64"), [(5,)])
    grads = assert_grad_correct(g)
    assert np.array_equal(grads["x0"], np.zeros(5))


def test_ties_split_the_cotangent_as_jax():
    g = go.Graph("ties")
    a, b = g.input("a", (3,)), g.input("b", (3,))
    x = g.input("x", (2, 3))
    g.output({"m": (go.maximum(a, b) + x.max(axis=0) + go.relu(a)).sum()})
    plan = go.compile(go.grad(g, of="m"), backend="numpy")
    _, d = plan(a=np.array([1.0, 2.0, 0.0]), b=np.array([1.0, 0.0, 3.0]),
                x=np.array([[5.0, 1.0, 2.0], [5.0, 0.0, 2.0]]))
    # maximum's share [0.5, 1, 0] plus relu' [1, 1, 0] (relu'(0) = 0)
    assert np.array_equal(d["a"], [1.5, 2.0, 0.0])
    assert np.array_equal(d["b"], [0.5, 0.0, 1.0])
    assert np.array_equal(d["x"], [[0.5, 1.0, 0.5], [0.5, 0.0, 0.5]])
    # abs'(0) = 0, and a NaN from maximum passes nothing back
    g2 = go.Graph("kinks")
    a = g2.input("a", (3,))
    g2.output((abs(a) + go.maximum(a, np.nan)).sum())
    _, d2 = go.compile(go.grad(g2), backend="numpy")(a=np.array([0.0, -2.0, 3.0]))
    assert np.array_equal(d2["a"], [0.0, -1.0, 1.0])


COMPLEX = [
    ("holomorphic", lambda z: go.real(go.exp(z) * go.sin(z) / (z * z + 2)).sum(),
     lambda jnp, z: jnp.real(jnp.exp(z) * jnp.sin(z) / (z * z + 2)).sum()),
    ("abs", lambda z: (abs(z) ** 3).sum(), lambda jnp, z: (jnp.abs(z) ** 3).sum()),
    ("conj_imag", lambda z: (go.imag(z * go.conj(z) + z) + go.real(go.conj(z) * 2j)).sum(),
     lambda jnp, z: (jnp.imag(z * jnp.conj(z) + z) + jnp.real(jnp.conj(z) * 2j)).sum()),
    ("einsum", lambda z: go.real(go.einsum("ij,jk,ki->", z, go.conj(z), z)),
     lambda jnp, z: jnp.real(jnp.einsum("ij,jk,ki->", z, jnp.conj(z), z))),
    ("tanh_sqrt", lambda z: abs(go.tanh(z) + go.sqrt(z)).sum(),
     lambda jnp, z: jnp.abs(jnp.tanh(z) + jnp.sqrt(z)).sum()),
]


@pytest.mark.parametrize("name,f,fj", COMPLEX, ids=[c[0] for c in COMPLEX])
def test_complex_gradients_follow_jax(name, f, fj, rng):
    z = rng.normal(size=(3, 3)) + 1j * rng.normal(size=(3, 3))
    g = _graph(f, [(3, 3)], "complex128")
    grads = assert_grad_correct(g, inputs={"x0": z})
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    want = jax.grad(lambda z: fj(jax.numpy, z))(z)
    np.testing.assert_allclose(grads["x0"], np.asarray(want), rtol=1e-10, atol=1e-12)


def test_complex_intermediate_of_real_inputs_gives_real_gradients(rng):
    g = go.Graph("c")
    x = g.input("x", (4,))
    w = g.const(np.exp(1j * np.arange(4.0)))
    g.output(abs(go.einsum("i,i->", x * w, x)))
    grads = assert_grad_correct(g)
    assert grads["x"].dtype == np.float64
