"""Running a ``GroupProgram`` on cupy: argument views, stage launches, and the op-by-op
fallback for groups the generator refuses."""

from __future__ import annotations

from .... import ir
from ....ir import ops
from ....ir.einsum_numpy import to_ascii
from ... import scalar_semantics as ss
from .. import codegen as cg

# ------------------------------------------------------------------------- stage runtime


def _apply_chain(a, chain):
    import cupy

    for op, arg in chain:
        a = a.transpose(arg) if op == "transpose" else \
            cupy.broadcast_to(a, arg) if op == "broadcast_to" else a.reshape(arg)
    return a


def operand_getter(o: cg.Operand, consts: list, broadcast: bool):
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


def program_fn(runs, prog: cg.GroupProgram):
    """The kernel function ``fn(args, out)`` that runs a group program's compiled stages
    (``runs``) in order, each into the output or a temporary."""
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


def eager_fn(sub):
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
                    r = cupy.einsum(to_ascii(eq), *xs)
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
