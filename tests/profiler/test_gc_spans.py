"""Python's garbage collector in the timeline: each collection while recording is a span on the
thread that ran it, timed as the collection was, on both recorders and both engines; every
collection is counted in the metadata; nothing is recorded while paused or after stop."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator

import pytest

import opprof
from opprof import nd
from opprof.profiler import Profiler
from opprof.profiler.gcpause import MIN_SPAN_NS
from opprof.profiler.recorder import COMPILED_WHY_NOT
from opprof.trace import Trace, load
from opprof.trace.records import GC_CATEGORY, GC_METADATA, gc_span_name

RECORDERS = [False, pytest.param(True, marks=pytest.mark.skipif(bool(COMPILED_WHY_NOT), reason=COMPILED_WHY_NOT or ""))]


@pytest.fixture
def heap() -> Iterator[list[list[int]]]:
    """200,000 small lists: a full collection walks them all (~20 ms here)."""
    objs = [[i] for i in range(200_000)]
    yield objs
    del objs


def _collect() -> int:
    """A full collection, its wall time in ns as measured around it."""
    t = time.perf_counter_ns()
    gc.collect()
    return time.perf_counter_ns() - t


def _gc_spans(trace: Trace) -> list[tuple[str, str, int, int]]:
    names = {th.tid: th.name for th in trace.threads}
    return [(s.name, names[s.tid], s.start, s.end) for s in trace.spans if s.cat == GC_CATEGORY]


@pytest.mark.parametrize("compiled", RECORDERS)
@pytest.mark.parametrize("engine", ["naive", "threaded"])
def test_a_full_collection_is_a_span_on_its_thread_timed_as_it_ran(engine: str, compiled: bool, heap: list[list[int]]) -> None:
    opprof.set_engine(engine)
    prof = Profiler(compiled=compiled).start()
    try:
        x = nd.ones((4, 4)) + 1
        took = _collect()
        (x + 1).wait_to_read()
    finally:
        trace = prof.stop()
    assert trace.validate() == []
    full = [s for s in _gc_spans(trace) if s[0] == gc_span_name(2)]
    assert len(full) == 1, _gc_spans(trace)
    _, thread, start, end = full[0]
    assert thread == "MainThread"
    # Stamped inside the measurement around gc.collect(): at most its length, and most of it.
    assert 0.8 * took <= end - start <= took, (end - start, took)
    if engine == "naive":  # its two ops ran on this thread, one before the collection, one after: one clock
        main = next(th.tid for th in trace.threads if th.name == "MainThread")
        ops = sorted(s.start for s in trace.spans if s.cat != GC_CATEGORY and s.tid == main)
        assert ops[0] < start and end < ops[-1]
    meta = trace.metadata[GC_METADATA]
    assert meta["by_generation"][2]["collections"] >= 1
    assert meta["by_generation"][2]["ns"] >= end - start
    assert meta["collections"] == sum(g["collections"] for g in meta["by_generation"])


@pytest.mark.parametrize("compiled", RECORDERS)
def test_no_collection_is_recorded_while_paused_or_after_stop(compiled: bool, heap: list[list[int]]) -> None:
    opprof.set_engine("naive")
    callbacks = list(gc.callbacks)
    prof = Profiler(compiled=compiled).start()
    try:
        (nd.ones((2, 2)) + 1).wait_to_read()
        prof.pause()
        _collect()
        prof.resume()
    finally:
        trace = prof.stop()
    assert gc.callbacks == callbacks  # the recording's callback is gone
    _collect()
    assert _gc_spans(trace) == []
    # Counted all the same: the metadata counts every collection while attached, paused or not.
    assert trace.metadata[GC_METADATA]["by_generation"][2]["collections"] == 1


def test_a_thread_that_recorded_nothing_else_gets_a_lane_for_its_collection(heap: list[list[int]]) -> None:
    """A user's thread that pushed nothing (a data loader) but ran a collection, which held the GIL:
    its lane holds the collection's span."""
    opprof.set_engine("naive")
    took: list[int] = []
    with opprof.profile() as prof:
        (nd.ones((2, 2)) + 1).wait_to_read()
        t = threading.Thread(target=lambda: took.append(_collect()), name="loader")
        t.start()
        t.join()
    trace = prof.trace
    assert trace is not None and trace.validate() == []
    ((name, _, start, end),) = [s for s in _gc_spans(trace) if s[1] == "loader"]
    assert name == gc_span_name(2) and 0.8 * took[0] <= end - start <= took[0]
    assert trace.metadata[GC_METADATA]["by_generation"][2]["collections"] == 1


def test_a_file_keeps_the_collections(tmp_path, heap: list[list[int]]) -> None:  # type: ignore[no-untyped-def]
    opprof.set_engine("naive")
    with opprof.profile() as prof:
        (nd.ones((2, 2)) + 1).wait_to_read()
        _collect()
    trace = prof.trace
    assert trace is not None
    for suffix in (".opprof", ".json"):
        path = tmp_path / f"t{suffix}"
        trace.save(path)
        back = load(path)
        assert _gc_spans(back) == _gc_spans(trace) != []
        assert back.metadata[GC_METADATA] == trace.metadata[GC_METADATA]


@pytest.mark.parametrize("compiled", RECORDERS)
def test_young_collections_are_counted_and_only_long_ones_drawn(compiled: bool) -> None:
    """A young collection (generation 0: the objects made since the last one, microseconds here)
    is counted in the metadata; a span only where it lasted MIN_SPAN_NS or more."""
    opprof.set_engine("naive")
    prof = Profiler(compiled=compiled).start()
    try:
        took = []
        for _ in range(5):
            (nd.ones((2, 2)) + 1).wait_to_read()
            t = time.perf_counter_ns()
            gc.collect(0)
            took.append(time.perf_counter_ns() - t)
    finally:
        trace = prof.stop()
    meta = trace.metadata[GC_METADATA]
    assert meta["by_generation"][0]["collections"] >= 5 and meta["min_span_ns"] == MIN_SPAN_NS
    young = [s for s in _gc_spans(trace) if s[0] == gc_span_name(0)]
    assert len(young) <= sum(ns >= MIN_SPAN_NS for ns in took) + (meta["by_generation"][0]["collections"] - 5)
    assert all(end - start >= MIN_SPAN_NS for _, _, start, end in _gc_spans(trace))
    assert meta["spans"] == len(_gc_spans(trace))


@pytest.mark.parametrize("compiled", RECORDERS)
@pytest.mark.parametrize("engine", ["naive", "threaded"])
def test_the_critical_path_names_a_collection_of_the_program(engine: str, compiled: bool, heap: list[list[int]]) -> None:
    """The program collects right after its pushes (the GIL held: no engine worker can start them):
    the path's largest piece is that collection on MainThread, as long as it was measured, not
    "the program's own Python"; the pieces still tile the path."""
    opprof.set_engine(engine)
    prof = Profiler(compiled=compiled).start()
    try:
        x = nd.ones((4, 4))
        for _ in range(4):
            x = x + 1
        took = _collect()
        x.wait_to_read()
    finally:
        trace = prof.stop()
    path = trace.critical_path()
    assert path.check() == []
    kind, label, ns = path.by_name()[0]
    assert (kind, label) == ("program", f"{gc_span_name(2)} on MainThread"), path.by_name()
    assert 0.8 * took <= ns <= took


@pytest.mark.parametrize("engine", ["naive", "threaded"])
def test_a_collection_after_the_last_op_closes_the_path_it_does_not_replace(engine: str, heap: list[list[int]]) -> None:
    """A collection that ends the recording (after the last op completed, stopped without the final
    wait): the path still runs through the ops, and closes with the collection on MainThread. Taken
    as the last thing to finish, it left the walk no op to start from: one "program" piece."""
    opprof.set_engine(engine)
    prof = Profiler().start()
    try:
        x = nd.ones((4, 4))
        for _ in range(4):
            x = x + 1
        x.wait_to_read()
        took = _collect()
    finally:
        trace = prof.stop(wait=False)
    path = trace.critical_path()
    assert path.check() == []
    assert "run" in [s.kind.value for s in path.segments], path.by_name()
    last = path.segments[-1]
    assert (last.kind.value, last.name) == ("program", f"{gc_span_name(2)} on MainThread"), path.by_name()
    assert 0.8 * took <= last.dur <= took


@pytest.mark.parametrize("compiled", RECORDERS)
def test_a_collection_inside_a_threads_registration_leaves_it_one_lane(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every allocation a collection (threshold 1) and every collection a span: the collections
    that run inside a new thread's registration (its lists being made) must not register it again."""
    from opprof.profiler import gcpause

    monkeypatch.setattr(gcpause, "MIN_SPAN_NS", 0)
    opprof.set_engine("naive")
    thresholds = gc.get_threshold()
    prof = Profiler(compiled=compiled).start()
    try:
        gc.set_threshold(1)

        def pusher() -> None:
            (nd.ones((2, 2)) + 1).wait_to_read()

        threads = [threading.Thread(target=pusher, name=f"pusher-{i}") for i in range(3)]
        for t in threads:
            t.start()
            t.join()
    finally:
        gc.set_threshold(*thresholds)
        trace = prof.stop()
    assert trace.validate() == []
    names = [th.name for th in trace.threads]
    assert sorted(n for n in names if n.startswith("pusher-")) == ["pusher-0", "pusher-1", "pusher-2"], names
    assert trace.metadata[GC_METADATA]["spans"] >= 1


@pytest.mark.parametrize("compiled", RECORDERS)
def test_a_collection_past_the_event_cap_is_dropped_as_any_event(compiled: bool, heap: list[list[int]]) -> None:
    """max_events counts collections' spans as any other: past the cap, a collection is counted
    in the metadata and among the dropped events, with no span."""
    opprof.set_engine("naive")
    prof = Profiler(max_events=5, compiled=compiled).start()
    try:
        x = nd.ones((2, 2))
        for _ in range(10):
            x = x + 1
        x.wait_to_read()
        _collect()
    finally:
        trace = prof.stop()
    assert len(trace.spans) <= 5 and _gc_spans(trace) == []
    assert trace.metadata[GC_METADATA]["by_generation"][2]["collections"] == 1
    assert trace.metadata["dropped_events"] >= 10 + 1 - 5  # the ops, and the collection


def test_a_recording_of_only_collections_has_recorded_nothing(heap: list[list[int]]) -> None:
    """A Dask client whose engine ran nothing is stopped without a final wait (``recorded_any``):
    its collections, which get a lane, do not make it one that ran something."""
    opprof.set_engine("naive")
    prof = Profiler().start()
    try:
        _collect()
        assert not prof.recorded_any
        (nd.ones((2, 2)) + 1).wait_to_read()
        assert prof.recorded_any
    finally:
        trace = prof.stop()
    assert len(_gc_spans(trace)) == 1


def test_an_approximate_path_starts_from_the_last_work_not_a_later_collection() -> None:
    """A trace without the engine's edges (another tool's, a merged Dask run): the path by threads
    starts from the last span that is no collection and closes with the collection after it."""
    from opprof.trace import Span, ThreadInfo

    ms = 1_000_000
    spans = [
        Span("load", "op", 1, 0, 10 * ms),
        Span("step", "op", 1, 10 * ms, 20 * ms),
        Span(gc_span_name(2), GC_CATEGORY, 2, 25 * ms, 30 * ms),
    ]
    trace = Trace([ThreadInfo(1, "worker"), ThreadInfo(2, "MainThread")], spans)
    path = trace.critical_path()
    assert path.approximate and path.check() == []
    names = [(s.kind.value, s.name, s.dur // ms) for s in path.segments]
    assert names == [
        ("run", "load", 10),
        ("run", "step", 10),
        ("program", "MainThread (the program's own Python)", 5),
        ("program", f"{gc_span_name(2)} on MainThread", 5),
    ], names
