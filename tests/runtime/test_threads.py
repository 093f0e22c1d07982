"""The thread budget (graphopt/runtime/threads.py): where it comes from, who gets the threads per
step, parallel tiled blocks with one BLAS thread each, and calls from several user threads."""

import threading

import numpy as np
import pytest

import graphopt as go
from graphopt import workloads
from graphopt.runtime import blas_limits, threads


def attention(seed=None):
    """The shared attention workload at (2, 4, 128, 64): big enough to tile and split."""
    return workloads.attention(batch=2, heads=4, seq=128, dim=64, seed=seed)


def attention_graph():
    return attention().build()


def attention_inputs(seed=None):
    return attention(seed).inputs


def reference(g, inputs):
    """softmax(q kᵀ/√d) v in float64 NumPy."""
    return attention().reference(**inputs)


@pytest.fixture
def small_tiles(monkeypatch):
    """Tile small regions (so a test graph of a few MiB becomes several blocks) and let
    any region run its blocks in parallel."""
    from graphopt.passes import tiling

    monkeypatch.setattr(tiling, "TILE_MIN_BYTES", 1 << 14)
    monkeypatch.setattr(tiling, "TILE_BYTES", 1 << 14)
    monkeypatch.setattr(threads, "WORKER_MIN_FLOPS", 0)


class BlasRecorder:
    """Wraps ``np.matmul`` (what the GEMM kernels call): records, per call, the calling
    thread, the BLAS libraries' thread count and numba's for that thread."""

    def __init__(self, monkeypatch):
        import numba

        self.calls = []
        self._lock = threading.Lock()
        real = np.matmul
        libs = blas_limits.controllers()

        def matmul(*a, **kw):
            rec = (threading.get_ident(), tuple(lib.get_num_threads() for lib in libs),
                   numba.get_num_threads())
            with self._lock:
                self.calls.append(rec)
            return real(*a, **kw)
        monkeypatch.setattr(np, "matmul", matmul)


# ------------------------------------------------------------------------------- budget


def test_budget_comes_from_affinity_env_compile_option_and_context(monkeypatch):
    monkeypatch.delenv(threads.ENV_THREADS, raising=False)
    assert threads.budget_for(None) == (threads.machine_threads(), "os.sched_getaffinity")
    monkeypatch.setenv(threads.ENV_THREADS, "3")
    assert threads.budget_for(None) == (3, "$GRAPHOPT_NUM_THREADS")
    assert threads.budget_for(5) == (5, "compile(threads=)")
    with go.thread_budget(1):
        assert threads.budget_for(5) == (1, "thread_budget()")
        with go.thread_budget(None):
            assert threads.budget_for(5) == (5, "compile(threads=)")
    assert threads.budget_for(None) == (3, "$GRAPHOPT_NUM_THREADS")
    monkeypatch.setenv(threads.ENV_THREADS, "lots")     # a bad value never breaks a call
    assert threads.budget_for(None)[0] == threads.machine_threads()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_thread_counts_are_graph_errors(bad):
    with pytest.raises(go.GraphError, match="threads"):
        go.compile(attention_graph(), threads=bad)
    with pytest.raises(go.GraphError, match="thread_budget"):
        with go.thread_budget(bad):
            pass


def test_threads_is_part_of_the_compile_cache_key():
    g = attention_graph()
    assert go.compile(g, threads=1) is not go.compile(g, threads=2)
    assert go.compile(g, threads=2).threads == 2


def test_report_names_the_budget_and_which_steps_use_it():
    p = go.compile(attention_graph(), threads=2, disable={"tiling"})
    text = str(p.report)
    assert "threads: 2 (compile(threads=)" in text
    info = p.report.to_dict()["threads"]
    assert info["budget"] == 2 and info["from"] == "compile(threads=)"
    uses = {k["impl"]: k["uses_threads"] for k in p.report.kernels}
    assert uses["blas-gemm"] is True
    # attention's softmax runs numba loops on the call's threads: its GEMMs are split
    assert not p.blas_threads_gemms and "GEMM threads: split over graphopt's workers" in text
    gemm_only = go.compile(_gemm_graph(False), threads=2)
    assert "GEMM threads: BLAS's own, where a call is alone" in str(gemm_only.report)
    assert gemm_only.report.to_dict()["threads"]["gemm_threads"].startswith("BLAS's own")


# ----------------------------------------------------------------------- who gets threads


def run_in_threads(work, errors: list, n: int = 4) -> None:
    """``work(w)`` on ``n`` threads; none may deadlock, and ``errors`` (what ``work``
    caught, with its thread) stays empty."""
    ts = [threading.Thread(target=work, args=(w,)) for w in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in ts), "a call deadlocked"
    assert not errors, errors


def user_blas_threads():
    """The thread count of each BLAS library graphopt limits."""
    return {lib.filepath: lib.get_num_threads() for lib in blas_limits.controllers()}


def blas_given_back(before) -> bool:
    now = user_blas_threads()
    return all(now[f] == n for f, n in before.items() if f in now)


def _gemm_graph(with_parallel_loop: bool):
    g = go.Graph("gemm")
    a, b = g.input("a", (256, 128), "float64"), g.input("b", (128, 512), "float64")
    outs = {"c": go.einsum("ij,jk->ik", a, b)}
    if with_parallel_loop:      # a numba loop on the call's threads beside the GEMM
        v = g.input("v", (1 << 18,), "float64")
        outs["e"] = go.exp(v) * 2.0
    g.output(outs)
    return g


def test_a_gemm_only_plan_alone_in_flight_lets_blas_thread_its_gemms(monkeypatch):
    """A plan whose only threaded steps are GEMMs, called alone: BLAS on the call's threads,
    one BLAS call per GEMM (its spinning workers hand off faster than graphopt's sleeping
    ones); the user's BLAS setting is back once the call returns."""
    monkeypatch.setattr(threads, "_parallel_at", float("-inf"))  # no parallel call before
    before = user_blas_threads()
    rec = BlasRecorder(monkeypatch)
    r = np.random.default_rng(1)
    x, y = r.standard_normal((256, 128)), r.standard_normal((128, 512))
    p = go.compile(_gemm_graph(False), threads=2)
    assert p.steps[0].kernel.impl == "blas-gemm" and p.steps[0].kernel.blas_only_threads
    assert p.blas_threads_gemms
    np.testing.assert_allclose(p(a=x, b=y)["c"], x @ y, rtol=1e-12, atol=1e-12)
    assert [(t, set(blas)) for t, blas, _ in rec.calls] == [(threading.get_ident(), {2})]
    assert threads.active_calls() == 0 and blas_given_back(before)
    with go.thread_budget(1):                     # one thread: BLAS on one thread
        rec.calls.clear()
        np.testing.assert_allclose(p(a=x, b=y)["c"], x @ y, rtol=1e-12, atol=1e-12)
    assert [(t, set(blas)) for t, blas, _ in rec.calls] == [(threading.get_ident(), {1})]
    assert blas_given_back(before)


def test_a_large_gemm_beside_a_parallel_loop_is_split_with_one_blas_thread_each(monkeypatch):
    """Beside a numba loop on the call's threads, graphopt threads a GEMM itself (OpenBLAS's
    own workers would spin on the cores the loop needs next); the user's BLAS setting is
    back once the call returns."""
    before = user_blas_threads()
    rec = BlasRecorder(monkeypatch)
    r = np.random.default_rng(1)
    x, y = r.standard_normal((256, 128)), r.standard_normal((128, 512))
    v = r.standard_normal(1 << 18)
    p = go.compile(_gemm_graph(True), threads=2)
    gemm = next(s.kernel for s in p.steps if s.kernel.impl == "blas-gemm")
    assert gemm.uses_threads and not p.blas_threads_gemms
    got = p(a=x, b=y, v=v)
    np.testing.assert_allclose(got["c"], x @ y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["e"], np.exp(v) * 2.0, rtol=1e-12)
    assert len(rec.calls) == 2 and len({t for t, _, _ in rec.calls}) == 2
    assert all(set(blas) == {1} for _, blas, _ in rec.calls)
    assert threads.active_calls() == 0 and blas_given_back(before)
    assert threads.current_threads() == 1      # outside a call: one thread
    with go.thread_budget(1):                     # one thread: one BLAS call, one thread
        rec.calls.clear()
        np.testing.assert_allclose(p(a=x, b=y, v=v)["c"], x @ y, rtol=1e-12, atol=1e-12)
    assert [(t, set(blas)) for t, blas, _ in rec.calls] == [(threading.get_ident(), {1})]


def test_blas_threads_gemms_only_once_no_parallel_call_started_for_a_while(monkeypatch):
    """After a call with a numba loop on the call's threads, a GEMM-only call splits its
    GEMMs as before (OpenBLAS's spinning workers would slow the loop's next call); once
    no such call started for ``BLAS_QUIET_SECONDS``, BLAS threads them."""
    rec = BlasRecorder(monkeypatch)
    r = np.random.default_rng(2)
    x, y = r.standard_normal((256, 128)), r.standard_normal((128, 512))
    v = r.standard_normal(1 << 18)
    mixed = go.compile(_gemm_graph(True), threads=2)
    gemm = go.compile(_gemm_graph(False), threads=2)
    monkeypatch.setattr(threads, "BLAS_QUIET_SECONDS", 600.0)   # (however slow the machine)
    mixed(a=x, b=y, v=v)
    rec.calls.clear()
    np.testing.assert_allclose(gemm(a=x, b=y)["c"], x @ y, rtol=1e-12, atol=1e-12)
    assert len(rec.calls) == 2 and all(set(blas) == {1} for _, blas, _ in rec.calls)
    monkeypatch.setattr(threads, "BLAS_QUIET_SECONDS", 0.0)
    rec.calls.clear()
    np.testing.assert_allclose(gemm(a=x, b=y)["c"], x @ y, rtol=1e-12, atol=1e-12)
    assert [set(blas) for _, blas, _ in rec.calls] == [{2}]


def test_blas_may_thread_only_where_every_threaded_step_is_a_gemm():
    assert threads.thread_use([(True, True), (False, False)]) == (True, False)
    assert threads.thread_use([(True, True), (True, False)]) == (False, True)
    assert threads.thread_use([(False, False)]) == (False, False)     # nothing threaded
    assert threads.thread_use([]) == (False, False)


@pytest.mark.parametrize("shape_a, shape_b, axis", [
    ((8, 128, 128), (8, 128, 128), "batch"), ((512, 512), (512, 64), "m"),
    ((128, 512), (512, 1024), "n"), ((8, 8), (8, 8), "whole")])
def test_gemm_parts_cover_the_product(shape_a, shape_b, axis):
    from graphopt.backends.cpu_gemm import gemm_parts

    got, ranges = gemm_parts(shape_a, shape_b, 2)
    assert got == axis
    if axis != "whole":
        extent = {"batch": shape_a[0], "m": shape_a[-2], "n": shape_b[-1]}[axis]
        assert ranges[0][0] == 0 and ranges[-1][1] == extent
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


def test_tiled_blocks_run_in_parallel_with_one_blas_thread_each(monkeypatch, small_tiles):
    rec = BlasRecorder(monkeypatch)
    g, inputs = attention_graph(), attention_inputs()
    p = go.compile(g, threads=2, cache=False)
    (step,) = p.steps
    assert step.kernel.impl.startswith("tiled(") and step.kernel.details["blocks"] >= 2
    got = p(**inputs)
    np.testing.assert_allclose(got, reference(g, inputs), rtol=1e-4, atol=1e-5)
    # every GEMM inside the region ran with one BLAS thread and one numba thread ...
    assert rec.calls and all(set(blas) == {1} and nb == 1 for _, blas, nb in rec.calls)
    # ... on more than one thread (the caller and a graphopt worker) ...
    assert len({t for t, _, _ in rec.calls}) == 2
    # ... and BLAS is the user's again once the call is done
    assert threads.blas_threads() is None


def test_one_thread_runs_blocks_in_sequence_on_the_calling_thread(monkeypatch, small_tiles):
    rec = BlasRecorder(monkeypatch)
    g, inputs = attention_graph(), attention_inputs()
    p = go.compile(g, threads=2, cache=False)
    with go.thread_budget(1):
        got = p(**inputs)
    np.testing.assert_allclose(got, reference(g, inputs), rtol=1e-4, atol=1e-5)
    assert {t for t, _, _ in rec.calls} == {threading.get_ident()}
    assert all(set(blas) == {1} for _, blas, _ in rec.calls)


def test_run_parallel_is_the_serial_result_in_order():
    items = list(range(7))
    assert threads.run_parallel(lambda c: c * c, items, 3) == [c * c for c in items]
    assert threads.split(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert threads.split(2, 5) == [(0, 1), (1, 2)]


def test_an_error_in_a_parallel_item_reaches_the_caller_and_closes_the_region():
    def boom(c):
        if c == 2:
            raise ValueError("item 2")
        return c

    before = user_blas_threads()
    threads.enter_call(2)
    try:
        with pytest.raises(ValueError, match="item 2"):
            threads.run_parallel(boom, [0, 1, 2, 3], 2)
        assert threads._regions == 0
        assert threads.run_parallel(lambda c: c, [0, 1], 2) == [0, 1]
    finally:
        threads.exit_call()
    assert blas_given_back(before)

# ----------------------------------------------------------------------- user threads


def test_four_user_threads_share_the_budget_and_get_right_results(monkeypatch, small_tiles):
    """Concurrent calls (tiled and untiled plans) are right, finish, and BLAS runs one
    thread throughout: four user threads never start eight."""
    before = user_blas_threads()
    rec = BlasRecorder(monkeypatch)
    g = attention_graph()
    plans = [go.compile(g, threads=2, cache=False),
             go.compile(g, threads=2, disable={"tiling"}, cache=False)]
    cases = [attention_inputs(seed=s) for s in range(8)]
    expect = [reference(g, c) for c in cases]
    errors, barrier = [], threading.Barrier(4)

    def work(w):
        try:
            barrier.wait()
            for r in range(3):
                i = (w + r) % len(cases)
                got = plans[(w + r) % 2](**cases[i])
                np.testing.assert_allclose(got, expect[i], rtol=1e-4, atol=1e-5)
        except Exception as e:  # reported below, with the thread that saw it
            errors.append((w, e))

    run_in_threads(work, errors)
    assert threads.active_calls() == 0
    # every GEMM ran on one BLAS thread, and numba never beyond the budget
    assert all(set(blas) == {1} and nb <= 2 for _, blas, nb in rec.calls), \
        [c for c in rec.calls if set(c[1]) != {1} or c[2] > 2]
    assert blas_given_back(before)


def test_gemm_only_and_other_calls_at_once_are_right_and_give_blas_back(monkeypatch,
                                                                        small_tiles):
    """Calls of a GEMM-only plan (BLAS threads its GEMMs where a call is alone) and of a
    tiled plan from four user threads: right results, no deadlock, BLAS within the budget
    throughout, and the user's setting back at the end."""
    before = user_blas_threads()
    rec = BlasRecorder(monkeypatch)
    att = go.compile(attention_graph(), threads=2, cache=False)
    gemm = go.compile(_gemm_graph(False), threads=2, cache=False)
    assert gemm.blas_threads_gemms and not att.blas_threads_gemms
    r = np.random.default_rng(3)
    xy = [(r.standard_normal((256, 128)), r.standard_normal((128, 512))) for _ in range(4)]
    cases = [attention_inputs(seed=s) for s in range(4)]
    expect = [reference(attention_graph(), c) for c in cases]
    errors, barrier = [], threading.Barrier(4)

    def work(w):
        try:
            barrier.wait()
            for k in range(6):
                i = (w + k) % 4
                if (w + k) % 2:
                    np.testing.assert_allclose(att(**cases[i]), expect[i], rtol=1e-4,
                                               atol=1e-5)
                else:
                    x, y = xy[i]
                    np.testing.assert_allclose(gemm(a=x, b=y)["c"], x @ y, rtol=1e-12,
                                               atol=1e-12)
        except Exception as e:  # reported below, with the thread that saw it
            errors.append((w, e))

    run_in_threads(work, errors)
    assert threads.active_calls() == 0 and threads.describe()["blas_threaded_calls"] == 0
    assert all(max(blas) <= 2 and nb <= 2 for _, blas, nb in rec.calls)
    assert blas_given_back(before)


def test_calls_beyond_the_budget_wait_for_a_slot(monkeypatch):
    """Budget 2: two calls run side by side (the second gets budget // 2 threads); a third
    waits until one of them ends. A call inside a call (same thread) takes no slot."""
    monkeypatch.setattr(threads, "_gate", threads.call_slots(2))
    inside, release, order = threading.Barrier(3), threading.Event(), []

    def holder(name):
        n = threads.enter_call(2)
        try:
            order.append((name, n))
            inside.wait(timeout=30)
            release.wait(timeout=30)
        finally:
            threads.exit_call()

    def late():
        threads.enter_call(2)
        try:
            order.append(("late", 0))
        finally:
            threads.exit_call()

    hs = [threading.Thread(target=holder, args=(f"h{i}",)) for i in range(2)]
    for h in hs:
        h.start()
    inside.wait(timeout=30)
    assert sorted(n for _, n in order) == [1, 2]     # the first in got 2, the second 1
    t = threading.Thread(target=late)
    t.start()
    t.join(timeout=0.3)
    assert t.is_alive() and len(order) == 2          # no slot for it yet
    release.set()
    for x in hs + [t]:
        x.join(timeout=30)
    assert order[-1][0] == "late" and threads.active_calls() == 0
    assert threads.enter_call(1) == 1 and threads.enter_call(1) == 1   # nested: no slot
    threads.exit_call()
    threads.exit_call()
