"""Hypothesis strategies: random graphs, einsum equations, and inputs (docs/trust.md).

``graphs()`` builds valid graphs through the public builder. They are DAGs by construction
(every operand is a tensor built earlier) and mix einsum (repeated labels, ellipsis,
implicit output, many operands, chains of single-consumer contractions), elementwise ops
with broadcasting and Python scalars, reductions, layout ops, casts and constants, with
shared subexpressions (also einsums with renamed labels and swapped operands) and dead
branches.

Values stay tame (see ``generators``): bounded, and no discontinuous op sees a value that
a legitimate reordering of float arithmetic could change.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ..frontend.graph import Graph
from .einsums import einsum_equations
from .generators import GENERATORS, INPUT_BOUND, OP_KINDS, Builder

__all__ = ["graphs", "einsum_equations", "inputs_for", "DEFAULT_DTYPES", "OP_KINDS"]

DEFAULT_DTYPES = ("float64", "float32", "complex128", "int64")


@st.composite
def graphs(draw, max_nodes: int = 16, dtypes=DEFAULT_DTYPES, ops=OP_KINDS,
           max_inputs: int = 3, max_rank: int = 3, max_dim: int = 4, unicode: bool = True,
           name: str = "random") -> Graph:
    """A random valid ``go.Graph`` built through the public builder.

    Args:
        max_nodes: stop adding ops once the IR has this many nodes (a composite op may
            overshoot by a few).
        dtypes: dtypes drawn for inputs and constants (ops then promote as NumPy does).
        ops: op kinds to use, a subset of ``OP_KINDS``.
        max_inputs: 1..max_inputs inputs, named ``x0, x1, ...``.
        max_rank, max_dim: input shapes have rank <= max_rank and dims in 1..max_dim.
        unicode: also use non-ASCII einsum labels (any Unicode letter is a label).
    """
    unknown = set(ops) - set(OP_KINDS)
    if unknown:
        raise ValueError(f"unknown op kinds {sorted(unknown)}; valid: {OP_KINDS}")
    dtypes = tuple(dtypes)
    g = Graph(name)
    b = Builder(draw, g, dtypes, max_dim, unicode)
    for i in range(draw(st.integers(1, max_inputs))):
        shape = b.shape(max_rank)
        b.add(g.input(f"x{i}", shape, draw(st.sampled_from(dtypes))), INPUT_BOUND, True)
    kinds = tuple(k for k in OP_KINDS if k in ops)
    if not kinds:
        raise ValueError("graphs() needs at least one op kind")
    n_ops = draw(st.integers(1, max(1, max_nodes)))
    built = tries = 0
    # Stop at max_nodes, but build at least one op unless none of `ops` fits the inputs.
    while (built < n_ops and g._G.number_of_nodes() < max_nodes or built == 0) and tries < 100:
        tries += 1
        if GENERATORS[draw(st.sampled_from(kinds))](b):
            built += 1
    last = b.items[-1]
    outs = [last.t] + [b.pick().t for _ in range(draw(st.integers(0, 2)))]
    style = draw(st.sampled_from(("tensor", "tuple", "list", "dict")))
    if style == "tensor" and len(outs) == 1:
        g.output(outs[0])
    elif style == "dict":
        g.output({f"y{i}": t for i, t in enumerate(outs)})
    else:
        g.output(tuple(outs) if style == "tuple" else list(outs))
    return g


def _elements(dtype: str):
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return st.booleans()
    if dt.kind in "iu":
        return st.integers(-3, 3)
    if dt.kind == "c":
        return st.complex_numbers(max_magnitude=2, allow_nan=False, allow_infinity=False,
                                  allow_subnormal=False, width=dt.itemsize * 8)
    return st.floats(-2, 2, allow_subnormal=False, width=dt.itemsize * 8)


def inputs_for(graph) -> st.SearchStrategy:
    """A strategy of ``{input name: array}`` for ``graph`` (a ``go.Graph`` or IR) with
    bounded values: floats in [-2, 2], complex within 2, ints in [-3, 3]."""
    G = graph._G if isinstance(graph, Graph) else graph
    names = [G.nodes[i]["name"] for i in G.graph["inputs"]]
    arrays = [hnp.arrays(np.dtype(G.nodes[i]["dtype"]), tuple(G.nodes[i]["shape"]),
                         elements=_elements(G.nodes[i]["dtype"])) for i in G.graph["inputs"]]
    return st.tuples(*arrays).map(lambda values: dict(zip(names, values)))  # in input order
