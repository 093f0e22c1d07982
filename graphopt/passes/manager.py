"""The pass manager: runs pipelines, verifies after every pass, and keeps the books.

A pass is ``pass_(G, ctx) -> PassResult(graph, record)`` and never mutates ``G``. Timing,
node counts and ``changed`` are recorded here, once, for every pass (STYLE 4); a pass only
reports its own facts in ``details``. Instruments (``instruments.py``) watch the pipeline:
``GRAPHOPT_DUMP=dir`` adds ``DumpIR`` (the IR after each pass as ``NN_<pass>.json``),
``GRAPHOPT_DEBUG=1`` adds ``CheckSemantics`` (each pass against the interpreter);
``GRAPHOPT_DISABLE=a,b`` switches passes off by name.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import networkx as nx

from .. import ir
from ..contraction.rates import HOST_RATES, Rates
from ..errors import GraphError
from ..observe import progress
from ..support.env import env_flag
from .instruments import CheckSemantics, DumpIR, PassInstrument


@dataclass
class PassRecord:
    """What one pass did. ``details`` keys are per pass (see docs/API.md)."""

    name: str = ""
    seconds: float = 0.0
    nodes_before: int = 0
    nodes_after: int = 0
    changed: bool | None = None
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"name": self.name, "seconds": self.seconds, "nodes_before": self.nodes_before,
                "nodes_after": self.nodes_after, "changed": self.changed,
                "details": self.details}


@dataclass
class PassResult:
    """A pass's output graph and its record (a PassRecord, a details dict, or None)."""

    graph: nx.MultiDiGraph
    record: PassRecord | dict | None = None


@dataclass
class PassContext:
    """Compile options every pass can read (opt_level, memory_limit, optimize, backend...)."""

    opt_level: int = 2
    memory_limit: int | None = None
    optimize: Any = "auto"
    backend: str = "numpy"
    options: dict = field(default_factory=dict)
    debug: bool = False
    # The graph is one contraction of graph inputs, compiled by ``CONTRACTION_ONLY_PIPELINE``:
    # the contraction pass keeps its group as one node, run along its path.
    whole_contraction: bool = False
    # The backend may run several slices of a sliced contraction at once (``Backend.
    # slices_at_once``: on host threads); a GPU runs them one after another on its stream.
    slices_at_once: bool = True
    # The backend's rate table (``Backend.rates``): each contraction step's form, the path
    # search's default budget, a sliced path's predicted seconds
    rates: Rates = HOST_RATES
    # What each node's step will allocate beside the arena while it runs, as the backend
    # predicts it (``Backend.workspace_bytes`` and ``Backend.call_bytes``: its kernel's
    # workspace and its call's objects): the ``rematerialize`` pass keeps the largest free
    # of the arena it plans
    workspace_of: Callable | None = field(default=None, repr=False)
    # Whether the plan's peak counts the call's host objects (``call_bytes``): a host
    # backend's does; a device's peak is its device memory (``Backend.host_arrays``)
    host_objects: bool = True
    # ``cost.graph_flops`` of this compile's graphs, by identity (each graph held with its
    # count, so no id is reused): the contraction pass and the report count the same ones
    counted_flops: dict = field(default_factory=dict, repr=False)
    # Seconds the contraction pass's path search spent on each group it kept as one node
    # (by node id): the slicing pass's search of that node with its slices gets what is
    # left of ``path_time`` (``search_budget.LIMITED_UNSLICED_SHARE``)
    path_seconds: dict = field(default_factory=dict, repr=False)


_log = logging.getLogger(__name__)

PASSES: dict[str, Callable] = {}
# Compile options some pass reads from ``ctx.options`` (declared with ``register_pass``).
PASS_OPTIONS: set[str] = set()


def register_pass(name: str | None = None, *, replace: bool = False, options=()):
    """Decorator registering a pass under ``name`` (default: the function's name).

    ``options``: the ``compile(..., **options)`` names the pass reads. A duplicate name
    raises unless ``replace=True``."""
    def deco(fn):
        key = name or fn.__name__
        if key in PASSES and not replace:
            raise ValueError(f"pass {key!r} is already registered")
        PASSES[key] = fn
        PASS_OPTIONS.update(options)
        fn.pass_name = key
        return fn
    return deco


def check_pass_names(names, what: str) -> None:
    """Raise ``GraphError`` listing the registered passes if a name in ``names`` is not one."""
    unknown = sorted(set(names) - set(PASSES))
    if unknown:
        raise GraphError(f"{what}: unknown pass name(s) {unknown}; registered passes: "
                         f"{', '.join(sorted(PASSES))}")


def get_pass(name: str) -> Callable:
    """The registered pass ``name``; ``GraphError`` listing the registered ones otherwise."""
    try:
        return PASSES[name]
    except KeyError:
        raise GraphError(f"unknown pass {name!r}; registered passes: "
                         f"{', '.join(sorted(PASSES))}") from None


# Pipelines by opt_level. Names resolve through the registry at run time, so a user can
# register a replacement under a built-in name.
PIPELINES: dict[int, list[str]] = {
    0: ["contraction"],
    1: ["simplify", "cse", "dce", "contraction"],
    2: ["simplify", "cse", "dce", "contraction", "slicing", "simplify", "cse", "dce",
        "fusion", "tiling", "schedule", "rematerialize", "memory"],
    3: ["simplify", "cse", "dce", "contraction", "slicing", "simplify", "cse", "dce",
        "fusion", "tiling", "schedule", "rematerialize", "memory"],
}


_BUILTIN_PIPELINES = {level: list(names) for level, names in PIPELINES.items()}

# opt_level 2 on a graph that computes one contraction of graph inputs and nothing else (a
# tensor network, ``go.contract``), on a backend that runs a contraction along its path as
# one kernel: simplify, CSE, DCE, fusion, tiling, scheduling and memory planning have
# nothing to act on in one einsum of inputs, and pairwise nodes would buy nothing but
# compile time (every node, every pass), so only these run.
CONTRACTION_ONLY_PIPELINE = ["contraction", "slicing"]


def register_pipeline(level: int, names: Sequence[str]) -> None:
    """Make ``names`` the pipeline of ``opt_level`` ``level``."""
    PIPELINES[level] = list(names)


def pipeline_for(opt_level: int, contraction_only: bool = False) -> list[str]:
    """The registered passes of ``opt_level``'s pipeline, in order; with
    ``contraction_only`` (see ``CONTRACTION_ONLY_PIPELINE``) at opt_level 2, unless that
    pipeline was replaced, the contraction-only one."""
    if opt_level not in PIPELINES:
        raise GraphError(f"opt_level must be one of {sorted(PIPELINES)}, got {opt_level!r}")
    names = PIPELINES[opt_level]
    if contraction_only and opt_level == 2 and names == _BUILTIN_PIPELINES[2]:
        names = CONTRACTION_ONLY_PIPELINE
    return [n for n in names if n in PASSES]


def env_disabled() -> set[str]:
    """Pass names switched off by ``$GRAPHOPT_DISABLE`` (comma-separated)."""
    return {s.strip() for s in os.environ.get("GRAPHOPT_DISABLE", "").split(",") if s.strip()}


def _pass_name(p) -> str:
    return p if isinstance(p, str) else getattr(p, "pass_name", getattr(p, "__name__", repr(p)))


class PassManager:
    """Runs passes in order; verifies the IR after each (the failure names the pass and the
    passes before it).

    Args:
        passes: pass callables or registered names.
        disable: names to skip.
        verify: run ``ir.verify`` after every pass.
        debug: also compare every pass's output with the interpreter on random inputs
            (adds ``CheckSemantics``; default ``GRAPHOPT_DEBUG``).
        dump_dir: write the IR after each pass as JSON (adds ``DumpIR``; default
            ``GRAPHOPT_DUMP``).
        instruments: more ``PassInstrument``s, called after every pass in this order.
        unsupported: pass name -> why the backend cannot run its output (the backend's
            ``unsupported_passes``): the pass is not run and its record says why.
    """

    def __init__(self, passes: Iterable, *, disable: Iterable[str] = (), verify: bool = True,
                 debug: bool | None = None, dump_dir: str | None = None,
                 instruments: Sequence[PassInstrument] = (),
                 unsupported: Mapping[str, str] | None = None):
        self.passes = [(p if isinstance(p, str) else _pass_name(p), p) for p in passes]
        self.disable = set(disable) | env_disabled()
        self.unsupported = dict(unsupported or {})
        self.verify = verify
        self.debug = env_flag("GRAPHOPT_DEBUG") if debug is None else debug
        self.dump_dir = dump_dir if dump_dir is not None else os.environ.get("GRAPHOPT_DUMP")
        self.instruments = list(instruments) + [CheckSemantics()] * self.debug + \
            ([DumpIR(self.dump_dir)] if self.dump_dir else [])

    def run(self, G: nx.MultiDiGraph, ctx: PassContext | None = None):
        """Returns ``(optimized_graph, records)``; ``G`` itself is left untouched."""
        ctx = ctx or PassContext()
        records: list[PassRecord] = []
        done: list[str] = []
        known = None           # (node_keys, graph_key) of G when the previous pass built them
        for i, (name, p) in enumerate(self.passes):
            if name in self.disable:
                continue
            if name in self.unsupported:
                records.append(PassRecord(name=name, nodes_before=G.number_of_nodes(),
                                          nodes_after=G.number_of_nodes(), changed=False,
                                          details={"skipped": self.unsupported[name]}))
                continue
            fn = get_pass(p) if isinstance(p, str) else p
            progress.phase(f"pass {name}")
            frozen = _Snapshot(G, known, thorough=self.debug)
            t0 = time.perf_counter()
            result = fn(G, ctx)
            seconds = time.perf_counter() - t0
            # graphopt's own passes are tested not to mutate their input (tests/passes,
            # tests/property): their check costs two node-key walks a pass, so it runs
            # in debug mode only; any other pass is checked every time
            checked = frozen.check(G, name) if self.debug or not _builtin(fn) else \
                (frozen.keys, frozen.graph_key)
            H, rec = _normalize(result, name)
            after = checked if H is G else (ir.node_keys(H), ir.graph_key(H)) \
                if isinstance(H, nx.MultiDiGraph) else ({}, ())
            # a pass that returned the graph a pass before it returned (and verified),
            # unchanged, needs no second verification
            if self.verify and not (H is G and done and not self.debug):
                try:
                    ir.verify(H, pass_name=name,
                              verified=None if self.debug else (frozen.keys, after[0]))
                except GraphError as e:
                    raise GraphError(f"{e.detail}; passes run before it: {done or 'none'}",
                                     op=e.op, src=e.src, node=e.node) from None
            structure_changed = after[0] != frozen.keys or \
                _signature(after[1]) != _signature(frozen.graph_key)
            if structure_changed:
                # A schedule or memory plan carried over unchanged from before a structural
                # change describes a graph that no longer exists.
                stale = [k for k in ir.DERIVED_GRAPH_ATTRS
                         if k in H.graph and H.graph.get(k) == G.graph.get(k)]
                for k in stale:
                    del H.graph[k]
                if stale:
                    after = (after[0], ir.graph_key(H))
            if rec.changed is None:
                rec.changed = structure_changed or after[1] != frozen.graph_key
            rec.name, rec.seconds = name, seconds
            rec.nodes_before, rec.nodes_after = G.number_of_nodes(), H.number_of_nodes()
            for instrument in self.instruments:
                instrument.after_pass(i, name, G, H, ctx)
            records.append(rec)
            done.append(name)
            if _log.isEnabledFor(logging.DEBUG):   # details of big graphs are long to print
                _log.debug("pass %s: %d -> %d nodes, %s in %.1f ms; %s", name,
                           rec.nodes_before, rec.nodes_after,
                           "changed" if rec.changed else "unchanged", seconds * 1e3,
                           _summary(rec.details))
            G, known = H, after
        return G, records


def _builtin(fn) -> bool:
    """Whether ``fn`` is one of graphopt's own passes (``graphopt.passes.*``)."""
    return getattr(fn, "__module__", "").startswith(__package__ + ".")


def _summary(details: dict, width: int = 300) -> str:
    """A pass record's details on one log line (long values cut)."""
    text = ", ".join(f"{k}={v!r}" for k, v in details.items())
    return text if len(text) <= width else text[:width] + " ..."


def _normalize(result, name) -> tuple[nx.MultiDiGraph, PassRecord]:
    if isinstance(result, nx.MultiDiGraph):
        return result, PassRecord()
    if isinstance(result, tuple) and not isinstance(result, PassResult) and len(result) == 2:
        result = PassResult(*result)
    if not isinstance(result, PassResult):
        raise GraphError(f"pass {name!r} returned {type(result).__name__}; a pass returns "
                         "PassResult(graph, record)")
    rec = result.record
    if rec is None:
        rec = PassRecord()
    elif isinstance(rec, dict):
        rec = PassRecord(details=dict(rec))
    return result.graph, rec


def _signature(graph_key: tuple) -> tuple:
    """A graph's inputs, outputs and output structure, read from its ``ir.graph_key``."""
    attrs = dict(graph_key)
    return tuple(attrs.get(k) for k in ("inputs", "outputs", "output_structure"))


class _Snapshot:
    """Catches a pass that mutates its input graph (a contract violation): by node keys
    (``ir.node_keys``: any node, attribute value or edge replaced, a list changed in
    place), and where ``thorough`` (debug) also by structural hash (arrays changed in
    place)."""

    def __init__(self, G, known: tuple | None = None, thorough: bool = False):
        self.keys, self.graph_key = known or (ir.node_keys(G), ir.graph_key(G))
        self.hash = ir.structural_hash(G) if thorough else None

    def check(self, G, name) -> tuple:
        """``G``'s (node keys, graph key), which must be those it had before the pass (a
        pass that changes nothing may return ``G`` itself)."""
        keys, graph_key = ir.node_keys(G), ir.graph_key(G)
        if keys != self.keys or graph_key != self.graph_key or \
                self.hash is not None and ir.structural_hash(G) != self.hash:
            raise GraphError(f"pass {name!r} mutated its input graph; passes must return a "
                             "new graph (use ir.copy_graph)")
        return keys, graph_key
