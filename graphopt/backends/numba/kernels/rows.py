"""Numba kernels for ``normalization`` groups (softmax, layer norm, logsumexp, ...).

The loop space is the rows of the reductions' operand: kept dims (one task per row, rows
split over threads) and the reduced trailing dims (the row). Each row takes one pass per
level of reductions: pass ``p`` accumulates every reduction whose operand needs ``p``
earlier levels, and the result is written in a last pass over the row (or once per row
when the result is one value per row). Between passes sit the per-row values (reduction
results and what is computed from them alone). A transcendental that a later pass needs
again is kept in a row-sized scratch buffer instead of being recomputed, e.g. softmax's
``exp``, computed in the pass that sums it and divided in the last::

    for t in prange(rows):                  # (in blocks of rows; scratch per block)
        acc0 = -inf
        for i1 in range(256): acc0 = max(acc0, x[t, i1] * c)     # pass 0: max
        r0 = acc0
        acc1 = 0.0
        for i1 in range(256): e = exp(x[t, i1] * c - r0); s0[i1] = e; acc1 += e
        r1 = acc1
        for i1 in range(256): out[t, i1] = s0[i1] / r1         # last pass

Sums accumulate float32 rows in float64 (never overflowing where the exact sum is finite)
with ``numba_math.sum_add``, the one add LLVM may re-associate into vector lanes.

Shares ``source._Source``'s expressions, casts, constants and module layout.
"""

from __future__ import annotations

import math

from .... import ir
from ....analysis.fused import EXPENSIVE, computed_members, identity_map, normalization_maps
from ....ir import ops
from .expressions import _T, UnsupportedKernel
from .loops import _decompose
from .source import PARALLEL_MIN, _Source

ROW_TASKS = 256   # parallel tasks (blocks of rows), each with its own scratch rows


class RowsSource(_Source):
    """The kernel module of a normalization group (see the module docstring)."""

    @property
    def reduces(self) -> bool:
        return True

    def _analyze(self):
        sub = self.sub
        rows = normalization_maps(sub, set(computed_members(sub)), self.root)
        if isinstance(rows, str):
            raise UnsupportedKernel(f"not a normalization group: {rows}")
        self.red = None
        self.space, self.rows = rows.space, rows
        (self.out_map,) = rows.maps[self.root]
        roles = ["r" if d in rows.axes else "k" for d in range(len(self.space))]
        self._layout(roles, {n: rows.maps.get(n, set()) for n in self.inputs})
        self.inplace_ok = tuple(False for _ in self.inputs)
        nc = len(self.cext)
        self.K = [c for c in range(nc) if self.croles[c] == "k"]
        self.R = [c for c in range(nc) if self.croles[c] == "r"]
        self.level = {c: 0 for c in self.K}
        self.level.update({c: i + 1 for i, c in enumerate(self.R)})
        self.nrows = math.prod(self.cext[c] for c in self.K)
        self.mode = "rows"
        self.parallel = math.prod(self.space) >= PARALLEL_MIN and self.nrows > 1
        self.red_var: dict[int, str] = {}
        self.scratch: list[tuple[str, str]] = []   # (name, dtype) of row-sized buffers

    # -- where code goes: "pre" (once), ("row", p) before pass p, ("pass", p, level) -------
    def buf(self, phase, level):
        if level < 0:
            return "pre"
        return ("row", phase) if level == 0 else ("pass", phase, level)

    def _value_gen(self, n, m, p):
        """(expression, dtype, level) of ``n`` at map ``m`` as pass ``p`` reads it: per-row
        values once per row, row values once per pass (or kept from an earlier pass)."""
        if not any(self.level[c] for c in self.to_cmap(m)):
            if (n, m) not in self.memo:
                self.memo[(n, m)] = yield from self._value(n, m, p)
            return self.memo[(n, m)]
        if (n, m, p) not in self.memo:
            earlier = next((q for q in range(p) if (n, m, q) in self.memo), None)
            if earlier is not None and self.sub.nodes[n]["op"] in EXPENSIVE \
                    and len(self.R) == 1:
                self.memo[(n, m, p)] = self._kept(self.memo[(n, m, earlier)], earlier, p)
            else:
                self.memo[(n, m, p)] = yield from self._value(n, m, p)
        return self.memo[(n, m, p)]

    def _kept(self, computed, q, p):
        """Store ``computed`` (made in pass ``q``) in a scratch row; pass ``p`` loads it."""
        expr, dt, level = computed
        name = f"s{len(self.scratch)}"
        self.scratch.append((name, dt))
        i = f"i{self.R[0]}"
        self.bufs.setdefault(("pass", q, level), []).append(f"{name}[{i}] = {expr}")
        return self.var(("pass", p, level), f"{name}[{i}]"), dt, level

    def _value(self, n, m, p):
        if n in self.red_var:
            return self.red_var[n], self.sub.nodes[n]["dtype"], 0
        return (yield from super()._value(n, m, p))

    # -- the kernel -------------------------------------------------------------------------
    def kernel_body(self) -> list[str]:
        sub = self.sub
        stage: dict[int, int] = {}
        for n in ir.topo_order(sub):
            before = max((stage[u] for u in ir.operands(sub, n)), default=0)
            stage[n] = before + (ops.OPS[sub.nodes[n]["op"]].kind == ops.REDUCTION)
        reds = [n for n in ir.topo_order(sub) if ops.OPS[sub.nodes[n]["op"]].kind
                == ops.REDUCTION]
        passes = max(stage[r] for r in reds)
        inits, combines, finals = {}, {}, {}
        for p in range(passes):
            for r in (r for r in reds if stage[r] == p + 1):
                (u,) = ir.operands(sub, r)
                v, vdt, _ = self.value(u, identity_map(self.space), p)
                acc_dt, init, comb, fin, v_acc = self.reduction(r, v, vdt)
                k = len(self.red_var)
                acc, self.red_var[r] = f"acc{k}", f"r{k}"
                inits.setdefault(p, []).append(f"{acc} = {init}")
                finals.setdefault(p, []).append(f"{self.red_var[r]} = {fin.format(a=acc)}")
                combines.setdefault(p, []).append(f"{acc} = {comb.format(a=acc, v=v_acc)}")
        root = self.value(self.root, self.out_map, passes)[0]
        store = [f"out[{self.out_index()}] = {root}"]
        full = any(self.level[c] for c in self.out_cmap)
        body = []
        for p in range(passes + 1):
            body += self.bufs.get(("row", p), [])
            if p < passes:
                body += inits[p] + self._pass(p, combines[p]) + finals[p]
            elif full:
                body += self._pass(p, store)
            else:
                body += store
        return self._rows_loop(body)

    def _pass(self, p, innermost) -> list[str]:
        """Pass ``p`` over a row: the reduced loops, ``innermost`` at the deepest."""
        lines, indent = [], 0
        for i, c in enumerate(self.R):
            lines.append(" " * indent + f"for i{c} in range({self.cext[c]}):")
            indent += 4
            lines += [" " * indent + s for s in self.bufs.get(("pass", p, i + 1), [])]
        return lines + [" " * indent + s for s in innermost]

    def _rows_loop(self, body) -> list[str]:
        kd = [(f"i{c}", self.cext[c]) for c in self.K]
        alloc = [f"{name} = np.empty({self.cext[self.R[0]]}, {_T[dt]})"
                 for name, dt in self.scratch]
        lines = ["    " + s for s in self.bufs.get("pre", [])]
        if self.parallel:
            tasks = min(self.nrows, ROW_TASKS)
            per = -(-self.nrows // tasks)
            tasks = -(-self.nrows // per)
            lines.append(f"    for b in prange({tasks}):")
            lines += ["        " + s for s in alloc]
            lines.append(f"        for t in range(b * {per}, min(b * {per} + {per}, "
                         f"{self.nrows})):")
            ind = 12
        else:
            lines += ["    " + s for s in alloc]
            lines.append(f"    for t in range({self.nrows}):")
            ind = 8
        lines += [" " * ind + s for s in _decompose(kd, "t")] if kd else []
        return lines + [" " * ind + s for s in body]
