"""Guard rails of the package's shape (docs/ARCHITECTURE.md): imports run one way (no
cycles, counting imports inside functions), backends never import a pass, core modules
never import a backend, no module grows past the line budget, and nothing outside
``plan.py`` reaches into a plan's private fields (subclasses and the profiler use the
public step loop, ``Plan.run_steps``)."""

from __future__ import annotations

import ast
import pathlib

import networkx as nx

PKG = pathlib.Path(__file__).resolve().parent.parent / "graphopt"
LINE_BUDGET = 500
# the entry points that choose a backend by name; every other core module is backend-free
BACKEND_USERS = {"graphopt.compiler.driver", "graphopt.cli", "graphopt"}


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(PKG.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: pathlib.Path, known: set) -> set:
    """graphopt modules ``name`` imports anywhere in its file (module level or lazily)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def _import_graph() -> nx.DiGraph:
    mods = _modules()
    G = nx.DiGraph()
    G.add_nodes_from(mods)
    for name, path in mods.items():
        G.add_edges_from((name, t) for t in _imports(name, path, set(mods)))
    return G


def test_no_import_cycles():
    G = _import_graph()
    # a package's __init__ importing its own submodules is how a package exports them
    G.remove_edges_from([(a, b) for a, b in list(G.edges) if b.startswith(a + ".")])
    cycles = list(nx.simple_cycles(G))
    assert not cycles, f"import cycles: {cycles[:5]}"


def test_backends_never_import_a_pass():
    G = _import_graph()
    bad = [(a, b) for a, b in G.edges
           if a.startswith("graphopt.backends") and b.startswith("graphopt.passes")]
    assert not bad, bad


def test_core_modules_never_import_a_backend():
    G = _import_graph()
    bad = [(a, b) for a, b in G.edges
           if not a.startswith(("graphopt.backends", "graphopt.testing"))
           and a not in BACKEND_USERS and b.startswith("graphopt.backends")]
    assert not bad, bad


def test_every_module_is_within_the_line_budget():
    over = {name: n for name, path in _modules().items()
            if (n := len(path.read_text().splitlines())) > LINE_BUDGET}
    assert not over, f"modules over {LINE_BUDGET} lines: {over}"


def _self_fields(tree) -> dict[str, set[str]]:
    """Per class of ``tree``, the private attributes its methods set on ``self``."""
    out = {}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        out[cls.name] = {t.attr for node in ast.walk(cls)
                         if isinstance(node, (ast.Assign, ast.AnnAssign))
                         for t in getattr(node, "targets", [getattr(node, "target", None)])
                         if isinstance(t, ast.Attribute)
                         and isinstance(t.value, ast.Name) and t.value.id == "self"
                         and t.attr.startswith("_") and not t.attr.startswith("__")}
    return out


def test_nothing_outside_plan_py_reads_a_plans_private_fields():
    trees = {name: ast.parse(path.read_text()) for name, path in _modules().items()}
    fields = _self_fields(trees["graphopt.runtime.plan"])["Plan"]
    assert {"_program", "_input_slots", "_output_allocs", "_init_vals"} <= fields
    # a name another class sets on itself (a pool's ``_lock``) is that class's own
    others = set().union(*(f for name, tree in trees.items()
                           for cls, f in _self_fields(tree).items()
                           if (name, cls) != ("graphopt.runtime.plan", "Plan")))
    only_plans = fields - others
    readers = {name: attrs for name, tree in trees.items() if name != "graphopt.runtime.plan"
               if (attrs := {n.attr for n in ast.walk(tree)
                             if isinstance(n, ast.Attribute) and n.attr in only_plans})}
    assert not readers, readers


def test_the_import_scan_sees_lazy_and_relative_imports():
    G = _import_graph()
    assert G.has_edge("graphopt.backends.numba.kernels.expressions",
                      "graphopt.backends.numba.numerics")        # inside a function
    assert G.has_edge("graphopt.backends.cupy.backend", "graphopt.backends.cupy.codegen")
