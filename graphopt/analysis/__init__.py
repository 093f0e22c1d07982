"""Facts that passes, lowering and the report read off an IR: FLOPs and bytes (``cost``),
the execution order and liveness (``liveness``), the fused-group contract (``fused``) and a
gradient graph's accounting (``gradients``)."""
