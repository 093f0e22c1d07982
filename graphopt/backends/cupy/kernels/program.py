"""What the CUDA generator produces: a ``GroupProgram`` of elementwise, reduction and einsum
stages over ``Operand``s, and its readable rendering (``plan.kernels[i].source``)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Operand:
    """A kernel argument: fused-node operand ``index`` (``source="input"``), an earlier
    stage's result (``"stage"``), a sub-graph constant (``"const"``), or a zero-filled
    array that only carries the reduction's shape (``"shape"``); ``chain`` lists the view
    ops applied to it first; the kernel then broadcasts it to ``shape``."""

    source: str
    index: int
    chain: tuple
    dtype: str
    shape: tuple


@dataclass
class ElementwiseStage:
    """One cupy ``ElementwiseKernel`` of a group program: its parameters, body and result."""
    name: str
    operands: list
    in_params: str
    out_params: str
    operation: str
    preamble: str
    shape: tuple
    dtype: str
    dest: str = "temp"  # "out" or "temp"
    kind: str = "elementwise"


@dataclass
class ReductionStage:
    """One cupy ``ReductionKernel`` of a group program: map, reduce and post-map expressions
    over ``axes`` of ``in_shape``, with the accumulator type and identity."""
    name: str
    operands: list
    in_params: str
    out_params: str
    map_expr: str
    reduce_expr: str
    post_map_expr: str
    identity: str
    reduce_type: str
    preamble: str
    axes: tuple
    keepdims: bool
    in_shape: tuple
    shape: tuple
    dtype: str
    dest: str = "temp"
    kind: str = "reduction"


@dataclass
class EinsumStage:
    """One contraction of a group program, run by cuBLAS or ``cupy.einsum``."""
    name: str
    equation: str
    operands: list
    shape: tuple
    dtype: str
    contraction: object = None  # the node's ``Contraction``: its path and its one step's form
    alpha: object = 1          # scale of the result (a folded ``* c`` or ``/ c`` epilogue)
    dest: str = "temp"
    kind: str = "einsum"


@dataclass
class GroupProgram:
    """Stages in run order; the last one's result is the group's value. ``via_temp``: the
    last stage writes a temporary that is then copied into the output (the output buffer
    is also an operand that stage reads). ``constants``: arrays for ``const`` operands."""

    name: str
    stages: list
    shape: tuple
    dtype: str
    constants: list = field(default_factory=list)
    via_temp: bool = False

    @property
    def source(self) -> str:
        return render(self)


# ------------------------------------------------------------------------------- render


def _describe(o: Operand, i: int) -> str:
    where = {"input": f"operand {o.index}", "stage": f"stage {o.index}",
             "const": f"constant {o.index}", "shape": "shape carrier"}[o.source]
    views = "".join(f".{op}{arg}" for op, arg in o.chain)
    return f"//   in{i}: {o.dtype} <- {where}{views}"


def render(prog: GroupProgram) -> str:
    """Readable CUDA source of every stage (what ``plan.kernels[i].source`` shows)."""
    out = [f"// graphopt kernel {prog.name}: {len(prog.stages)} stage(s) -> "
           f"{prog.dtype}{list(prog.shape)}"]
    for i, s in enumerate(prog.stages):
        dest = "out" if s.dest == "out" else f"temp{i}"
        out.append(f"\n// stage {i}: {s.kind} -> {dest} {s.dtype}{list(s.shape)}")
        out += [_describe(o, j) for j, o in enumerate(s.operands)]
        if s.kind == "einsum":
            scale = f", scaled by alpha = {s.alpha!r}" if s.alpha != 1 else ""
            out.append(f"//   contraction {s.equation!r}{scale} (library call chosen per step)")
            continue
        if s.preamble:
            out.append(s.preamble)
        if s.kind == "elementwise":
            out.append(f"// cupy.ElementwiseKernel({s.in_params!r}, {s.out_params!r}, "
                       f"name={s.name!r}):")
            out.append(s.operation)
        else:
            out.append(f"// cupy.ReductionKernel({s.in_params!r}, {s.out_params!r}, "
                       f"name={s.name!r}, reduce_type={s.reduce_type!r}), axis={s.axes}, "
                       f"keepdims={s.keepdims}")
            out += [f"//   map:      {s.map_expr}", f"//   reduce:   {s.reduce_expr}",
                    f"//   post_map: {s.post_map_expr}", f"//   identity: {s.identity}"]
    if prog.via_temp:
        out.append("\n// the last stage writes a temporary, copied into out (out aliases an "
                   "operand)")
    return "\n".join(out)
