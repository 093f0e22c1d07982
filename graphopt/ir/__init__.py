"""The IR: a ``networkx.MultiDiGraph`` with one node per op, its op registry, einsum parsing
and the interpreter that defines what every op means (the reference semantics).

``from graphopt import ir`` gives the graph functions of ``ir.core``: building
(``new_graph``, ``add_node``, ``add_op``), reading (``operands``, ``users``,
``topo_order``, ``nbytes``), copying and rewriting (``copy_graph``, ``replace_uses``,
``drop_derived``), checking (``verify``) and hashing (``structural_hash``, ``node_keys``,
``graph_key``).
"""

from .core import (
    DERIVED_GRAPH_ATTRS,
    NODE_KEYS,
    SOURCE_ATTRS,
    add_node,
    add_op,
    copy_graph,
    drop_derived,
    evaluate_iteratively,
    graph_key,
    nbytes,
    new_graph,
    node_hashes,
    node_keys,
    operands,
    replace_uses,
    structural_hash,
    topo_order,
    users,
    value_key,
    verify,
)

__all__ = ["DERIVED_GRAPH_ATTRS", "NODE_KEYS", "SOURCE_ATTRS", "add_node", "add_op",
           "copy_graph", "drop_derived", "evaluate_iteratively", "graph_key", "nbytes",
           "new_graph", "node_hashes", "node_keys", "operands", "replace_uses",
           "structural_hash", "topo_order", "users", "value_key", "verify"]
