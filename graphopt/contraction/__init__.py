"""The contraction library: how an einsum of many operands is ordered, sliced and run.

- ``value``: the ``Contraction`` every einsum node holds (its path, step forms, slices);
- ``rates``: each backend's rate table, from which a step's form follows;
- ``paths``: path arithmetic (play a path, its FLOPs, largest intermediate);
- ``groups``: which einsums of a graph form one contraction;
- ``search/``: path searches (which one runs, the anytime search, its budget, the cache);
- ``slicing/``: which labels to slice, the path searched with its slices, the sliced loop;
- ``program/``: each step's form (GEMM or ``np.einsum``), the arena, running a path.
"""
