"""The thread-state runs (the GIL's evidence in a trace): overlaps and holders against a brute-force oracle."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from opprof.trace.threadstates import STATES, ThreadState, ThreadStates


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
    rows, holders, ns = ts.holders(tid, start, end)
    for i, (t, a, b) in enumerate(zip(tid.tolist(), start.tolist(), end.tolist(), strict=True)):
        want = _oracle(ts, t, a, b)
        for k, s in enumerate(STATES):
            assert got[i, k] == sum(v for (st_, _), v in want.items() if st_ == s)
        mine = {int(h): int(n) for r, h, n in zip(rows, holders, ns, strict=True) if r == i}
        assert mine == {h: v for (s, h), v in want.items() if s == ThreadState.WAIT}


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
        np.array([tids[0], tids[0], tids[1]]),
        np.array([ThreadState.HELD, ThreadState.BLOCKED, ThreadState.WAIT]),
        np.array([0, 50, 10]),
        np.array([50, 90, 40]),
        np.array([-1, -1, tids[0]]),
        period_ns=200_000,
    )
    assert trace.validate() == []
    path = tmp_path / "t.opprof"
    trace.save(path)
    back = load(path)
    assert back == trace and back.thread_states is not None and back.thread_states.period_ns == 200_000
    assert back.thread_states.holder.tolist() == trace.thread_states.holder.tolist()
    trace.thread_states = ThreadStates(
        np.array([1, 1]), np.array([1, 1]), np.array([0, 5]), np.array([10, 20]), np.array([-1, -1])
    )
    assert any(p.startswith("thread states:") for p in trace.validate())
