"""JSON graphs: round trips keep structural_hash and meaning; the loader turns every
malformed document (random or mutated) into a GraphError; saving is atomic."""

import copy
import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphopt as go
from graphopt import ir
from graphopt.frontend import serialize
from graphopt.ir.interpreter import run_graph
from graphopt.testing import graphs
from graphopt.testing.semantics import random_inputs

FUZZ = settings(max_examples=max(50, settings.default.max_examples * 4))


def sample_graph():
    g = go.Graph("sample")
    x = g.input("x", (2, 3), "float32")
    z = g.input("z", (3,), "complex128")
    c = g.const(np.arange(3, dtype="int32"))
    y = go.einsum("ij,j->i", x, z * c) + 1.5
    g.output({"y": y, "m": x.max(axis=0, keepdims=True)})
    return g


def round_trip(G):
    return serialize.graph_from_json(serialize.graph_to_json(G))


@given(graphs())
def test_round_trip_keeps_hash_meaning_names_and_sources(g):
    G = g.to_ir()
    H = round_trip(G)
    assert ir.structural_hash(H) == ir.structural_hash(G)
    assert H.graph["output_structure"] == G.graph["output_structure"]
    for n, d in G.nodes(data=True):
        assert H.nodes[n]["src"] == d["src"] and H.nodes[n].get("name") == d.get("name")
    arrays = random_inputs(G, np.random.default_rng(0))
    for a, b in zip(run_graph(G, arrays), run_graph(H, arrays)):
        np.testing.assert_array_equal(a, b)


def test_save_and_load_files(tmp_path, rng):
    g = sample_graph()
    path = tmp_path / "g.json"
    go.save(g, path)
    doc = json.loads(path.read_text())
    assert doc["format"] == "graphopt.graph" and doc["version"] == 1
    h = go.load(path)
    assert isinstance(h, go.Graph) and h.name == "sample"
    assert ir.structural_hash(h.to_ir()) == ir.structural_hash(g.to_ir())
    x, z = rng.standard_normal((2, 3)).astype("float32"), rng.standard_normal(3) + 0j
    a = go.compile(g, backend="numpy", opt_level=0)(x, z)
    b = go.compile(h, backend="numpy", opt_level=0)(x=x, z=z)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    # a loaded graph can be extended like a built one
    h.output(go.exp(h.inputs[0]))
    with pytest.raises(go.InputError, match="duplicate input name 'x'"):
        h.input("x", (1,))
    go.save(g.to_ir(), tmp_path / "ir.json")  # an IR saves too
    assert ir.structural_hash(go.load(tmp_path / "ir.json").to_ir()) == ir.structural_hash(
        g.to_ir())


def test_save_a_plan_writes_the_graph_it_was_compiled_from(tmp_path, rng):
    g = go.Graph("p")
    x = g.input("x", (3, 4))
    g.output(go.softmax(x * 2, axis=-1))
    plan = go.compile(g)
    go.save(plan, tmp_path / "plan.json")
    again = go.compile(go.load(tmp_path / "plan.json"))
    a = rng.random((3, 4))
    np.testing.assert_array_equal(again(a), plan(a))
    with pytest.raises(go.GraphError, match="go.save takes a go.Graph, an IR graph or a Plan, "
                                            "got Tensor"):
        go.save(x, tmp_path / "t.json")


def test_fused_subgraphs_and_arrays_round_trip():
    sub = ir.new_graph("group")
    a = ir.add_node(sub, "input", [], (3,), "float64", name="in0")
    sub.graph["inputs"] = [a]
    k = ir.add_node(sub, "const", [], (3,), "float64",
                    {"value": np.array([1.0, -2.0, np.pi])})
    e = ir.add_op(sub, "mul", [a, k])
    sub.graph["outputs"] = [e]
    G = ir.new_graph("outer")
    x = ir.add_node(G, "input", [], (3,), "float64", name="x")
    G.graph["inputs"] = [x]
    f = ir.add_op(G, "fused", [x], {"graph": sub, "pattern": "elementwise",
                                    "srcs": ["a.py:1", "b.py:2"]})
    G.graph["outputs"] = [f]
    H = round_trip(G)
    assert ir.structural_hash(H) == ir.structural_hash(G)
    assert H.nodes[f]["attrs"]["srcs"] == ("a.py:1", "b.py:2")
    np.testing.assert_array_equal(run_graph(H, [np.ones(3)])[0], [1.0, -2.0, np.pi])


@pytest.mark.parametrize("dtype", ["bool", "int32", "int64", "float32", "float64", "complex64",
                                   "complex128"])
def test_constants_of_every_dtype_round_trip_bit_exactly(dtype, rng):
    vals = (rng.standard_normal((2, 3)) * 1e3 + 1j).astype(dtype) if "complex" in dtype else \
        (rng.standard_normal((2, 3)) * 1e3).astype(dtype)
    g = go.Graph()
    x = g.input("x", (), dtype)
    g.output(g.const(vals) == x)
    H = round_trip(g.to_ir())
    c = next(d for _, d in H.nodes(data=True) if d["op"] == "const")["attrs"]["value"]
    assert c.dtype == vals.dtype and c.tobytes() == vals.tobytes()
    assert not c.flags.writeable


# ---------------------------------------------------------------------------------- errors


def _doc():
    return serialize.graph_to_dict(sample_graph().to_ir())


def _const_node(doc):
    return next(n for n in doc["nodes"] if n["op"] == "const")


@pytest.mark.parametrize("mutate,pattern", [
    (lambda d: d.update(format="other"), "'format' must be"),
    (lambda d: d.update(version=2), "unsupported version 2"),
    (lambda d: d.pop("nodes"), "'nodes' must be a list"),
    (lambda d: d.update(name=3), "'name' must be a string"),
    (lambda d: d["nodes"][0].update(id=-1), "non-negative int"),
    (lambda d: d["nodes"][1].update(id=d["nodes"][0]["id"]), "duplicate node id"),
    (lambda d: d["nodes"][2].update(op="rm -rf"), "unknown op"),
    (lambda d: d["nodes"][0].update(shape=[2, -3]), "non-negative ints"),
    (lambda d: d["nodes"][0].update(shape=[2.5]), "non-negative ints"),
    (lambda d: d["nodes"][0].update(dtype="object"), "supported"),
    (lambda d: d["nodes"][-1].update(args=[10**6]), "earlier nodes"),
    (lambda d: d["nodes"][-1].update(attrs=[]), "attrs must be an object"),
    (lambda d: d["nodes"][-1].update(src=5), "src must be a string"),
    (lambda d: d.update(outputs=[10**6, 0]), "'outputs' must list node ids"),
    (lambda d: d.update(inputs=d["inputs"] * 2), "repeats a node"),
    (lambda d: d.update(output_structure={"kind": "set"}), "output_structure.kind"),
    (lambda d: d.update(output_structure={"kind": "dict", "keys": ["a", "a"]}), "distinct"),
    (lambda d: d.update(output_structure={"kind": "tensor"}), "exactly one output"),
    (lambda d: _const_node(d)["attrs"]["value"]["__array__"].update(data="!!"), "base64"),
    (lambda d: _const_node(d)["attrs"]["value"]["__array__"].update(data="AAAA"), "bytes"),
    (lambda d: _const_node(d)["attrs"]["value"]["__array__"].update(dtype="object"),
     "supported"),
    (lambda d: _const_node(d)["attrs"]["value"]["__array__"].update(shape=[1.5]), "shape"),
    (lambda d: _const_node(d)["attrs"]["value"].update(x=1), "only key"),
    (lambda d: _const_node(d)["attrs"].update(junk=float("nan")), "non-finite"),
    (lambda d: d["nodes"][-1]["attrs"].update(axes=["a"]), "malformed attrs"),
    (lambda d: d["nodes"][-1].update(dtype="int32"), "rule gives"),
    (lambda d: [n.pop("name", None) for n in d["nodes"]], "identifier names"),
    # dtype strings NumPy's parser raises SyntaxError/ValueError on (ISSUE 12: 20)
    (lambda d: d["nodes"][0].update(dtype="(float32, (2,))"), "unknown dtype"),
    (lambda d: d["nodes"][0].update(dtype="(99999999999999,)f4"), "unknown dtype"),
])
def test_malformed_documents_raise_graph_error(mutate, pattern):
    doc = _doc()
    mutate(doc)
    with pytest.raises(go.GraphError, match=pattern):
        serialize.graph_from_json(json.dumps(doc))


@pytest.mark.parametrize("text", ["", "not json", "[1, 2", "null", "[]", "3", '"s"',
                                  "[" * 100000 + "]" * 100000, '{"format": "graphopt.graph"}'])
def test_non_documents_raise_graph_error(text):
    with pytest.raises(go.GraphError, match="malformed graph document"):
        serialize.graph_from_json(text)


def test_load_rejects_non_utf8_and_nested_fused_bombs(tmp_path):
    p = tmp_path / "bad.json"
    p.write_bytes(b"\xff\xfe{}")
    with pytest.raises(go.GraphError, match="UTF-8"):
        go.load(p)
    inner = {"format": "graphopt.graph", "version": 1, "inputs": [], "outputs": [], "nodes": []}
    for _ in range(40):
        inner = {"format": "graphopt.graph", "version": 1, "inputs": [], "outputs": [0],
                 "nodes": [{"id": 0, "op": "fused", "shape": [], "dtype": "float64",
                            "attrs": {"graph": {"__graph__": inner}}, "args": []}]}
    with pytest.raises(go.GraphError, match="nested too deeply"):
        serialize.graph_from_json(json.dumps(inner))


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=20)
_keys = st.sampled_from(["format", "version", "name", "inputs", "outputs", "output_structure",
                         "nodes", "id", "op", "shape", "dtype", "attrs", "args", "src",
                         "__array__", "__graph__", "data", "equation", "axes", "value"])


@FUZZ
@given(st.dictionaries(_keys, _json, max_size=8) | _json)
def test_fuzzed_random_documents_only_raise_graph_error(doc):
    try:
        serialize.graph_from_json(json.dumps(doc))
    except go.GraphError:
        pass


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


@FUZZ
@given(graphs(max_nodes=8), st.data())
def test_fuzzed_mutated_documents_only_raise_graph_error(g, data):
    doc = serialize.graph_to_dict(g.to_ir())
    for _ in range(data.draw(st.integers(1, 3), label="n_mutations")):
        paths = [p for p in _paths(doc) if p]
        path = data.draw(st.sampled_from(paths), label="path")
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        action = data.draw(st.sampled_from(["replace", "delete", "bump", "duplicate"]))
        key = path[-1]
        if action == "replace":
            parent[key] = data.draw(_json, label="value")
        elif action == "delete":
            del parent[key]
        elif action == "bump" and isinstance(parent[key], int) and not isinstance(parent[key],
                                                                                  bool):
            parent[key] += data.draw(st.sampled_from([-1, 1, 2**40]))
        elif action == "duplicate" and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
    try:
        H = serialize.graph_from_json(json.dumps(doc))
    except go.GraphError:
        return
    ir.verify(H)  # whatever loads is a valid IR
    ir.structural_hash(H)


# ------------------------------------------------------------------------------ atomic save


def test_save_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "g.json"
    go.save(sample_graph(), path)
    before = path.read_bytes()
    G = sample_graph().to_ir()
    G.nodes[G.graph["outputs"][0]]["attrs"]["junk"] = object()  # not serializable
    with pytest.raises(go.GraphError, match="cannot serialize"):
        go.save(G, path)
    assert path.read_bytes() == before

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    g2 = go.Graph("other")
    g2.output(g2.input("q", (1,)) + 1)
    with pytest.raises(OSError, match="disk full"):
        go.save(g2, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.json"]


def test_write_atomic_takes_another_temporary_name_where_its_own_is_taken(tmp_path,
                                                                          monkeypatch):
    """A temporary file of the same name left by a crashed writer (a process id reused) is
    neither written through nor removed: the text goes through ``mkstemp``'s name, and the
    file is its owner's alone."""
    import itertools
    import stat
    import threading

    from graphopt.frontend import serialize

    monkeypatch.setattr(serialize, "_temp_names", itertools.repeat(7))
    path = tmp_path / "entry.json"
    left = tmp_path / f"entry.json.{os.getpid()}-{threading.get_ident()}-7.tmp"
    left.write_text("a crashed writer's")
    serialize.write_atomic(str(path), '{"é": 1}')
    assert path.read_text(encoding="utf-8") == '{"é": 1}'
    assert left.read_text() == "a crashed writer's"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, left.name])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    serialize.write_atomic(str(path), "[]")     # over an existing file, the same way
    assert path.read_text() == "[]"
    # a link planted at the temporary name is not written through
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    left.unlink()
    left.symlink_to(victim)
    serialize.write_atomic(str(path), "{}")
    assert victim.read_text() == "untouched" and path.read_text() == "{}"
    assert left.is_symlink()
