"""Reverse-mode differentiation as a graph transformation: ``backpropagate`` adds the
backward ops to the same ``Graph`` the forward ops are in, so CSE shares forward values with
the backward pass and every later pass (contraction ordering, fusion, memory planning) sees
both as one graph.
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from ... import ir
from ...errors import DTypeError, GraphError
from .. import tensor as T
from ..tensor import Tensor
from .pairwise import split_many_operand_einsum
from .rules import NON_DIFFERENTIABLE, VJP_RULES, Primal

# the dtype kinds a cotangent flows through: float and complex
DIFFERENTIABLE_KINDS = "fc"


def is_differentiable(t: Tensor) -> bool:
    """Does a cotangent flow through ``t`` (a float or complex value)?"""
    return t.dtype.kind in DIFFERENTIABLE_KINDS


def fit_cotangent(ct: Tensor, like: Tensor) -> Tensor:
    """``ct`` as a cotangent of ``like``: summed over the axes broadcasting added or
    stretched, its real part where ``like`` is real and ``ct`` complex, cast to ``like``'s
    dtype. The one place a cotangent meets its operand's shape and dtype."""
    shape = like.shape
    if ct.shape != shape:
        lead = ct.ndim - len(shape)
        axes = tuple(range(lead)) + tuple(
            lead + i for i, d in enumerate(shape) if d == 1 and ct.shape[lead + i] != 1)
        if axes:
            ct = T.sum(ct, axis=axes, keepdims=True)
        ct = T.reshape(ct, shape)
    if ct.dtype.kind == "c" and like.dtype.kind != "c":
        ct = T.real(ct)
    if ct.dtype != like.dtype:
        ct = T.astype(ct, like.dtype)
    return ct


def _relevant(G: nx.MultiDiGraph, seeds, wrt) -> set[int]:
    """Nodes on a path from a ``wrt`` node to a seed (both ends included)."""
    ahead = set(wrt)
    for u in wrt:
        ahead |= nx.descendants(G, u)
    behind = set(seeds)
    for u in seeds:
        behind |= nx.ancestors(G, u)
    return ahead & behind


def backpropagate(seeds: dict[int, Tensor], wrt: list[Tensor]) -> tuple[list, int]:
    """Cotangents of ``wrt`` given cotangents ``seeds`` (node id -> Tensor) of values that
    depend on them, built as ops in the Graph ``wrt`` belong to. A ``wrt`` value no seed
    depends on gets None. Each ``wrt`` value is an independent variable (a partial
    derivative: where one ``wrt`` value is computed from another, that path is not followed
    back). Each new node's ``src`` names the forward op it differentiates.

    Raises:
        GraphError: an op without a VJP rule (a fused group) on the way.
    """
    g = wrt[0].graph
    G = g._G
    relevant = _relevant(G, list(seeds), [t.id for t in wrt])
    split = [n for n in relevant if split_many_operand_einsum(g, n)]
    if split:
        relevant = _relevant(G, list(seeds), [t.id for t in wrt])
    mark = G.graph["next_id"]
    ct: dict[int, Tensor] = dict(seeds)
    stops = {t.id for t in wrt}
    for n in reversed([m for m in ir.topo_order(G) if m in relevant]):
        # a ``wrt`` value is a variable of its own: what it was computed from is held fixed
        if n in ct and n not in stops and G.nodes[n]["op"] not in ("input", "const"):
            _pull_back(g, n, ct, relevant)
    return [ct.get(t.id) for t in wrt], mark


def _pull_back(g, n: int, ct: dict, relevant: set) -> None:
    """Add node ``n``'s VJP to ``g`` and accumulate its operands' cotangents in ``ct``."""
    G = g._G
    d = G.nodes[n]
    if d["op"] in NON_DIFFERENTIABLE:
        return
    rule = VJP_RULES.get(d["op"])
    if rule is None:
        raise GraphError(f"no VJP rule for op {d['op']!r}: differentiate the graph before "
                         "compiling it (fused groups are made by the compiler)", op=d["op"],
                         src=d.get("src"), node=n)
    operand_ids = ir.operands(G, n)
    args = tuple(Tensor(g, u) for u in operand_ids)
    needs = tuple(u in relevant and is_differentiable(a) for u, a in zip(operand_ids, args))
    if not any(needs):
        return
    mark = G.graph["next_id"]
    primal = Primal(args, Tensor(g, n), d["attrs"], needs)
    try:
        with np.errstate(all="ignore"):
            cts = rule(primal, ct[n])
    except GraphError as e:
        raise e.located(op=d["op"], src=d.get("src"), node=n) from None
    for u, a, need, c in zip(operand_ids, args, needs, cts):
        if need and c is not None:
            c = fit_cotangent(c, a)
            ct[u] = c if u not in ct else ct[u] + c
    src = f"{d.get('src') or '<unknown>'} (gradient of {d['op']})"
    for m in range(mark, G.graph["next_id"]):
        if m in G and G.nodes[m]["op"] != "input":
            G.nodes[m]["src"] = src


def seed_for(t: Tensor) -> Tensor:
    """The cotangent 1 of a scalar loss ``t``: real float, as ``jax.grad`` requires.

    Raises:
        GraphError: ``t`` is not a scalar, is complex or is not a float.
    """
    d = t._node
    if t.shape != () or t.dtype.kind != "f":
        kind = ("complex" if t.dtype.kind == "c" else "not a float" if t.dtype.kind != "f"
                else f"not a scalar (shape {t.shape})")
        raise DTypeError(f"grad needs a real float scalar to differentiate; this one is "
                         f"{t.dtype.name} {t.shape}, {kind}. Use go.vjp for other outputs",
                         op=d["op"], src=d.get("src"))
    return t.graph.const(np.ones((), dtype=t.dtype))
