"""What-if and ops too short for the GIL sampler to see inside one run: their share of the GIL is
read at the sampler's instants that fell inside the runs of their name (``name_shares``).

Known answers: hand-made thread states (a run of states begins at a sample and repeats it every
period), a brute-force count of the instants as the oracle, and real ops of 0.5 ms that sleep
(release the GIL: two workers halve the run) or spin (hold it: two workers change nothing)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import opprof
import opprof as mx
from opprof import nd
from opprof.engine import gil
from opprof.trace import Trace
from opprof.trace.analysis.whatif import WhatIf, what_if
from opprof.trace.analysis.whatif.gil import MIN_NAME_SAMPLES, name_shares
from opprof.trace.threadstates import HOLDING, ThreadState, ThreadStates
from tests.helpers import retried

pytestmark = pytest.mark.timeout(120)

HELD, WAIT, BLOCKED, RUNNING = (int(s) for s in (ThreadState.HELD, ThreadState.WAIT, ThreadState.BLOCKED, ThreadState.RUNNING))
MS = 1_000_000


def _states(runs: list[tuple[int, int, int, int]], period: int = MS) -> ThreadStates:
    """ThreadStates from (tid, state, start, end) runs."""
    tid, state, a, b = (list(c) for c in zip(*runs, strict=True))
    return ThreadStates(tid, state, a, b, [-1] * len(runs), period)


def _ops(pieces: list[tuple[int, int, int, int]]) -> tuple[np.ndarray, ...]:
    """(tid, start, end, name) columns of ops' runs."""
    return tuple(np.array(c, dtype=np.int64) for c in zip(*pieces, strict=True))


def test_ops_that_sleep_share_nothing_and_ops_that_run_python_hold_it() -> None:
    """Thread 1 blocked for 10 ms, thread 2 holding the GIL for 10 ms (instants every ms). Eight
    ops of name 0 on thread 1 and eight of name 1 on thread 2, each around one instant: shares 0
    and 1. Name 2 has three instants inside its runs (too few): NaN. Name 3's runs fall where thread
    1 waited for the GIL: a wait is no evidence (the model re-derives waits): NaN."""
    states = _states([(1, BLOCKED, 0, 10 * MS), (2, HELD, 0, 10 * MS), (3, BLOCKED, 0, 3 * MS), (3, WAIT, 3 * MS, 20 * MS)])
    pieces = [(1, k * MS - 100_000, k * MS + 200_000, 0) for k in range(1, 9)]
    pieces += [(2, k * MS - 100_000, k * MS + 200_000, 1) for k in range(1, 9)]
    pieces += [(3, k * MS - 100_000, k * MS + 200_000, 2) for k in range(0, 3)]
    pieces += [(3, k * MS - 100_000, k * MS + 200_000, 3) for k in range(5, 15)]
    tid, start, end, name = _ops(pieces)
    got = name_shares(states, tid, start, end, name)
    assert got[name == 0].tolist() == [0.0] * 8
    assert got[name == 1].tolist() == [1.0] * 8
    assert np.isnan(got[name == 2]).all()
    assert np.isnan(got[name == 3]).all()


def test_a_run_between_instants_sees_none_of_them() -> None:
    """Ops that begin after one instant and end before the next (a worker parked at every sample,
    woken between them for a short op) have no evidence: NaN, whatever the runs around them say."""
    states = _states([(1, BLOCKED, 0, 50 * MS)])
    tid, start, end, name = _ops([(1, k * MS + 100_000, k * MS + 400_000, 0) for k in range(40)])
    assert np.isnan(name_shares(states, tid, start, end, name)).all()


def test_mixed_instants_give_the_share_that_held() -> None:
    """Six instants inside name 0's runs while holding, two while running without the GIL: 0.75."""
    states = _states([(1, HELD, 0, 6 * MS), (1, RUNNING, 6 * MS, 8 * MS)])
    tid, start, end, name = _ops([(1, k * MS, k * MS + 10, 0) for k in range(8)])
    assert name_shares(states, tid, start, end, name).tolist() == [0.75] * 8


def test_without_sampled_states_nothing_is_known() -> None:
    tid, start, end, name = _ops([(1, k * MS, k * MS + 10, 0) for k in range(8)])
    assert np.isnan(name_shares(None, tid, start, end, name)).all()
    exact = ThreadStates([1], [HELD], [0], [10 * MS], [-1], 1)  # a model's own states: not samples
    assert np.isnan(name_shares(exact, tid, start, end, name)).all()


@settings(max_examples=150, deadline=None)
@given(
    runs=st.lists(st.tuples(st.integers(1, 3), st.sampled_from([HELD, WAIT, BLOCKED, RUNNING]), st.integers(1, 6)), max_size=12),
    ops=st.lists(st.tuples(st.integers(1, 3), st.integers(0, 40), st.integers(1, 5), st.integers(0, 2)), max_size=30),
)
def test_name_shares_count_the_instants_inside_each_names_runs(
    runs: list[tuple[int, int, int]], ops: list[tuple[int, int, int, int]]
) -> None:
    """Against brute force: per thread, runs laid end to end (period 1 ms), every instant (each run's
    start and each period after it) checked against every op's run of that thread."""
    period = MS
    laid: list[tuple[int, int, int, int]] = []
    at = {1: 0, 2: 0, 3: 0}
    for tid, state, periods in runs:
        laid.append((tid, state, at[tid], at[tid] + periods * period))
        at[tid] += periods * period
    # One thread's ops do not overlap: each op is [its slot's start, + its length) in slots of 6 ms.
    pieces = {
        (tid, slot): (tid, slot * 6 * MS + 300_000, slot * 6 * MS + 300_000 + length * MS, nm) for tid, slot, length, nm in ops
    }
    if not laid or not pieces:
        return
    states = _states(laid, period)
    tid, start, end, name = _ops(list(pieces.values()))
    got = name_shares(states, tid, start, end, name)
    held = {n: 0 for n in range(3)}
    seen = {n: 0 for n in range(3)}
    holding = {int(s) for s in HOLDING}
    for r_tid, state, a, b in laid:
        if state == WAIT:
            continue
        for x in range(a, b, period):
            for p_tid, s, e, nm in pieces.values():
                if p_tid == r_tid and s <= x < e:
                    seen[nm] += 1
                    held[nm] += state in holding
    for k in range(len(name)):
        nm = int(name[k])
        if seen[nm] >= MIN_NAME_SAMPLES:
            assert got[k] == pytest.approx(held[nm] / seen[nm])
        else:
            assert np.isnan(got[k])


# ---------------------------------------------------------------------------- real ops, real runs
def _spin() -> None:
    until = time.perf_counter() + 0.0005
    while time.perf_counter() < until:
        pass


def _nap() -> None:
    time.sleep(0.0005)


def _pushes(work: Callable[[], None], workers: int) -> Trace:
    """100 independent ops of ``work`` on ``workers`` engine workers, profiled."""
    engine = mx.set_engine("threaded", workers=workers)
    vs = [engine.new_var() for _ in range(100)]
    with opprof.profile() as prof:
        for v in vs:
            engine.push(work, writes=[v], name=work.__name__)
        nd.waitall()
    assert prof.trace is not None
    return prof.trace


def _predicted_on_two(work: Callable[[], None]) -> WhatIf:
    """The median of three recordings on one worker (by their spans' length), replayed on two."""
    recorded = sorted((_pushes(work, 1) for _ in range(3)), key=lambda t: t.table.length_ns)[1]
    return what_if(recorded, engine_threads=2)


@pytest.mark.e2e  # real runs, ~0.5 s
@pytest.mark.skipif(not gil.AVAILABLE, reason=f"no GIL evidence here: {gil.WHY_NOT}")
# The known answer read off the recording on one worker: ops that sleep release the GIL (the run
# halves), ops that spin hold it (nothing changes).
@pytest.mark.parametrize(("work", "low", "high"), [(_nap, 0.0, 0.6), (_spin, 0.9, 1.1)], ids=["sleeps", "spins"])
def test_a_second_worker_for_short_ops_is_predicted_by_what_the_ops_did_to_the_gil(
    work: Callable[[], None], low: float, high: float, restore_engine: None
) -> None:
    """100 ops of 0.5 ms recorded on one worker (the sampler at its quiet period: no instant in most
    runs), predicted on two: ops that sleep at most 0.6x the recording, ops that spin 0.9-1.1x.
    Before the sampler's instants were read per op name, ops that sleep were predicted to gain
    nothing (a run with no sample of its own was taken to hold the GIL)."""
    w = _predicted_on_two(work)
    ratio = w.predicted_ns / w.recorded_ns
    assert low <= ratio <= high, f"predicted {ratio:.2f}x the recording on two workers"


@pytest.mark.e2e  # real runs, ~1 s a try
@pytest.mark.skipif(not gil.AVAILABLE, reason=f"no GIL evidence here: {gil.WHY_NOT}")
@pytest.mark.parametrize("work", [_nap, _spin], ids=["sleeps", "spins"])
def test_a_second_worker_for_short_ops(work: Callable[[], None], restore_engine: None) -> None:
    """The same prediction against a real run on two workers, its end to end read off its own
    profile as the recording's is: within 15 % (2026-12-05: -0.2 to +2.8 % for ops that sleep,
    +1.4 to +5.5 % for ops that spin; they were +67 to +87 % off before the instants were read per
    name). The run's wall time around ``profile()`` is not that: it adds the profiler's start and
    the trace's build, ~3 ms on a 30 ms run, which read as the model predicting 8-20 % too fast."""

    def attempt() -> None:
        w = _predicted_on_two(work)
        real = statistics.median(what_if(_pushes(work, 2)).recorded_ns for _ in range(3))
        err = w.predicted_ns / real - 1
        print(f"recorded {w.recorded_ns / 1e6:.1f} ms, predicted on 2 {w.predicted_ns / 1e6:.1f} ms, real {real / 1e6:.1f} ms")
        assert abs(err) <= 0.15, f"predicted {err:+.1%} off the real run on two workers"

    retried(attempt)


def test_states_that_ask_for_any_number_of_instants_are_read_further_apart() -> None:
    """A hostile file's runs (20,000, each a day long at a 1 ms period: 1.7 * 10^12 instants; the
    first cut, 10,000 a run, still asked for 200 million) are read at most a million instants a
    thread, quickly, and still give a share."""
    day = 86_400 * 1_000 * MS
    runs = [(1, BLOCKED, k * day, (k + 1) * day) for k in range(20_000)]
    states = _states(runs)
    tid, start, end, name = _ops([(1, k * day, k * day + day // 2, 0) for k in range(20_000)])
    t = time.perf_counter()
    got = name_shares(states, tid, start, end, name)
    assert time.perf_counter() - t < 5
    assert got.tolist() == [0.0] * 20_000
