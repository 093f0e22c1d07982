"""BLAS's thread count as graphopt changes it and gives it back.

threadpoolctl's controllers of the loaded BLAS libraries (listed once per process), the
count graphopt set, and the user's own counts, kept while graphopt holds BLAS. Every
function that changes something runs under ``threads``' lock, held by the caller:
``threads`` decides when BLAS gets which count.
"""

from __future__ import annotations

_set_to: int | None = None       # what graphopt set BLAS to (None: the user's own)
_user: list | None = None        # the user's BLAS thread counts while graphopt holds it


def _list_blas() -> list:
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController().select(user_api="blas").lib_controllers


def controllers():
    """threadpoolctl's controllers of the BLAS libraries loaded, listed once, when graphopt
    is imported: a listing costs milliseconds (threadpoolctl resolves the path of every
    loaded library), more than a small plan call, and made at a plan call's first large
    GEMM it would hold the thread lock of every call that long. graphopt calls no BLAS but NumPy's
    (``np.matmul``, ``np.einsum``), loaded with NumPy before graphopt, so a BLAS another
    import brings later (scipy's OpenBLAS, torch's MKL) never runs in a graphopt call and
    needs no limit. (Where the listing fails at import, the first call lists again and
    raises what it raises.)"""
    global _libs
    if _libs is None:
        _libs = _list_blas()
    return _libs


try:
    _libs = _list_blas()
except Exception:        # (listed again where a call needs it: the error is raised there)
    _libs = None


def set_to() -> int | None:
    """What graphopt set BLAS to (``None``: the user's own count)."""
    return _set_to


def set_threads(n: int) -> None:
    """BLAS threads process-wide (lock held), the user's own setting kept to be given back
    (``restore_user``); nothing to do if graphopt already set ``n``."""
    global _set_to, _user
    if _set_to == n:
        return
    libs = controllers()
    if _user is None:
        _user = [lib.get_num_threads() for lib in libs]
    for lib in libs:
        _set_lib_threads(lib, n)
    _set_to = n


def restore_user() -> None:
    """Give BLAS back the thread count the user had (lock held)."""
    global _set_to, _user
    if _user is not None:
        for lib, n in zip(controllers(), _user):
            _set_lib_threads(lib, n)
    _user = _set_to = None


def _set_lib_threads(lib, n: int) -> None:
    """``lib.set_num_threads(n)`` from whichever thread graphopt runs on (lock held).
    threadpoolctl lets only the first thread that limited a process-wide OpenBLAS limit it
    again and silently ignores the others; graphopt's changes are serialized by its own
    lock, so it hands control to the calling thread first."""
    clear = getattr(lib, "clear_controlling_thread", None)
    if clear is not None:
        clear(force=True)
    lib.set_num_threads(n)
