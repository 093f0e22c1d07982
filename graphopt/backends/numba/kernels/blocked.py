"""The NumPy-blocked kernel form: a fused group as cache-sized blocks of NumPy ufunc calls
(``out=`` into reused scratch), blocks spread over the call's threads. The alternative
where a numba kernel loses to NumPy's SIMD ufuncs; ``numba_codegen.build_numpy_blocked``
compiles it."""

from __future__ import annotations

import math
import os

import numpy as np

from ....analysis.fused import computed_members
from ....runtime import threads
from ...scalar_semantics import UFUNCS
from .expressions import _T, UnsupportedKernel
from .source import CODEGEN_VERSION, PARALLEL_MIN, _Source

BLOCK_ELEMS = 1 << 13    # elements per temporary of a NumPy-blocked kernel (L1/L2 sized)


def run_blocks(fn, views, out, nblocks: int, parallel: bool) -> None:
    """Run ``fn(views, out, first_block, end_block)`` over ``nblocks`` blocks, split over
    this call's threads when ``parallel`` (NumPy's ufuncs release the GIL)."""
    nt = threads.current_threads() if parallel else 1
    threads.run_parallel(lambda r: fn(views, out, *r), threads.split(nblocks, nt), nt)


class _BlockedSource(_Source):
    """The same group as cache-sized blocks of NumPy ufunc calls with ``out=``: every value
    is an array aligned to the (collapsed) loop space, blocked along its first dim."""

    def _choose_loops(self):
        if self.red is not None:
            raise UnsupportedKernel("the NumPy-blocked form covers elementwise and epilogue "
                                    "groups")
        self.mode = "blocked"
        self.level = {c: 0 for c in range(len(self.cext))}
        rest = math.prod(self.cext[1:])
        self.bs = max(1, BLOCK_ELEMS // max(rest, 1)) if self.cext else 1
        self.nblocks = -(-self.cext[0] // self.bs) if self.cext else 1
        self.parallel = math.prod(self.space) >= PARALLEL_MIN and self.nblocks > 1
        self.steps: list = []   # (temp, dtype, dims, writer(out_expr, operand exprs), args)

    def _value_gen(self, n, m, phase="epi"):
        key = (n, m)
        if key not in self.memo:
            self.memo[key] = yield from self._np_value(n, m)
        return self.memo[key]

    def _np_value(self, n, m):
        """(expr or temp id, dtype, dims it varies along)."""
        d = self.sub.nodes[n]
        dt = d["dtype"]
        if d["op"] == "const":
            return self.const(d["attrs"]["value"], dt), dt, frozenset()
        cm = self.to_cmap(m)
        if n == self.einsum:
            return "ob", dt, frozenset(cm)
        if d["op"] == "input":
            arg = self.args[(self.inputs.index(n), cm)]
            return (f"{arg}[lo:hi]" if 0 in cm else arg), dt, frozenset(cm)
        vals = yield from self.operand_values(n, m, "epi")
        if d["op"] in ("broadcast_to", "transpose"):
            return vals[0]
        dims = frozenset().union(*[v[2] for v in vals])
        if d["op"] == "real" and np.dtype(vals[0][1]).kind != "c":
            return vals[0]
        tid = len(self.steps)
        self.steps.append((tid, dt, dims, self.np_writer(d["op"], [v[1] for v in vals], dt),
                           [v[0] for v in vals]))
        return tid, dt, dims

    def np_writer(self, op, dts, out):
        """``writer(o, args) -> lines`` computing ``op`` into array ``o``."""
        if op in UFUNCS:
            uf = UFUNCS[op].__name__
            return lambda o, a: [f"np.{uf}({', '.join(a)}, out={o})"]
        if op == "relu":
            z = self.const(0, dts[0])
            return lambda o, a: [f"np.maximum({a[0]}, {z}, out={o})"]
        if op == "astype" and np.dtype(dts[0]).kind == "c" and out == "bool":
            z = self.const(0, dts[0])
            return lambda o, a: [f"np.not_equal({a[0]}, {z}, out={o})"]
        if op == "astype":
            real = np.dtype(dts[0]).kind == "c" and np.dtype(out).kind != "c"
            return lambda o, a: [f"np.copyto({o}, {a[0]}{'.real' if real else ''}, "
                                 "casting='unsafe')"]
        if op == "where":
            # one call: ``o`` may be the memory of an operand (in place, or the einsum's
            # result in an epilogue), so nothing is written before every operand is read
            return lambda o, a: [f"np.copyto({o}, np.where({a[0]}, {a[1]}, {a[2]}), "
                                 "casting='unsafe')"]
        if op in ("sigmoid", "gelu", "real", "imag"):
            # the reference itself, per block (it returns a new array: no aliasing either)
            return lambda o, a: [f"np.copyto({o}, _ops.UNARY_FUNCS[{op!r}]({a[0]}), "
                                 "casting='unsafe')"]
        raise UnsupportedKernel(f"no NumPy-blocked form for op {op!r}")

    def workspace_bytes(self) -> int:
        """What a call allocates beside ``out``: each worker's scratch (after
        ``module``), a worker per core at most where the blocks run in parallel (an upper
        bound: the call's thread budget may give fewer)."""
        workers = min(self.nblocks, os.cpu_count() or 1) if self.parallel else 1
        return self.scratch_bytes * workers

    def _scratch(self, dims, dt):
        return tuple((self.bs if c == 0 else self.cext[c]) if c in dims else 1
                     for c in range(len(self.cext)))

    def block_body(self) -> tuple[list[str], list[str]]:
        """(scratch allocations, per-block lines)."""
        root = self.value(self.root, self.out_map)
        last = {}
        for tid, _, _, _, args in self.steps:
            for a in args:
                if isinstance(a, int):
                    last[a] = tid
        free: dict = {}
        buf_of, allocs, body = {}, [], []
        self.scratch_bytes = 0     # what one worker's scratch holds (``workspace_bytes``)
        name = {}
        for tid, dt, dims, writer, args in self.steps:
            ex = [name[a] if isinstance(a, int) else a for a in args]
            if tid == root[0]:
                o = "ob"
            else:
                shape = self._scratch(dims, dt)
                pool = free.setdefault((shape, dt), [])
                if pool:
                    b = pool.pop()
                else:
                    b = f"s{len(allocs)}"
                    allocs.append(f"{b} = np.empty({shape}, {_T[dt]})")
                    self.scratch_bytes += math.prod(shape) * np.dtype(dt).itemsize
                buf_of[tid] = (b, shape, dt)
                o = f"{b}[:n]" if 0 in dims else b
            body += writer(o, ex)
            name[tid] = o
            for a in set(a for a in args if isinstance(a, int)):
                if last.get(a) == tid and a in buf_of:
                    b, shape, adt = buf_of[a]
                    free.setdefault((shape, adt), []).append(b)
        if not isinstance(root[0], int):   # the group only re-indexes its input
            body.append(f"np.copyto(ob, {root[0]}, casting='unsafe')")
        return allocs, body

    def module(self, struct_key: str) -> str:
        allocs, body = self.block_body()
        rd = self.sub.nodes[self.root]
        ops_ = [self.sub.nodes[n]["op"] for n in computed_members(self.sub)]
        nc = len(self.cext)
        head = [f"# graphopt NumPy-blocked kernel {struct_key[:12]} (codegen v{CODEGEN_VERSION}),"
                f" pattern {self.pattern}: {' -> '.join(ops_)}",
                f"# out {tuple(rd['shape'])} {rd['dtype']}; loop space {self.space} collapsed "
                f"to {tuple(self.cext)}; {self.nblocks} block(s) of {self.bs} along dim 0",
                "import numpy as np", "",
                "from graphopt.ir.einsum_numpy import evaluate as einsum_evaluate  # noqa: F401",
                "from graphopt.ir import ops as _ops  # noqa: F401",
                "from graphopt.backends.numba.codegen import run_blocks"]
        head += [f"{name} = {text}" for name, text in self.globals.items()]
        params = [n for n, _, _ in self.arg_specs]
        lines = head + ["", "", "def blocks(views, o, first, end):",
                        f"    {', '.join(params + [''])} = views" if params else "    pass"]
        lines += ["    " + a for a in allocs]
        lines.append("    with np.errstate(all='ignore'):")
        if nc:
            e0 = self.cext[0]
            lines += [f"        for lo in range(first * {self.bs}, min(end * {self.bs}, {e0}), "
                      f"{self.bs}):", f"            hi = min(lo + {self.bs}, {e0})",
                      "            n = hi - lo  # noqa: F841", "            ob = o[lo:hi]"]
            ind = 12
        else:
            lines += ["        lo, hi, n, ob = 0, 1, 1, o  # noqa: F841"]
            ind = 8
        lines += [" " * ind + b for b in body]
        return "\n".join(lines + [""] + self.np_wrapper()) + "\n"

    def np_wrapper(self) -> list[str]:
        rd = self.sub.nodes[self.root]
        shape, dt = tuple(rd["shape"]), _T[rd["dtype"]]
        nc = len(self.cext)
        out_cshape = tuple(self.cext)
        used = sorted({p for _, p, _ in self.arg_specs})
        lines = ["", "def epilogue(args, out):" if self.einsum is not None else
                 "def kernel_call(args, out):"]
        lines += [f"    x{p} = np.ascontiguousarray(args[{p}], "
                  f"{_T[self.sub.nodes[self.inputs[p]]['dtype']]})" for p in used]
        views = []
        for name, p, cs in self.arg_specs:
            cm = next(c for (q, c), nm in self.args.items() if nm == name)
            perm = tuple(sorted(range(len(cm)), key=lambda i: cm[i]))
            idx = ", ".join(":" if c in cm else "None" for c in range(nc))
            v = f"x{p}.reshape({cs or (1,)})"
            if cm and perm != tuple(range(len(cm))):
                v += f".transpose({perm})"
            views.append(v + (f"[{idx}]" if cm and len(cm) < nc else "") if cm else
                         f"x{p}.reshape(())")
        lines.append(f"    run_blocks(blocks, [{', '.join(views)}], out.reshape({out_cshape}), "
                     f"{self.nblocks}, {self.parallel})")
        return lines + ["    return out"] + self.run_function(shape, dt)


