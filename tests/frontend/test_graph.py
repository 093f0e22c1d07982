"""The builder: Graph, inputs/constants/outputs, Tensor operators and methods, source lines,
and every error path (each names the op, the shapes/dtypes and the user's source line)."""

import inspect
import re

import numpy as np
import pytest

import graphopt as go
from graphopt.frontend.tensor import tracing
from graphopt.ir.interpreter import interpret

FILE = __file__


def line_of(marker: str) -> int:
    """The line number in this file of the (unique) line ending with ``# <marker>``."""
    for i, text in enumerate(open(FILE, encoding="utf-8"), start=1):
        if text.rstrip().endswith(f"# {marker}"):
            return i
    raise AssertionError(marker)


def assert_located(err: go.GraphError, op: str, *fragments: str) -> None:
    """The message names the op, each fragment (shapes/dtypes), and a line of this file."""
    msg = str(err)
    assert f"op '{op}'" in msg, msg
    for f in fragments:
        assert f in msg, (f, msg)
    assert re.search(re.escape(FILE) + r":\d+", msg), msg
    assert err.src is not None and err.src.startswith(FILE + ":")


@pytest.fixture
def g():
    return go.Graph("t")


# ----------------------------------------------------------------------------------- inputs


def test_graph_basics(g):
    assert go.Graph().name == "graph" and g.name == "t"
    x = g.input("x", (2, 3), "float32")
    y = g.input("y", 4)
    assert x.shape == (2, 3) and x.dtype == np.float32 and y.shape == (4,)
    assert y.dtype == np.float64  # default dtype
    assert [t.id for t in g.inputs] == [x.id, y.id]
    assert "2 inputs" in repr(g) and "Tensor(input" in repr(x)
    z = g.input("z", (np.int64(2),), np.complex64)
    assert z.dtype == np.complex64
    w = g.input("w", (), np.dtype("bool"))
    assert w.shape == () and w.ndim == 0 and w.size == 1


@pytest.mark.parametrize("name", ["1x", "a-b", "", 3, None])
def test_input_name_must_be_an_identifier(g, name):
    with pytest.raises(go.InputError, match="identifier") as info:
        g.input(name, (2,))
    assert_located(info.value, "input")


def test_input_errors(g):
    g.input("x", (2,))
    with pytest.raises(go.InputError, match="duplicate input name 'x'") as info:
        g.input("x", (3,))
    assert_located(info.value, "input")
    for shape, pattern in [((2, -1), "negative dimension"), ("ab", "not a tuple of ints"),
                           ((1.5,), "not a tuple of ints"), ((None,), "not a tuple of ints")]:
        with pytest.raises(go.ShapeError, match=pattern) as info:
            g.input("y", shape)
        assert_located(info.value, "input")
    with pytest.raises(go.DTypeError, match="supported") as info:
        g.input("y", (2,), "float128")
    assert_located(info.value, "input", "float128")
    with pytest.raises(go.DTypeError, match="unknown dtype") as info:
        g.input("y", (2,), "flaot32")
    assert_located(info.value, "input")


# -------------------------------------------------------------------------------- constants


def test_constants(g):
    x = g.input("x", (3,))
    arr = np.array([1.0, 2.0, 3.0])
    c = g.const(arr)
    arr[0] = 100.0  # later changes to the array do not leak into the graph
    s = g.const(np.float32(0.5))
    i, b, z = g.const(2), g.const(True), g.const(1 + 2j)
    assert (c.dtype, s.dtype, i.dtype, b.dtype, z.dtype) == (
        np.float64, np.float32, np.int64, np.bool_, np.complex128)
    assert c.op == "const" and s.shape == ()
    g.output((x + c, s * x, i + x, z * x))
    out = interpret(g.to_ir(), np.ones(3))
    np.testing.assert_allclose(out[0], [2.0, 3.0, 4.0])
    assert out[1].dtype == np.float64  # a float32 numpy scalar is strong: float32*float64
    assert out[3].dtype == np.complex128
    const_value = g.to_ir().nodes[c.id]["attrs"]["value"]
    assert not const_value.flags.writeable


def test_constant_errors(g):
    x = g.input("x", (2,))
    for value, cls, pattern in [(x, go.GraphError, "not a Tensor"),
                                ("text", go.DTypeError, "supported"),
                                (object(), go.DTypeError, "not numeric"),
                                ({"a": 1}, go.DTypeError, "not numeric"),
                                (np.array([1, 2], dtype=np.longdouble), go.DTypeError, "float128")]:
        with pytest.raises(cls, match=pattern) as info:
            g.const(value)
        assert_located(info.value, "const")


# ---------------------------------------------------------------------------------- outputs


@pytest.mark.parametrize("kind", ["tensor", "tuple", "list", "dict"])
def test_output_structures(g, kind):
    x = g.input("x", (2,))
    y, z = x * 2, x + 1
    value = {"tensor": y, "tuple": (y, z), "list": [y, z], "dict": {"b": y, "a": z}}[kind]
    g.output(value)
    out = interpret(g.to_ir(), np.ones(2))
    if kind == "tensor":
        np.testing.assert_allclose(out, [2, 2])
    elif kind == "dict":
        assert list(out) == ["b", "a"]
        np.testing.assert_allclose(out["a"], [2, 2])
    else:
        assert type(out) is {"tuple": tuple, "list": list}[kind] and len(out) == 2


def test_output_errors(g):
    x = g.input("x", (2,))
    other = go.Graph().input("y", (2,))
    for value, pattern in [(3, "takes a Tensor, tuple, list or dict"), ((x, 3), "must be Tensors"),
                           ((), "at least one"), ({1: x}, "keys must be str"),
                           (other, "another Graph"), ({x}, "takes a Tensor")]:
        with pytest.raises(go.GraphError, match=pattern) as info:
            g.output(value)
        assert_located(info.value, "output")
    with pytest.raises(go.GraphError, match="no outputs"):
        go.Graph().to_ir()


def test_to_ir_is_a_snapshot(g):
    x = g.input("x", (2,))
    g.output(x + 1)
    G = g.to_ir()
    n = G.number_of_nodes()
    g.output(go.exp(x))
    assert G.number_of_nodes() == n


# --------------------------------------------------------------------- operators, methods


def test_operators_and_methods(g, rng):
    a = rng.standard_normal((2, 3))
    b = rng.standard_normal((3,))
    m = rng.standard_normal((3, 4))
    x, y, w = g.input("x", a.shape), g.input("y", b.shape), g.input("w", m.shape)
    cases = {
        "add": (x + y, a + b), "radd": (1 + x, 1 + a), "sub": (x - y, a - b),
        "rsub": (2.0 - x, 2.0 - a), "mul": (x * y, a * b), "rmul": (3 * x, 3 * a),
        "div": (x / 2, a / 2), "rdiv": (1 / (abs(x) + 1), 1 / (abs(a) + 1)),
        "pow": (abs(x) ** y, abs(a) ** b), "rpow": (2 ** x, 2 ** a), "matmul": (x @ w, a @ m),
        "rmatmul": (np.ones((5, 2)) @ x, np.ones((5, 2)) @ a), "neg": (-x, -a), "pos": (+x, a),
        "abs": (abs(x), abs(a)), "T": (x.T, a.T), "sum": (x.sum(), a.sum()),
        "sum1": (x.sum(axis=1, keepdims=True), a.sum(axis=1, keepdims=True)),
        "max": (x.max(0), a.max(0)), "min": (x.min(axis=-1), a.min(axis=-1)),
        "mean": (x.mean(axis=(0, 1)), a.mean(axis=(0, 1))),
        "reshape": (x.reshape(3, 2), a.reshape(3, 2)), "reshape1": (x.reshape((6,)), a.ravel()),
        "reshape-1": (x.reshape(-1, 1), a.reshape(-1, 1)),
        "transpose": (x.transpose(), a.T), "transpose2": (x.transpose(1, 0), a.T),
        "astype": (x.astype("float32"), a.astype("float32")),
        "conj": ((x * 1j).conj(), (a * 1j).conj()), "real": ((x * 1j).real, (a * 1j).real),
        "imag": ((x * 1j).imag, (a * 1j).imag),
        "ndarray+": (np.ones(3) + x, np.ones(3) + a),
        "eq": (x == y, a == b), "ne": (x != y, a != b), "lt": (x < y, a < b),
        "le": (x <= 0.5, a <= 0.5), "gt": (x > y, a > b), "ge": (x >= y, a >= b),
    }
    g.output({k: t for k, (t, _) in cases.items()})
    out = interpret(g.to_ir(), a, b, m)
    for k, (_, expected) in cases.items():
        expected = np.asarray(expected)
        assert out[k].dtype == expected.dtype, k
        np.testing.assert_allclose(out[k], expected, rtol=1e-12, err_msg=k)


def test_tensor_is_symbolic(g):
    x = g.input("x", (2,))
    with pytest.raises(go.GraphError, match="no truth value"):
        bool(x > 0)
    with pytest.raises(go.GraphError, match="symbolic"):
        np.asarray(x)
    with pytest.raises(TypeError):
        len(g.input("s", ()))
    assert len(x) == 2
    assert {x: 1}[x] == 1  # hashable by identity, although == builds a node


def test_array_inputs_are_the_nodes_input_makes_at_the_callers_line(rng):
    """``go.contract``'s inputs (``Graph._array_inputs``): the nodes ``g.input`` makes for
    each array's shape and dtype, named by position, at the caller's line; a dtype graphopt
    does not support, or a name taken, is ``input``'s error."""
    arrays = [rng.standard_normal((2, 3)), np.ones(4, np.int8),
              rng.standard_normal(3).astype(np.float32), np.ones((), np.complex128)]
    one = go.Graph("a")
    for i, a in enumerate(arrays):
        one.input(f"x{i}", a.shape, a.dtype)
    bulk = go.Graph("a")
    ts = bulk._array_inputs(arrays, "x")  # src-array-inputs
    G, H = one._ir, bulk._ir       # (the IR as built: no output yet)
    assert H.graph["inputs"] == G.graph["inputs"] == [t.id for t in ts]
    for n in G.graph["inputs"]:
        assert {k: v for k, v in H.nodes[n].items() if k != "src"} == \
            {k: v for k, v in G.nodes[n].items() if k != "src"}
        assert H.nodes[n]["src"] == f"{FILE}:{line_of('src-array-inputs')}"
    assert [t.shape for t in ts] == [a.shape for a in arrays]
    with pytest.raises(go.InputError, match="duplicate input name 'x0'") as e:
        bulk._array_inputs(arrays[:1], "x")
    assert_located(e.value, "input")
    with pytest.raises(go.DTypeError, match="unsupported dtype") as e:
        go.Graph()._array_inputs([np.ones(2), np.array(["a"])], "x")
    assert_located(e.value, "input")


def test_source_lines_are_recorded(g):
    x = g.input("x", (2, 3))  # src-input
    y = go.exp(x) * 2  # src-mul
    z = go.einsum("ij->j", y)  # src-einsum
    g.output(z)
    G = g.to_ir()
    assert G.nodes[x.id]["src"] == f"{FILE}:{line_of('src-input')}"
    assert G.nodes[y.id]["src"] == f"{FILE}:{line_of('src-mul')}"
    exp_node = next(n for n, d in G.nodes(data=True) if d["op"] == "exp")
    assert G.nodes[exp_node]["src"] == f"{FILE}:{line_of('src-mul')}"
    assert G.nodes[z.id]["src"] == f"{FILE}:{line_of('src-einsum')}"
    m = go.softmax(x)  # src-softmax
    g.output(m)
    G = g.to_ir()
    srcs = {d["src"] for n, d in G.nodes(data=True) if n > z.id}
    assert srcs == {f"{FILE}:{line_of('src-softmax')}"}


def test_tracing_context_puts_scalar_ops_into_the_graph(g):
    x = g.input("x", ())
    with tracing(g):
        c = go.exp(1.0)
    g.output(c + x)
    np.testing.assert_allclose(interpret(g.to_ir(), np.array(1.0)), np.e + 1)
    with pytest.raises(go.GraphError, match="no operand is a Tensor"):
        go.exp(1.0)


# ---------------------------------------------------------------------------------- errors


def test_shape_errors_name_op_shapes_and_line(g):
    x, y = g.input("x", (2, 3)), g.input("y", (4,))
    cases = [
        (lambda: x + y, go.ShapeError, "add", ["(2, 3)", "(4,)", "cannot be broadcast"]),
        (lambda: go.where(x > 0, x, y), go.ShapeError, "where", ["(2, 3)", "(4,)"]),
        (lambda: x.sum(axis=2), go.ShapeError, "sum", ["axis 2", "(2, 3)"]),
        (lambda: x.max(axis=(0, -2)), go.ShapeError, "max", ["repeated axis", "(2, 3)"]),
        (lambda: x.mean(axis=1.5), go.ShapeError, "mean", ["not an int", "(2, 3)"]),
        (lambda: x.reshape(4, 2), go.ShapeError, "reshape", ["(2, 3)", "(4, 2)"]),
        (lambda: x.reshape(-1, -1), go.ShapeError, "reshape", ["only one -1", "(2, 3)"]),
        (lambda: x.reshape(-1, 4), go.ShapeError, "reshape", ["(2, 3)", "(-1, 4)"]),
        (lambda: x.reshape(6.5), go.ShapeError, "reshape", ["(2, 3)", "6.5"]),
        (lambda: x.transpose(0, 0), go.ShapeError, "transpose", ["(0, 0)", "(2, 3)"]),
        (lambda: x.transpose(0, 2), go.ShapeError, "transpose", ["out of range", "(2, 3)"]),
        (lambda: x.transpose(0), go.ShapeError, "transpose", ["(2, 3)"]),
        (lambda: go.broadcast_to(x, (3, 3)), go.ShapeError, "broadcast_to", ["(2, 3)", "(3, 3)"]),
        (lambda: go.broadcast_to(x, (3,)), go.ShapeError, "broadcast_to", ["(2, 3)", "(3,)"]),
        (lambda: go.broadcast_to(x, ("a",)), go.ShapeError, "broadcast_to", ["(2, 3)"]),
        (lambda: x @ y, go.ShapeError, "matmul", ["(2, 3)", "(4,)"]),
        (lambda: x @ g.const(1.0), go.ShapeError, "matmul", ["0-d"]),
        (lambda: go.einsum("ij,jk", x, x), go.EinsumError, "einsum", ["(2, 3)", "ij,jk"]),
        (lambda: g.input("z", (0, 2)).max(axis=0), go.ShapeError, "max", ["zero-size"]),
    ]
    for call, cls, op, fragments in cases:
        with pytest.raises(cls) as info:
            call()
        assert_located(info.value, op, *fragments)


def test_dtype_errors_name_op_dtypes_and_line(g):
    b = g.input("b", (2,), "bool")
    x = g.input("x", (2,), "int32")
    cases = [
        (lambda: -b, "neg", ["bool"]),
        (lambda: b - b, "sub", ["bool"]),
        (lambda: x.astype("float128"), "astype", ["float128"]),
        (lambda: x + "s", "add", ["str"]),
        (lambda: x + 2 ** 70, "add", ["does not fit"]),
        (lambda: x ** -2, "pow", ["negative integer powers"]),
        (lambda: go.add(x, object()), "add", ["object is not a Tensor"]),
    ]
    for call, op, fragments in cases:
        with pytest.raises(go.DTypeError) as info:
            call()
        assert_located(info.value, op, *fragments)


def test_mixing_graphs_is_an_error(g):
    x = g.input("x", (2,))
    y = go.Graph().input("y", (2,))
    with pytest.raises(go.GraphError, match="different Graphs") as info:
        x + y
    assert_located(info.value, "add")


def test_public_api_has_docstrings():
    for name in go.__all__:
        obj = getattr(go, name)
        if callable(obj):
            assert inspect.getdoc(obj), name


@pytest.mark.parametrize("dtype", ["(float32, (2,))", "(99999999999999,)f4", "f4,f4", "U3",
                                   "O", "not a dtype", 3.5])
def test_dtypes_numpy_cannot_parse_or_graphopt_does_not_support_are_dtype_errors(dtype):
    g = go.Graph()                                       # ISSUE 12: 20
    with pytest.raises(go.DTypeError, match="dtype"):
        g.input("x", (2,), dtype)
    with pytest.raises(go.DTypeError, match="dtype"):
        go.astype(g.input("y", (2,), "float32"), dtype)


def test_compile_holds_the_built_graph_until_building_goes_on():
    # compile takes the builder's IR without a copy; building on copies it first, so the
    # plan's source graph never changes, and neither does an earlier plan's result
    g = go.Graph("lent")
    x = g.input("x", (3,))
    y = x * 2.0
    g.output(y)
    plan = go.compile(g, backend="numpy", cache=False)
    assert plan.source_graph is g._ir and g._lent
    before = plan.source_graph.number_of_nodes()
    z = y + 1.0                      # building goes on: the builder copies first
    g.output(z)
    assert not g._lent and g._ir is not plan.source_graph
    assert plan.source_graph.number_of_nodes() == before
    assert plan.source_graph.graph["outputs"] == [y.id]
    np.testing.assert_allclose(plan(np.ones(3)), [2.0, 2.0, 2.0])
    np.testing.assert_allclose(go.compile(g, backend="numpy", cache=False)(np.ones(3)),
                               [3.0, 3.0, 3.0])
    ir = g.to_ir()                   # a copy, which building does not change either
    g.output(x)
    assert ir.graph["outputs"] == [z.id]
