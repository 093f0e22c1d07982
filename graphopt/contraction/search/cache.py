"""The contraction-path cache: paths kept by a network's structure and sizes.

In this process (``_MEMO``, at most ``MEMO_ENTRIES``) and on disk beside the kernels
(``disk_cache``, ``path_<digest>.json``, at most ``DISK_ENTRIES`` files, oldest dropped
first), so a second compile or a second process does no search. The key is the network's
equation with labels renamed in order of first use, and each label's size
(``network_key``); an entry records the budget it was searched with, and a corrupt entry,
or one whose path does not fit the network or costs other than it says, is dropped.
``path_search.find_path`` decides when an entry is good enough and writes new ones.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Sequence

from ...errors import GraphError
from ...support import disk_cache
from ..paths import Steps, play

CACHE_FORMAT = 6           # part of every key: a change to the search makes new entries
MEMO_ENTRIES = 256
DISK_ENTRIES = 4096        # path files kept, give or take those written since a prune
# One write in this many prunes the directory (listing it, and where it holds more than
# DISK_ENTRIES, the time of each entry: milliseconds on a full cache), the writes whose key
# falls in that share of the key space: any process's, however few it writes
PRUNE_EVERY = 64

_MEMO: OrderedDict = OrderedDict()
_lock = threading.Lock()


def network_key(terms: Sequence[str], output: str, sizes: dict) -> str:
    """The cache key of a network: its equation with labels renamed in order of first use,
    and each label's size."""
    order = dict.fromkeys("".join(terms) + output)
    # label k (in order of first use) written as the character 256 + k: one ``translate``
    renamed = dict(zip(map(ord, order), map(chr, range(256, 256 + len(order)))))
    text = "|".join([str(CACHE_FORMAT), (",".join(terms) + "->" + output).translate(renamed),
                     ",".join(map(str, map(int, map(sizes.__getitem__, order))))])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _valid_entry(doc) -> bool:
    return (isinstance(doc, dict) and isinstance(doc.get("path"), list)
            and isinstance(doc.get("budget_seconds"), (int, float))
            and isinstance(doc.get("searcher"), str)
            and all(isinstance(p, list) and all(isinstance(i, int) for i in p)
                    for p in doc["path"]))


def cached(key: str, terms, output, sizes):
    """``(steps, entry)`` kept for ``key`` (this process first, then disk), or None."""
    with _lock:
        hit = _MEMO.get(key)
        if hit is not None:
            _MEMO.move_to_end(key)
            return hit
    doc = disk_cache.read_json(f"path_{key}.json", _valid_entry)
    if doc is None:
        return None
    try:
        steps = play(terms, output, sizes, doc["path"])
    except GraphError:
        disk_cache.remove(f"path_{key}.json")
        return None
    if steps.combo != doc.get("combo", steps.combo):
        disk_cache.remove(f"path_{key}.json")
        return None
    remember(key, steps, doc)
    return steps, doc


def remember(key: str, steps: Steps, entry: dict) -> None:
    """Keep ``steps`` and its ``entry`` for ``key`` in this process."""
    with _lock:
        _MEMO[key] = (steps, entry)
        _MEMO.move_to_end(key)
        while len(_MEMO) > MEMO_ENTRIES:
            _MEMO.popitem(last=False)


def store(key: str, steps: Steps, entry: dict) -> None:
    """Keep ``entry`` (``steps``'s path and how it was found) for ``key``, in this process
    and on disk."""
    remember(key, steps, entry)
    disk_cache.write_json(f"path_{key}.json", entry)
    if prune_due(key):
        disk_cache.prune("path_*.json", DISK_ENTRIES)


def prune_due(key: str) -> bool:
    """Whether writing ``key``'s entry prunes the directory: for one key in
    ``PRUNE_EVERY`` (keys are hashes: an even share of any process's writes), so that a
    process's first write does not pay for listing a full cache."""
    return int(key[:8], 16) % PRUNE_EVERY == 0


def clear_memo() -> None:
    """Forget the paths kept in this process (the disk cache stays)."""
    with _lock:
        _MEMO.clear()
