"""Tensor networks on the GPU: graphopt's cupy backend against opt_einsum on cupy and on
torch along the same path (torch.einsum itself takes at most 52 labels) and JAX jit
(jnp.einsum along the same path), all on the device, from cotengra's generators; and each
network again under a memory limit, sliced, with the device memory a call takes.

    python -m benchmarks.gpu_networks [--json out.json] [--min-time 0.5] [--plan-ab]

Every peer gets the same device arrays (complex128 or float64) and its result is checked
against float64 NumPy on the host before timing. A call is timed from the host with the
device synchronized after it; medians in ms. ``graphopt+graphs`` is the same plan
compiled with ``cuda_graph=True`` (its launches captured once and replayed). ``first`` is
graphopt's first call in the process on a network it has not seen (path search, compile,
run), with a fresh path cache; the ratio column is the best peer's time over graphopt's
(without CUDA graphs).
``device MB`` is what cupy's memory pool hands out at once during one warm call
(``Plan.measure_peak_bytes``), beside the inputs and the result.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
import traceback

import numpy as np

from .gpu import _sync_cupy, time_calls

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("GRAPHOPT_CACHE_DIR", tempfile.mkdtemp(prefix="graphopt_gpu_nets_"))

PEERS = ("graphopt", "graphopt+graphs", "opt_einsum+cupy", "opt_einsum+torch", "jax")


def _networks() -> dict:
    """name -> (description, equation, shapes, dtype)."""
    import cotengra as ctg

    def from_ctg(c):
        return (",".join("".join(t) for t in c.inputs) + "->" + "".join(c.output),
                [tuple(s) for s in c.shapes])

    def lattice(rows, cols, bond):
        c = ctg.utils.lattice_equation([rows, cols], d_min=bond, d_max=bond, seed=1)
        return from_ctg(c)

    return {
        "lattice 8x8 D=8": ("cotengra lattice_equation 8x8, bond 8, complex128",
                            *lattice(8, 8, 8), "complex128"),
        "lattice 10x10 D=4": ("cotengra lattice_equation 10x10, bond 4, float64",
                              *lattice(10, 10, 4), "float64"),
        "randreg 60 D=4": ("cotengra randreg_equation 60 tensors, degree 3, bond 4",
                           *from_ctg(ctg.utils.randreg_equation(60, 3, d_min=4, d_max=4,
                                                                seed=2)), "float64"),
        "tree 200": ("cotengra tree_equation 200 tensors, bonds 2-16, 4 open",
                     *from_ctg(ctg.utils.tree_equation(200, d_min=2, d_max=16, n_outer=4,
                                                       seed=3)), "float64"),
    }


def _arrays(shapes, dtype, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for s in shapes:
        x = rng.standard_normal(s) / math.sqrt(max(1, math.prod(s)) ** (1 / max(1, len(s))))
        if np.dtype(dtype).kind == "c":
            x = x + 1j * rng.standard_normal(s) / math.sqrt(
                max(1, math.prod(s)) ** (1 / max(1, len(s))))
        out.append(x.astype(dtype))
    return out


def _peer(peer: str, eq: str, arrays, path):
    """``(call, args, to_numpy, note)``: ``call(*args)`` is one synchronized contraction."""
    if peer == "opt_einsum+cupy":
        import cupy
        import opt_einsum

        expr = opt_einsum.contract_expression(eq, *[a.shape for a in arrays], optimize=path)
        dev = [cupy.asarray(a) for a in arrays]

        def call(*a):
            r = expr(*a, backend="cupy")
            _sync_cupy()
            return r
        return call, dev, cupy.asnumpy, "graphopt's path"
    if peer == "opt_einsum+torch":
        import opt_einsum
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        expr = opt_einsum.contract_expression(eq, *[a.shape for a in arrays], optimize=path)
        dev = [torch.from_numpy(np.ascontiguousarray(a)).cuda() for a in arrays]

        def call(*a):
            r = expr(*a, backend="torch")
            torch.cuda.synchronize()
            return r
        return call, dev, (lambda t: t.cpu().numpy()), \
            f"torch {torch.__version__}, graphopt's path"
    if peer == "jax":
        import jax

        jax.config.update("jax_enable_x64", True)
        jax.config.update("jax_default_matmul_precision", "highest")
        import jax.numpy as jnp

        gpu = jax.devices("gpu")[0]
        dev = [jax.device_put(a, gpu) for a in arrays]
        f = jax.jit(lambda *a: jnp.einsum(eq, *a, optimize=[tuple(p) for p in path]))
        return (lambda *a: f(*a).block_until_ready()), dev, np.asarray, \
            f"jax {jax.__version__} jit, graphopt's path"
    raise ValueError(peer)


def measure(name, desc, eq, shapes, dtype, min_time: float) -> dict:
    import cupy
    import opt_einsum

    import graphopt as go

    arrays = _arrays(shapes, dtype)
    dev = [cupy.asarray(a) for a in arrays]
    row = {"description": desc, "tensors": len(shapes), "peers": {}}
    t0 = time.perf_counter()
    first = go.contract(eq, *arrays, backend="cupy")
    _sync_cupy()
    row["first_ms"] = (time.perf_counter() - t0) * 1e3
    g = go.Graph("network")
    ins = [g.input(f"t{k}", a.shape, a.dtype.name) for k, a in enumerate(arrays)]
    g.output(go.einsum(eq, *ins))
    plan = go.compile(g, backend="cupy")
    group = plan.report["contraction"].details["groups"][0]
    path = [tuple(p) for p in group["path"]]
    row["flops"] = group["flops_after"]
    wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    ref = opt_einsum.contract(eq, *[a.astype(wide) for a in arrays], optimize=path)
    scale = np.max(np.abs(ref)) or 1.0

    def check(got):
        err = float(np.max(np.abs(np.asarray(got) - ref)) / scale)
        if err > 1e-9:
            raise AssertionError(f"relative error {err:.2e}")
        return err
    row["graphopt_first_error"] = check(cupy.asnumpy(first))

    def go_call(*a):
        r = plan(*a)
        _sync_cupy()
        return r
    peers = {"graphopt": (go_call, dev, cupy.asnumpy, "")}
    graphs = go.compile(g, backend="cupy", cuda_graph=True)

    def graphs_call(*a):
        r = graphs(*a)
        _sync_cupy()
        return r
    peers["graphopt+graphs"] = (graphs_call, dev, cupy.asnumpy, "compile(cuda_graph=True)")
    for p in PEERS[2:]:
        try:
            peers[p] = _peer(p, eq, arrays, path)
        except Exception as e:   # a peer that cannot run this network is reported, not fatal
            row["peers"][p] = {"error": f"{type(e).__name__}: {e}"[:200]}
    for p, (fn, args, to_np, note) in peers.items():
        try:
            err = check(to_np(fn(*args)))
            times = time_calls(fn, args, min_time)
            row["peers"][p] = {"median_ms": float(np.median(times)) * 1e3, "error": err,
                               "note": note}
        except Exception as e:
            row["peers"][p] = {"error": f"{type(e).__name__}: {e}"[:200]}
    row["device_peak_mb"] = plan.measure_peak_bytes(*dev) / 1e6
    row["predicted_peak_mb"] = plan.predicted_peak_bytes / 1e6
    # the same network under an eighth of its predicted peak: sliced on the device
    limit = plan.predicted_peak_bytes // 8
    try:
        t0 = time.perf_counter()
        sliced = go.compile(g, backend="cupy", memory_limit=limit)
        compile_s = time.perf_counter() - t0
        check(cupy.asnumpy(sliced(*dev)))
        times = time_calls(lambda *a: (sliced(*a), _sync_cupy()), dev, min_time)
        rec = sliced.report["slicing"].details
        row["sliced"] = {"limit_mb": limit / 1e6, "n_slices": rec["n_slices"],
                         "flop_overhead": rec["flop_overhead"], "compile_s": compile_s,
                         "median_ms": float(np.median(times)) * 1e3,
                         "predicted_mb": sliced.predicted_peak_bytes / 1e6,
                         "device_peak_mb": sliced.measure_peak_bytes(*dev) / 1e6}
    except go.GraphError as e:
        row["sliced"] = {"limit_mb": limit / 1e6, "refused": str(e)[:300]}
    return row


def plan_ab(names) -> None:
    """A/B of the device's path programs: a ``PathContraction(xp=cupy)`` planned for the
    device (every GEMM-shaped pair a cuBLAS GEMM, as the cupy backend runs it) against the
    host's plan of the same path (pairs under ``gemm.SMALL_PAIR_WORK`` on ``cupy.einsum``)
    and opt_einsum's cupy backend, same arrays; medians of 3 alternating rounds of 30
    calls, printed per network."""
    import cupy
    import opt_einsum

    from graphopt.backends.cupy.kernels.contractions import cublas_matmul
    from graphopt.contraction.paths import label_sizes
    from graphopt.contraction.program import run as cp
    from graphopt.contraction.search import anytime as path_search
    from graphopt.ir.einsum import split

    class HostPlanned(cp.PathContraction):
        def program(self, shapes, dtype, strides=None, full_shapes=None):
            planned = cp.build_program
            cp.build_program = lambda *a: planned(*a[:7], False)
            try:
                return super().program(shapes, dtype, strides, full_shapes)
            finally:
                cp.build_program = planned

    def timed(fn, args, **kw):
        def call(*a):
            fn(*a, **kw)
            _sync_cupy()
        return float(np.median(time_calls(call, args, 0.0, 30, 30))) * 1e3

    def einsum_steps(pc):
        return sum(s.gemm is None for s in next(iter(pc._programs.values())).steps)

    for name, (_, eq, shapes, dtype) in _networks().items():
        if names and name not in names:
            continue
        terms, out = split(eq)
        steps, _ = path_search.find_path(terms, out, label_sizes(eq, shapes),
                                         time_budget=1.0, cache=False)
        path = [tuple(p) for p in steps.path]
        arrays = _arrays(shapes, dtype)
        dev = [cupy.asarray(a) for a in arrays]
        mm = cublas_matmul(np.dtype(dtype).name)
        device = cp.PathContraction(eq, path, keep_arenas=True, xp=cupy)
        host = HostPlanned(eq, path, keep_arenas=True, xp=cupy)
        expr = opt_einsum.contract_expression(eq, *shapes, optimize=path)
        ref = opt_einsum.contract(eq, *arrays, optimize=path)
        for pc in (device, host):
            got = cupy.asnumpy(pc(*dev, matmul=mm))
            if not np.allclose(got, ref, rtol=1e-9, atol=1e-12 * np.max(np.abs(ref))):
                raise AssertionError(f"{name}: the path program's result differs")
        res = {"device": [], "host": [], "oe": []}
        for _ in range(3):
            res["device"].append(timed(device, dev, matmul=mm))
            res["host"].append(timed(host, dev, matmul=mm))
            res["oe"].append(timed(expr, dev, backend="cupy"))
        med = {k: float(np.median(v)) for k, v in res.items()}
        print(f"{name}: {len(terms) - 1} steps; einsum steps device {einsum_steps(device)} "
              f"host {einsum_steps(host)}; ms device-planned {med['device']:.3f} "
              f"host-planned {med['host']:.3f} opt_einsum+cupy {med['oe']:.3f}; host/device "
              f"{med['host'] / med['device']:.2f} oe/device {med['oe'] / med['device']:.2f}",
              flush=True)


def markdown(results: dict) -> str:
    lines = [f"Device: {results['device']}; cupy {results['cupy']}.", "",
             "| network | tensors | FLOPs | graphopt first | " +
             " | ".join(PEERS) + " | best peer / graphopt | device MB (pred.) |",
             "|---|---|---|---|" + "---|" * len(PEERS) + "---|---|"]
    for name, r in results["networks"].items():
        if "failed" in r:
            lines.append(f"| {name} | failed: {r['failed']} |")
            continue
        cells = []
        for p in PEERS:
            v = r["peers"].get(p, {})
            cells.append(f"{v['median_ms']:.3f}" if "median_ms" in v else "error")
        go_ms = r["peers"]["graphopt"].get("median_ms")
        others = [r["peers"][p]["median_ms"] for p in PEERS[2:]
                  if "median_ms" in r["peers"].get(p, {})]
        ratio = f"{min(others) / go_ms:.2f}" if go_ms and others else "-"
        lines.append(f"| {name} | {r['tensors']} | {r['flops']:.2e} | {r['first_ms']:.0f} | "
                     + " | ".join(cells) +
                     f" | {ratio} | {r['device_peak_mb']:.1f} ({r['predicted_peak_mb']:.1f}) |")
    lines += ["", "Under an eighth of the predicted peak (`memory_limit`), sliced on the device:",
              "", "| network | limit MB | slices | FLOPs x | compile s | ms | device MB "
              "(pred.) |", "|---|---|---|---|---|---|---|"]
    for name, r in results["networks"].items():
        s = r.get("sliced")
        if s is None:
            continue
        if "refused" in s:
            lines.append(f"| {name} | {s['limit_mb']:.2f} | refused: {s['refused'][:80]} |")
            continue
        lines.append(f"| {name} | {s['limit_mb']:.2f} | {s['n_slices']} | "
                     f"{s['flop_overhead']:.2f} | {s['compile_s']:.1f} | {s['median_ms']:.2f} "
                     f"| {s['device_peak_mb']:.2f} ({s['predicted_mb']:.2f}) |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", default=None)
    p.add_argument("--min-time", type=float, default=0.5)
    p.add_argument("--networks", default="all")
    p.add_argument("--plan-ab", action="store_true",
                   help="only the A/B of the device's path programs (plan_ab)")
    args = p.parse_args(argv)
    if args.plan_ab:
        plan_ab([] if args.networks == "all" else args.networks.split(","))
        return 0
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    results = {"device": name, "cupy": cupy.__version__, "networks": {}}
    nets = _networks()
    chosen = list(nets) if args.networks == "all" else args.networks.split(",")
    for k in chosen:
        try:
            results["networks"][k] = measure(k, *nets[k], args.min_time)
        except Exception as e:
            traceback.print_exc()
            results["networks"][k] = {"failed": f"{type(e).__name__}: {e}"[:300]}
        print(json.dumps({k: results["networks"][k]}, default=str), flush=True)
    print(markdown(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
