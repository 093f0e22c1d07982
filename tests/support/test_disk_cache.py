"""The on-disk kernel cache: only a directory of our own is used, entries are checked
against their keys before import, corrupt entries are rebuilt (ISSUE 12: defects 16, 17)."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import graphopt as go
from graphopt.support import disk_cache

pytest.importorskip("numba")

PROGRAM = textwrap.dedent("""
    import warnings, numpy as np, graphopt as go
    warnings.simplefilter("always")
    g = go.Graph(); x = g.input("x", (1000,), "float64"); g.output(go.exp(x) * 2 + 1)
    print(go.compile(g, backend="numba")(x=np.ones(1000))[:2].tolist())
""")


def run_program(cache: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GRAPHOPT_CACHE_DIR": cache}
    return subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True,
                          text=True, timeout=300)


def fresh_source(tag: str) -> str:
    return f"# test module {tag}\nVALUE = {tag!r}\n"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("GRAPHOPT_CACHE_DIR", str(d))
    disk_cache._warned.clear()
    return d


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0,
                    reason="needs root to give the directory to another user")
def test_a_directory_owned_by_another_user_is_refused_and_nothing_in_it_is_imported(cache):
    cache.mkdir(mode=0o700)
    src = fresh_source("owned-elsewhere")
    marker = cache.parent / "planted-ran"
    planted = f"open({str(marker)!r}, 'w').write('x')\nVALUE = 'planted'\n"
    (cache / f"k_{disk_cache.source_digest(src)}.py").write_text(planted)
    os.chown(cache, 12345, 12345)
    with pytest.warns(RuntimeWarning, match="owned by uid 12345"):
        d = disk_cache.cache_dir()
    assert d != str(cache) and disk_cache.untrusted_reason(d) is None
    assert disk_cache.load_module(src).VALUE == "owned-elsewhere"
    assert not marker.exists()


def test_a_group_or_world_writable_directory_is_refused(cache):
    cache.mkdir()
    os.chmod(cache, 0o777)
    with pytest.warns(RuntimeWarning, match="writable by group or others"):
        assert disk_cache.cache_dir() != str(cache)


def test_the_cache_directory_is_created_private(cache):
    assert disk_cache.cache_dir() == str(cache)
    assert oct(os.stat(cache).st_mode & 0o777) == oct(0o700)


def test_an_entry_that_does_not_match_its_key_is_replaced_before_import(cache):
    src = fresh_source("checked")
    cache.mkdir(mode=0o700)
    path = cache / f"k_{disk_cache.source_digest(src)}.py"
    path.write_text("VALUE = 'planted'\n")
    with pytest.warns(RuntimeWarning, match="does not match its key"):
        assert disk_cache.load_module(src).VALUE == "checked"
    assert path.read_text() == src


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["index", "data", "module"])
def test_corrupt_entries_are_dropped_and_rebuilt(tmp_path, damage):
    cache = str(tmp_path / "c")
    first = run_program(cache)
    assert first.returncode == 0, first.stderr
    pyc = os.path.join(cache, "__pycache__")
    for name in os.listdir(pyc) if damage != "module" else os.listdir(cache):
        path = os.path.join(pyc if damage != "module" else cache, name)
        if (damage == "index" and name.endswith(".nbi")) or \
                (damage == "data" and name.endswith(".nbc")):
            open(path, "w").write("garbage")
        elif damage == "module" and name.startswith("k_"):
            text = open(path).read()
            open(path, "w").write(text[: len(text) // 2])   # truncated
    for _ in range(2):   # rebuilt once, then a clean hit
        again = run_program(cache)
        assert again.returncode == 0, again.stderr
        assert again.stdout == first.stdout
    assert "Traceback" not in again.stderr


def test_timings_document_and_kernels_survive_in_process(cache):
    g = go.Graph()
    x = g.input("x", (1 << 18,), "float64")
    g.output(go.tanh(x) * go.exp(x))
    a = np.linspace(-2, 2, 1 << 18)
    out = go.compile(g, backend="numba", cache=False)(x=a)
    np.testing.assert_allclose(out, np.tanh(a) * np.exp(a), rtol=1e-12)
    assert any(p.startswith("timings_") for p in os.listdir(cache))
