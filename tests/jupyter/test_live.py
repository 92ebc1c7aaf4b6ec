"""The live view: the feed of finished spans, the streaming figure, and ``%%opprof``'s live thread.

No browser here (tests/e2e/test_live_browser.py has one): the magic runs in IPython's ``globalipapp``
with ``--live`` forcing the live view a kernel would show by default.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from IPython.utils.capture import capture_output

import opprof as mx
from opprof.engine import get_engine
from opprof.jupyter import magics
from opprof.jupyter.live import LiveView
from opprof.profiler.live import LiveFeed, LiveSpans
from opprof.trace import Role
from opprof.trace.columns import COLLECTION_ROLE, ROLE_CODE
from opprof.trace.records import BACKPRESSURE
from tests.helpers import engine_spans

WIDGET = "application/vnd.jupyter.widget-view+json"


class _PlusWait(mx.operator.CustomOp):
    """A custom op whose Python pushes a sub-op and waits on it: python, sub-op, wait, Dummy_Wait."""

    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        y = in_data[0] + 1
        y.wait_to_read()
        self.assign(out_data[0], req[0], y)


@mx.operator.register("LivePlusWait")
class _PlusWaitProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):  # type: ignore[no-untyped-def]
        return _PlusWait()


@pytest.fixture(autouse=True)
def threaded_engine() -> Iterator[None]:
    mx.set_engine("threaded", workers=2)
    yield
    mx.set_engine("threaded")


def _rows(s: LiveSpans, t0_ns: int) -> list[tuple[str, str, int, int]]:
    """(thread, name, start ns, end ns) of each span, absolute again (to compare with a trace)."""
    return [
        (s.threads[k], n, round(a * 1e3) + t0_ns, round(b * 1e3) + t0_ns)
        for k, n, a, b in zip(s.thread.tolist(), s.name, s.start.tolist(), s.end.tolist(), strict=True)
    ]


# ---------------------------------------------------------------------------- the feed
def test_a_garbage_collection_is_its_own_colour_live_and_in_the_final_timeline() -> None:
    """A full collection of a 300,000-list heap (~20 ms) while recording: the live feed codes its
    span COLLECTION_ROLE, and the final timeline draws it in the "garbage collection" colour, not as
    a regular op; the legend says which."""
    from opprof.view.figure import PALETTE, ROLE_COLORS, ROLE_LABELS, build_timeline
    from opprof.view.layout import ROLE_NAMES, build_layout

    heap = [[i] for i in range(300_000)]
    prof = mx.Profiler().start()
    feed = prof.live_feed()
    (mx.nd.ones((3, 3)) + 1).wait_to_read()
    gc.collect()
    s = feed.poll()
    trace = prof.stop()
    del heap
    live = [r for n, r in zip(s.name, s.role.tolist(), strict=True) if n == "garbage collection (generation 2)"]
    assert live == [COLLECTION_ROLE]
    assert ROLE_NAMES[COLLECTION_ROLE] == "gc" and ROLE_LABELS["gc"] == "garbage collection"
    lay = build_layout(trace)
    (row,) = trace.table.collections().tolist()
    assert lay.role[lay.span_index == row].tolist() == [COLLECTION_ROLE]
    assert (lay.role == COLLECTION_ROLE).sum() == 1  # the engine's ops keep theirs
    tl = build_timeline(trace)
    c = np.asarray(tl.source.data["c"])  # every span drawn as itself at this size: its colour index
    assert (c == COLLECTION_ROLE).sum() == 1 and PALETTE[COLLECTION_ROLE] == ROLE_COLORS["gc"]
    (legend,) = tl.figure.legend
    assert "garbage collection" in [item.label["value"] for item in legend.items]


def test_the_feed_returns_spans_as_they_finish_each_once() -> None:
    prof = mx.Profiler().start()
    feed = prof.live_feed()
    done = threading.Event()

    def work() -> None:  # ~0.6 s of bursts of plain ops, from a thread of its own
        a = mx.nd.ones((4, 4))
        for _ in range(30):
            for _ in range(20):
                a = a + 1
            a.wait_to_read()
            time.sleep(0.02)
        done.set()

    worker = threading.Thread(target=work)
    worker.start()
    polls: list[LiveSpans] = []
    while not done.is_set():
        time.sleep(0.05)
        polls.append(feed.poll())
    worker.join()
    mx.nd.waitall()
    polls.append(feed.poll())
    snapshot = prof.snapshot()  # every span so far, before stop() adds its own final wait
    trace = prof.stop()

    assert sum(1 for p in polls[:-1] if len(p)) >= 3, "spans came only at the end, not while the work ran"
    rows = [r for p in polls for r in _rows(p, feed.recorder.t_start)]
    assert len(rows) == len(set(rows)), "a span was returned twice"
    assert polls[-1].total == len(rows) == snapshot.n_spans
    plus = [r for r in rows if r[1] == "_plus_scalar"]
    assert len(plus) == 600 == sum(1 for s in trace.spans if s.name == "_plus_scalar")
    expected = sorted((snapshot.thread_name(s.tid), s.name, s.start, s.end) for s in snapshot.spans)
    assert sorted(rows) == expected  # same threads, names and times (ns, through µs floats)
    assert all(p.skipped == 0 for p in polls) and not polls[-1].stopped
    after = feed.poll()  # stop()'s own final wait, and the news that nothing more will come
    assert after.stopped is True and after.name == ["WaitForAll"] and len(feed.poll()) == 0


def test_custom_op_spans_are_named_and_roled_like_the_final_trace() -> None:
    prof = mx.Profiler().start()
    feed = prof.live_feed()
    x = mx.nd.ones((3, 3))
    for _ in range(5):
        x = mx.nd.Custom(x, op_type="LivePlusWait")
    with mx.profiler.Task(mx.profiler.Domain("cell"), "my task"):
        x.wait_to_read()
    mx.nd.waitall()
    s = feed.poll()
    trace = prof.stop()
    assert s.stopped is False
    got = Counter(zip(s.name, s.role.tolist(), strict=True))
    parent = ROLE_CODE[Role.PARENT]
    codes = trace.table.role.tolist()
    for i in trace.table.collections().tolist():  # a collection meanwhile: its own colour, live too
        codes[i] = COLLECTION_ROLE
    want = Counter(
        (sp.name, c) for sp, c in zip(trace.spans, codes, strict=True) if c != parent and sp.name != "WaitForAll"
    ) + Counter({("WaitForAll", 0): sum(1 for sp in trace.spans if sp.name == "WaitForAll") - 1})  # stop()'s own
    assert got == want
    assert got[("LivePlusWait::pure_python", ROLE_CODE[Role.PYTHON])] == 5
    assert got[("LivePlusWait::_plus_scalar", ROLE_CODE[Role.SUBOP])] == 5
    assert got[("LivePlusWait::WaitForVar", ROLE_CODE[Role.WAIT])] == 5
    assert got[("LivePlusWait::Dummy_Wait", ROLE_CODE[Role.DUMMY_WAIT])] == 5
    # What others nest in: the Python of each call and the user's task.
    assert sorted({n for n, o in zip(s.name, s.outer.tolist(), strict=True) if o}) == ["LivePlusWait::pure_python", "my task"]
    assert feed.poll().stopped is True


def test_a_poll_is_capped_and_says_how_many_it_left_out() -> None:
    prof = mx.Profiler().start()
    feed = prof.live_feed(cap=100)
    a = mx.nd.ones((2, 2))
    for _ in range(1_000):
        a = a + 1
    mx.nd.waitall()
    s = feed.poll()
    empty = feed.poll()
    prof.stop()
    assert 0 < len(s) <= 100
    assert prof.trace is not None
    held = sum(sp.name == BACKPRESSURE for sp in prof.trace.spans)  # pushes the engine held back, all before the poll
    # The ops, ones(), the wait and the holds; and any garbage collection of a millisecond or more
    # before the poll (a span of its own: none, unless the suite's heap is collected meanwhile).
    collections = len(prof.trace.spans) - len(engine_spans(prof.trace))
    assert len(s) + s.skipped == s.total
    assert 1_002 + held <= s.total <= 1_002 + held + collections
    # An even stride: the sample spans the burst, not its first 100.
    plus = np.sort(s.start[np.array(s.name) == "_plus_scalar"])
    assert plus[-1] - plus[0] > 0.8 * (s.end.max() - s.start.min())
    # Nothing new by the next poll: none, but a collection that ran between the two.
    assert len(empty) == empty.total - s.total <= collections and empty.skipped == 0
    assert empty.thread.dtype == np.int32 and empty.start.dtype == np.float64 and empty.role.dtype == np.int8
    with pytest.raises(ValueError):
        LiveFeed(feed.recorder, cap=0)


def test_a_poll_takes_at_most_its_cap_and_says_what_it_skipped() -> None:
    """5,000 new ops, then a million, come strided down to the cap, then an idle poll brings nothing
    (what each costs is a row of ``benchmarks/live.py``)."""
    prof = mx.Profiler().start()
    feed = prof.live_feed()
    rec = feed.recorder
    mx.nd.ones((2, 2)).wait_to_read()
    r = rec.thread_records()[-1]
    template = next(x for x in r.plain)
    try:
        r.plain.extend([template] * 5_000)
        first = feed.poll()
        r.plain.extend([template] * 1_000_000)
        big = feed.poll()
        idle = feed.poll()
    finally:
        prof.stop()
    assert len(first) == feed.cap and first.skipped >= 5_000 - feed.cap
    assert len(big) <= feed.cap and big.skipped >= 995_000
    assert len(idle) == 0 and idle.skipped == 0


# ---------------------------------------------------------------------------- the figure
def test_the_live_timeline_streams_lanes_names_and_status() -> None:
    from opprof.view.live import LIVE_NAMES_SOURCE, LIVE_OUTER_SOURCE, LIVE_SOURCE, LiveTimeline

    view = LiveTimeline(rollover=50)
    prof = mx.Profiler().start()
    feed = prof.live_feed()
    x = mx.nd.Custom(mx.nd.ones((2, 2)), op_type="LivePlusWait")
    x.wait_to_read()
    mx.nd.waitall()
    view.add(feed.poll())
    assert view.source.name == LIVE_SOURCE and view.outer.name == LIVE_OUTER_SOURCE and view.names.name == LIVE_NAMES_SOURCE
    n_inner, n_outer = len(view.source.data["left"]), len(view.outer.data["left"])
    assert n_outer == 1 and n_inner >= 4  # the Python; ones, the sub-op, its wait, Dummy_Wait, the wait
    names = view.names.data["name"]
    assert names[view.outer.data["name"][0]] == "LivePlusWait::pure_python"
    assert {"MainThread"} <= set(view.lanes) and any(t.startswith("opprof-custom") for t in view.lanes)
    assert view.figure.y_range.start == len(view.lanes) and view.figure.y_range.end == 0
    assert "live: " in view.status.value and " spans, t = " in view.status.value
    for _ in range(30):  # past the rollover: the page keeps the last 50 of each source
        (mx.nd.ones((2, 2)) + 1).wait_to_read()
    view.add(feed.poll())
    prof.stop()
    last = feed.poll()
    view.add(last)
    assert len(view.source.data["left"]) == 50 and view.sent > 50
    assert len(names) == len(set(names)), "a name was sent twice"
    assert "recording stopped" in view.status.value and "keeps the last 50" in view.status.value
    parts = [view.status, view.bokeh]
    data = weakref.ref(view.source)
    view.retire()  # the parts close; the box itself stays open (JupyterLab would hide its successor)
    assert view.children == () and all(w.comm is None for w in parts) and view.comm is not None
    del parts
    gc.collect()
    assert data() is None, "the retired view still holds its spans"
    view.close()


# ---------------------------------------------------------------------------- the live thread
class _FakeFeed:
    def __init__(self, fail_at: int = -1) -> None:
        self.polls = 0
        self.fail_at = fail_at

    def poll(self) -> Any:
        self.polls += 1
        if self.polls == self.fail_at:
            raise RuntimeError("poll failed")
        return LiveSpans([], np.zeros(0, np.int32), np.zeros(0), np.zeros(0), [], np.zeros(0, np.int8), np.zeros(0, bool))


class _FakeView:
    def __init__(self) -> None:
        self.added = 0
        self.closed = False

    def add(self, spans: Any) -> None:
        self.added += 1

    def retire(self) -> None:
        self.closed = True


class _Handle:
    def __init__(self) -> None:
        self.updated: list[Any] = []

    def update(self, obj: Any) -> None:
        self.updated.append(obj)


def test_the_live_thread_shows_after_one_period_then_stops_and_is_replaced() -> None:
    handle = _Handle()
    shown: list[Any] = []
    live = LiveView(_FakeFeed(), period_s=0.02, make_view=_FakeView, show=lambda v: shown.append(v) or handle).start()  # type: ignore[arg-type]
    time.sleep(0.2)
    live.stop()
    assert not live.thread.is_alive() and live.error is None
    assert len(shown) == 1 and shown[0].added >= 3
    view = shown[0]
    assert live.replace("full") is True and handle.updated == ["full"] and view.closed
    live.stop()  # again: nothing happens

    quick = LiveView(_FakeFeed(), period_s=10, make_view=_FakeView, show=shown.append).start()  # type: ignore[arg-type]
    quick.stop()  # a cell shorter than a period shows no live view
    assert not quick.thread.is_alive() and quick.view is None and quick.replace("full") is False and len(shown) == 1


def test_an_error_in_the_live_thread_stops_it_quietly() -> None:
    live = LiveView(_FakeFeed(fail_at=2), period_s=0.01, make_view=_FakeView, show=lambda v: _Handle()).start()  # type: ignore[arg-type]
    live.thread.join(2)
    assert not live.thread.is_alive()
    assert isinstance(live.error, RuntimeError)
    live.stop()


# ---------------------------------------------------------------------------- %%opprof --live
# ``ip``: the IPython shell with opprof loaded and ``mx``, ``time`` imported (tests/conftest.py).
@pytest.fixture
def lives(monkeypatch: pytest.MonkeyPatch) -> list[LiveView]:
    """The LiveViews the magic makes, kept for the test to look at (and checked to be stopped)."""
    made: list[LiveView] = []

    class Kept(LiveView):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(magics, "LiveView", Kept)
    yield made
    assert all(not v.thread.is_alive() for v in made), "a live thread outlived its cell"
    assert get_engine().observer is None


# ~1 s of engine ops in bursts, then the time the cell's code ended.
LOOP = (
    "a = mx.nd.ones((4, 4))\nfor i in range(12):\n    for _ in range(50):\n        a = a + 1\n"
    "    a.wait_to_read()\n    time.sleep(0.08)\n"
)


def _cell(ip: Any, line: str, body: str) -> tuple[Any, Any]:
    with capture_output() as out:
        result = ip.run_cell(f"%%opprof {line}\n{body}")
    return result, out


def _check_streamed_then_replaced(live: LiveView, out: Any, t_end: float) -> None:
    mid = [p for p in live.polls if p[0] < t_end and p[1] > 0]
    assert len(mid) >= 2, f"no spans streamed while the cell ran: {live.polls}"
    assert live.error is None and live.view is None  # closed
    shown = [o for o in out.outputs if WIDGET in o.data and not o.update]
    updates = [o for o in out.outputs if o.update]
    assert len(shown) == 1 and len(updates) == 1, [(list(o.data), o.update) for o in out.outputs]
    display_id = shown[0].transient["display_id"]
    assert updates[0].transient["display_id"] == display_id and WIDGET in updates[0].data
    assert shown[0].data[WIDGET]["model_id"] != updates[0].data[WIDGET]["model_id"]  # the full timeline now


@pytest.mark.e2e  # ~2 s
def test_live_streams_while_the_cell_runs_and_the_full_timeline_replaces_it(ip: Any, lives: list[LiveView]) -> None:
    result, out = _cell(ip, "--live", LOOP + "t_end = time.perf_counter()")
    assert result.error_in_exec is None
    (live,) = lives
    _check_streamed_then_replaced(live, out, ip.user_ns["t_end"])
    assert live.polls[-1][2] >= 100  # of the 600 ops (the last ones may come after the last poll)


@pytest.mark.e2e  # ~3 s
def test_live_after_an_error_or_a_ctrl_c_ends_with_the_partial_timeline(ip: Any, lives: list[LiveView]) -> None:
    for error in (ValueError, KeyboardInterrupt):
        result, out = _cell(ip, "--live", LOOP + f"t_end = time.perf_counter()\nraise {error.__name__}('mid-cell')")
        assert isinstance(result.error_in_exec, error)
        _check_streamed_then_replaced(lives[-1], out, ip.user_ns["t_end"])
        assert ip.user_ns["_opprof"].error is result.error_in_exec
    assert len(lives) == 2


def test_no_live_view_without_a_kernel_or_with_no_live(ip: Any, lives: list[LiveView]) -> None:
    for line in ("", "--no-live", "--no-widget"):
        result, out = _cell(ip, line, "(mx.nd.ones((2, 2)) + 1).wait_to_read()")
        assert result.error_in_exec is None
    assert lives == []
    for line in ("--live --no-live", "--live --no-widget"):
        result, out = _cell(ip, line, "ran = True")
        assert "--live shows a widget" in out.stdout + out.stderr
    assert lives == []


@pytest.mark.e2e  # ~2 s
def test_live_is_the_default_in_a_kernel(ip: Any, lives: list[LiveView], monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[bool] = []
    monkeypatch.setattr(ip, "kernel", object(), raising=False)  # what ipykernel's shell has
    monkeypatch.setattr(magics, "unwatched", lambda: False)  # ... and a page that shows it
    monkeypatch.setattr(magics, "load_bokehjs", lambda once=False: loads.append(once) or False)
    result, out = _cell(ip, "", LOOP + "t_end = time.perf_counter()")
    assert result.error_in_exec is None
    (live,) = lives
    _check_streamed_then_replaced(live, out, ip.user_ns["t_end"])
    assert loads[0] is True  # BokehJS before the first BokehModel shows, once per kernel
    for line in ("--no-live", "--no-widget"):
        result, _ = _cell(ip, line, "(mx.nd.ones((2, 2)) + 1).wait_to_read()")
        assert result.error_in_exec is None
    assert len(lives) == 1
