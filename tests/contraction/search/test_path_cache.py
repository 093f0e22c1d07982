"""The contraction-path cache (graphopt/contraction/search/cache.py): kept in this process
and on disk, shared by relabelled networks, found by a second process, pruned, and
recovering from a corrupt entry; exercised through ``path_search.find_path``, which reads
and writes it."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import warnings

import pytest
from opt_einsum.testing import rand_equation

from graphopt.contraction.search import anytime as path_search
from graphopt.contraction.search import cache as path_cache
from graphopt.support import disk_cache


def network(n, seed):
    """opt_einsum's random 3-regular network of ``n`` tensors: (terms, output, sizes)."""
    eq, shapes = rand_equation(n, 3, seed=seed, d_min=2, d_max=5)
    terms, output = eq.split("->")[0].split(","), eq.split("->")[1]
    return terms, output, {c: s for t, sh in zip(terms, shapes) for c, s in zip(t, sh)}


# A budget that pays for more than cotengrust's greedy on these networks (more than the
# default budget: an entry searched with it serves a later default-budget search)
SEARCHED = 0.005


def searched(terms, output, sizes):
    """``find_path`` with ``SEARCHED`` seconds."""
    return path_search.find_path(terms, output, sizes, time_budget=SEARCHED)


def test_second_search_is_a_cache_hit_in_this_process_and_on_disk(cache_dir):
    terms, output, sizes = network(20, 1)
    first, rec1 = searched(terms, output, sizes)
    second, rec2 = searched(terms, output, sizes)
    assert rec1["cache"] == "miss"
    assert rec2["cache"] == "hit" and rec2["trials"] == 0
    assert second.path == first.path
    path_cache.clear_memo()
    third, rec3 = path_search.find_path(terms, output, sizes)     # (a smaller budget)
    assert rec3["cache"] == "hit" and third.path == first.path
    files = list(cache_dir.glob("path_*.json"))
    assert len(files) == 1
    doc = json.loads(files[0].read_text())
    assert doc["path"] == [list(p) for p in first.path]


def test_the_disk_cache_is_pruned_by_one_write_in_so_many(cache_dir, monkeypatch):
    """The writes whose key falls in 1 / ``PRUNE_EVERY`` of the key space prune the
    directory to ``DISK_ENTRIES`` (the oldest go first): whatever process writes them, and
    not at each process's first write (12 ms in a full cache)."""
    monkeypatch.setattr(path_cache, "DISK_ENTRIES", 3)
    monkeypatch.setattr(path_cache, "PRUNE_EVERY", 4)
    for i in range(3):     # older entries than the bound keeps, from another process
        (cache_dir / f"path_old{i}.json").write_text("{}")
        os.utime(cache_dir / f"path_old{i}.json", (1, 1))
    counts, due = [], []
    for seed in range(12):
        terms, output, sizes = network(6, seed)
        due.append(path_cache.prune_due(path_cache.network_key(terms, output, sizes)))
        searched(terms, output, sizes)
        counts.append(len(list(cache_dir.glob("path_*.json"))))
    assert 0 < sum(due) < len(due), due
    expected, n = [], 3
    for d in due:
        n = 3 if d else n + 1
        expected.append(n)
    assert counts == expected, (due, counts)
    assert not list(cache_dir.glob("path_old*.json"))
    monkeypatch.setattr(path_cache, "PRUNE_EVERY", 64)
    keys = [hashlib.sha256(str(i).encode()).hexdigest()[:32] for i in range(6400)]
    assert 70 < sum(map(path_cache.prune_due, keys)) < 130


def test_relabelled_network_shares_the_entry(cache_dir):
    terms, output, sizes = network(16, 2)
    _, rec = path_search.find_path(terms, output, sizes)
    rename = {c: chr(0x4E00 + i) for i, c in enumerate(sorted(sizes))}
    t2 = ["".join(rename[c] for c in t) for t in terms]
    s2 = {rename[c]: s for c, s in sizes.items()}
    _, rec2 = path_search.find_path(t2, "".join(rename[c] for c in output), s2)
    assert rec["cache"] == "miss" and rec2["cache"] == "hit"
    # another size is another network
    s3 = dict(sizes)
    s3[terms[0][0]] += 1
    _, rec3 = path_search.find_path(terms, output, s3)
    assert rec3["cache"] == "miss"


def test_a_second_process_finds_the_path_in_the_cache(cache_dir):
    terms, output, sizes = network(20, 3)
    searched(terms, output, sizes)
    cache, path = _in_a_second_process(terms, output, sizes, cache_dir)
    kept = path_search.find_path(terms, output, sizes)[0]
    assert cache == "hit" and path == [list(p) for p in kept.path]


def _in_a_second_process(terms, output, sizes, cache_dir):
    """``find_path``'s (cache, path) in a new process at the default budget."""
    code = ("import json, sys; from graphopt.contraction.search import anytime as p; "
            "a = json.loads(sys.argv[1]); s, r = p.find_path(a[0], a[1], a[2]); "
            "print(json.dumps([r['cache'], [list(x) for x in s.path]]))")
    out = subprocess.run([sys.executable, "-c", code, json.dumps([terms, output, sizes])],
                         capture_output=True, text=True, check=True,
                         env=dict(os.environ, GRAPHOPT_CACHE_DIR=str(cache_dir)))
    return json.loads(out.stdout)


def test_a_greedy_path_is_kept_on_disk_for_a_second_process(cache_dir):
    # nothing but cotengrust's greedy ran (the default budget of a network that runs in
    # microseconds): its entry is written all the same, and a later process reads it
    pytest.importorskip("cotengrust")
    terms, output, sizes = network(20, 3)
    steps, rec = path_search.find_path(terms, output, sizes)
    assert rec["searcher"] == rec["greedy"] and rec["cache"] == "miss", rec
    (entry,) = cache_dir.glob("path_*.json")
    assert json.loads(entry.read_text())["path"] == [list(p) for p in steps.path]
    again, rec2 = path_search.find_path(terms, output, sizes)
    assert rec2["cache"] == "hit" and again.path == steps.path
    cache, path = _in_a_second_process(terms, output, sizes, cache_dir)
    assert cache == "hit" and path == [list(p) for p in steps.path]


@pytest.mark.parametrize("garbage", ["{not json", json.dumps({"path": "x"}),
                                     json.dumps({"path": [[0, 99]], "searcher": "greedy",
                                                 "budget_seconds": 1.0})])
def test_a_corrupt_or_wrong_entry_is_dropped_and_searched_again(garbage, cache_dir):
    terms, output, sizes = network(14, 4)
    key = path_cache.network_key(terms, output, sizes)
    (cache_dir / f"path_{key}.json").write_text(garbage)
    disk_cache._warned.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        steps, rec = searched(terms, output, sizes)
    assert rec["cache"] == "miss" and steps.pairwise
    doc = json.loads((cache_dir / f"path_{key}.json").read_text())
    assert doc["path"] == [list(p) for p in steps.path]


def test_the_report_says_whether_the_path_came_from_the_cache(cache_dir):
    import graphopt as go
    from graphopt.compiler import driver as compiler

    pytest.importorskip("cotengrust")
    terms, output, sizes = network(20, 5)
    g = go.Graph("small_network")
    ins = [g.input(f"t{i}", tuple(sizes[c] for c in t)) for i, t in enumerate(terms)]
    g.output(go.einsum(",".join(terms) + "->" + output, *ins))
    compiler.clear_cache()
    text = str(go.compile(g).report)
    assert "path cache miss" in text
    compiler.clear_cache()
    path_cache.clear_memo()     # (as a second process: the path from disk)
    assert "path cache hit" in str(go.compile(g).report)
