"""The CSE pass: one node per distinct computation.

Two nodes are the same computation when their canonical keys are equal (``node_key``): op,
attributes, shape, dtype and operands, where

- an einsum is keyed by ``einsum.canonical_form``, so operand order and label names do not
  hide a duplicate: ``ij,jk->ik`` on (a, b), ``jk,ij->ik`` on (b, a) and ``xy,yz->xz`` on
  (a, b) are one node;
- a commutative elementwise op (``ops.OpDef.commutative``) ignores operand order, except
  ``maximum``/``minimum`` on floats: NumPy returns ``maximum(-0.0, 0.0) = 0.0`` but
  ``maximum(0.0, -0.0) = -0.0``, so swapping them is not exact; non-commutative ops with
  swapped operands never merge;
- constants are keyed by dtype, shape and bytes (bit-exact: 0.0 and -0.0 stay apart);
- inputs never merge (they are the plan's signature);
- attributes that do not change the value (an einsum's ``path``/``slices``, a fused group's
  ``srcs``) are ignored.

Nodes are visited in topological order and each duplicate is replaced by the first node
with its key at once, so operands are always representatives and one pass reaches the fixed
point. Details: ``merged``, the ``(kept, removed)`` pairs in the order merged.
"""

from __future__ import annotations

import hashlib

import networkx as nx
import numpy as np

from .. import ir
from ..ir import einsum as einsum_mod
from ..ir import ops
from ..ir.core import (
    _attr_token,  # the structural hash's own attribute encoding: CSE agrees with it
)
from .manager import PassResult, register_pass

IGNORED_ATTRS = frozenset({"contraction"}) | ir.SOURCE_ATTRS
SIGNED_ZERO_ORDERED = frozenset({"maximum", "minimum"})


def _const_bytes(G, n) -> bytes:
    return np.ascontiguousarray(G.nodes[n]["attrs"]["value"]).tobytes()


def node_key(G: nx.MultiDiGraph, n: int):
    """The canonical key of node ``n`` over its operand ids as they are; None for inputs.

    Equal keys mean the nodes compute the same value (for constants: the same digest of
    the bytes; ``cse`` compares the bytes themselves before merging)."""
    d = G.nodes[n]
    op = d["op"]
    if op == "input":
        return None
    args = ir.operands(G, n)
    attrs = {k: v for k, v in d["attrs"].items() if k not in IGNORED_ATTRS}
    head = (op, tuple(d["shape"]), d["dtype"])
    if op == "const":
        return head + (hashlib.sha256(_const_bytes(G, n)).hexdigest(),)
    if op == "einsum":
        order, equation = einsum_mod.canonical_form(attrs.pop("equation"), args)
        return head + (equation, _attr_token(attrs), tuple(args[i] for i in order))
    if ops.OPS[op].commutative and not (op in SIGNED_ZERO_ORDERED and
                                        np.dtype(d["dtype"]).kind in "fc"):
        args = sorted(args)
    return head + (_attr_token(attrs), tuple(args))


@register_pass("cse")
def cse(G: nx.MultiDiGraph, ctx) -> PassResult:
    """Merge structurally equal nodes (module docstring); ``G`` is not modified.

    Uses of a removed node, graph outputs included, go to the node kept."""
    H = ir.copy_graph(G)
    first: dict = {}
    merged: list[tuple[int, int]] = []
    for n in ir.topo_order(H):
        key = node_key(H, n)
        if key is None:
            continue
        kept = first.setdefault(key, n)
        if kept == n or (H.nodes[n]["op"] == "const" and
                         _const_bytes(H, n) != _const_bytes(H, kept)):
            continue
        ir.replace_uses(H, n, kept)
        H.remove_node(n)
        merged.append((kept, n))
    if merged:
        ir.drop_derived(H)
    return PassResult(H, {"merged": merged})
