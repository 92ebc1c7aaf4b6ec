"""Unlucky and hostile use of the profiler: races between threads that start profiles and add or
remove observers (run for seconds, not once), an engine switched mid-recording, and an engine
switched from inside a custom op's Python. Nothing may hang, and nothing recorded may be lost."""

from __future__ import annotations

import threading
import time
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import opprof as mx
from opprof import nd
from opprof.engine import EngineObserver, get_engine
from opprof.engine.opr import EngineError
from opprof.profiler import Profiler, ProfilerError, Recorder
from tests.helpers import engine_spans


class _Quiet(EngineObserver):
    """An observer that hears everything and keeps nothing (a live view, a user's hook)."""


def test_profiles_started_and_observers_changed_at_once_never_leave_two_or_a_stray_recorder() -> None:
    """For 2 s, three threads start and stop profiles while two add and remove other observers: a
    started profile is the one recorder on the engine, a refused one leaves nothing behind, and
    afterwards the engine has no observer and a new profile records."""
    mx.set_engine("threaded", workers=2)
    engine = get_engine()
    stop_at = time.monotonic() + 2.0
    problems: list[str] = []
    started = Counter[str]()

    def profiler() -> None:
        while time.monotonic() < stop_at:
            try:
                prof = Profiler().start()
            except ProfilerError:
                started["refused"] += 1
                continue
            time.sleep(0.0005)  # hold it a moment: the other threads' starts meet it
            mine = [o for o in engine.observers if isinstance(o, Recorder)]
            if len(mine) != 1:
                problems.append(f"{len(mine)} recorders attached")
            started["ran"] += 1
            prof.stop(wait=False)

    def churn() -> None:
        while time.monotonic() < stop_at:
            o = _Quiet()
            engine.add_observer(o)
            engine.remove_observer(o)

    threads = [threading.Thread(target=profiler) for _ in range(3)] + [threading.Thread(target=churn) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert problems == []
    assert started["ran"] > 10 and started["refused"] > 0, started
    assert engine.observers == ()
    with mx.profile() as prof:
        a = nd.ones((2, 2)) + 1
        a.wait_to_read()
    assert prof.trace is not None and any(s.name == "_plus_scalar" for s in prof.trace.spans)
    assert engine.observers == ()
    mx.set_engine("threaded")


@pytest.mark.parametrize("first", ["threaded", "naive"])
def test_a_profile_follows_the_engine_switched_mid_recording(first: str) -> None:
    """``set_engine`` and ``engine.use`` inside a profile: every op pushed before and after each
    switch is recorded, their ids stay apart, and the metadata lists the switches."""
    mx.set_engine(first)
    with mx.profile() as prof:
        a = nd.ones((3, 3))
        for _ in range(40):
            a = a + 1
        mx.set_engine("naive" if first == "threaded" else "threaded")
        b = nd.ones((3, 3))
        for _ in range(60):
            b = b + 1
        with mx.engine.use(first):
            c = nd.ones((2, 2))
            for _ in range(30):
                c = c + 1
        nd.waitall()
    mx.set_engine("threaded")
    trace = prof.trace
    assert trace is not None and trace.validate() == []
    assert Counter(s.name for s in trace.spans)["_plus_scalar"] == 130
    switches = trace.metadata["engine_switches"]
    assert [s["engine"] for s in switches] == [("naive" if first == "threaded" else "threaded"), first, switches[0]["engine"]]
    assert trace.metadata["engine"] == switches[-1]["engine"]
    assert float(c.asnumpy()[0, 0]) == 31.0 and float(b.asnumpy()[0, 0]) == 61.0


class _Switcher(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        mx.set_engine("naive")  # would wait for this very operator: refused
        self.assign(out_data[0], req[0], in_data[0] + 1)


@mx.operator.register("HostileSwitcher")
class _SwitcherProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):  # type: ignore[no-untyped-def]
        return _Switcher()


@pytest.mark.parametrize("kind", ["threaded", "naive"])
def test_switching_engines_inside_a_custom_ops_python_is_refused_not_a_deadlock(kind: str) -> None:
    mx.set_engine(kind)
    engine = get_engine()
    done = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            nd.Custom(nd.ones((2, 2)), op_type="HostileSwitcher").asnumpy()
        except BaseException as e:  # the op's error, raised at the read
            errors.append(e)
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(20), "set_engine inside a custom op's Python hung"
    assert errors and "set_engine was called inside" in str(errors[0])
    assert isinstance(errors[0], EngineError) or "EngineError" in type(errors[0]).__name__ or errors[0].__cause__ is not None
    assert get_engine() is engine  # nothing was switched
    assert float((nd.ones((2, 2)) + 1).asnumpy()[0, 0]) == 2.0  # and the engine still works
    mx.set_engine("threaded")


# ---------------------------------------------------------------------------- no file lost, none blocked on
def _small_trace() -> mx.trace.Trace:
    from opprof.trace.synthetic import synthetic_trace

    return synthetic_trace(200, seed=1)


def test_a_failed_chrome_save_leaves_the_file_that_was_there(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from opprof.trace.formats import chrome

    path = tmp_path / "trace.json"
    path.write_bytes(b"the user's own file")
    real = chrome._event_chunks

    def fail_half_way(*a, **k):  # type: ignore[no-untyped-def]
        it = real(*a, **k)
        yield next(it)
        raise RuntimeError("disk full")

    monkeypatch.setattr(chrome, "_event_chunks", fail_half_way)
    with pytest.raises(RuntimeError, match="disk full"):
        _small_trace().save(path)
    assert path.read_bytes() == b"the user's own file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json"]  # no partial file left behind
    monkeypatch.undo()
    _small_trace().save(path)  # a save that works replaces it
    assert mx.trace.load(path).n_spans == _small_trace().n_spans


@pytest.mark.parametrize("name", ["out.json", "out.json.gz", "out.opprof", "out.html"])
def test_an_output_that_is_a_fifo_is_refused_at_once_not_blocked_on(tmp_path, name: str) -> None:  # type: ignore[no-untyped-def]
    import os
    import stat

    from opprof.view import save_html

    fifo = tmp_path / name
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(OSError, match="is a FIFO"):
        if name.endswith(".html"):
            save_html(_small_trace(), str(fifo))
        else:
            _small_trace().save(fifo)
    assert time.monotonic() - t0 < 5
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still the user's FIFO


def test_opprof_view_never_replaces_a_file_the_user_did_not_name(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from opprof.cli import main as cli

    trace_path = tmp_path / "report.v2.json"
    _small_trace().save(trace_path)
    own = tmp_path / "report.html"
    own.write_text("the user's report")
    assert cli(["view", str(trace_path)]) == 0
    assert own.read_text() == "the user's report"  # "report.v2" is the name, ".json" the ending
    made = tmp_path / "report.v2.html"
    assert b"<title>opprof" in made.read_bytes()[:4096]
    assert cli(["view", str(trace_path)]) == 0  # its own earlier timeline is replaced
    made.write_text("the user's notes, saved over the timeline")
    assert cli(["view", str(trace_path)]) == 1
    assert "not replaced" in capsys.readouterr().err
    assert made.read_text() == "the user's notes, saved over the timeline"
    out = tmp_path / "named.html"
    out.write_text("replace me")
    assert cli(["view", str(trace_path), "-o", str(out)]) == 0  # a file the user named is theirs to replace
    assert b"<title>opprof" in out.read_bytes()[:4096]


# ---------------------------------------------------------------------------- numbers past any sense
@pytest.mark.parametrize("argv", [["demo", "--threads", "99999999999"], ["why", "t.opprof", "--engine-threads", "5000"]])
def test_a_thread_count_past_the_bound_is_one_line_of_usage_at_once(argv: list[str], capsys) -> None:  # type: ignore[no-untyped-def]
    from opprof.cli import main as cli

    t0 = time.monotonic()
    with pytest.raises(SystemExit) as exit_:
        cli(argv)
    assert exit_.value.code == 2 and time.monotonic() - t0 < 5
    err = capsys.readouterr().err
    assert "at most 1,024 threads" in err and "Traceback" not in err


def test_an_engine_asked_for_a_billion_threads_refuses_and_the_current_one_stays() -> None:
    mx.set_engine("threaded")
    before = get_engine()
    for kw in ({"workers": 10**11}, {"custom_workers": 10**11}):
        with pytest.raises(ValueError, match="at most 1,024 threads"):
            mx.set_engine("threaded", **kw)
    assert get_engine() is before


@pytest.mark.parametrize("factor", ["1e-300", "1e300", "0.0001"])
def test_a_what_if_factor_past_the_model_is_one_line(tmp_path, factor: str, capsys) -> None:  # type: ignore[no-untyped-def]
    from opprof.cli import main as cli

    mx.set_engine("threaded")
    with mx.profile() as prof:
        (nd.ones((4, 4)) + 1).wait_to_read()
    assert prof.trace is not None
    path = tmp_path / "t.opprof"
    prof.trace.save(path)
    assert cli(["why", str(path), "--what-if", f"_plus_scalar={factor}"]) == 1
    err = capsys.readouterr().err
    assert "outside what the model replays" in err and "Traceback" not in err


_any_char = st.characters(exclude_categories=())  # lone surrogates too
_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.text(_any_char, max_size=8))


@settings(max_examples=60, deadline=None)
@given(
    name=st.text(_any_char, min_size=1, max_size=12),
    args=st.recursive(_json_leaf, lambda kids: st.dictionaries(st.text(max_size=4), kids, max_size=3), max_leaves=12),
    depth=st.integers(0, 600),
)
def test_a_trace_that_loads_can_be_saved_and_loads_back_the_same(tmp_path_factory, name: str, args, depth: int) -> None:  # type: ignore[no-untyped-def]
    """Any text (lone surrogates included: JSON's \\ud800 escape reads as one) and args nested up
    to 600 deep: a Chrome file that loads saves, in either format, and reads back the same."""
    import json

    from opprof.trace import load

    deep: object = args
    for _ in range(depth):
        deep = {"a": deep}
    event = {"ph": "X", "name": name, "cat": "op", "ts": 1, "dur": 2, "pid": 1, "tid": 1, "args": {"x": deep}}
    d = tmp_path_factory.mktemp("rt")
    src = d / "in.json"
    src.write_text(json.dumps({"traceEvents": [event]}, ensure_ascii=True))
    trace = load(src)
    for out in ("out.json", "out.json.gz", "out.opprof"):
        trace.save(d / out)
        again = load(d / out)
        assert [(s.name, s.args) for s in again.spans] == [(s.name, s.args) for s in trace.spans]


def _capped_run(max_events: int, snapshots: int) -> mx.trace.Trace:
    """20 ops, ``snapshots`` snapshots and dumps() while recording, 20 ops, a check, 40 ops more."""
    from opprof.profiler import mxnet_api

    mx.set_engine("naive")
    mx.profiler.set_config(profile_all=True, filename="unused.json", max_events=max_events)
    mx.profiler.set_state("run")
    try:
        a = nd.ones((2, 2))
        for _ in range(20):
            a = a + 1
        for _ in range(snapshots):
            mxnet_api._session.snapshot()  # type: ignore[union-attr]
            mx.profiler.dumps()
        for _ in range(20):
            a = a + 1
        mid = mxnet_api._session.snapshot()  # type: ignore[union-attr]
        assert Counter(s.name for s in mid.spans)["_plus_scalar"] == 40
        assert mid.metadata["dropped_events"] == 0
        for _ in range(40):
            a = a + 1
    finally:
        mx.profiler.set_state("stop")
        mx.profiler.set_config(max_events=5_000_000)
        mx.set_engine("threaded")
    trace = mx.profiler.last_trace()
    assert trace is not None
    return trace


def test_snapshots_while_recording_under_the_cap_take_no_slot_and_count_no_drop() -> None:
    """With max_events 60 (an op is one event): 100 snapshots and dumps() between the first 20 ops
    and the next 20 take no slot (all 40 recorded, none counted dropped); the last 40 overflow the
    cap, and the drops are counted exactly (what the same run records uncapped, less 60)."""
    whole = _capped_run(10**6, 0)
    capped = _capped_run(60, 100)
    n = len(engine_spans(whole))
    assert whole.metadata["dropped_events"] == 0 and n > 60
    assert len(engine_spans(capped)) <= 60
    assert capped.metadata["dropped_events"] == n - 60


@settings(max_examples=80, deadline=None)
@given(
    origin=st.integers(-(2**62), 2**62),
    offsets=st.lists(st.integers(0, 10**15), min_size=1, max_size=5),
    dur=st.integers(0, 10**9),
)
def test_what_opprof_writes_as_chrome_json_it_reads_back(tmp_path_factory, origin: int, offsets: list[int], dur: int) -> None:  # type: ignore[no-untyped-def]
    """Spans anywhere in time, up to 11 days apart: written as Chrome JSON, read back to the ns."""
    from opprof.trace import Span, ThreadInfo, Trace, load

    spans = [Span(f"s{k}", "op", 1, origin + o, origin + o + dur) for k, o in enumerate(sorted(offsets))]
    path = tmp_path_factory.mktemp("ts") / "t.json"
    Trace([ThreadInfo(1, "main")], spans).save(path)
    back = load(path)
    assert sorted((s.start, s.end) for s in back.spans) == sorted((s.start, s.end) for s in spans)


def test_times_too_far_apart_for_chrome_json_are_refused_before_writing(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from opprof.cli import main as cli
    from opprof.trace import Span, ThreadInfo, Trace, TraceSaveError

    far = Trace([ThreadInfo(1, "main")], [Span("a", "op", 1, 0, 10), Span("b", "op", 1, 2**62, 2**62 + 10)])
    out = tmp_path / "out.json"
    out.write_text("keep me")
    with pytest.raises(TraceSaveError, match="146 years at most"):
        far.save(out)
    assert out.read_text() == "keep me"
    far.save(tmp_path / "far.opprof")  # opprof's own file holds any int64 time
    assert cli(["convert", str(tmp_path / "far.opprof"), str(out)]) == 1
    err = capsys.readouterr().err
    assert "save it as .opprof" in err and "Traceback" not in err
    assert out.read_text() == "keep me"


_DEEPEST: dict[str, int] = {}


class _Deep(mx.operator.CustomOp):
    """Calls itself ``depth`` levels deep, each level's Python waiting for the next: every level
    blocks a custom-op thread, so the pool grows past its size to avoid deadlock."""

    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        x = in_data[0]
        depth = int(x.asnumpy()[0, 0])
        if depth == 0:
            _DEEPEST["threads"] = _custom_threads()  # every level above is blocked on a thread of its own
        if depth > 0:
            inner = nd.Custom(x - 1, op_type="HostileDeep")
            inner.wait_to_read()  # blocks this level's thread until the next level is done
            x = inner + 1
        self.assign(out_data[0], req[0], x)


@mx.operator.register("HostileDeep")
class _DeepProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):  # type: ignore[no-untyped-def]
        return _Deep()


def test_custom_op_threads_beyond_the_pools_size_retire_once_idle() -> None:
    mx.set_engine("threaded", workers=2, custom_workers=2)
    try:
        out = nd.Custom(nd.full((2, 2), 30.0), op_type="HostileDeep")
        assert float(out.asnumpy()[0, 0]) == 30.0
        grown = _DEEPEST["threads"]
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _custom_threads() > 2:
            time.sleep(0.01)
        assert grown > 20 and _custom_threads() <= 2, grown
        again = nd.Custom(nd.full((2, 2), 5.0), op_type="HostileDeep")  # the pool still works, and grows again
        assert float(again.asnumpy()[0, 0]) == 5.0
    finally:
        mx.set_engine("threaded")


def _custom_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("opprof-custom-") and t.is_alive())


# ---------------------------------------------------------------------------- a custom op called by another
class _Inner(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        time.sleep(0.02)  # wide enough on the timeline to be drawn alone, with its hover
        self.assign(out_data[0], req[0], in_data[0] * 2)


class _Outer(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        y = nd.Custom(in_data[0], op_type="HostileInner")  # a custom op inside this one's Python
        self.assign(out_data[0], req[0], y + 1)


@mx.operator.register("HostileInner")
class _InnerProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):  # type: ignore[no-untyped-def]
        return _Inner()


@mx.operator.register("HostileOuter")
class _OuterProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):  # type: ignore[no-untyped-def]
        return _Outer()


@pytest.mark.parametrize("kind", ["threaded", "naive"])
def test_a_custom_op_called_inside_anothers_python_is_linked_to_its_caller(kind: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from opprof.trace import load
    from opprof.view.figure import build_timeline

    mx.set_engine(kind)
    try:
        with mx.profile() as prof:
            out = nd.Custom(nd.ones((2, 2)), op_type="HostileOuter")
            assert float(out.asnumpy()[0, 0]) == 3.0
    finally:
        mx.set_engine("threaded")
    trace = prof.trace
    assert trace is not None and trace.validate() == []
    rows = {r.op_type: r for r in trace.custom_ops()}
    outer, inner = rows["HostileOuter"], rows["HostileInner"]
    assert outer.caller is None and inner.caller == outer.invocation
    # The arrow from the push, on the caller's Python thread, to the callee's start.
    t = trace.table  # (not trace.spans: a list view drops the engine's edges)
    (py,) = np.flatnonzero(np.array(t.str_list(t.name)) == "HostileOuter::pure_python")
    f = trace.flow_table
    calls = np.flatnonzero((f.dst_ts == inner.start_ns) & (f.src_tid == t.tid[py]))
    assert len(calls) == 1 and t.start[py] <= f.src_ts[calls[0]] <= t.end[py], f
    # Said where a reader looks: the parent's hover, its Chrome args; kept in .opprof.
    tl = build_timeline(trace)
    texts = tl.names.data["detail"]
    assert any(f"called by HostileOuter #{outer.invocation}" in x for x in texts), texts
    events = trace.to_chrome()["traceEvents"]
    assert any(((e.get("args") or {}).get("why") or {}).get("called_by_invocation") == outer.invocation for e in events)
    trace.save(tmp_path / "t.opprof")
    again = {r.op_type: r for r in load(tmp_path / "t.opprof").custom_ops()}
    assert again["HostileInner"].caller == again["HostileOuter"].invocation


def test_a_called_custom_op_is_drawn_under_its_callers_band() -> None:
    """Known answer: A [0, 10] takes band 0, B [1, 20] band 1; C [12, 15], called by B, would fit in
    band 0 once A ended, but goes under B's (band 2); D [13, 14], called by nobody, takes band 0."""
    from opprof.view.layout import _first_fit, _nested_fit

    starts, ends = [0, 1, 12, 13], [10, 20, 15, 14]
    assert _first_fit(starts, ends) == [0, 1, 0, 2]
    assert _nested_fit(starts, ends, [-1, -1, 1, -1]) == [0, 1, 2, 0]
    assert _nested_fit(starts, ends, [-1, -1, -1, -1]) == _first_fit(starts, ends)


def test_the_timeline_draws_a_callee_under_its_caller() -> None:
    from opprof.view.layout import ROLE_NAMES, build_layout

    mx.set_engine("threaded")
    with mx.profile() as prof:
        nd.Custom(nd.ones((2, 2)), op_type="HostileOuter").wait_to_read()
    trace = prof.trace
    assert trace is not None
    lay = build_layout(trace)
    t = trace.table
    band = np.flatnonzero(lay.role == ROLE_NAMES.index("parent"))
    top = {t.strings[t.name[lay.span_index[k]]]: float(lay.top[k]) for k in band}
    assert top["HostileInner"] > top["HostileOuter"]
