"""Progress lines for compiles and runs that take more than ``SHOW_AFTER`` seconds.

``with activity("compiling 'g'") as act:`` registers an activity; ``phase(text, total)``
and ``advance()`` (or ``act.set_phase`` / ``act.advance`` from worker threads) say where it
is. One daemon thread redraws a single stderr line (``\\r``) every ``INTERVAL`` seconds for
the oldest activity running longer than ``SHOW_AFTER``, and ends it with the total time,
so fast compiles and runs print nothing and the work itself never waits on the display.

Shown where stderr is a terminal or a notebook kernel, unless ``$GRAPHOPT_PROGRESS`` is 0
(1 shows it everywhere) or ``show_progress(False)`` was called.
"""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager

from ..support.env import env_flag

SHOW_AFTER = 1.0   # seconds before an activity's line appears
LONG_RUN_FLOPS = 10**9   # a plan call with fewer FLOPs (milliseconds) registers no activity
INTERVAL = 0.5     # seconds between redraws

_setting: bool | None = None   # show_progress(): None follows the environment
_UNREAD = object()
_from_env = _UNREAD   # $GRAPHOPT_PROGRESS, read once: True, False or None (not set)
_local = threading.local()
_active: list["Activity"] = []
_cond = threading.Condition()
_thread: threading.Thread | None = None


class Activity:
    """One compile or run: its label, start, current phase and count done of ``total``."""

    def __init__(self, label: str):
        self.label, self.t0 = label, time.perf_counter()
        self.phase, self.done, self.total, self.shown = "", 0, None, False

    def set_phase(self, text: str, total: int | None = None) -> None:
        self.phase, self.done, self.total = text, 0, total

    def advance(self, n: int = 1) -> None:
        self.done += n   # a lost update under threads only miscounts the display

    def line(self) -> str:
        count = f" {self.done}/{self.total}" if self.total else ""
        phase = f": {self.phase}{count}" if self.phase else ""
        return f"[graphopt] {self.label}{phase} ({time.perf_counter() - self.t0:.1f} s)"


def show_progress(flag: bool | None = True) -> None:
    """Show progress lines (True), never (False), or as the environment says (None)."""
    global _setting
    _setting = None if flag is None else bool(flag)


def enabled() -> bool:
    """Whether progress lines are shown now (see the module's docstring)."""
    global _from_env
    if _setting is not None:
        return _setting
    if _from_env is _UNREAD:
        _from_env = env_flag("GRAPHOPT_PROGRESS", unset=None)
    if _from_env is not None:
        return _from_env
    stream = sys.stderr
    return bool(stream is not None and (getattr(stream, "isatty", lambda: False)() or
                                        "ipykernel" in sys.modules))


def _write(text: str, end: str = "") -> None:
    stream = sys.stderr
    if stream is not None:
        try:
            stream.write("\r" + text.ljust(100) + end)
            stream.flush()
        except (OSError, ValueError):   # (a stream closed or gone: the line is lost, not the
            pass                        # drawing thread)


def _draw_loop() -> None:
    with _cond:   # drawn under the lock: an activity's "done" line is always its last
        while True:
            if not _active:
                _cond.wait()
                continue
            act = _active[0]
            due = act.t0 + SHOW_AFTER - time.perf_counter()
            if due <= 0:
                act.shown = True
                _write(act.line())
                due = INTERVAL
            # (the lock is free while waiting; an activity that starts or ends wakes it: a
            # fixed sleep after each look could outlast a short activity's whole life)
            _cond.wait(due)


@contextmanager
def activity(label: str):
    """Register an activity for the duration of the block; yields it (None when progress
    is not shown). Nested activities on one thread show the outer one's label."""
    if not enabled() or getattr(_local, "current", None) is not None:
        yield getattr(_local, "current", None)
        return
    global _thread
    act = Activity(label)
    _local.current = act
    with _cond:
        _active.append(act)
        if _thread is None:
            _thread = threading.Thread(target=_draw_loop, name="graphopt-progress",
                                       daemon=True)
            _thread.start()
        _cond.notify()
    try:
        yield act
    finally:
        _local.current = None
        with _cond:
            _active.remove(act)
            _cond.notify()
            if act.shown:
                _write(f"[graphopt] {act.label}: done in {time.perf_counter() - act.t0:.1f} s",
                       "\n")


def current() -> Activity | None:
    """This thread's activity, or None."""
    return getattr(_local, "current", None)


def phase(text: str, total: int | None = None) -> None:
    """Set this thread's activity's phase (nothing without one)."""
    act = getattr(_local, "current", None)
    if act is not None:
        act.set_phase(text, total)


class StepCounter:
    """A ``Plan.run_steps`` clock that counts the steps done on an activity (its first
    ``mark()`` comes before the first step)."""

    def __init__(self, act: Activity, total: int):
        act.set_phase("steps", total)
        self.act, self.started = act, False

    def mark(self) -> None:
        if self.started:
            self.act.advance()
        self.started = True
