"""The reference backend: every step is the interpreter's NumPy semantics, written into the
planned buffer. It runs the whole plan path (lowering, arena, pool, profiler, report)
wherever NumPy runs."""

from __future__ import annotations

import numpy as np

from .. import ops
from ..interpreter import eval_node
from ..plan import Kernel
from .base import Backend, register_backend


@register_backend
class NumpyBackend(Backend):
    name = "numpy"
    install_hint = "numpy is a core dependency"

    def kernel(self, G, n, ctx) -> Kernel:
        d = G.nodes[n]

        def fn(args, out):
            res = eval_node(G, n, args)
            if out is None:
                return res
            np.copyto(out, res, casting="no")
            return out

        fn.__name__ = f"ref_{d['op']}_{n}"
        call = ops.OPS[d["op"]].impl
        src = (f"# reference: {d['op']} {d['attrs'] if d['op'] not in ('fused', 'const') else ''}"
               f"\nout[...] = {getattr(call, '__qualname__', d['op'])}(args, attrs)")
        return Kernel(fn.__name__, fn, src, impl="numpy", node=n)
