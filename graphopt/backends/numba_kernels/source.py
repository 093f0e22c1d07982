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

import hashlib
import importlib.util
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ... import ir
from ...einsum import to_ascii
from ...fused import (classify, group_maps, operand_index_map,
                     reduction_maps)
from .. import scalar_semantics as ss

CODEGEN_VERSION = "4"
PARALLEL_MIN = 1 << 16   # loop-space elements below which a kernel runs on one thread
NOGIL_MIN = 1 << 14      # loop-space elements below which a kernel keeps the GIL
BLOCK = 1 << 14          # elements per parallel block of a flat loop
COL_BLOCK = 256          # output columns per block of a column reduction
MAX_CHUNKS = 64          # parallel chunks of a full reduction

SUPPORTED = ("bool", "int32", "int64", "float32", "float64", "complex64", "complex128")
_T = {"bool": "np.bool_", "int32": "np.int32", "int64": "np.int64", "float32": "np.float32",
      "float64": "np.float64", "complex64": "np.complex64", "complex128": "np.complex128"}
_NB = {"bool": "boolean", "int32": "int32", "int64": "int64", "float32": "float32",
       "float64": "float64", "complex64": "complex64", "complex128": "complex128"}
_COMPLEX_LOOP_NAMES = {"div": "cdiv", "reciprocal": "crecip", "pow": "cpow"}
SCALAR_HELPERS = ("cdiv_c64", "cdiv_c128", "crecip_c64", "crecip_c128", "cpow_c64",
                  "cpow_c128", "clog_c64", "clog_c128", "ipow")


class UnsupportedKernel(NotImplementedError):
    """The generator does not handle this group; the message says why."""


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


# ------------------------------------------------------------------------------ fast math


def _fast_table() -> tuple[dict, str]:
    """``numba_math.FAST`` and a digest of its source (part of every kernel's cache key)."""
    try:
        from .. import numba_math
    except Exception:  # absent or mid-edit: exact np.* functions keep kernels correct
        return {}, "none"
    safe = getattr(numba_math, "KERNEL_SAFE", ())
    table = {k: f for k, f in (getattr(numba_math, "FAST", {}) or {}).items() if k[0] in safe}
    try:
        with open(numba_math.__file__, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()[:16]
    except OSError:
        digest = "unknown"
    return table, digest


def _file_digest(module: str) -> str:
    """A digest of backend module ``module``'s source. Kernels inline its functions, and
    numba's cache does not see a change there: the digest goes into every kernel's header,
    which is its cache key."""
    spec = importlib.util.find_spec(f"graphopt.backends.{module}")
    with open(spec.origin, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def _fast_key(table: dict, op: str, dtype: str):
    for key in ((op, dtype), (op, np.dtype(dtype)), (op, np.dtype(dtype).type)):
        if key in table:
            return key
    return None


# ------------------------------------------------------------------------------- analysis


def _members(sub):
    return [n for n in sub if sub.nodes[n]["op"] not in ("input", "const")]


def _check_supported(sub, pattern) -> None:
    root = sub.graph["outputs"][0]
    members = _members(sub)
    if not members:
        raise UnsupportedKernel("the group computes nothing")
    found, reason = classify(sub, members, root)
    if found != pattern:
        raise UnsupportedKernel(f"sub-graph is not a {pattern!r} group: {found or reason}")
    for n, d in sub.nodes(data=True):
        if d["dtype"] not in SUPPORTED:
            raise UnsupportedKernel(f"dtype {d['dtype']} ({d['op']}) has no numba kernel")
        if d["op"] == "const" and math.prod(d["shape"]) != 1:
            raise UnsupportedKernel("array constants inside a group are passed as operands")
        reason = ss.refusal(d["op"], [sub.nodes[u]["dtype"] for u in ir.operands(sub, n)])
        if reason:
            raise UnsupportedKernel(f"{reason}; no numba kernel")


def _collapse(space, roles, accesses):
    """Merge adjacent loop dims every access (a map over loop dims) walks contiguously.

    Returns the groups of original dims, one per collapsed dim."""
    active = [d for d, e in enumerate(space) if e != 1]
    seqs = [[e for e in m if e is not None] for m in accesses]

    def mergeable(a, b):
        if roles[a] != roles[b]:
            return False
        for s in seqs:
            ia, ib = (s.index(a) if a in s else None), (s.index(b) if b in s else None)
            if (ia is None) != (ib is None) or (ia is not None and ib != ia + 1):
                return False
        return True

    groups: list[list[int]] = []
    for d in active:
        if groups and mergeable(groups[-1][-1], d):
            groups[-1].append(d)
        else:
            groups.append([d])
    return groups


def _cmap(m, where) -> tuple:
    """A map over loop dims as a map over collapsed dims."""
    out = []
    for e in m:
        if e is not None and (not out or out[-1] != where[e]):
            out.append(where[e])
    return tuple(out)


def _float_text(v: float) -> str:
    if math.isnan(v):
        return "np.nan"
    if math.isinf(v):
        return "np.inf" if v > 0 else "-np.inf"
    return repr(float(v))


def _einsum_call(eq: str, operands: list[str]) -> str:
    """The reference contraction into ``out`` (a backend runs its own BLAS call instead)."""
    if len(operands) <= 2:
        return (f"    np.einsum({to_ascii(eq)!r}, {', '.join(operands)}, out=out, "
                "optimize=True)")
    return (f"    np.copyto(out, einsum_evaluate({eq!r}, [{', '.join(operands)}]), "
            "casting='no')")


def _urange(lo: str, hi: str) -> str:
    """A loop over [lo, hi) whose index numba knows is non-negative. With a signed index
    that does not start at 0, every ``a[i]`` carries a negative-index wraparound select
    that keeps LLVM from vectorizing the loop: 3.3x slower on a 4M-element exp/tanh chain."""
    return f"range(np.uint64({lo}), np.uint64({hi}))"


def _decompose(dims, src: str) -> list[str]:
    """Lines splitting flat index ``src`` into the loop variables ``dims`` [(var, extent)]."""
    if len(dims) == 1:
        return [f"{dims[0][0]} = {src}"]
    lines = [f"q = {src}"]
    for var, ext in reversed(dims[1:]):
        lines += [f"{var} = q % {ext}", f"q //= {ext}"]
    return lines + [f"{dims[0][0]} = q"]


# --------------------------------------------------------------------------- reductions


# how each combine of scalar_semantics.Reduction is written; {a} the accumulator, {v} a value
_COMBINE = {"or": "({a} or {v})", "and": "({a} and {v})",
            # float maxima: numba_math's intrinsics (NaN-propagating, and they vectorize)
            ("maximum", "f"): "fmaximum({a}, {v})", ("minimum", "f"): "fminimum({a}, {v})",
            ("maximum", "i"): "max({a}, {v})", ("minimum", "i"): "min({a}, {v})",
            # floats: an add LLVM may re-associate (lanes of partial sums), and only that add
            ("add", "f"): "sum_add({a}, {v})"}


def _reduction_rule(op, in_dt, out_dt, const):
    """(accumulator dtype, init, combine(acc, v) template, final(acc) template)."""
    rule = ss.reduction(op, in_dt, out_dt)
    kind = "f" if np.dtype(rule.acc).kind == "f" else "i"
    comb = _COMBINE.get(rule.combine) or _COMBINE.get((rule.combine, kind), "{a} + {v}")
    return rule.acc, const(rule.identity, rule.acc), comb, "{a}"


# ------------------------------------------------------------------------------- emission


class _Source:
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
        maps, space, red = group_maps(sub, set(_members(sub)) | set(self.inputs), self.root)
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
        groups = _collapse(space, roles, accesses + [self.out_map])
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
        return _cmap(m, self.where)

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

    # -- helpers ----------------------------------------------------------------------------
    def const(self, value, dtype) -> str:
        dt = np.dtype(dtype)
        v = np.asarray(value).astype(dt).reshape(())[()]
        if dt.kind == "b":
            text = f"np.bool_({bool(v)})"
        elif dt.kind in "iu":
            text = f"{_T[dt.name]}({int(v)})"
        elif dt.kind == "f":
            text = f"{_T[dt.name]}({_float_text(float(v))})"
        else:
            text = f"{_T[dt.name]}(complex({_float_text(v.real)}, {_float_text(v.imag)}))"
        for name, t in self.globals.items():
            if t == text:
                return name
        name = f"C{len(self.globals)}"
        self.globals[name] = text
        return name

    def cast(self, e: str, src: str, dst: str) -> str:
        if src == dst:
            return e
        if dst == "bool":
            return f"({e} != {self.const(0, src)})"
        if src == "bool":
            return f"({self.const(1, dst)} if {e} else {self.const(0, dst)})"
        if np.dtype(src).kind == "c" and np.dtype(dst).kind != "c":
            return f"{_T[dst]}({e}.real)"
        return f"{_T[dst]}({e})"

    def fast_call(self, op, dt, x):
        """``op_f32(x)`` from numba_math when it has one, else None."""
        key = _fast_key(self.fast, op, dt)
        if key is None:
            return None
        name = f"{op}_{'f32' if dt == 'float32' else 'f64'}"
        self.fast_used[name] = key
        return f"{name}({x})"

    def math(self, op, x, dt) -> str:
        if np.dtype(dt).kind == "c":
            if op == "log":
                return f"clog_c{np.dtype(dt).itemsize * 8}({x})"
            if dt == "complex64":
                # in complex128, rounded once: numba's complex64 sin/cos/exp overflow in
                # cosh/sinh where the result is still finite (NumPy's csinf scales)
                return f"np.complex64(cmath.{op}(np.complex128({x})))"
            return f"cmath.{op}({x})"
        return self.fast_call(op, dt, x) or f"np.{op}({x})"

    def var(self, key, expr) -> str:
        name = f"v{self.nvar}"
        self.nvar += 1
        self.bufs.setdefault(key, []).append(f"{name} = {expr}")
        return name

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

    # -- ops --------------------------------------------------------------------------------
    def op_expr(self, op, a, dts, out, key) -> str:
        if op in ss.UFUNCS:
            ins, res = ss.loop_dtypes(op, dts, out)
            a = [self.cast(x, s, t) for x, s, t in zip(a, dts, ins)]
            expr = self.ufunc_expr(op, a, ins[0])
            # numba computes int32 arithmetic in int64: narrow back, as NumPy wraps
            return f"np.int32({expr})" if res == "int32" and op not in ("abs",) else expr
        if op == "astype":
            return self.cast(a[0], dts[0], out)
        if op == "where":
            c = a[0] if dts[0] == "bool" else f"({a[0]} != {self.const(0, dts[0])})"
            return f"({self.cast(a[1], dts[1], out)} if {c} else {self.cast(a[2], dts[2], out)})"
        if op in ("real", "imag"):
            if np.dtype(dts[0]).kind == "c":
                return f"{a[0]}.{op}"
            return a[0] if op == "real" else self.const(0, out)
        if op == "relu":
            if dts[0] == "bool":
                return a[0]
            z = self.const(0, dts[0])
            nan = f" or {a[0]} != {a[0]}" if np.dtype(dts[0]).kind == "f" else ""
            return f"({a[0]} if {a[0]} > {z}{nan} else {z})"
        if op == "sigmoid":
            if np.dtype(out).kind == "c":
                one = self.const(1, out)
                return f"{one} / ({one} + {self.math('exp', f'-{a[0]}', out)})"
            fast = self.fast_call("sigmoid", out, self.cast(a[0], dts[0], out))
            if fast:
                return fast
            w = self.var(key, self.cast(a[0], dts[0], ss.LOGISTIC_DTYPE))
            return self.logistic(w, self.const(1.0, ss.LOGISTIC_DTYPE), out, key)
        if op == "gelu":
            return self.gelu(a[0], dts[0], out, key)
        raise UnsupportedKernel(f"no numba expression for op {op!r}")

    def ufunc_expr(self, op, a, ct) -> str:
        kind = np.dtype(ct).kind
        x = a[0]
        if op in ss.MATH:
            return self.math(op, x, ct)
        if op == "neg":
            return f"-{x}"
        if op in ("abs", "square") and kind == "b":
            return x
        if op == "abs":
            return f"abs({x})"
        if op == "square":
            return f"{x} * {x}"
        if op == "conj":
            return f"{x}.conjugate()" if kind == "c" else x
        if kind == "c" and op in ss.COMPLEX_LOOPS:   # numba_scalar's ports of NumPy's loops
            return f"{_COMPLEX_LOOP_NAMES[op]}_c{np.dtype(ct).itemsize * 8}({', '.join(a)})"
        if op == "reciprocal":
            if kind == "f":
                return f"{self.const(1, ct)} / {x}"
            expr = self.const(ss.INT_RECIPROCAL_ELSE, ct)
            for when, then in reversed(ss.int_reciprocal_cases(ct)):
                expr = f"({self.const(then, ct)} if {x} == {self.const(when, ct)} else {expr})"
            return expr
        y = a[1]
        if kind == "b" and op in ss.BOOL_LOGIC:
            return f"({x} {ss.BOOL_LOGIC[op]} {y})"
        if op in ss.PICK_FIRST_IF:
            nan = f" or {x} != {x}" if kind == "f" else ""
            return f"({x} if {x} {ss.PICK_FIRST_IF[op]} {y}{nan} else {y})"
        if op == "pow":
            if kind == "i":
                return f"ipow({x}, {y}, err)"
            return (self.fast_call("pow", ct, f"{x}, {y}") if kind == "f" else None) or \
                f"{x} ** {y}"
        return f"{x} {ss.INFIX[op]} {y}"

    @staticmethod
    def cdiv(x, y, ct) -> str:
        """Complex ``x / y`` as NumPy divides (numba raises on a zero divisor)."""
        return f"cdiv_c{np.dtype(ct).itemsize * 8}({x}, {y})"

    def logistic(self, w, x, out, key) -> str:
        """``x * sigmoid(w)`` of float64 values, as ``ops._logistic``, cast to ``out``."""
        e = self.var(key, f"np.exp(-abs({w}))")
        one = self.const(1.0, ss.LOGISTIC_DTYPE)
        return self.cast(f"({x} * (({one} if {w} >= 0 else {e}) / ({one} + {e})))",
                         ss.LOGISTIC_DTYPE, out)

    def gelu(self, x, src, out, key) -> str:
        """GELU as ``ops._gelu``: ``x * sigmoid(w)``, ``w = 2 sqrt(2/pi) (x + k x**3)`` in
        float64 with ``x**3`` in float64 (in an integer's own type: it wraps);
        numba_math's double-double form for float64 and when fast."""
        if np.dtype(out).kind == "c":
            h, one = self.const(0.5, out), self.const(1.0, out)
            c, k = self.const(ss.GELU_C, out), self.const(ss.GELU_K, out)
            t = self.math("tanh", f"{c} * ({x} + {k} * ({x} * {x} * {x}))", out)
            return f"{h} * {x} * ({one} + {t})"
        if src == out:
            fast = self.fast_call("gelu", out, x)
            if fast:
                return fast
        if src == out == "float64":
            # NumPy's float64 formula loses |w| ulp in the tail (the reference computes in
            # long double); numba has no long double: numba_math's double-double gelu
            # (3.5 ulp) with fast math off too
            self.fast_used["gelu_f64"] = ("gelu", "float64")
            return f"gelu_f64({x})"
        xd = self.var(key, self.cast(x, src, ss.LOGISTIC_DTYPE))
        # x**3 in float64, or in an integer's own type (it wraps, as ops._gelu)
        cube = f"{xd} * {xd} * {xd}" if np.dtype(src).kind == "f" else \
            self.cast(x if src == "bool" else f"{_T[src]}({_T[src]}({x} * {x}) * {x})",
                      src, ss.LOGISTIC_DTYPE)
        c2, k = self.const(ss.GELU_2C, ss.LOGISTIC_DTYPE), self.const(ss.GELU_K, ss.LOGISTIC_DTYPE)
        w = self.var(key, f"{c2} * ({xd} + {k} * ({cube}))")
        return self.logistic(w, xd, out, key)

    # -- the kernel -------------------------------------------------------------------------
    def kernel_body(self) -> list[str]:
        root_val = self.value(self.root, self.out_map, "epi")[0] if self.red is None else None
        if self.red is not None:
            (u,) = ir.operands(self.sub, self.red)
            self.rule = self.reduction(self.red, *self.value(u, self.in_map, "pro")[:2])
            root_val = self.value(self.root, self.out_map, "epi")[0]
        store = f"out[{self.out_index()}] = {root_val}"
        return getattr(self, f"_loops_{self.mode}")(store)

    def reduction(self, r, v, vdt) -> tuple:
        """``(acc dtype, init, combine template, final template, v as acc dtype)`` of
        reduction node ``r`` over values ``v`` of dtype ``vdt``; templates use {a}, {v}."""
        red = self.sub.nodes[r]
        acc_dt, init, comb, final = _reduction_rule(red["op"], vdt, red["dtype"], self.const)
        if red["op"] == "mean":
            count = self.const(math.prod(self.space[a] for a in red["attrs"]["axes"]), acc_dt)
            final = self.cdiv("{a}", count, acc_dt) if np.dtype(acc_dt).kind == "c" else \
                f"{{a}} / {count}"
        return acc_dt, init, comb, self.cast(final, acc_dt, red["dtype"]), \
            self.cast(v, vdt, acc_dt)

    def _code(self, key, indent) -> list[str]:
        return [" " * indent + s for s in self.bufs.get(key, [])]

    def _rng(self, n) -> str:
        return f"prange({n})" if self.parallel else f"range({n})"

    def _loops_scalar(self, store):
        return self._code("pre", 4) + ["    " + store]

    def _loops_flat(self, store):
        e = self.cext[0]
        if self.parallel:
            nb = -(-e // BLOCK)
            head = [f"    for b in prange({nb}):",
                    f"        for i0 in "
                    f"{_urange(f'b * {BLOCK}', f'min(b * {BLOCK} + {BLOCK}, {e})')}:"]
            ind = 12
        else:
            head, ind = [f"    for i0 in range({e}):"], 8
        return self._code("pre", 4) + head + self._code(("epi", 0), ind) + [" " * ind + store]

    def _loops_nest(self, store):
        nc = len(self.cext)
        outer = [(f"i{c}", self.cext[c]) for c in range(nc - 1)]
        lines = self._code("pre", 4)
        lines.append(f"    for t in {self._rng(math.prod(e for _, e in outer))}:")
        lines += ["        " + s for s in _decompose(outer, "t")]
        lines += self._code(("epi", 0), 8)
        lines.append(f"        for i{nc - 1} in range({self.cext[-1]}):")
        return lines + self._code(("epi", 1), 12) + ["            " + store]

    def _reduce_loops(self, first_level, indent, lines, innermost):
        """The reduced loops from ``first_level`` on; ``innermost`` at the deepest level."""
        for i, c in enumerate(self.R):
            lines.append(" " * indent + f"for i{c} in range({self.cext[c]}):")
            indent += 4
            lines += self._code(("pro", first_level + i), indent)
        lines += [" " * indent + s for s in innermost]

    def _combine(self, acc_ref):
        acc_dt, init, comb, fin, v = self.rule
        return f"{acc_ref} = {comb.format(a=acc_ref, v=v)}"

    def _loops_row(self, store):
        acc_dt, init, comb, fin, v = self.rule
        kd = [(f"i{c}", self.cext[c]) for c in self.K]
        lines = self._code("pre", 4)
        lines.append(f"    for t in {self._rng(math.prod(e for _, e in kd))}:")
        lines += ["        " + s for s in _decompose(kd, "t")]
        lines += self._code(("pro", 0), 8)
        lines.append(f"        acc = {init}")
        self._reduce_loops(1, 8, lines, [self._combine("acc")])
        lines.append(f"        red = {fin.format(a='acc')}")
        return lines + self._code("epi", 8) + ["        " + store]

    def _loops_full(self, store):
        acc_dt, init, comb, fin, v = self.rule
        lines = self._code("pre", 4)
        if not (self.parallel and self.R):
            lines.append(f"    acc = {init}")
            self._reduce_loops(0, 4, lines, [self._combine("acc")])
            lines.append(f"    red = {fin.format(a='acc')}")
            return lines + self._code("epi", 4) + ["    " + store]
        r0, rest = self.R[0], self.R[1:]
        e0 = self.cext[r0]
        nch = max(1, min(MAX_CHUNKS, e0))
        ch = -(-e0 // nch)
        lines += [f"    partial = np.empty({nch}, {_T[acc_dt]})",
                  f"    for c in prange({nch}):",
                  f"        acc = {init}",
                  f"        for i{r0} in {_urange(f'c * {ch}', f'min(c * {ch} + {ch}, {e0})')}:"]
        lines += self._code(("pro", 0), 12)
        saved, self.R = self.R, rest
        self._reduce_loops(1, 12, lines, [self._combine("acc")])
        self.R = saved
        lines += ["        partial[c] = acc",
                  f"    total = {init}",
                  f"    for c in range({nch}):",
                  f"        total = {comb.format(a='total', v='partial[c]')}",
                  f"    red = {fin.format(a='total')}"]
        return lines + self._code("epi", 4) + ["    " + store]

    def _loops_column(self, store):
        acc_dt, init, comb, fin, v = self.rule
        kl = self.K[-1]
        ekl = self.cext[kl]
        cb = max(1, min(COL_BLOCK, ekl))
        nb = -(-ekl // cb)
        kd = [(f"i{c}", self.cext[c]) for c in self.K[:-1]]
        lines = self._code("pre", 4)
        lines.append(f"    for t in {self._rng(math.prod(e for _, e in kd) * nb)}:")
        lines.append(f"        jb = t % {nb}")
        if kd:
            lines += ["        " + s for s in _decompose(kd, f"t // {nb}")]
        lines += [f"        j0 = jb * {cb}",
                  f"        jn = min({cb}, {ekl} - j0)",
                  f"        acc = np.empty({cb}, {_T[acc_dt]})",
                  "        for jj in range(jn):",
                  f"            acc[jj] = {init}"]
        lines += self._code(("pro", 0), 8)
        inner = ["for jj in range(jn):", f"    i{kl} = j0 + jj"]
        inner += ["    " + s for s in self.bufs.get(("pro", len(self.R) + 1), [])]
        inner.append("    " + self._combine("acc[jj]"))
        self._reduce_loops(1, 8, lines, inner)
        lines += ["        for jj in range(jn):", f"            i{kl} = j0 + jj",
                  f"            red = {fin.format(a='acc[jj]')}"]
        return lines + self._code("epi", 12) + ["            " + store]

    # -- the module -------------------------------------------------------------------------
    def module(self, struct_key: str) -> str:
        body = self.kernel_body()
        sub, root = self.sub, self.root
        # Releasing the GIL lets other threads run during the loop, but under contention
        # every release is a hand-over and a wait to get it back (~10-25 us): more than a
        # small kernel's whole run. Tiled blocks, the ones graphopt runs in parallel
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
        ops_ = [sub.nodes[n]["op"] for n in ir.topo_order(sub)
                if sub.nodes[n]["op"] not in ("input", "const")]
        head = [f"# graphopt kernel {struct_key[:12]} (codegen v{CODEGEN_VERSION}), "
                f"pattern {self.pattern}: {' -> '.join(ops_)}",
                f"# out {tuple(rd['shape'])} {rd['dtype']}; loop space {self.space} "
                f"collapsed to {tuple(self.cext)} ({self.mode} loops, "
                f"{'parallel' if self.parallel else 'one thread'}, "
                f"{'releases' if self.nogil else 'keeps'} the GIL)",
                f"# fast math: {'on' if self.fast_math else 'off'}; numba_math "
                f"{self.fast_digest}; numba_scalar {_file_digest('numba_scalar')}",
                "import cmath  # noqa: F401", "", "import numba", "import numpy as np",
                "from numba import prange  # noqa: F401", "from numba import types as nt",
                "from graphopt.einsum import evaluate as einsum_evaluate  # noqa: F401"]
        if self.parallel:
            head.append("from graphopt.backends.numba_codegen import launch")
        for module, names in (("numba_math", ("fmaximum", "fminimum", "sum_add")),
                              ("numba_scalar", SCALAR_HELPERS)):
            used = [f for f in names if any(f"{f}(" in b for b in body)]
            if used:
                head.append(f"from graphopt.backends.{module} import {', '.join(used)}")
        if self.fast_used:
            head.append("from graphopt.backends.numba_math import FAST")
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


