"""The profiler on the reference backend: events, summary, Chrome trace, roofline classes,
plot, and that profiling leaves the plan, its results and the inputs as they were."""

import json
import sys

import numpy as np
import pytest

import graphopt as go
from graphopt.observe import profiler
from graphopt.observe.profiler import Bottleneck, Profile, StepEvent, profile_plan


def mlp_graph():
    g = go.Graph("mlp")
    x = g.input("x", (64, 64), "float32")
    w = g.input("w", (64, 32), "float32")
    b = g.input("b", (32,), "float32")
    h = go.relu(x @ w + b)
    g.output({"y": h.sum(axis=0), "z": go.exp(h) * 0.5})
    return g


@pytest.fixture
def plan():
    return go.compile(mlp_graph(), backend="numpy")


@pytest.fixture
def inputs(rng):
    return {"x": rng.standard_normal((64, 64)).astype("float32"),
            "w": rng.standard_normal((64, 32)).astype("float32"),
            "b": rng.standard_normal(32).astype("float32")}


def expected(inputs):
    h = np.maximum(inputs["x"] @ inputs["w"] + inputs["b"], 0)
    return {"y": h.sum(axis=0), "z": np.exp(h) * np.float32(0.5)}


def check(got, inputs):
    for k, v in expected(inputs).items():
        np.testing.assert_allclose(got[k], v, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------- events


def test_one_event_per_step_per_repeat_in_order(plan, inputs):
    assert len(plan.steps) >= 2
    prof = plan.profile(**inputs, repeat=3, warmup=1)
    n = len(plan.steps)
    assert prof.repeat == 3 and len(prof.events) == 3 * n
    for r in range(3):
        evs = prof.events[r * n:(r + 1) * n]
        assert [e.repeat for e in evs] == [r] * n
        assert [e.name for e in evs] == [s.name for s in plan.steps]
        assert all(e.end_ns >= e.start_ns for e in evs)
        assert all(b.start_ns >= a.end_ns for a, b in zip(evs, evs[1:]))
        for e, s in zip(evs, plan.steps):
            assert (e.step, e.flops, e.bytes, e.op_kinds) == (s.index, s.flops, s.bytes,
                                                             tuple(s.op_kinds))
            assert (e.shape, e.dtype, e.impl, e.srcs) == (tuple(s.shape), s.dtype,
                                                         s.kernel.impl, tuple(s.srcs))
    first = [e for e in prof.events if e.repeat == 0]
    later = [e for e in prof.events if e.repeat == 1]
    assert later[0].start_ns >= first[-1].end_ns


def test_timestamps_come_from_the_backends_step_clock(plan, inputs, monkeypatch):
    made = []

    class FakeClock:
        def __init__(self):
            self.marks = []
            made.append(self)

        def mark(self):
            self.marks.append(1000 * len(made) + 10 * len(self.marks))

        def read(self):
            return list(self.marks)

    monkeypatch.setattr(plan.backend, "step_clock", FakeClock)
    prof = plan.profile(**inputs, repeat=2, warmup=3)
    n = len(plan.steps)
    assert len(made) == 2 and all(len(c.marks) == n + 1 for c in made)  # warm-up unclocked
    assert [(e.start_ns, e.end_ns) for e in prof.events[:n]] == [
        (1000 + 10 * i, 1010 + 10 * i) for i in range(n)]
    assert prof.events[n].start_ns == 2000


def test_repeat_must_be_positive(plan, inputs):
    with pytest.raises(go.GraphError, match="repeat"):
        plan.profile(**inputs, repeat=0)
    with pytest.raises(go.GraphError, match="warmup"):
        profile_plan(plan, plan.bind((), inputs), repeat=1, warmup=-1)


# ------------------------------------------------------------------------ plan unchanged


def test_profiling_keeps_results_inputs_and_later_calls_intact(plan, inputs):
    copies = {k: v.copy() for k, v in inputs.items()}
    before = plan(**inputs)
    check(before, inputs)
    kept = {k: v.copy() for k, v in before.items()}
    plan.profile(**inputs, repeat=4, warmup=2)
    for k, v in inputs.items():
        np.testing.assert_array_equal(v, copies[k])
    for k, v in before.items():  # returned arrays are not reused by the profiler
        np.testing.assert_array_equal(v, kept[k])
    after = plan(**inputs)
    check(after, inputs)
    for k in before:
        assert not np.shares_memory(after[k], before[k])
    # the profiler checks its arena out of the plan and back in, like a call does
    assert plan.arena_stats["created"] == 1
    assert plan.arena_stats["reused"] >= 7


def test_profile_takes_inputs_positionally(plan, inputs):
    prof = plan.profile(inputs["x"], inputs["w"], inputs["b"], repeat=1, warmup=0)
    assert len(prof.events) == len(plan.steps)


# ---------------------------------------------------------------------------- renderings


def test_summary_names_every_step_and_a_total(plan, inputs):
    prof = plan.profile(**inputs, repeat=2)
    text = prof.summary()
    for s in plan.steps:
        assert s.name in text
        assert s.kernel.impl in text
    lines = text.splitlines()
    assert len(lines) == len(plan.steps) + 2
    assert lines[-1].startswith(f"total ({len(plan.steps)} steps)")
    assert "GFLOP/s" in lines[0] and "GB/s" in lines[0]
    assert str(prof) == text


def test_summary_uses_the_median_over_repeats():
    evs = [event("s", 0, r, start, start + dur, flops=2000, nbytes=4000)
           for r, (start, dur) in enumerate([(0, 1000), (5000, 3000), (9000, 1100)])]
    row = Profile(evs, 3).summary().splitlines()[1].split()
    assert row[0] == "s" and float(row[1]) == pytest.approx(1.1)  # 1100 ns in us
    assert float(row[3]) == pytest.approx(2000 / 1100, rel=1e-2)


def test_chrome_trace_is_valid_trace_event_json(plan, inputs, tmp_path):
    prof = plan.profile(**inputs, repeat=3)
    path = tmp_path / "trace.json"
    prof.to_chrome_trace(path)
    doc = json.loads(path.read_text())
    assert doc["displayTimeUnit"] == "ms"
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == len(prof.events)
    assert all(e["ts"] >= 0 and e["dur"] >= 0 for e in xs)
    assert {e["tid"] for e in xs} == {0, 1, 2}
    assert [e["name"] for e in xs] == [e.name for e in prof.events]
    for e, s in zip(xs, plan.steps):
        assert e["args"]["flops"] == s.flops and e["args"]["bytes"] == s.bytes
        assert e["args"]["shape"] == list(s.shape) and e["args"]["impl"] == s.kernel.impl
        assert e["args"]["srcs"] == list(s.srcs)


def test_to_json_round_trips(plan, inputs, tmp_path):
    prof = plan.profile(**inputs, repeat=2)
    text = prof.to_json(tmp_path / "p.json")
    doc = json.loads((tmp_path / "p.json").read_text())
    assert json.loads(text) == doc == json.loads(json.dumps(prof.to_dict()))
    assert doc["repeat"] == 2 and len(doc["events"]) == len(prof.events)
    assert doc["events"][0]["name"] == plan.steps[0].name


def test_plot_writes_a_png(plan, inputs, tmp_path):
    pytest.importorskip("matplotlib")
    prof = plan.profile(**inputs, repeat=2)
    prof.plot(tmp_path / "t.png")
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_names_the_install(plan, inputs, tmp_path, monkeypatch):
    prof = plan.profile(**inputs, repeat=1)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes the import fail
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match="pip install matplotlib"):
        prof.plot(tmp_path / "t.png")
    assert not (tmp_path / "t.png").exists()


# ----------------------------------------------------------------------------- roofline


def event(name, step, repeat, start, end, flops, nbytes, dtype="float32"):
    return StepEvent(name, ("op",), start, end, flops, nbytes, step=step, repeat=repeat,
                     shape=(1,), dtype=dtype, impl="test")


PEAKS = {"gflops": 100.0, "gbs": 10.0}  # 100 FLOP/ns, 10 B/ns


def hand_built():
    ms = 1_000_000
    steps = [  # name, flops, bytes, duration ns, dtype
        ("gemm", 2 * 10**9, 12 * 10**6, 25 * ms, "float32"),  # 20 ms compute, 1.2 ms memory
        ("copy", 0, 2 * 10**8, 25 * ms, "float32"),  # 20 ms at the bandwidth peak
        ("tiny", 1000, 1000, 5_000, "float32"),  # 5 us: below the overhead floor
        ("slow", 10**6, 10**6, 10 * ms, "float32"),  # roofline 0.1 ms, took 100x that
    ]
    evs, t = [], 0
    for r in range(3):
        for i, (name, fl, nb, dur, dt) in enumerate(steps):
            evs.append(event(name, i, r, t, t + dur + 1000 * (r - 1), fl, nb, dt))
            t += dur + 2000
    return Profile(evs, 3)


def test_bottlenecks_classes_by_roofline_against_given_peaks():
    recs = hand_built().bottlenecks(peaks=PEAKS)
    assert all(isinstance(b, Bottleneck) for b in recs)
    got = {b.name: b for b in recs}
    assert {k: b.bound for k, b in got.items()} == {
        "gemm": "compute", "copy": "memory", "tiny": "overhead", "slow": "overhead"}
    assert got["gemm"].time_ns == 25_000_000  # the median of 25 ms -1 us, +0, +1 us
    assert got["gemm"].gflops == pytest.approx(80.0)
    assert got["gemm"].fraction == pytest.approx(0.8)
    assert got["copy"].gbs == pytest.approx(8.0) and got["copy"].fraction == pytest.approx(0.8)
    assert [b.name for b in recs][-1] == "tiny"  # slowest first
    text = str(recs)
    assert text.startswith("peaks:") and all(n in text for n in got)
    assert "compute" in str(got["gemm"]) and "80.0%" in str(got["gemm"])


def test_bottleneck_thresholds_and_per_precision_peaks():
    prof = hand_built()
    loose = {b.name: b.bound for b in prof.bottlenecks(PEAKS, overhead_ns=1000,
                                                       overhead_factor=1000)}
    assert loose["tiny"] == "memory" and loose["slow"] == "memory"  # 10x more ns per byte
    # the float32 key overrides "gflops" for float32 steps: 80 GFLOP/s is 8x a 10 peak
    slow32 = dict(PEAKS, gflops_float32=10.0)
    assert {b.name: b.fraction for b in prof.bottlenecks(slow32)}["gemm"] == pytest.approx(8.0)


def test_measured_peaks_are_positive_and_cached(monkeypatch):
    monkeypatch.setattr(profiler, "_peaks", None)
    peaks = profiler.machine_peaks()
    assert set(peaks) == {"gflops_float32", "gflops_float64", "gbs", "gbs_l1", "gbs_l2",
                          "gbs_l3"}
    assert all(v > 0 for v in peaks.values())
    tiers = [peaks[k] for k, _ in profiler.CACHE_TIERS] + [peaks["gbs"]]
    assert tiers == sorted(tiers, reverse=True)   # smaller working sets: higher roofs
    monkeypatch.setattr(profiler, "_best_seconds", None)  # a second measurement would fail
    assert profiler.machine_peaks() == peaks
    assert len(hand_built().bottlenecks()) == 4


def test_a_step_that_fits_a_cache_tier_is_held_to_that_tier_not_dram():
    # 1000 bytes fit the L1 working set: against a 40 GB/s L1 roof the "tiny" step's
    # 0.2 GB/s is 0.5 %, where DRAM's 10 GB/s would have made it 2 %; above every tier the
    # DRAM roof applies. Before, a cache-resident step read "195 % of peak" against DRAM.
    tiers = dict(PEAKS, gbs_l1=40.0, gbs_l2=20.0, gbs_l3=15.0)
    assert profiler.bandwidth_roof(tiers, 1000) == ("gbs_l1", 40.0)
    assert profiler.bandwidth_roof(tiers, 100 << 10) == ("gbs_l2", 20.0)
    assert profiler.bandwidth_roof(tiers, 1 << 30) == ("gbs", 10.0)
    assert profiler.bandwidth_roof(PEAKS, 1000) == ("gbs", 10.0)   # no tiers given: DRAM
    got = {b.name: b for b in hand_built().bottlenecks(tiers, overhead_ns=1000,
                                                        overhead_factor=1000)}
    assert got["tiny"].roof == "gbs_l1" and got["tiny"].fraction == pytest.approx(0.2 / 40)
    assert got["copy"].roof == "gbs" and got["gemm"].roof == "FLOP/s"
    assert "gbs_l1" in str(got["tiny"])


def test_measured_fractions_of_peak_stay_near_or_below_one():
    # a real plan of small, cache-resident elementwise steps against measured peaks: no
    # step may read far above 100 % (the tiers make each roof the one its data sits in)
    g = go.Graph("cached")
    x = g.input("x", (64, 64), "float64")
    g.output(go.exp(x) + go.tanh(x * 2.0))
    plan = go.compile(g, backend="numpy", cache=False)
    prof = plan.profile(np.ones((64, 64)), repeat=20)
    for b in prof.bottlenecks():
        assert b.fraction < 1.5, str(b)
