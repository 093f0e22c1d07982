"""Generated numba kernels follow NumPy's semantics in every form timing can choose (the
generated loop with fast math on and off, the NumPy-blocked form): regression tests for the
defects an independent fuzzer found (ISSUE 12: 1, 2, 4-11, 13, 14)."""

import importlib.util
import math
import warnings

import numpy as np
import pytest

import graphopt as go
from graphopt.backends.numba import codegen as cg

pytest.importorskip("numba")

# Every form a fused group can run as: (compile options, name).
FORMS = [({}, "loop, fast math"), ({"fast_math": False}, "loop, exact"),
         ({"kernel_forms": {"fused": "numpy-blocked"}}, "NumPy-blocked"),
         ({"fast_math": False, "kernel_forms": {"fused": "numpy-blocked"}},
          "NumPy-blocked, exact")]
FORM_IDS = [name for _, name in FORMS]


def run(g, form, **inputs):
    plan = go.compile(g, backend="numba", cache=False, **form)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan(**inputs), plan


def reference(g, **inputs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return go.compile(g, backend="numpy", cache=False)(**inputs)


@pytest.mark.parametrize("form", [f for f, _ in FORMS], ids=FORM_IDS)
def test_real_of_an_expression_in_every_form(form):          # defect 1
    n = 1 << 19
    g = go.Graph()
    x = g.input("x", (n,), "float64")
    g.output(go.real(go.tanh(x) * go.exp(x)) + go.imag(x))
    a = np.linspace(-3, 3, n)
    got, plan = run(g, form, x=a)
    np.testing.assert_allclose(got, np.tanh(a) * np.exp(a), rtol=1e-13, atol=1e-15)
    if "kernel_forms" in form:
        assert plan.kernels[0].impl == "numpy-blocked"


@pytest.mark.parametrize("form", [f for f, _ in FORMS], ids=FORM_IDS)
@pytest.mark.parametrize("act", ["gelu", "sigmoid", "where"])
def test_contraction_epilogues_in_every_form(form, act):        # defect 2
    rng = np.random.default_rng(0)
    g = go.Graph()
    x = g.input("x", (512, 256), "float32")
    w = g.input("w", (256, 64), "float32")
    h = go.einsum("ij,jk->ik", x, w)
    g.output(go.where(h, h * 2.0, h - 1.0) if act == "where" else getattr(go, act)(h))
    xa = rng.standard_normal((512, 256)).astype(np.float32)
    wa = rng.standard_normal((256, 64)).astype(np.float32)
    got, plan = run(g, form, x=xa, w=wa)
    np.testing.assert_allclose(got, reference(g, x=xa, w=wa), rtol=2e-5, atol=2e-5)
    if "kernel_forms" in form:
        assert "numpy-blocked" in plan.kernels[0].impl


def test_no_fma_contraction_x_squared_minus_y_squared():      # defect 4
    g = go.Graph()
    x = g.input("x", (4096,), "float64")
    y = g.input("y", (4096,), "float64")
    g.output(go.sqrt(x * x - y * y))
    a = np.random.default_rng(1).standard_normal(4096) * 1.2345
    for form, _ in FORMS:
        got, plan = run(g, form, x=a, y=a.copy())
        assert (got == 0).all(), plan.kernels[0].source
        assert "fastmath" not in plan.kernels[0].source


def test_float32_sums_never_overflow_where_the_sum_is_finite():   # defect 5
    # alternating +-3e38: partial sums kept in float32 lanes overflow to +-inf and the total
    # becomes nan (NumPy's own float32 pairwise sum does); the exact sum is 1.15e30.
    # Generated kernels accumulate float32 in float64.
    n = 1 << 16
    a = np.empty(n, np.float32)
    a[0::2], a[1::2] = 3e38, -3e38
    a[:1000] += np.float32(1.15e27)
    expect = np.sum(a.astype(np.float64))
    for build in (lambda x: go.sum(x * 0.5) * 2, lambda x: go.mean(go.abs(x) - 3e38) + 3e38,
                  lambda x: go.sum(go.reshape(x, (64, 1024)) * 0.5, axis=1).sum(),
                  lambda x: go.logsumexp(go.reshape(x, (64, 1024)) * 1e-38, axis=1).sum()):
        g = go.Graph()
        x = g.input("x", (n,), "float32")
        g.output(build(x))
        for form, _ in FORMS[:2]:
            got, plan = run(g, form, x=a)
            assert np.isfinite(got).all(), [k.source for k in plan.kernels]
    g = go.Graph()
    x = g.input("x", (n,), "float32")
    g.output(go.sum(x * 0.5) * 2)
    for form, _ in FORMS[:2]:
        assert run(g, form, x=a)[0] == pytest.approx(expect, rel=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [4, 1 << 16, 1 << 19])
def test_sigmoid_and_gelu_keep_the_negative_tail_at_every_size(dtype, n):   # defect 6
    """Against mpmath, every form within numba_math's documented bound (the reference
    computes float32 in float64 and float64 in long double: gelu's tail is x e**w, and w
    rounded in float64 is |w| ulp off)."""
    import mpmath

    from graphopt.backends.numba.numerics import BOUNDS

    mpmath.mp.prec = 120
    x = np.linspace(-80 if dtype == "float64" else -20, -5.3, n).astype(dtype)
    pick = np.unique(np.linspace(0, n - 1, 6).astype(int))
    c, k = mpmath.sqrt(2 / mpmath.pi), mpmath.mpf("0.044715")
    for op in ("sigmoid", "gelu"):
        g = go.Graph()
        t = g.input("x", (n,), dtype)
        g.output(getattr(go, op)(t))
        exact = []
        for v in x[pick]:
            v = mpmath.mpf(float(v))
            wv = v if op == "sigmoid" else 2 * c * (v + k * v ** 3)
            exact.append(float((1 if op == "sigmoid" else v) / (1 + mpmath.exp(-wv))))
        exact = np.array(exact)
        ulp = np.spacing(np.abs(exact).astype(dtype)).astype(np.float64)
        bound = BOUNDS[(op, dtype)]
        fast = bound.ulp * ulp + bound.abs + float(np.finfo(dtype).smallest_subnormal)
        results = [(reference(g, x=x), fast, "reference")] + \
            [(run(g, f, x=x)[0], fast, name) for f, name in FORMS]
        for got, allowed, name in results:
            err = np.abs(got[pick].astype(np.float64) - exact)
            assert (err <= allowed).all(), (op, name, got[pick], exact, err / ulp)


def test_gelu_float64_tail_is_within_its_bound_of_the_exact_constants_function():
    """The far negative tail (down to underflow), densely, on every host form and dask:
    gelu is the function of the real numbers sqrt(2/pi) and 0.044715. A reading against
    those constants rounded to float64 first (as JAX's and PyTorch's gelu compute) differs
    by |w| 2**-53 relative, 100-200 ulp where w nears -745: the constants, not the
    arithmetic."""
    import mpmath

    from graphopt.backends.numba.numerics import BOUNDS

    mpmath.mp.prec = 160
    x = np.linspace(-21.0, -2.0, 1901)
    c, k = mpmath.sqrt(2 / mpmath.pi), mpmath.mpf("0.044715")
    exact = np.array([float(v / (1 + mpmath.exp(-2 * c * (v + k * v ** 3))))
                      for v in map(mpmath.mpf, x.tolist())])
    bound = BOUNDS[("gelu", "float64")]
    allowed = bound.ulp * np.spacing(np.abs(exact)) + bound.abs + 5e-324
    g = go.Graph()
    g.output(go.gelu(g.input("x", x.shape, "float64")))
    results = [(reference(g, x=x), "reference")] + [(run(g, f, x=x)[0], n) for f, n in FORMS]
    if importlib.util.find_spec("distributed"):
        results.append((go.compile(g, backend="dask", cache=False)(x=x), "dask"))
    for got, name in results:
        err = np.abs(got - exact)
        assert (err <= allowed).all(), (name, x[np.argmax(err / allowed)])


def test_integer_to_a_negative_integer_power_raises_as_numpy_does():   # defect 7
    g = go.Graph()
    x = g.input("x", (8,), "int64")
    y = g.input("y", (8,), "int64")
    g.output(go.exp(go.astype(x ** y, "float64")))
    args = dict(x=np.arange(8), y=np.array([1, 2, 3, -1, 0, 1, 2, 3]))
    for form, _ in FORMS:
        with pytest.raises(go.GraphError, match="negative integer powers.*pow|pow.*negative"):
            run(g, form, **args)
    with pytest.raises(go.GraphError, match="negative integer powers"):
        reference(g, **args)
    args["y"] = np.abs(args["y"])
    np.testing.assert_allclose(run(g, {}, **args)[0], np.exp(np.arange(8.0) ** args["y"]))


def test_complex_zero_to_a_power_and_division_by_zero():        # defects 8, 13
    g = go.Graph()
    a = g.input("a", (6,), "complex128")
    b = g.input("b", (6,), "complex128")
    g.output(go.exp(a ** b) + a / b + go.reciprocal(b))
    av = np.array([0, 0, 0, 1 + 1j, 0, 2], complex)
    bv = np.array([1 + 1j, 2, 3j, 0, 0, 0.5j], complex)
    want = reference(g, a=av, b=bv)
    for form, _ in FORMS:
        got, _ = run(g, form, a=av, b=bv)
        np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want))
        np.testing.assert_allclose(got[np.isfinite(want)], want[np.isfinite(want)], rtol=1e-14)
    g = go.Graph()
    z = g.input("z", (3, 0), "complex64")
    g.output(go.mean(z, axis=1) + 1)
    got, _ = run(g, {}, z=np.zeros((3, 0), np.complex64))
    assert got.shape == (3,) and np.isnan(got).all()


def test_sin_cos_of_huge_arguments():                            # defect 9
    g = go.Graph()
    x = g.input("x", (1024,), "float64")
    g.output(go.sin(x) + go.cos(x))
    a = np.concatenate([[1e13, 2.0 ** 40, -3e15, 1e300], np.linspace(-10, 10, 1020)])
    for form, _ in FORMS:
        got, _ = run(g, form, x=a)
        np.testing.assert_allclose(got, np.sin(a) + np.cos(a), rtol=1e-12, atol=1e-15)
    assert math.isclose(run(g, {}, x=a)[0][0], math.sin(1e13) + math.cos(1e13), rel_tol=1e-12)


def test_scalars_multiplied_into_a_fused_epilogue():              # defect 10
    rng = np.random.default_rng(2)
    g = go.Graph()
    a = g.input("a", (2, 3, 8, 4), "float32")
    b = g.input("b", (2, 3, 8, 4), "float32")
    g.output(go.tanh(go.einsum("bhqd,bhkd->bhqk", a, b) * 0.5 * 0.25))
    av, bv = (rng.standard_normal((2, 3, 8, 4)).astype(np.float32) for _ in range(2))
    for form, _ in FORMS:
        got, _ = run(g, form, a=av, b=bv)
        np.testing.assert_allclose(got, np.tanh(np.einsum("bhqd,bhkd->bhqk", av, bv) / 8),
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [100, 1 << 18])
def test_where_with_a_float_condition(n):                         # defect 11
    rng = np.random.default_rng(3)
    g = go.Graph()
    c = g.input("c", (n,), "float64")
    x = g.input("x", (n,), "float64")
    g.output(go.where(c, go.exp(x), x * 2))
    cv = rng.standard_normal(n)
    cv[::3] = 0
    cv[1::7] = np.nan
    xv = rng.standard_normal(n)
    for form, _ in FORMS + [({"opt_level": 3}, "timed")]:
        got, _ = run(g, form, c=cv, x=xv)
        np.testing.assert_allclose(got, np.where(cv, np.exp(xv), xv * 2), rtol=1e-15)


@pytest.mark.slow
def test_a_chain_of_any_length_compiles():                        # defect 14
    g = go.Graph()
    x = g.input("x", (64,), "float64")
    y = x
    for i in range(1200):
        y = go.tanh(y) + 0.001 if i % 2 else y * 1.0001
    g.output(y)
    a = np.linspace(-1, 1, 64)
    for form, _ in FORMS[:3]:
        got, plan = run(g, form, x=a)
        np.testing.assert_allclose(got, reference(g, x=a), rtol=1e-12)
    # the generator walks operand chains iteratively: one group of any length compiles
    big = max(plan.steps, key=lambda s: len(s.op_kinds))
    sub = plan.graph.nodes[big.node]["attrs"]["graph"]
    chain = sub
    for _ in range(9):       # 10 groups' worth (640 ops) in one sub-graph, deeper than
        chain = _append_chain(chain, sub)     # Python's recursion limit allows recursing
    src, _ = cg.generate_source(chain, "elementwise", fast_math=False)
    assert src.count("np.tanh(") == 10 * src_tanh(sub) > 200
    # the fusion pass splits the chain: groups of at most MAX_GROUP_OPS ops
    from graphopt.passes.fusion import MAX_GROUP_OPS

    fused = [s for s in plan.steps if s.op_kinds and len(s.op_kinds) > 1]
    assert len(fused) >= 1200 // MAX_GROUP_OPS and \
        all(sum(k != "const" for k in s.op_kinds) <= MAX_GROUP_OPS for s in fused)


def src_tanh(sub) -> int:
    return sum(sub.nodes[n]["op"] == "tanh" for n in sub)


def _append_chain(a, b):
    """The sub-graph computing ``b(a(x))``: ``b``'s input replaced by ``a``'s output."""
    from graphopt import ir

    H = ir.copy_graph(a)
    (a_out,) = a.graph["outputs"]
    (b_in,) = b.graph["inputs"]
    new = {b_in: a_out}
    for n in ir.topo_order(b):
        d = b.nodes[n]
        if n == b_in:
            continue
        new[n] = ir.add_node(H, d["op"], [new[u] for u in ir.operands(b, n)], d["shape"],
                             d["dtype"], d["attrs"], src=d.get("src"))
    H.graph["outputs"] = [new[b.graph["outputs"][0]]]
    return H


def test_kernel_forms_option_is_validated():
    g = go.Graph()
    x = g.input("x", (4,), "float64")
    g.output(go.exp(x))
    with pytest.raises(go.GraphError, match="kernel_forms"):
        go.compile(g, backend="numba", kernel_forms={"fused": "fastest"})
