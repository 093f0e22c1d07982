"""Contraction-path searches: the anytime search (``anytime``) over the searchers
(``searchers``), within a budget (``budget``), kept in the path cache (``cache``)."""
