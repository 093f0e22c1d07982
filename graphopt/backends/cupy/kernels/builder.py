"""Sub-graph -> ``GroupProgram``: which nodes become stages, what folds into a reduction's
post-map or a GEMM's alpha, where the result is written (``compile_group``)."""

from __future__ import annotations

import hashlib
import math

import networkx as nx
import numpy as np

from .... import ir
from ....contraction.rates import DEVICE_RATES
from ....contraction.value import Contraction
from ....ir import ops
from ... import scalar_semantics as ss
from .emitter import StageEmitter, chain_shape, layout_op, normalize_chain
from .expressions import COMPUTE, CTYPES, REDUCE_EXPR, Unsupported, cast, helpers_for, literal
from .program import EinsumStage, ElementwiseStage, GroupProgram, Operand, ReductionStage

# ------------------------------------------------------------------------------ builder


def _kind(G, n) -> str:
    return ops.OPS[G.nodes[n]["op"]].kind


def _is_root(G, n) -> bool:
    k = _kind(G, n)
    return k == ops.CONTRACTION or (k == ops.REDUCTION and bool(G.nodes[n]["attrs"]["axes"]))


class _Builder:
    def __init__(self, G: nx.MultiDiGraph, literals: dict, name: str):
        self.G, self.literals, self.name = G, dict(literals), name
        self.stage_of: dict[int, int] = {}
        self.stages: list = []
        self.constants: list = []
        self._const_ids: dict[int, int] = {}

    def const_index(self, n: int) -> int:
        if n not in self._const_ids:
            self._const_ids[n] = len(self.constants)
            self.constants.append(np.asarray(self.G.nodes[n]["attrs"]["value"]))
        return self._const_ids[n]

    def _leaf(self, u: int) -> tuple[int, tuple]:
        """Follow layout ops down from ``u``: the node that holds the data and the chain."""
        chain: tuple = ()
        while _kind(self.G, u) == ops.LAYOUT:
            chain = (layout_op(self.G.nodes[u]),) + chain
            (u,) = ir.operands(self.G, u)
        return u, chain

    def _operand(self, u: int) -> Operand:
        base, chain = self._leaf(u)
        d = self.G.nodes[base]
        shape = chain_shape(tuple(d["shape"]), chain)
        if base in self.stage_of:
            return Operand("stage", self.stage_of[base], chain, d["dtype"], shape)
        if d["op"] == "input":
            return Operand("input", self.G.graph["inputs"].index(base), chain, d["dtype"], shape)
        if d["op"] == "const":
            return Operand("const", self.const_index(base), chain, d["dtype"], shape)
        raise AssertionError("einsum operands are materialized first")

    def elementwise(self, n: int, leaf_exprs=None) -> ElementwiseStage:
        d = self.G.nodes[n]
        em = StageEmitter(self, tuple(d["shape"]), leaf_exprs)
        v = em.value(n)
        ct = CTYPES[d["dtype"]]
        op = "\n".join(em.lines + [f"out0 = static_cast<{ct}>({v});"])
        return ElementwiseStage(f"{self.name}_s{len(self.stages)}", em.operands,
                                em.params_text(), f"{d['dtype']} out0", op, em.preamble(v),
                                tuple(d["shape"]), d["dtype"])

    def reduction(self, n: int, post_node: int | None = None) -> ReductionStage:
        d = self.G.nodes[n]
        (u,) = ir.operands(self.G, n)
        ud = self.G.nodes[u]
        red, axes = d["op"], tuple(d["attrs"]["axes"])
        rt = d["dtype"]
        reason = ss.refusal(red, [ud["dtype"]])
        if reason:
            raise Unsupported(reason)
        rule = ss.reduction(red, ud["dtype"], rt)
        em = StageEmitter(self, tuple(ud["shape"]))
        v = cast(em.value(u), ud["dtype"], rule.acc)
        if not em.operands:  # nothing but literals: a zero array carries the shape
            em.operands.append(Operand("shape", 0, (), "bool", tuple(ud["shape"])))
        names = ", ".join(f"in{i}" for i in range(len(em.operands)))
        sig = ", ".join(f"const {CTYPES[o.dtype]} in{i}" for i, o in enumerate(em.operands))
        rct = COMPUTE[rule.acc]
        fname = f"{self.name}_map{len(self.stages)}"
        pre = [f"__device__ inline {rct} {fname}({sig}) {{"] + \
              [f"  {line}" for line in em.lines] + [f"  return {v};", "}"]
        reduce_expr = REDUCE_EXPR[rule.combine]
        identity = literal(rule.identity, rule.acc)
        count = math.prod(ud["shape"][a] for a in axes)
        a_expr = cast(f"(a / {literal(count, rule.acc)})" if red == "mean" else "a",
                      rule.acc, rt)
        out_node, out_expr = n, a_expr
        if post_node is not None:
            pem = StageEmitter(self, tuple(self.G.nodes[post_node]["shape"]),
                           {(n, ()): "_r"})
            out_expr = pem.value(post_node)
            post_name = f"{self.name}_post{len(self.stages)}"
            pre += [f"__device__ inline {COMPUTE[self.G.nodes[post_node]['dtype']]} "
                    f"{post_name}(const {rct} a) {{", f"  const {COMPUTE[rt]} _r = {a_expr};"] + \
                   [f"  {line}" for line in pem.lines] + [f"  return {out_expr};", "}"]
            out_node, out_expr = post_node, f"{post_name}(a)"
        od = self.G.nodes[out_node]
        post_map = f"out0 = static_cast<{CTYPES[od['dtype']]}>({out_expr})"
        helpers = helpers_for("\n".join(pre) + reduce_expr + post_map)
        # cupy's CUB path (one contiguous input) names the argument types by these typedefs,
        # which ReductionKernel defines only for generic parameter types.
        helpers = "\n".join([f"typedef {CTYPES[em.operands[0].dtype]} type_in0_raw;",
                             f"typedef {CTYPES[od['dtype']]} type_out0_raw;"] +
                            ([helpers] if helpers else []))
        return ReductionStage(
            f"{self.name}_s{len(self.stages)}", em.operands,
            ", ".join(f"{o.dtype} in{i}" for i, o in enumerate(em.operands)),
            f"{od['dtype']} out0", f"{fname}({names})", reduce_expr,
            post_map, identity, rct,
            (helpers + "\n" if helpers else "") + "\n".join(pre), axes,
            bool(d["attrs"]["keepdims"]), tuple(ud["shape"]), tuple(od["shape"]), od["dtype"])

    def einsum(self, n: int) -> EinsumStage:
        d = self.G.nodes[n]
        # the node's contraction (a group compiled on its own, without the passes: one
        # along the default path by the device's rates)
        value = d["attrs"].get("contraction") or Contraction.of_node(self.G, n, DEVICE_RATES)
        return EinsumStage(f"{self.name}_s{len(self.stages)}", d["attrs"]["equation"],
                           [self._operand(u) for u in ir.operands(self.G, n)],
                           tuple(d["shape"]), d["dtype"], value)

    def add(self, n: int, stage) -> None:
        self.stage_of[n] = len(self.stages)
        self.stages.append(stage)


def _readers(G, n, stop: set) -> set:
    """Materialized nodes (in ``stop``) whose value depends on ``n`` without passing another
    materialized node."""
    out, todo, seen = set(), list(ir.users(G, n)), set()
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in stop:
            out.add(v)
        else:
            todo.extend(ir.users(G, v))
    return out


def compile_group(sub: nx.MultiDiGraph, literals: dict | None = None, aliased=frozenset(),
                  name: str | None = None) -> GroupProgram:
    """Compile a sub-graph (inputs ``in0..``, one output) into a ``GroupProgram``.

    Args:
        literals: input position -> scalar value, inlined into the source (scalar constants
            of the enclosing graph).
        aliased: input positions whose buffer is the step's output buffer (the memory plan
            put the result in place of a dying operand).
        name: kernel name prefix (default: from the structure).

    Raises:
        Unsupported: an op or dtype combination this generator does not emit.
    """
    literals = dict(literals or {})
    if name is None:
        key = ir.structural_hash(sub) + repr(sorted(literals.items(), key=repr))
        name = "go_" + hashlib.sha256(key.encode()).hexdigest()[:10]
    G = sub
    (out,) = G.graph["outputs"]
    order = ir.topo_order(G)
    for n in order:
        if _kind(G, n) == ops.FUSED:
            raise Unsupported("a fused node inside a fused group")
        reason = ss.dtype_refusal(G.nodes[n]["dtype"])
        if reason:
            raise Unsupported(f"{G.nodes[n]['op']}: {reason}")
    p = _Builder(G, literals, name)
    roots = [n for n in order if _is_root(G, n)]
    mat = set(roots)
    for r in roots:  # an einsum reads arrays: materialize computed operands first
        if _kind(G, r) == ops.CONTRACTION:
            for u in ir.operands(G, r):
                base, _ = p._leaf(u)
                if G.nodes[base]["op"] not in ("input", "const"):
                    mat.add(base)
    for n in [m for m in order if m in mat]:
        if _kind(G, n) == ops.CONTRACTION:
            p.add(n, p.einsum(n))
        elif _kind(G, n) == ops.REDUCTION and n != out and _fold_post(G, n, out, mat):
            p.add(out, p.reduction(n, post_node=out))
            break  # the output reads nothing but this reduction
        elif _kind(G, n) == ops.REDUCTION:
            p.add(n, p.reduction(n))
        else:
            p.add(n, p.elementwise(n))
    if out not in p.stage_of:
        p.add(out, p.elementwise(out))
    stages = p.stages
    last = stages[-1]
    last.dest = "out"
    od = G.nodes[out]
    prog = GroupProgram(name, stages, tuple(od["shape"]), od["dtype"], p.constants)
    if aliased and last.kind != "elementwise":
        prog.via_temp = True
        last.dest = "temp"
    elif not aliased and last.kind == "elementwise" and len(stages) > 1:
        _root_into_out(G, prog)
        _fold_scale(G, prog, out, literals, p.stage_of)
    return prog


def _fold_post(G, r: int, out: int, mat: set) -> bool:
    """The output is elementwise work on reduction ``r`` and literals alone: it becomes the
    reduction's post-map expression."""
    if _readers(G, r, mat | {out}) != {out}:
        return False
    ok = True

    def visit(n, chain):
        nonlocal ok
        if n == r:
            ok &= chain == ()
            return
        d = G.nodes[n]
        k = ops.OPS[d["op"]].kind
        if d["op"] == "input" or (d["op"] == "const" and np.size(d["attrs"]["value"]) != 1):
            ok = False
        elif k == ops.LAYOUT:
            visit(ir.operands(G, n)[0], normalize_chain((layout_op(d),) + chain))
        elif k == ops.ELEMENTWISE or (k == ops.REDUCTION and not d["attrs"]["axes"]):
            for u in ir.operands(G, n):
                pre = (("broadcast_to", tuple(d["shape"])),) if tuple(G.nodes[u]["shape"]) != \
                    tuple(d["shape"]) else ()
                visit(u, normalize_chain(pre + chain))
        elif d["op"] != "const":
            ok = False
    visit(out, ())
    return ok and tuple(G.nodes[r]["shape"]) == tuple(G.nodes[out]["shape"])


def _root_into_out(G, prog: GroupProgram) -> None:
    """Let the stage before the epilogue write the output buffer when the epilogue reads it
    only element for element (same shape and dtype): the epilogue then runs in place."""
    *rest, epi = prog.stages
    r = rest[-1]
    k = len(rest) - 1
    reads = [o for o in epi.operands if o.source == "stage" and o.index == k]
    others = [s for s in rest[:-1] for o in s.operands if o.source == "stage" and o.index == k]
    if (r.kind in ("einsum", "reduction") and tuple(r.shape) == tuple(prog.shape)
            and r.dtype == prog.dtype and reads and all(o.chain == () for o in reads)
            and not others):
        r.dest = "out"


def _fold_scale(G, prog: GroupProgram, out: int, literals: dict, stage_of: dict) -> None:
    """An epilogue that only scales the contraction (``c * k``, ``c / k``, a scalar ``k``)
    becomes the GEMM's ``alpha``: one pass over the output fewer."""
    *rest, epi = prog.stages
    r = rest[-1]
    if r.kind != "einsum" or r.dest != "out" or [o.source for o in epi.operands] != ["stage"]:
        return
    d = G.nodes[out]
    if d["op"] not in ("mul", "div") or np.dtype(d["dtype"]).kind not in "fc":
        return
    a, b = ir.operands(G, out)

    def scalar(n):
        nd = G.nodes[n]
        if nd["op"] == "const" and np.size(nd["attrs"]["value"]) == 1:
            return np.asarray(nd["attrs"]["value"]).reshape(()).item()
        if nd["op"] == "input":
            return literals.get(G.graph["inputs"].index(n))
        return None
    root = next(n for n, i in stage_of.items() if i == len(rest) - 1)
    if d["op"] == "mul" and b == root:
        a, b = b, a
    k = scalar(b)
    if a != root or k is None or G.nodes[b]["dtype"] != d["dtype"]:
        return
    r.alpha = k if d["op"] == "mul" else 1 / k
    prog.stages = rest
