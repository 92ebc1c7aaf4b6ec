"""The thread-state runs (the GIL's evidence in a trace): overlaps and holders against a brute-force oracle."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from opprof.trace.threadstates import HOLDING, STATES, ThreadState, ThreadStates


@st.composite
def _states(draw: st.DrawFn) -> ThreadStates:
    rows = []
    for tid in draw(st.lists(st.integers(1, 6), unique=True, max_size=4)):
        t = draw(st.integers(0, 50))
        for _ in range(draw(st.integers(0, 8))):
            t += draw(st.integers(0, 20))  # gaps: not sampled
            d = draw(st.integers(1, 30))
            s = draw(st.sampled_from(STATES))
            holder = draw(st.integers(-1, 6)) if s is ThreadState.WAIT else -1
            rows.append((tid, int(s), t, t + d, holder))
            t += d
    if not rows:
        return ThreadStates.empty(100)
    c = list(zip(*rows, strict=True))
    return ThreadStates(*(np.array(x) for x in c), period_ns=100)


def _oracle(ts: ThreadStates, tid: int, a: int, b: int) -> dict[tuple[int, int], int]:
    out: dict[tuple[int, int], int] = {}
    for k in range(len(ts)):
        if ts.tid[k] == tid:
            ov = min(b, int(ts.end[k])) - max(a, int(ts.start[k]))
            if ov > 0:
                key = (int(ts.state[k]), int(ts.holder[k]))
                out[key] = out.get(key, 0) + ov
    return out


@settings(max_examples=200, deadline=None)
@given(_states(), st.lists(st.tuples(st.integers(0, 7), st.integers(-10, 300), st.integers(0, 120)), max_size=12))
def test_overlap_and_holders_match_a_brute_force_sweep(ts: ThreadStates, queries: list[tuple[int, int, int]]) -> None:
    assert ts.check() == []
    tid = np.array([q[0] for q in queries], dtype=np.int64)
    start = np.array([q[1] for q in queries], dtype=np.int64)
    end = start + np.array([q[2] for q in queries], dtype=np.int64)
    got = ts.overlap(tid, start, end)
    checked = ts.holders_checked()  # how every analysis reads them
    assert checked.check() == [] and np.array_equal(checked.overlap(tid, start, end), got)
    rows, holders, ns, off = checked.holders(tid, start, end)
    for i, (t, a, b) in enumerate(zip(tid.tolist(), start.tolist(), end.tolist(), strict=True)):
        want = _oracle(ts, t, a, b)
        for k, s in enumerate(STATES):
            assert got[i, k] == sum(v for (st_, _), v in want.items() if st_ == s)
        mine = {int(h): int(n) for r, h, n in zip(rows, holders, ns, strict=True) if r == i}
        # Each ns the thread waited naming h, as no one (-1) where h's own run says it held nothing.
        want_named: dict[int, int] = {}
        for x in range(a, b):
            if _state_at(ts, t, x) == ThreadState.WAIT:
                h = _named_at(ts, t, x)
                h = h if h < 0 or _state_at(ts, h, x) not in _NOT_HOLDING else -1
                want_named[h] = want_named.get(h, 0) + 1
        assert mine == want_named
        # Of each holder's time, the nanoseconds it held the GIL off a CPU, one by one.
        mine_off = {int(h): int(n) for r, h, n in zip(rows, holders, off, strict=True) if r == i}
        want_off = {
            h: sum(_state_at(ts, h, x) == ThreadState.HELD_OFF_CPU for x in range(a, b) if _state_at(checked, t, x, h))
            for h in mine
        }
        assert mine_off == want_off


def _named_at(ts: ThreadStates, tid: int, x: int) -> int:
    """The holder thread ``tid``'s run at ns ``x`` names (-1: none, or no run)."""
    for k in range(len(ts)):
        if ts.tid[k] == tid and ts.start[k] <= x < ts.end[k]:
            return int(ts.holder[k])
    return -1


@settings(max_examples=200, deadline=None)
@given(_states())
def test_a_named_holder_is_kept_only_where_its_own_runs_allow_it(ts: ThreadStates) -> None:
    """``holders_checked``, ns by ns: every thread's state as before; a wait's holder as named,
    except where the holder's own run says it held nothing (then none, -1); runs still disjoint
    and sorted; checking again changes nothing; nothing contradicted gives the same object."""
    checked = ts.holders_checked()
    assert checked.check() == [] and checked.period_ns == ts.period_ns
    again = checked.holders_checked()
    assert again is checked
    for t in np.unique(ts.tid).tolist():
        for x in range(0, 400):
            state = _state_at(ts, t, x)
            assert _state_at(checked, t, x) == state, (t, x)
            named = _named_at(ts, t, x)
            if state == ThreadState.WAIT and named >= 0 and _state_at(ts, named, x) in _NOT_HOLDING:
                named = -1
            assert _named_at(checked, t, x) == named, (t, x)
    if len(checked) == len(ts) and np.array_equal(checked.holder, ts.holder):
        assert checked is ts


def test_a_holder_parked_through_part_of_a_wait_is_named_for_the_rest_only() -> None:
    """Known answer: thread 2 waits [0, 100) naming thread 1, which is parked over [20, 30) and
    [50, 60) and waits for the GIL itself over [80, 120); thread 3 waits [0, 10) naming no one."""
    W, B = int(ThreadState.WAIT), int(ThreadState.BLOCKED)
    ts = ThreadStates([1, 1, 1, 2, 3], [B, B, W, W, W], [20, 50, 80, 0, 0], [30, 60, 120, 100, 10], [-1, -1, 3, 1, -1])
    got = ts.holders_checked()
    two = np.flatnonzero(got.tid == 2)
    pieces = list(zip(got.start[two].tolist(), got.end[two].tolist(), got.holder[two].tolist(), strict=True))
    assert pieces == [(0, 20, 1), (20, 30, -1), (30, 50, 1), (50, 60, -1), (60, 80, 1), (80, 100, -1)]
    assert set(got.state[two].tolist()) == {W}
    one = np.flatnonzero(got.tid == 1)
    assert got.holder[one].tolist() == [-1, -1, 3]  # its own wait's name: thread 3 has no run saying otherwise


#: A holder's own states that say it did not hold the GIL (no state: unknown, not a contradiction).
_NOT_HOLDING = {int(s) for s in STATES if s not in (ThreadState.HELD, ThreadState.HELD_OFF_CPU)}


def _state_at(ts: ThreadStates, tid: int, x: int, holder: int | None = None) -> int | bool:
    """Thread ``tid``'s state at ns ``x`` (0: none); with ``holder``, whether it waited for that holder then."""
    for k in range(len(ts)):
        if ts.tid[k] == tid and ts.start[k] <= x < ts.end[k]:
            if holder is None:
                return int(ts.state[k])
            return int(ts.state[k]) == ThreadState.WAIT and int(ts.holder[k]) == holder
    return False if holder is not None else 0


def test_check_finds_overlapping_runs_and_bad_states() -> None:
    ts = ThreadStates(np.array([1, 1]), np.array([1, 9]), np.array([0, 5]), np.array([10, 20]), np.array([-1, -1]))
    problems = ts.check()
    assert any("overlap" in p for p in problems) and any("unknown" in p for p in problems)


def test_thread_states_survive_an_opprof_file_and_validate_checks_them(tmp_path) -> None:
    from opprof.trace import load
    from opprof.trace.synthetic import synthetic_trace

    trace = synthetic_trace(500, seed=3)
    tids = [th.tid for th in trace.threads[:2]]
    trace.thread_states = ThreadStates(
        np.array([tids[0], tids[0], tids[0], tids[1]]),
        np.array([ThreadState.HELD, ThreadState.HELD_OFF_CPU, ThreadState.BLOCKED, ThreadState.WAIT]),
        np.array([0, 30, 50, 10]),
        np.array([30, 50, 90, 40]),
        np.array([-1, -1, -1, tids[0]]),
        period_ns=200_000,
    )
    assert trace.validate() == []
    path = tmp_path / "t.opprof"
    trace.save(path)
    back = load(path)
    assert back == trace and back.thread_states is not None and back.thread_states.period_ns == 200_000
    assert back.thread_states.holder.tolist() == trace.thread_states.holder.tolist()
    assert back.thread_states.state.tolist() == trace.thread_states.state.tolist()  # HELD_OFF_CPU too
    trace.thread_states = ThreadStates(
        np.array([1, 1]), np.array([1, 1]), np.array([0, 5]), np.array([10, 20]), np.array([-1, -1])
    )
    assert any(p.startswith("thread states:") for p in trace.validate())


def _run_at(ts: ThreadStates, tid: int, t: int) -> int | None:
    """The row of thread ``tid``'s run at instant ``t``, or None: not sampled."""
    for k in range(len(ts)):
        if ts.tid[k] == tid and ts.start[k] <= t < ts.end[k]:
            return k
    return None


def _at(ts: ThreadStates, tid: int, t: int) -> tuple[int, int] | None:
    k = _run_at(ts, tid, t)
    return None if k is None else (int(ts.state[k]), int(ts.holder[k]))


Holds = tuple[np.ndarray, np.ndarray, np.ndarray]


@st.composite
def _holds(draw: st.DrawFn) -> Holds:
    """Timed takings of the GIL: disjoint ``(tid, start, end)`` holds, one thread at a time."""
    rows, t = [], draw(st.integers(0, 60))
    for _ in range(draw(st.integers(0, 6))):
        t += draw(st.integers(0, 25))
        d = draw(st.integers(1, 30))
        rows.append((draw(st.integers(1, 6)), t, t + d))
        t += d
    cols = list(zip(*rows, strict=True)) if rows else [(), (), ()]
    return tuple(np.array(c, dtype=np.int64) for c in cols)  # type: ignore[return-value]


def _taker(holds: Holds, tid: int, x: int) -> int | None:
    """The thread other than ``tid`` whose hold covers ``x``."""
    for h, a, b in zip(*(c.tolist() for c in holds), strict=True):
        if h != tid and a <= x < b:
            return int(h)
    return None


@settings(max_examples=200, deadline=None)
@given(sampled=_states(), exact=_states(), period=st.sampled_from([100, 15]), holds=_holds())
def test_exact_runs_replace_the_samples_where_they_are(
    sampled: ThreadStates, exact: ThreadStates, period: int, holds: Holds
) -> None:
    """The engine's timed hand-offs laid over the samples: at every instant a thread is in its exact
    state where it has one (a WAIT without a holder, or one a sampling period long or longer, gets
    the thread holding the GIL for most of it, by another's exact holds and by the samples outside
    that thread's own exact runs, and keeps its own where none is known), else in its sampled one.
    Another thread's hold (a timed taking of the GIL) names every wait it covers and leaves no
    sampled holding of another thread under it; a thread's own holds leave its state as it was.
    Runs never overlap."""
    sampled.period_ns = period
    got = sampled.overlaid(exact, holds)
    assert got.check() == []
    ends = np.concatenate([sampled.start, sampled.end, exact.start, exact.end, holds[1], holds[2]])
    was_held = {(int(s), -1) for s in HOLDING}  # held, on a CPU or off one

    threads = set(sampled.tid.tolist()) | set(exact.tid.tolist()) | set(holds[0].tolist())
    for tid in threads:
        for t in sorted(set(ends.tolist())):
            k = _run_at(exact, tid, t)
            taker = _taker(holds, tid, t)
            if k is None:
                want = _at(sampled, tid, t)
                if taker is not None and want in was_held:
                    want = None  # another thread took the GIL meanwhile: not known what this one did
                elif taker is not None and want is not None and want[0] == ThreadState.WAIT:
                    want = (int(ThreadState.WAIT), taker)
                assert _at(got, tid, t) == want, (tid, t)
                continue
            state, holder = int(exact.state[k]), int(exact.holder[k])
            long = int(exact.end[k] - exact.start[k]) >= period
            if state == ThreadState.WAIT and taker is not None:
                assert _at(got, tid, t) == (state, taker), (tid, t)
            elif state == ThreadState.WAIT and (holder < 0 or long):
                # The other thread sampled holding the GIL for most of the wait, instant by instant,
                # where no exact run of its own says otherwise (a sample's run stretched over a
                # moment the thread is known to have been parked is not evidence of holding) and
                # no other thread's hold is.
                a, b = int(exact.start[k]), int(exact.end[k])
                others = set(sampled.tid.tolist()) - {tid}
                held = {
                    h: sum(
                        _run_at(exact, h, x) is None and _at(sampled, h, x) in was_held and _taker(holds, h, x) is None
                        for x in range(a, b)
                    )
                    for h in others
                }
                most = max(held.values(), default=0)
                holders = {h for h, n in held.items() if n == most and n > 0} or {holder}
                got_here = _at(got, tid, t)
                assert got_here is not None and got_here[0] == state and got_here[1] in holders, (tid, t, holders)
            else:
                assert _at(got, tid, t) == (state, holder), (tid, t)


def test_an_exact_wait_is_held_by_the_sampled_holder() -> None:
    """Known answer: thread 2 sampled HELD over [0, 100); thread 1's timed GIL wait [40, 60) is held by 2."""
    sampled = ThreadStates([1, 2], [int(ThreadState.BLOCKED), int(ThreadState.HELD)], [0, 0], [100, 100], [-1, -1], 10)
    exact = ThreadStates([1, 1], [int(ThreadState.RUNNABLE), int(ThreadState.WAIT)], [30, 40], [40, 60], [-1, -1])
    got = sampled.overlaid(exact)
    rows = list(zip(got.tid.tolist(), got.state.tolist(), got.start.tolist(), got.end.tolist(), got.holder.tolist(), strict=True))
    assert rows == [
        (1, int(ThreadState.BLOCKED), 0, 30, -1),
        (1, int(ThreadState.RUNNABLE), 30, 40, -1),
        (1, int(ThreadState.WAIT), 40, 60, 2),
        (1, int(ThreadState.BLOCKED), 60, 100, -1),
        (2, int(ThreadState.HELD), 0, 100, -1),
    ]
    assert got.period_ns == 10


def test_an_exact_wait_is_held_by_the_thread_that_held_the_gil_most_of_it() -> None:
    """Known answer: thread 3 (a user's spinning thread) sampled holding the GIL over [0, 45) and
    [50, 100), thread 2 caught holding it at one sample, [45, 50). Thread 1's timed wait [0, 90)
    was held up by 3 (85 of its 90 ns), though its middle falls on 2's one sample."""
    held = int(ThreadState.HELD)
    sampled = ThreadStates([2, 3, 3], [held, held, held], [45, 0, 50], [50, 45, 100], [-1, -1, -1], 5)
    exact = ThreadStates([1], [int(ThreadState.WAIT)], [0], [90], [-1])
    got = sampled.overlaid(exact)
    (wait,) = [k for k in range(len(got)) if got.tid[k] == 1]
    assert int(got.holder[wait]) == 3


def _one_holder_at_a_time(ts: ThreadStates) -> ThreadStates:
    """``ts`` less every HELD run that overlaps an earlier-kept one of another thread: the shape a
    sampler gives (one holder per sample)."""
    keep, taken = [], []
    for k in np.argsort(ts.start, kind="stable").tolist():
        if ts.state[k] == ThreadState.HELD:
            a, b = int(ts.start[k]), int(ts.end[k])
            if any(a < y and x < b for x, y in taken):
                continue
            taken.append((a, b))
        keep.append(k)
    return ts.take(np.array(sorted(keep), dtype=np.int64))


@settings(max_examples=200, deadline=None)
@given(sampled=_states(), exact=_states(), holds=_holds())
def test_exact_waits_under_one_holder_at_a_time_get_the_holder_of_most(
    sampled: ThreadStates, exact: ThreadStates, holds: Holds
) -> None:
    """As :func:`test_exact_runs_replace_the_samples_where_they_are`, on samples with one holder at
    a time (the sampler's shape, where most waits meet one sampled holder and are found at once)."""
    test_exact_runs_replace_the_samples_where_they_are.hypothesis.inner_test(_one_holder_at_a_time(sampled), exact, 100, holds)  # type: ignore[attr-defined]


def test_a_sampled_holder_known_to_be_parked_is_not_the_holder() -> None:
    """Known answer: thread 2 was sampled holding the GIL at 0 (its run stretched to the next sample,
    at 100), but its own timed wait says it parked at 10. Thread 1's timed GIL wait [40, 60) is not
    charged to it; thread 3, sampled holding over [30, 100), is the holder."""
    held, blocked, wait = int(ThreadState.HELD), int(ThreadState.BLOCKED), int(ThreadState.WAIT)
    sampled = ThreadStates([1, 2, 3], [blocked, held, blocked], [0, 0, 0], [100, 100, 30], [-1, -1, -1], 10)
    exact = ThreadStates([1, 2], [wait, blocked], [40, 10], [60, 100], [-1, -1])
    got = sampled.overlaid(exact)
    assert _at(got, 1, 50) == (wait, -1)  # no one else held it by the evidence: not thread 2
    sampled3 = ThreadStates([1, 2, 3, 3], [blocked, held, blocked, held], [0, 0, 0, 30], [100, 100, 30, 100], [-1] * 4, 10)
    got3 = sampled3.overlaid(exact)
    assert _at(got3, 1, 50) == (wait, 3)


def _holder_at(ts: ThreadStates, x: int) -> tuple[set[int], int]:
    """Brute force at one ns: the threads a HELD run says held the GIL, else the holder the first
    waiting thread's (lowest tid's) named wait gives, among the waits whose holder's own state then
    does not say it did something else (-1: none known)."""
    held = {int(ts.tid[k]) for k in range(len(ts)) if ts.start[k] <= x < ts.end[k] and ts.state[k] in HOLDING}
    if held:
        return held, -1
    waits = sorted(
        (int(ts.tid[k]), int(ts.holder[k]))
        for k in range(len(ts))
        if ts.start[k] <= x < ts.end[k]
        and ts.state[k] == ThreadState.WAIT
        and ts.holder[k] >= 0
        and _state_at(ts, int(ts.holder[k]), x) not in _NOT_HOLDING  # 0: none, not a contradiction
    )
    return set(), waits[0][1] if waits else -1


@settings(max_examples=200, deadline=None)
@given(_states())
def test_holder_runs_match_a_brute_force_sweep(ts: ThreadStates) -> None:
    """``holder_runs``: disjoint, sorted, and at every ns the holder a HELD run shows, else the one
    a wait names where the holder's own states do not contradict it (the runs checked first, as
    every analysis reads them)."""
    start, end, who = ts.holders_checked().holder_runs()
    assert np.all(end > start) and np.all(start[1:] >= end[:-1])
    for x in range(0, 400):
        held, named = _holder_at(ts, x)
        k = int(np.searchsorted(start, x, side="right")) - 1
        got = int(who[k]) if k >= 0 and x < end[k] else -1
        if held:
            assert got in held, (x, got, held)
        else:
            assert got == named, (x, got, named)


def test_a_wait_names_its_holder_only_where_the_holders_own_states_allow() -> None:
    """Thread 2 waits [0, 100) for the GIL thread 1 held as the wait began; thread 1 is seen
    parked from 50, and thread 3 is seen holding the GIL over [20, 30)."""
    W, B, H = int(ThreadState.WAIT), int(ThreadState.BLOCKED), int(ThreadState.HELD)
    ts = ThreadStates(
        np.array([2, 1, 3]), np.array([W, B, H]), np.array([0, 50, 20]), np.array([100, 100, 30]), np.array([1, -1, -1])
    )
    start, end, who = ts.holders_checked().holder_runs()
    assert list(zip(start.tolist(), end.tolist(), who.tolist(), strict=True)) == [(0, 20, 1), (20, 30, 3), (30, 50, 1)]


@settings(max_examples=200)
@given(
    st.lists(st.tuples(st.integers(-3, 1 << 23), st.integers(-(1 << 41), 1 << 41)), max_size=40),
    st.booleans(),
)
def test_runs_are_kept_by_thread_then_time_as_a_two_key_sort_keeps_them(rows: list[tuple[int, int]], small: bool) -> None:
    """The one-sort order (a combined key where the times span less than 2**40 ns and the tids are
    small, else two keys) is exactly ``np.lexsort``'s, ties in input order; and a ThreadStates made
    of the rows keeps that order, sorted input or not."""
    from opprof.trace.threadstates import _by_thread_then_time

    if small:  # the fast path's domain: small tids, a span of times under 2**40
        rows = [(abs(tid) % 50, t % (1 << 30)) for tid, t in rows]
    tid = np.array([r[0] for r in rows], dtype=np.int64)
    t = np.array([r[1] for r in rows], dtype=np.int64)
    assert _by_thread_then_time(tid, t).tolist() == np.lexsort((t, tid)).tolist()
    n = len(rows)
    ts = ThreadStates(tid, np.zeros(n, dtype=np.int8), t, t + 1, np.arange(n), period_ns=100)
    order = np.lexsort((t, tid))
    assert ts.holder.tolist() == order.tolist()  # each run carried along with its own holder
    again = ThreadStates(ts.tid, ts.state, ts.start, ts.end, ts.holder, period_ns=100)
    assert again.holder.tolist() == ts.holder.tolist()  # sorted already: left as it is


def _covered_oracle(a: int, b: int, runs: list[tuple[int, int]]) -> int:
    return sum(max(0, min(b, y) - max(a, x)) for x, y in runs)


@settings(max_examples=150, deadline=None)
@given(_states(), st.lists(st.integers(1, 6), unique=True, min_size=1, max_size=4), st.integers(0, 5))
def test_queue_holders_count_each_pool_threads_wait_per_call_and_not_what_the_holder_contradicts(
    ts: ThreadStates, pool: list[int], seed: int
) -> None:
    """``queue_holders`` against intervals summed one by one: per op type, over the time some call
    of it was in flight, per pool thread, its waits naming each holder, less where that holder's
    own runs say it held nothing. Two pool threads' waits at once count twice (it ranks, it adds to
    no total), a moment of four calls in flight once. The runs of several threads were once taken
    as one thread's, which the coverage's sorted sums do not allow (a loader's share of a pool's
    waits came out half what it was), and each call counted apart."""
    from opprof.trace import Role
    from opprof.trace.analysis.gil import queue_holders
    from opprof.trace.columns import ROLE_CODE
    from opprof.trace.synthetic import synthetic_trace

    trace = synthetic_trace(200, seed=seed)
    table = trace.table
    parents = np.flatnonzero(table.role == ROLE_CODE[Role.PARENT])
    # The states' 0-400 ns scaled onto the trace's time, so that the call windows cut them.
    t0, unit = int(table.start.min()), max(1, int(table.end.max() - table.start.min()) // 400)
    ts = ThreadStates(ts.tid, ts.state, t0 + ts.start * unit, t0 + ts.end * unit, ts.holder, ts.period_ns)
    got = queue_holders(trace, table, ts.holders_checked(), parents, np.array(pool, dtype=np.int64))
    rows = list(zip(ts.tid.tolist(), ts.state.tolist(), ts.start.tolist(), ts.end.tolist(), ts.holder.tolist(), strict=True))
    # The type's calls' windows, merged where they overlap: a moment counts once per pool thread.
    windows: dict[str, list[list[int]]] = {}
    for name, a, b in sorted(
        zip(table.str_list(table.name[parents]), table.start[parents].tolist(), table.end[parents].tolist(), strict=True)
    ):
        merged = windows.setdefault(name, [])
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    want: dict[str, dict[int, int]] = {}
    for name, a, b in ((n, a, b) for n, ws in windows.items() for a, b in ws):
        for tid, state, x, y, h in rows:
            if tid not in pool or state != ThreadState.WAIT or h < 0:
                continue
            unheld = [(u, v) for t2, s2, u, v, _ in rows if t2 == h and s2 in _NOT_HOLDING]
            lo, hi = max(a, x), min(b, y)
            ns = max(0, hi - lo) - _covered_oracle(lo, hi, unheld) if hi > lo else 0
            if ns > 0:
                want.setdefault(name, {}).setdefault(h, 0)
                want[name][h] += ns
    assert {name: {g.tid: g.ns for g in hs} for name, hs in got.items()} == {n: w for n, w in want.items() if w}


def test_on_the_critical_path_a_thread_ready_and_not_yet_run_is_a_wake() -> None:
    """Known answer: a hand-off to thread 2 while 2 was being woken (RUNNABLE) is a ``wake`` piece,
    not the engine's bookkeeping after the op; so is the part of the program's wait on thread 3
    after its gate opened, until the OS ran it. Within thread 2's own run, a moment without a CPU
    is still its run (busy beside others, not being handed work)."""
    from opprof.trace.analysis.critical import _KINDS, CriticalPath, SegmentKind, refine_by_thread_states
    from opprof.trace.columns import SpanTable

    kinds = [SegmentKind.RUN, SegmentKind.HANDOFF, SegmentKind.RUN, SegmentKind.WAIT]
    path = CriticalPath(
        0, 400,
        np.array([0, 100, 200, 300]), np.array([100, 200, 300, 400]),
        np.array([_KINDS.index(k) for k in kinds], dtype=np.int8), np.array([1, 1, 2, 3]),
        np.array([-1, -1, -1, -1]), np.array([-1, -1, -1, -1]), False, "",
    )  # fmt: skip
    runnable, held = int(ThreadState.RUNNABLE), int(ThreadState.HELD)
    states = ThreadStates(
        [2, 2, 2, 3], [runnable, held, runnable, runnable], [120, 180, 250, 350], [180, 250, 300, 400], [-1] * 4
    )
    got = refine_by_thread_states(path, SpanTable.empty(), states, None, None)
    rows = list(zip(got.seg_start.tolist(), got.seg_end.tolist(), [_KINDS[k].value for k in got.seg_kind], strict=True))
    assert rows == [
        (0, 100, "run"),
        (100, 120, "handoff"),
        (120, 180, "wake"),
        (180, 200, "handoff"),
        (200, 300, "run"),
        (300, 350, "wait"),
        (350, 400, "wake"),
    ]
