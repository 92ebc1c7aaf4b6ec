"""The what-if model's GIL (``whatif.gil.Gil``) on its own, driven by a small event loop: property
tests on random threads asking for random work. What each thread did is the model's log, and a
predicted trace is written from that log, so the log must account for every nanosecond: a wait the
log loses is counted as work when the prediction is replayed (the bug that made a prediction's
replay end 37 us late)."""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from opprof.trace.analysis.whatif.gil import ASLEEP_NS, Gil
from opprof.trace.threadstates import ThreadState

HELD, WAIT, BLOCKED = int(ThreadState.HELD), int(ThreadState.WAIT), int(ThreadState.BLOCKED)


@dataclass
class Run:
    """What the lock did with the threads' pieces: its log, and when each piece asked and ended."""

    log: list[tuple[int, int, int, int]] = field(default_factory=list)
    asked: list[tuple[int, int]] = field(default_factory=list)  # (thread, t) per piece, in order
    ended: list[tuple[int, int]] = field(default_factory=list)
    switches: int = 0


def drive(threads: list[list[tuple[int, int, int]]], interval: int, **gil_args: Any) -> Run:
    """Each thread: pieces (delay before asking, ns with the GIL, ns without), asked one after
    another; ``gil_args``: the lock's other keywords (its transfers)."""
    heap: list[tuple[int, int, int, int]] = []
    seq = [0]
    run = Run()

    def at(t: int, kind: int, arg: int) -> None:
        seq[0] += 1
        heapq.heappush(heap, (t, seq[0], kind, arg))

    def done(t: int, free: int, ev: int, arg: int) -> None:
        at(t + free, 1, arg)

    gil = Gil(
        interval,
        lambda t, gen: at(t, 0, gen),
        done,
        lambda k, s, a, b: run.log.append((k, s, a, b)) if b > a else None,
        **gil_args,
    )
    pos = [0] * len(threads)

    def ask(k: int, t: int) -> None:
        if pos[k] < len(threads[k]):
            delay, _held, _free = threads[k][pos[k]]
            at(t + delay, 2, k)

    for k in range(len(threads)):
        ask(k, 0)
    while heap:
        t, _, kind, arg = heapq.heappop(heap)
        if kind == 0:
            gil.event(t, arg)
        elif kind == 1:  # a piece ended: its thread asks for the next after its delay
            run.ended.append((arg, t))
            pos[arg] += 1
            ask(arg, t)
        else:
            _, held, free = threads[arg][pos[arg]]
            run.asked.append((arg, t))
            if held <= 0:
                if free > 0:
                    run.log.append((arg, BLOCKED, t, t + free))
                at(t + free, 1, arg)
            else:
                gil.request(t, arg, held, free, 1, arg)
    run.switches = gil.switches
    return run


pieces = st.lists(st.tuples(st.integers(0, 50), st.integers(0, 400), st.integers(0, 400)), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(threads=st.lists(pieces, min_size=1, max_size=4), interval=st.integers(1, 120))
def test_the_log_accounts_for_every_ns_and_one_thread_holds(threads: list[list[tuple[int, int, int]]], interval: int) -> None:
    run = drive(threads, interval)
    n = len(threads)
    # Every piece ended, in its thread's order.
    assert sorted(k for k, _ in run.ended) == sorted(k for k, ps in enumerate(threads) for _ in ps)
    # One holder at a time.
    held = sorted((a, b) for _, s, a, b in run.log if s == HELD)
    assert all(b0 <= a1 for (_, b0), (a1, _) in itertools.pairwise(held))
    for k in range(n):
        mine = sorted((a, b, s) for key, s, a, b in run.log if key == k)
        # A thread does one thing at a time...
        assert all(b0 <= a1 for (_, b0, _), (a1, _, _) in itertools.pairwise(mine))
        asks = [t for key, t in run.asked if key == k]
        ends = [t for key, t in run.ended if key == k]
        for (_delay, h, f), a, b in zip(threads[k], asks, ends, strict=True):
            inside = [(x, y, s) for x, y, s in mine if a <= x and y <= b]
            # ...and every ns of a piece, from its ask to its end, is logged: held, waiting or without it.
            assert sum(y - x for x, y, _ in inside) == b - a
            assert sum(y - x for x, y, s in inside if s == HELD) == max(h, 0)
            assert sum(y - x for x, y, s in inside if s == BLOCKED) == (f if h > 0 or f > 0 else 0)
    # Never idle while a thread waits: every wait ends when some thread takes the GIL.
    starts = {a for _, s, a, _ in run.log if s == HELD}
    assert all(b in starts for _, s, _, b in run.log if s == WAIT)


def test_a_waiter_behind_a_spinner_waits_one_switch_interval() -> None:
    """Known answer: thread 0 holds the GIL for 1000 ns of pure Python; thread 1 asks at 10 for 50 ns.
    CPython's waiter asks for a drop after one interval (100): thread 1 runs at 110-160 and its wait
    of 100 is logged from its ask."""
    run = drive([[(0, 1000, 0)], [(10, 50, 0)]], 100)
    assert (1, WAIT, 10, 110) in run.log
    assert (1, HELD, 110, 160) in run.log
    assert run.switches == 1
    assert dict(run.ended) == {1: 160, 0: 1050}


def test_handing_the_gil_to_a_waiter_costs_the_wake() -> None:
    """Known answer: with a transfer of 30 ns, thread 1 (waiting since 10) holds the GIL 30 ns after
    thread 0 let it go at 100, and the 30 ns are its wait; taking a free GIL costs nothing."""
    log = drive([[(0, 100, 0)], [(10, 50, 0)]], 1_000, transfer_ns=30).log
    assert (0, HELD, 0, 100) in log
    assert (1, WAIT, 10, 130) in log and (1, HELD, 130, 180) in log


def test_a_thread_that_waited_long_is_slow_to_wake_and_loses_the_gil_to_one_that_asks_meanwhile() -> None:
    """Known answer (µs): thread 0 holds the GIL to 100. Thread 1, waiting since 10, is asleep
    (90 µs >= ASLEEP_NS): handed the GIL at 100, it wakes at 140; thread 2 asks at 120, takes the
    free GIL at once and holds it to 170; thread 1, up at 140, waits again and is asleep once more
    by 170 (30 µs), so it holds the GIL from 210. Asking at 90 instead, it had waited 10 µs: handed
    the GIL at 100, it holds it from 105."""
    us = 1_000
    assert ASLEEP_NS == 20 * us
    for ask, got in ((10 * us, 210 * us), (90 * us, 105 * us)):
        log = drive(
            [[(0, 100 * us, 0)], [(ask, 50 * us, 0)], [(120 * us, 50 * us, 0)]],
            5_000 * us,
            transfer_ns=5 * us,
            asleep_transfer_ns=40 * us,
        ).log
        held = {key: a for key, state, a, _ in log if state == HELD}
        assert held[1] == got, log
        if got > 120 * us:
            assert (2, HELD, 120 * us, 170 * us) in log
