"""The engine's back-pressure in a profile: a push held while too many ops were pending is a span
of its own on the pushing thread (``Backpressure``, category ``engine``), not unexplained time
between two pushes. Known answers from napping ops of known length on one worker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import opprof
import opprof as mx
from opprof.trace import from_chrome
from opprof.trace.records import BACKPRESSURE, ENGINE_CATEGORY
from tests.helpers import profiled_naps

NAP_S = 0.0002


@pytest.fixture
def one_worker() -> Iterator[opprof.engine.Engine]:
    engine = mx.set_engine("threaded", workers=1)
    try:
        yield engine
    finally:
        mx.set_engine("threaded")


def _push_naps(engine: opprof.engine.Engine, n: int) -> opprof.Trace:
    trace: opprof.Trace = profiled_naps(engine, n, NAP_S)[0]
    return trace


def test_a_push_held_by_back_pressure_is_a_span_on_the_pushing_thread(one_worker: opprof.engine.Engine) -> None:
    """400 pushes with at most 128 pending: held at the 129th, 193rd, 257th, 321st and 385th push,
    each time until 64 ops (of 0.2 ms or more) had run."""
    assert one_worker.max_pending == 128
    trace = _push_naps(one_worker, 400)
    held = [s for s in trace.spans if s.name == BACKPRESSURE]
    assert len(held) == 5
    assert {s.cat for s in held} == {ENGINE_CATEGORY}
    assert {trace.thread_name(s.tid) for s in held} == {"MainThread"}
    for s in held:
        assert s.end - s.start >= 64 * NAP_S * 1e9 * 0.9, f"held {(s.end - s.start) / 1e6:.2f} ms"
    # No push happened while the thread was held.
    ops = trace.ops
    assert ops is not None
    pushes = ops.push[ops.pusher == held[0].tid]
    for s in held:
        assert not ((pushes > s.start) & (pushes < s.end)).any()
    assert trace.validate() == []
    again = from_chrome(trace.to_chrome())  # kept in a Chrome file, as a span of its category
    assert sum(s.name == BACKPRESSURE and s.cat == ENGINE_CATEGORY for s in again.spans) == 5


def test_nothing_is_held_below_the_limit(one_worker: opprof.engine.Engine) -> None:
    trace = _push_naps(one_worker, 100)
    assert not [s for s in trace.spans if s.name == BACKPRESSURE]


def test_the_naive_engine_holds_nothing() -> None:
    engine = mx.set_engine("naive")
    try:
        trace = _push_naps(engine, 200)
    finally:
        mx.set_engine("threaded")
    assert not [s for s in trace.spans if s.name == BACKPRESSURE]


def test_the_critical_path_calls_the_held_time_held_back(one_worker: opprof.engine.Engine) -> None:
    """Known answer: a path of one ``program`` piece over the first held push (a margin either
    side, under a third of the gaps to the held pushes beside it) and one ``blocked`` piece over the second: each
    is cut where its span begins and ends, the middle becomes ``held_back`` on the same thread, the
    pieces still tile the path, and the words say what held it."""
    import numpy as np

    from opprof.trace.analysis.critical import HELD_BACK_WORDS, CriticalPath, SegmentKind, mark_held_back

    trace = _push_naps(one_worker, 400)
    held = sorted((s for s in trace.spans if s.name == BACKPRESSURE), key=lambda s: s.start)
    first, second = held[0], held[1]
    kinds = list(SegmentKind)
    # A margin inside the gaps to the neighbouring held pushes (a third held one 0.2 ms after the
    # second once fell inside a 1 ms margin, and the marked path rightly had one more piece).
    after = held[2].start - second.end if len(held) > 2 else 1_000_000
    margin = min(1_000_000, (second.start - first.end) // 3, after // 3)
    bounds = [first.start - margin, first.end + margin, second.start - margin, second.end + margin]
    path = CriticalPath(
        bounds[0],
        bounds[3],
        np.array(bounds[:3]),
        np.array(bounds[1:]),
        np.array(
            [kinds.index(SegmentKind.PROGRAM), kinds.index(SegmentKind.RUN), kinds.index(SegmentKind.BLOCKED)], dtype=np.int8
        ),
        np.array([first.tid, first.tid, first.tid]),
        np.array([-1, 0, -1]),
        np.array([-1, -1, -1]),
        False,
        "",
        _trace=trace.data if hasattr(trace, "data") else trace,
    )
    marked = mark_held_back(path, trace.table)
    got = [(s.kind, s.start, s.end) for s in marked.segments]
    assert got == [
        (SegmentKind.PROGRAM, first.start - margin, first.start),
        (SegmentKind.HELD_BACK, first.start, first.end),
        (SegmentKind.PROGRAM, first.end, first.end + margin),
        (SegmentKind.RUN, first.end + margin, second.start - margin),
        (SegmentKind.BLOCKED, second.start - margin, second.start),
        (SegmentKind.HELD_BACK, second.start, second.end),
        (SegmentKind.BLOCKED, second.end, second.end + margin),
    ]
    assert marked.check() == []
    assert marked.segments[1].name.endswith(HELD_BACK_WORDS) and marked.segments[1].tid == first.tid
