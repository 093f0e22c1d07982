"""Pass instruments (TVM's ``PassInstrument``): code that watches a pipeline without being a
pass. The manager calls ``after_pass`` once for every pass it ran, with the graph before
and after; an instrument raises ``GraphError`` to stop the pipeline. Verification stays in
the manager: it is the IR's contract, not an option.
"""

from __future__ import annotations

import os

import networkx as nx

from ..ir.equivalence import check_same_semantics


class PassInstrument:
    """Base class: override ``after_pass``."""

    def after_pass(self, index: int, name: str, before: nx.MultiDiGraph,
                   after: nx.MultiDiGraph, ctx) -> None:
        """Called after pass number ``index`` (``name``) turned ``before`` into ``after``."""


class CheckSemantics(PassInstrument):
    """Runs both graphs with the interpreter on random inputs and raises ``GraphError``
    naming the pass whose output differs (``GRAPHOPT_DEBUG=1``, ``debug=True``)."""

    def after_pass(self, index, name, before, after, ctx) -> None:
        check_same_semantics(before, after, name)


class DumpIR(PassInstrument):
    """Writes the IR after each pass as ``<dir>/NN_<pass>.json`` (``GRAPHOPT_DUMP=dir``)."""

    def __init__(self, directory: str):
        self.directory = directory

    def after_pass(self, index, name, before, after, ctx) -> None:
        from ..frontend.serialize import graph_to_json

        os.makedirs(self.directory, exist_ok=True)
        with open(os.path.join(self.directory, f"{index:02d}_{name}.json"), "w") as f:
            f.write(graph_to_json(after))
