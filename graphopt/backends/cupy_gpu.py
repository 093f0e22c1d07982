"""The cupy backend: the optimized graph on an NVIDIA GPU (DESIGN §5, issue 6).

- Fused groups and single elementwise/reduction ops become generated
  ``cupy.ElementwiseKernel``/``ReductionKernel`` stages (``cuda_codegen``), cached by the
  group's structural key; groups the generator cannot express run op by op on cupy.
- Pairwise einsums run as one cuBLAS strided-batched GEMM called directly (any transposes
  and pre-sums first) or through ``cupy.einsum``, chosen by a cost model and, at
  ``opt_level=3``, by timing. A scalar ``* c`` / ``/ c`` epilogue becomes the GEMM's alpha.
- The arena is one device allocation per checked-out arena, viewed at the planned offsets.
  Inputs may be NumPy (copied to the device once per call) or cupy arrays; outputs are cupy
  arrays unless ``compile(..., to_host=True)``.
- ``compile(..., cuda_graph=True)`` captures the plan's launches once and replays them.

Every cupy import is inside a function: importing graphopt never imports cupy.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import threading
import time
import warnings
from collections import OrderedDict

import numpy as np

from .. import einsum as einsum_mod
from .. import ir, ops
from ..errors import GraphError
from ..fused import node_subgraph
from ..kernel import Kernel
from ..plan import Plan
from ..signature import restructure
from . import cuda_codegen as cg
from . import scalar_semantics as ss
from .gemm import GemmPlan, gemm_plan, gemm_source, run_gemm, transpose_copy_bytes
from .base import Backend, register_backend

# Nominal H100-class rates for the contraction cost model (only their ratio matters).
PEAK_FLOPS = 50e12
PEAK_BYTES = 3.0e12


def contraction_estimates(p: GemmPlan, shapes, itemsize: int) -> dict:
    """Seconds the cost model predicts for the GEMM path (FLOPs at the nominal rate plus the
    bytes of the transposes it copies), and for ``cupy.einsum``."""
    B, M, K, N = p.bmkn
    flops = 2.0 * B * M * K * N
    copy = transpose_copy_bytes(p, shapes, itemsize)
    # cupy.einsum: assume it copies both operands, and its result is copied into the output.
    einsum_copy = 2 * (B * M * K + B * K * N + B * M * N) * itemsize
    return {"cublas-gemm": flops / PEAK_FLOPS + copy / PEAK_BYTES,
            "cupy-einsum": flops / PEAK_FLOPS + einsum_copy / PEAK_BYTES,
            "copy_bytes": copy}


# --------------------------------------------------------------------------------- backend


@functools.lru_cache(maxsize=1)
def _device_count() -> int:
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # no driver, no device, broken install: not available
        return 0


@functools.lru_cache(maxsize=1)
def cutensor_available() -> bool:
    """Whether cupy can load cuTENSOR here (reported by the benchmark; no path uses it yet:
    the GPU this backend was measured on has no cuTENSOR, so a cuTENSOR path never ran)."""
    try:
        from cupy_backends.cuda.libs import cutensor  # noqa: F401
        import cupyx.cutensor  # noqa: F401
    except Exception:  # the cuTENSOR library is an optional cupy extra
        return False
    return True


# NVRTC contracts a*b + c into an FMA unless told not to; plain IEEE keeps x*x - y*y == 0
# for x == y (fast math never changes what exact arithmetic gives: README "Fast math").
NVRTC_OPTIONS = ("--fmad=false",)


@register_backend
class CupyBackend(Backend):
    name = "cupy"
    compile_options = frozenset({"cuda_graph", "to_host"})
    install_hint = ("needs an NVIDIA GPU and cupy: pip install cupy-cuda12x (CUDA 12) or "
                    "cupy-cuda13x (CUDA 13)")
    host_arrays = False     # inputs are copied to the device

    def __init__(self, **options):
        super().__init__(**options)
        self._lock = threading.Lock()
        self._programs: dict = {}
        self._kernels: dict = {}

    @classmethod
    def available(cls) -> bool:
        return importlib.util.find_spec("cupy") is not None and _device_count() > 0

    @property
    def oom_errors(self) -> tuple:
        import cupy

        return (cupy.cuda.memory.OutOfMemoryError,)

    # -- memory -----------------------------------------------------------------------------
    def alloc(self, nbytes: int):
        import cupy

        return cupy.empty(max(nbytes, 1), dtype=cupy.uint8)

    def empty(self, shape, dtype):
        import cupy

        return cupy.empty(shape, dtype=dtype)

    def asarray(self, a):
        import cupy

        if isinstance(a, cupy.ndarray) and a.device.id == cupy.cuda.Device().id:
            return a
        return cupy.asarray(a)

    def constant(self, value):
        import cupy

        return cupy.asarray(value)

    def finish(self, results: list, options: dict) -> list:
        if options.get("to_host"):
            import cupy

            return [cupy.asnumpy(r) for r in results]
        return results

    def release_cached(self) -> None:
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()
        cupy.get_default_pinned_memory_pool().free_all_blocks()

    # -- timing -----------------------------------------------------------------------------
    def synchronize(self) -> None:
        import cupy

        cupy.cuda.get_current_stream().synchronize()

    def step_clock(self):
        return EventStepClock()

    # -- kernels ----------------------------------------------------------------------------
    def kernel(self, G, n, ctx) -> Kernel:
        d = G.nodes[n]
        _check_options(ctx.options)
        sub = d["attrs"]["graph"] if d["op"] == "fused" else node_subgraph(G, n)
        operands = ir.operands(G, n)
        literals = {k: np.asarray(G.nodes[u]["attrs"]["value"]).reshape(()).item()
                    for k, u in enumerate(operands) if G.nodes[u]["op"] == "const"
                    and math.prod(G.nodes[u]["shape"]) == 1}
        mem = G.graph.get("memory_plan")
        donor = mem.inplace.get(n) if mem is not None else None
        aliased = frozenset(k for k, u in enumerate(operands) if u == donor)
        key = (ir.structural_hash(sub), tuple(sorted((k, repr(v)) for k, v in literals.items())),
               aliased)
        with self._lock:
            prog = self._programs.get(key)
        if prog is None:
            try:
                prog = cg.compile_group(sub, literals, aliased)
            except cg.Unsupported as e:
                prog = e
            with self._lock:
                self._programs[key] = prog
        if isinstance(prog, cg.Unsupported):
            return self._eager_kernel(sub, n, str(prog))
        return self._program_kernel(prog, n, ctx)

    def _program_kernel(self, prog: cg.GroupProgram, n: int, ctx) -> Kernel:
        import cupy

        consts = [cupy.asarray(c) for c in prog.constants]
        runs, impls, details, sources = [], [], {}, [prog.source]
        for s in prog.stages:
            if s.kind == "einsum":
                run, impl, info, src = self._einsum_stage(s, ctx)
                details.update(info)
                sources.append(f"// stage {len(runs)} ({prog.name}):\n{src}")
            else:
                run, impl = self._kernel_stage(s), f"cupy-{s.kind}"
            getters = [_getter(o, consts, broadcast=s.kind == "reduction") for o in s.operands]
            runs.append((run, getters, s.dest == "out", s.shape, s.dtype))
            impls.append(impl)
        details["stages"] = impls
        fn = _program_fn(runs, prog)
        fn.__name__ = prog.name
        return Kernel(prog.name, fn, "\n\n".join(sources), "+".join(impls), node=n,
                      details=details)

    def _kernel_stage(self, s):
        import cupy

        key = (s.kind, s.name, s.in_params, s.out_params, getattr(s, "operation", ""),
               getattr(s, "map_expr", ""), getattr(s, "post_map_expr", ""), s.preamble)
        with self._lock:
            k = self._kernels.get(key)
        if k is None:
            if s.kind == "elementwise":
                k = cupy.ElementwiseKernel(s.in_params, s.out_params, s.operation, s.name,
                                           preamble=s.preamble, options=NVRTC_OPTIONS)
            else:
                k = cupy.ReductionKernel(s.in_params, s.out_params, s.map_expr, s.reduce_expr,
                                         s.post_map_expr, s.identity, s.name,
                                         reduce_type=s.reduce_type, preamble=s.preamble,
                                         options=NVRTC_OPTIONS)
            with self._lock:
                self._kernels[key] = k
        if s.kind == "elementwise":
            # 256 threads per block: 1.64 -> 2.0 TB/s on a 512 MB broadcast
            # exp(s - m) on an H100 (cupy's default is 128); never slower on what we measured.
            return lambda views, dest: k(*views, dest, block_size=256)
        axes, keepdims = s.axes, s.keepdims
        return lambda views, dest: k(*views, out=dest, axis=axes, keepdims=keepdims)

    def _einsum_stage(self, s, ctx):
        """One contraction: ``(run, impl, details, source)``."""
        shapes = [o.shape for o in s.operands]
        eq, dtype, path = s.equation, s.dtype, s.path
        cands = contraction_candidates(eq, shapes, dtype)
        impl, reason = cands[0]
        info = {"contraction": impl, "reason": reason}
        if ctx.opt_level >= 3 and len(cands) > 1:
            timings = {c: _time_candidate(c, eq, shapes, dtype, path) for c, _ in cands}
            impl = min(timings, key=timings.get)
            info.update(contraction=impl, reason="fastest measured (opt_level 3)",
                        timings_ms={c: round(t * 1e3, 4) for c, t in timings.items()})
        fn = _contraction_fn(impl, eq, shapes, dtype, path, s.alpha)
        if s.alpha != 1:
            info["alpha"] = s.alpha
        return fn, impl, info, _contraction_source(impl, eq, shapes, s.alpha)

    def _eager_kernel(self, sub, n, why: str) -> Kernel:
        fn = _eager_fn(sub)
        members = [sub.nodes[m] for m in ir.topo_order(sub)
                   if sub.nodes[m]["op"] not in ("input", "const")]
        src = "\n".join([f"# not generated ({why}): the group runs op by op on cupy"] +
                         [f"# {d['op']} {d['attrs']}" for d in members])
        return Kernel(f"cupy_ops_{n}", fn, src, "cupy-ops", node=n, details={"reason": why})

    def build_plan(self, G, source_graph, ctx, report):
        plan = super().build_plan(G, source_graph, ctx, report)
        return CudaGraphPlan.wrap(plan) if ctx.options.get("cuda_graph") else plan


def _check_options(options: dict) -> None:
    for k in ("cuda_graph", "to_host"):
        if k in options and not isinstance(options[k], bool):
            raise GraphError(f"compile option {k}= must be True or False, got {options[k]!r}")


# ------------------------------------------------------------------------- stage runtime


def _apply_chain(a, chain):
    import cupy

    for op, arg in chain:
        a = a.transpose(arg) if op == "transpose" else \
            cupy.broadcast_to(a, arg) if op == "broadcast_to" else a.reshape(arg)
    return a


def _getter(o: cg.Operand, consts: list, broadcast: bool):
    """``get(args, results) -> array`` for one kernel argument."""
    import cupy

    if o.source == "shape":
        z = cupy.broadcast_to(cupy.zeros((), dtype=bool), o.shape)
        return lambda args, res: z
    i, chain, shape = o.index, o.chain, o.shape
    if o.source == "const":
        c = consts[i]
        base = lambda args, res: c  # noqa: E731
    elif o.source == "input":
        base = lambda args, res: args[i]  # noqa: E731
    else:
        base = lambda args, res: res[i]  # noqa: E731
    if not chain and not broadcast:
        return base

    def get(args, res):
        a = _apply_chain(base(args, res), chain)
        return cupy.broadcast_to(a, shape) if broadcast and a.shape != shape else a
    return get


def _program_fn(runs, prog: cg.GroupProgram):
    import cupy

    shape, dtype = prog.shape, prog.dtype
    if len(runs) == 1 and not prog.via_temp:
        run, getters, _, _, _ = runs[0]

        def one(args, out):
            if out is None:
                out = cupy.empty(shape, dtype)
            run([g(args, None) for g in getters], out)
            return out
        return one

    def fn(args, out):
        if out is None:
            out = cupy.empty(shape, dtype)
        res = []
        for run, getters, to_out, sshape, sdtype in runs:
            dest = out if to_out else cupy.empty(sshape, sdtype)
            run([g(args, res) for g in getters], dest)
            res.append(dest)
        if prog.via_temp:
            cupy.copyto(out, res[-1])
        return out
    return fn


def _eager_fn(sub):
    """The sub-graph op by op with cupy (NumPy's API dispatches to cupy arrays)."""
    import cupy

    order = ir.topo_order(sub)
    pos = {nid: k for k, nid in enumerate(sub.graph["inputs"])}
    consts = {m: cupy.asarray(sub.nodes[m]["attrs"]["value"]) for m in order
              if sub.nodes[m]["op"] == "const"}
    (res,) = sub.graph["outputs"]
    d_out = sub.nodes[res]

    def fn(args, out):
        env = {}
        for m in order:
            d = sub.nodes[m]
            if d["op"] == "input":
                env[m] = args[pos[m]]
            elif d["op"] == "const":
                env[m] = consts[m]
            else:
                xs = [env[u] for u in ir.operands(sub, m)]
                eq = d["attrs"].get("equation")
                if d["op"] == "relu":
                    r = cupy.maximum(xs[0], xs[0].dtype.type(0))
                elif d["op"] == "einsum" and len(xs) <= 2:
                    r = cupy.einsum(einsum_mod.to_ascii(eq), *xs)
                elif d["op"] == "einsum":
                    import opt_einsum

                    r = opt_einsum.contract(eq, *xs, backend="cupy")
                else:
                    if d["op"] == "pow" and xs[1].dtype.kind in "iu" and \
                            xs[0].dtype.kind in "biu" and bool((xs[1] < 0).any()):
                        raise ValueError(ss.INT_POW_NEGATIVE)  # cupy returns a value
                    r = ops.OPS[d["op"]].impl(xs, d["attrs"])
                env[m] = cupy.asarray(r).astype(d["dtype"], copy=False)
        if out is None:
            return env[res].copy()
        cupy.copyto(out, env[res].reshape(d_out["shape"]))
        return out
    return fn


# -------------------------------------------------------------------------- contractions


def contraction_candidates(eq: str, shapes, dtype: str) -> list[tuple[str, str]]:
    """Implementations that can run the einsum, best first by the cost model, with why."""
    n_ops = len(shapes)
    if n_ops > 2:
        return [("opt_einsum-pairwise", f"{n_ops} operands: pairwise steps with cupy")]
    if n_ops == 1:
        return [("cupy-einsum", "one operand: a transpose/trace/sum")]
    p = gemm_plan(eq, shapes)
    if p is None:
        return [("cupy-einsum", "repeated labels (diagonal): not a GEMM")]
    est = contraction_estimates(p, shapes, np.dtype(dtype).itemsize)
    gemm = ("cublas-gemm", f"batched GEMM B,M,K,N={p.bmkn}, {est['copy_bytes']} B of "
            f"transposes, est {est['cublas-gemm'] * 1e6:.1f} us")
    ein = ("cupy-einsum", f"cupy's einsum, est {est['cupy-einsum'] * 1e6:.1f} us")
    return [gemm, ein] if est["cublas-gemm"] <= est["cupy-einsum"] else [ein, gemm]


def _contraction_fn(impl: str, eq: str, shapes, dtype: str, path=None, alpha=1):
    """``run(views, dest)``: the contraction (times ``alpha``) into ``dest``."""
    import cupy

    if impl == "cublas-gemm" and dtype in Cublas.TYPES:
        p = gemm_plan(eq, shapes)
        cublas = Cublas.get()
        matmul = lambda x, y, z: cublas.gemm(x, y, z, alpha)  # noqa: E731

        def gemm(views, dest):
            a, b = (v.astype(dtype, copy=False) for v in views)
            run_gemm(cupy, p, a, b, dest, matmul)
        return gemm
    fn = _unscaled_contraction_fn(impl, eq, shapes, dtype, path)
    if alpha == 1:
        return fn

    def scaled(views, dest):
        fn(views, dest)
        cupy.multiply(dest, dest.dtype.type(alpha), out=dest)
    return scaled


def _unscaled_contraction_fn(impl: str, eq: str, shapes, dtype: str, path):
    import cupy

    if impl == "cublas-gemm":  # integer and bool GEMMs: cupy's own kernels
        p = gemm_plan(eq, shapes)

        def gemm(views, dest):
            a, b = (v.astype(dtype, copy=False) for v in views)
            run_gemm(cupy, p, a, b, dest)
        return gemm
    if impl == "opt_einsum-pairwise":
        import opt_einsum

        expr = opt_einsum.contract_expression(eq, *shapes, optimize=list(path or ()) or "greedy")

        def pairwise(views, dest):
            xs = [v.astype(dtype, copy=False) for v in views]
            cupy.copyto(dest, expr(*xs), casting="unsafe")  # backend inferred: cupy
        return pairwise
    ascii_eq = einsum_mod.to_ascii(eq)

    def via_einsum(views, dest):
        r = cupy.einsum(ascii_eq, *(v.astype(dtype, copy=False) for v in views))
        cupy.copyto(dest, r.reshape(dest.shape), casting="unsafe")
    return via_einsum


def _contraction_source(impl: str, eq: str, shapes, alpha=1) -> str:
    scale = f"\nout *= {alpha!r}" if alpha != 1 else ""
    if impl == "opt_einsum-pairwise":
        return f"out[...] = opt_einsum.contract({eq!r}, ...)  # cupy arrays" + scale
    if impl != "cublas-gemm":
        return f"out[...] = cupy.einsum({eq!r}, ...)" + scale
    p = gemm_plan(eq, shapes)
    M, N = p.bmkn[1], p.bmkn[3]
    k = f"{alpha!r} * " if alpha != 1 else ""

    def product(lead):
        if p.out_perm is None:
            return [f"out.reshape({lead}{M}, {N})[...] = {k}A @ B  # cublasGemmStridedBatchedEx"]
        return [f"out[...] = ({k}A @ B).reshape{p.res_shape}.transpose{p.out_perm}"]
    return gemm_source(p, eq, "cuBLAS", product)


def _time_candidate(impl: str, eq: str, shapes, dtype: str, path=None,
                    repeat: int = 3) -> float:
    """Median seconds of ``impl`` on random device operands (opt_level 3 autotuning)."""
    import cupy

    rng = cupy.random.default_rng(0)
    xs = [rng.standard_normal(s).astype(dtype) for s in shapes]
    out_shape = einsum_mod.parse(eq, shapes).output_shape
    dest = cupy.empty(out_shape, dtype)
    fn = _contraction_fn(impl, eq, shapes, dtype, path)
    fn(xs, dest)
    times = []
    for _ in range(repeat):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn(xs, dest)
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
    return float(np.median(times))


def _loaded_library(stem: str) -> str:
    """Path of the shared library ``stem`` (e.g. ``libcublas.so``) this process has loaded."""
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if path.rsplit("/", 1)[-1].startswith(stem):
                return path
    import ctypes.util

    found = ctypes.util.find_library(stem[3:].split(".")[0])
    if found is None:
        raise GraphError(f"cannot locate {stem} (cupy's cuBLAS)")
    return found


class Cublas:
    """Strided-batched GEMM through cuBLAS directly (ctypes, the library cupy loaded), on
    the current stream, with a handle and workspace per thread. cupy's own wrappers refuse
    to run while a stream captures a CUDA graph; this one can be captured."""

    WORKSPACE = 32 << 20  # cuBLAS's recommended workspace on Hopper
    # dtype -> (cudaDataType, cublasComputeType, scalar C type); float16 accumulates in float32
    TYPES = {"float16": (2, 68, "f"), "float32": (0, 68, "f"), "float64": (1, 70, "d"),
             "complex64": (4, 68, "F"), "complex128": (5, 70, "D")}
    _local = threading.local()

    @classmethod
    def get(cls) -> "Cublas":
        import cupy

        dev = cupy.cuda.Device().id
        inst = getattr(cls._local, "by_device", {}).get(dev)
        if inst is None:
            inst = cls()
            cls._local.__dict__.setdefault("by_device", {})[dev] = inst
        return inst

    def __init__(self):
        import ctypes

        import cupy

        cupy.cuda.device.get_cublas_handle()  # makes cupy load libcublas into the process
        c = ctypes
        lib = c.CDLL(_loaded_library("libcublas.so"))
        h = c.c_void_p()
        self._check(lib.cublasCreate_v2(c.byref(h)), "cublasCreate")
        self.workspace = cupy.empty(self.WORKSPACE, dtype=cupy.uint8)
        lib.cublasSetWorkspace_v2.argtypes = [c.c_void_p, c.c_void_p, c.c_size_t]
        self._check(lib.cublasSetWorkspace_v2(h, self.workspace.data.ptr, self.WORKSPACE),
                    "cublasSetWorkspace")
        lib.cublasSetStream_v2.argtypes = [c.c_void_p, c.c_void_p]
        f = lib.cublasGemmStridedBatchedEx
        i, ll, p = c.c_int, c.c_longlong, c.c_void_p
        f.argtypes = [p, i, i, i, i, i, p, p, i, i, ll, p, i, i, ll, p, p, i, i, ll, i, i, i]
        f.restype = i
        self._lib, self._handle, self._gemm = lib, h, f
        self._scalars: dict = {}  # (type code, value) -> (pointer, the ctypes box it points to)

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != 0:
            raise GraphError(f"{what} failed with cuBLAS status {status}")

    @staticmethod
    def _layout(x):
        """``(op, ld, batch_stride)`` that read matrix ``x[..., R, C]`` (row-major indices)
        as its transpose in column-major terms, or None if no single ``ld`` describes it."""
        R, C = x.shape[-2:]
        it = x.itemsize
        sr, sc = x.strides[-2] // it, x.strides[-1] // it
        bs = x.strides[0] // it if x.ndim == 3 and x.shape[0] > 1 else 0
        if (sc == 1 or C == 1) and (R == 1 or sr >= max(1, C)):
            return 0, (sr if R > 1 else max(1, C)), bs        # CUBLAS_OP_N on x^T
        if (sr == 1 or R == 1) and (C == 1 or sc >= max(1, R)):
            return 1, (sc if C > 1 else max(1, R)), bs        # CUBLAS_OP_T on x
        return None

    def _alpha(self, sk: str, value):
        import ctypes as c

        key = (sk, value)
        if key not in self._scalars:
            box = {"f": lambda: c.c_float(value), "d": lambda: c.c_double(value),
                   "F": lambda: (c.c_float * 2)(complex(value).real, complex(value).imag),
                   "D": lambda: (c.c_double * 2)(complex(value).real, complex(value).imag)}[sk]()
            self._scalars[key] = (c.cast(c.pointer(box), c.c_void_p), box)
        return self._scalars[key][0]

    def gemm(self, a, b, c, alpha=1) -> None:
        """``c[i] = alpha * a[i] @ b[i]`` for (batched) row-major matrices; ``c`` is
        C-contiguous."""
        import cupy

        M, K = a.shape[-2:]
        N = b.shape[-1]
        batch = c.shape[0] if c.ndim == 3 else 1
        if M == 0 or N == 0 or batch == 0:
            return
        if K == 0:
            c.fill(0)
            return
        la, lb = self._layout(a), self._layout(b)
        if la is None:
            a = cupy.ascontiguousarray(a)
            la = self._layout(a)
        if lb is None:
            b = cupy.ascontiguousarray(b)
            lb = self._layout(b)
        dtype, compute, sk = self.TYPES[c.dtype.name]
        alpha, beta = self._alpha(sk, alpha), self._alpha(sk, 0)
        ldc = c.strides[-2] // c.itemsize if M > 1 else max(1, N)
        bc = c.strides[0] // c.itemsize if c.ndim == 3 and batch > 1 else 0
        self._lib.cublasSetStream_v2(self._handle, cupy.cuda.get_current_stream().ptr)
        # Column-major: C^T (N x M) = B^T (N x K) @ A^T (K x M).
        self._check(self._gemm(self._handle, lb[0], la[0], N, M, K, alpha,
                               b.data.ptr, dtype, lb[1], lb[2], a.data.ptr, dtype, la[1], la[2],
                               beta, c.data.ptr, dtype, ldc, bc, batch, compute, -1),
                    "cublasGemmStridedBatchedEx")


# ------------------------------------------------------------------------------ profiler


class EventStepClock:
    """Step timestamps from CUDA events on the current stream: nothing synchronizes between
    steps, so the timeline shows device time; ``read()`` anchors it to the host clock."""

    def __init__(self):
        self._events: list = []
        self._t0 = 0

    def mark(self) -> None:
        import cupy

        if not self._events:
            cupy.cuda.get_current_stream().synchronize()
            self._t0 = time.perf_counter_ns()
        self._events.append(cupy.cuda.get_current_stream().record())

    def read(self) -> list[int]:
        import cupy

        if not self._events:
            return []
        self._events[-1].synchronize()
        first = self._events[0]
        return [self._t0 + int(round(cupy.cuda.get_elapsed_time(first, e) * 1e6))
                for e in self._events]


# ---------------------------------------------------------------------------- CUDA graphs


class CudaGraphPlan(Plan):
    """A plan whose launches are captured once into a CUDA graph and replayed
    (``compile(..., cuda_graph=True)``): one launch per call instead of one per kernel.

    A graph reads its inputs at the device addresses it was captured with, so graphs are
    kept per input addresses (up to ``max_graphs``; re-calling with the same device arrays,
    or with NumPy inputs whose upload lands where the last one did, replays without a copy).
    Other calls copy their inputs into the plan's own buffers and replay the graph that
    reads those. Every graph shares one arena, one set of output buffers and a private
    memory pool for the temporaries inside kernels (nothing else may reuse memory a graph
    holds); outputs are copied out, so returned arrays are never reused. Calls are
    serialized by a lock. Plans with large outputs (``max_output_bytes``), and plans with
    something that cannot be captured (``graph_error``), run eagerly.
    """

    max_graphs = 8
    # Graph replays return copies of the outputs; past this many output bytes the copy costs
    # more than the launches a graph saves, and the plan runs eagerly instead.
    max_output_bytes = 16 << 20

    @classmethod
    def wrap(cls, plan: Plan) -> "CudaGraphPlan":
        return cls(source_graph=plan.source_graph, graph=plan.graph, steps=plan.steps,
                   memory=plan.memory, arena_bytes=plan.arena_bytes, backend=plan.backend,
                   pool=plan.pool, input_slots=plan._input_slots,
                   output_slots=plan._output_slots, init_vals=plan._init_vals,
                   report=plan.report, options=plan.options)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._graphs: OrderedDict = OrderedDict()
        self._glock = threading.Lock()
        self._garena = None
        self._statics = None
        self._last_stream = None
        self.graph_error: str | None = None
        self._output_bytes = sum(s.nbytes for s in self.steps if s.is_output)
        self.graph_stats = {"captures": 0, "replays": 0, "input_copies": 0}

    def _setup(self) -> None:
        import cupy

        self._garena = self._new_arena()  # held for the plan's life: graphs point into it
        for i, shape, dtype in self._output_allocs:
            self._garena.outs[i] = cupy.empty(shape, dtype)
        self._gpool = cupy.cuda.MemoryPool()
        self._stream = cupy.cuda.Stream(non_blocking=True)

    def _execute(self, vals, outs) -> None:
        for fn, ins, out_slot, i in self._program:
            vals[out_slot] = fn([vals[j] for j in ins], outs[i])

    def _capture(self, arrays):
        import cupy

        vals, outs = self._garena.vals, self._garena.outs
        for slot, a in zip(self._input_slots, arrays):
            vals[slot] = a
        s = self._stream
        s.wait_event(cupy.cuda.get_current_stream().record())
        with cupy.cuda.using_allocator(self._gpool.malloc), s:
            if not self.graph_stats["captures"]:
                # Compile kernels, create library handles and fill the private pool before
                # capturing: none of that may happen inside a capture.
                self._execute(vals, outs)
                s.synchronize()
            s.begin_capture()
            try:
                self._execute(vals, outs)
            finally:
                graph = s.end_capture()
        s.synchronize()
        self.graph_stats["captures"] += 1
        return graph

    def run(self, arrays: list):
        import cupy

        if self.graph_error is not None or self._output_bytes > self.max_output_bytes:
            return Plan.run(self, arrays)
        with self._glock:
            if self._garena is None:
                self._setup()
            key = tuple((a.data.ptr, a.strides) for a in arrays)
            graph = self._graphs.get(key)
            try:
                if graph is None and len(self._graphs) < self.max_graphs:
                    graph = self._graphs[key] = self._capture(arrays)
            except Exception as e:  # something in the plan cannot be captured: run eagerly
                self.graph_error = f"{type(e).__name__}: {e}"
                warnings.warn(f"graphopt: CUDA graph capture failed, plan runs eagerly "
                              f"({self.graph_error})", stacklevel=3)
                return Plan.run(self, arrays)
            if graph is None:
                if self._statics is None:
                    self._statics = [cupy.empty(a.shape, a.dtype) for a in arrays]
                for buf, a in zip(self._statics, arrays):
                    cupy.copyto(buf, a)
                self.graph_stats["input_copies"] += len(arrays)
                graph = self._graphs.get("static")
                if graph is None:
                    graph = self._graphs["static"] = self._capture(self._statics)
            stream = cupy.cuda.get_current_stream()
            if self._last_stream is not None and self._last_stream != stream:
                stream.wait_event(self._last_stream.record())
            self._last_stream = stream
            graph.launch(stream)
            self.graph_stats["replays"] += 1
            vals = self._garena.vals
            results = [vals[s].copy() for s in self._output_slots]
        return restructure(self._struct, self.backend.finish(results, self.options))
