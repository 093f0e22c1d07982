"""A graph's call signature: binding call arguments to its inputs (names, shapes, dtypes,
exact conversion of Python values) and arranging outputs in the structure given to
``g.output``. Used by the interpreter and every plan, so both validate alike."""

from __future__ import annotations

import warnings
from typing import Sequence

import networkx as nx
import numpy as np

from ..errors import GraphError, InputError


def bind_inputs(G: nx.MultiDiGraph, args: Sequence, kwargs: dict) -> list:
    """Match call arguments to the graph's inputs and validate names, shapes and dtypes.

    Arrays must have the declared dtype exactly; Python scalars and lists are converted to
    it. Raises ``InputError`` naming the input, what was expected and what came."""
    ins = G.graph["inputs"]
    names = [G.nodes[i]["name"] for i in ins]
    if len(args) > len(names):
        raise InputError(f"plan takes {len(names)} input(s) {names}, got {len(args)} "
                         "positional arguments")
    bound = dict(zip(names, args))
    for k, v in kwargs.items():
        if k in bound:
            raise InputError(f"input {k!r} given both positionally and by name")
        if k not in names:
            raise InputError(f"unexpected input {k!r}; the plan's inputs are {names}")
        bound[k] = v
    missing = [n for n in names if n not in bound]
    if missing:
        raise InputError(f"missing input(s) {missing}; the plan's inputs are {names}")
    out = []
    for nid, name in zip(ins, names):
        d = G.nodes[nid]
        v = bound[name]
        shape, dtype = tuple(d["shape"]), d["dtype"]
        if not (hasattr(v, "shape") and hasattr(v, "dtype")):
            v = convert_exact(v, dtype, name, d.get("src"))
        elif isinstance(v, np.ndarray) and not v.dtype.isnative:
            v = v.astype(v.dtype.newbyteorder("="))   # byte-swapped: same values, native order
        if tuple(v.shape) != shape or np.dtype(v.dtype).name != dtype:
            fix = (f"; pass {name}.astype(np.{dtype}) (graphopt never casts an input "
                   "silently)" if tuple(v.shape) == shape else "")
            raise InputError(f"input {name!r} expects shape {shape} dtype {dtype}, got shape "
                             f"{tuple(v.shape)} dtype {np.dtype(v.dtype).name}{fix}",
                             op="input", src=d.get("src"))
        out.append(v)
    return out


def convert_exact(v, dtype: str, name: str, src=None) -> np.ndarray:
    """A Python scalar or (nested) list as an array of ``dtype``, only where no value
    changes: ``[1.7]`` into int32, ``2**40`` into int32, ``3`` into bool and strings are
    refused. Python floats may round into a narrower float type (NumPy treats Python scalars
    as weakly typed), but never overflow to inf."""
    def refuse(why):
        return InputError(f"input {name!r}: cannot convert {type(v).__name__} to {dtype} "
                          f"exactly: {why}", op="input", src=src)

    try:
        a = np.asarray(v)
    except (TypeError, ValueError, OverflowError) as e:
        raise refuse(f"{type(e).__name__}: {e}") from None
    if a.dtype.kind not in "biufc":
        raise refuse(f"its values are {a.dtype} (strings and objects are never converted)")
    target = np.dtype(dtype)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = a.astype(target)
        back = c.astype(a.dtype)
    rounding_ok = a.dtype.kind in "fc" and target.kind in "fc" and (a.dtype.kind == "f" or
                                                                    target.kind == "c")
    if rounding_ok:
        bad = np.isfinite(a) & ~np.isfinite(c)
    else:
        bad = ~((back == a) | (np.isnan(a) & np.isnan(back) if a.dtype.kind in "fc" else False))
    if np.any(bad):
        first = a[bad].flat[0] if a.ndim else a[()]
        raise refuse(f"{first!r} does not fit")
    return c


def flatten_outputs(value, leaf) -> tuple[list, dict]:
    """``(leaves, struct)`` of an output value: a leaf (``leaf(v)`` gives its id), or a
    tuple, list or str-keyed dict of output values, nested to any depth. ``struct`` is what
    ``restructure`` takes back; a container holding only leaves has no ``items`` (the form
    graphs saved before nesting have)."""
    if isinstance(value, (tuple, list)):
        parts = [flatten_outputs(v, leaf) for v in value]
        struct = {"kind": type(value).__name__, "length": len(parts)}
    elif isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise GraphError("output dict keys must be str")
        parts = [flatten_outputs(v, leaf) for v in value.values()]
        struct = {"kind": "dict", "keys": list(value)}
    else:
        return [leaf(value)], {"kind": "tensor"}
    if any(p[1]["kind"] != "tensor" for p in parts):
        struct["items"] = [p[1] for p in parts]
    return [x for p in parts for x in p[0]], struct


# nesting an output structure may have (a loaded document is checked against it)
MAX_STRUCTURE_DEPTH = 64


def structure_leaves(struct, depth: int = 0) -> int:
    """How many outputs ``struct`` arranges; ``GraphError`` where it is malformed."""
    if depth > MAX_STRUCTURE_DEPTH:
        raise GraphError(f"output_structure nested deeper than {MAX_STRUCTURE_DEPTH}")
    if not isinstance(struct, dict) or struct.get("kind") not in ("tensor", "tuple", "list",
                                                                  "dict"):
        raise GraphError(f"output_structure.kind must be tensor, tuple, list or dict (in "
                         f"{struct!r})")
    kind = struct["kind"]
    if kind == "tensor":
        return 1
    if kind == "dict":
        keys = struct.get("keys")
        if not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)
                and len(set(keys)) == len(keys)):
            raise GraphError("a dict output_structure needs distinct string keys")
        n = len(keys)
    else:
        n = struct.get("length")
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise GraphError(f"a {kind} output_structure needs a non-negative int length")
    items = struct.get("items")
    if items is None:
        return n
    if not isinstance(items, list) or len(items) != n:
        raise GraphError(f"output_structure items must be a list of {n} structures")
    return sum(structure_leaves(s, depth + 1) for s in items)


def restructure(struct: dict, values: list):
    """Arrange output values in the structure given to ``g.output``."""
    if "items" not in struct:      # flat, as most are: no recursion on a plan call
        return _container(struct, values)
    return _rebuild(struct, iter(values))


def _rebuild(struct: dict, values):
    if struct["kind"] == "tensor":
        return next(values)
    n = len(struct["keys"]) if struct["kind"] == "dict" else struct["length"]
    items = struct.get("items") or [{"kind": "tensor"}] * n
    return _container(struct, [_rebuild(s, values) for s in items])


def _container(struct: dict, parts: list):
    kind = struct["kind"]
    if kind == "tensor":
        return parts[0]
    if kind == "tuple":
        return tuple(parts)
    if kind == "list":
        return list(parts)
    return dict(zip(struct["keys"], parts))
