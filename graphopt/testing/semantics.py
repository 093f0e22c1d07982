"""Checking that a pass keeps a graph's meaning, with the interpreter as the oracle.

``check_same_semantics`` (from ``graphopt.ir.equivalence``) compares two IRs on random inputs
(the pass manager's ``CheckSemantics`` instrument calls it after every pass in debug mode);
``assert_pass_preserves_semantics`` property-tests a pass
on hypothesis-generated graphs and reports a shrunk counterexample as readable text.
"""

from __future__ import annotations

import numpy as np

from .. import ir
from ..errors import GraphError
from ..ir.equivalence import (  # noqa: F401
    check_same_semantics,
    compare_outputs,
    graph_tolerance,
    io_signature,
    random_inputs,
    tolerance,
)
from ..ir.interpreter import run_graph
from ..passes.manager import PassContext, PassResult

# ------------------------------------------------------------------------ readable graphs


def _fmt_attr(v) -> str:
    if isinstance(v, np.ndarray) or isinstance(v, np.generic):
        return np.array2string(np.asarray(v), precision=4, threshold=12, separator=",",
                               max_line_width=1000)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}={_fmt_attr(x)}" for k, x in v.items()) + "}"
    if hasattr(v, "graph") and hasattr(v, "nodes"):
        return f"<subgraph {v.number_of_nodes()} nodes>"
    return repr(v)


def graph_text(G, indent: str = "") -> str:
    """A node listing of an IR, one line per node in topological order, e.g.
    ``%4 = einsum{equation='ab,bc->ac'}(%1, %2) : (2, 4) float32``."""
    lines = [f"{indent}graph {G.graph.get('name', 'graph')!r}:"]
    for n in ir.topo_order(G):
        d = G.nodes[n]
        args = ", ".join(f"%{u}" for u in ir.operands(G, n))
        if d["op"] == "input":
            head = f"input {d.get('name')!r}"
        else:
            hidden = ir.SOURCE_ATTRS | {"graph"}
            attrs = {k: v for k, v in d["attrs"].items() if k not in hidden}
            head = d["op"] + (_fmt_attr(attrs) if attrs else "") + f"({args})"
        lines.append(f"{indent}  %{n} = {head} : {tuple(d['shape'])} {d['dtype']}")
        if d["op"] == "fused":
            lines.append(graph_text(d["attrs"]["graph"], indent + "      "))
    outs = ", ".join(f"%{o}" for o in G.graph["outputs"])
    lines.append(f"{indent}  outputs: ({outs}) as {G.graph.get('output_structure')}")
    return "\n".join(lines)


# ------------------------------------------------------------------------ pass property


def _as_result_graph(result):
    if isinstance(result, PassResult):
        return result.graph
    if isinstance(result, tuple) and len(result) == 2:
        return result[0]
    return result


def _snapshot(G) -> tuple:
    return (ir.structural_hash(G), G.number_of_edges(),
            tuple(sorted((n, d.get("name"), d.get("src")) for n, d in G.nodes(data=True))))


def _pass_name(pass_) -> str:
    return getattr(pass_, "pass_name", getattr(pass_, "__name__", repr(pass_)))


def refuses_limit(e: Exception, ctx) -> bool:
    """Whether ``e`` is a pass refusing a ``memory_limit`` it cannot meet (a ``GraphError``
    naming the limit, as the slicing pass raises): a documented answer, not a finding; it
    propagates from ``check_pass_once``, and the property test rejects the example."""
    limit = getattr(ctx, "memory_limit", None)
    return isinstance(e, GraphError) and limit is not None and \
        f"memory_limit={limit}" in str(e)


def _run_and_check(pass_, G, ctx, raising: bool = False) -> tuple[object, str | None]:
    """``(the pass's result, None)`` where ``pass_`` returned a graph that verifies and keeps
    ``G``'s signature, leaving ``G`` unchanged; else ``(None, what went wrong)``. What the
    pass raises is a finding too, unless ``raising`` or it refuses the context's
    ``memory_limit`` (``refuses_limit``): then it propagates."""
    name = _pass_name(pass_)
    before = _snapshot(G)
    try:
        result = pass_(G, ctx if ctx is not None else PassContext())
    except Exception as e:  # any crash of the pass is a finding
        if raising or refuses_limit(e, ctx):
            raise
        return None, f"pass {name!r} raised {type(e).__name__}: {e}"
    H = _as_result_graph(result)
    if _snapshot(G) != before:
        return None, f"pass {name!r} mutated its input graph"
    if not (hasattr(H, "nodes") and hasattr(H, "graph")):
        return None, f"pass {name!r} returned {type(H).__name__}, not a graph"
    try:
        ir.verify(H, pass_name=name)
    except GraphError as e:
        return None, (f"pass {name!r} produced an invalid IR: {e}\nafter the pass:\n"
                      f"{graph_text(H)}")
    sb, sa = io_signature(G), io_signature(H)
    if sb != sa:
        return None, f"pass {name!r} changed the graph's signature: {sb} -> {sa}"
    return result, None


def checked_run(pass_, graph, ctx=None, semantics: bool = True):
    """Run ``pass_`` once on ``graph`` (a ``go.Graph`` or an IR) with every check a pass
    owes: it returns a graph that verifies and keeps the signature, leaves its input
    unchanged and (``semantics``) computes what its input does on random inputs
    (``check_same_semantics``). Returns ``(the input IR, the pass's result)``; raises
    ``AssertionError`` saying what went wrong (what the pass itself raises propagates). The
    one harness a pass's unit tests build on (``assert_pass_preserves_semantics`` is its
    property-test form)."""
    G = graph.to_ir() if hasattr(graph, "to_ir") else graph
    result, problem = _run_and_check(pass_, G, ctx, raising=True)
    if problem:
        raise AssertionError(problem)
    if semantics:
        check_same_semantics(G, _as_result_graph(result), _pass_name(pass_))
    return G, result


def check_pass_once(pass_, G, inputs: dict, ctx=None) -> str | None:
    """Run ``pass_`` on ``G`` once and check it; None if it behaved, else what went wrong.

    Checks: it returns a graph, leaves ``G`` unchanged, its output verifies, keeps the
    signature, and gives the interpreter's results on ``inputs``."""
    result, problem = _run_and_check(pass_, G, ctx)
    if problem:
        return problem
    H = _as_result_graph(result)
    arrays = [inputs[G.nodes[i]["name"]] for i in G.graph["inputs"]]
    expected = run_graph(G, arrays)
    try:
        actual = run_graph(H, arrays)
    except Exception as e:
        return f"the interpreter failed on the pass's output: {type(e).__name__}: {e}"
    rtol, atol = graph_tolerance(G, H)
    for k, (e, a) in enumerate(zip(expected, actual)):
        diff = compare_outputs(e, a, rtol, atol)
        if diff:
            return (f"pass {_pass_name(pass_)!r} changed output {k}: {diff}\n"
                    f"expected {e!r}\ngot {a!r}\n"
                    f"after the pass:\n{graph_text(H)}")
    return None


def assert_pass_preserves_semantics(pass_, max_examples: int = 50, graphs=None, *, ctx=None,
                                    **graph_kwargs) -> None:
    """Property-test ``pass_`` (docs/ARCHITECTURE.md, Passes) on hypothesis-generated graphs.

    For each graph from ``graphs`` (default ``strategies.graphs(**graph_kwargs)``) and
    inputs from ``inputs_for``: the pass must not mutate its input, its output must verify
    and keep the signature, and the interpreter must give the same results. An example the
    pass refuses for ``ctx.memory_limit`` (``refuses_limit``) is rejected. Other settings
    (derandomize, database) come from the active hypothesis profile.

    Raises:
        AssertionError: with hypothesis' shrunk counterexample: the graph as a node
            listing, the inputs, and what differed.
    """
    from hypothesis import HealthCheck, Phase, assume, given, settings
    from hypothesis import strategies as st

    from ..frontend.graph import Graph
    from . import strategies

    strategy = graphs if graphs is not None else strategies.graphs(**graph_kwargs)

    # No explain phase: it traces every line of the pass and multiplies the time to report.
    phases = tuple(p for p in settings.default.phases if p is not Phase.explain)

    @settings(max_examples=max_examples, deadline=None, report_multiple_bugs=False, phases=phases,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                     HealthCheck.data_too_large,
                                     HealthCheck.large_base_example])
    @given(strategy, st.data())
    def prop(g, data):
        G = g.to_ir() if isinstance(g, Graph) else g
        inputs = data.draw(strategies.inputs_for(G), label="inputs")
        try:
            problem = check_pass_once(pass_, G, inputs, ctx)
        except GraphError as e:
            assume(not refuses_limit(e, ctx))   # (the pass refused the limit: rejected)
            raise
        if problem:
            shown = {k: np.array2string(v, precision=4, threshold=20) for k, v in inputs.items()}
            raise AssertionError(f"{problem}\n\ncounterexample (shrunk by hypothesis):\n"
                                 f"{graph_text(G)}\ninputs: {shown}")

    prop()
