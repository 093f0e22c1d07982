"""The on-disk cache: generated kernel modules, numba's compiled code, kernel-choice timings,
contraction paths.

Where: ``$GRAPHOPT_CACHE_DIR``, else ``$XDG_CACHE_HOME/graphopt`` (``~/.cache/graphopt``).
What is trusted there:

- The directory is created ``0700`` and used only while it is ours: owned by this user, a
  real directory, not writable by group or others. Otherwise graphopt warns once and keeps
  its kernels in a fresh private temporary directory for this process (removed at exit):
  nothing is ever imported from a directory another user can write.
- A generated module ``k_<sha>.py`` is imported only if its bytes are the source whose
  digest names it; anything else there (truncated, edited, planted) is replaced first.
- A module whose import fails on numba's cache files (garbage index or data) has those
  files dropped and is imported once more, so numba rebuilds them; one warning.
- ``read_json``/``write_json`` keep small documents (kernel timings, contraction paths); a
  document that does not parse or validate (whatever parsing it raises) is dropped and
  rebuilt, with one warning. ``prune`` bounds how many of a kind are kept.
- A write the filesystem refuses (disk full, a quota or file-size limit, a read-only file
  system, a name taken by a directory) never ends a compile: one warning per kind of
  failure, and the entry is kept in this process's memory instead. After a refusal that
  holds for the whole directory (full, over quota or a size limit, read-only) every later
  entry is kept in memory, without trying the disk again. A kernel module kept in memory is
  executed from its source with numba's file cache off (``NUMBA_FILE_CACHE``), since numba
  caches only what a file backs.
"""

from __future__ import annotations

import atexit
import errno
import glob
import hashlib
import importlib.util
import json
import os
import shutil
import stat
import sys
import tempfile
import threading
import types
import warnings
from collections import OrderedDict

from ..errors import GraphError
from ..frontend.serialize import write_atomic

_lock = threading.RLock()
_private: str | None = None   # the per-process fallback directory, once made
_warned: set = set()

# Write failures that hold for every file of the directory, not just one name
DIRECTORY_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})
# How numba's file cache is asked for in a kernel module's source (off for one in memory)
NUMBA_FILE_CACHE = ("cache=True", "cache=False")
MEMORY_DOCS = 4096            # documents kept in memory after refused writes, oldest dropped
_memory_only = False          # a DIRECTORY_FULL refusal was met: no more writes are tried
_memory_docs: OrderedDict = OrderedDict()


def _write_refused(path: str, e: OSError) -> None:
    """Note that writing ``path`` failed with ``e``: one warning per kind of failure, and
    every later write goes to memory when the failure holds for the whole directory."""
    global _memory_only
    whole = e.errno in DIRECTORY_FULL
    with _lock:
        _memory_only = _memory_only or whole
    scope = ("this process keeps its kernels, paths and timings in memory from now on"
             if whole else "this process keeps that entry in memory")
    warn_once(f"write:{e.errno}:{type(e).__name__}",
              f"could not write the cache entry {path} ({type(e).__name__}: "
              f"{e.strerror or e}); {scope}, and compiling goes on")


def memory_only() -> bool:
    """Whether writes go to memory only (the cache directory refused one: full, over quota,
    over a size limit, read-only)."""
    return _memory_only


def warn_once(key: str, message: str) -> None:
    """One ``RuntimeWarning`` per ``key`` per process."""
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(f"graphopt: {message}", RuntimeWarning, stacklevel=3)


def configured_dir() -> str:
    """The kernel cache directory asked for: ``$GRAPHOPT_CACHE_DIR``, else the user's cache
    home (``$XDG_CACHE_HOME`` or ``~/.cache``) ``/graphopt``."""
    return os.environ.get("GRAPHOPT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "graphopt")


def untrusted_reason(path: str) -> str | None:
    """Why ``path`` may not hold code this process imports, or None when it is ours."""
    try:
        st = os.stat(path)
    except OSError as e:
        return f"cannot stat it ({e.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"it is owned by uid {st.st_uid}, not by this user ({os.getuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"it is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    if not os.access(path, os.W_OK | os.X_OK):
        return "it is not writable by this user"
    return None


def _private_dir() -> str:
    global _private
    with _lock:
        if _private is None:
            _private = tempfile.mkdtemp(prefix="graphopt-")   # 0700, a fresh name
            atexit.register(shutil.rmtree, _private, ignore_errors=True)
        return _private


def cache_dir() -> str:
    """The directory kernels are kept in: the configured one when it is trusted (see the
    module docstring), else this process's private temporary one (one warning)."""
    d = configured_dir()
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
    except OSError as e:
        reason = f"cannot create it ({e.strerror})"
    else:
        reason = untrusted_reason(d)
    if reason is None:
        return d
    warn_once(f"dir:{d}", f"not using the kernel cache directory {d}: {reason}; kernels are "
              "kept in a private temporary directory for this process instead (set "
              "GRAPHOPT_CACHE_DIR to a directory of your own to keep them)")
    return _private_dir()


def source_digest(source: str) -> str:
    """The cache key of a kernel's source text."""
    return hashlib.sha256(source.encode()).hexdigest()[:24]


def load_module(source: str):
    """Import ``source`` as ``<cache_dir>/k_<digest>.py``, where the digest is of the
    source itself: written once, checked byte for byte before every import, so numba's
    ``cache=True`` finds its compiled code again in a later process."""
    digest = source_digest(source)
    modname = f"graphopt_kernel_{digest}"
    with _lock:
        if modname in sys.modules:
            return sys.modules[modname]
        d = cache_dir()
        path = os.path.join(d, f"k_{digest}.py")
        try:
            with open(path, encoding="utf-8") as f:
                ok = f.read() == source
            if not ok:
                warn_once(f"mod:{path}", f"kernel cache entry {path} does not match its key "
                          "(truncated or modified); rebuilding it")
                _drop_numba_files(d, digest)
        except (OSError, UnicodeDecodeError):
            ok = False
        if _memory_only:
            return _exec_in_memory(modname, source, digest)
        try:
            if not ok:
                write_atomic(path, source)
            try:
                return _exec_module(modname, path)
            except OSError:
                raise
            except Exception as e:
                if not _drop_numba_files(d, digest):
                    raise
                warn_once(f"nb:{path}", f"numba's cache files for {path} could not be "
                          f"loaded ({type(e).__name__}: {e}); dropped them and compiled again")
                return _exec_module(modname, path)
        except OSError as e:  # the source's write, or numba's of its compiled code
            _write_refused(getattr(e, "filename", None) or path, e)
            return _exec_in_memory(modname, source, digest)


def _exec_module(modname: str, path: str):
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    return _run_module(mod, lambda: spec.loader.exec_module(mod))


def _exec_in_memory(modname: str, source: str, digest: str):
    """The kernel module from ``source`` itself, no file read or written: numba's file cache
    off, so it compiles in this process only."""
    name = f"<graphopt kernel k_{digest} in memory>"
    mod = types.ModuleType(modname)
    mod.__file__ = name
    code = compile(source.replace(*NUMBA_FILE_CACHE), name, "exec")
    return _run_module(mod, lambda: exec(code, mod.__dict__))


def _run_module(mod, run):
    # numba's cache re-imports the module by name when it loads a compiled kernel
    sys.modules[mod.__name__] = mod
    try:
        run()
    except BaseException:
        del sys.modules[mod.__name__]
        raise
    return mod


def _drop_numba_files(d: str, digest: str) -> bool:
    """Remove numba's index and data files of module ``k_<digest>``; whether there were any."""
    files = glob.glob(os.path.join(d, "__pycache__", f"k_{digest}.*"))
    for f in files:
        try:
            os.unlink(f)
        except OSError:
            pass
    return bool(files)


def read_json(name: str, valid) -> object | None:
    """The document ``name`` in the cache directory if it exists and ``valid(doc)``; an
    invalid one is removed (one warning) and None returned."""
    with _lock:
        if name in _memory_docs:
            _memory_docs.move_to_end(name)
            return _memory_docs[name]
    path = os.path.join(cache_dir(), name)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError, MemoryError):
        doc = _INVALID
    if doc is not _INVALID and _holds(valid, doc):
        return doc
    warn_once(f"json:{path}", f"kernel cache entry {path} is corrupt or incomplete; "
              "dropping it and building it again")
    try:
        os.unlink(path)
    except OSError:
        pass
    return None


def _holds(valid, doc) -> bool:
    """``valid(doc)``, False where the check itself fails on what a corrupt file holds."""
    try:
        return bool(valid(doc))
    except Exception:
        return False


def write_json(name: str, doc) -> None:
    """Write ``doc`` as JSON to ``name`` in the cache directory, atomically; where the
    filesystem refuses, keep it in memory (see the module docstring)."""
    if not _memory_only:
        path = os.path.join(cache_dir(), name)
        try:
            write_atomic(path, json.dumps(doc))
            return
        except OSError as e:
            _write_refused(path, e)
    with _lock:
        _memory_docs[name] = doc
        _memory_docs.move_to_end(name)
        while len(_memory_docs) > MEMORY_DOCS:
            _memory_docs.popitem(last=False)


def remove(name: str) -> None:
    """Remove ``name`` from the cache directory (and from memory), if it is there."""
    with _lock:
        _memory_docs.pop(name, None)
    try:
        os.unlink(os.path.join(cache_dir(), name))
    except OSError:
        pass


def prune(pattern: str, keep: int) -> int:
    """Keep the ``keep`` most recently written files matching ``pattern`` in the cache
    directory, removing the rest; how many were removed."""
    d = cache_dir()
    names = _matching(d, pattern)
    if len(names) <= keep:
        return 0
    files = [os.path.join(d, n) for n in names]

    def mtime(f):
        try:
            return os.stat(f).st_mtime
        except OSError:
            return 0.0
    files.sort(key=mtime)
    _unlink_all(files[:len(files) - keep])
    return len(files) - keep


def _matching(d: str, pattern: str) -> list[str]:
    """The names of ``d``'s files that ``pattern`` matches, as ``glob`` matches them: a
    ``prefix*suffix`` pattern read from ``os.listdir`` in a fraction of ``glob``'s time (a
    process's first path entry prunes a directory of thousands)."""
    prefix, star, suffix = pattern.partition("*")
    if not star or "*" in suffix or any(c in pattern for c in "?[/" + os.sep):
        return [os.path.basename(f) for f in glob.glob(os.path.join(d, pattern))]
    try:
        names = os.listdir(d)
    except OSError:
        return []
    least = len(prefix) + len(suffix)
    return [n for n in names if n.startswith(prefix) and n.endswith(suffix) and
            len(n) >= least and n[0] != "."]


def _unlink_all(files) -> int:
    """Remove ``files``, skipping any another process removed first; how many went."""
    removed = 0
    for f in files:
        try:
            os.unlink(f)
            removed += 1
        except OSError:
            pass
    return removed


_INVALID = object()


# What graphopt writes in the cache directory: generated kernel sources and numba's compiled
# forms of them, contraction paths, kernel-form timings. Nothing else there is touched.
CACHE_KINDS = {"kernels": ("k_*.py", "__pycache__/k_*"), "paths": ("path_*.json",),
               "timings": ("timings_*.json",)}


def _cache_files(d: str) -> dict[str, list[str]]:
    return {kind: [f for p in pats for f in glob.glob(os.path.join(d, p))]
                  for kind, pats in CACHE_KINDS.items()}


def usage() -> dict:
    """The configured cache directory and, per kind of file graphopt keeps there, how many
    files and bytes (nothing is created or read beyond ``stat``)."""
    d = configured_dir()
    out = {"dir": d, "exists": os.path.isdir(d), "kinds": {}}
    for kind, files in _cache_files(d).items():
        sizes = []
        for f in files:
            try:
                sizes.append(os.stat(f).st_size)
            except OSError:
                pass
        out["kinds"][kind] = {"files": len(sizes), "bytes": sum(sizes)}
    return out


def clear() -> int:
    """Remove the files graphopt keeps in the configured cache directory (kernels, their
    numba caches, paths, timings); how many were removed. Other files are left alone, and a
    directory graphopt would not use (another user's, or writable by others) is refused."""
    d = configured_dir()
    if not os.path.isdir(d):
        return 0
    reason = untrusted_reason(d)
    if reason is not None:
        raise GraphError(f"not clearing {d}: {reason}")
    return sum(_unlink_all(files) for files in _cache_files(d).values())
