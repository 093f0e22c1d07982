"""Graph <-> JSON. Versioned, validated on load, never pickle, never evaluated.

Format (``"format": "graphopt.graph"``, ``"version": 1``)::

    {"format": "graphopt.graph", "version": 1, "name": str,
     "inputs": [id, ...], "outputs": [id, ...],
     "output_structure": {"kind": "tensor" | "tuple" | "list" | "dict", "keys": [...]?},
     "nodes": [{"id": int, "op": str, "shape": [int], "dtype": str, "attrs": {...},
                "args": [operand id, ...], "name": str?, "src": str?}, ...]}

Attribute values are JSON scalars and lists (read back as tuples); an array is
``{"__array__": {"dtype", "shape", "data": base64 of little-endian bytes}}``; a fused
sub-graph is ``{"__graph__": <a document of this format>}``.
"""

from __future__ import annotations

import base64
import itertools
import json
import math
import os
import tempfile
import threading

import networkx as nx
import numpy as np

from .. import ir
from ..contraction.value import Contraction
from ..errors import GraphError, InputError
from ..ir import ops
from ..runtime import signature

FORMAT = "graphopt.graph"
VERSION = 1
MAX_DEPTH = 16


# ------------------------------------------------------------------------------------ save

def _encode_attr(v):
    if isinstance(v, nx.MultiDiGraph):
        return {"__graph__": graph_to_dict(v)}
    if isinstance(v, Contraction):
        return {"__contraction__": v.to_dict()}
    if isinstance(v, (np.ndarray, np.generic)):
        a = np.asarray(v)  # not ascontiguousarray: it turns a 0-d array into shape (1,)
        le = a.astype(a.dtype.newbyteorder("<"), copy=False)
        return {"__array__": {"dtype": a.dtype.name, "shape": list(a.shape),
                              "data": base64.b64encode(le.tobytes()).decode("ascii")}}
    if isinstance(v, dict):
        return {str(k): _encode_attr(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_encode_attr(x) for x in v]
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    raise GraphError(f"cannot serialize attribute value of type {type(v).__name__}")


def graph_to_dict(G: nx.MultiDiGraph) -> dict:
    """The IR as a JSON-ready document (nodes in topological order)."""
    nodes = []
    for n in ir.topo_order(G):
        d = G.nodes[n]
        entry = {"id": n, "op": d["op"], "shape": list(d["shape"]), "dtype": d["dtype"],
                 "attrs": _encode_attr(d["attrs"]), "args": ir.operands(G, n)}
        if d.get("name") is not None:
            entry["name"] = d["name"]
        if d.get("src") is not None:
            entry["src"] = d["src"]
        nodes.append(entry)
    return {"format": FORMAT, "version": VERSION, "name": G.graph.get("name", "graph"),
            "inputs": list(G.graph["inputs"]), "outputs": list(G.graph["outputs"]),
            "output_structure": dict(G.graph.get("output_structure", {"kind": "tensor"})),
            "nodes": nodes}


def graph_to_json(G: nx.MultiDiGraph) -> str:
    """The IR as JSON text (``graph_to_dict``)."""
    return json.dumps(graph_to_dict(G), indent=1, allow_nan=False)


def save(graph, path) -> None:
    """Write a ``go.Graph``, an IR graph or a ``Plan``'s graph (the one it was compiled
    from: ``go.compile(go.load(path))`` builds the plan again, its kernels from the disk
    cache) to ``path`` as JSON (atomically)."""
    from ..runtime.plan import Plan
    from .graph import Graph

    if isinstance(graph, Graph):
        G = graph.to_ir()
    elif isinstance(graph, Plan):
        G = graph.source_graph
    elif isinstance(graph, nx.MultiDiGraph):
        G = graph
    else:
        raise GraphError(f"go.save takes a go.Graph, an IR graph or a Plan, got "
                         f"{type(graph).__name__}")
    write_atomic(os.fspath(path), graph_to_json(G))


# A temporary file's flags: created here or not at all (never through a link someone left)
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
_temp_names = itertools.count()


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory and a
    rename: nothing is ever partially written, and on failure ``path`` is untouched. The
    temporary file is named by process, thread and a count (``tempfile.mkstemp``'s first
    random name costs a process more, and a contraction path's cache entry is written on a
    network's first compile), by ``mkstemp`` where that name is taken or too long; either
    is made readable by its owner only."""
    tmp = f"{path}.{os.getpid()}-{threading.get_ident()}-{next(_temp_names)}.tmp"
    try:
        fd = os.open(tmp, _TEMP_FLAGS, 0o600)
    except OSError:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


# ------------------------------------------------------------------------------------ load

def _bad(msg) -> InputError:
    return InputError(f"malformed graph document: {msg}")


def _expect(cond, msg):
    if not cond:
        raise _bad(msg)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _decode_array(spec) -> np.ndarray:
    _expect(isinstance(spec, dict) and set(spec) == {"dtype", "shape", "data"},
            "__array__ needs exactly dtype, shape, data")
    dtype = ops.canonical_dtype(spec["dtype"]) if isinstance(spec["dtype"], str) else None
    _expect(dtype is not None, "__array__ dtype must be a dtype name")
    shape = spec["shape"]
    _expect(isinstance(shape, list) and all(_is_int(d) and 0 <= d < 2**31 for d in shape),
            "__array__ shape must be a list of non-negative ints")
    _expect(isinstance(spec["data"], str), "__array__ data must be a base64 string")
    try:
        raw = base64.b64decode(spec["data"].encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise _bad("__array__ data is not valid base64") from None
    dt = np.dtype(dtype).newbyteorder("<")
    _expect(len(raw) == math.prod(shape) * dt.itemsize,
            f"__array__ data has {len(raw)} bytes, shape {shape} {dtype} needs "
            f"{math.prod(shape) * dt.itemsize}")
    arr = np.frombuffer(raw, dtype=dt).astype(np.dtype(dtype)).reshape(shape)
    arr.setflags(write=False)
    return arr


def _decode_attr(v, depth):
    if isinstance(v, dict):
        if "__array__" in v:
            _expect(len(v) == 1, "__array__ must be the only key")
            return _decode_array(v["__array__"])
        if "__graph__" in v:
            _expect(len(v) == 1, "__graph__ must be the only key")
            return dict_to_graph(v["__graph__"], depth + 1)
        if "__contraction__" in v:
            _expect(len(v) == 1 and isinstance(v["__contraction__"], dict),
                    "__contraction__ must be the only key, an object")
            try:
                return Contraction.from_dict(v["__contraction__"])
            except GraphError as e:
                raise _bad(e.detail) from None
        return {k: _decode_attr(x, depth) for k, x in v.items()}
    if isinstance(v, list):
        return tuple(_decode_attr(x, depth) for x in v)
    if isinstance(v, float):
        _expect(math.isfinite(v), "non-finite float attribute")
    _expect(v is None or isinstance(v, (bool, int, float, str)),
            f"attribute value of type {type(v).__name__}")
    return v


def dict_to_graph(doc, depth: int = 0) -> nx.MultiDiGraph:
    """Build and verify an IR from a parsed document; raises ``GraphError`` if malformed."""
    _expect(depth <= MAX_DEPTH, "fused sub-graphs nested too deeply")
    _expect(isinstance(doc, dict), "the document must be a JSON object")
    _expect(doc.get("format") == FORMAT, f"'format' must be {FORMAT!r}")
    _expect(doc.get("version") == VERSION,
            f"unsupported version {doc.get('version')!r} (this graphopt reads {VERSION})")
    for k in ("inputs", "outputs", "nodes"):
        _expect(isinstance(doc.get(k), list), f"{k!r} must be a list")
    name = doc.get("name", "graph")
    _expect(isinstance(name, str), "'name' must be a string")
    struct = doc.get("output_structure", {"kind": "tensor"})
    try:
        leaves = signature.structure_leaves(struct)
    except GraphError as e:
        raise _bad(e.detail) from None
    _expect(leaves == len(doc["outputs"]),
            f"output_structure arranges {leaves} output(s), 'outputs' lists "
            f"{len(doc['outputs'])} (a tensor output_structure has exactly one output)")

    G = ir.new_graph(name)
    G.graph["output_structure"] = struct
    seen: set[int] = set()
    for i, nd in enumerate(doc["nodes"]):
        _expect(isinstance(nd, dict), f"node #{i} must be an object")
        nid = nd.get("id")
        _expect(_is_int(nid) and nid >= 0, f"node #{i} id must be a non-negative int")
        _expect(nid not in seen, f"duplicate node id {nid}")
        op = nd.get("op")
        _expect(isinstance(op, str) and op in ops.OPS, f"node {nid}: unknown op {op!r}")
        shape = nd.get("shape")
        _expect(isinstance(shape, list) and all(_is_int(d) and 0 <= d < 2**40 for d in shape),
                f"node {nid}: shape must be a list of non-negative ints")
        _expect(isinstance(nd.get("dtype"), str), f"node {nid}: dtype must be a string")
        attrs = nd.get("attrs", {})
        _expect(isinstance(attrs, dict), f"node {nid}: attrs must be an object")
        args = nd.get("args", [])
        _expect(isinstance(args, list) and all(_is_int(a) and a in seen for a in args),
                f"node {nid}: args must list ids of earlier nodes")
        for k in ("name", "src"):
            _expect(nd.get(k) is None or isinstance(nd[k], str),
                    f"node {nid}: {k} must be a string")
        G.add_node(nid, op=op, shape=tuple(shape), dtype=ops.canonical_dtype(nd["dtype"]),
                   attrs=_decode_attr(attrs, depth), src=nd.get("src"))
        if nd.get("name") is not None:
            G.nodes[nid]["name"] = nd["name"]
        for k, u in enumerate(args):
            G.add_edge(u, nid, arg=k)
        seen.add(nid)
    G.graph["next_id"] = max(seen, default=-1) + 1
    for k in ("inputs", "outputs"):
        _expect(all(_is_int(x) and x in seen for x in doc[k]), f"{k!r} must list node ids")
    _expect(len(set(doc["inputs"])) == len(doc["inputs"]), "'inputs' repeats a node")
    G.graph["inputs"] = list(doc["inputs"])
    G.graph["outputs"] = list(doc["outputs"])
    names = [G.nodes[i].get("name") for i in G.graph["inputs"]]
    _expect(all(isinstance(n, str) and n.isidentifier() for n in names) and
            len(set(names)) == len(names), "inputs need distinct identifier names")
    ir.verify(G)
    return G


def graph_from_json(text: str) -> nx.MultiDiGraph:
    """The IR from JSON text, verified; ``GraphError`` for a malformed document."""
    try:
        doc = json.loads(text)
    except (TypeError, ValueError, RecursionError) as e:
        raise _bad(f"not valid JSON: {e}") from None
    try:
        return dict_to_graph(doc)
    except GraphError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError, RecursionError,
            MemoryError) as e:
        # Validation above should catch every malformed document; this keeps any case it
        # missed a GraphError, never a crash.
        raise _bad(f"{type(e).__name__}: {e}") from None


def load(path):
    """Read a graph saved by ``go.save``; returns a ``go.Graph`` ready for ``go.compile``."""
    from .graph import Graph

    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _bad(f"{os.fspath(path)!r} is not UTF-8 text: {e}") from None
    G = graph_from_json(text)
    g = Graph(G.graph.get("name"))
    g._G = G
    g._names = {G.nodes[i]["name"] for i in G.graph["inputs"]}
    return g
