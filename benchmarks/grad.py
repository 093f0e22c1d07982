"""Training steps (forward + backward): graphopt's ``go.grad`` graph against
``jax.jit(jax.value_and_grad(...))``, torch eager and torch.compile with ``backward()``, in
the same process, pinned to one core and at the libraries' default threads.

    python -m benchmarks.grad [--cases mlp,attention,mps] [--mode both|pinned|default]
                              [--quick] [--json out.json]

Cases: the mlp and attention workloads with a mean-square loss, the norm of a periodic
MPS (complex128, one einsum over every site and its conjugate) differentiated with respect
to every site tensor, and ``deep``: an 8-layer tanh chain (256x512, float32) compiled under
a ``memory_limit`` of ``LIMIT_FRACTION`` of its arena, which forces graphopt to recompute
forward values; its row also times graphopt without the limit (the cost of recomputation)
and the peers with each layer checkpointed by hand (``jax.checkpoint``,
``torch.utils.checkpoint``), as their users save memory. Every peer's value and gradients
are checked against graphopt's (complex gradients in JAX's convention; torch's are the
conjugate and are conjugated back).
Times are medians in ms; ``ratio`` is the peer's time over graphopt's (> 1: graphopt is
faster). Memory: graphopt's predicted peak working memory (arena plus per-step workspace,
which the report holds to within 10 % of a measured run) and XLA's temp allocation from
``memory_analysis()``; torch gives no CPU peak to read.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import numpy as np

from .run import main_per_mode

CASES = ("mlp", "attention", "mps", "deep")
# the deep case's memory_limit: this fraction of graphopt's arena without a limit, plus the
# plan's largest step workspace
LIMIT_FRACTION = 0.6


class _Ops:
    """The few array functions the losses need, over jax.numpy or torch."""

    def __init__(self, lib: str):
        if lib == "jax":
            import jax
            import jax.numpy as m
            self.last_max = lambda x: m.max(x, axis=-1, keepdims=True)
            self.last_sum = lambda x: m.sum(x, axis=-1, keepdims=True)
            self.checkpoint = jax.checkpoint
        else:
            import torch as m
            import torch.utils.checkpoint as tc
            self.last_max = lambda x: m.amax(x, dim=-1, keepdim=True)
            self.last_sum = lambda x: m.sum(x, dim=-1, keepdim=True)
            self.checkpoint = lambda f: (lambda *a: tc.checkpoint(f, *a, use_reentrant=False))
        self.tanh, self.exp, self.einsum, self.conj, self.real, self.mean = (
            m.tanh, m.exp, m.einsum, m.conj, m.real, m.mean)


def _case(name: str, quick: bool):
    """``(graph builder, loss(ops, **arrays), inputs, wrt names, rtol)``."""
    import graphopt as go
    from graphopt import workloads as W
    from graphopt.frontend.tensor import Tensor

    if name == "mlp":
        w = W.mlp(*((32, 64, 128) if quick else (256, 512, 2048)))

        def loss(m, x, w1, b1, w2, b2):
            h = x @ w1 + b1
            h = 0.5 * h * (1.0 + m.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h * h * h)))
            y = h @ w2 + b2
            return m.mean(y * y)
        wrt, rtol = ["w1", "b1", "w2", "b2"], 2e-3
    elif name == "attention":
        w = W.attention(*((2, 2, 32, 16) if quick else (8, 8, 256, 64)))
        d = w.inputs["q"].shape[-1]

        def loss(m, q, k, v):
            s = m.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(d)
            e = m.exp(s - m.last_max(s))
            y = m.einsum("bhqk,bhkd->bhqd", e / m.last_sum(e), v)
            return m.mean(y * y)
        wrt, rtol = ["q", "k", "v"], 2e-3
    elif name == "deep":
        return _deep_case(quick)
    else:
        w = W.mps_ring(*((4, 4, 2) if quick else (8, 16, 2)))
        eq = W.mps_ring_equation(len(w.inputs))

        def loss(m, **sites):
            operands = []
            for t in sites.values():
                operands += [t, m.conj(t)]
            return m.real(m.einsum(eq, *operands))
        wrt, rtol = list(w.inputs), 1e-8

    def build():
        g = w.build()
        (out,) = g._G.graph["outputs"]
        y = Tensor(g, out)
        g.output(go.real(y) if name == "mps" else go.mean(go.square(y)))
        return g

    return build, loss, w.inputs, wrt, rtol


def _deep_case(quick: bool, layers: int = 8):
    """The deep tanh chain: ``(graph builder, loss, inputs, wrt, rtol)``."""
    import graphopt as go

    batch, width = (32, 64) if quick else (256, 512)
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((batch, width)).astype(np.float32)}
    for i in range(layers):
        inputs[f"w{i}"] = (rng.standard_normal((width, width)) /
                           np.sqrt(width)).astype(np.float32)
    wrt = [f"w{i}" for i in range(layers)]

    def loss(m, x, **ws):
        layer = m.checkpoint(lambda h, w: m.tanh(h @ w))
        for k in wrt:
            x = layer(x, ws[k])
        return m.mean(x * x)

    def build():
        g = go.Graph("deep")
        h = g.input("x", (batch, width), "float32")
        for k in wrt:
            h = go.tanh(h @ g.input(k, (width, width), "float32"))
        g.output(go.mean(go.square(h)))
        return g

    return build, loss, inputs, wrt, 2e-3


def _median_ms(fn, min_time: float) -> tuple[float, int]:
    fn()
    times, start = [], time.perf_counter()
    while len(times) < 5 or (time.perf_counter() - start < min_time and len(times) < 200):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, len(times)


def _close(got, want, rtol) -> bool:
    got, want = np.asarray(got), np.asarray(want)
    scale = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-30)
    return got.shape == want.shape and float(np.max(np.abs(got - want))) <= rtol * scale


def _peer(peer: str, loss, inputs: dict, wrt: list, min_time: float):
    """``(fn, value, grads, facts)`` of one peer, compiled and warm."""
    names = list(inputs)
    if peer == "jax":
        import jax
        jax.config.update("jax_enable_x64", True)
        ops = _Ops("jax")
        idx = tuple(names.index(k) for k in wrt)
        f = jax.jit(jax.value_and_grad(lambda *a: loss(ops, **dict(zip(names, a))),
                                       argnums=idx))
        args = [jax.device_put(inputs[k]) for k in names]
        t0 = time.perf_counter()
        v, gr = jax.block_until_ready(f(*args))
        compile_s = time.perf_counter() - t0
        mem = f.lower(*args).compile().memory_analysis()
        facts = {"compile_s": compile_s, "temp_bytes": getattr(mem, "temp_size_in_bytes", None)}
        ops.checkpoint = lambda fn: fn         # XLA's memory for the loss without checkpoints
        plain = jax.jit(jax.value_and_grad(lambda *a: loss(ops, **dict(zip(names, a))),
                                           argnums=idx))
        facts["temp_bytes_without_checkpoint"] = getattr(
            plain.lower(*args).compile().memory_analysis(), "temp_size_in_bytes", None)
        return (lambda: jax.block_until_ready(f(*args))), v, list(gr), facts
    import torch
    ops = _Ops("torch")
    tens = {k: torch.from_numpy(np.array(a)) for k, a in inputs.items()}
    for k in wrt:
        tens[k].requires_grad_(True)

    def forward(*a):
        return loss(ops, **dict(zip(names, a)))
    fwd = torch.compile(forward) if peer == "torch.compile" else forward
    args = [tens[k] for k in names]

    def step():
        for k in wrt:
            tens[k].grad = None
        v = fwd(*args)
        v.backward()
        return v
    t0 = time.perf_counter()
    v = step()
    compile_s = time.perf_counter() - t0
    grads = [tens[k].grad.numpy().conj() for k in wrt]   # torch's complex grads: conjugate
    return step, v.detach().numpy(), grads, {"compile_s": compile_s,
                                             "threads": torch.get_num_threads()}


def measure(name: str, quick: bool, min_time: float) -> dict:
    import graphopt as go

    build, loss, inputs, wrt, rtol = _case(name, quick)
    g = build()
    t0 = time.perf_counter()
    plan = go.compile(go.grad(g, wrt=wrt))
    value, grads = plan(**inputs)
    row = {"case": name, "graphopt": {"compile_s": time.perf_counter() - t0,
                                      "peak_bytes": plan.predicted_peak_bytes}}
    row["graphopt"]["median_ms"], row["graphopt"]["repeats"] = _median_ms(
        lambda: plan(**inputs), min_time)
    if name == "deep":
        row["graphopt_unlimited"] = row["graphopt"]
        row["graphopt"] = _limited(go.grad(g, wrt=wrt), plan, inputs, (value, grads), min_time)
    want = [grads[k] for k in wrt]
    for peer in ("jax", "torch", "torch.compile"):
        try:
            fn, v, gr, facts = _peer(peer, loss, inputs, wrt, min_time)
        except ImportError as e:
            row[peer] = {"skipped": f"{e.name} is not installed"}
            continue
        facts["correct"] = bool(_close(v, value, rtol) and
                                all(_close(a, b, rtol) for a, b in zip(gr, want)))
        facts["median_ms"], facts["repeats"] = _median_ms(fn, min_time)
        facts["ratio"] = facts["median_ms"] / row["graphopt"]["median_ms"]
        row[peer] = facts
    return row


def _limited(graph, free, inputs: dict, want, min_time: float) -> dict:
    """graphopt under a ``memory_limit`` of ``LIMIT_FRACTION`` of ``free``'s arena: the
    time, the peak, what was recomputed; its results must equal the unlimited plan's."""
    import graphopt as go

    limit = free.predicted_peak_bytes - free.arena_bytes + int(free.arena_bytes *
                                                               LIMIT_FRACTION)
    t0 = time.perf_counter()
    plan = go.compile(graph, memory_limit=limit)
    value, grads = plan(**inputs)
    same = bool(np.array_equal(value, want[0]) and
                all(np.array_equal(grads[k], want[1][k]) for k in grads))
    r = plan.report.gradient["recomputation"] or {}
    facts = {"compile_s": time.perf_counter() - t0, "peak_bytes": plan.predicted_peak_bytes,
             "memory_limit": limit, "same_as_unlimited": same,
             "recomputed": r.get("recomputed_count", 0), "extra_flops": r.get("extra_flops", 0),
             "flops": plan.report.flops_optimized}
    facts["median_ms"], facts["repeats"] = _median_ms(lambda: plan(**inputs), min_time)
    return facts


def _mib(n) -> str:
    return "-" if n is None else f"{n / 2**20:.1f} MiB"


def table(rows: list[dict]) -> str:
    lines = ["| case | graphopt ms | jax.jit ms (ratio) | torch ms (ratio) | torch.compile ms "
             "(ratio) | graphopt peak | XLA temp | correct |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [r["case"], f"{r['graphopt']['median_ms']:.2f}"]
        ok = []
        for peer in ("jax", "torch", "torch.compile"):
            p = r.get(peer, {})
            cells.append("skipped" if "skipped" in p else
                         f"{p['median_ms']:.2f} ({p['ratio']:.2f}x)")
            ok.append(p.get("correct", "-"))
        temp = r.get("jax", {}).get("temp_bytes")
        cells += [_mib(r['graphopt']['peak_bytes']), _mib(temp),
                  " ".join(str(o) for o in ok)]
        lines.append("| " + " | ".join(cells) + " |")
    plain = "temp_bytes_without_checkpoint"
    for r in rows:
        if "graphopt_unlimited" in r:
            free, lim = r["graphopt_unlimited"], r["graphopt"]
            lines.append(
                f"\n{r['case']}: memory_limit {lim['memory_limit'] / 2**20:.2f} MiB: "
                f"{lim['recomputed']} value(s) recomputed, {lim['extra_flops']:.3g} more FLOPs "
                f"(+{100 * lim['extra_flops'] / max(lim['flops'] - lim['extra_flops'], 1):.0f} "
                f"%), peak {free['peak_bytes'] / 2**20:.2f} -> {lim['peak_bytes'] / 2**20:.2f} "
                f"MiB, {free['median_ms']:.2f} -> {lim['median_ms']:.2f} ms "
                f"({lim['median_ms'] / free['median_ms']:.2f}x); results identical: "
                f"{lim['same_as_unlimited']}. Peers checkpoint every layer by hand (XLA temp "
                f"without jax.checkpoint: {_mib(r.get('jax', {}).get(plain))}).")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.grad", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--mode", choices=("both", "pinned", "default"), default="both")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--min-time", type=float, default=1.0)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    cases = args.cases.split(",")

    def run_rows():
        rows = []
        for c in cases:
            rows.append(measure(c, args.quick, args.min_time))
            print(json.dumps(rows[-1], default=str), flush=True)
        return rows
    child = ["--cases", args.cases, "--min-time", str(args.min_time)] + \
        (["--quick"] if args.quick else [])
    return main_per_mode("benchmarks.grad", args.mode, child, run_rows, table, args.json)


if __name__ == "__main__":
    sys.exit(main())
