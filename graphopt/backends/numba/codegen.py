"""Building numba kernels for fused groups: generate the module source (``numba_kernels/``:
``source`` for the loop-nest form, ``rows`` for normalization groups, ``blocked`` for the
NumPy-blocked form), compile it through the disk cache (``disk_cache``), keep kernels in a
bounded in-process cache, and ``launch`` parallel ones safely from several threads.
Generated modules import ``launch`` and ``run_blocks`` from here.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict

import networkx as nx

from ... import ir
from ...analysis.fused import classify, computed_members, is_pointwise, node_subgraph
from ...support.disk_cache import cache_dir  # noqa: F401  (where kernels live: reported, tested)
from ...support.disk_cache import load_module as _load_module
from .kernels.blocked import (
    _BlockedSource,
    run_blocks,  # noqa: F401  (generated modules import it here)
)
from .kernels.expressions import UnsupportedKernel, _fast_table
from .kernels.source import GeneratedKernel, _Source

# ------------------------------------------------------------------------------ building

# Compiled kernels by (structural hash, pattern, options), least recently used dropped
# first beyond KERNEL_CACHE_ENTRIES (numba keeps the machine code; this bounds the rest).
_KERNELS: "OrderedDict[tuple, GeneratedKernel]" = OrderedDict()
KERNEL_CACHE_ENTRIES = 2048


def _remember(key, k: GeneratedKernel) -> None:
    """Keep ``k`` under ``key`` (lock held)."""
    _KERNELS[key] = k
    while len(_KERNELS) > KERNEL_CACHE_ENTRIES:
        _KERNELS.popitem(last=False)
_launch_lock = threading.Lock()
_launch_safe = False


def launch(kernel, *args) -> None:
    """Call a parallel kernel. numba's ``workqueue`` threading layer (used where neither
    OpenMP nor TBB is available) aborts on concurrent launches from several threads, and
    plans may be called from several threads at once: serialize launches there."""
    global _launch_safe
    if _launch_safe:
        kernel(*args)
        return
    with _launch_lock:
        kernel(*args)
        import numba

        _launch_safe = numba.threading_layer() != "workqueue"

_lock = threading.Lock()


def _compile(source: str):
    from numba.core.errors import NumbaError  # imports numba: not part of the timing

    t0 = time.perf_counter()
    try:
        mod = _load_module(source)
    except NumbaError as e:
        raise UnsupportedKernel(f"numba could not compile the generated kernel: {e}") from e
    stats = mod.kernel.stats
    return mod, {"compile_seconds": round(time.perf_counter() - t0, 4),
                 "numba_cache": "hit" if stats.cache_hits else "miss",
                 "module": mod.__file__}


def generate_source(sub: nx.MultiDiGraph, pattern: str, *, fast_math: bool = True) -> tuple:
    """The kernel module's source for a fused sub-graph, without compiling it.

    Returns ``(source, info)``; ``info`` holds ``inplace_ok``, ``mode`` and ``parallel``."""
    if pattern == "normalization":
        from .kernels.rows import RowsSource as gen_class
    else:
        gen_class = _Source
    gen = gen_class(sub, pattern, fast_math)
    key = ir.structural_hash(sub)
    src = gen.module(key)
    return src, {"inplace_ok": gen.inplace_ok, "mode": gen.mode, "parallel": gen.parallel,
                 "collapsed": tuple(gen.cext)}


def build_fused_kernel(sub: nx.MultiDiGraph, pattern: str, *, fast_math: bool = True,
                       name: str | None = None) -> GeneratedKernel:
    """Compile a fused node's sub-graph (its ``attrs["graph"]``) into a numba kernel.

    Args:
        sub: the sub-IR: ``input`` nodes in0..ink (the fused node's operands), one output.
        pattern: the fused node's ``attrs["pattern"]``.
        fast_math: call numba_math's approximations for transcendentals (else exact np.*).
        name: the caller's name for the kernel (reports only; not part of the cache key).

    Raises:
        UnsupportedKernel: the generator does not handle this group (message says why).
    """
    key = (ir.structural_hash(sub), pattern, bool(fast_math), _fast_table()[1], "numba")
    with _lock:
        k = _KERNELS.get(key)
        if k is None:
            src, info = generate_source(sub, pattern, fast_math=fast_math)
            mod, details = _compile(src)
            details.update(mode=info["mode"], parallel=info["parallel"],
                           collapsed=list(info["collapsed"]))
            k = GeneratedKernel(name="", fn=mod.run, source=src, pattern=pattern,
                                impl="numba-fused", inplace_ok=info["inplace_ok"],
                                details=details)
            ein = next((n for n in sub if sub.nodes[n]["op"] == "einsum"), None)
            if ein is not None:
                ins = list(sub.graph["inputs"])
                k.einsum_node = ein
                k.einsum_equation = sub.nodes[ein]["attrs"]["equation"]
                k.einsum_args = tuple(ins.index(u) for u in ir.operands(sub, ein))
                k.epilogue = mod.epilogue
            _remember(key, k)
        else:
            k = dataclasses.replace(k, details={**k.details, "numba_cache": "memory"})
    return dataclasses.replace(k, name=name or f"fused_{key[0][:8]}")


def _node_group(G: nx.MultiDiGraph, n: int) -> tuple[nx.MultiDiGraph, str]:
    """One elementwise or reduction node as a one-member sub-graph and its pattern."""
    if not (is_pointwise(G, n) or G.nodes[n]["op"] in ("sum", "max", "min", "mean")):
        raise UnsupportedKernel(f"op {G.nodes[n]['op']!r} is not elementwise or a reduction")
    sub = node_subgraph(G, n)
    pattern, reason = classify(sub, computed_members(sub), sub.graph["outputs"][0])
    if pattern is None:
        raise UnsupportedKernel(reason)
    return sub, pattern


def build_node_kernel(G: nx.MultiDiGraph, n: int, *, fast_math: bool = True,
                      name: str | None = None) -> GeneratedKernel:
    """``build_fused_kernel`` for one elementwise or reduction node of ``G``; its operands
    are ``ir.operands(G, n)`` in order."""
    sub, pattern = _node_group(G, n)
    return build_fused_kernel(sub, pattern, fast_math=fast_math, name=name)


def build_numpy_blocked(sub: nx.MultiDiGraph, pattern: str, *,
                        name: str | None = None) -> GeneratedKernel:
    """The group as cache-sized blocks of NumPy ufunc calls (``out=`` into reused scratch),
    blocks spread over threads: the alternative where a numba kernel loses to NumPy's SIMD
    ufuncs. Same ``fn``/``epilogue`` contract as ``build_fused_kernel`` (impl
    "numpy-blocked"); elementwise and contraction patterns only."""
    key = (ir.structural_hash(sub), pattern, "blocked")
    with _lock:
        k = _KERNELS.get(key)
        if k is None:
            gen = _BlockedSource(sub, pattern, False)
            src = gen.module(key[0])
            mod = _load_module(src)
            k = GeneratedKernel(name="", fn=mod.run, source=src, pattern=pattern,
                                impl="numpy-blocked", inplace_ok=gen.inplace_ok,
                                details={"blocks": gen.nblocks, "block_rows": gen.bs,
                                         "parallel": gen.parallel, "module": mod.__file__,
                                         "workspace_bytes": gen.workspace_bytes()})
            if gen.einsum is not None:
                ins = list(sub.graph["inputs"])
                k.einsum_node = gen.einsum
                k.einsum_equation = sub.nodes[gen.einsum]["attrs"]["equation"]
                k.einsum_args = tuple(ins.index(u) for u in ir.operands(sub, gen.einsum))
                k.epilogue = mod.epilogue
            _remember(key, k)
    return dataclasses.replace(k, name=name or f"blocked_{key[0][:8]}")
