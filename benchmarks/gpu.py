"""The benchmark workloads at GPU-sized shapes: graphopt (cupy backend) against cupy eager (the
same graph op by op), JAX jit and torch / torch.compile, all on the GPU.

    python -m benchmarks.gpu [--workloads mlp,small] [--out benchmarks/results/gpu_h100.md]
                             [--json out.json] [--min-time 1.0] [--quick]

Every peer gets the same device arrays; results are checked against NumPy on the host
before timing. A call is timed from the host with the device synchronized after it (so
launch overhead counts, as it does for a user); the table gives medians in ms. Also
reported: the device's copy bandwidth and the elementwise workload's share of it, and the
``small`` workload with and without CUDA graphs (``cuda_graph=True``). JAX runs with
``jax_default_matmul_precision="highest"`` so that every peer multiplies in full float32
(no TF32), as cuBLAS does by default under cupy and torch.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import traceback

import numpy as np

from . import workloads as W

PEERS = ("graphopt", "graphopt+graphs", "cupy", "jax", "torch", "torch.compile")
# JAX must not take most of the device up front: every peer shares it.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


# ------------------------------------------------------------------- GPU-sized workloads


def mlp_gpu(b=4096, i=4096, h=16384) -> W.Workload:
    r = np.random.default_rng(1)
    inputs = {"x": r.standard_normal((b, i), dtype=np.float32),
              "w1": (r.standard_normal((i, h), dtype=np.float32) / np.sqrt(i)).astype(np.float32),
              "b1": r.standard_normal(h, dtype=np.float32),
              "w2": (r.standard_normal((h, i), dtype=np.float32) / np.sqrt(h)).astype(np.float32),
              "b2": r.standard_normal(i, dtype=np.float32)}
    base = W.mlp(1.0)

    def build():
        import graphopt as go

        g = go.Graph("mlp")
        x, w1, b1, w2, b2 = (g.input(k, v.shape, "float32") for k, v in inputs.items())
        g.output(go.einsum("bh,hi->bi", go.gelu(go.einsum("bi,ih->bh", x, w1) + b1), w2) + b2)
        return g
    return W.Workload("mlp", f"gelu(x@W1+b1)@W2+b2, x ({b},{i}), W1 ({i},{h}), float32",
                      inputs, build, base.numpy, None, base.xp, rtol=2e-3)


def attention_gpu(B=8, H=16, Q=1024, D=64) -> W.Workload:
    r = np.random.default_rng(2)
    inputs = {k: r.standard_normal((B, H, Q, D), dtype=np.float32) for k in ("q", "k", "v")}
    base = W.attention(1.0)

    def build():
        import graphopt as go

        g = go.Graph("attention")
        q, k, v = (g.input(n, a.shape, "float32") for n, a in inputs.items())
        s = go.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(D)
        g.output(go.einsum("bhqk,bhkd->bhqd", go.softmax(s, axis=-1), v))
        return g
    return W.Workload("attention", f"softmax(q k^T/sqrt(d)) v, b={B} h={H} q=k={Q} d={D}, "
                      "float32", inputs, build, base.numpy, None, base.xp, rtol=2e-3)


GPU_WORKLOADS = {
    "small": lambda: W.small(1.0),
    "elementwise": lambda: W.elementwise(16.0),  # 64M float32
    "attention": attention_gpu,
    "mlp": mlp_gpu,
    "redundant": lambda: W.redundant(8.0),   # 8192^2 GEMM written twice + a dead one
    "chain": lambda: W.chain(8.0),          # n = 8192: the bad order makes 8192^2 products
    "mps_ring": lambda: W.mps_ring(2.0),     # bond 64, complex128
}
QUICK = {"mlp": lambda: mlp_gpu(256, 256, 1024), "attention": lambda: attention_gpu(2, 2, 64, 32),
         "chain": lambda: W.chain(0.25), "mps_ring": lambda: W.mps_ring(0.5),
         "elementwise": lambda: W.elementwise(0.5), "redundant": lambda: W.redundant(0.25),
         "small": lambda: W.small(1.0)}


# ---------------------------------------------------------------------------------- peers


class Skip(Exception):
    pass


def _sync_cupy():
    import cupy

    cupy.cuda.get_current_stream().synchronize()


class _CupyNS:
    """cupy as the workloads' array namespace; einsum orders many operands greedily (as
    NumPy's ``optimize=True``) instead of left to right."""

    def __getattr__(self, name):
        import cupy

        return getattr(cupy, name)

    @staticmethod
    def einsum(eq, *ops):
        import cupy

        return cupy.einsum(eq, *ops, optimize=len(ops) > 2)


def make_peer(peer: str, w: W.Workload):
    """``(fn, args, to_numpy, setup_seconds, note)``: ``fn(*args)`` is one synchronized call."""
    names = list(w.inputs)
    if peer.startswith("graphopt"):
        import cupy

        import graphopt as go

        dev = [cupy.asarray(w.inputs[k]) for k in names]
        t0 = time.perf_counter()
        plan = go.compile(w.build(), backend="cupy", cuda_graph=peer.endswith("graphs"))
        plan(*dev)
        _sync_cupy()
        impls = sorted({k.impl for k in plan.kernels})

        def call(*a):
            r = plan(*a)
            _sync_cupy()
            return r
        return call, dev, cupy.asnumpy, time.perf_counter() - t0, \
            f"{len(plan.steps)} steps: {', '.join(impls)}"
    if peer == "cupy":
        import cupy

        dev = [cupy.asarray(w.inputs[k]) for k in names]
        ns = _CupyNS()

        def eager(*a):
            r = w.xp(ns, **dict(zip(names, a)))
            _sync_cupy()
            return r
        return eager, dev, cupy.asnumpy, 0.0, f"cupy {cupy.__version__}"
    if peer == "jax":
        import jax

        jax.config.update("jax_enable_x64", True)
        jax.config.update("jax_default_matmul_precision", "highest")
        import jax.numpy as jnp

        gpu = jax.devices("gpu")[0]
        dev = [jax.device_put(w.inputs[k], gpu) for k in names]
        f = jax.jit(lambda *a: w.xp(jnp, **dict(zip(names, a))))
        t0 = time.perf_counter()
        f(*dev).block_until_ready()
        return (lambda *a: f(*a).block_until_ready()), dev, np.asarray, \
            time.perf_counter() - t0, f"jax {jax.__version__} jit, precision=highest"
    if peer in ("torch", "torch.compile"):
        import torch

        from .peers import _torch_ns

        torch.backends.cuda.matmul.allow_tf32 = False
        _, ns = _torch_ns()
        dev = [torch.from_numpy(np.ascontiguousarray(w.inputs[k])).cuda() for k in names]

        def f(*a):
            return w.xp(ns, **dict(zip(names, a)))
        if peer == "torch.compile":
            f = torch.compile(f)
        t0 = time.perf_counter()
        with torch.no_grad():
            f(*dev)
        torch.cuda.synchronize()

        def call(*a):
            with torch.no_grad():
                r = f(*a)
            torch.cuda.synchronize()
            return r
        return call, dev, (lambda t: t.cpu().numpy()), time.perf_counter() - t0, \
            f"torch {torch.__version__}"
    raise Skip(f"unknown peer {peer!r}")


def time_calls(fn, args, min_time: float, min_repeat=5, max_repeat=300) -> list[float]:
    fn(*args)
    times, start = [], time.perf_counter()
    while len(times) < min_repeat or (time.perf_counter() - start < min_time
                                      and len(times) < max_repeat):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return times


# ------------------------------------------------------------------------------ machine


def device_facts() -> dict:
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    n = 1 << 28  # 1 GiB of float32
    a = cupy.ones(n, dtype=cupy.float32)
    b = cupy.empty_like(a)
    b[...] = a
    ts = []
    for _ in range(10):
        s, e = cupy.cuda.Event(), cupy.cuda.Event()
        s.record()
        cupy.copyto(b, a)
        e.record()
        e.synchronize()
        ts.append(cupy.cuda.get_elapsed_time(s, e) / 1e3)
    del a, b
    from graphopt.backends.cupy.backend import cutensor_available

    return {"device": name, "sm_count": props["multiProcessorCount"],
            "memory_gib": props["totalGlobalMem"] / 2**30,
            "copy_gbs": 2 * 4 * n / float(np.median(ts)) / 1e9,
            "cupy": cupy.__version__, "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(),
            "cutensor": cutensor_available(), "python": platform.python_version()}


# --------------------------------------------------------------------------------- main


def run(args) -> dict:
    table = QUICK if args.quick else GPU_WORKLOADS
    wnames = list(table) if args.workloads == "all" else args.workloads.split(",")
    pnames = list(PEERS) if args.peers == "all" else args.peers.split(",")
    results = {"machine": device_facts(), "workloads": {}}
    m = results["machine"]
    print(f"device: {m['device']}, copy {m['copy_gbs']:.0f} GB/s, cupy {m['cupy']}, "
          f"cuTENSOR {'yes' if m['cutensor'] else 'no'}", flush=True)
    for wname in wnames:
        w = table[wname]()
        # NumPy's einsum cannot hold mps_ring's operands at GPU sizes: opt_einsum can.
        ref = np.asarray(w.opt_einsum(w.inputs)(**w.inputs) if w.opt_einsum is not None
                         else w.numpy(**w.inputs))
        row = {"description": w.description, "peers": {}}
        print(f"\n== {wname}: {w.description}", flush=True)
        for peer in pnames:
            try:
                fn, call_args, to_np, setup_s, note = make_peer(peer, w)
                got = to_np(fn(*call_args))
                ok = bool(np.allclose(np.asarray(got), ref, rtol=w.rtol,
                                      atol=w.rtol * (np.abs(ref).max() + 1e-30)))
                times = time_calls(fn, call_args, args.min_time)
            except Exception as e:  # a peer that breaks must not stop the others
                row["peers"][peer] = {"error": f"{type(e).__name__}: {e}"[:400]}
                print(f"  {peer:<16} ERROR {type(e).__name__}: {str(e)[:300]}", flush=True)
                if args.verbose:
                    traceback.print_exc()
                continue
            med = float(np.median(times)) * 1e3
            row["peers"][peer] = {"median_ms": med, "min_ms": min(times) * 1e3,
                                  "repeats": len(times), "setup_s": setup_s, "correct": ok,
                                  "note": note}
            print(f"  {peer:<16} {med:10.3f} ms (min {min(times) * 1e3:.3f}, n={len(times)}) "
                  f"setup {setup_s:.2f}s{'' if ok else '  WRONG RESULT'}  {note}", flush=True)
            del fn, call_args
        go_ms = row["peers"].get("graphopt", {}).get("median_ms")
        if wname == "elementwise" and go_ms:
            nbytes = sum(v.nbytes for v in w.inputs.values()) + ref.nbytes
            row["graphopt_gbs"] = nbytes / (go_ms / 1e3) / 1e9
            row["share_of_copy_bw"] = row["graphopt_gbs"] / m["copy_gbs"]
            print(f"  graphopt moves {row['graphopt_gbs']:.0f} GB/s = "
                  f"{100 * row['share_of_copy_bw']:.0f}% of the device copy bandwidth")
        results["workloads"][wname] = row
        _free_device_memory()
        save(results, args)  # after every workload: a run cut short keeps what it measured
    return results


def save(results: dict, args) -> None:
    if args.out:
        with open(args.out, "w") as f:
            f.write(markdown(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)


def _free_device_memory():
    import gc

    gc.collect()
    try:
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()
    except ImportError:
        pass
    try:
        import torch

        torch.cuda.empty_cache()
    except ImportError:
        pass


def markdown(results: dict) -> str:
    m = results["machine"]
    cols = [p for p in PEERS if any(p in r["peers"] for r in results["workloads"].values())]
    lines = [f"# graphopt on {m['device']} (cupy backend)", "",
             f"{m['device']}, {m['sm_count']} SMs, {m['memory_gib']:.0f} GiB; measured copy "
             f"bandwidth {m['copy_gbs']:.0f} GB/s (read + write); cupy {m['cupy']}, CUDA "
             f"runtime {m['cuda_runtime']}, cuTENSOR "
             f"{'available' if m['cutensor'] else 'not installed'}.",
             "", "Median ms per call (host-timed, device synchronized after each call; lower is "
             "better). `graphopt+graphs` is `compile(..., cuda_graph=True)`. JAX uses "
             "matmul precision `highest` (full float32, as cuBLAS under cupy and torch). "
             "The last column is the best peer's time over graphopt's better variant "
             "(> 1: graphopt is faster).", "",
             "| workload | " + " | ".join(cols) + " | best peer / best graphopt |",
             "|---" * (len(cols) + 2) + "|"]
    for wname, row in results["workloads"].items():
        cells, timed = [], {}
        for p in cols:
            r = row["peers"].get(p)
            if r is None:
                cells.append("–")
            elif "error" in r:
                cells.append("error")
            else:
                cells.append(f"{r['median_ms']:.3g}" + ("" if r["correct"] else " (wrong)"))
                if r["correct"]:
                    timed[p] = r["median_ms"]
        others = {p: t for p, t in timed.items() if not p.startswith("graphopt")}
        ours = {p: t for p, t in timed.items() if p.startswith("graphopt")}
        ratio = (f"{min(others.values()) / min(ours.values()):.2f} "
                 f"({min(others, key=others.get)} vs {min(ours, key=ours.get)})"
                 if others and ours else "–")
        lines.append(f"| {wname} | " + " | ".join(cells) + f" | {ratio} |")
    lines.append("")
    for wname, row in results["workloads"].items():
        lines.append(f"- **{wname}**: {row['description']}")
        if "graphopt_gbs" in row:
            lines.append(f"  graphopt moves {row['graphopt_gbs']:.0f} GB/s, "
                         f"{100 * row['share_of_copy_bw']:.0f}% of the measured copy bandwidth.")
        for p, r in row["peers"].items():
            if "error" in r:
                lines.append(f"  {p}: {r['error'][:200]}")
            elif p.startswith("graphopt"):
                lines.append(f"  {p}: {r['note']}; compile + first call {r['setup_s']:.2f} s")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default="all")
    p.add_argument("--peers", default="all")
    p.add_argument("--min-time", type=float, default=1.0, help="seconds of timing per peer")
    p.add_argument("--out", default=None, help="write the markdown table here")
    p.add_argument("--json", default=None)
    p.add_argument("--quick", action="store_true", help="small shapes (smoke test)")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    results = run(args)
    print("\n" + markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
