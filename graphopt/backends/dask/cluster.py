"""Where a dask plan computes: the client (given, by address, the default one, or dask's
local scheduler), the dashboard link printed once per client, and a progress bar for big
graphs."""

from __future__ import annotations

import sys
import threading

PROGRESS_MIN_TASKS = 5000
_announced: set = set()
_announce_lock = threading.Lock()
_clients: dict = {}


def collection_graph(outs: list) -> dict:
    """The task graph the scheduler receives for ``outs`` (after dask's optimizations)."""
    import dask.base

    try:
        return dict(dask.base.collections_to_expr(outs).__dask_graph__())
    except (AttributeError, TypeError):  # older dask
        return dict(dask.base.collections_to_dsk(outs))


def get_client(client):
    """The client to compute on: ``client`` itself, a client for an address, the current
    default client, or None (dask's local scheduler)."""
    if client is not None and not isinstance(client, str):
        return client
    import distributed

    if isinstance(client, str):
        if client not in _clients:
            _clients[client] = distributed.Client(client)
        return _clients[client]
    try:
        return distributed.default_client()
    except ValueError:
        return None


def _announce(client) -> None:
    """Print the cluster's dashboard link, once per client."""
    with _announce_lock:
        if id(client) in _announced:
            return
        _announced.add(id(client))
    services = (client.scheduler_info() or {}).get("services", {})
    if "dashboard" in services:
        print(f"graphopt[dask]: dashboard {client.dashboard_link}", file=sys.stderr)


def compute(outs: list, client=None, progress="auto") -> list:
    """Compute dask arrays ``outs`` on ``client`` (see ``get_client``), with a progress bar
    where asked (``progress="auto"``: graphs of ``PROGRESS_MIN_TASKS`` tasks or more)."""
    import dask

    client = get_client(client)
    if client is None:
        return list(dask.compute(*outs))
    _announce(client)
    futures = client.compute(outs)
    if progress is True or (progress == "auto" and
                            sum(len(o.__dask_graph__()) for o in outs) >= PROGRESS_MIN_TASKS):
        from distributed import progress as show_progress

        show_progress(futures)
    return client.gather(futures)
