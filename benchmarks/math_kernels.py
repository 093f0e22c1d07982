"""Time numba_math's approximations against NumPy's ufuncs and exact ``np.*`` in numba loops.

    python -m benchmarks.math_kernels [--n 4000000] [--repeat 15] [--ops exp,tanh]
                                      [--dtypes float32,float64] [--stat min]

For every (op, dtype): NumPy's own ufunc writing into ``out=`` (for sigmoid/gelu the
interpreter's formula from ``graphopt.ops``), and numba loops (``range``, one thread; and
``prange``, all numba threads) calling either the exact ``np.*`` function or
``numba_math.FAST[(op, dtype)]``. The variants are timed in interleaved rounds so that load
from other processes hits them alike; the table gives the median (or, with ``--stat min``,
the minimum: the better estimate of the intrinsic cost on a loaded machine) ms per call.
"""

from __future__ import annotations

import argparse
import os
import time

import numba
import numpy as np

from graphopt.backends.numba import numerics as numba_math
from graphopt.ir import ops

_OPS = ("exp", "log", "tanh", "sigmoid", "gelu", "sin", "cos", "pow", "sqrt")


def _exact(op: str, dtype: str):
    """The exact scalar function a numba loop would call without numba_math (constants typed
    as ``dtype``, as generated kernels type them)."""
    t = np.dtype(dtype).type
    half, one, c, k = t(0.5), t(1.0), t(np.sqrt(2.0 / np.pi)), t(0.044715)
    if op == "sigmoid":
        return numba.njit(lambda x: half * np.tanh(half * x) + half)
    if op == "gelu":
        return numba.njit(lambda x: half * x * (one + np.tanh(c * (x + k * (x * x * x)))))
    exact = {"pow": lambda x, y: x ** y, "exp": lambda x: np.exp(x), "log": lambda x: np.log(x),
             "tanh": lambda x: np.tanh(x), "sin": lambda x: np.sin(x),
             "cos": lambda x: np.cos(x), "sqrt": lambda x: np.sqrt(x)}
    return numba.njit(exact[op])


def _numpy(op: str):
    if op in ("sigmoid", "gelu"):
        fn = ops.UNARY_FUNCS[op]
        return lambda args, out: np.copyto(out, fn(*args))
    uf = np.power if op == "pow" else getattr(np, op)
    return lambda args, out: uf(*args, out=out)


def _loops(f, nargs: int):
    """(one-thread loop, prange loop) applying scalar ``f`` elementwise."""
    if nargs == 1:
        def serial(x, out):
            for i in range(x.size):
                out[i] = f(x[i])

        def par(x, out):
            for i in numba.prange(x.size):
                out[i] = f(x[i])
    else:
        def serial(x, y, out):
            for i in range(x.size):
                out[i] = f(x[i], y[i])

        def par(x, y, out):
            for i in numba.prange(x.size):
                out[i] = f(x[i], y[i])
    return (numba.njit(error_model="numpy")(serial),
            numba.njit(parallel=True, error_model="numpy")(par))


def _inputs(op: str, n: int, dtype, rng) -> tuple:
    u = lambda lo, hi: rng.uniform(lo, hi, n).astype(dtype)
    domain = {"exp": (-80, 80), "log": (1e-3, 1e3), "sqrt": (0, 1e3), "sin": (-100, 100),
              "cos": (-100, 100)}.get(op, (-10, 10))
    if op == "pow":
        return u(0.01, 10), u(-4, 4)
    return (u(*domain),)


def bench(op: str, dtype: str, n: int, repeat: int, rng, stat=np.median) -> dict:
    """``stat`` of the ms per call of each variant, plus the max abs difference fast vs
    NumPy."""
    args = _inputs(op, n, dtype, rng)
    out = np.empty(n, dtype)
    fast = numba_math.FAST[(op, dtype)]
    exact = _exact(op, dtype)
    fs, fp = _loops(fast, len(args))
    es, ep = _loops(exact, len(args))
    np_fn = _numpy(op)
    variants = {"numpy": lambda: np_fn(args, out),
                "np.* 1T": lambda: es(*args, out), "np.* par": lambda: ep(*args, out),
                "fast 1T": lambda: fs(*args, out), "fast par": lambda: fp(*args, out)}
    for v in variants.values():  # compile, warm caches
        v()
    times = {k: [] for k in variants}
    for _ in range(repeat):
        for k, v in variants.items():
            t0 = time.perf_counter()
            v()
            times[k].append(time.perf_counter() - t0)
    fp(*args, out)
    ref = np.empty_like(out)
    np_fn(args, ref)
    with np.errstate(invalid="ignore"):
        diff = float(np.nanmax(np.abs(out.astype(np.float64) - ref)))
    return {k: 1e3 * float(stat(t)) for k, t in times.items()} | {"maxdiff": diff}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.math_kernels", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=4_000_000)
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--ops", default=",".join(_OPS))
    p.add_argument("--dtypes", default="float32")
    p.add_argument("--stat", default="median", choices=("median", "min"))
    a = p.parse_args(argv)
    rng = np.random.default_rng(0)
    cols = ("numpy", "np.* 1T", "np.* par", "fast 1T", "fast par")
    print(f"n={a.n}, {a.stat} of {a.repeat}, numba threads={numba.get_num_threads()}, "
          f"load average {os.getloadavg()[0]:.1f}, ms per call")
    print(f"{'op':8s} {'dtype':8s} " + " ".join(f"{c:>9s}" for c in cols)
          + "  numpy/fast: 1T   par  maxdiff")
    for dtype in a.dtypes.split(","):
        for op in a.ops.split(","):
            r = bench(op, dtype, a.n, a.repeat, rng, getattr(np, a.stat))
            print(f"{op:8s} {dtype:8s} " + " ".join(f"{r[c]:9.2f}" for c in cols)
                  + f"  {r['numpy'] / r['fast 1T']:13.1f}x {r['numpy'] / r['fast par']:5.1f}x"
                  + f"  {r['maxdiff']:.2g}")


if __name__ == "__main__":
    main()
