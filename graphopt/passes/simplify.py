"""The simplify pass: local rewrites that keep every value's shape, dtype and meaning.

Rules (``details["rules"]`` counts each one applied; ``details["rewrites"]`` lists
``(node, op before, rule)`` in the order applied):

- ``const_fold``: a node whose operands are all constants is evaluated by the interpreter
  (``interpreter.eval_node``) and becomes a ``const``, unless its value would exceed
  ``fold_limit_bytes`` (1 MiB; ``ctx.options["fold_limit_bytes"]``): a scalar broadcast to a
  huge shape never becomes a huge constant. Those, and folds the interpreter refused
  (value-dependent errors, left for run time), are listed in ``details["not_folded"]``.
- ``einsum_relabel``: labels renamed in order of first appearance (``ab,bc->ac``). Operand
  order is kept: in a many-operand einsum it is the user's contraction order, which the
  contraction pass compares against; CSE sees through operand order by itself.
- ``einsum_to_transpose``: a one-operand einsum that only permutes axes becomes ``transpose``
  (the canonical choice: a layout op is a view on every backend and fusion indexes through
  it); one that permutes nothing becomes its operand (``identity_layout``).
- ``transpose_into_einsum``: a transposed einsum operand becomes a relabeled operand.
- ``einsum_transpose_output``: ``transpose(einsum)`` where the einsum has no other live use
  becomes one einsum with a permuted output.
- ``transpose_chain``, ``reshape_chain``, ``broadcast_chain``: a layout op of the same layout
  op composes into one; ``identity_layout``: one that changes nothing vanishes.
- ``identity``: ``x*1``, ``1*x``, ``x+0``, ``0+x``, ``x-0``, ``x/1``, ``x**1``, ``astype`` to
  the operand's dtype, ``where`` on a constant condition or on equal branches,
  ``maximum(x, x)``, ``minimum(x, x)``, ``neg(neg(x))``, ``conj(conj(x))``.
- ``sub_self``: ``x - x`` -> 0, integers only. ``pow_square``: ``x**2`` -> ``square(x)``.

A rewrite that would drop an operand's computation (``where`` on a constant condition,
``sub_self``) is not made where that computation may raise (an integer to a possibly
negative integer power, ``_may_raise``): NumPy evaluates every operand, and so raises.

Exactness: every rewrite keeps the node's shape and dtype (re-inferred and compared before
the rewrite): ``x*1`` that broadcasts ``x`` to a larger shape or promotes its dtype stays.
Floats keep IEEE semantics, signed zeros included: ``x + 0`` is exact only when the zero is
-0.0 (``-0.0 + 0.0`` is ``+0.0``) and ``x - 0`` only when it is +0.0; ``x - x`` is never
rewritten for floats (``inf - inf`` is nan). For complex values ``x*1``, ``x/1``, ``x**1`` and
``x**2 -> square`` are not exact (NumPy gives ``(inf+0j)*(1+0j) = inf+nanj``) and stay.
The einsum rewrites are exact as math, but ``numpy.einsum`` may evaluate a relabeled
equation in another order (e.g. summing a label out of one operand first): results agree
to rounding and, with infinities among the operands, differ as any reassociation can.

Intermediates that a rewrite left without uses are removed (``details["removed"]``); dead
code that was already there is left to ``dce``.
"""

from __future__ import annotations

import warnings
from collections import Counter

import networkx as nx
import numpy as np

from .. import ir
from ..contraction.value import Contraction
from ..errors import GraphError
from ..ir import einsum as einsum_mod
from ..ir import ops
from ..ir.interpreter import eval_node
from .dce import live_nodes
from .manager import PassResult, register_pass

FOLD_LIMIT_BYTES = 1 << 20
# Rewrites only shrink or canonicalize, so sweeps converge; these bound a rule bug.
MAX_SWEEPS = 32
MAX_REWRITES_PER_NODE = 64


class _Run:
    """One run's bookkeeping: the graph being rewritten and what was done to it."""

    def __init__(self, H: nx.MultiDiGraph, fold_limit: int):
        self.H = H
        self.fold_limit = fold_limit
        # Rewrites only reroute uses to values already live, so dead stays dead: uses by
        # dead nodes (dce's to remove) need not block a rewrite.
        self.dead = set(H) - live_nodes(H)
        self.rules: Counter = Counter()
        self.rewrites: list[tuple[int, str, str]] = []
        self.not_folded: dict[int, tuple[int, str, str]] = {}
        self.removed: list[tuple[int, str]] = []

    # -- editing ------------------------------------------------------------------------
    def fits(self, n: int, op: str, args: list[int], attrs: dict) -> bool:
        """Would ``op(args)`` have exactly ``n``'s shape and dtype?"""
        H = self.H
        try:
            shape, dtype = ops.infer(op, [H.nodes[u]["shape"] for u in args],
                                     [H.nodes[u]["dtype"] for u in args], attrs)
        except GraphError:
            return False
        return shape == tuple(H.nodes[n]["shape"]) and dtype == H.nodes[n]["dtype"]

    def same_type(self, n: int, m: int) -> bool:
        a, b = self.H.nodes[n], self.H.nodes[m]
        return tuple(a["shape"]) == tuple(b["shape"]) and a["dtype"] == b["dtype"]

    def rewrite(self, n: int, op: str, args: list[int], attrs: dict) -> None:
        """Turn ``n`` in place into ``op(args)``; its id, uses and source line stay."""
        H = self.H
        old = ir.operands(H, n)
        H.remove_edges_from(list(H.in_edges(n, keys=True)))
        for k, u in enumerate(args):
            H.add_edge(u, n, arg=k)
        H.nodes[n]["op"], H.nodes[n]["attrs"] = op, attrs
        if op == "einsum" and "contraction" in attrs:
            # the contraction follows its node: along its path, over the new operands
            H.nodes[n]["attrs"] = dict(attrs, contraction=Contraction.of_node(H, n))
        self.prune(old)

    def replace(self, n: int, m: int) -> None:
        """Every use of ``n`` (graph outputs included) becomes a use of ``m``; ``n`` goes."""
        ir.replace_uses(self.H, n, m)
        self.prune([n])

    def prune(self, candidates) -> None:
        """Remove candidates (and then their operands) that are left without any use."""
        H, outs = self.H, set(self.H.graph["outputs"])
        stack = list(candidates)
        while stack:
            u = stack.pop()
            if u not in H or H.out_degree(u) or u in outs or H.nodes[u]["op"] == "input":
                continue
            stack.extend(ir.operands(H, u))
            self.removed.append((u, H.nodes[u]["op"]))
            H.remove_node(u)

    def only_use(self, u: int, n: int) -> bool:
        """Is ``n`` the one live use of ``u`` (and ``u`` no graph output)?"""
        uses = [v for _, v in self.H.out_edges(u) if v not in self.dead]
        return uses == [n] and u not in self.H.graph["outputs"]


def _const_value(H, u):
    return np.asarray(H.nodes[u]["attrs"]["value"]) if H.nodes[u]["op"] == "const" else None


# ------------------------------------------------------------------------------- folding


def _const_fold(r: _Run, n: int) -> str | None:
    H = r.H
    args = ir.operands(H, n)
    if not args or any(H.nodes[u]["op"] != "const" for u in args):
        return None
    size = ir.nbytes(H, n)
    if size > r.fold_limit:
        r.not_folded[n] = (n, H.nodes[n]["op"], f"{size} bytes > limit {r.fold_limit}")
        return None
    try:
        value = eval_node(H, n, [_const_value(H, u) for u in args])
    except Exception as e:  # value-dependent (e.g. int ** -1): fails the same way at run time
        r.not_folded[n] = (n, H.nodes[n]["op"], f"{type(e).__name__}: {e}")
        return None
    value = np.array(value, copy=True, order="C")
    value.setflags(write=False)
    r.rewrite(n, "const", [], {"value": value})
    return "const_fold"


# -------------------------------------------------------------------------------- layout


def _layout_chain(r: _Run, n: int) -> str | None:
    H = r.H
    d = H.nodes[n]
    op, (x,) = d["op"], ir.operands(H, n)
    key = "axes" if op == "transpose" else "shape"
    new = tuple(d["attrs"][key])
    if (new == tuple(range(len(new))) if op == "transpose" else new == tuple(H.nodes[x]["shape"])):
        if r.same_type(n, x):
            r.replace(n, x)
            return "identity_layout"
    xd = H.nodes[x]
    if xd["op"] == op:
        inner = tuple(xd["attrs"][key])
        composed = tuple(inner[a] for a in new) if op == "transpose" else new
        (y,) = ir.operands(H, x)
        if r.fits(n, op, [y], {key: composed}):
            r.rewrite(n, op, [y], {key: composed})
            return {"transpose": "transpose_chain", "reshape": "reshape_chain",
                    "broadcast_to": "broadcast_chain"}[op]
    if op == "transpose" and xd["op"] == "einsum" and r.only_use(x, n):
        ins, out = einsum_mod.split(xd["attrs"]["equation"])
        attrs = dict(xd["attrs"], equation=",".join(ins) + "->" + "".join(out[a] for a in new))
        args = ir.operands(H, x)
        if r.fits(n, "einsum", args, attrs):
            d["src"] = xd["src"]  # the work is the einsum's
            r.rewrite(n, "einsum", args, attrs)
            return "einsum_transpose_output"
    return None


# -------------------------------------------------------------------------------- einsum


def _einsum_transposed_operands(r: _Run, n: int) -> str | None:
    H = r.H
    d = H.nodes[n]
    args = ir.operands(H, n)
    ins, out = einsum_mod.split(d["attrs"]["equation"])
    if not any(H.nodes[u]["op"] == "transpose" for u in args):
        return None
    for k, u in enumerate(args):
        if H.nodes[u]["op"] == "transpose":
            # Dim i of the transpose is dim axes[i] of its operand: that dim gets label i.
            term = [""] * len(ins[k])
            for i, a in enumerate(H.nodes[u]["attrs"]["axes"]):
                term[a] = ins[k][i]
            ins[k], args[k] = "".join(term), ir.operands(H, u)[0]
    attrs = dict(d["attrs"], equation=",".join(ins) + "->" + out)
    if not r.fits(n, "einsum", args, attrs):
        return None
    r.rewrite(n, "einsum", args, attrs)
    return "transpose_into_einsum"


def _einsum_permutation(r: _Run, n: int) -> str | None:
    H = r.H
    args = ir.operands(H, n)
    ins, out = einsum_mod.split(H.nodes[n]["attrs"]["equation"])
    if len(args) != 1 or len(set(ins[0])) != len(ins[0]) or sorted(ins[0]) != sorted(out):
        return None
    if ins[0] == out:
        if r.same_type(n, args[0]):
            r.replace(n, args[0])
            return "identity_layout"
        return None
    attrs = {"axes": tuple(ins[0].index(c) for c in out)}
    if not r.fits(n, "transpose", args, attrs):
        return None
    r.rewrite(n, "transpose", args, attrs)
    return "einsum_to_transpose"


def _einsum_relabel(r: _Run, n: int) -> str | None:
    d = r.H.nodes[n]
    eq = d["attrs"]["equation"]
    new = einsum_mod.canonical_labels(*einsum_mod.split(eq))
    # Past 75 labels opt_einsum's symbols include non-letters ('×'), which the IR rejects.
    if new == eq or not all(einsum_mod.is_ir_label(c) for c in set(new) - set(",->")):
        return None
    mapping = dict(zip(eq, new))
    attrs = dict(d["attrs"], equation=new)
    if "contraction" in attrs:  # its labels (the sliced ones too) follow the renaming
        attrs["contraction"] = attrs["contraction"].relabeled(mapping)
    d["attrs"] = attrs
    return "einsum_relabel"


# ---------------------------------------------------------------------------- algebra


def _neutral(op: str, value: np.ndarray, dtype: str) -> bool:
    """Is ``value`` (cast to the result dtype) an exact right identity of ``op``?"""
    kind = np.dtype(dtype).kind
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        v = value.astype(dtype)
    if op in ("mul", "div", "pow"):
        return kind != "c" and bool(np.all(v == 1))
    if not np.all(v == 0):
        return False
    if kind in "biu":
        return True
    signs = [np.signbit(v.real)] + ([np.signbit(v.imag)] if kind == "c" else [])
    if op == "add":  # only -0.0 keeps a -0.0 operand negative
        return all(bool(np.all(s)) for s in signs)
    return not any(bool(np.any(s)) for s in signs)  # sub: x - (+0.0) is x, -0.0 included


# Positions at which a constant operand can be an identity of the op.
_IDENTITY_POSITIONS = {"mul": (1, 0), "add": (1, 0), "sub": (1,), "div": (1,), "pow": (1,)}


def _may_raise(H, u: int) -> bool:
    """Whether computing ``u`` may raise on some inputs: NumPy refuses an integer to a
    negative integer power, the one error an op's values can cause. A rewrite that would
    drop ``u``'s computation keeps it then: the graph raises where NumPy, evaluating every
    operand, raises."""
    for m in nx.ancestors(H, u) | {u}:
        if H.nodes[m]["op"] != "pow":
            continue
        base, power = ir.operands(H, m)
        if np.dtype(H.nodes[base]["dtype"]).kind in "iu" and \
                np.dtype(H.nodes[power]["dtype"]).kind == "i":
            c = _const_value(H, power)
            if c is None or (c < 0).any():
                return True
    return False


def _algebra(r: _Run, n: int) -> str | None:
    H = r.H
    d = H.nodes[n]
    op, args = d["op"], ir.operands(H, n)
    target = None
    if op == "astype" and H.nodes[args[0]]["dtype"] == d["dtype"]:
        target = args[0]
    elif op in ("neg", "conj") and H.nodes[args[0]]["op"] == op:
        target = ir.operands(H, args[0])[0]
    elif op in ("maximum", "minimum") and args[0] == args[1]:
        target = args[0]
    elif op == "where":
        cond = _const_value(H, args[0])
        if args[1] == args[2]:
            target = args[1]
        elif cond is not None and cond.astype(bool).all() and not _may_raise(H, args[2]):
            target = args[1]
        elif cond is not None and not cond.astype(bool).any() and not _may_raise(H, args[1]):
            target = args[2]
    elif op in _IDENTITY_POSITIONS:
        for k in _IDENTITY_POSITIONS[op]:
            c = _const_value(H, args[k])
            if c is not None and r.same_type(n, args[1 - k]) and _neutral(op, c, d["dtype"]):
                target = args[1 - k]
                break
    if target is not None and r.same_type(n, target):
        r.replace(n, target)
        return "identity"
    kind = np.dtype(d["dtype"]).kind
    if op == "sub" and args[0] == args[1] and kind in "iu" and not _may_raise(H, args[0]):
        zero = np.zeros(d["shape"], d["dtype"])
        if zero.nbytes <= r.fold_limit:
            zero.setflags(write=False)
            r.rewrite(n, "const", [], {"value": zero})
        else:
            z = ir.add_node(H, "const", [], (), d["dtype"],
                            {"value": np.zeros((), d["dtype"])}, src=d["src"])
            r.rewrite(n, "broadcast_to", [z], {"shape": tuple(d["shape"])})
        return "sub_self"
    if op == "pow" and kind in "biuf":
        c = _const_value(H, args[1])
        if c is not None and np.all(c == 2) and r.fits(n, "square", args[:1], {}):
            r.rewrite(n, "square", args[:1], {})
            return "pow_square"
    return None


# ---------------------------------------------------------------------------------- pass


_LAYOUT = (_const_fold, _layout_chain)
_EINSUM = (_const_fold, _einsum_transposed_operands, _einsum_permutation, _einsum_relabel)
_ELEMENTWISE = (_const_fold, _algebra)


def _rules(op: str) -> tuple:
    if op in ("input", "const"):
        return ()
    if op in ("transpose", "reshape", "broadcast_to"):
        return _LAYOUT
    if op == "einsum":
        return _EINSUM
    if ops.OPS[op].kind == ops.ELEMENTWISE:
        return _ELEMENTWISE
    return (_const_fold,)


def _simplify_node(r: _Run, n: int) -> bool:
    changed = False
    for _ in range(MAX_REWRITES_PER_NODE):
        if n not in r.H:
            break
        op = r.H.nodes[n]["op"]
        applied = next((name for rule in _rules(op) if (name := rule(r, n))), None)
        if applied is None:
            break
        r.rules[applied] += 1
        r.rewrites.append((n, op, applied))
        changed = True
    return changed


@register_pass("simplify", options=("fold_limit_bytes",))
def simplify(G: nx.MultiDiGraph, ctx) -> PassResult:
    """Apply the rules above to a fixed point; ``G`` is not modified.

    Details: ``summary`` (one line for the report), ``rules`` (rule -> count),
    ``rewrites`` ((node, op before, rule) in order),
    ``not_folded`` ((node, op, why) for constant subgraphs left unfolded),
    ``fold_limit_bytes``, ``removed`` ((node, op) of intermediates the rewrites orphaned).
    """
    options = getattr(ctx, "options", None) or {}
    r = _Run(ir.copy_graph(G), int(options.get("fold_limit_bytes", FOLD_LIMIT_BYTES)))
    for _ in range(MAX_SWEEPS):
        changed = False
        for n in ir.topo_order(r.H):
            changed |= _simplify_node(r, n)
        if not changed:
            break
    if r.rewrites:
        ir.drop_derived(r.H)
    # Only those still there as they were: a later rule may have rewritten one away.
    not_folded = [v for n, v in r.not_folded.items() if n in r.H and r.H.nodes[n]["op"] == v[1]]
    summary = ", ".join(f"{rule} x{k}" for rule, k in r.rules.most_common()) or "nothing"
    return PassResult(r.H, {"summary": summary, "rules": dict(r.rules), "rewrites": r.rewrites,
                            "not_folded": not_folded,
                            "fold_limit_bytes": r.fold_limit, "removed": r.removed})
