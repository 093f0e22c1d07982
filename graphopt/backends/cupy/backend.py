"""The cupy backend: the optimized graph on an NVIDIA GPU (docs/ARCHITECTURE.md).

- Fused groups and single elementwise/reduction ops become generated
  ``cupy.ElementwiseKernel``/``ReductionKernel`` stages (``cuda_codegen``), cached by the
  group's structural key; groups the generator cannot express run op by op on cupy.
- A sliced or many-operand einsum (a tensor network) runs along its path on the device
  (``path_kernel``: each step a cuBLAS GEMM or ``cupy.einsum`` in one arena, slice by slice
  within the memory limit the slicing pass met).
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

import contextlib
import functools
import importlib.util
import math
import threading

import numpy as np

from ... import ir
from ...analysis.fused import computed_members, node_subgraph, runs_along_path
from ...contraction.rates import DEVICE_RATES
from ...errors import GraphError
from ...runtime.kernel import Kernel
from ..base import Backend, register_backend
from ..path_kernel import path_kernel
from . import codegen as cg
from .kernels.contractions import (
    contraction_candidates,
    contraction_fn,
    contraction_source,
    cublas_matmul,
    time_candidate,
)
from .kernels.graphs import CudaGraphPlan, EventStepClock
from .kernels.runtime import eager_fn, operand_getter, program_fn

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
    """Whether cupy can load cuTENSOR here (reported by the benchmark; no contraction path
    uses cuTENSOR: one that never ran on a GPU with it is not shipped)."""
    try:
        import cupyx.cutensor  # noqa: F401
        from cupy_backends.cuda.libs import cutensor  # noqa: F401
    except Exception:  # the cuTENSOR library is an optional cupy extra
        return False
    return True


# NVRTC contracts a*b + c into an FMA unless told not to; plain IEEE keeps x*x - y*y == 0
# for x == y (fast math never changes what exact arithmetic gives: README "Fast math").
NVRTC_OPTIONS = ("--fmad=false",)


@register_backend
class CupyBackend(Backend):
    """The GPU backend: fused groups as generated cupy kernels, contractions through cuBLAS."""
    name = "cupy"
    compile_options = frozenset({"cuda_graph", "to_host"})
    install_hint = ("needs an NVIDIA GPU and cupy: pip install cupy-cuda12x (CUDA 12) or "
                    "cupy-cuda13x (CUDA 13)")
    host_arrays = False     # inputs are copied to the device
    # a network (one contraction of inputs) is one node run along its path on the device
    # (``path_kernel``); its slices run one after another on the stream
    runs_contraction_paths = True
    slices_at_once = False
    # a device's rates: every GEMM-shaped pair a GEMM, the path search sized to the GPU
    rates = DEVICE_RATES

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
    def memory_bytes(self) -> int | None:
        """The current device's memory (a call's arena and workspace live there)."""
        import cupy

        return int(cupy.cuda.Device().mem_info[1])

    @contextlib.contextmanager
    def allocation_meter(self):
        """Meter the device memory the code inside allocates at once (from cupy's memory
        pool, in the pool's rounded block sizes, on this thread): yields ``peak()``."""
        from cupy.cuda import memory_hook

        class Peak(memory_hook.MemoryHook):
            name = "graphopt_peak"

            def __init__(self):
                self.now = self.peak = 0

            def malloc_postprocess(self, **kw):
                self.now += kw["mem_size"]
                self.peak = max(self.peak, self.now)

            def free_postprocess(self, **kw):
                self.now -= kw["mem_size"]

        hook = Peak()
        self.synchronize()
        with hook:
            yield lambda: hook.peak

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
        if d["op"] == "einsum" and runs_along_path(G, n):
            import cupy

            return path_kernel(G, n, "cupy-sliced", cupy, cublas_matmul(d["dtype"]))
        sub = d["attrs"]["graph"] if d["op"] == "fused" else node_subgraph(G, n)
        operands = ir.operands(G, n)
        literals = {k: np.asarray(G.nodes[u]["attrs"]["value"]).reshape(()).item()
                    for k, u in enumerate(operands) if G.nodes[u]["op"] == "const"
                    and math.prod(G.nodes[u]["shape"]) == 1}
        mem = G.graph.get("arena_layout")
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
            getters = [operand_getter(o, consts, broadcast=s.kind == "reduction")
                       for o in s.operands]
            runs.append((run, getters, s.dest == "out", s.shape, s.dtype))
            impls.append(impl)
        details["stages"] = impls
        fn = program_fn(runs, prog)
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
            # 256 threads per block (cupy's default is 128): more of an H100's bandwidth on
            # large broadcasts, and never slower on smaller ones
            return lambda views, dest: k(*views, dest, block_size=256)
        axes, keepdims = s.axes, s.keepdims
        return lambda views, dest: k(*views, out=dest, axis=axes, keepdims=keepdims)

    def _einsum_stage(self, s, ctx):
        """One contraction: ``(run, impl, details, source)``."""
        shapes = [o.shape for o in s.operands]
        eq, dtype, path = s.equation, s.dtype, s.contraction.path
        cands = contraction_candidates(s.contraction)
        impl, reason = cands[0]
        info = {"contraction": impl, "reason": reason}
        if ctx.opt_level >= 3 and len(cands) > 1:
            timings = {c: time_candidate(c, eq, shapes, dtype, path) for c, _ in cands}
            impl = min(timings, key=timings.get)
            info.update(contraction=impl, reason="fastest measured (opt_level 3)",
                        timings_ms={c: round(t * 1e3, 4) for c, t in timings.items()})
        fn = contraction_fn(impl, eq, shapes, dtype, path, s.alpha)
        if s.alpha != 1:
            info["alpha"] = s.alpha
        return fn, impl, info, contraction_source(impl, eq, shapes, s.alpha)

    def _eager_kernel(self, sub, n, why: str) -> Kernel:
        fn = eager_fn(sub)
        members = [sub.nodes[m] for m in computed_members(sub)]
        src = "\n".join([f"# not generated ({why}): the group runs op by op on cupy"] +
                         [f"# {d['op']} {d['attrs']}" for d in members])
        return Kernel(f"cupy_ops_{n}", fn, src, "cupy-ops", node=n, details={"reason": why})

    def build_plan(self, G, source_graph, ctx, report):
        plan = super().build_plan(G, source_graph, ctx, report)
        return plan.rebuilt_as(CudaGraphPlan) if ctx.options.get("cuda_graph") else plan


def _check_options(options: dict) -> None:
    for k in ("cuda_graph", "to_host"):
        if k in options and not isinstance(options[k], bool):
            raise GraphError(f"compile option {k}= must be True or False, got {options[k]!r}")
