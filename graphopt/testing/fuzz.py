"""Random graphs and inputs for the differential fuzzer (``tests/property/test_oracle.py``).

``random_case(seed, size)`` builds a graph with the public API (elementwise ops of every
kind, comparisons and ``where``, casts, broadcasting, reductions, einsums, softmax and
logsumexp, layout ops) over inputs of every dtype family with NaN, +-inf, +-0, denormals and
huge values mixed in, at sizes on both sides of the kernel-form thresholds. The same seed
gives the same case, so a failure is a seed to keep.
"""

from __future__ import annotations

import numpy as np

# Shapes on both sides of the kernel-form thresholds: one thread / parallel (2**16
# elements) and timed against the NumPy-blocked form (2**18).
SHAPES = {"small": [(5,), (3, 4), (2, 3, 4)], "parallel": [(257, 300)],
          "timed": [(513, 520)]}
FLOATS = ("float32", "float64")
COMPLEX = ("complex64", "complex128")
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_UNARY_REAL = ("exp", "log", "sqrt", "tanh", "sigmoid", "relu", "gelu", "sin", "cos", "square",
               "reciprocal", "abs", "neg")
_UNARY_COMPLEX = ("exp", "log", "sqrt", "tanh", "sin", "cos", "square", "reciprocal", "abs",
                  "neg", "conj", "real", "imag")
_UNARY_INT = ("abs", "neg", "square", "relu")
_UNARY_BOOL = ("abs", "relu")
_BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum")
_COMPARE = ("lt", "le", "gt", "ge", "eq", "ne")


def random_values(rng, shape, dtype, special: float = 0.05) -> np.ndarray:
    """Values of ``dtype``: mostly moderate, with NaN, +-inf, +-0, denormals and huge values
    mixed in (each at about ``special / 6`` of the elements) for float and complex."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        return rng.integers(-9, 10, shape).astype(dt)
    part = np.float32 if dt in (np.float32, np.complex64) else np.float64
    fi = np.finfo(part)

    def reals():
        x = (rng.standard_normal(shape) * rng.choice([0.5, 3.0, 30.0])).astype(part)
        pick = rng.random(shape)
        specials = [np.nan, np.inf, -np.inf, -0.0, fi.smallest_subnormal * 3,
                    float(fi.max) ** 0.5 * 0.9]
        for k, v in enumerate(specials):
            x[(pick >= k * special / 6) & (pick < (k + 1) * special / 6)] = v
        return x

    if dt.kind == "c":
        with np.errstate(all="ignore"):
            return (reals() + 1j * reals()).astype(dt)
    return reals().astype(dt)


def random_case(seed: int, size: str = "small", n_ops: int | None = None):
    """``(graph, inputs)``: a random graph built with the public API (elementwise ops of
    every kind, comparisons and ``where``, casts, broadcasting, reductions with and without
    ``keepdims``, einsums, softmax/logsumexp, layout ops) over random inputs.

    ``size``: a key of ``SHAPES``. The same ``seed`` gives the same case."""
    import graphopt as go

    rng = np.random.default_rng(seed)
    shapes = SHAPES[size]
    shape = tuple(shapes[rng.integers(len(shapes))])
    family = rng.choice(["float", "float", "float", "complex", "int"])
    pool = {"float": FLOATS, "complex": COMPLEX, "int": INTS}[family]
    dtype = str(rng.choice(pool))
    g = go.Graph(f"fuzz{seed}")
    inputs = {}

    def new_input(shp, dt):
        name = f"x{len(inputs)}"
        inputs[name] = random_values(rng, shp, dt)
        return g.input(name, shp, dt)

    live = [new_input(shape, dtype) for _ in range(1 + rng.integers(2))]
    if len(shape) >= 2 and rng.random() < 0.5:       # a broadcast operand
        live.append(new_input((1,) + shape[1:], dtype))
    for _ in range(n_ops if n_ops is not None else 2 + rng.integers(7)):
        a = live[rng.integers(len(live))]
        kind = np.dtype(a.dtype).kind
        choice = rng.random()
        if choice < 0.35:
            names = _UNARY_COMPLEX if kind == "c" else _UNARY_BOOL if kind == "b" \
                else _UNARY_INT if kind in "iu" else _UNARY_REAL
            t = getattr(go, str(rng.choice(names)))(a)
        elif choice < 0.6:
            op = str(rng.choice(_BINARY))
            if rng.random() < 0.4:
                b = g.const(np.asarray(rng.choice([0.5, 2.0, -3.0, 1e-3]),
                                       dtype=a.dtype if kind in "fc" else "float64"))
                if kind in "iub":
                    b = g.const(np.asarray(rng.integers(1, 4), dtype=a.dtype))
            else:
                b = live[rng.integers(len(live))]
            kinds = (kind, np.dtype(b.dtype).kind)
            if (op in ("maximum", "minimum") and "c" in kinds) or \
                    ("b" in kinds and op not in ("add", "mul", "maximum", "minimum")):
                op = "add"   # complex has no order; bool - bool and bool ** bool (int8) no
            t = getattr(go, op)(a, b) if tuple(a.shape) == tuple(b.shape) or \
                _broadcastable(a.shape, b.shape) else getattr(go, op)(a, a)
        elif choice < 0.68 and kind != "c":
            b = live[rng.integers(len(live))]
            if np.dtype(b.dtype).kind == "c" or not _broadcastable(a.shape, b.shape):
                b = a * 0.5 if kind == "f" else a
            cmp = getattr(go, {"lt": "less", "le": "less_equal", "gt": "greater",
                               "ge": "greater_equal", "eq": "equal",
                               "ne": "not_equal"}[str(rng.choice(_COMPARE))])(a, b)
            t = go.where(cmp, a, b)
        elif choice < 0.73:
            target = str(rng.choice(FLOATS + COMPLEX + INTS + ("bool",)))
            t = go.astype(a, target)
        elif choice < 0.85 and a.shape:
            axis = int(rng.integers(len(a.shape)))
            red = str(rng.choice(["sum", "mean"] + (["max", "min"] if kind != "c" else [])))
            if red in ("max", "min") and a.shape[axis] == 0:
                red = "sum"
            t = getattr(go, red)(a, axis=axis, keepdims=bool(rng.random() < 0.5))
        elif choice < 0.93 and len(a.shape) >= 2:
            other = new_input((a.shape[-1], 3), str(a.dtype))
            t = go.einsum("...i,ij->...j", a, other)
        elif choice < 0.97 and len(a.shape) >= 1 and kind == "f":
            t = (go.softmax if rng.random() < 0.5 else go.logsumexp)(a, axis=-1)
        elif len(a.shape) >= 2:
            t = go.transpose(a, tuple(reversed(range(len(a.shape)))))
        else:
            t = go.abs(a) if kind == "b" else -a
        live.append(t)
    outs = [live[-1]] + ([live[len(live) // 2]] if rng.random() < 0.4 else [])
    g.output(tuple(outs) if len(outs) > 1 else outs[0])
    return g, inputs


def _broadcastable(s, t) -> bool:
    try:
        np.broadcast_shapes(tuple(s), tuple(t))
    except ValueError:
        return False
    return True
