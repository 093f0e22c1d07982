"""Write docs/API.md, graphopt's API reference, from the package's own docstrings.

    python docs/build_api.py            # rewrite docs/API.md
    python docs/build_api.py --check    # exit 1 if docs/API.md is not what it would write

Every name in ``graphopt.__all__`` gets its signature and docstring, in the sections below;
the classes users hold (Graph, Tensor, Plan, OptimizationReport, Profile) also get their
public methods and properties. ``tests/test_docs.py`` fails when the file is stale or a
public name is in no section, so the reference cannot drift from the code.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import graphopt as go  # noqa: E402
from graphopt.observe.profiler import Profile  # noqa: E402

SECTIONS = [
    ("Building graphs", ["Graph", "Tensor"]),
    ("Contractions", ["einsum", "matmul", "contract", "contract_expression"]),
    ("Elementwise ops", ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "neg", "abs",
                         "exp", "log", "sqrt", "square", "reciprocal", "tanh", "sigmoid",
                         "relu", "gelu", "sin", "cos", "conj", "real", "imag", "where",
                         "equal", "not_equal", "less", "less_equal", "greater",
                         "greater_equal", "astype", "clip"]),
    ("Reductions and normalizations", ["sum", "max", "min", "mean", "var", "std", "softmax",
                                       "logsumexp"]),
    ("Layout", ["reshape", "transpose", "broadcast_to"]),
    ("Compiling and running", ["compile", "Plan", "OptimizationReport", "thread_budget",
                               "clear_caches", "debug_nans"]),
    ("Tracing Python functions", ["jit", "disable_jit"]),
    ("Gradients", ["grad", "value_and_grad", "vjp"]),
    ("Saving graphs", ["save", "load"]),
    ("Progress", ["show_progress"]),
    ("Errors", ["GraphError", "ShapeError", "DTypeError", "EinsumError", "InputError"]),
]
EXTRA_CLASSES = [("Profiling (`plan.profile(...)`)", Profile)]


def _signature(obj) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"


def _doc(obj) -> str:
    return inspect.cleandoc(obj.__doc__) if obj.__doc__ else "(no docstring)"


def _members(cls) -> list[str]:
    out, seen = [], {}
    for klass in reversed(cls.__mro__[:-1]):   # inherited members too, the class's own last
        seen.update(vars(klass))
    for name, member in sorted(seen.items()):
        if name.startswith("_") or not (inspect.isfunction(member) or
                                        isinstance(member, (property, classmethod))):
            continue
        fn = member.fget if isinstance(member, property) else getattr(member, "__func__",
                                                                      member)
        head = f"`{cls.__name__}.{name}`" if isinstance(member, property) else \
            f"`{cls.__name__}.{name}{_signature(fn)}`"
        doc = inspect.cleandoc(fn.__doc__) if fn.__doc__ else ""
        out.append(f"- {head}" + (": " + doc.replace("\n", "\n  ") if doc else ""))
    return out


def _entry(name: str, obj) -> list[str]:
    if inspect.isclass(obj):
        lines = [f"### `{name}`", "", _doc(obj), ""]
        if not issubclass(obj, BaseException):
            lines += _members(obj) + [""]
        return lines
    return [f"### `{name}{_signature(obj)}`", "", _doc(obj), ""]


def render() -> str:
    """The whole reference as Markdown."""
    lines = ["# graphopt API reference", "",
             "Generated from the docstrings by `python docs/build_api.py`; do not edit by hand.",
             f"Every public name is `graphopt.<name>` (`import graphopt as go`), version "
             f"{go.__version__}. How a graph goes through "
             "the compiler is [HOW_IT_WORKS.md](HOW_IT_WORKS.md).", ""]
    lines += ["## Contents", ""] + [f"- {title}: " + ", ".join(f"`{n}`" for n in names)
                                    for title, names in SECTIONS] + [""]
    for title, names in SECTIONS:
        lines += [f"## {title}", ""]
        for name in names:
            lines += _entry(name, getattr(go, name))
    for title, cls in EXTRA_CLASSES:
        lines += [f"## {title}", ""] + _entry(cls.__name__, cls)
    return "\n".join(lines).rstrip() + "\n"


def listed_names() -> set[str]:
    """Every name a section lists."""
    return {n for _, names in SECTIONS for n in names}


def main(argv) -> int:
    """Write (or with --check, compare) docs/API.md."""
    text, path = render(), HERE / "API.md"
    if "--check" in argv:
        same = path.is_file() and path.read_text(encoding="utf-8") == text
        print("docs/API.md is current" if same else "docs/API.md is stale: run "
              "python docs/build_api.py")
        return 0 if same else 1
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
