"""Who held the GIL between samples, from the engine's timed takings of it (the hand-offs): how
long each getter is known to hold it, and where it surely did (another's timed wait met the hold).
Known answers, and a brute-force oracle over random hand-offs."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from opprof.profiler.gil import _held_until, _held_while_waited


def _cols(*rows: tuple[int, ...]) -> list[np.ndarray]:
    return [np.array(c, dtype=np.int64) for c in zip(*rows, strict=True)]


def test_a_hold_ends_at_its_getters_park_anothers_taking_or_the_next_sample() -> None:
    """Known answer: thread 1 takes the GIL at 100 and parks again at 500 (its next hand-off);
    thread 2 takes it at 300; a sample comes at 450. Thread 1 held it until 300 (2 took it), thread
    2 until 450 (the sample: from there the samples say who held it), thread 1's second taking at
    600 until the profile's end (1000); an open wait (its taking 0) holds nothing."""
    tid, park, gil = _cols((1, 50, 100), (2, 200, 300), (1, 500, 600), (3, 700, 0))
    got = _held_until(tid, park, gil, 1000, np.array([20, 450], dtype=np.int64))
    assert got.tolist() == [300, 450, 1000, 0]
    # Without samples, thread 2's hold lasts to thread 1's next taking.
    assert _held_until(tid, park, gil, 1000, None).tolist() == [300, 600, 1000, 0]


def test_a_hold_is_sure_only_where_another_thread_waited_for_it() -> None:
    """Known answer: thread 1 holds [100, 300); thread 2's timed wait [150, 300) (it took the GIL at
    300) met it, thread 1's own earlier wait [50, 100) does not count. So thread 1 surely held
    [150, 300); thread 2's hold [300, 400), which no one waited for, is not sure: its thread may
    have slept in it."""
    tid, took, until, wait_a, wait_b = _cols((1, 100, 300, 50, 100), (2, 300, 400, 150, 300))
    a, b = _held_while_waited(tid, took, until, wait_a, wait_b)
    assert list(zip(a.tolist(), b.tolist(), strict=True)) == [(150, 300), (0, 0)]


@st.composite
def _handoffs(draw: st.DrawFn) -> list[tuple[int, int, int, int, int]]:
    """(tid, took, until, wait start, wait end) per hand-off: holds disjoint, in time order."""
    rows, t = [], 0
    for _ in range(draw(st.integers(0, 8))):
        t += draw(st.integers(0, 10))
        d = draw(st.integers(0, 15))
        wa = draw(st.integers(0, 120))
        rows.append((draw(st.integers(1, 3)), t, t + d, wa, wa + draw(st.integers(0, 20))))
        t += d
    return rows


@settings(max_examples=300, deadline=None)
@given(_handoffs())
def test_sure_holds_match_a_brute_force_sweep(rows: list[tuple[int, int, int, int, int]]) -> None:
    """Each hold's sure part runs from the first instant another thread's wait covers it to the last."""
    if not rows:
        return
    tid, took, until, wait_a, wait_b = _cols(*rows)
    a, b = _held_while_waited(tid, took, until, wait_a, wait_b)
    for i, (t, x0, x1, _, _) in enumerate(rows):
        waited = [x for x in range(x0, x1) if any(u != t and wa <= x < wb for u, _, _, wa, wb in rows)]
        want = (waited[0], waited[-1] + 1) if waited else (0, 0)
        assert (int(a[i]), int(b[i])) == want, (i, rows)
