"""The optimization report as text a person reads to learn what was decided and why.

``render(report)`` is ``str(report)``: the header (FLOPs, memory, dtypes and the dtype
changes, threads), one row per pass with its decisions and their reasons beneath it, the
contraction groups, the sliced contractions with their cost, and one row per plan step
with the reason its kernel was chosen. Nothing is cut to a column width; long lists of
like decisions show their first ``LIST_LIMIT`` and a count (``report.to_json()`` has all).
"""

from __future__ import annotations

import os
import textwrap

LIST_LIMIT = 8  # decisions of one kind shown per pass; the JSON keeps every one
WRAP = 100  # wrap width for a decision's text (wrapped, never cut)


def human_bytes(n: int) -> str:
    """Bytes for a person: MiB from 64 KiB on, KiB from 1 KiB, else bytes."""
    if n >= 2**16:
        return f"{n / 2**20:.2f} MiB"
    return f"{n / 2**10:.1f} KiB" if n >= 2**10 else f"{n} B"


def where(src: str | None) -> str:
    """A user's ``file:line`` relative to the working directory when it lies below it."""
    if not src:
        return ""
    path, _, line = src.rpartition(":")
    if path and os.path.isabs(path):
        rel = os.path.relpath(path)
        path = rel if not rel.startswith("..") else path
    return f"{path}:{line}" if path else src


def _node(report, n) -> str:
    op, src = report.node_info.get(n, ("", ""))
    at = f" at {where(src)}" if src else ""
    return f"node {n}{f' {op}' if op else ''}{at}"


def _limited(items: list, line) -> list[str]:
    out = [line(x) for x in items[:LIST_LIMIT]]
    if len(items) > LIST_LIMIT:
        out.append(f"... and {len(items) - LIST_LIMIT} more (report.to_json() lists all)")
    return out


# ------------------------------------------------------------------ decisions per pass


def _simplify(rep, d) -> list[str]:
    by_rule: dict[str, list] = {}
    for n, _op, rule in d.get("rewrites", ()):
        by_rule.setdefault(rule, []).append(n)
    out = [f"{rule} on {len(ns)} node(s): {', '.join(map(str, ns[:LIST_LIMIT]))}"
           + (" ..." if len(ns) > LIST_LIMIT else "") for rule, ns in by_rule.items()]
    out += _limited(list(d.get("not_folded", ())),
                    lambda v: f"constant {_node(rep, v[0])} not folded: {v[2]}")
    if d.get("removed"):
        out.append(f"removed {len(d['removed'])} intermediate(s) the rewrites left unused")
    return out


def _cse(rep, d) -> list[str]:
    return _limited(list(d.get("merged", ())), lambda p: f"{_node(rep, p[1])} computes what "
                    f"node {p[0]} does (same op, operands and attributes): merged")


def _dce(rep, d) -> list[str]:
    return _limited(list(d.get("removed", ())),
                    lambda p: f"node {p[0]} {p[1]} removed: no output depends on it")


def _contraction(rep, d) -> list[str]:
    out = []
    for g in d.get("groups", ()):
        eq = f" {g['equation']!r}" if g.get("equation") else ""
        out.append(f"{_node(rep, g['root'])}{eq}, {g['operands']} operand(s): "
                   f"{g['decision']} ({g.get('optimizer', '')}): {g.get('reason', '')}")
    out = _limited(out, str)
    out += [f"{_node(rep, s['root'])}: no path fits memory_limit whole; left to slicing"
            for s in d.get("needs_slicing", ())]
    return out


def _slicing(rep, d) -> list[str]:
    if d.get("memory_limit") is None:
        return []
    out = [f"memory_limit {human_bytes(d['memory_limit'])}: {d.get('checked', 0)} multi-operand "
           f"einsum(s) checked, {len(d.get('sliced', ()))} sliced (rows below)"]
    out += _limited(list(d.get("repathed", ())), lambda r: (
        f"{_node(rep, r['node'])} fits without slicing on another path (largest "
        f"intermediate {human_bytes(r['largest_intermediate_bytes'])})"))
    return out


def _fusion(rep, d) -> list[str]:
    nodes = d.get("fused_nodes", [])
    out = [f"fused {' '.join(ops)} ({pat}) into one kernel, node {f}"
           for ops, pat, f in zip(d.get("groups", ()), d.get("patterns", ()), nodes)]
    out = _limited(out, str)
    out += _limited(list(d.get("rejected", ())), lambda r: (
        f"not fused: {_node(rep, r['node'])} into the {r.get('root_op', '')} group of node "
        f"{r.get('group_root', '?')}: {r['reason']}"))
    return out


def _tiling(rep, d) -> list[str]:
    out = _limited(list(d.get("regions", ())), lambda r: (
        f"tiled {' '.join(r['ops'])} into node {r['node']}: {r['blocks']} block(s) of "
        f"{r['tile']} along the leading dims, {human_bytes(r['intermediate_bytes'])} of "
        "intermediates per block"))
    out += _limited(list(d.get("rejected", ())), lambda r: (
        f"not tiled: {' '.join(r['ops'])} from {_node(rep, r['node'])}: {r['reason']}"))
    return out


def _schedule(rep, d) -> list[str]:
    cands = ", ".join(f"{k} {human_bytes(v)}" for k, v in d.get("candidates", {}).items())
    return [f"order {d.get('strategy')}: lowest peak of live values, {human_bytes(d['peak_after'])}"
            + (f" (candidates: {cands})" if cands else "")] if "peak_after" in d else []


def _memory(rep, d) -> list[str]:
    if "arena_values" not in d:
        return []
    inplace = d.get("inplace", [])
    if not d["arena_values"]:
        return ["no intermediates: every step writes a plan output"]
    out = [f"{d['arena_values']} intermediate(s) share {d['buffers']} arena buffer(s): "
           f"{human_bytes(d['planned_bytes'])} against {human_bytes(d['naive_bytes'])} unshared"]
    out += _limited(inplace, lambda p: f"{_node(rep, p[0])} writes over its operand {p[1]}")
    return out


def _rematerialize(rep, d) -> list[str]:
    if "budget_bytes" not in d:
        return []
    before, budget = d["arena_before"], d["budget_bytes"]
    if before <= budget:
        return [f"arena {human_bytes(before)} fits the budget {human_bytes(budget)} "
                "(memory_limit less the largest step workspace): nothing recomputed"]
    n = d.get("recomputed_count", 0)
    out = [f"arena {human_bytes(before)} over the budget {human_bytes(budget)}: recomputing "
           f"{n} value(s) ({human_bytes(d.get('recomputed_bytes', 0))}) rather than holding "
           f"them, {d['extra_flops']:.4g} more FLOPs, brings it to "
           f"{human_bytes(d['arena_after'])}"
           + ("" if d["met"] else "; still over the budget, so compile refuses the plan")]
    if d.get("solver"):
        out.append(f"found by the {d['solver']} solver; no order holds less than "
                   f"{human_bytes(d['floor_bytes'])} (what one step reads and writes at once)"
                   + (f": the arena is {d['floor_gap']}x that" if d.get("floor_gap") else ""))
    if d["moved"]:
        out.append(f"computed later, where first needed (no recomputation): node(s) "
                   f"{', '.join(map(str, d['moved'][:LIST_LIMIT]))}"
                   + (" ..." if len(d["moved"]) > LIST_LIMIT else ""))
    out += _limited(list(d["recomputed"]), lambda v: (
        f"{_node(rep, v['node'])} {tuple(v['shape'])} {human_bytes(v['bytes'])}: recomputed as "
        f"node {v['copy']} ({v['flops']:.4g} FLOPs) for its later users"))
    return out


def _generic(rep, d) -> list[str]:
    """A pass this module does not know (a user's): every detail, in full."""
    return [f"{k}: {v}" for k, v in d.items()]


DESCRIBE = {"simplify": _simplify, "cse": _cse, "dce": _dce, "contraction": _contraction,
            "slicing": _slicing, "fusion": _fusion, "tiling": _tiling,
            "schedule": _schedule, "rematerialize": _rematerialize, "memory": _memory}


def pass_decisions(report, record) -> list[str]:
    """What ``record``'s pass decided, one sentence per decision, with its reason."""
    return DESCRIBE.get(record.name, _generic)(report, record.details)


# ------------------------------------------------------------------------------ sections


def dtype_lines(report) -> list[str]:
    """Input and output dtypes, then each place a value's dtype changed and why."""
    d = report.dtypes
    if not d:
        return []
    ins = ", ".join(f"{k} {v}" for k, v in d["inputs"].items()) or "none"
    lines = [f"  dtypes: inputs {ins}; outputs {', '.join(d['outputs'])}"]
    changes = d["changes"]
    if not changes:
        lines.append("  dtype changes: none (every op keeps its operands' dtype)")
        return lines
    lines.append(f"  dtype changes ({len(changes)}):")
    lines += ["    " + c for c in _limited(changes, lambda c: (
        f"{' x '.join(c['from'])} -> {c['to']}  {c['op']} (node {c['node']}"
        f"{', ' + where(c['src']) if c['src'] else ''}): {c['why']}"))]
    return lines


def _steps(report) -> list[str]:
    ks = report.kernels
    if not ks:
        return []
    cols = [("step", lambda k: str(k["step"]), ">"), ("kernel", lambda k: k["name"], "<"),
            ("impl", lambda k: k["impl"], "<"), ("shape", lambda k: str(tuple(k["shape"])), "<"),
            ("dtype", lambda k: k["dtype"], "<"), ("FLOPs", lambda k: f"{k['flops']:.3g}", ">"),
            ("threads", lambda k: "budget" if k.get("uses_threads") else "1", "<"),
            ("ops", lambda k: " ".join(k["ops"]), "<")]
    rows = [[f(k) for _, f, _ in cols] for k in ks]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, (h, _, _) in enumerate(cols)]
    lines = ["", "  plan steps (why: the kernel's choice)",
             "  " + "  ".join(f"{h:{a}{w}}" for (h, _, a), w in zip(cols, widths)).rstrip()]
    for k, r in zip(ks, rows):
        lines.append("  " + "  ".join(f"{v:{a}{w}}" for v, (_, _, a), w
                                      in zip(r, cols, widths)).rstrip())
        why = k.get("reason")
        if why:
            lines += textwrap.wrap(f"why: {why}", WRAP, initial_indent=" " * 8,
                                   subsequent_indent=" " * 10)
    return lines


def gradient_lines(facts: dict | None) -> list[str]:
    """A gradient graph's costs as built (before passes): forward and backward FLOPs, the
    forward values kept for the backward pass, the largest named, and what the
    ``rematerialize`` pass recomputed instead of holding (``facts["recomputation"]``)."""
    if not facts:
        return []
    fwd, bwd = facts["forward_flops"], facts["backward_flops"]
    ratio = f" ({bwd / fwd:.2f}x the forward)" if fwd else ""
    r = facts.get("recomputation")
    kept = "all kept (no recomputation)" if not r else (
        f"under memory_limit, {r['recomputed_count']} value(s) recomputed rather than held "
        f"({r['extra_flops']:.4g} more FLOPs): arena {human_bytes(r['arena_before'])} "
        f"without recomputation, {human_bytes(r['arena_after'])} with")
    lines = [f"  gradient of {', '.join(map(str, facts['wrt']))}: forward {fwd:.4g} FLOPs, "
             f"backward {bwd:.4g}{ratio}, as built",
             f"    saved for the backward pass: {facts['saved_values']} forward value(s), "
             f"{human_bytes(facts['saved_bytes'])}; {kept}"]
    for v in facts["largest_saved"]:
        lines.append(f"      {v['op']} {tuple(v['shape'])} {human_bytes(v['bytes'])} "
                     f"at {v['src'] or '<unknown>'}")
    return lines


def render(report) -> str:
    """The whole text report (``str(report)``)."""
    lines = report.header_lines()
    lines += ["", "  passes (ms, nodes before -> after); beneath each, what it decided and why",
              f"  {'pass':<14}{'ms':>8}  {'nodes':>11}  changed"]
    for r in report.records:
        lines.append(f"  {r.name:<14}{r.seconds * 1e3:>8.2f}  {r.nodes_before:>5} ->"
                     f"{r.nodes_after:>4}  {'yes' if r.changed else 'no'}")
        for text in pass_decisions(report, r):
            lines += textwrap.wrap(text, WRAP, initial_indent=" " * 6,
                                   subsequent_indent=" " * 8)
    lines += report.contraction_lines() + report.slicing_lines() + _steps(report)
    if report.plan_details:
        lines += ["", "  plan: " + ", ".join(f"{k}={v}" for k, v in report.plan_details.items())]
    return "\n".join(lines)
