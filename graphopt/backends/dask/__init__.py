"""The dask backend's lowering of an optimized graph to a dask graph: one op
(``lowering``), fused groups per block (``blocks``), where it computes (``cluster``) and
its per-step profile (``profile``). ``backend`` registers the backend."""
