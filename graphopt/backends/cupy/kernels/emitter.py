"""One stage's body: the C expression of each node, layout ops pushed down to the kernel
arguments as chains of views."""

from __future__ import annotations

import numpy as np

from .... import ir
from ....ir import ops
from ... import scalar_semantics as ss
from .expressions import COMPUTE, Unsupported, cast, helpers_for, literal, op_expr, truth
from .program import Operand

# ------------------------------------------------------------------------------ emitter


def normalize_chain(chain: tuple) -> tuple:
    """Drop trailing broadcasts: the kernel broadcasts every argument to its shape anyway,
    and right-aligned broadcasts compose."""
    chain = list(chain)
    while chain and chain[-1][0] == "broadcast_to":
        chain.pop()
    return tuple(chain)


def layout_op(d) -> tuple:
    """A layout node as a ``(op, argument)`` step: transpose axes, or the new shape."""
    a = d["attrs"]
    if d["op"] == "transpose":
        return ("transpose", tuple(a["axes"]))
    return (d["op"], tuple(d["shape"]))


def chain_shape(shape: tuple, chain: tuple) -> tuple:
    """``shape`` after the layout steps of ``chain`` (``layout_op`` items)."""
    for op, arg in chain:
        shape = tuple(shape[i] for i in arg) if op == "transpose" else tuple(arg)
    return shape


class StageEmitter:
    """Emits one stage's body: ``value(n, chain)`` is a C expression of node ``n`` (viewed
    through ``chain``) at the current index, in its compute type."""

    def __init__(self, prog, kernel_shape: tuple, leaf_exprs=None):
        self.p, self.G, self.kernel_shape = prog, prog.G, kernel_shape
        self.leaf_exprs = leaf_exprs or {}
        self.lines: list[str] = []
        self.operands: list[Operand] = []
        self._memo: dict = {}

    def param(self, source: str, index: int, chain: tuple, dtype: str, shape: tuple) -> str:
        opnd = Operand(source, index, chain, dtype, tuple(self.kernel_shape))
        if opnd not in self.operands:
            self.operands.append(opnd)
        name = f"in{self.operands.index(opnd)}"
        if dtype == "float16":
            return f"((float){name})"
        return name

    def value(self, n: int, chain: tuple = ()) -> str:
        """The C expression of node ``n`` seen through view ops ``chain``. An explicit stack,
        not recursion: ``_value_gen`` yields ``(node, chain)`` for each operand it needs and
        receives its expression, so a chain of any length compiles."""
        return ir.evaluate_iteratively(self._value_gen, n, chain)

    def _value_gen(self, n: int, chain: tuple = ()):
        chain = normalize_chain(chain)
        key = (n, chain)
        if key in self._memo:
            return self._memo[key]
        d = self.G.nodes[n]
        op, kind = d["op"], ops.OPS[d["op"]].kind
        if (n, chain) in self.leaf_exprs:
            expr = self.leaf_exprs[(n, chain)]
        elif n in self.p.stage_of:
            expr = self.param("stage", self.p.stage_of[n], chain, d["dtype"], d["shape"])
        elif op == "input":
            pos = self.G.graph["inputs"].index(n)
            if pos in self.p.literals:
                expr = literal(self.p.literals[pos], d["dtype"])
            else:
                expr = self.param("input", pos, chain, d["dtype"], d["shape"])
        elif op == "const":
            v = np.asarray(d["attrs"]["value"])
            if v.size == 1:
                expr = literal(v.reshape(()).item(), d["dtype"])
            else:
                expr = self.param("const", self.p.const_index(n), chain, d["dtype"], d["shape"])
        elif kind == ops.LAYOUT:
            (u,) = ir.operands(self.G, n)
            expr = yield (u, (layout_op(d),) + chain)
        elif kind == ops.REDUCTION and not d["attrs"]["axes"]:
            (u,) = ir.operands(self.G, n)  # reducing over no axis: a cast
            expr = cast((yield (u, chain)), self.G.nodes[u]["dtype"], d["dtype"])
        elif kind == ops.ELEMENTWISE:
            expr = yield from self._elementwise(n, d, chain)
        else:
            raise Unsupported(f"{op} inside an elementwise expression")
        self._memo[key] = expr
        return expr

    def _elementwise(self, n: int, d, chain: tuple) -> str:
        us = ir.operands(self.G, n)
        shape = tuple(d["shape"])
        vals = []
        for u in us:
            ud = self.G.nodes[u]
            pre = (("broadcast_to", shape),) if tuple(ud["shape"]) != shape else ()
            vals.append(((yield (u, pre + chain)), ud["dtype"]))
        in_dtypes = [dt for _, dt in vals]
        reason = ss.refusal(d["op"], in_dtypes, d["dtype"])
        if reason:
            raise Unsupported(reason)
        loop, _ = ss.loop_dtypes(d["op"], in_dtypes, d["dtype"])
        if d["op"] == "pow" and np.dtype(loop[0]).kind in "iu" and \
                not self._known_non_negative(us[1]):
            raise Unsupported(f"integer power with an exponent not known to be >= 0 ("
                              f"NumPy raises {ss.INT_POW_NEGATIVE!r}; a kernel cannot)")
        args = [cast(v, dt, lt) if not (d["op"] == "where" and i == 0) else truth(v, dt)
                for i, ((v, dt), lt) in enumerate(zip(vals, loop))]
        body = op_expr(d["op"], args, loop, d["dtype"])
        if d["dtype"] == "float16" and d["op"] != "astype":
            body = f"go_f16({body})"  # NumPy rounds every float16 op
        var = f"v{n}" + (f"_{len(self._memo)}" if chain else "")
        where = f" @ {d['src']}" if d.get("src") else ""
        self.lines.append(f"const {COMPUTE[d['dtype']]} {var} = {body};  // {d['op']}{where}")
        return var

    def _known_non_negative(self, u: int) -> bool:
        """Whether node ``u`` is a constant or a literal input with no negative value."""
        d = self.G.nodes[u]
        if d["op"] == "const":
            return bool(np.all(np.asarray(d["attrs"]["value"]) >= 0))
        pos = self.G.graph["inputs"].index(u) if d["op"] == "input" else None
        return pos in self.p.literals and self.p.literals[pos] >= 0

    def params_text(self) -> str:
        return ", ".join(f"{o.dtype} in{i}" for i, o in enumerate(self.operands))

    def preamble(self, result: str) -> str:
        return helpers_for("\n".join(self.lines) + result)
