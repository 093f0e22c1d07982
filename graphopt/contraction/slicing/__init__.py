"""Slicing a contraction to bound its memory: which labels (``labels``), the path searched
with its slices in view (``path_search``), and the sliced loop and its workspace (``run``)."""
