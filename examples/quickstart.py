"""graphopt in five minutes: build a graph, compile it, run it, read the report.

Run: python examples/quickstart.py
"""

import os
import tempfile

import numpy as np

import graphopt as go

# 1. Build a graph: an MLP layer, gelu(x @ W1 + b1) @ W2 + b2.
g = go.Graph("mlp")
x = g.input("x", (512, 1024), "float32")        # name, shape, dtype
w1 = g.input("w1", (1024, 4096), "float32")
b1 = g.input("b1", (4096,), "float32")
w2 = g.input("w2", (4096, 256), "float32")
b2 = g.input("b2", (256,), "float32")
h = go.gelu(go.einsum("bi,ij->bj", x, w1) + b1)  # einsum, broadcasting, activations
y = h @ w2 + b2                                   # operators work too
g.output({"y": y, "row_norm": go.sqrt((y * y).sum(axis=1))})

# 2. Compile: the default is numba on the CPU where installed (else the NumPy reference).
plan = go.compile(g)

# 3. Run it, with keyword (or positional, in input order) arguments.
rng = np.random.default_rng(0)
args = {"x": rng.standard_normal((512, 1024)), "w1": rng.standard_normal((1024, 4096)) / 32,
        "b1": rng.standard_normal(4096) * 0.1, "w2": rng.standard_normal((4096, 256)) / 64,
        "b2": rng.standard_normal(256) * 0.1}
args = {k: v.astype(np.float32) for k, v in args.items()}
out = plan(**args)

# Check against plain NumPy.
z = args["x"] @ args["w1"] + args["b1"]
ref = 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3))) @ args["w2"] + \
    args["b2"]
print("max |error| vs NumPy:", float(np.max(np.abs(out["y"] - ref))))

# 4. What did the compiler do? Passes, FLOPs, kernels, memory plan.
print(plan.report)

# 5. Profile it: a per-step table, what bounds each step, and a Chrome trace.
prof = plan.profile(**args, repeat=5)
print(prof.summary())
print(prof.bottlenecks())       # compute-, memory- or overhead-bound, against this machine
out_dir = tempfile.mkdtemp(prefix="graphopt-quickstart-")   # nothing lands in your checkout
trace = os.path.join(out_dir, "trace.json")
prof.to_chrome_trace(trace)     # open in https://ui.perfetto.dev
print("Chrome trace written to", trace)

# 6. Trace a Python function instead of building the graph by hand: compiled once per
#    input signature (shapes, dtypes, static arguments), then cached.


@go.jit
def attention(q, k, v):
    scores = go.einsum("qd,kd->qk", q, k) / np.sqrt(q.shape[-1])
    return go.einsum("qk,kd->qd", go.softmax(scores, axis=-1), v)


q, k, v = (rng.standard_normal((128, 64)).astype(np.float32) for _ in range(3))
print("attention output:", attention(q, k, v).shape)

# 7. One-shot contractions, a drop-in for np.einsum / opt_einsum.contract.
a, b, c = rng.standard_normal((30, 40)), rng.standard_normal((40, 50)), rng.standard_normal(50)
print("contract:", np.allclose(go.contract("ij,jk,k->i", a, b, c), a @ b @ c))

# 8. Graphs save to (validated, versioned) JSON and load back.
saved = os.path.join(out_dir, "mlp.graph.json")
go.save(g, saved)
print("reloaded plan matches:", np.allclose(go.compile(go.load(saved))(**args)["y"], out["y"]))

# 9. NumPy code traces as it is: np.* functions, methods and basic indexing on traced values
#    build graph ops (anything without one is an error naming an alternative). Under
#    go.disable_jit() the same function runs op by op on real arrays, for print/pdb.


@go.jit
def layer_norm_head(x, w):
    h = np.einsum("sd,de->se", x, w)
    h = (h - h.mean(axis=-1, keepdims=True)) / np.sqrt(h.var(axis=-1, keepdims=True) + 1e-5)
    return np.clip(h[:, :16], -3, 3)


x8, w8 = rng.standard_normal((32, 64)), rng.standard_normal((64, 48))
with go.disable_jit():
    eager = layer_norm_head(x8, w8)
print("traced NumPy == eager run:", np.allclose(layer_norm_head(x8, w8), eager))
