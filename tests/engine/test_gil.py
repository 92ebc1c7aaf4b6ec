"""GIL evidence with known answers: a spinning thread holds the GIL, two spinners wait for each other,
a sleeper is blocked (never waiting for the GIL), NumPy's dot runs without it; the sampler's own
cost; the extension on every installed Python; and the pure path that says why it sees nothing."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import opprof
from opprof.engine import gil, handoff
from opprof.engine.gil import GilSampler, GilSamples, GilState
from tests.helpers import retried

native = pytest.mark.skipif(not gil.AVAILABLE, reason=f"no GIL evidence here: {gil.WHY_NOT}")
ROOT = Path(__file__).resolve().parents[2]


def spin(seconds: float) -> tuple[int, int]:
    """Pure Python busy work holding the GIL (but for the interpreter's forced switches); its span."""
    start = time.monotonic_ns()
    end = start + int(seconds * 1e9)
    while time.monotonic_ns() < end:
        pass
    return start, time.monotonic_ns()


class Worker(threading.Thread):
    """A registered thread that runs ``work`` and keeps its slot and what it returned."""

    def __init__(self, work: Callable[[], tuple[int, int]]) -> None:
        super().__init__(daemon=True)
        self.work = work
        self.slot = -1
        self.span = (0, 0)
        self.ready = threading.Event()
        self.go = threading.Event()

    def run(self) -> None:
        slot = gil.register_thread()
        assert slot is not None
        self.slot = slot
        self.ready.set()
        self.go.wait()
        try:
            self.span = self.work()
        finally:
            gil.unregister_thread()


@pytest.fixture
def sampler() -> Iterator[GilSampler]:
    s = GilSampler()
    s.drain()  # nothing left over from another test
    yield s
    s.stop()
    s.drain()


def scheduled_share(samples: GilSamples, slot: int, state: GilState) -> float:
    """The share of ``state`` among the samples in which the OS gave the thread a CPU (not RUNNABLE,
    not HELD_OFF_CPU): the known answers hold on a machine of its own; a busy one (other test runs
    on these 2 cores, a BLAS pool's threads beside a spinning holder) adds samples without a CPU,
    which the sampler tells apart, on top."""
    st = samples.state(slot)
    had_cpu = (st != GilState.RUNNABLE) & (st != GilState.HELD_OFF_CPU) & (st != GilState.NONE)
    return float((st[had_cpu] == state).mean()) if had_cpu.any() else 0.0


def run_workers(sampler: GilSampler, *workers: Worker, main: Callable[[], object] | None = None) -> tuple[GilSamples, int]:
    """Register the main thread, start the workers (each waits for go), sample while they work."""
    main_slot = sampler.register_thread()
    assert main_slot is not None
    for w in workers:
        w.start()
        assert w.ready.wait(5)
    assert sampler.start()
    time.sleep(0.01)
    for w in workers:
        w.go.set()
    if main is not None:
        main()
    for w in workers:
        w.join(10)
    sampler.stop()
    return sampler.drain(), main_slot


def _a_spinning_thread_holds_the_gil_while_the_main_thread_sleeps_blocked(sampler: GilSampler) -> None:
    w = Worker(lambda: spin(0.1))
    samples, main_slot = run_workers(sampler, w, main=lambda: time.sleep(0.3))
    win = samples.window(*w.span)
    assert len(win) > 100, samples.stats  # ~500 at 5 kHz; fewer when the machine is busy
    assert scheduled_share(win, w.slot, GilState.HELD) >= 0.9
    main_states = samples.window(w.span[0] + 1_000_000, w.span[1]).state(main_slot)  # 1 ms: main goes to sleep
    # Sleeping in time.sleep: blocked, never waiting for the GIL. A sample or two may find it
    # RUNNABLE (woken by the kernel and not yet scheduled, with other test processes on the cores).
    counts = np.unique(main_states, return_counts=True)
    assert not (main_states == GilState.WAIT).any(), counts
    assert (main_states == GilState.BLOCKED).mean() >= 0.98, counts
    assert samples.threads[w.slot].name == w.name and samples.threads[w.slot].native_id == w.native_id
    assert samples.threads[main_slot].registered and not samples.threads[w.slot].registered


def _two_spinners_wait_for_the_gil_the_other_holds(sampler: GilSampler) -> None:
    a, b = Worker(lambda: spin(0.3)), Worker(lambda: spin(0.3))
    samples, _ = run_workers(sampler, a, b)
    win = samples.window(max(a.span[0], b.span[0]), min(a.span[1], b.span[1]))
    assert len(win) > 100, samples.stats
    for me, other in ((a, b), (b, a)):
        assert scheduled_share(win, me.slot, GilState.WAIT) >= 0.3, (me.slot, samples.stats)
        waiting = win.state(me.slot) == GilState.WAIT
        assert (win.holder[waiting] == other.slot).mean() >= 0.9  # the other one holds it meanwhile
    waits = samples.intervals().of(a.slot, GilState.WAIT)
    assert len(waits) > 10 and (waits.holder == b.slot).mean() >= 0.8
    # ~5 ms turns: the switch interval, the signature of a holder that never blocks
    assert 1e6 < np.median(waits.end - waits.start) < 20e6


def _a_sleeping_thread_is_blocked_not_waiting_while_another_spins(sampler: GilSampler) -> None:
    nap_ns = 150_000_000

    def nap() -> tuple[int, int]:
        start = time.monotonic_ns()
        time.sleep(nap_ns / 1e9)
        return start, time.monotonic_ns()  # after it took the GIL back

    sleeper, spinner = Worker(nap), Worker(lambda: spin(0.3))
    samples, _ = run_workers(sampler, spinner, sleeper)
    start, back = sleeper.span
    woke = start + nap_ns
    st, t = samples.state(sleeper.slot), samples.t
    asleep = (t >= start + 1_000_000) & (t < woke)
    assert asleep.sum() > 100, samples.stats
    assert (st[asleep] == GilState.BLOCKED).all()
    waited = t[(st == GilState.WAIT) & (t >= start) & (t <= back)]
    assert (waited >= woke).all()  # in its nap, only after it woke (before it, go.set() woke it too)
    waits = samples.intervals().of(sleeper.slot, GilState.WAIT)
    after = waits.start >= woke - samples.period_ns
    waited_ns = int((waits.end[after] - waits.start[after]).sum())
    assert (waits.holder[after] == spinner.slot).all()
    # It waits one switch interval for the spinner to give the GIL up, plus the time the spinner,
    # holding it, had no CPU to notice the request (its CPU clock stood still: none on an idle
    # machine; other test runs on these 2 cores).
    i = np.flatnonzero((t >= woke) & (t <= back + samples.period_ns))
    gaps = np.diff(t[i[0] - 1 : i[-1] + 1])
    spinner_ran = (samples.on_cpu[i] & (np.uint64(1) << np.uint64(spinner.slot))) != 0
    stalled_ns = int(gaps[~spinner_ran].sum())
    assert waited_ns - stalled_ns < sys.getswitchinterval() * 1e9 + 3e6, (waited_ns, stalled_ns)


def _numpy_dot_runs_without_the_gil_while_the_main_thread_spins(sampler: GilSampler) -> None:
    x = np.random.default_rng(0).random((2000, 2000))

    def dot() -> tuple[int, int]:  # one dot of ~0.2 s: it takes the GIL back once, at its end
        start = time.monotonic_ns()
        x @ x
        return start, time.monotonic_ns()

    w = Worker(dot)

    def spin_until_done() -> None:  # the main thread holds the GIL for as long as the dot runs
        deadline = time.monotonic() + 10
        while w.is_alive() and time.monotonic() < deadline:
            pass

    samples, main_slot = run_workers(sampler, w, main=spin_until_done)
    win = samples.window(*w.span)
    assert len(win) > 50, samples.stats
    assert scheduled_share(win, w.slot, GilState.RUNNING_WITHOUT_GIL) >= 0.5, samples.stats
    assert scheduled_share(win, w.slot, GilState.WAIT) <= 0.1
    assert scheduled_share(win, main_slot, GilState.HELD) >= 0.9


@native
def test_a_spinning_thread_holds_the_gil_while_the_main_thread_sleeps_blocked(sampler: GilSampler) -> None:
    retried(lambda: _a_spinning_thread_holds_the_gil_while_the_main_thread_sleeps_blocked(sampler))


@native
def test_two_spinners_wait_for_the_gil_the_other_holds(sampler: GilSampler) -> None:
    retried(lambda: _two_spinners_wait_for_the_gil_the_other_holds(sampler))


@native
def test_a_sleeping_thread_is_blocked_not_waiting_while_another_spins(sampler: GilSampler) -> None:
    retried(lambda: _a_sleeping_thread_is_blocked_not_waiting_while_another_spins(sampler))


@native
def test_numpy_dot_runs_without_the_gil_while_the_main_thread_spins(sampler: GilSampler) -> None:
    retried(lambda: _numpy_dot_runs_without_the_gil_while_the_main_thread_spins(sampler))


@native
def test_samples_are_on_the_clock_of_monotonic_ns_and_perf_counter_ns(sampler: GilSampler) -> None:
    before, perf = time.monotonic_ns(), time.perf_counter_ns()
    assert abs(perf - before) < 1_000_000  # the same CLOCK_MONOTONIC on Linux
    sampler.register_thread()
    sampler.start()
    time.sleep(0.02)
    sampler.stop()
    after = time.monotonic_ns()
    samples = sampler.drain()
    assert len(samples) > 20 and before <= samples.t[0] and samples.t[-1] <= after
    assert (np.diff(samples.t) > 0).all()


@native
def test_start_stop_drain_twice_and_register_is_idempotent(sampler: GilSampler) -> None:
    slot = sampler.register_thread()
    assert sampler.register_thread() == slot
    (me,) = [th for th in sampler.threads() if th.slot == slot]
    assert me.native_id == threading.get_native_id() and me.ident == threading.get_ident() and me.name == "MainThread"
    assert sampler.start() and not sampler.start() and sampler.running
    time.sleep(0.01)
    assert sampler.stop() and not sampler.stop() and not sampler.running
    assert len(sampler.drain()) > 0 and len(sampler.drain()) == 0
    with GilSampler() as s:
        time.sleep(0.01)
    assert not s.running and len(s.drain()) > 0


@native
def test_stats_count_one_sampler_run(sampler: GilSampler) -> None:
    """stats() is the last run's, from its start(): a profile's metadata once carried every run's
    samples and CPU since the process started (the tenth profile, ten times its own cost)."""
    sampler.register_thread()
    assert sampler.start()
    time.sleep(0.2)
    sampler.stop()
    long_run = sampler.stats()
    t0 = time.monotonic_ns()
    assert sampler.start()
    time.sleep(0.005)
    sampler.stop()
    wall = time.monotonic_ns() - t0
    short_run = sampler.stats()
    assert long_run["samples"] >= 40, long_run  # 5 kHz for 0.2 s: ~1,000 on an idle machine
    assert short_run["samples"] <= wall / sampler.period_ns + 2, (short_run, wall)
    # One thread's CPU time within its own run's wall time (the long run's alone is ~5 ms here).
    assert 0 < short_run["sampler_cpu_ns"] <= wall, (short_run, wall)
    assert len(sampler.drain()) == long_run["samples"] + short_run["samples"]


@native
def test_a_thread_that_exits_unregistered_is_noticed(sampler: GilSampler) -> None:
    slots: list[int | None] = []
    t = threading.Thread(target=lambda: slots.append(gil.register_thread()))
    sampler.start()
    t.start()
    t.join()
    time.sleep(0.02)
    sampler.stop()
    samples = sampler.drain()
    (slot,) = slots
    assert slot is not None and not samples.threads[slot].registered
    assert not (samples.alive[-5:] & (np.uint64(1) << np.uint64(slot))).any()


@native
def test_a_thread_registered_by_another_is_sampled_named_and_let_go(sampler: GilSampler) -> None:
    """A user's own thread (started before the profile, never registering itself) is registered
    by the profiling thread: its holding the GIL is seen under its name, a second call changes
    nothing, and once let go it is no longer sampled (its slot named only by samples taken)."""
    go, done = threading.Event(), threading.Event()
    span: list[tuple[int, int]] = []

    def loader() -> None:
        go.wait()
        span.append(spin(0.15))
        done.wait(10)

    t = threading.Thread(target=loader, name="UsersLoader", daemon=True)
    t.start()
    try:
        sampler.register_thread()
        first = sampler.register_others()
        assert sampler.register_others() == first  # idempotent
        by_native = {th.native_id: th.slot for th in sampler.threads()}
        assert t.native_id in by_native and by_native[t.native_id] in first
        assert sampler.start()
        go.set()
        while not span:
            time.sleep(0.01)  # blocked: the loader holds the GIL but at the switch interval
        sampler.stop()
        sampler.unregister_foreign()
        assert t.native_id not in {th.native_id for th in sampler.threads()}
        assert threading.get_native_id() in {th.native_id for th in sampler.threads()}  # its own stays
        samples = sampler.drain()
        slot = by_native[t.native_id]
        assert samples.threads[slot].name == "UsersLoader" and not samples.threads[slot].registered
        win = samples.window(*span[0])
        assert len(win) > 30, samples.stats
        assert scheduled_share(win, slot, GilState.HELD) >= 0.8
    finally:
        go.set()
        done.set()
        t.join(10)


@native
def test_threads_started_while_following_register_for_the_profile_and_keep_any_earlier_hook(sampler: GilSampler) -> None:
    """While following, a new ``threading.Thread`` registers itself (until the profile lets go of
    it), a profile hook set before still runs in it, and off gives ``threading`` its hook back."""
    seen: set[int] = set()

    def earlier(frame: object, event: str, arg: object) -> None:
        # Not current_thread(): the hook also runs as a thread's bootstrap returns, after threading
        # has let go of it, and there it made a dummy Thread whose deletion failed at exit (3.13).
        seen.add(threading.get_native_id())

    threading.setprofile(earlier)
    try:
        sampler.follow_new_threads(True)
        sampler.follow_new_threads(True)  # idempotent: not a hook around a hook
        ready, done = threading.Event(), threading.Event()
        t = threading.Thread(target=lambda: (ready.set(), done.wait(10)), name="StartedMeanwhile")
        t.start()
        assert ready.wait(10)
        assert t.native_id in {th.native_id for th in sampler.threads()}
        sampler.follow_new_threads(False)
        assert threading.getprofile() is earlier
        sampler.unregister_foreign()
        assert t.native_id not in {th.native_id for th in sampler.threads()}
        done.set()
        t.join()
        assert t.native_id in seen
        after = threading.Thread(target=lambda: None)
        after.start()
        after.join()
        assert after.native_id not in {th.native_id for th in sampler.threads()}
    finally:
        threading.setprofile(None)
        sampler.follow_new_threads(False)
        sampler.unregister_foreign()


def test_registering_others_skips_a_thread_without_python_and_the_caller(sampler: GilSampler) -> None:
    """Only threads with a Python thread state here are taken (a thread that ended, an ident of
    nothing); the caller registers itself, not as another's."""
    if not gil.AVAILABLE:
        assert sampler.register_others() == []
        return
    t = threading.Thread(target=lambda: None)
    t.start()
    t.join()
    from opprof.engine import _gil  # type: ignore[attr-defined]

    assert _gil.register_others([(t.ident, t.native_id), (threading.get_ident(), threading.get_native_id())]) == []
    with pytest.raises(TypeError):
        _gil.register_others([("x", 1)])
    _gil.unregister_foreign()


@native
def test_a_forked_child_starts_with_no_sampler_and_can_start_its_own(sampler: GilSampler) -> None:
    sampler.register_thread()
    assert sampler.start()
    pid = os.fork()
    if pid == 0:  # the child: only the C sampler's calls, then out
        ok = not sampler.running and sampler.threads() == [] and sampler.start() and sampler.stop()
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert sampler.running and os.waitstatus_to_exitcode(status) == 0


@native
def test_the_samplers_own_cpu_cost_at_5_khz_with_4_threads(sampler: GilSampler, record_property: Callable[..., None]) -> None:
    """The goal is at most 2 % of one core (a benchmark row judges it). Reported here, and bounded
    loosely: on this kind of VM a timer wake-up alone costs ~18 us of the waking thread's CPU (a
    bare C loop of clock_nanosleep at 5 kHz: ~9 %), so 5 kHz cannot reach 2 %; 1 kHz came to
    1.7-3.8 %."""
    cost = gil.sampler_cpu_share((200_000, 1_000_000), 1.0)
    record_property("sampler_cpu_share_5khz", cost[200_000])
    record_property("sampler_cpu_share_1khz", cost[1_000_000])
    print(f"sampler CPU, 4 threads: {cost[200_000]:.1%} of a core at 5 kHz, {cost[1_000_000]:.1%} at 1 kHz")
    assert cost[200_000] < 0.25 and cost[1_000_000] < 0.06


@native
@pytest.mark.skipif(not handoff.AVAILABLE, reason=f"no compiled hand-offs here: {handoff.WHY_NOT}")
def test_a_thread_parked_in_the_engines_queue_says_so_and_costs_the_sampler_no_proc_reads(sampler: GilSampler) -> None:
    """Known answer: a registered thread that works briefly on each of 150 items and parks in a
    work queue between them is BLOCKED whenever it is parked, and the sampler learns that from the
    thread itself: next to none of its samples read /proc (a thread parked on a threading.Event,
    which cannot say so, is read at each sample where it ran since the last: the control)."""
    assert handoff.tells_sampler()

    def run(parked_in_queue: bool) -> tuple[GilSamples, dict[str, Any], int, list[tuple[int, int]]]:
        q = handoff.work_queue(handoff.QueueKind.ENGINE)
        bell, done, slot = threading.Event(), threading.Event(), []

        def worker() -> None:
            got = gil.register_thread()
            assert got is not None
            slot.append(got)
            try:
                while not done.is_set():
                    if parked_in_queue:
                        q.get()
                    else:
                        bell.wait()
                        bell.clear()
                    end = time.monotonic_ns() + 200_000  # 0.2 ms of Python, then park again
                    while time.monotonic_ns() < end:
                        pass
            finally:
                gil.unregister_thread()

        gil.unregister_thread()  # the main thread, woken at every put, would be read then: not sampled
        t = threading.Thread(target=worker, daemon=True)
        t.start()
        time.sleep(0.02)
        assert sampler.start()
        windows = []
        for _ in range(150):
            t0 = time.monotonic_ns()
            q.put(1) if parked_in_queue else bell.set()
            time.sleep(0.0015)
            windows.append((t0 + 600_000, time.monotonic_ns()))  # it worked 0.2 ms, then parked
        sampler.stop()
        stats = sampler.stats()
        done.set()
        q.put(None) if parked_in_queue else bell.set()
        t.join(5)
        return sampler.drain(), stats, slot[0], windows

    samples, stats, slot, windows = run(True)
    state, t = samples.state(slot), samples.t
    parked = np.zeros(len(t), dtype=bool)
    for lo, hi in windows:
        parked |= (t >= lo) & (t < hi)
    assert parked.sum() > 50, stats
    counts = np.unique(state[parked], return_counts=True)
    assert (state[parked] == GilState.BLOCKED).mean() >= 0.95, counts
    # The worker, the one thread sampled, ran 150 times between samples: its parks were never read
    # (a sample that caught it working or taking the GIL back may be).
    assert stats["proc_reads"] <= 15, stats
    # Parked on an Event, it is read once after each time it ran (its later idle samples reuse that).
    _, control, _, _ = run(False)
    assert control["proc_reads"] >= 100, control


@contextlib.contextmanager
def spinning(n: int) -> Iterator[None]:
    """``n`` registered threads spinning in pure Python (contending for the GIL) while the block runs."""
    stop = threading.Event()

    def spin() -> None:
        gil.register_thread()
        while not stop.is_set():
            pass
        gil.unregister_thread()

    threads = [threading.Thread(target=spin) for _ in range(n)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join()


def sampled_for(seconds: float, sampler: GilSampler) -> GilSamples:
    """What ``sampler`` took in ``seconds`` (the calling thread registered)."""
    sampler.register_thread()
    sampler.drain()
    try:
        assert sampler.start()
        time.sleep(seconds)
    finally:
        sampler.stop()
    return sampler.drain()


@native
def test_the_sampler_slows_down_while_nothing_contends_and_not_while_threads_do() -> None:
    """Known answer: 0.6 s of an idle program sampled at 1 ms with a 4 ms quiet period takes about
    150 samples, not 600; two spinners contending for the GIL bring the 1 ms rate back."""

    def count(spinners: int) -> int:
        with spinning(spinners):
            return len(sampled_for(0.6, GilSampler(1_000_000, quiet_period_ns=4_000_000)))

    def check() -> None:
        quiet, busy = count(0), count(2)
        assert 100 <= quiet <= 250, quiet
        # Not always the full 600: where the kernel keeps no short slice for the sampler (before
        # Linux 6.12), it is kept waiting a tick (~4 ms) at many of the GIL's switches (306-480 here).
        assert busy >= 1.8 * quiet and busy >= 270, (quiet, busy)

    retried(check)


@native
def test_sustained_contention_backs_off_after_its_onset_at_the_fine_rate() -> None:
    """Known answer: two spinners contend for 0.6 s. Sampled at 1 ms, backing off to 8 ms once they
    have contended for 200 ms, the first 200 ms keep the 1 ms spacing and the last 400 ms take ~50
    samples, not ~400 (without the back-off ~450 in all here: the OS keeps the sampler waiting a
    tick, ~4 ms, at many of the GIL's switches)."""

    def sampled(sustained_ns: int) -> GilSamples:
        sampler = GilSampler(
            1_000_000, quiet_period_ns=4_000_000, sustained_period_ns=sustained_ns, sustained_after_ns=200_000_000
        )
        return sampled_for(0.6, sampler)

    def check() -> None:
        plain, backed = sampled(0), sampled(8_000_000)
        gaps = np.diff(backed.t)
        onset = backed.t < backed.t[0] + 150_000_000
        late = backed.t > backed.t[0] + 300_000_000
        assert np.median(gaps[onset[1:]]) < 1_500_000, np.median(gaps[onset[1:]])
        assert np.median(gaps[late[1:]]) >= 7_000_000, np.median(gaps[late[1:]])
        assert len(backed) <= 0.6 * len(plain), (len(backed), len(plain))

    with spinning(2):
        time.sleep(0.02)  # both spinning: the sampler sees contention from its first sample on
        retried(check)


@native
def test_the_sampler_keeps_its_rate_through_the_gils_switches() -> None:
    """Known answer: two spinners hand the GIL over every 5 ms. Asking for the short slice (Linux
    6.12+), the sampler is not kept waiting a tick at the switches: of the gaps between samples, far
    fewer are over 2.5 ms than without it (0-3 against 21-26 in 0.3 s here; where the host itself
    holds the vCPUs back, both have some)."""

    def holes(short_slice: bool) -> tuple[int, bool]:
        sampler = GilSampler(1_000_000, quiet_period_ns=4_000_000, nice=0, short_slice=short_slice)
        got = sampled_for(0.3, sampler)
        return int((np.diff(got.t) > 2_500_000).sum()), bool(sampler.stats()["slice_applied"])

    def check() -> None:
        with_slice = [holes(True) for _ in range(2)]
        if not all(applied for _, applied in with_slice):
            pytest.skip("this kernel keeps no custom time slice for SCHED_OTHER (before Linux 6.12)")
        without = [holes(False)[0] for _ in range(2)]
        assert sum(n for n, _ in with_slice) <= max(6, sum(without) // 3), (with_slice, without)

    with spinning(2):
        time.sleep(0.02)
        retried(check)


@native
def test_stopping_does_not_wait_out_the_samplers_sleep() -> None:
    """Known answer: a sampler asleep for 1 s between samples stops at once when told (it waits on a
    futex that stop() wakes), not at its next sample: every profile's stop() used to wait out up to
    a quiet period (4 ms)."""
    s = GilSampler(1_000_000_000)
    s.register_thread()
    assert s.start()
    time.sleep(0.02)  # asleep until its first sample, 1 s away
    t = time.perf_counter()
    assert s.stop()
    took = time.perf_counter() - t
    assert took < 0.1, took
    s.drain()


def test_the_sampler_refuses_a_negative_sustained_period() -> None:
    with pytest.raises(ValueError, match="sustained_period_ns"):
        GilSampler(1_000_000, sustained_period_ns=-1).start()
    with pytest.raises(ValueError, match="period_ns"):
        GilSampler(0)
    with pytest.raises(ValueError, match="quiet_period_ns"):
        GilSampler(1_000_000, quiet_period_ns=-5)


# ---------------------------------------------------------------------------- without the extension
def test_the_pure_path_says_why_and_records_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gil.PURE_ENV, "1")
    module, why = gil._load()
    assert module is None and why == "forced off by OPPROF_PURE=1"
    monkeypatch.setattr(gil, "_native", None)
    monkeypatch.setattr(gil, "WHY_NOT", why)
    monkeypatch.setattr(gil, "AVAILABLE", False)
    with GilSampler() as s:
        assert s.register_thread() is None and not s.running and s.threads() == [] and s.stats() == {}
    samples = s.drain()
    assert not s.available and s.why_not == why
    assert len(samples) == 0 and not samples.available and samples.why_not == why
    assert len(samples.intervals()) == 0


@pytest.mark.e2e  # a fresh interpreter
def test_opprof_pure_1_in_a_fresh_interpreter() -> None:
    code = "from opprof.engine import gil; print(gil.AVAILABLE, gil.WHY_NOT)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "OPPROF_PURE": "1"})
    assert out.stdout.strip() == "False forced off by OPPROF_PURE=1", out.stderr


@pytest.mark.e2e  # builds a wheel (pip fetches setuptools for its isolated build)
def test_an_install_without_a_c_compiler_works_and_says_why(tmp_path: Path) -> None:
    """setuptools' optional=True has let a failed compile fail the install in some versions
    (setuptools#1969): build a wheel with CC=/bin/false from the tracked files, for real."""
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    env = {**os.environ, "CC": "/bin/false", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "wheels"), str(src)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = (tmp_path / "wheels").glob("opprof-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.endswith(".so")], names
    assert "opprof-0.1.0.data/data/etc/jupyter/jupyter_server_config.d/opprof.json" in names
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    code = (
        "import opprof; from opprof.engine import gil, handoff; print(opprof.__file__); print(gil.AVAILABLE); "
        "print(gil.WHY_NOT); print(handoff.AVAILABLE); print(handoff.WHY_NOT)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
    )  # fmt: skip
    where, available, why, timed, why_untimed = out.stdout.splitlines()
    assert where.startswith(str(tmp_path / "site")) and available == "False", out.stderr
    assert "not installed" in why and "no C compiler" in why
    assert timed == "False" and "opprof.engine._handoff" in why_untimed and "no C compiler" in why_untimed


# ---------------------------------------------------------------------------- intervals, known answers
def _samples(
    holder: list[int],
    on_cpu: list[int],
    gil_wait: list[int],
    blocked: list[int],
    runnable: list[int] | None = None,
    alive: int = 0b11,
) -> GilSamples:
    n = len(holder)
    u = lambda xs: np.array(xs, np.uint64)
    return GilSamples(
        t=np.arange(n, dtype=np.int64) * 100, holder=np.array(holder, np.int8), locked=np.array(holder) >= 0,
        on_cpu=u(on_cpu), gil_wait=u(gil_wait), blocked=u(blocked), runnable=u(runnable or [0] * n), alive=u([alive] * n),
        switches=np.zeros(n, np.uint32), period_ns=100,
        threads={0: gil.GilThread(0, 10, 1, "a", True), 1: gil.GilThread(1, 11, 2, "b", True)},
    )  # fmt: skip


def test_states_and_intervals_from_samples_with_known_answers() -> None:
    # slot 0 holds for 3 samples, then runs without the GIL (NumPy), then blocks, then waits for a CPU;
    # slot 1 waits while 0 holds, then holds, then waits for an unregistered holder (-1).
    s = _samples(
        holder=[0, 0, 0, 1, 1, -1],
        on_cpu=[0b11, 0b01, 0b01, 0b11, 0b10, 0b00],
        gil_wait=[0b10, 0b10, 0b10, 0b00, 0b00, 0b10],
        blocked=[0, 0, 0, 0, 0b01, 0],
        runnable=[0, 0, 0, 0, 0, 0b01],
    )
    assert list(s.state(0)) == [1, 1, 1, 4, 3, 5]
    assert list(s.state(1)) == [2, 2, 2, 1, 1, 2]
    iv = s.intervals()
    rows = sorted(zip(iv.slot.tolist(), iv.state.tolist(), iv.start.tolist(), iv.end.tolist(), iv.holder.tolist(), strict=True))
    assert rows == sorted(
        [
            (0, GilState.HELD, 0, 300, -1),
            (0, GilState.RUNNING_WITHOUT_GIL, 300, 400, -1),
            (0, GilState.BLOCKED, 400, 500, -1),
            (0, GilState.RUNNABLE, 500, 600, -1),
            (1, GilState.HELD, 300, 500, -1),
            (1, GilState.WAIT, 0, 300, 0),
            (1, GilState.WAIT, 500, 600, -1),
        ]
    )
    assert (np.diff(iv.start) >= 0).all() and iv.of(1, GilState.WAIT).total_ns() == 400
    assert s.share(1, GilState.WAIT) == pytest.approx(4 / 6)


@st.composite
def _any_samples(draw: st.DrawFn) -> GilSamples:
    n = draw(st.integers(1, 12))
    masks = st.lists(st.integers(0, 0b111), min_size=n, max_size=n)
    t = np.cumsum(np.array(draw(st.lists(st.integers(1, 50), min_size=n, max_size=n)), np.int64))
    u = lambda xs: np.array(xs, np.uint64)
    return GilSamples(
        t=t, holder=np.array(draw(st.lists(st.integers(-1, 2), min_size=n, max_size=n)), np.int8),
        locked=np.ones(n, bool), on_cpu=u(draw(masks)), gil_wait=u(draw(masks)), blocked=u(draw(masks)),
        runnable=u(draw(masks)), alive=u(draw(masks)), switches=np.zeros(n, np.uint32), period_ns=10,
        threads={k: gil.GilThread(k, 10 + k, k + 1, f"t{k}", True) for k in range(3)},
    )  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(_any_samples())
def test_the_intervals_are_each_threads_states_sample_by_sample(s: GilSamples) -> None:
    # Oracle: each slot's state at each sample (state(), its own known answers above) is the state
    # of the one interval of that slot around the sample, and a WAIT's holder is that sample's;
    # NONE is no interval. Each interval starts at a sample and runs to the slot's next change.
    iv = s.intervals()
    assert (np.diff(iv.start) >= 0).all()
    for slot in s.threads:
        mine = iv.slot == slot
        a, b, state, holder = iv.start[mine], iv.end[mine], iv.state[mine], iv.holder[mine]
        for i, want in enumerate(s.state(slot).tolist()):
            at = np.flatnonzero((a <= s.t[i]) & (s.t[i] < b))
            if want == GilState.NONE:
                assert not len(at)
                continue
            (k,) = at
            assert state[k] == want and holder[k] == (s.holder[i] if want == GilState.WAIT else -1)
        assert set(a.tolist()) <= set(s.t.tolist())
        ends = sorted(b.tolist())
        assert all(e in s.t.tolist() or e == s.t[-1] + s.period_ns for e in ends)


def test_a_holder_whose_cpu_clock_stood_still_held_the_gil_off_a_cpu() -> None:
    # Slot 0 holds through four samples; its CPU clock moves in the first and last windows only
    # (the OS gave its core to other work in between): HELD, HELD_OFF_CPU twice, HELD. Slot 1
    # waited on it throughout, one WAIT run under one holder.
    s = _samples(holder=[0, 0, 0, 0], on_cpu=[0b01, 0b00, 0b00, 0b01], gil_wait=[0b10] * 4, blocked=[0] * 4)
    assert list(s.state(0)) == [GilState.HELD, GilState.HELD_OFF_CPU, GilState.HELD_OFF_CPU, GilState.HELD]
    iv = s.intervals()
    rows = sorted(zip(iv.slot.tolist(), iv.state.tolist(), iv.start.tolist(), iv.end.tolist(), iv.holder.tolist(), strict=True))
    assert rows == [
        (0, GilState.HELD, 0, 100, -1),
        (0, GilState.HELD, 300, 400, -1),
        (0, GilState.HELD_OFF_CPU, 100, 300, -1),
        (1, GilState.WAIT, 0, 400, 0),
    ]


def test_a_thread_not_alive_has_no_state_and_no_interval() -> None:
    s = _samples(holder=[-1, -1], on_cpu=[0, 0], gil_wait=[0, 0], blocked=[0, 0], alive=0b01)
    assert list(s.state(1)) == [GilState.NONE] * 2
    assert set(s.intervals().slot.tolist()) == {0}


def test_the_record_dtype_is_the_c_struct() -> None:
    assert gil.RECORD_DTYPE.itemsize == 56
    source = (ROOT / "opprof/engine/_gil.c").read_text()
    assert "_Static_assert(sizeof(record_t) == 56" in source


# ---------------------------------------------------------------------------- every installed Python
PER_VERSION_SCRIPT = textwrap.dedent(
    """
    import json, struct, threading, time
    import _gil
    REC = struct.Struct("=qQQQQQIbB2x")
    assert REC.size == _gil.RECORD_SIZE, (REC.size, _gil.RECORD_SIZE)

    def spin(sec):
        start = time.monotonic_ns(); end = start + int(sec * 1e9)
        while time.monotonic_ns() < end:
            pass
        return start, time.monotonic_ns()

    def worker(out, sec, go):
        slot = _gil.register_thread(); go.wait(); out[slot] = spin(sec); _gil.unregister_thread()

    def run(n, sec):
        out, go = {}, threading.Event()
        ts = [threading.Thread(target=worker, args=(out, sec, go)) for _ in range(n)]
        for t in ts: t.start()
        time.sleep(0.02); _gil.start(); time.sleep(0.01); go.set()
        for t in ts: t.join()
        _gil.stop()
        data, table = _gil.drain()
        recs = [REC.unpack_from(data, i) for i in range(0, len(data), REC.size)]
        lo = max(s for s, e in out.values()); hi = min(e for s, e in out.values())
        return [r for r in recs if lo <= r[0] < hi], sorted(out)

    _gil.register_thread()
    one, (slot,) = run(1, 0.1)
    held = sum(r[7] == slot for r in one) / len(one)
    two, (a, b) = run(2, 0.3)
    def wait_share(s):  # among the samples where the OS gave the thread a CPU (r[5]: runnable)
        had_cpu = [r for r in two if not r[4] >> s & 1]
        return sum(bool(r[2] >> s & 1) for r in had_cpu) / len(had_cpu)
    waits = [wait_share(s) for s in (a, b)]
    print(json.dumps({"held": held, "waits": waits, "samples": [len(one), len(two)], "stats": _gil.stats()}))
    """
)


def _pythons() -> list[str]:
    return sorted(glob.glob("/root/.pyenv/versions/3.1[0-3].*/bin/python"))


@pytest.mark.e2e
@pytest.mark.parametrize("minor", ["3.10", "3.11", "3.12", "3.13"])
def test_the_extension_builds_and_sees_the_gil_on_each_python(minor: str, tmp_path: Path) -> None:
    """Built as setup.py's build_ext would (the interpreter's CC and headers; 3.12+ carry no
    setuptools of their own), imported as a top-level _gil, and the spin tests run on it."""
    found = [p for p in _pythons() if f"/versions/{minor}." in p]
    if not found:
        pytest.skip(f"no Python {minor} under /root/.pyenv/versions")
    python = found[-1]
    config = json.loads(
        subprocess.run(
            [python, "-c", "import json, sysconfig as s; print(json.dumps([s.get_config_var('CC'), "
             "s.get_paths()['include'], s.get_config_var('EXT_SUFFIX'), s.get_config_var('Py_GIL_DISABLED')]))"],
            capture_output=True, text=True, check=True,
        ).stdout
    )  # fmt: skip
    cc, include, suffix, _ = config
    compiler = shlex.split(cc or "cc")
    build = subprocess.run(
        [*compiler, "-shared", "-fPIC", "-O2", "-std=gnu11", "-Wall", f"-I{include}",
         str(ROOT / "opprof/engine/_gil.c"), "-o", str(tmp_path / f"_gil{suffix}")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    assert "warning" not in build.stderr, build.stderr
    (tmp_path / "check.py").write_text(PER_VERSION_SCRIPT)

    def attempt() -> None:
        run = subprocess.run([python, "check.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        result = json.loads(run.stdout)
        print(minor, {k: result[k] for k in ("held", "waits", "samples")})
        assert result["held"] >= 0.9, result
        assert min(result["waits"]) >= 0.3, result

    retried(attempt)


@native
def test_threads_that_come_and_go_never_run_out_of_slots() -> None:
    """Engines made and dropped (a test suite, a notebook re-run) start hundreds of threads that
    register; exited threads' slots come back without a drain, and an engine thread past the
    slots is left unsampled rather than failing."""
    for _ in range(3 * gil.MAX_THREADS):
        t = threading.Thread(target=gil.register_thread)  # exits without unregistering
        t.start()
        t.join()
    got: list[int | None] = []
    t = threading.Thread(target=lambda: got.append(gil.register_thread()))
    t.start()
    t.join()
    assert got and got[0] is not None
    for _ in range(2):  # and the engine's own never raise
        opprof.set_engine("threaded", workers=40, custom_workers=40)
        x = opprof.nd.ones((2, 2))
        assert float((x + 1).asnumpy().sum()) == 8.0
    opprof.set_engine("threaded")
