"""The GIL's evidence in a real profile: known answers (a spinning Python holds the GIL, a sleeping
one is blocked, two spinners take turns), the holder named, and the pure path saying why not."""

from __future__ import annotations

import time

import numpy as np
import pytest

import opprof
from opprof import nd
from opprof.engine import gil
from opprof.trace.analysis.gil import PYTHON_GIL_PARTS
from opprof.trace.text import why_text
from tests.helpers import register_op, retried, spin

needs_gil = pytest.mark.skipif(not gil.AVAILABLE, reason=f"no GIL evidence here: {gil.WHY_NOT}")


class _Spin(opprof.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        spin(0.04)  # pure Python: holds the GIL but at the switch interval
        self.assign(out_data[0], req[0], in_data[0] + 1)


class _Nap(opprof.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        time.sleep(0.04)  # releases the GIL
        self.assign(out_data[0], req[0], in_data[0] + 1)


register_op("GilProfileSpin", _Spin)


register_op("GilProfileNap", _Nap)


def _profile(*op_types: str, gil: bool = True) -> opprof.trace.Trace:
    opprof.set_engine("threaded", workers=2, custom_workers=2)
    try:
        x = nd.ones((4, 4))
        nd.Custom(x, op_type="GilProfileNap").wait_to_read()  # the pool's threads exist
        with opprof.profile(gil=gil) as prof:
            for op in op_types:
                nd.Custom(x, op_type=op)
            nd.waitall()
    finally:
        opprof.set_engine("threaded")
    assert prof.trace is not None and prof.trace.validate() == []
    return prof.trace


def _parts(trace: opprof.trace.Trace, name: str) -> dict[str, int]:
    parts, _ = trace.analysis().python_gil_by_type[name]
    return dict(zip(PYTHON_GIL_PARTS, parts.tolist(), strict=True))


@needs_gil
def test_two_spinning_pythons_wait_for_the_gil_held_by_each_other() -> None:
    def check() -> None:
        trace = _profile("GilProfileSpin", "GilProfileSpin")
        meta = trace.metadata["gil"]
        assert meta["period_ns"] > 0 and meta["samples"] > 0
        # This profile's own sampler, not every one the process ran: its CPU within the profile's time.
        assert 0 < meta["sampler_cpu_ns"] <= trace.metadata["t_stop_ns"] - trace.metadata["t_start_ns"], meta
        p = _parts(trace, "GilProfileSpin")
        python = sum(p.values())
        sampled = python - p["not sampled"] - p["CPU wait"]
        assert p["GIL wait"] >= 0.3 * sampled, p  # they take turns at the switch interval
        assert p["on CPU"] >= 0.3 * sampled, p
        _, holders = trace.analysis().python_gil_by_type["GilProfileSpin"]
        assert holders and "GilProfileSpin::pure_python" in holders[0].running
        assert holders[0].thread.startswith("opprof-custom-")
        line = next(x for x in why_text(trace).splitlines() if "GilProfileSpin (" in x)
        assert "waiting for the GIL" in line and "held by GilProfileSpin::pure_python on opprof-custom-" in line

    retried(check)


@needs_gil
def test_a_sleeping_python_is_blocked_not_waiting_for_the_gil() -> None:
    def check() -> None:
        trace = _profile("GilProfileNap", "GilProfileSpin")
        nap, spin = _parts(trace, "GilProfileNap"), _parts(trace, "GilProfileSpin")
        assert nap["blocked"] >= 0.7 * sum(nap.values()), nap
        # Waking from its nap, the sleeper may wait up to one switch interval for the spinner.
        assert nap["GIL wait"] <= 0.25 * sum(nap.values()), nap
        assert spin["on CPU"] >= 0.6 * (sum(spin.values()) - spin["not sampled"] - spin["CPU wait"]), spin
        states = trace.thread_states
        assert states is not None and set(np.unique(states.tid).tolist()) <= {t.tid for t in trace.threads}

    retried(check)


def test_without_the_sampler_the_trace_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gil, "AVAILABLE", False)
    monkeypatch.setattr(gil, "WHY_NOT", "forced off for this test")
    trace = _profile("GilProfileNap")
    assert trace.thread_states is None
    assert trace.metadata["gil"] == {"why_not": "forced off for this test"}
    assert trace.analysis().python_gil is None


def test_turned_off_a_profile_takes_no_gil_evidence_and_says_so() -> None:
    """``profile(gil=False)``: no samples and no timed hand-offs, the readers say the evidence was
    turned off (not that the GIL was never held), and the next profile samples as before."""
    from opprof.profiler.gil import TURNED_OFF

    trace = _profile("GilProfileNap", "GilProfileSpin", gil=False)
    assert trace.thread_states is None
    assert trace.metadata["gil"] == {"why_not": TURNED_OFF}
    assert trace.analysis().python_gil is None
    text = why_text(trace)
    assert TURNED_OFF in text and "held by" not in text
    assert not gil.GilSampler(1_000_000).running  # no sampler was left behind
    if gil.AVAILABLE:
        again = _profile("GilProfileNap")
        assert again.thread_states is not None and again.metadata["gil"]["samples"] > 0


def test_a_timed_gil_wait_names_the_holder_the_hand_off_read_over_the_samples() -> None:
    """Known answers for a profile's exact hand-offs: a GIL wait is held by the thread whose state
    the hand-off read as it woke, whatever the coarser samples say around then; where the address
    is no sampled thread's, several's (memory reused), the getter's own, or 0 (the GIL was free),
    the samples name the holder instead (here: thread "b", sampled holding throughout)."""
    import time as _time

    from opprof.engine import handoff
    from opprof.profiler.gil import GilRecording
    from opprof.trace.records import ThreadInfo
    from opprof.trace.threadstates import ThreadState

    threads = {
        0: gil.GilThread(0, 10, 1, "a", True, tstate=0xA0),
        1: gil.GilThread(1, 11, 2, "b", True, tstate=0xB0),
        2: gil.GilThread(2, 12, 3, "c", True, tstate=0xC0),
        3: gil.GilThread(3, 13, 4, "d", False, tstate=0xD0),  # an exited thread whose memory ...
        4: gil.GilThread(4, 14, 5, "e", True, tstate=0xD0),  # ... a later one reused
    }
    n = 10
    u = lambda xs: np.array(xs, np.uint64)
    # Thread b (slot 1) sampled holding the GIL throughout; the others blocked.
    samples = gil.GilSamples(
        t=np.arange(n, dtype=np.int64) * 100, holder=np.full(n, 1, np.int8), locked=np.ones(n, bool),
        on_cpu=u([0b10] * n), gil_wait=u([0] * n), blocked=u([0b11101] * n), runnable=u([0] * n),
        alive=u([0b11111] * n), switches=np.zeros(n, np.uint32), period_ns=100, threads=threads,
    )  # fmt: skip
    rec = GilRecording(_time.perf_counter_ns)
    rec.samples = samples
    holders = [0xC0, 0xD0, 0xEE, 0xA0, 0]  # c; ambiguous; unknown; the getter's own; the GIL free
    r = np.zeros(len(holders), dtype=handoff.HANDOFF_DTYPE)
    for k, h in enumerate(holders):
        r[k] = (100 * k + 10, 100 * k + 20, 100 * k + 30, 100 * k + 80, 10, int(handoff.QueueKind.CUSTOM), h)
    rec.handoffs = handoff.Handoffs(r)
    infos = [ThreadInfo(t, name) for t, name in enumerate("abcde", start=1)]
    states = rec.thread_states(infos, {10 + k: k + 1 for k in range(5)}, 0, 1000)
    assert states is not None
    waits = (states.tid == 1) & (states.state == ThreadState.WAIT)
    assert states.start[waits].tolist() == [30, 130, 230, 330, 430]
    assert states.holder[waits].tolist() == [3, 2, 2, 2, 2]  # c exactly; the rest: b, by the samples


class _ShortNap(opprof.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        time.sleep(0.002)  # a sampling period or two: releases the GIL
        self.assign(out_data[0], req[0], in_data[0] + 1)


register_op("GilProfileShortNap", _ShortNap)


@needs_gil
@pytest.mark.parametrize("engine", ["naive", "threaded"])
def test_short_sleeps_are_blocked_to_the_profiles_end_and_on_a_cpu_only_as_long_as_its_clock_says(engine: str) -> None:
    """Known answer: a Python that sleeps 2 ms, three calls in a row on a quiet machine, is blocked
    for its sleep and on a CPU no longer than its thread's CPU clock says. The sampler, quiet,
    samples every 4 ms: the last call ended in no sampled state (0.8 ms of 2.1 "not sampled"),
    the first began before the first sample (0.9 ms), and a Python that had held the GIL at the
    sample before its sleep was called 0.84 ms "on CPU" where its clock said 0.1 ms. (A busy
    machine's run is tried again: there the thread waits for a CPU after its sleep, and the
    sampler, starved too, misses ticks.)"""

    def check() -> None:
        if engine == "naive":
            opprof.set_engine("naive")
        else:
            opprof.set_engine("threaded", workers=2, custom_workers=1)
        try:
            x = nd.ones((4, 4))
            nd.Custom(x, op_type="GilProfileShortNap").wait_to_read()
            with opprof.profile() as prof:
                for _ in range(3):
                    x = nd.Custom(x, op_type="GilProfileShortNap")
                nd.waitall()
        finally:
            opprof.set_engine("threaded")
        trace = prof.trace
        assert trace is not None and trace.validate() == []
        pg = trace.analysis().python_gil
        assert pg is not None
        assert len(pg.ns) == len(trace.custom_ops()) == 3
        on, gil_wait, blocked, cpu_wait, unsampled = range(len(PYTHON_GIL_PARTS))
        for parts in pg.ns:
            said = dict(zip(PYTHON_GIL_PARTS, parts.tolist(), strict=True))
            total = int(parts.sum())
            assert total > 0
            assert parts[blocked] + parts[cpu_wait] >= 0.75 * total, said  # off a CPU, not for the GIL
            assert parts[unsampled] <= 0.1 * total and parts[gil_wait] <= 0.1 * total, said
        # On a CPU, summed, no longer than the Pythons' CPU clocks said (a sample's edge is not a CPU).
        table = trace.table
        pys = table.role == opprof.trace.columns.ROLE_CODE[opprof.trace.Role.PYTHON]
        assert int(pg.ns[:, on].sum()) <= int(table.cpu[pys].sum()) + 1_000

    retried(check, tries=4, pause=0.2)


class _ShortSpin(opprof.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        spin(0.004)  # pure Python for 4 ms: the samples see it hold the GIL
        self.assign(out_data[0], req[0], in_data[0] + 1)


register_op("GilProfileShortSpin", _ShortSpin)


@needs_gil
def test_a_pool_thread_parked_at_the_end_is_blocked_from_its_park_not_held() -> None:
    """Known answer: a custom op's Python spins 4 ms, then its thread goes back to the pool and
    sleeps there while the program sleeps 20 ms more in the profile. From its park on, the thread
    is blocked to the profile's end, never holding the GIL. That park logs no hand-off (none came):
    before the waits in progress were read at the stop, the last sample that caught the thread
    holding the GIL was stretched over it to the next sample, 1.3-3.7 ms "held" after its Python in
    8 of 8 runs, and threads that waited meanwhile named it their GIL's holder."""
    opprof.set_engine("threaded", workers=2, custom_workers=1)
    try:
        x = nd.ones((4, 4))
        nd.Custom(x, op_type="GilProfileShortSpin").wait_to_read()  # the pool's thread exists
        with opprof.profile() as prof:
            nd.Custom(x, op_type="GilProfileShortSpin").wait_to_read()
            time.sleep(0.02)
    finally:
        opprof.set_engine("threaded")
    trace = prof.trace
    assert trace is not None and trace.validate() == [] and trace.thread_states is not None
    (pool,) = [th.tid for th in trace.threads if th.name.startswith("opprof-custom")]
    table = trace.table
    python_end = int(table.end[table.tid == pool].max())
    ts = trace.thread_states
    mine = np.flatnonzero(ts.tid == pool)
    # The engine's own Python after the forward (Dummy_Wait's push, back to the queue): ~40-200 µs here.
    after = python_end + 1_000_000
    held = np.isin(
        ts.state[mine], [opprof.trace.threadstates.ThreadState.HELD, opprof.trace.threadstates.ThreadState.HELD_OFF_CPU]
    )
    late = mine[held & (ts.end[mine] > after)]
    assert not len(late), [(int(ts.start[k] - python_end), int(ts.end[k] - python_end)) for k in late]
    last = mine[np.argmax(ts.end[mine])]
    assert ts.state[last] == opprof.trace.threadstates.ThreadState.BLOCKED
    assert int(ts.start[last]) <= after and int(ts.end[last]) >= python_end + 15_000_000
