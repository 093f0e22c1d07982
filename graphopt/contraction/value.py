"""The contraction value: how one einsum node runs, decided once and read everywhere.

A ``Contraction`` holds an einsum's equation and operands (shapes, dtypes), the path it
runs along, each step's form (GEMM or ``np.einsum``, by the backend's ``Rates``), the
slices it loops over (labels, blocks, how many run at once) and whether it runs in a
device's memory. From those follow, by one rule each, its FLOPs (``flops``), its planned
program and arena (``program``) and what a call allocates beside its operands and result
(``workspace_bytes``). The model is cotengra's ``ContractionTree`` and opt_einsum's
``ContractExpression``: one object the passes produce and everything downstream reads.

The IR contract: every einsum node of a compiled graph holds one in ``attrs["contraction"]``.
The ``contraction`` pass makes it (for every einsum node, at every opt_level) and the
``slicing`` pass replaces it with a sliced one; ``ir.verify`` checks it against the node,
``save``/``load`` keep it, and lowering, the backends, the cost model, the memory passes and
the report only read it. It is immutable: a pass that changes a contraction makes a new one
(``sliced``, ``relabeled``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from .. import ir
from ..errors import GraphError
from ..ir.einsum import split as split_equation
from .paths import default_path, label_sizes, path_flops, play_path
from .program.einsum_bytes import np_einsum_bytes
from .program.forms import step_forms
from .program.gemm import BLAS_DTYPES, gemm_of, gemm_workspace_bytes
from .program.run import path_contraction
from .rates import DEVICE_RATES, Rates, host_rates
from .slicing.run import contraction_workspace_bytes, full_slice_shapes

FORMS = ("gemm", "einsum")


@dataclass(frozen=True)
class Contraction:
    """One einsum's contraction (see the module docstring).

    ``equation``: the node's (IR labels, explicit output). ``shapes``/``operand_dtypes``: its
    operands'; ``dtype``: the result's, which every operand is cast to. ``path``: opt_einsum's
    linear format (one step of every operand for a pair or one operand). ``forms``: per step
    of the path, ``"gemm"`` or ``"einsum"``. ``slices``/``blocks``: labels looped over and the
    index values one slice covers; ``workers``: slices run at once. ``device``: planned for a
    device's memory, which holds arrays only. ``rates``: the table the forms came from (not
    compared: equal contractions planned by two tables' rules are equal)."""

    equation: str
    shapes: tuple
    dtype: str
    operand_dtypes: tuple
    path: tuple
    forms: tuple
    slices: tuple = ()
    blocks: tuple = ()
    workers: int = 1
    device: bool = False
    rates: Rates | None = field(default=None, compare=False, repr=False)

    # ------------------------------------------------------------------------ making one

    @classmethod
    def build(cls, equation: str, shapes, dtype: str, operand_dtypes, path, rates: Rates,
              slices=(), blocks=(), workers: int = 1, optimize="greedy") -> "Contraction":
        """The contraction of ``equation`` along ``path`` (None: ``paths.default_path`` by
        ``optimize``, opt_einsum's greedy where opt_einsum does not take that search), each
        step's form by ``rates`` on the full slice's shapes."""
        shapes = tuple(tuple(int(d) for d in s) for s in shapes)
        if path is None:
            try:
                path = default_path(equation, shapes, optimize)
            except (TypeError, ValueError, KeyError):    # an optimize opt_einsum lacks
                path = default_path(equation, shapes)
        path = tuple(tuple(int(i) for i in p) for p in path) or \
            (tuple(range(len(shapes))),)
        slices, blocks = tuple(slices), tuple(int(b) for b in blocks)
        terms, output = split_equation(equation)
        full = full_slice_shapes(terms, shapes, dict(zip(slices, blocks))) if slices else shapes
        forms = step_forms(terms, output, path, full, dtype, rates)
        return cls(equation, shapes, str(dtype), tuple(map(str, operand_dtypes)), path, forms,
                   slices, blocks, int(workers), rates.device, rates)

    @classmethod
    def of_node(cls, G, n: int, rates: Rates | None = None, path=None,
                optimize="greedy") -> "Contraction":
        """The contraction of einsum node ``n`` of ``G`` along ``path`` (None: the one it
        holds, else ``paths.default_path`` by ``optimize``), its slicing kept where the path
        is its own, each step's form by ``rates`` (None: the table of the contraction it
        holds)."""
        d = G.nodes[n]
        operands = ir.operands(G, n)
        held = d["attrs"].get("contraction")
        slicing = {}
        if path is None and held is not None:
            path = held.path
            slicing = dict(slices=held.slices, blocks=held.blocks, workers=held.workers)
        if rates is None:
            rates = held.table if held is not None else host_rates()
        return cls.build(d["attrs"]["equation"], [G._node[u]["shape"] for u in operands],
                         d["dtype"], [G._node[u]["dtype"] for u in operands], path, rates,
                         optimize=optimize, **slicing)

    def sliced(self, slices, blocks, workers: int, rates: Rates, path=None) -> "Contraction":
        """This contraction looping over ``slices`` in ``blocks`` (``workers`` at once),
        along ``path`` (default its own); forms planned for the new full slice."""
        return Contraction.build(self.equation, self.shapes, self.dtype, self.operand_dtypes,
                                 self.path if path is None else path, rates, slices, blocks,
                                 workers)

    def relabeled(self, mapping: dict) -> "Contraction":
        """The same contraction with its labels renamed by ``mapping`` (each label to one
        label): the path and forms are by position, unchanged."""
        ins, out = split_equation(self.equation)
        eq = ",".join("".join(mapping[c] for c in t) for t in ins) + "->" + \
            "".join(mapping[c] for c in out)
        return replace(self, equation=eq, slices=tuple(mapping[c] for c in self.slices))

    # ---------------------------------------------------------------------------- facts

    @property
    def table(self) -> Rates:
        """The rate table its forms follow (a loaded one's: the host's or a device's)."""
        if self.rates is not None:
            return self.rates
        return DEVICE_RATES if self.device else host_rates()

    @cached_property
    def terms(self) -> tuple:
        return tuple(split_equation(self.equation)[0])

    @cached_property
    def output(self) -> str:
        return split_equation(self.equation)[1]

    @cached_property
    def sizes(self) -> dict:
        """Each label's size (a label of size 1 on one operand and n on another: n)."""
        return label_sizes(self.equation, self.shapes)

    @property
    def along_path(self) -> bool:
        """Whether it runs as a program along its path (more than two operands, or
        sliced), not as one pairwise kernel."""
        return len(self.shapes) > 2 or bool(self.slices)

    @property
    def sliced_labels(self) -> dict:
        """``{label: block}`` of the slices over labels the operands hold."""
        return {c: b for c, b in zip(self.slices, self.blocks) if c in self.sizes}

    @cached_property
    def flops(self) -> int:
        """FLOPs along the path, unsliced, as opt_einsum counts them (``paths.play``)."""
        return path_flops(self.equation, self.sizes, self.path)

    @cached_property
    def program(self):
        """The shared ``PathContraction`` of this equation, path and forms: its programs are
        planned once per operand signature, the compile's and the kernel's the same."""
        return path_contraction(self.equation, self.path, self.forms, self.device)

    @cached_property
    def workspace_bytes(self) -> int:
        """What one call allocates beside its operands and result: along its path,
        ``slicing.run.contraction_workspace_bytes`` (the rule the slicing pass bounds);
        a pair, what its one GEMM or ``np.einsum`` allocates on the host for C-contiguous
        operands (``pair_workspace_bytes``)."""
        if self.along_path:
            return contraction_workspace_bytes(
                self.equation, self.shapes, self.path, self.slices, self.blocks or None,
                self.dtype, self.workers, self.operand_dtypes, contraction=self.program,
                device=self.device, forms=self.forms)
        return pair_workspace_bytes(self.equation, self.shapes, self.dtype, self.forms[0])

    # ------------------------------------------------------------------------ checking

    def check(self, equation: str, shapes, dtype: str, operand_dtypes) -> str | None:
        """What is wrong with this contraction as the one of an einsum ``equation`` over
        operands of ``shapes`` and ``operand_dtypes`` giving ``dtype`` (None: nothing)."""
        if self.equation != equation:
            return f"its equation {self.equation!r} is not the node's {equation!r}"
        if self.shapes != tuple(map(tuple, shapes)) or self.dtype != dtype or \
                self.operand_dtypes != tuple(operand_dtypes):
            return (f"it was made for operands {list(self.shapes)} {list(self.operand_dtypes)}"
                    f" -> {self.dtype}, the node has {[tuple(s) for s in shapes]} "
                    f"{list(operand_dtypes)} -> {dtype}")
        try:
            steps = play_path(self.terms, self.output, self.path)
        except GraphError as e:
            return f"its path {list(self.path)} does not fit: {e.detail}"
        if len(self.forms) != len(steps) or any(f not in FORMS for f in self.forms):
            return f"it has forms {list(self.forms)} for a path of {len(steps)} step(s)"
        if len(self.slices) != len(self.blocks) or \
                any(c not in self.sizes or b < 1 for c, b in zip(self.slices, self.blocks)):
            return f"its slices {list(self.slices)} (blocks {list(self.blocks)}) do not fit"
        if self.workers < 1:
            return f"it runs {self.workers} slices at once"
        return None

    # ------------------------------------------------------------------------ rendering

    def describe(self) -> str:
        """One line: the path's steps and forms, the slicing."""
        gemms = sum(f == "gemm" for f in self.forms)
        text = (f"{len(self.path)} step(s) along {[list(p) for p in self.path]}"
                if len(self.path) > 1 else "one step") + \
            f", {gemms} GEMM(s), {len(self.forms) - gemms} np.einsum"
        if self.slices:
            n = math.prod(-(-self.sizes[c] // b) for c, b in self.sliced_labels.items())
            text += (f"; {n} slice(s) over {list(self.slices)} (blocks {list(self.blocks)}), "
                     f"{self.workers} at once")
        return text

    def to_dict(self) -> dict:
        """JSON-ready: what ``from_dict`` reads back."""
        return {"equation": self.equation, "shapes": [list(s) for s in self.shapes],
                "dtype": self.dtype, "operand_dtypes": list(self.operand_dtypes),
                "path": [list(p) for p in self.path], "forms": list(self.forms),
                "slices": list(self.slices), "blocks": list(self.blocks),
                "workers": self.workers, "device": self.device}

    @classmethod
    def from_dict(cls, doc: dict) -> "Contraction":
        """The contraction ``to_dict`` wrote; ``GraphError`` where ``doc`` is not one."""
        try:
            return cls(str(doc["equation"]), tuple(tuple(int(d) for d in s)
                                                   for s in doc["shapes"]),
                       str(doc["dtype"]), tuple(str(t) for t in doc["operand_dtypes"]),
                       tuple(tuple(int(i) for i in p) for p in doc["path"]),
                       tuple(str(f) for f in doc["forms"]),
                       tuple(str(c) for c in doc.get("slices", ())),
                       tuple(int(b) for b in doc.get("blocks", ())),
                       int(doc.get("workers", 1)), bool(doc.get("device", False)))
        except (KeyError, TypeError, ValueError) as e:
            raise GraphError(f"a contraction must be a dict with equation, shapes, dtype, "
                             f"operand_dtypes, path and forms: {e!r}") from None


def pair_workspace_bytes(equation: str, shapes, dtype: str, form: str) -> int:
    """What a pairwise (or one-operand) einsum allocates beside ``out`` on the host in
    ``form`` for C-contiguous operands: ``gemm.gemm_workspace_bytes`` of its GEMM, or
    ``np.einsum``'s own buffers (``einsum_bytes.np_einsum_bytes``; a plan's values are
    C-contiguous, and inputs are predicted so, as a program's are)."""
    itemsize = np.dtype(dtype).itemsize
    if form == "gemm" and len(shapes) == 2:
        gemm = gemm_of(equation, shapes)
        if gemm is not None:
            return gemm_workspace_bytes(gemm, shapes, itemsize, dtype in BLAS_DTYPES)
    terms, output = split_equation(equation)
    return np_einsum_bytes(terms, output, label_sizes(equation, shapes), itemsize,
                           c_contiguous=True)


def contraction_of(G, n: int) -> Contraction:
    """The contraction einsum node ``n`` holds; ``GraphError`` naming the node where it holds
    none (a graph that did not go through the ``contraction`` pass)."""
    value = G.nodes[n]["attrs"].get("contraction")
    if value is None:
        d = G.nodes[n]
        raise GraphError("an einsum node reached a backend without its contraction (the "
                         "contraction pass makes one for every einsum node)", op="einsum",
                         src=d.get("src"), node=n)
    return value
