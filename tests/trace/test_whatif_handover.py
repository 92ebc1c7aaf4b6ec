"""The what-if model's thread hand-offs: a woken thread takes the GIL back before it runs anything,
and what a hand-off and a GIL handover cost is read off the recording's exact runs. Known answers
on hand-made thread states, and one on a real run where the program holds the GIL."""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest

import opprof
import opprof as mx
from opprof import nd
from opprof.engine import gil, handoff
from opprof.trace import Trace
from opprof.trace.analysis.whatif import what_if
from opprof.trace.analysis.whatif.gil import (
    ASLEEP_NS,
    MIN_ASLEEP_TRANSFERS,
    MIN_TRANSFERS,
    gil_transfer_ns,
    held_after_handoff,
    hop_held_ns,
    one_holder,
)
from opprof.trace.analysis.whatif.prepare import prepare
from opprof.trace.columns import ROLE_CODE
from opprof.trace.records import Role
from opprof.trace.synthetic import synthetic_trace
from opprof.trace.threadstates import GIL_METADATA, ThreadState, ThreadStates
from tests.helpers import MyAddOneProp

B, R, W, H = ThreadState.BLOCKED, ThreadState.RUNNABLE, ThreadState.WAIT, ThreadState.HELD
US = 1_000


def _states(rows: list[tuple[int, ThreadState, int, int]]) -> ThreadStates:
    tid, state, a, b = (np.array(c) for c in zip(*rows, strict=True))
    return ThreadStates(tid, state.astype(np.int8), a, b, np.full(len(tid), -1), period_ns=1_000_000)


def _tid(trace: Trace, prefix: str) -> int:
    return next(th.tid for th in trace.threads if th.name.startswith(prefix))


def _spaced_starts(trace: Trace, tid: int, n: int) -> list[int]:
    """``n`` span starts on ``tid``, each 100 µs or more after the thread's previous span start."""
    starts = np.unique(trace.table.start[trace.table.tid == tid])
    keep = starts[1:][np.diff(starts) >= 100 * US]
    assert len(keep) >= n
    return keep[:n].tolist()


def test_hop_held_is_from_holding_the_gil_to_the_next_span() -> None:
    trace = synthetic_trace(600)
    eng, cus = _tid(trace, "opprof-engine-"), _tid(trace, "opprof-custom-")
    rows: list[tuple[int, ThreadState, int, int]] = []
    for s in _spaced_starts(trace, eng, 6):  # woken, waited for the GIL, 3 µs of the engine's Python
        rows += [(eng, B, s - 60 * US, s - 40 * US), (eng, R, s - 40 * US, s - 20 * US), (eng, W, s - 20 * US, s - 3 * US)]
    for s in _spaced_starts(trace, cus, 6):  # woken to a free GIL: 7 µs of set-up
        rows += [(cus, B, s - 60 * US, s - 30 * US), (cus, R, s - 30 * US, s - 7 * US)]
    trace.thread_states = _states(rows)
    assert hop_held_ns(trace) == {"engine": 3 * US, "custom": 7 * US}
    trace.thread_states = None
    assert hop_held_ns(trace) == {}


def _handovers(trace: Trace, gap: int, count: int, wake_median: int, waited: int = 5 * US, asleep: int = 0) -> None:
    """``count`` handovers: engine-0 woken and waiting for the GIL ``waited`` ns while engine-1
    runs, then parks ``gap`` ns before engine-0 holds it; then ``asleep`` more whose waiter had
    waited 200 µs when engine-1 parked, each handed the GIL 15 µs after the park."""
    e0 = _tid(trace, "opprof-engine-0")
    e1 = _tid(trace, "opprof-engine-1")
    rows: list[tuple[int, ThreadState, int, int]] = []
    for k in range(count + asleep):
        t = k * 1_000 * US
        w, g = (waited, gap) if k < count else (200 * US, 15 * US)
        park = t + 10 * US + w
        got = park + g
        rows += [(e0, B, t - 100 * US, t), (e0, R, t, t + 10 * US), (e0, W, t + 10 * US, got)]
        rows += [(e1, H, t - 100 * US, park), (e1, B, park, got + 300 * US), (e1, R, got + 300 * US, got + 310 * US)]
    trace.thread_states = _states(rows)
    trace.metadata[GIL_METADATA] = {"handoffs": {"all": {"wake_ns_median": wake_median}}}


def test_a_gil_handover_is_measured_from_the_holders_park() -> None:
    trace = synthetic_trace(200)
    _handovers(trace, 12 * US, MIN_TRANSFERS, 30 * US)
    assert gil_transfer_ns(trace) == 12 * US
    _handovers(trace, 12 * US, MIN_TRANSFERS, 8 * US)  # never more than waking a parked thread
    assert gil_transfer_ns(trace) == 8 * US
    _handovers(trace, 12 * US, MIN_TRANSFERS - 1, 30 * US)  # too few: at once, not the wake
    assert gil_transfer_ns(trace) == 0
    trace.metadata[GIL_METADATA] = {"transfer_ns": 5 * US}  # a model's prediction says its own
    assert gil_transfer_ns(trace) == 5 * US


def test_a_wait_named_by_two_holders_is_one_handover() -> None:
    """Known answer: the same handovers, each wait for the GIL named by engine-1 until its park and
    by no one after it (the recording names the holder of each part of a wait: two runs back to
    back). The wait still ends when engine-0 holds the GIL, 12 µs after the park: read as the first
    run's end, each handover was 0 µs."""
    trace = synthetic_trace(200)
    _handovers(trace, 12 * US, MIN_TRANSFERS, 30 * US)
    ts = trace.thread_states
    assert ts is not None
    e1 = _tid(trace, "opprof-engine-1")
    parks = ts.start[(ts.tid == e1) & (ts.state == B)]
    rows: list[tuple[int, int, int, int, int]] = []
    for tid, state, a, b in zip(ts.tid.tolist(), ts.state.tolist(), ts.start.tolist(), ts.end.tolist(), strict=True):
        cut = [int(p) for p in parks if a < p < b]
        if state == W and cut:
            rows += [(tid, state, a, cut[0], e1), (tid, state, cut[0], b, -1)]
        else:
            rows.append((tid, state, a, b, -1))
    cols = [np.array(c) for c in zip(*rows, strict=True)]
    trace.thread_states = ThreadStates(cols[0], cols[1].astype(np.int8), cols[2], cols[3], cols[4], period_ns=1_000_000)
    assert int(np.count_nonzero(trace.thread_states.state == W)) == 2 * MIN_TRANSFERS
    assert gil_transfer_ns(trace) == 12 * US


def test_a_park_is_no_handover_where_another_thread_held_the_gil_after_it() -> None:
    """Known answer: a convoy. Engine-1 parks 15 µs before the waiter holds the GIL (an asleep
    handover of 15 µs), but in four of seven a Python on the custom thread held the GIL from just
    after the park for 5 ms (its switch interval), and the waiter took it from that Python, not from
    the park: those are not handovers, so the asleep transfer stays 15 µs (with them, the median
    was 5 ms, and a replay of such a recording ran its spinner 20 ms late, +60-118 %)."""
    trace = synthetic_trace(400)
    _handovers(trace, 2 * US, MIN_TRANSFERS, 30 * US, asleep=MIN_ASLEEP_TRANSFERS)
    assert gil_transfer_ns(trace, asleep=True) == 15 * US
    ts = trace.thread_states
    assert ts is not None
    e0, e1, cus = _tid(trace, "opprof-engine-0"), _tid(trace, "opprof-engine-1"), _tid(trace, "opprof-custom-")
    states = [ThreadState(s) for s in ts.state.tolist()]
    rows = list(zip(ts.tid.tolist(), states, ts.start.tolist(), ts.end.tolist(), strict=True))
    for k in range(4):  # four more asleep waits, each ended by the spinner's switch interval
        t = (MIN_TRANSFERS + MIN_ASLEEP_TRANSFERS + k) * 10_000 * US
        park = t + 210 * US
        got = park + 5_000 * US
        rows += [(e0, B, t - 100 * US, t), (e0, R, t, t + 10 * US), (e0, W, t + 10 * US, got)]
        rows += [(e1, H, t - 100 * US, park), (e1, B, park, got + 300 * US), (e1, R, got + 300 * US, got + 310 * US)]
        rows += [(cus, H, park + 1 * US, got)]
    trace.thread_states = _states(rows)
    assert gil_transfer_ns(trace, asleep=True) == 15 * US


def test_a_thread_that_waited_long_is_handed_the_gil_by_its_own_measure() -> None:
    """Known answer: handovers to a thread that had waited 5 µs take 2 µs, to one that had waited
    200 µs (asleep: its CPU halted) 15 µs; each kind is measured on its own, the asleep one not
    capped by the wake of a parked thread (the engine's pool polls, so that median is the poll's),
    and with too few of them it is at once."""
    trace = synthetic_trace(400)
    _handovers(trace, 2 * US, MIN_TRANSFERS, 1 * US // 2, asleep=MIN_ASLEEP_TRANSFERS)
    assert gil_transfer_ns(trace) == US // 2  # the wake's cap
    assert gil_transfer_ns(trace, asleep=True) == 15 * US
    _handovers(trace, 2 * US, MIN_TRANSFERS, 30 * US, asleep=MIN_ASLEEP_TRANSFERS)
    assert (gil_transfer_ns(trace), gil_transfer_ns(trace, asleep=True)) == (2 * US, 15 * US)
    _handovers(trace, 2 * US, MIN_TRANSFERS, 30 * US, waited=ASLEEP_NS, asleep=MIN_ASLEEP_TRANSFERS - 1)
    assert gil_transfer_ns(trace) == 0  # every waiter had waited long: none short enough to measure
    assert gil_transfer_ns(trace, asleep=True) == 2 * US  # the median of 5 x 2 µs and 2 x 15 µs
    _handovers(trace, 2 * US, MIN_TRANSFERS, 30 * US, asleep=MIN_ASLEEP_TRANSFERS - 1)
    assert gil_transfer_ns(trace, asleep=True) == 0


mx.operator.register("HandoverStep")(MyAddOneProp)


def test_a_custom_op_threads_gil_work_after_its_dummy_wait_is_measured_to_its_park() -> None:
    """Known answer on a real recording's families, its thread states made by hand: the custom-op
    thread parks 7 µs after pushing a call's ``Dummy_Wait``, except after the first call, 90 µs:
    the median, 7 µs. Where it did not park after a call (it found the next one waiting), the next
    park comes after its next Python and is no call's: parks after calls 1, 2 and 6 only, 7 µs."""
    mx.set_engine("threaded", workers=2, custom_workers=1)
    x = nd.ones((4, 4))
    with opprof.profile() as prof:
        for _ in range(6):
            x = nd.Custom(x, op_type="HandoverStep")
        x.wait_to_read()
    trace = prof.trace
    assert trace is not None and trace.ops is not None
    t, ops = trace.table, trace.ops
    dummies = np.flatnonzero(t.role == ROLE_CODE[Role.DUMMY_WAIT])
    pushes = np.sort(ops.push[ops.rows_of(t.op[dummies])]).tolist()
    python = np.flatnonzero(t.role == ROLE_CODE[Role.PYTHON])
    tid = int(t.tid[python[0]])
    assert len(pushes) == 6 and (t.tid[python] == tid).all()

    def parks(after: dict[int, int]) -> ThreadStates:
        rows: list[tuple[int, ThreadState, int, int]] = []
        for k, late in after.items():
            park = pushes[k] + late
            rows += [(tid, B, park, park + 1), (tid, R, park + 1, park + 2)]
        return _states(rows)

    trace.metadata[GIL_METADATA] = {}
    trace.thread_states = parks({0: 90 * US, 1: 7 * US, 2: 7 * US, 3: 7 * US, 4: 7 * US, 5: 7 * US})
    assert prepare(trace).tail_held == 7 * US  # as the model reads it, from its own pairs of Python and Dummy_Wait
    trace.thread_states = parks({0: 7 * US, 1: 7 * US, 5: 7 * US})
    assert prepare(trace).tail_held == 7 * US
    trace.metadata[GIL_METADATA] = {"tail_held_ns": 3 * US}  # a model's prediction says its own
    assert prepare(trace).tail_held == 3 * US


def spin_then_read(spin_s: float) -> None:
    x = nd.ones((4, 4))
    y = x + 1  # pushed: a worker is woken for it ...
    t = time.perf_counter()
    while time.perf_counter() - t < spin_s:  # ... while the program holds the GIL
        pass
    y.wait_to_read()


@pytest.mark.skipif(not (gil.AVAILABLE and handoff.AVAILABLE), reason=f"no GIL evidence here: {gil.WHY_NOT or handoff.WHY_NOT}")
def test_a_woken_worker_runs_once_the_program_lets_the_gil_go() -> None:
    """The program spins 20 ms right after a push, with a switch interval longer than that: the
    op runs only when the program blocks in its read, in the recording and in the model. (A model
    that started the op when its worker woke drew it 20 ms early, waiting inside its own span.)"""
    spin = 0.020
    interval = sys.getswitchinterval()
    mx.set_engine("threaded", workers=2, custom_workers=1)
    try:
        sys.setswitchinterval(0.1)
        spin_then_read(0.001)  # threads warm
        with opprof.profile() as prof:
            spin_then_read(spin)
    finally:
        sys.setswitchinterval(interval)
    trace = prof.trace
    w = what_if(trace)
    for label, t in (("recording", trace), ("model", w.trace)):
        ops = t.ops
        assert ops is not None
        for op in (s for s in t.spans if s.name in ("_ones", "_plus_scalar")):
            push = int(ops.push[ops.rows_of(np.array([op.op]))[0]])
            assert op.start - push >= spin * 1e9 * 0.9, (
                f"{label}: {op.name} started {(op.start - push) / 1e6:.2f} ms after its push"
            )
            assert op.end - op.start < spin * 1e9 / 4, (
                f"{label}: {op.name}'s span holds the wait ({(op.end - op.start) / 1e6:.2f} ms)"
            )


# ---------------------------------------------------------------- one holder at a time
def test_one_holder_leaves_alone_pieces_that_never_overlap() -> None:
    a, b = np.array([0, 100 * US]), np.array([100 * US, 200 * US])
    wait, share = np.zeros(2, dtype=np.int64), np.ones(2)
    w2, s2 = one_holder(a, b, wait, share)
    assert w2.tolist() == [0, 0] and s2.tolist() == [1.0, 1.0]


def test_one_holder_splits_an_overlap_by_rank_then_by_density() -> None:
    """Two pieces taken to hold the GIL through the same 100 µs cannot both have: of equal rank
    each keeps half and waited the other half; of unequal rank the higher keeps it all and the
    lower waited all along. A piece holding half its time (share 0.5) beside one holding all of
    it, equal rank: held 1/3 and 2/3 of the overlap, what it lost now its wait."""
    a, b = np.array([0, 0]), np.array([100 * US, 100 * US])
    zero, full = np.zeros(2, dtype=np.int64), np.ones(2)
    w, s = one_holder(a, b, zero, full)
    assert w.tolist() == [50 * US, 50 * US] and s.tolist() == [1.0, 1.0]  # held all of what is left
    w, s = one_holder(a, b, zero, full, np.array([1, 0]))
    assert w.tolist() == [0, 100 * US] and s[0] == 1.0
    w, s = one_holder(a, b, zero, np.array([0.5, 1.0]))
    held = (100 * US - w) * s
    assert held == pytest.approx([100 * US / 3, 200 * US / 3], abs=2)
    # Partly overlapping: only the overlap is shared (a 100 µs piece, another over its last 50 µs).
    w, s = one_holder(np.array([0, 50 * US]), np.array([100 * US, 100 * US]), zero, full)
    assert w.tolist() == [25 * US, 25 * US]


def test_a_pool_thread_holds_the_gil_from_its_hand_off_to_its_next_park() -> None:
    """After a timed wait for the GIL (exact) a thread runs until its next state (its park): that
    stretch is taken to hold the GIL; a wait followed at once by another state gives none."""
    states = _states(
        [
            (7, B, 0, 100 * US),
            (7, W, 100 * US, 530 * US),  # woken at 100 µs, held the GIL from 530 µs ...
            (7, B, 879 * US, 1000 * US),  # ... until it parked at 879 µs
            (8, W, 0, 50 * US),
            (8, H, 50 * US, 60 * US),  # sampled right after: nothing unrecorded
        ]
    )
    tid, a, b = held_after_handoff(states)
    assert (tid.tolist(), a.tolist(), b.tolist()) == ([7], [530 * US], [879 * US])
