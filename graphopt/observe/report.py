"""``OptimizationReport``: what every pass did, the kernels, FLOPs and the memory plan.

Reads like opt_einsum's PathInfo: a header (FLOPs naive -> optimized, memory naive /
planned / lower bound), one row per pass and one per kernel. Every number comes from the
graphs and plan themselves (docs/API.md)."""

from __future__ import annotations

import json
import weakref
from dataclasses import dataclass, field

import numpy as np

from .. import ir
from ..analysis import cost
from ..analysis.gradients import gradient_facts
from ..runtime import threads
from . import display, report_text
from .report_text import human_bytes as _mb


@dataclass
class OptimizationReport:
    """Records of the passes in run order, plus the plan's kernels and memory facts."""

    name: str
    backend: str
    opt_level: int
    records: list = field(default_factory=list)
    flops_naive: int = 0
    flops_optimized: int = 0
    nodes_before: int = 0
    nodes_after: int = 0
    memory: dict = field(default_factory=dict)
    kernels: list = field(default_factory=list)
    compile_seconds: float = 0.0
    cache_hit: bool = False
    plan_details: dict = field(default_factory=dict)   # a backend's own plan facts
    gradient: dict | None = None   # a go.grad/go.vjp graph's facts (autodiff.accounting)
    _dtypes: dict | None = field(default=None, repr=False, compare=False)   # ``dtypes``
    # the graphs whose nodes ``node_info`` names (source, optimized, lowered), read on first
    # ask: a network's hundreds of nodes are not walked at every compile
    _named_graphs: list = field(default_factory=list, repr=False, compare=False)
    _node_info: dict | None = field(default=None, repr=False, compare=False)
    _dot: str | None = None
    _graph: object = field(default=None, repr=False, compare=False)   # drawn on first ask
    _plan: object = field(default=None, repr=False, compare=False)   # weakref to the plan

    @classmethod
    def build(cls, *, name, backend, opt_level, records, source_graph,
              graph, counted_flops: dict | None = None) -> "OptimizationReport":
        """``counted_flops``: the compile's ``PassContext.counted_flops``."""
        report = cls(name=name, backend=backend, opt_level=opt_level, records=list(records),
                     flops_naive=cost.graph_flops(source_graph, counted_flops),
                     flops_optimized=cost.graph_flops(graph, counted_flops),
                     nodes_before=source_graph.number_of_nodes(),
                     nodes_after=graph.number_of_nodes(),
                     gradient=gradient_facts(source_graph, recomputation(records)))
        report._named_graphs += [source_graph, graph]
        return report

    @property
    def dtypes(self) -> dict:
        """The source graph's input and output dtypes and where dtypes changed
        (``dtype_facts``), found on first ask."""
        if self._dtypes is None:
            self._dtypes = dtype_facts(self._named_graphs[0]) if self._named_graphs else \
                {"inputs": {}, "outputs": [], "changes": []}
        return self._dtypes

    @property
    def node_info(self) -> dict:
        """Node id -> (op, the user's line), over the source, optimized and lowered graphs
        and their fused sub-graphs (the first graph that has an id names it)."""
        if self._node_info is None:
            info: dict = {}

            def note(G):
                for n, d in G.nodes(data=True):
                    info.setdefault(n, (d["op"], d.get("src") or ""))
                    if d["op"] == "fused":
                        note(d["attrs"]["graph"])
            for G in self._named_graphs:
                note(G)
            self._node_info = info
        return self._node_info

    def attach_plan(self, plan) -> None:
        """Fill in the kernel table and memory plan from the lowered plan."""
        m = plan.memory
        self.memory = {"naive_bytes": m.naive_bytes, "planned_bytes": m.planned_bytes,
                       "lower_bound_bytes": m.lower_bound_bytes, "arena_bytes": plan.arena_bytes}
        if hasattr(plan, "predicted_peak_bytes"):
            self.memory["predicted_peak_bytes"] = plan.predicted_peak_bytes
            self.memory["objects_bytes"] = plan.objects_bytes
            self.memory["workspace_bytes"] = (plan.predicted_peak_bytes - plan.arena_bytes
                                              - plan.objects_bytes)
        self.kernels = [{"step": s.index, "name": s.name, "impl": s.kernel.impl,
                         "ops": list(s.op_kinds), "shape": list(s.shape), "dtype": s.dtype,
                         "flops": s.flops, "bytes": s.bytes,
                         "uses_threads": s.kernel.uses_threads, **s.kernel.details}
                        for s in plan.steps]
        self.plan_details = dict(getattr(plan, "details", None) or {})
        self._plan = weakref.ref(plan)
        self._graph, self._dot = plan.graph, None
        self._named_graphs.append(plan.graph)
        self._node_info = None

    def thread_info(self) -> dict | None:
        """The thread budget the plan's calls get now and where it comes from, with the
        BLAS libraries and numba's threading layer, and where the plan has GEMMs whose
        threads run them (``gemm_threads``); None before a plan is attached."""
        plan = self._plan() if self._plan is not None else None
        if plan is None:
            return None
        info = threads.describe(getattr(plan, "threads", None))
        if any(s.kernel.blas_only_threads or "blas-gemm" in s.kernel.impl
               for s in getattr(plan, "steps", ())):
            info["gemm_threads"] = ("BLAS's own, where a call is alone and no call with "
                                    "other threaded work started in the last "
                                    f"{threads.BLAS_QUIET_SECONDS:g} s; else "
                                    if getattr(plan, "blas_threads_gemms", False) else "") + \
                "split over graphopt's workers, one BLAS thread each"
        return info

    def measured_memory(self) -> dict | None:
        """The plan's ``memory_stats()`` now (None before a plan is attached or once it is
        gone): what its calls so far actually held, next to the prediction above."""
        plan = self._plan() if self._plan is not None else None
        return plan.memory_stats() if plan is not None and hasattr(plan, "memory_stats") \
            else None

    # -- access ---------------------------------------------------------------------------
    def __getitem__(self, name: str):
        for r in self.records:
            if r.name == name:
                return r
        raise KeyError(f"no pass named {name!r} ran; ran: {[r.name for r in self.records]}")

    def __contains__(self, name: str) -> bool:
        return any(r.name == name for r in self.records)

    @property
    def speedup(self) -> float:
        return self.flops_naive / self.flops_optimized if self.flops_optimized else 1.0

    # -- renderings -----------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"name": self.name, "backend": self.backend, "opt_level": self.opt_level,
                "flops_naive": self.flops_naive, "flops_optimized": self.flops_optimized,
                "flop_speedup": self.speedup, "nodes_before": self.nodes_before,
                "nodes_after": self.nodes_after, "memory": dict(self.memory),
                "memory_measured": self.measured_memory(), "threads": self.thread_info(),
                "compile_seconds": self.compile_seconds, "cache_hit": self.cache_hit,
                "dtypes": dict(self.dtypes), "gradient": self.gradient,
                "passes": [r.to_dict() for r in self.records], "kernels": list(self.kernels),
                **({"plan": dict(self.plan_details)} if self.plan_details else {})}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=_json_default)

    def header_lines(self) -> list[str]:
        """The report's head: name, compile time, nodes, FLOPs, memory, dtypes, threads."""
        lines = [f"graphopt report: {self.name!r}  backend={self.backend}  opt_level="
                 f"{self.opt_level}  compile {self.compile_seconds * 1e3:.1f} ms"
                 + ("  (cache hit)" if self.cache_hit else ""),
                 f"  nodes:  {self.nodes_before} -> {self.nodes_after}",
                 f"  FLOPs:  {self.flops_naive:.4g} -> {self.flops_optimized:.4g}  "
                 f"(x{self.speedup:.2f})"]
        if self.memory:
            m = self.memory
            lines.append(f"  memory: naive {_mb(m['naive_bytes'])} -> planned "
                         f"{_mb(m['planned_bytes'])} (lower bound {_mb(m['lower_bound_bytes'])})")
            if "predicted_peak_bytes" in m:
                lines.append(f"  predicted peak per call: {_mb(m['predicted_peak_bytes'])} "
                             f"(arena {_mb(m['arena_bytes'])} + largest step workspace "
                             f"{_mb(m['workspace_bytes'])} + the call's objects "
                             f"{_mb(m.get('objects_bytes', 0))}; inputs and outputs not "
                             "counted)")
            measured = self.measured_memory()
            if measured and measured.get("measured_peak_bytes") is not None:
                got, want = measured["measured_peak_bytes"], m.get("predicted_peak_bytes")
                off = f"; {100 * (got - want) / want:+.1f} % of the predicted" if want else ""
                lines.append(f"  measured peak per call: {_mb(got)} (tracemalloc, "
                             f"plan.measure_peak_bytes{off})")
            if measured and measured["arenas_created"]:
                lines.append(f"  arenas in use: high water {_mb(measured['high_water_bytes'])}"
                             f" ({measured['max_concurrent_calls']} concurrent call(s)); pool "
                             f"high water {_mb(measured['pool']['high_water'])}")
        lines += report_text.dtype_lines(self) + report_text.gradient_lines(self.gradient)
        t = self.thread_info()
        if t:
            layer = (f"; numba {t['numba_layer']}, idle workers {t['omp_wait_policy']}"
                     if "numba_layer" in t else "")
            lines.append(f"  threads: {t['budget']} ({t['from']}; {t['machine']} core(s) "
                         f"here); BLAS {', '.join(t['blas']) or 'none loaded'}{layer}")
            if "gemm_threads" in t:
                lines.append(f"  GEMM threads: {t['gemm_threads']}")
        return lines

    def __str__(self) -> str:
        return report_text.render(self)

    __repr__ = __str__

    def contraction_lines(self) -> list[str]:
        """One line per contraction group of three or more operands: FLOPs in the order the
        user wrote, in the greedy order the search started from (cotengrust's or
        opt_einsum's, named) and in the chosen one; how the path was found (searcher,
        trials, seconds against the budget, path cache)."""
        groups = [g for r in self.records if r.name == "contraction"
                  for g in r.details.get("groups", ()) if g.get("operands", 0) > 2]
        if not groups:
            return []
        lines = ["", "  contraction groups (FLOPs: as written / greedy / chosen)"]
        for g in groups:
            found = g["optimizer"]
            s = g.get("search")
            if s:
                start = s.get("greedy", "greedy")
                how = s["searcher"] if s["searcher"].startswith(start) else \
                    f"{start}, then {s['searcher']}"
                found = (f"{how}, {s['trials']} trial(s), {s['seconds'] * 1e3:.1f} ms"
                         f" of a {s['budget_seconds'] * 1e3:.1f} ms budget, path cache "
                         f"{s['cache']}")
            lines.append(f"    node {g['root']}: {g['operands']} operands  "
                         f"{g['flops_before']:.3g} / {g.get('flops_greedy', 0):.3g} / "
                         f"{g['flops_after']:.3g}  {g['decision']}"
                         f"{', one node along the path' if g.get('emitted') else ''} ({found})")
        return lines

    def slicing_lines(self) -> list[str]:
        """One line per sliced contraction: the labels sliced and the number of slices, the
        FLOP overhead of recomputing steps per slice (against its path unsliced), the
        largest intermediate of one slice against the limit, and how many slices run at
        once; beneath it, where the path was searched with its slices, how, and the FLOPs
        that the unsliced path's slicing cost."""
        sliced = [r for rec in self.records if rec.name == "slicing"
                  for r in rec.details.get("sliced", ())]
        if not sliced:
            return []
        lines = ["", "  sliced contractions (to fit memory_limit)"]
        for r in sliced:
            labels = ", ".join(f"{c} (blocks of {b})" if b > 1 else c
                               for c, b in zip(r["slices"], r["slice_blocks"]))
            lines.append(
                f"    node {r['node']} {r['equation']!r}: {r['n_slices']} slices over "
                f"{labels}  FLOPs x{r['flop_overhead']:.3f}  largest intermediate "
                f"{_mb(r['largest_intermediate_unsliced_bytes'])} -> "
                f"{_mb(r['largest_intermediate_bytes'])} per slice  up to "
                f"{r.get('slice_workers', 1)} slice(s) at once")
            s = r.get("path_search")
            if s and s["searcher"] != "none":
                before = "none fitted" if s["flops_before"] is None else \
                    f"{s['flops_before']:.3g} FLOPs"
                whole = s.get("path_flops_unsliced")
                cost = f" (x{r['flops'] / whole:.3g} the unsliced path's {whole:.3g})" \
                    if whole else ""
                lines.append(f"      path searched with its slices ({s['searcher']}): "
                             f"along the unsliced path {before} -> {r['flops']:.3g}{cost}; "
                             f"{s['seconds'] * 1e3:.1f} ms of a "
                             f"{s['budget_seconds'] * 1e3:.1f} ms budget, path cache "
                             f"{s['cache']}")
        return lines

    def to_markdown(self) -> str:
        out = [f"### graphopt report: `{self.name}`", "",
               "| | before | after |", "|---|---|---|",
               f"| nodes | {self.nodes_before} | {self.nodes_after} |",
               f"| FLOPs | {self.flops_naive:.4g} | {self.flops_optimized:.4g} |"]
        if self.memory:
            out.append("| memory (naive / planned, lower bound) | "
                       f"{_mb(self.memory['naive_bytes'])}"
                       f" | {_mb(self.memory['planned_bytes'])} (lower bound "
                       f"{_mb(self.memory['lower_bound_bytes'])}) |")
        out += ["", "| pass | ms | nodes | changed | decisions |", "|---|---|---|---|---|"]
        for r in self.records:
            said = "<br>".join(report_text.pass_decisions(self, r)).replace("|", "/")
            out.append(f"| {r.name} | {r.seconds * 1e3:.2f} | {r.nodes_before} → {r.nodes_after}"
                       f" | {'yes' if r.changed else 'no'} | {said} |")
        if self.kernels:
            out += ["", "| step | kernel | impl | shape | FLOPs | ops |",
                    "|---|---|---|---|---|---|"]
            for k in self.kernels:
                out.append(f"| {k['step']} | `{k['name']}` | {k['impl']} | {tuple(k['shape'])} | "
                           f"{k['flops']:.3g} | {' '.join(k['ops'])} |")
        return "\n".join(out)

    def to_dot(self) -> str:
        """The optimized graph in Graphviz DOT, fused groups drawn as clusters (needs the
        ``viz`` extra: the graphviz package)."""
        if self._dot is None:
            self._dot = display.to_dot(self._graph) if self._graph is not None else ""
        return self._dot

    def _repr_html_(self) -> str:
        return display.report_html(self)


def recomputation(records) -> dict | None:
    """The ``rematerialize`` pass's details where it had to act (the arena was over its
    budget), else None."""
    d = next((r.details for r in records if r.name == "rematerialize"), None)
    return d if d and d["arena_before"] > d["budget_bytes"] else None


def dtype_facts(G) -> dict:
    """``{"inputs": {name: dtype}, "outputs": [dtype], "changes": [...]}`` of a source graph.

    A change is an op whose result dtype differs from what its graph-valued operands
    promote to (constants left out): a strong constant (a NumPy scalar or array) that
    widened it, NumPy's rule for the op (an integer mean is float64, ``abs`` of complex is
    real) or a cast written as such. Comparisons (bool results) are not changes."""
    changes = []
    nodes = G._node
    for n in ir.topo_order(G):
        d = nodes[n]
        if d["op"] in ("input", "const") or d["dtype"] == "bool":
            continue
        preds = ir.operands(G, n)
        # each distinct dtype once (a network's einsum has hundreds of operands)
        values = sorted({nodes[u]["dtype"] for u in preds if nodes[u]["op"] != "const"})
        if not values:
            continue
        promoted = np.result_type(*values).name
        if promoted == d["dtype"]:
            continue
        consts = sorted({nodes[u]["dtype"] for u in preds if nodes[u]["op"] == "const"})
        if d["op"] == "astype":
            why = "a cast written as such"
        elif consts and np.result_type(*values, *consts).name == d["dtype"]:
            why = (f"a {'/'.join(consts)} constant widened it (a NumPy scalar or array; a "
                   f"Python number would keep {promoted})")
        else:
            why = f"NumPy's rule: {d['op']} of {promoted} gives {d['dtype']}"
        changes.append({"node": n, "op": d["op"], "src": d.get("src") or "",
                        "from": values, "to": d["dtype"], "why": why})
    return {"inputs": {G.nodes[n].get("name", str(n)): G.nodes[n]["dtype"]
                       for n in G.graph.get("inputs", ())},
            "outputs": [G.nodes[n]["dtype"] for n in G.graph["outputs"]],
            "changes": changes}


def _json_default(o):
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, (set, frozenset)):
        return sorted(o, key=repr)
    return repr(o)
