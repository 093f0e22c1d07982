"""The graph builder: ``Graph``, a computation graph under construction (inputs, constants,
outputs); its values are ``tensor.Tensor`` handles and the op functions of ``go.``.
"""

from __future__ import annotations

import operator
from typing import Sequence

import numpy as np

from .. import ir
from ..errors import DTypeError, GraphError, InputError, ShapeError
from ..ir import ops
from ..observe import display
from ..runtime import signature
from .tensor import Tensor, user_src


class Graph:
    """A computation graph under construction.

    Args:
        name: a name for reports and the compile cache.
    """

    def __init__(self, name: str | None = None):
        self.name = name or "graph"
        self._ir = ir.new_graph(self.name)
        self._lent = False     # a compile holds ``_ir`` as the graph its plan was made from
        self._names: set[str] = set()

    @property
    def _G(self) -> "ir.nx.MultiDiGraph":
        """The IR under construction. One that a compile holds (``_ir_for_compile``) is
        copied first: the graph a plan was compiled from never changes."""
        if self._lent:
            self._ir, self._lent = ir.copy_graph(self._ir), False
        return self._ir

    @_G.setter
    def _G(self, G) -> None:
        self._ir, self._lent = G, False

    # -- building -------------------------------------------------------------------------
    def input(self, name: str, shape: Sequence[int], dtype="float64") -> "Tensor":
        """Declare an input: plan calls bind arrays to it by ``name`` or position."""
        src = user_src()
        if not isinstance(name, str) or not name.isidentifier():
            raise InputError(f"input name {name!r} must be a Python identifier", op="input",
                             src=src)
        self._check_unused(name, src)
        try:
            shape = tuple(map(operator.index,
                              (shape,) if isinstance(shape, (int, np.integer)) else shape))
        except (TypeError, ValueError):
            raise ShapeError(f"input {name!r} shape {shape!r} is not a tuple of ints",
                             op="input", src=src) from None
        if shape and min(shape) < 0:
            raise ShapeError(f"input {name!r} has a negative dimension in {shape}", op="input",
                             src=src)
        try:
            dtype = ops.canonical_dtype(dtype)
        except GraphError as e:
            raise e.located(op="input", src=src) from None
        return self._declare(self._G, name, shape, dtype, src)

    def _array_inputs(self, arrays: Sequence[np.ndarray], prefix: str) -> list["Tensor"]:
        """An input per NumPy array of ``arrays``, named ``prefix`` + its position, of its
        shape and dtype, all at the caller's source line: what ``go.contract`` declares. The
        nodes ``input`` makes, without its checks of what an array's shape already is (a
        tuple of non-negative ints), each distinct dtype checked once (a network has
        hundreds of operands)."""
        src = user_src()
        G = self._G
        dtypes: dict = {}
        tensors = []
        for i, a in enumerate(arrays):
            dtype = dtypes.get(a.dtype)
            if dtype is None:
                try:
                    dtype = dtypes[a.dtype] = ops.canonical_dtype(a.dtype)
                except GraphError as e:
                    raise e.located(op="input", src=src) from None
            name = f"{prefix}{i}"
            self._check_unused(name, src)
            tensors.append(self._declare(G, name, a.shape, dtype, src))
        return tensors

    def _check_unused(self, name: str, src: str) -> None:
        """``InputError`` where an input is named ``name`` already."""
        if name in self._names:
            raise InputError(f"duplicate input name {name!r}", op="input", src=src)

    def _declare(self, G, name: str, shape: tuple, dtype: str, src: str) -> "Tensor":
        """Input ``name`` (a checked name, shape and dtype) added to ``G``, this graph's IR."""
        nid = ir.add_node(G, "input", (), shape, dtype, name=name, src=src)
        G.graph["inputs"].append(nid)
        self._names.add(name)
        return Tensor(self, nid)

    def const(self, value) -> "Tensor":
        """A constant: a NumPy scalar or array (copied; later changes to it do not leak in)."""
        return self._const(value, src=user_src())

    def _const(self, value, src, dtype=None) -> "Tensor":
        if isinstance(value, Tensor):
            raise GraphError("g.const() takes an array or scalar, not a Tensor", op="const",
                             src=src)
        try:
            arr = np.array(value, dtype=dtype, copy=True)
        except (TypeError, ValueError, OverflowError) as e:
            raise DTypeError(f"cannot make a {dtype or 'constant'} from {value!r}: {e}",
                             op="const", src=src) from None
        if arr.dtype == object:
            raise DTypeError(f"constant {value!r} is not numeric", op="const", src=src)
        try:
            ops.canonical_dtype(arr.dtype)
        except GraphError as e:
            raise e.located(op="const", src=src) from None
        arr.setflags(write=False)
        nid = ir.add_node(self._G, "const", [], arr.shape, arr.dtype, {"value": arr}, src=src)
        return Tensor(self, nid)

    def output(self, tensors) -> None:
        """Mark the outputs: one Tensor, or a tuple, list or dict (str keys) of them, nested
        to any depth (``(loss, {"w": dw})``). The compiled plan returns the same structure."""
        src = user_src()

        def check(t):
            if not isinstance(t, Tensor):
                raise GraphError(f"outputs must be Tensors, got {type(t).__name__}; g.output "
                                 "takes a Tensor, tuple, list or dict of them", op="output",
                                 src=src)
            if t.graph is not self:
                raise GraphError("output Tensor belongs to another Graph", op="output", src=src)
            return t.id

        try:
            ids, struct = signature.flatten_outputs(tensors, check)
        except GraphError as e:
            raise e.located(op="output", src=src) from None
        if not ids:
            raise GraphError("g.output needs at least one Tensor", op="output", src=src)
        self._G.graph["outputs"] = ids
        self._G.graph["output_structure"] = struct

    # -- views ----------------------------------------------------------------------------
    @property
    def inputs(self) -> list["Tensor"]:
        return [Tensor(self, i) for i in self._ir.graph["inputs"]]

    def to_ir(self) -> "ir.nx.MultiDiGraph":
        """A verified copy of the IR (later building does not change it)."""
        G = ir.copy_graph(self._ir)
        _verify_built(G)
        return G

    def _ir_for_compile(self) -> "ir.nx.MultiDiGraph":
        """The IR itself, verified, for ``compile``, whose passes never change their input:
        lent until building goes on, which copies it first (``_G``). A network's hundreds
        of inputs are not copied at every compile."""
        _verify_built(self._ir)
        self._lent = True
        return self._ir

    def __repr__(self) -> str:
        return (f"Graph({self.name!r}, {self._ir.number_of_nodes()} nodes, "
                f"{len(self._ir.graph['inputs'])} inputs)")

    def to_dot(self) -> str:
        """The graph as built, in Graphviz DOT (needs the ``viz`` extra)."""
        return display.to_dot(self._ir)

    def _repr_html_(self) -> str:
        return display.graph_html(self._ir, repr(self))

    # -- internal ---------------------------------------------------------------------------
    def _add(self, op: str, operands: Sequence["Tensor"], attrs=None, src=None) -> "Tensor":
        return Tensor(self, ir.add_op(self._G, op, [t.id for t in operands], attrs,
                                      src=src or user_src()))


def _verify_built(G) -> None:
    """A built graph's whole-graph invariants. Every node was checked as it was made
    (``ir.add_op`` infers its shape and dtype, ``input``/``constant`` check theirs, ``go.load``
    verifies what it reads): the per-node checks, a network's hundreds of them, are not
    run again."""
    ir.verify(G, nodes=False)
