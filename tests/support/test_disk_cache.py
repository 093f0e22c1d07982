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


# -- writes the filesystem refuses: one warning, the entry kept in memory, compiling goes on

@pytest.fixture
def refused(cache, monkeypatch):
    """The cache with its in-memory state reset (a refusal changes it for the process)."""
    monkeypatch.setattr(disk_cache, "_memory_only", False)
    monkeypatch.setattr(disk_cache, "_memory_docs", type(disk_cache._memory_docs)())
    return cache


def _full_disk(*args, **kwargs):
    raise OSError(28, "No space left on device")


def test_a_full_disk_keeps_kernels_and_documents_in_memory(refused, monkeypatch):
    monkeypatch.setattr(disk_cache, "write_atomic", _full_disk)
    src = fresh_source("full-disk")
    with pytest.warns(RuntimeWarning, match="No space left on device.*in memory from now on"):
        mod = disk_cache.load_module(src)
    assert mod.VALUE == "full-disk" and "in memory" in mod.__file__
    assert disk_cache.memory_only()
    disk_cache.write_json("timings_x.json", {"a": 1.0})      # no second warning, no raise
    assert disk_cache.read_json("timings_x.json", lambda d: True) == {"a": 1.0}
    assert not os.path.exists(refused / f"k_{disk_cache.source_digest(src)}.py")


def test_a_name_taken_by_a_directory_keeps_that_entry_in_memory(refused):
    refused.mkdir(mode=0o700)
    (refused / "path_taken.json").mkdir()
    with pytest.warns(RuntimeWarning) as caught:
        assert disk_cache.read_json("path_taken.json", lambda d: True) is None
        disk_cache.write_json("path_taken.json", {"path": [[0, 1]]})
    assert any("IsADirectoryError" in str(w.message) for w in caught)
    assert disk_cache.read_json("path_taken.json", lambda d: True) == {"path": [[0, 1]]}
    assert not disk_cache.memory_only()         # the rest of the directory is still used
    disk_cache.write_json("path_other.json", {"path": []})
    assert (refused / "path_other.json").is_file()
    src = fresh_source("taken")
    (refused / f"k_{disk_cache.source_digest(src)}.py").mkdir()
    assert disk_cache.load_module(src).VALUE == "taken"    # (warned once for the kind)


@pytest.mark.parametrize("text", ["[" * 100_000, "\xff\xfe", '{"path": [[0, "x"]]}' * 3,
                                  '{"path": 7}', '{"path": [[0, "x"]]}'],
                         ids=["deeply-nested", "not-utf8", "trailing-data", "wrong-type",
                              "check-raises"])
def test_a_corrupt_document_is_dropped_whatever_parsing_it_raises(refused, text):
    refused.mkdir(mode=0o700)
    (refused / "path_bad.json").write_bytes(text.encode("latin-1"))
    with pytest.warns(RuntimeWarning, match="corrupt or incomplete"):
        assert disk_cache.read_json("path_bad.json", lambda d: d["path"][0][1] + 1) is None
    assert not (refused / "path_bad.json").exists()


FILE_SIZE_PROGRAM = textwrap.dedent("""
    import resource, signal, sys, warnings, numpy as np, graphopt as go
    warnings.simplefilter("always")
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)     # the write fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), resource.RLIM_INFINITY))
    g = go.Graph(); x = g.input("x", (64, 64)); w = g.input("w", (64, 64))
    g.output(go.gelu(go.einsum("ij,jk->ik", x, w) + 1.0))
    a = np.linspace(-1, 1, 64 * 64).reshape(64, 64)
    got = go.compile(g, backend="numba")(x=a, w=a.T)
    want = go.compile(g, backend="numpy")(x=a, w=a.T)
    print(float(np.max(np.abs(got - want))))
""")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file-size limit")
@pytest.mark.parametrize("limit", [10, 3000])     # the source's write; numba's compiled code
def test_a_file_size_limit_ends_no_compile(tmp_path, limit):
    env = {**os.environ, "GRAPHOPT_CACHE_DIR": str(tmp_path / "c")}
    run = subprocess.run([sys.executable, "-c", FILE_SIZE_PROGRAM, str(limit)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert float(run.stdout) < 1e-12
    assert "File too large" in run.stderr and "in memory from now on" in run.stderr
    assert run.stderr.count("could not write the cache entry") == 1
