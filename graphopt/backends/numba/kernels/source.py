"""Numba kernels generated from fused groups (ARCHITECTURE "Fused nodes", "Kernels and steps").

The API the numba backend calls::

    k = build_fused_kernel(node_attrs["graph"], node_attrs["pattern"],
                           fast_math=ctx.options.get("fast_math", True), name="fused_12")
    k.fn(args, out)        # -> out (allocated when None); any pattern
    k.source               # the generated module, readable: plan.kernels[i].source
    k.impl, k.details      # "numba-fused"; compile seconds, numba cache hit, loop mode
    k.inplace_ok[i]        # out may be the memory of args[i]
    # pattern "contraction": k.fn runs np.einsum, then the epilogue. A backend runs the
    # einsum itself (BLAS) into out, then the epilogue in place on it:
    k.einsum_equation, k.einsum_args   # the einsum, and which of args are its operands
    k.epilogue(args, out)  # args: all the fused node's operands; out holds the einsum

    (pattern "normalization": one pass over each row per level of reductions, numba_rows.py)
    build_node_kernel(G, n)            # the same for one elementwise or reduction node
    build_numpy_blocked(sub, pattern)  # NumPy ufuncs in cache-sized blocks, same contract
                                       # (impl "numpy-blocked"): time both, keep the faster

``build_*`` raise ``UnsupportedKernel`` (with the reason) for what they do not handle
(float16, ordering of complex numbers, reductions in the blocked form); the caller falls
back to the reference implementation. Operands may have any strides and byte order
(non-contiguous ones are copied) and may be read-only; ``out`` must be C-contiguous.

Kernels loop over the output with ``prange`` over the outer dimension(s) (one thread below
``PARALLEL_MIN`` elements; below ``NOGIL_MIN`` they keep the GIL, which under contention costs
less than handing it over and back); dims are collapsed wherever every operand is contiguous across
them, so the common case is one flat loop LLVM vectorizes, and values invariant in an inner
loop are computed outside it. Transcendentals call ``numba_math.FAST[(op, dtype)]``
approximations when ``fast_math`` is set (those in ``numba_math.KERNEL_SAFE``: not sin/cos),
exact ``np.*``/``cmath.*`` otherwise; kernels carry no LLVM fast-math flags, and where
numba's scalar semantics differ from NumPy's they call ``numba_scalar``. Reductions
accumulate float32 in float64 and complex64 in complex128 (NumPy sums pairwise in the input
type: results agree within rounding). Parallel launches go through ``launch``, which
serializes them where numba's threading layer is not thread-safe.

Generated modules are written to ``$GRAPHOPT_CACHE_DIR`` (default ``~/.cache/graphopt``) as
``k_<sha of the source>.py`` and imported from there, so numba's ``cache=True`` finds them
again in a later process; in-process, kernels are cached by the sub-graph's structural hash
(plus pattern, fast_math and the numba_math version).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .... import ir
from ....analysis.fused import (
    classify,
    computed_members,
    group_maps,
    operand_index_map,
    reduction_maps,
)
from ....ir.einsum_numpy import to_ascii
from ... import scalar_semantics as ss
from .expressions import _NB, _T, ScalarPrinter, UnsupportedKernel, _fast_table, _file_digest
from .loops import BLOCK, COL_BLOCK, MAX_CHUNKS, LoopNest, collapse_dims, collapsed_map

CODEGEN_VERSION = "4"
PARALLEL_MIN = 1 << 16   # loop-space elements below which a kernel runs on one thread
NOGIL_MIN = 1 << 14      # loop-space elements below which a kernel keeps the GIL

# float16 groups run on NumPy kernels (numba has no float16), as do the table's
# UNEMITTED_DTYPES.
SUPPORTED = ("bool", "int32", "int64", "float32", "float64", "complex64", "complex128")
SCALAR_HELPERS = ("cdiv_c64", "cdiv_c128", "crecip_c64", "crecip_c128", "cpow_c64",
                  "cpow_c128", "clog_c64", "clog_c128", "ipow")


@dataclass
class GeneratedKernel:
    """A compiled group. ``fn(args, out=None) -> out``: ``args`` in the fused node's operand
    order (any strides), ``out`` C-contiguous or None (allocated).

    Attributes:
        name: the caller's name for it (reports).
        source: the generated module.
        pattern: "elementwise", "reduction" or "contraction".
        impl: "numba-fused" or "numpy-blocked".
        inplace_ok: per operand, whether ``out`` may share its memory.
        einsum_node: the sub-graph's einsum node (contraction pattern), else None.
        einsum_equation, einsum_args: that einsum and the positions in ``args`` of its
            operands.
        epilogue: ``epilogue(args, out) -> out``, run in place on ``out`` holding the
            einsum's result (contraction pattern), else None.
        details: facts for the report (compile seconds, numba cache hit, module path).
    """

    name: str
    fn: Callable
    source: str
    pattern: str
    impl: str
    inplace_ok: tuple = ()
    einsum_node: int | None = None
    einsum_equation: str | None = None
    einsum_args: tuple = ()
    epilogue: Callable | None = None
    details: dict = field(default_factory=dict)


# ------------------------------------------------------------------------------- analysis


def _check_supported(sub, pattern) -> None:
    root = sub.graph["outputs"][0]
    members = computed_members(sub)
    if not members:
        raise UnsupportedKernel("the group computes nothing")
    found, reason = classify(sub, members, root)
    if found != pattern:
        raise UnsupportedKernel(f"sub-graph is not a {pattern!r} group: {found or reason}")
    for n, d in sub.nodes(data=True):
        reason = ss.dtype_refusal(d["dtype"])
        if reason:
            raise UnsupportedKernel(f"{d['op']}: {reason}")
        if d["dtype"] not in SUPPORTED:
            raise UnsupportedKernel(f"dtype {d['dtype']} ({d['op']}) has no numba kernel")
        if d["op"] == "const" and math.prod(d["shape"]) != 1:
            raise UnsupportedKernel("array constants inside a group are passed as operands")
        reason = ss.refusal(d["op"], [sub.nodes[u]["dtype"] for u in ir.operands(sub, n)])
        if reason:
            raise UnsupportedKernel(f"{reason}; no numba kernel")


def _einsum_call(eq: str, operands: list[str]) -> str:
    """The reference contraction into ``out`` (a backend runs its own BLAS call instead)."""
    if len(operands) <= 2:
        return (f"    np.einsum({to_ascii(eq)!r}, {', '.join(operands)}, out=out, "
                "optimize=True)")
    return (f"    np.copyto(out, einsum_evaluate({eq!r}, [{', '.join(operands)}]), "
            "casting='no')")


# ------------------------------------------------------------------------------- emission


class _Source(ScalarPrinter, LoopNest):
    """Generates one kernel module: globals, per-loop-level code, the loop nest, a wrapper."""

    def __init__(self, sub, pattern, fast_math):
        _check_supported(sub, pattern)
        self.sub, self.pattern, self.fast_math = sub, pattern, fast_math
        self.fast, self.fast_digest = _fast_table()
        if not fast_math:
            self.fast = {}
        self.root = sub.graph["outputs"][0]
        self.inputs = list(sub.graph["inputs"])
        self.globals: dict[str, str] = {}
        self.fast_used: dict[str, tuple] = {}
        self.bufs: dict = {}
        self.memo: dict = {}
        self.nvar = 0
        self.err_flag = False   # the kernel takes an error flag (see ``module``)
        self.einsum = next((n for n in sub if sub.nodes[n]["op"] == "einsum"), None)
        self._analyze()

    # -- loop space -------------------------------------------------------------------------
    def _analyze(self):
        sub = self.sub
        maps, space, red = group_maps(sub, set(computed_members(sub)) | set(self.inputs),
                                      self.root)
        self.red, self.space = red, space
        axes = set(sub.nodes[red]["attrs"]["axes"]) if red is not None else set()
        roles = ["r" if d in axes else "k" for d in range(len(space))]
        if red is None:
            self.out_map = tuple(None if e == 1 else d for d, e in enumerate(space))
        else:
            a = sub.nodes[red]["attrs"]
            self.in_map, self.out_map = reduction_maps(space, a["axes"], a["keepdims"])
        reads = {n: {m for m, _ in maps.get(n, ())} for n in self.inputs}
        self._layout(roles, reads)
        if self.einsum is not None and {m for m, _ in maps[self.einsum]} != {self.out_map}:
            raise UnsupportedKernel("the einsum result is not read at the output's index")
        self.inplace_ok = tuple(
            red is None and self.einsum is None and reads[n] == {self.out_map}
            and np.dtype(sub.nodes[n]["dtype"]).itemsize
            == np.dtype(sub.nodes[self.root]["dtype"]).itemsize
            and tuple(sub.nodes[n]["shape"]) == tuple(sub.nodes[self.root]["shape"])
            for n in self.inputs)
        self._choose_loops()

    def _layout(self, roles, reads: dict):
        """Collapse the loop space (``roles``: "k" kept or "r" reduced per dim) and name one
        kernel argument per (input, collapsed map) in ``reads`` (input -> maps read at)."""
        space = self.space
        accesses = sorted({m for ms in reads.values() for m in ms}, key=repr)
        groups = collapse_dims(space, roles, accesses + [self.out_map])
        self.where = {d: c for c, g in enumerate(groups) for d in g}
        self.cext = [math.prod(space[d] for d in g) for g in groups]
        self.croles = [roles[g[0]] for g in groups]
        self.out_cmap = self.to_cmap(self.out_map)
        self.args: dict = {}
        self.arg_specs: list = []   # (arg name, input position, collapsed shape)
        for pos, n in enumerate(self.inputs):
            for cm in sorted({self.to_cmap(m) for m in reads.get(n, ())}):
                name = f"a{len(self.arg_specs)}"
                self.args[(pos, cm)] = name
                self.arg_specs.append((name, pos, tuple(self.cext[c] for c in cm)))

    @property
    def reduces(self) -> bool:
        return self.red is not None

    def to_cmap(self, m) -> tuple:
        return collapsed_map(m, self.where)

    def _choose_loops(self):
        nc = len(self.cext)
        K = [c for c in range(nc) if self.croles[c] == "k"]
        R = [c for c in range(nc) if self.croles[c] == "r"]
        self.K, self.R = K, R
        self.level: dict[int, int] = {}
        if self.red is None:
            self.mode = ("scalar", "flat", "nest")[min(nc, 2)]
            for c in range(nc):
                self.level[c] = 0 if c < nc - 1 or nc == 1 else 1
        elif not K:
            self.mode = "full"
            self.level.update({c: i for i, c in enumerate(R)})
        elif R and self.croles[-1] == "k":
            self.mode = "column"
            self.level.update({c: 0 for c in K[:-1]})
            self.level.update({c: i + 1 for i, c in enumerate(R)})
            self.level[K[-1]] = len(R) + 1
        else:
            self.mode = "row"
            self.level.update({c: 0 for c in K})
            self.level.update({c: i + 1 for i, c in enumerate(R)})
        ext = self.cext
        tasks = {"scalar": 1, "flat": -(-ext[0] // BLOCK) if ext else 1,
                 "nest": math.prod(ext[:-1]), "row": math.prod(ext[c] for c in K),
                 "full": min(MAX_CHUNKS, ext[R[0]]) if R else 1,
                 "column": math.prod(ext[c] for c in K[:-1])
                 * -(-ext[K[-1]] // max(1, min(COL_BLOCK, ext[K[-1]]))) if K else 1}
        self.parallel = math.prod(self.space) >= PARALLEL_MIN and tasks[self.mode] > 1

    def buf(self, phase, level):
        if level < 0:
            return "pre"
        if phase == "epi" and self.red is not None:
            return "epi"
        return (phase, level)

    # -- values -----------------------------------------------------------------------------
    def value(self, n, m, phase="epi") -> tuple[str, str, int]:
        """(expression, dtype, loop level) of node ``n`` read at loop map ``m``.

        Evaluated with an explicit stack, not by recursion: ``_value_gen`` and ``_value``
        are generators that *yield* ``(node, map, phase)`` for each operand value they need
        and receive it back, so a chain of any length compiles."""
        return ir.evaluate_iteratively(self._value_gen, n, m, phase)

    def _value_gen(self, n, m, phase):
        key = (n, m, phase)
        pro = self.memo.get((n, m, "pro"))
        if phase == "epi" and pro is not None and pro[2] <= 0 and self.mode in ("row", "column"):
            return pro  # computed before the reduction loops, still in scope after them
        if key not in self.memo:
            self.memo[key] = yield from self._value(n, m, phase)
        return self.memo[key]

    def operand_values(self, n, m, phase):
        """Generator: the values of ``n``'s operands at the maps ``n`` reads them at."""
        vals = []
        for k, u in enumerate(ir.operands(self.sub, n)):
            vals.append((yield (u, operand_index_map(self.sub, n, k, m), phase)))
        return vals

    def _value(self, n, m, phase):
        d = self.sub.nodes[n]
        dt = d["dtype"]
        if d["op"] == "const":
            return self.const(d["attrs"]["value"], dt), dt, -1
        cm = self.to_cmap(m)
        level = max((self.level[c] for c in cm), default=-1)
        if n == self.einsum:
            return self.var(self.buf(phase, level), f"out[{self.out_index()}]"), dt, level
        if d["op"] == "input":
            arg = self.args[(self.inputs.index(n), cm)]
            idx = ", ".join(f"i{c}" for c in cm) or "0"
            return self.var(self.buf(phase, level), f"{arg}[{idx}]"), dt, level
        if n == self.red and phase == "epi":
            return "red", dt, 0
        vals = yield from self.operand_values(n, m, phase)
        if d["op"] in ("broadcast_to", "transpose"):
            return vals[0]
        level = max([v[2] for v in vals] + [-1])
        key = self.buf(phase, level)
        expr = self.op_expr(d["op"], [v[0] for v in vals], [v[1] for v in vals], dt, key)
        return self.var(key, expr), dt, level

    def out_index(self) -> str:
        return ", ".join(f"i{c}" for c in self.out_cmap) or "0"

    # -- the kernel -------------------------------------------------------------------------
    def kernel_body(self) -> list[str]:
        root_val = self.value(self.root, self.out_map, "epi")[0] if self.red is None else None
        if self.red is not None:
            (u,) = ir.operands(self.sub, self.red)
            self.rule = self.reduction(self.red, *self.value(u, self.in_map, "pro")[:2])
            root_val = self.value(self.root, self.out_map, "epi")[0]
        store = f"out[{self.out_index()}] = {root_val}"
        return getattr(self, f"_loops_{self.mode}")(store)

    # -- the module -------------------------------------------------------------------------
    def module(self, struct_key: str) -> str:
        body = self.kernel_body()
        sub, root = self.sub, self.root
        # Releasing the GIL lets other threads run during the loop, but under contention
        # every release is a hand-over and a wait to get it back: more than a small
        # kernel's whole run. Tiled blocks, the ones graphopt runs in parallel
        # threads, are far above the threshold.
        self.nogil = self.parallel or math.prod(self.space) >= NOGIL_MIN
        rd = sub.nodes[root]
        params = [n for n, _, _ in self.arg_specs] + ["out"]
        out_cshape = tuple(self.cext[c] for c in self.out_cmap) or (1,)
        # operands are read-only arrays (numba passes writable ones too: constants are
        # read-only); C-contiguous, as the wrapper reshapes them
        types = {}
        for _, p, shp in self.arg_specs:
            dt, nd = sub.nodes[self.inputs[p]]["dtype"], max(len(shp), 1)
            types[f"IN_{dt}_{nd}d"] = f"nt.Array(nt.{_NB[dt]}, {nd}, 'C', readonly=True)"
        out_t = f"OUT_{rd['dtype']}_{len(out_cshape)}d"
        types[out_t] = f"nt.Array(nt.{_NB[rd['dtype']]}, {len(out_cshape)}, 'C')"
        sig = [f"IN_{sub.nodes[self.inputs[p]]['dtype']}_{max(len(shp), 1)}d"
               for _, p, shp in self.arg_specs] + [out_t]
        # a flag the kernel raises where NumPy would raise (integer ** negative integer)
        self.err_flag = any("ipow(" in b for b in body)
        if self.err_flag:
            params.append("err")
            sig.append("ERR_FLAG")
            types["ERR_FLAG"] = "nt.Array(nt.uint8, 1, 'C')"
        ops_ = [sub.nodes[n]["op"] for n in computed_members(sub)]
        head = [f"# graphopt kernel {struct_key[:12]} (codegen v{CODEGEN_VERSION}), "
                f"pattern {self.pattern}: {' -> '.join(ops_)}",
                f"# out {tuple(rd['shape'])} {rd['dtype']}; loop space {self.space} "
                f"collapsed to {tuple(self.cext)} ({self.mode} loops, "
                f"{'parallel' if self.parallel else 'one thread'}, "
                f"{'releases' if self.nogil else 'keeps'} the GIL)",
                f"# fast math: {'on' if self.fast_math else 'off'}; numba_math "
                f"{self.fast_digest}; numba_scalar {_file_digest('numba.scalar')}",
                "import cmath  # noqa: F401", "", "import numba", "import numpy as np",
                "from numba import prange  # noqa: F401", "from numba import types as nt",
                "from graphopt.ir.einsum_numpy import evaluate as einsum_evaluate  # noqa: F401"]
        if self.parallel:
            head.append("from graphopt.backends.numba.codegen import launch")
        for module, names in (("numba.numerics", ("fmaximum", "fminimum", "sum_add")),
                              ("numba.scalar", SCALAR_HELPERS)):
            used = [f for f in names if any(f"{f}(" in b for b in body)]
            if used:
                head.append(f"from graphopt.backends.{module} import {', '.join(used)}")
        if self.fast_used:
            head.append("from graphopt.backends.numba.numerics import FAST")
            head += [f"{name} = FAST[{key!r}]" for name, key in sorted(self.fast_used.items())]
        head += [f"{name} = {text}" for name, text in self.globals.items()]
        head += [f"{name} = {text}" for name, text in types.items()]
        head += ["", "", f"@numba.njit(nt.void({', '.join(sig)}), "
                 f"parallel={self.parallel}, nogil={self.nogil}, cache=True, "
                 "error_model=\"numpy\")",
                 f"def kernel({', '.join(params)}):"]
        return "\n".join(head + body + [""] + self.wrapper(out_cshape)) + "\n"

    def wrapper(self, out_cshape) -> list[str]:
        rd = self.sub.nodes[self.root]
        shape, dt = tuple(rd["shape"]), _T[rd["dtype"]]
        used = sorted({p for _, p, _ in self.arg_specs})
        call = [f"x{p}.reshape({s or (1,)})" for n, p, s in self.arg_specs]
        lines = ["", "def epilogue(args, out):" if self.einsum is not None else
                 "def kernel_call(args, out):"]
        lines += [f"    x{p} = np.ascontiguousarray(args[{p}], "
                  f"{_T[self.sub.nodes[self.inputs[p]]['dtype']]})" for p in used]
        launch = "launch(kernel, " if self.parallel else "kernel("
        call.append(f"out.reshape({out_cshape})")
        if self.err_flag:
            lines.append("    err = np.zeros(1, np.uint8)")
            call.append("err")
        lines.append(f"    {launch}{', '.join(call)})")
        if self.err_flag:
            lines += ["    if err[0]:", f"        raise ValueError({ss.INT_POW_NEGATIVE!r})"]
        return lines + ["    return out"] + self.run_function(shape, dt)

    def run_function(self, shape, dt) -> list[str]:
        """``run(args, out=None)``: allocate or check ``out``, then the kernel (after the
        reference einsum, for a contraction group)."""
        lines = ["", "", "def run(args, out=None):", "    if out is None:",
                 f"        out = np.empty({shape}, {dt})",
                 "    elif not out.flags.c_contiguous:",
                 "        raise ValueError('out must be C-contiguous')"]
        if self.einsum is None:
            return lines + ["    return kernel_call(args, out)"]
        eq = self.sub.nodes[self.einsum]["attrs"]["equation"]
        ein = [f"args[{self.inputs.index(u)}]" for u in ir.operands(self.sub, self.einsum)]
        return lines + [_einsum_call(eq, ein), "    return epilogue(args, out)"]


