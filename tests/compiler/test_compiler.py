"""compile() -> Plan on the reference backend: every opt_level against the interpreter,
input validation, no mutation or aliasing, output structures, caching, jit, contract."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import opt_einsum
import pytest
from hypothesis import given
from hypothesis import strategies as st

import graphopt as go
from graphopt.compiler import driver as compiler
from graphopt.frontend.jit import contract_graph
from graphopt.passes.manager import PIPELINES
from graphopt.testing import assert_plan_matches_interpreter, graphs, inputs_for

LEVELS = (0, 1, 2, 3)


def mlp(n=4):
    g = go.Graph("mlp")
    x = g.input("x", (n, 8), "float32")
    w = g.input("w", (8, 3), "float32")
    b = g.input("b", (3,), "float32")
    g.output(go.gelu(x @ w + b))
    return g


def mlp_inputs(rng, n=4):
    return [rng.standard_normal(s).astype("float32") for s in [(n, 8), (8, 3), (3,)]]


@given(graphs(), st.data(), st.sampled_from(LEVELS))
def test_every_opt_level_matches_the_interpreter(g, data, level):
    inputs = data.draw(inputs_for(g))
    plan = go.compile(g, backend="numpy", opt_level=level)
    assert_plan_matches_interpreter(g, plan, inputs)


@pytest.mark.parametrize("level", LEVELS)
def test_mlp_at_every_opt_level(level, rng):
    plan = go.compile(mlp(), backend="numpy", opt_level=level)
    x, w, b = mlp_inputs(rng)
    z = x @ w + b
    c = np.float32(np.sqrt(2 / np.pi))
    expected = 0.5 * z * (1 + np.tanh(c * (z + np.float32(0.044715) * z ** 3)))
    y = plan(x, w, b)
    assert y.dtype == np.float32 and y.shape == (4, 3)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    assert plan.report.opt_level == level and plan.report.backend == "numpy"
    assert plan.source_graph.number_of_nodes() >= 1 and plan.steps
    assert "graphopt report" in str(plan.report)
    for s in plan.steps:
        assert s.kernel.source


def test_inputs_positional_keyword_and_errors(rng):
    plan = go.compile(mlp(), backend="numpy", opt_level=0)
    x, w, b = mlp_inputs(rng)
    ref = plan(x, w, b)
    np.testing.assert_array_equal(plan(x, w, b=b), ref)
    np.testing.assert_array_equal(plan(b=b, w=w, x=x), ref)
    np.testing.assert_array_equal(plan(x.tolist(), w, b), ref)  # lists convert
    cases = [
        (lambda: plan(x, w), "missing input(s) ['b']"),
        (lambda: plan(x, w, b, b), "got 4 positional"),
        (lambda: plan(x, w, b, q=b), "unexpected input 'q'"),
        (lambda: plan(x, w, x=x, b=b), "both positionally and by name"),
        (lambda: plan(x.T, w, b), "input 'x' expects shape (4, 8) dtype float32, got shape (8, 4)"),
        (lambda: plan(x.astype("float64"), w, b),
         "got shape (4, 8) dtype float64; pass x.astype(np.float32)"),
        (lambda: plan(x, w, "text"), "input 'b'"),
    ]
    for call, fragment in cases:
        with pytest.raises(go.InputError) as info:
            call()
        assert fragment in str(info.value)


def test_inputs_are_never_mutated(rng):
    g = go.Graph()
    x = g.input("x", (3, 4))
    y = g.input("y", (4,))
    g.output((x, x * 2 + y, -y, go.exp(x).sum(axis=0) + y))
    x0, y0 = rng.standard_normal((3, 4)), rng.standard_normal(4)
    for level in LEVELS:
        xa, ya = x0.copy(), y0.copy()
        xa.setflags(write=False)
        ya.setflags(write=False)
        plan = go.compile(g, backend="numpy", opt_level=level)
        for _ in range(2):
            plan(xa, ya)
        np.testing.assert_array_equal(xa, x0)
        np.testing.assert_array_equal(ya, y0)


def test_returned_arrays_never_alias(rng):
    g = go.Graph()
    x = g.input("x", (3,))
    c = g.const(np.array([1.0, 2.0, 3.0]))
    y = go.exp(x)
    g.output((x, y, y, c, y + 1))
    for level in LEVELS:
        plan = go.compile(g, backend="numpy", opt_level=level)
        xa = rng.standard_normal(3)
        first = plan(xa)
        snapshot = [a.copy() for a in first]
        second = plan(xa + 1)
        arrays = list(first) + list(second) + [xa]
        for i, a in enumerate(arrays):
            for b in arrays[i + 1:]:
                assert not np.shares_memory(a, b), f"opt_level={level}"
        for a, s in zip(first, snapshot):
            np.testing.assert_array_equal(a, s)  # a later call did not overwrite them
        first[3][0] = 99.0  # writing a returned constant does not change the plan
        np.testing.assert_array_equal(plan(xa)[3], [1.0, 2.0, 3.0])


@pytest.mark.parametrize("kind", ["tensor", "tuple", "list", "dict"])
def test_output_structure_is_returned(kind, rng):
    g = go.Graph()
    x = g.input("x", (2,))
    a, b = x + 1, x * 3
    g.output({"tensor": a, "tuple": (a, b), "list": [a, b], "dict": {"q": b, "p": a}}[kind])
    out = go.compile(g, backend="numpy")(np.ones(2))
    if kind == "tensor":
        assert isinstance(out, np.ndarray)
    elif kind == "dict":
        assert list(out) == ["q", "p"] and out["q"][0] == 3
    else:
        assert type(out) is {"tuple": tuple, "list": list}[kind]
        np.testing.assert_array_equal(out[1], [3, 3])


def test_compile_cache():
    plan = go.compile(mlp(), backend="numpy", opt_level=1)
    assert go.compile(mlp(), backend="numpy", opt_level=1) is plan  # equal graph, new object
    assert go.compile(mlp(), backend="numpy", opt_level=0) is not plan
    assert go.compile(mlp(n=5), backend="numpy", opt_level=1) is not plan
    assert go.compile(mlp(), backend="numpy", opt_level=1, cache=False) is not plan
    compiler.clear_cache()
    assert go.compile(mlp(), backend="numpy", opt_level=1) is not plan


def test_compile_cache_tells_graphs_of_one_outline_apart(monkeypatch):
    """Graphs of the same node count, inputs, output shape and output op but other ops
    within are hashed (once each) and get their own plans; the first compile of an outline
    hashes nothing, and one of another output op, equation or input shapes is not hashed."""
    compiler.clear_cache()
    hashed = []
    real = compiler.ir.structural_hash
    monkeypatch.setattr(compiler.ir, "structural_hash", lambda G: hashed.append(1) or real(G))

    def graph(op, order=False):
        g = go.Graph("one_outline")
        x = g.input("x", (3,))
        y = g.input("y", (3,))
        g.output((op(y, x) if order else op(x, y)) + x)
        return g

    add = go.compile(graph(lambda a, b: a + b), backend="numpy")
    assert hashed == []
    mul = go.compile(graph(lambda a, b: a * b), backend="numpy")
    assert mul is not add and len(hashed) == 2      # this graph's hash and the first's
    assert go.compile(graph(lambda a, b: a + b), backend="numpy") is add
    swapped = go.compile(graph(lambda a, b: a + b, order=True), backend="numpy")
    assert swapped is not add
    x, y = np.array([1.0, 2, 3]), np.array([10.0, 20, 30])
    np.testing.assert_array_equal(mul(x, y), x * y + x)
    np.testing.assert_array_equal(add(x, y), x + y + x)
    assert len(hashed) == 2 + 1 + 1   # each later compile hashes its own graph only
    assert len(compiler.cached_plans()) == 3
    g = go.Graph("one_outline")       # as many nodes, but its output is another op
    x_, y_ = g.input("x", (3,)), g.input("y", (3,))
    g.output((x_ + y_) * x_)
    go.compile(g, backend="numpy")
    g = go.Graph("one_outline")       # two networks of as many tensors: their equations
    a_, b_ = g.input("x", (3, 3)), g.input("y", (3, 3))
    g.output(go.einsum("ij,jk->", a_, b_))
    go.compile(g, backend="numpy")
    g = go.Graph("one_outline")
    a_, b_ = g.input("x", (3, 3)), g.input("y", (3, 3))
    g.output(go.einsum("ij,ij->", a_, b_))
    go.compile(g, backend="numpy")
    g = go.Graph("one_outline")       # one equation on other input sizes (an MPS product
    a_, b_ = g.input("x", (2, 3)), g.input("y", (3, 4))   # at other bonds)
    g.output(go.einsum("ij,jk->", a_, b_))
    go.compile(g, backend="numpy")
    assert len(hashed) == 4 and len(compiler.cached_plans()) == 7


def test_compile_option_errors():
    g = mlp()
    for limit in (-1, 0, float("nan"), float("inf"), True, "1GB", [1], 0.5, 1e9 + 0.5,
                  np.bool_(True)):
        with pytest.raises(go.GraphError, match="memory_limit must be a positive whole"):
            go.compile(g, backend="numpy", memory_limit=limit)
    for limit in (1e9, 10**9, np.int64(10**9), np.uint32(10**9), np.float64(1e9)):
        plan = go.compile(g, backend="numpy", memory_limit=limit, cache=False)
        assert plan is not None
    for level in (4, -1, True, "2", None):
        with pytest.raises(go.GraphError, match="opt_level"):
            go.compile(g, backend="numpy", opt_level=level)
    with pytest.raises(go.GraphError, match="unknown backend 'tpu'; valid backends:.*numpy"):
        go.compile(g, backend="tpu")
    with pytest.raises(go.GraphError, match="takes a go.Graph"):
        go.compile("not a graph")
    with pytest.raises(go.GraphError, match="no outputs"):
        go.compile(go.Graph())
    with pytest.raises(go.GraphError, match="unknown pass"):
        go.compile(g, backend="numpy", passes=["nope"])


def test_misspelled_options_and_pass_names_are_errors_that_list_the_valid_ones(monkeypatch):
    g = mlp()
    with pytest.raises(go.GraphError, match=r"unknown option\(s\) \['fats_math'\].*fast_math"):
        go.compile(g, backend="numba", fats_math=False)
    with pytest.raises(go.GraphError,
                       match=r"disable: unknown pass name\(s\) \[.fusoin.\].*fusion"):
        go.compile(g, disable={"fusoin"})
    with pytest.raises(go.GraphError, match="disable: unknown pass"):
        go.compile(g, disable="fusoin")
    monkeypatch.setenv("GRAPHOPT_DISABLE", "cse,fusoin")
    with pytest.raises(go.GraphError, match="GRAPHOPT_DISABLE: unknown pass"):
        go.compile(g, backend="numpy", cache=False)
    monkeypatch.delenv("GRAPHOPT_DISABLE")
    monkeypatch.setenv("GRAPHOPT_DEBUG", "yes")      # a switch is 0 or 1, never a guess
    with pytest.raises(go.GraphError, match=r"\$GRAPHOPT_DEBUG must be 0 or 1, got 'yes'"):
        go.compile(g, backend="numpy", cache=False)
    monkeypatch.delenv("GRAPHOPT_DEBUG")
    plan = go.compile(g, backend="numpy", fold_limit_bytes=1 << 10, disable={"fusion"},
                      cache=False)
    assert plan.options["fold_limit_bytes"] == 1 << 10


@pytest.mark.parametrize("backend, option, readers", [
    ("numpy", "fast_math", "'dask', 'numba'"), ("numba", "cuda_graph", "'cupy'"),
    ("numpy", "block_kernel", "'dask'")])
def test_an_option_the_chosen_backend_does_not_read_is_an_error_naming_who_reads_it(
        backend, option, readers):
    with pytest.raises(go.GraphError) as e:
        go.compile(mlp(), backend=backend, cache=False, **{option: True})
    msg = str(e.value)
    assert f"option(s) ['{option}'] for backend '{backend}'" in msg
    assert f"'{option}' is read by backend {readers} only" in msg
    assert "valid options: backend, opt_level" in msg and "fold_limit_bytes" in msg


def test_custom_passes_appear_in_the_report():
    from graphopt import ir
    from graphopt.passes import PassResult

    def noop(G, ctx):
        return PassResult(ir.copy_graph(G), {"looked_at": G.number_of_nodes()})

    plan = go.compile(mlp(), backend="numpy", passes=[noop])
    # the einsums the pipeline left without a contraction get theirs as written, once more
    # by the contraction pass, and the report says why
    assert [r.name for r in plan.report.records] == ["noop", "contraction"]
    assert "did not give every einsum one" in plan.report["contraction"].details["why"]
    assert plan.report["noop"].details["looked_at"] == plan.source_graph.number_of_nodes()
    assert plan.report["noop"].changed is False
    assert all("contraction" in d["attrs"] for _, d in plan.graph.nodes(data=True)
               if d["op"] == "einsum")


def test_plan_is_thread_safe(rng):
    plan = go.compile(mlp(64), backend="numpy", opt_level=2)
    inputs = [mlp_inputs(np.random.default_rng(i), 64) for i in range(8)]
    expected = [plan(*a) for a in inputs]

    def worker(i):
        for _ in range(20):
            np.testing.assert_array_equal(plan(*inputs[i]), expected[i])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(worker, range(8)))      # (a worker's failure is raised here)


# ------------------------------------------------------------------------------------ jit


def test_jit_traces_once_per_signature(rng):
    calls = []

    @go.jit(backend="numpy")
    def f(x, w, scale=2.0, activation="tanh"):
        calls.append(1)
        h = go.einsum("ij,jk->ik", x, w) * scale
        return {"h": getattr(go, activation)(h), "s": h.sum()}

    x, w = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    out = f(x, w)
    np.testing.assert_allclose(out["h"], np.tanh(2.0 * x @ w))
    np.testing.assert_allclose(out["s"], (2.0 * x @ w).sum())
    f(x + 1, w)
    assert len(calls) == 1 and len(f.plans) == 1
    f(x, w, scale=3.0)
    assert len(calls) == 2  # a static argument is part of the key
    f(x, w, activation="relu")
    f(rng.standard_normal((5, 4)), w)
    f(x.astype("float32"), w)
    assert len(calls) == 5 and len(f.plans) == 5
    assert f.plan_for(x, w) is f.plan_for(x * 0, w)
    with pytest.raises(go.GraphError, match="neither an array nor hashable"):
        f(x, w, scale=[1.0])


def test_jit_structures_and_varargs(rng):
    @go.jit(backend="numpy")
    def total(*xs):
        out = xs[0]
        for x in xs[1:]:
            out = out + x
        return out, out * 2

    a, b, c = (rng.standard_normal(3) for _ in range(3))
    s, d = total(a, b, c)
    np.testing.assert_allclose(s, a + b + c)
    np.testing.assert_allclose(d, 2 * (a + b + c))

    @go.jit
    def const_out(x):
        return [x.sum(), 1.0]

    got = const_out(a)
    assert isinstance(got, list) and got[1] == 1.0


# ------------------------------------------------------------------------------- contract


@pytest.mark.parametrize("eq,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("ij,jk", [(3, 4), (4, 5)]), ("ii->i", [(4, 4)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]), ("abc,cd,de,eb->ad", [(2, 3, 4), (4, 5), (5, 3),
                                                                        (3, 3)]),
    ("i,i,i,i->", [(6,)] * 4), ("ab,bc,cd,de,ef,fa->", [(3, 3)] * 6),
])
def test_contract_matches_numpy_einsum(eq, shapes, rng):
    arrays = [rng.standard_normal(s) for s in shapes]
    expected = np.einsum(eq, *arrays)
    for level in (0, 2):
        got = go.contract(eq, *arrays, backend="numpy", opt_level=level)
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(go.contract(eq, *arrays, backend="numpy"),
                               opt_einsum.contract(eq, *arrays), rtol=1e-10, atol=1e-12)


def test_contract_caches_and_converts(rng):
    a = rng.standard_normal((3, 3))
    go.contract("ij,jk->ik", a, a, backend="numpy")
    from graphopt.frontend.jit import _contract_plans
    n = len(_contract_plans)
    go.contract("ij,jk->ik", a + 1, a, backend="numpy")
    assert len(_contract_plans) == n
    np.testing.assert_allclose(go.contract("i,i", [1.0, 2.0], [3.0, 4.0], backend="numpy"), 11.0)
    with pytest.raises(go.EinsumError, match="label 'j' has size 3 and 4"):
        go.contract("ij,jk", a, np.ones((4, 2)), backend="numpy")


def test_contract_keeps_its_plans_as_long_as_the_compile_cache_does(rng):
    from graphopt.compiler import driver as compiler
    from graphopt.frontend.jit import _contract_plans
    a = rng.standard_normal((3, 5))
    go.contract("ij,kj->ik", a, a, backend="numpy")
    key = next(k for k in _contract_plans.keys() if k[0] == "ij,kj->ik")
    assert _contract_plans[key] in compiler.cached_plans()
    compiler.clear_cache()
    assert key not in _contract_plans       # its bound is the compile cache's
    np.testing.assert_allclose(go.contract("ij,kj->ik", a, a, backend="numpy"), a @ a.T,
                               rtol=1e-12)
    assert key in _contract_plans
    b = rng.standard_normal((3, 6))
    go.contract("ij,kj->ik", b, b, backend="numpy", cache=False)
    assert all(k[1][0][0] != (3, 6) for k in _contract_plans.keys())    # nothing kept


def test_contract_out_and_optimize_as_numpy_einsum(rng):
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    out = np.zeros((3, 2))
    assert go.contract("ij,jk->ik", a, b, out=out, optimize=True) is out
    np.testing.assert_allclose(out, np.einsum("ij,jk->ik", a, b, optimize=True), rtol=1e-12)
    wide = np.zeros((3, 2), np.complex128)       # a safe cast, as np.einsum allows
    go.contract("ij,jk->ik", a, b, out=wide)
    np.testing.assert_allclose(wide.real, out, rtol=1e-12)
    with pytest.raises(go.GraphError, match="out= must be an ndarray of the result's shape"):
        go.contract("ij,jk->ik", a, b, out=np.zeros((2, 3)))
    with pytest.raises(go.GraphError, match="float64, which out= of dtype float32 cannot"):
        go.contract("ij,jk->ik", a, b, out=np.zeros((3, 2), np.float32))
    narrow = np.zeros((3, 2), np.float32)          # ... unless casting= allows it
    go.contract("ij,jk->ik", a, b, out=narrow, casting="same_kind")
    np.testing.assert_allclose(narrow, out, rtol=1e-6)
    with pytest.raises(go.GraphError, match=r"casting='nope' is not"):
        go.contract("ij,jk->ik", a, b, casting="nope")


EQUATION = "ab,bc,cd->ad"


def _three(rng):
    return [rng.standard_normal(s) for s in ((3, 4), (4, 5), (5, 6))]


@pytest.mark.parametrize("optimize", [
    None, False, True, "greedy", [(1, 2), (0, 1)], ["einsum_path", (0, 1), (0, 1)], [(0, 1, 2)],
])
def test_contract_takes_every_optimize_numpy_and_opt_einsum_take(optimize, rng):
    arrays = _three(rng)
    got = go.contract(EQUATION, *arrays, optimize=optimize, backend="numpy", cache=False)
    np.testing.assert_allclose(got, np.einsum(EQUATION, *arrays), rtol=1e-12)


@pytest.mark.parametrize("path", [[(1, 2), (0, 1)], [(0, 1, 2)], np.einsum_path(
    EQUATION, np.ones((3, 4)), np.ones((4, 5)), np.ones((5, 6)), optimize="optimal")[0]])
def test_an_explicit_path_is_run_as_given(path, rng):
    plan = go.compile(contract_graph(EQUATION, _three(rng)), optimize=path, cache=False)
    (n,) = [n for n in plan.graph if plan.graph.nodes[n]["op"] == "einsum"]
    given = path[1:] if path[0] == "einsum_path" else path
    assert plan.graph.nodes[n]["attrs"]["contraction"].path == tuple(map(tuple, given))
    with pytest.raises(go.GraphError, match="contraction path"):
        go.compile(contract_graph(EQUATION, _three(rng)), optimize=[(0, 5), (0, 1)],
                   cache=False)


def test_contract_dtype_order_casting_and_opt_einsum_words(rng):
    a, b, c = _three(rng)
    with pytest.raises(go.GraphError, match="cannot cast an operand from float64 to float32"):
        go.contract("ab,bc->ac", a, b, dtype=np.float32)     # np.einsum's casting='safe'
    got = go.contract("ab,bc->ac", a, b, dtype=np.float32, casting="same_kind")
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-5)
    ints = go.contract("ab,bc->ac", np.arange(12).reshape(3, 4), np.ones((4, 5), np.int64),
                       dtype=np.float64)
    assert ints.dtype == np.float64
    assert go.contract("ab,bc->ac", a, b, order="F").flags.f_contiguous
    assert go.contract("ab,bc->ac", np.asfortranarray(a), np.asfortranarray(b),
                       order="a").flags.f_contiguous
    with pytest.raises(go.GraphError, match="order='W'"):
        go.contract("ab,bc->ac", a, b, order="W")
    want = np.einsum(EQUATION, a, b, c)
    for kw in ({"use_blas": False}, {"memory_limit": -1}, {"memory_limit": "max_input"}):
        np.testing.assert_allclose(go.contract(EQUATION, a, b, c, **kw), want, rtol=1e-12)
    # opt_einsum's "max_input" bounds each intermediate by the largest operand: its path
    import opt_einsum

    path = opt_einsum.contract_path(EQUATION, a, b, c, memory_limit="max_input")[0]
    plan = go.contract_expression(EQUATION, a.shape, b.shape, c.shape,
                                  memory_limit="max_input")
    (n,) = [n for n in plan.graph if plan.graph.nodes[n]["op"] == "einsum"]
    assert plan.graph.nodes[n]["attrs"]["contraction"].path == tuple(map(tuple, path))


def test_contract_expression_is_a_compiled_plan(rng):
    a, b, c = _three(rng)
    expr = go.contract_expression(EQUATION, a.shape, b.shape, c.shape)
    np.testing.assert_allclose(expr(a, b, c), np.einsum(EQUATION, a, b, c), rtol=1e-12)
    assert expr.predicted_peak_bytes > 0 and "contraction" in str(expr.report)
    single = go.contract_expression("ij->", np.ones((2, 3), np.float32))
    assert single(np.ones((2, 3), np.float32)) == 6.0


def test_a_repeated_label_of_size_one_broadcasts_as_numpy_does():
    for eq, ops in [("aa,a->a", [np.ones((1, 1)), np.arange(3.0)]),
                    ("aab,a->ab", [np.full((1, 1, 2), 2.0), np.arange(3.0)]),
                    ("aa,a", [np.full((1, 1), 2.0), np.arange(3.0)])]:
        got = go.contract(eq, *ops, backend="numpy", cache=False)
        want = np.einsum(eq, *ops)
        assert got.shape == want.shape and np.array_equal(got, want), eq
    with pytest.raises(go.GraphError, match=r"repeated label 'a' in term 'aa' has dims \[1, 3\]"):
        go.contract("aa", np.ones((1, 3)))


def test_non_array_inputs_convert_only_when_exact():             # ISSUE 12: 22
    g = go.Graph()
    x = g.input("x", (2,), "int32")
    b = g.input("b", (2,), "bool")
    f = g.input("f", (2,), "float32")
    g.output((x + 1, b, f))
    plan = go.compile(g, backend="numpy")
    out = plan(x=[1, 2], b=[True, False], f=[0.1, 1e30])
    assert out[0].tolist() == [2, 3] and out[1].tolist() == [True, False]
    assert out[2].dtype == np.float32
    for kw, why in (({"x": [1.7, 2.9]}, "1.7"), ({"x": [2**40, 1]}, "does not fit"),
                    ({"x": [2**70, 1]}, "object"), ({"b": ["False", "True"]}, "str"),
                    ({"b": [2, 0]}, "does not fit"), ({"f": [1e300, 1.0]}, "does not fit"),
                    ({"x": [1 + 1j, 2]}, "does not fit")):
        args = {"x": [1, 2], "b": [True, False], "f": [0.5, 1.5], **kw}
        with pytest.raises(go.InputError, match=why):
            plan(**args)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_byte_swapped_inputs_through_layout_ops(backend):        # ISSUE 12: 12
    if backend == "numba":
        pytest.importorskip("numba")
    g = go.Graph()
    x = g.input("x", (4, 6), "float32")
    g.output((go.reshape(go.transpose(x, (1, 0)), (24,)), go.exp(x) + 1))
    a = np.arange(24, dtype=">f4").reshape(4, 6)
    keep = a.copy()
    flat, e = go.compile(g, backend=backend, cache=False)(x=a)
    np.testing.assert_array_equal(flat, a.T.reshape(24))
    np.testing.assert_allclose(e, np.exp(a.astype(np.float32)) + 1, rtol=1e-6)
    np.testing.assert_array_equal(a, keep)
    assert a.dtype.byteorder == ">"          # the user's array is neither swapped nor copied


# --------------------------------------------------------------- one contraction of inputs


def _chain(g, n=14, dim=6, dtype="float64"):
    """``n`` matrices multiplied as one einsum (a small tensor network)."""
    import opt_einsum

    labels = [opt_einsum.get_symbol(i) for i in range(n + 1)]
    eq = ",".join(labels[i] + labels[i + 1] for i in range(n)) + "->" + labels[0] + labels[-1]
    ins = [g.input(f"m{i}", (dim, dim), dtype) for i in range(n)]
    return eq, ins


def _chain_arrays(n=14, dim=6, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(dim, dim)) / dim ** 0.5 for _ in range(n)]


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_one_contraction_of_inputs_compiles_by_the_contraction_only_pipeline(backend):
    g = go.Graph("chain")
    eq, ins = _chain(g)
    g.output(go.einsum(eq, *ins))
    plan = go.compile(g, backend=backend, cache=False)
    assert [r.name for r in plan.report.records] == ["contraction", "slicing"]
    (step,) = plan.steps
    assert step.kernel.impl == "numpy-sliced" and not plan._numba
    group = plan.report["contraction"].details["groups"][0]
    assert group["emitted"] == "one node along the path" and group["decision"] == "reordered"
    assert list(plan.graph.nodes[step.node]["attrs"]["contraction"].path) == \
        [tuple(p) for p in group["path"]]
    assert "one node along the path" in str(plan.report)
    arrays = _chain_arrays()
    np.testing.assert_allclose(plan(*arrays), np.einsum(eq, *arrays, optimize=True),
                               rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("eq, shapes", [("ab,bc->ac", [(40, 30), (30, 20)]),
                                         ("abc,acd->dab", [(3, 4, 5), (3, 5, 6)]),
                                         ("ab,cd->abcd", [(3, 4), (5, 6)]),
                                         ("ab,ab->", [(2, 3), (2, 3)]),
                                         ("aab,bc->ac", [(3, 3, 4), (4, 5)])])
def test_a_pair_of_inputs_compiles_by_the_contraction_only_pipeline(eq, shapes):
    """A pair of inputs is kept as the pairwise node it is: the same kernel as the whole
    pipeline's, the same values, predicted peak and report group."""
    rng = np.random.default_rng(3)
    arrays = [rng.normal(size=s) for s in shapes]
    g = go.Graph("pair")
    g.output(go.einsum(eq, *(g.input(f"x{i}", s) for i, s in enumerate(shapes))))
    short = go.compile(g, cache=False)
    full = go.compile(g, cache=False, passes=PIPELINES[2])
    assert [r.name for r in short.report.records] == ["contraction", "slicing"]
    assert len(full.report.records) > 2
    assert [s.kernel.impl for s in short.steps] == [s.kernel.impl for s in full.steps]
    assert short.predicted_peak_bytes == full.predicted_peak_bytes
    (group,) = short.report["contraction"].details["groups"]
    assert group["decision"] == "kept user order" and "emitted" not in group
    np.testing.assert_array_equal(short(*arrays), full(*arrays))
    np.testing.assert_allclose(short(*arrays), np.einsum(eq, *arrays), rtol=1e-12,
                               atol=1e-12)


@pytest.mark.parametrize("kwargs", [dict(opt_level=1), dict(disable=("contraction",)),
                                    dict(passes=["contraction"]), dict(backend="dask"),
                                    dict(kernel_forms={"contraction": "numpy-einsum"})])
def test_other_settings_keep_their_pipeline(kwargs):
    if kwargs.get("backend") == "dask":
        pytest.importorskip("dask.distributed")
    g = go.Graph("chain")
    eq, ins = _chain(g, n=5)
    g.output(go.einsum(eq, *ins))
    plan = go.compile(g, cache=False, **kwargs)
    names = [r.name for r in plan.report.records]
    assert names != ["contraction", "slicing"]
    groups = [gr for r in plan.report.records if r.name == "contraction"
              for gr in r.details["groups"]]
    assert all("emitted" not in gr for gr in groups)
    arrays = _chain_arrays(n=5)
    np.testing.assert_allclose(plan(*arrays), np.einsum(eq, *arrays, optimize=True),
                               rtol=1e-12, atol=1e-14)


def test_a_graph_with_more_than_the_contraction_keeps_the_full_pipeline():
    g = go.Graph("chain")
    eq, ins = _chain(g, n=5)
    g.output(go.exp(go.einsum(eq, *ins)))
    plan = go.compile(g, backend="numba", cache=False)
    assert "fusion" in [r.name for r in plan.report.records]
    assert all(s.kernel.impl != "numpy-sliced" for s in plan.steps)


def test_memory_limit_still_slices_one_contraction_of_inputs():
    g = go.Graph("outer")
    a, b, c = (g.input(x, (64, 64), "float64") for x in "abc")
    # the pairwise outer product of a and b would hold 64**4 elements
    g.output(go.einsum("ij,kl,jl->ik", a, b, c))
    plan = go.compile(g, backend="numba", cache=False, memory_limit=200_000)
    assert [r.name for r in plan.report.records] == ["contraction", "slicing"]
    rng = np.random.default_rng(0)
    x, y, z = (rng.normal(size=(64, 64)) for _ in range(3))
    np.testing.assert_allclose(plan(x, y, z), np.einsum("ij,kl,jl->ik", x, y, z),
                               rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_a_limit_each_intermediate_fits_but_their_arena_does_not_is_met_as_one_node(backend):
    # the MPS ring workload is a graph of pairwise einsums; under half its peak every
    # intermediate fits the limit, so the group stays pairwise and their arena does not:
    # compile plans it again as one node along its path, which the slicing pass bounds
    # (the previous stop refused this limit while it met a quarter of the peak)
    from graphopt import workloads

    w = workloads.mps_ring(sites=8, bond=32)
    g = w.build()
    whole = go.compile(g, backend=backend, cache=False)
    limit = whole.predicted_peak_bytes // 2
    plan = go.compile(g, backend=backend, cache=False, memory_limit=limit)
    assert plan.predicted_peak_bytes <= limit and plan.report["slicing"].details["n_slices"]
    assert "one node along its path: as pairwise nodes" in " ".join(str(plan.report).split())
    np.testing.assert_allclose(plan(**w.inputs), whole(**w.inputs), rtol=1e-10)
    assert plan.measure_peak_bytes(**w.inputs) <= limit


def test_the_contraction_programs_arena_counts_as_the_plans_and_is_given_back():
    g = go.Graph("chain")
    eq, ins = _chain(g, n=6, dim=32)
    g.output(go.einsum(eq, *ins))
    plan = go.compile(g, backend="numba", cache=False)
    assert plan.idle_arena_bytes == 0
    arrays = _chain_arrays(n=6, dim=32)
    first = plan(*arrays)
    held = plan.idle_arena_bytes
    assert held >= 32 * 32 * 8 and held <= plan.steps[0].kernel.workspace_bytes
    second = plan(*arrays)
    assert not np.shares_memory(first, second) and plan.idle_arena_bytes == held
    np.testing.assert_array_equal(first, second)
    plan.release_arenas()
    assert plan.idle_arena_bytes == 0


def test_a_plan_larger_than_the_machine_is_refused_before_it_runs(monkeypatch):
    """With no memory_limit, a plan whose predicted peak exceeds the backend's memory (a
    network too wide to contract whole) is refused at compile, with how to slice it; a
    limit the user sets is theirs; a cluster's workers' memory is not known here."""
    from graphopt.backends.base import Backend
    g = go.Graph("wide")
    a, b = g.input("a", (300, 40)), g.input("b", (40, 300))
    g.output(go.tanh(go.einsum("ij,jk->ik", a, b)).sum())   # 720 kB intermediates
    monkeypatch.setattr(Backend, "memory_bytes", lambda self: 100_000)
    for backend in ("numpy", "numba"):
        with pytest.raises(go.GraphError, match=r"predicted peak is \d+ bytes, more than the "
                           r"100000 bytes of memory .* memory_limit=50000") as e:
            go.compile(g, backend=backend, cache=False)
        assert e.value.op in ("einsum", "tanh") and "test_compiler.py" in (e.value.src or "")
    plan = go.compile(g, backend="numpy", cache=False, memory_limit=10**9)   # the user's
    assert plan.predicted_peak_bytes > 100_000
    monkeypatch.setattr(Backend, "memory_bytes", lambda self: None)
    go.compile(g, backend="numpy", cache=False)


def test_a_mistyped_option_or_op_gets_a_did_you_mean():
    from graphopt.ir import ops

    g = go.Graph()
    g.output(g.input("x", (3,)) * 2)
    with pytest.raises(go.GraphError, match=r"'bakend' is read by no backend or pass, did you "
                                            r"mean 'backend'\?"):
        go.compile(g, bakend="numba")
    with pytest.raises(go.GraphError, match=r"unknown op 'einsm'; did you mean 'einsum'\?"):
        ops.get_op("einsm")
