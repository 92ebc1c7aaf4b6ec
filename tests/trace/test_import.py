"""Importing other tools' Chrome traces: real MXNet / PyTorch / VizTracer fixtures, bad files, round trips.

The fixtures in ``tests/data`` were made by the real tools (the scripts next to them regenerate
them): MXNet 1.9.1 (``mxnet-1.9.1-custom-op.py``), torch 2.13.0 CPU (``make_torch_trace.py``) and
VizTracer 1.1 (``make_viztracer_trace.py``).
"""

from __future__ import annotations

import gzip
import json
import re
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opprof.trace import Trace, TraceFormatError, from_chrome, load
from opprof.trace.formats.chrome import to_chrome
from opprof.trace.formats.mxnet import recover_mxnet

pytestmark = pytest.mark.timeout(120)

DATA = Path(__file__).parents[1] / "data"
MXNET = DATA / "mxnet-1.9.1-custom-op.json"
TORCH = DATA / "torch-2.13-custom-function.json"
VIZ = DATA / "viztracer-1.1-threads.json"
FIXTURES = [MXNET, TORCH, VIZ]


def quiet_load(path: Path) -> Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the real fixtures load without a single warning
        return load(path)


def imported(events: Any, **top: Any) -> tuple[Trace, list[str]]:
    """``from_chrome`` on an event list (bare) or with top-level keys; returns the warnings too."""
    obj = {"traceEvents": events, **top} if top else events
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = from_chrome(obj)
    return trace, [str(w.message) for w in caught]


def assert_same(a: Trace, b: Trace) -> None:
    assert a.threads == b.threads
    assert sorted(a.spans, key=repr) == sorted(b.spans, key=repr)
    assert a.instants == b.instants
    assert a.counters == b.counters
    assert a.flows == b.flows
    assert a.metadata == b.metadata


def nesting_problems(trace: Trace) -> list[str]:
    return [p for p in trace.validate() if "without nesting" in p]


# ---------------------------------------------------------------------------- MXNet 1.9.1
def test_mxnet_threads_become_small_named_ints() -> None:
    t = quiet_load(MXNET)
    assert t.metadata["producer"] == "mxnet"
    assert t.metadata["dropped_events"] == 0
    assert [th.tid for th in t.threads] == list(range(5))  # 5 real threads, keyed by tid across MXNet's category pids
    assert all(th.name.startswith("tid ") and "…" in th.name for th in t.threads)
    engine = next(th for th in t.threads if th.name.startswith("tid 1628…242"))
    assert "cpu/0" in engine.name and "operator" in engine.name
    source = {row[0]: row[3] for row in t.metadata["source_threads"]}
    assert source[engine.tid] == 16285209677280900242  # the 64-bit hash survives in the metadata
    assert all(s.tid in source for s in t.spans)
    assert len(t.counters) == 810


def test_mxnet_duplicate_async_copies_are_merged() -> None:
    t = quiet_load(MXNET)
    # 78 B/E ops, each also written as b/e; 253 C API calls and 6 pure_python spans exist only as b/e.
    assert t.metadata["duplicates_merged"] == 78
    plain = [s for s in t.spans if s.role != "parent"]
    assert len(plain) == 78 + 253 + 6
    keys = [(s.tid, s.name, s.start) for s in plain]
    assert len(keys) == len(set(keys))


def test_mxnet_custom_op_families_are_recovered_as_far_as_the_data_allows() -> None:
    t = quiet_load(MXNET)
    rec = t.metadata["custom_op_recovery"]
    assert rec["recovered"] == 6  # one invocation per pure_python span: 3 forward, 3 backward
    assert rec["complete"] == 0  # MXNet's completion `MyAddOne::` runs before the Python returns
    rows = t.custom_ops()
    assert [(r.op_type, r.backward) for r in rows] == [("MyAddOne", False)] * 3 + [("MyAddOne", True)] * 3
    for r in rows:
        assert r.python_ns + r.subops_ns + r.waiting_ns == r.wall_ns
        assert r.python_ns > 0
    # The first backward invocation is alone while its sub-ops start: they are attributed to it.
    first_bwd = rows[3]
    fam = t.families()[first_bwd.invocation]
    assert {s.name for s in fam if s.role == "subop"} == {"_backward_MyAddOne::_mul_scalar", "_backward_MyAddOne::CopyCPU2CPU"}
    assert first_bwd.subops_ns > 0
    notes = "\n".join(rec["unrecoverable"])
    assert "several invocations were open" in notes
    assert "ResourceParallelRandomSetSeed x3" in notes
    assert "no completion op" in notes
    assert rec["attributed"] + rec["unattributed"] == sum(
        1 for s in t.spans if s.role in ("python", "subop", "wait", "dummy_wait")
    )
    # Misnamed housekeeping is never put in a family.
    assert all(s.invocation is None for s in t.spans if s.name.endswith("::ResourceParallelRandomSetSeed"))


def test_mxnet_validate_says_where_the_trace_breaks_the_invariants() -> None:
    t = quiet_load(MXNET)
    problems = t.validate()
    assert problems, "a recovered MXNet trace has no Dummy_Wait per invocation"
    assert all(re.match(r"invocation \d+ \((_backward_)?MyAddOne\): 0 Dummy_Wait spans", p) for p in problems)
    assert nesting_problems(t) == []


def test_mxnet_recovery_with_clean_sequential_invocations() -> None:
    """One invocation in flight at a time: python, sub-ops, then the completion -- every part attributed."""
    ev = []
    for k in range(3):
        base = k * 1000
        ev += [
            {"ph": "b", "cat": "Custom Operator", "name": "Op::pure_python", "id": 7, "pid": 5, "tid": 7, "ts": base},
            {"ph": "e", "cat": "Custom Operator", "name": "Op::pure_python", "id": 7, "pid": 5, "tid": 7, "ts": base + 100},
            {"ph": "X", "cat": "Custom Operator", "name": "Op::_plus_scalar", "pid": 0, "tid": 9, "ts": base + 50, "dur": 100},
            {"ph": "X", "cat": "Custom Operator", "name": "Op::", "pid": 0, "tid": 9, "ts": base + 200, "dur": 5},
        ]
    ev.append({"ph": "M", "name": "process_name", "pid": 5, "args": {"name": "Custom Operator"}})
    t, warned = imported(ev)
    assert warned == []
    rec = t.metadata["custom_op_recovery"]
    assert (rec["recovered"], rec["complete"], rec["unattributed"]) == (3, 3, 0)
    assert t.validate() == []
    rows = t.custom_ops()
    assert [r.wall_ns for r in rows] == [205_000] * 3
    assert (rows[0].python_ns, rows[0].subops_ns) == (100_000, 55_000)  # the completion counts as sub-op time


def test_mxnet_recovery_without_python_spans_cuts_at_completions() -> None:
    ev = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "MXNET_C_API"}}]
    for k in range(2):
        ev += [
            {"ph": "X", "name": "Op::_mul_scalar", "pid": 0, "tid": 3, "ts": k * 100, "dur": 10},
            {"ph": "X", "name": "Op::", "pid": 0, "tid": 3, "ts": k * 100 + 20, "dur": 1},
        ]
    ev.append({"ph": "X", "name": "Op::_mul_scalar", "pid": 0, "tid": 3, "ts": 500, "dur": 10})
    t, _ = imported(ev)
    rec = t.metadata["custom_op_recovery"]
    assert (rec["recovered"], rec["complete"], rec["unattributed"]) == (2, 2, 1)
    assert any("assuming one in flight" in n for n in rec["unrecoverable"])
    assert [r.wall_ns for r in t.custom_ops()] == [21_000, 21_000]
    assert recover_mxnet(Trace()) == {"recovered": 0, "complete": 0, "attributed": 0, "unattributed": 0, "unrecoverable": []}


# ---------------------------------------------------------------------------- PyTorch, VizTracer
def test_torch_profiler_trace() -> None:
    t = quiet_load(TORCH)
    raw = json.loads(TORCH.read_text())["traceEvents"]
    assert t.metadata["producer"] == "pytorch"
    assert len(t.spans) == sum(1 for e in raw if e.get("ph") == "X")
    cats = {s.cat for s in t.spans}
    assert {"cpu_op", "user_annotation", "python_function"} <= cats
    names = {s.name for s in t.spans}
    assert {"MyAddOne", "MyAddOneBackward", "step_0", "step_1"} <= names
    assert len(t.flows) == 6 and {f.cat for f in t.flows} == {"fwdbwd"}
    assert all(f.dst_ts >= f.src_ts for f in t.flows)
    main = t.threads[0]
    assert re.fullmatch(r"thread \d+ \(python\)", main.name)
    assert len(t.instants) == 2
    # record_function's annotation starts inside the Python call that opens it: the report says where.
    problems = t.validate()
    assert problems and all("without nesting" in p and main.name in p and "step_" in p for p in problems)


def test_viztracer_trace() -> None:
    t = quiet_load(VIZ)
    assert t.metadata["producer"] == "viztracer"
    assert [th.name for th in t.threads] == ["MainThread", "worker-<0>", "worker-<1>"]
    assert t.validate() == []
    assert [i.name for i in t.instants] == ["checkpoint <b>html</b>"]  # text, as written
    assert t.instants[0].args == {"step": 1}
    assert [(c.name, c.values) for c in t.counters] == [("progress", {"value": 0.5})]
    leaf = [s for s in t.spans if s.name.startswith("leaf (")]
    assert len(leaf) == 3 * 2 * 3  # three threads, three calls of middle(), two leaf() each


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_round_trip_load_save_load(tmp_path: Path, path: Path) -> None:
    first = quiet_load(path)
    for name in ("again.json", "again.json.gz"):
        first.save(tmp_path / name)
        assert_same(first, quiet_load(tmp_path / name))
    assert first.validate() == quiet_load(tmp_path / "again.json").validate()


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_fixture_gzipped_or_as_a_bare_array(tmp_path: Path, path: Path) -> None:
    first = quiet_load(path)
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert_same(first, quiet_load(gz))
    sniffed = tmp_path / "gzip-inside.json"
    sniffed.write_bytes(gzip.compress(path.read_bytes()))
    assert_same(first, quiet_load(sniffed))
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(json.loads(path.read_text())["traceEvents"]))
    again = quiet_load(bare)
    assert len(again.spans) == len(first.spans) and again.threads == first.threads


def test_opprof_file_without_its_other_data_still_gives_families(tmp_path: Path) -> None:
    """A file of ours re-saved by a tool that drops ``otherData``: parents come back from the async track."""
    t = quiet_load(MXNET)
    obj = to_chrome(t)
    del obj["otherData"]
    back, _ = imported(obj["traceEvents"])
    assert len(back.custom_ops()) == len(t.custom_ops())
    assert back.metadata["duplicates_merged"] > 0


# ---------------------------------------------------------------------------- phases
def test_every_phase() -> None:
    ev = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "proc"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "second"}},
        {"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": 2, "args": {"sort_index": -1}},
        {"ph": "X", "name": "x", "pid": 1, "tid": 1, "ts": 0, "dur": 10.5, "args": {"k": 1}},
        {"ph": "B", "name": "outer", "pid": 1, "tid": 2, "ts": 1},
        {"ph": "B", "name": "inner", "pid": 1, "tid": 2, "ts": 2, "args": {"a": 1}},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 3, "args": {"b": 2}},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 4},
        {"ph": "b", "name": "req", "cat": "net", "id": "0x1", "pid": 1, "tid": 1, "ts": 1},
        {"ph": "n", "name": "mark", "cat": "net", "id": "0x1", "pid": 1, "tid": 1, "ts": 2},
        {"ph": "e", "name": "req", "cat": "net", "id": "0x1", "pid": 1, "tid": 2, "ts": 5},
        {"ph": "b", "name": "other", "cat": "net", "id2": {"global": 9}, "pid": 1, "tid": 1, "ts": 2},
        {"ph": "e", "name": "other", "cat": "net", "id2": {"global": 9}, "pid": 1, "tid": 1, "ts": 3},
        {"ph": "S", "name": "legacy", "cat": "old", "id": 4, "pid": 1, "tid": 1, "ts": 6},
        {"ph": "F", "name": "legacy", "cat": "old", "id": 4, "pid": 1, "tid": 1, "ts": 7},
        {"ph": "s", "name": "flow", "cat": "f", "id": 1, "pid": 1, "tid": 1, "ts": 1},
        {"ph": "t", "name": "flow", "cat": "f", "id": 1, "pid": 1, "tid": 2, "ts": 2},
        {"ph": "f", "name": "flow", "cat": "f", "id": 1, "pid": 1, "tid": 1, "ts": 3, "bp": "e"},
        {"ph": "i", "name": "inst", "pid": 1, "tid": 1, "ts": 4, "s": "t"},
        {"ph": "I", "name": "old-inst", "pid": 1, "tid": 1, "ts": 5},
        {"ph": "R", "name": "mark", "pid": 1, "tid": 1, "ts": 6},
        {"ph": "C", "name": "mem", "pid": 1, "ts": 1, "args": {"used": 10, "note": "x"}},
        {"ph": "C", "name": "ctr", "id": 3, "pid": 1, "ts": 2, "args": {"v": 1.5}},
        {"ph": "P", "name": "sample", "pid": 1, "tid": 1, "ts": 1},
        {"ph": "Z", "name": "unknown", "pid": 1, "tid": 1, "ts": 1},
        {"name": "no phase", "pid": 1, "tid": 1, "ts": 1},
    ]
    t, warned = imported(ev)
    assert t.metadata["dropped_events"] == 0
    assert t.metadata["skipped_phases"] == {"P": 1, "Z": 1, "(none)": 1}
    assert len(warned) == 1 and "skipped phases" in warned[0]
    by_name = {s.name: s for s in t.spans}
    assert by_name["x"].dur == 10_500 and by_name["x"].args == {"k": 1}
    assert by_name["inner"].args == {"a": 1, "b": 2}
    assert (by_name["outer"].start, by_name["outer"].end) == (1000, 4000)
    second = next(th for th in t.threads if th.name == "second")
    assert t.threads[0] is second  # thread_sort_index -1 sorts it first
    assert by_name["outer"].tid == by_name["inner"].tid == second.tid
    # Async slices go to per-process async lanes; non-overlapping tracks share one.
    lanes = {t.thread_name(by_name[n].tid) for n in ("req", "other")}
    assert lanes == {"proc / async net", "proc / async net 2"}
    assert t.thread_name(by_name["legacy"].tid) == "proc / async old"
    assert (by_name["req"].start, by_name["req"].end) == (1000, 5000)
    assert [(f.src_ts, f.dst_ts) for f in t.flows] == [(1000, 2000), (2000, 3000)]
    assert len({f.id for f in t.flows}) == 1
    assert sorted(i.name for i in t.instants) == ["inst", "mark", "mark", "old-inst"]
    assert sorted((c.name, tuple(c.values.items())) for c in t.counters) == [("ctr 3", (("v", 1.5),)), ("mem", (("used", 10.0),))]
    assert t.validate() == []


def test_processes_become_small_pids_named_by_their_process_name_events() -> None:
    ev = [
        {"ph": "M", "name": "process_name", "pid": 4242, "args": {"name": "trainer"}},
        {"ph": "X", "name": "a", "pid": 4242, "tid": 1, "ts": 0, "dur": 1},
        {"ph": "X", "name": "b", "pid": 4242, "tid": 2, "ts": 0, "dur": 1},
        {"ph": "X", "name": "c", "pid": 77, "tid": 1, "ts": 0, "dur": 1},  # the same tid in another process
    ]
    t, _ = imported(ev)
    assert [(th.name, th.pid) for th in t.threads] == [("trainer / tid 1", 0), ("trainer / tid 2", 0), ("pid 77 / tid 1", 1)]
    assert t.processes == {0: "trainer", 1: "pid 77"}  # one the file leaves unnamed is named as its threads are
    back = from_chrome(to_chrome(t))
    assert back.threads == t.threads and back.processes == t.processes
    # A file of one process without a name has no process names, as a trace of one process has.
    alone, _ = imported(ev[1:3])
    assert alone.processes == {} and {th.pid for th in alone.threads} == {0}


def test_mxnet_is_one_process_whatever_its_category_pids() -> None:
    t = quiet_load(MXNET)
    assert {th.pid for th in t.threads} == {0} and t.processes == {}
    assert len({row[2] for row in t.metadata["source_threads"]}) > 1  # MXNet's own pids are still there


def test_async_track_with_the_thread_id_is_drawn_on_the_thread() -> None:
    ev = [
        {"ph": "X", "name": "work", "pid": 1, "tid": 5, "ts": 0, "dur": 10},
        {"ph": "b", "name": "call", "cat": "api", "id": 5, "pid": 1, "tid": 5, "ts": 1},
        {"ph": "e", "name": "call", "cat": "api", "id": 5, "pid": 1, "tid": 5, "ts": 2},
    ]
    t, _ = imported(ev)
    assert len(t.threads) == 1 and {s.tid for s in t.spans} == {0}
    assert t.threads[0].name == "pid 1 / tid 5"


def test_big_and_odd_thread_ids() -> None:
    ev = [
        {"ph": "X", "name": "a", "pid": 3, "tid": 123456789012345, "ts": 0, "dur": 1},
        {"ph": "X", "name": "b", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 0, "dur": 1},
        {"ph": "X", "name": "c", "pid": [1], "tid": {"x": 1}, "ts": 0, "dur": 1},
        {"ph": "X", "name": "d", "ts": 0, "dur": 1},
    ]
    t, _ = imported(ev)
    assert [th.name for th in t.threads] == [
        "pid 3 / tid 1234…345",
        "pid Spans / tid PyTorch Profiler",
        'pid [1] / tid {"x": 1}',
        "pid 0 / tid 0",
    ]
    assert sorted(th.tid for th in t.threads) == [0, 1, 2, 3]


def test_html_and_script_names_stay_text(tmp_path: Path) -> None:
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>&amp;'
    ev = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": evil}},
        {"ph": "X", "name": evil, "cat": evil, "pid": 1, "tid": 1, "ts": 0, "dur": 1, "args": {evil: evil}},
        {"ph": "i", "name": evil, "pid": 1, "tid": 1, "ts": 0},
    ]
    t, _ = imported(ev)
    assert t.threads[0].name == evil and t.spans[0].name == evil and t.spans[0].cat == evil
    assert t.instants[0].name == evil and t.spans[0].args == {evil: evil}
    assert t.stats()[0].name == evil
    t.save(tmp_path / "evil.json")
    back = load(tmp_path / "evil.json")
    assert back.spans[0].name == evil and back.threads[0].name == evil


# ---------------------------------------------------------------------------- bad files
WHOLE_FILE_ERRORS: dict[str, tuple[bytes, str]] = {
    "empty.json": (b"", "empty"),
    "blank.json": (b"  \n", "empty"),
    "binary.json": (bytes(range(256)) * 4, "binary"),
    "png.json": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary"),
    "utf16.json": ('{"traceEvents": []}'.encode("utf-16"), "binary"),
    "truncated-object.json": (b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 2}, {"ph": "X", "ts"', "not valid JSON"),
    "garbage.json": (b"hello, world", "not valid JSON"),
    "invalid-utf8.json": (b'[{"ph": "X", "name": "\xff\xfe", "ts": 0, "dur": 1}]', "not valid JSON"),
    "number.json": (b"42", "expected a JSON list of events"),
    "string.json": (b'"traceEvents"', "expected a JSON list of events"),
    "object.json": (b'{"events": []}', "without 'traceEvents'"),
    "events-not-list.json": (b'{"traceEvents": {"ph": "X"}}', "'traceEvents' is a dict"),
    "deep.json": (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
    "bad-gzip.json.gz": (b"\x1f\x8b\x08\x00garbage", "gzip"),
    "sort-index.json": (b'[{"ph": "M", "name": "process_sort_index", "pid": 1, "args": {"sort_index": "first"}}]', "event 0"),
}


@pytest.mark.parametrize("name", list(WHOLE_FILE_ERRORS))
def test_whole_file_problems_raise_a_clear_error(tmp_path: Path, name: str) -> None:
    data, problem = WHOLE_FILE_ERRORS[name]
    path = tmp_path / name
    path.write_bytes(data)
    t0 = time.perf_counter()
    with pytest.raises(TraceFormatError) as err:
        load(path)
    assert time.perf_counter() - t0 < 10
    assert str(path) in str(err.value) and problem in str(err.value)
    assert len(str(err.value)) < 500


X = {"ph": "X", "name": "ok", "pid": 1, "tid": 1, "ts": 0, "dur": 1}
BAD_EVENTS: dict[str, tuple[list[Any], str]] = {
    "string timestamp": ([X, {**X, "ts": "soon"}], "non-numeric timestamp"),
    "missing timestamp": ([X, {"ph": "B", "name": "b", "pid": 1, "tid": 1}], "non-numeric timestamp"),
    "null duration": ([X, {**X, "dur": None}], "non-numeric duration"),
    "negative duration": ([X, {**X, "dur": -5}], "negative duration"),
    "E without B": ([X, {"ph": "E", "pid": 1, "tid": 1, "ts": 5}], "'E' events without an open 'B'"),
    "B never closed": ([X, {"ph": "B", "name": "open", "pid": 1, "tid": 1, "ts": 5}], "'B' events never closed"),
    "e without b": ([X, {"ph": "e", "id": 1, "cat": "c", "pid": 1, "tid": 1, "ts": 5}], "async 'e' events without"),
    "b never closed": ([X, {"ph": "b", "id": 1, "cat": "c", "pid": 1, "tid": 1, "ts": 5}], "async 'b' events never closed"),
    "async without id": ([X, {"ph": "b", "cat": "c", "pid": 1, "tid": 1, "ts": 5}], "without an 'id'"),
    "flow end without start": ([X, {"ph": "f", "id": 1, "pid": 1, "tid": 1, "ts": 5}], "without a start"),
    "flow start never finished": ([X, {"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": 5}], "never finished"),
    "not an object": ([X, 17], "not JSON objects"),
    "counter without numbers": ([X, {"ph": "C", "name": "c", "pid": 1, "ts": 1, "args": {"a": "high"}}], "counters without"),
}


@pytest.mark.parametrize("what", list(BAD_EVENTS))
def test_bad_events_are_dropped_with_a_warning_and_a_count(tmp_path: Path, what: str) -> None:
    events, reason = BAD_EVENTS[what]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(events))
    with pytest.warns(UserWarning) as caught:
        t = load(path)
    msg = " ".join(str(w.message) for w in caught)
    assert str(path) in msg and reason in msg and "(first: event 1)" in msg
    assert t.metadata["dropped_events"] == 1
    assert [s.name for s in t.spans] == ["ok"]
    assert t.validate() == []


def test_nan_timestamps_from_pythons_json_are_dropped(tmp_path: Path) -> None:
    path = tmp_path / "nan.json"
    path.write_text(json.dumps([X, {**X, "ts": float("nan")}, {**X, "dur": float("inf")}]))
    with pytest.warns(UserWarning, match="dropped 2 of 3 events"):
        t = load(path)
    assert t.metadata["dropped"] == {"with a missing or non-numeric timestamp": 1, "'X' slices with a non-numeric duration": 1}


def test_out_of_order_be_events_are_matched_in_time_order() -> None:
    ev = [
        {"ph": "E", "pid": 1, "tid": 1, "ts": 10},
        {"ph": "B", "name": "a", "pid": 1, "tid": 1, "ts": 0},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 5},
        {"ph": "B", "name": "b", "pid": 1, "tid": 1, "ts": 3},
    ]
    t, warned = imported(ev)
    assert warned == []
    assert sorted((s.name, s.start, s.end) for s in t.spans) == [("a", 0, 10_000), ("b", 3000, 5000)]


@pytest.mark.parametrize("cut", [1, 7, 30, 61])
def test_a_bare_array_cut_short_loads_up_to_its_last_whole_event(tmp_path: Path, cut: int) -> None:
    events = [{**X, "ts": k, "name": f"e{k}"} for k in range(5)]
    text = json.dumps(events)
    path = tmp_path / "cut.json"
    path.write_text(text[:-cut])
    with pytest.warns(UserWarning, match="cut short"):
        t = load(path)
    assert t.metadata["truncated"] is True
    assert [s.name for s in t.spans] == [f"e{k}" for k in range(len(t.spans))]
    assert len(t.spans) >= 3


def test_a_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match=re.escape(str(tmp_path / "nope.json"))):
        load(tmp_path / "nope.json")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=20,
)
FIELD = st.sampled_from(["ph", "ts", "dur", "pid", "tid", "id", "id2", "name", "cat", "args", "s", "bp"])
PHASE = st.sampled_from([*"XBEbneSTFpstfiIRCMPZ", "", "XX"])
EVENT = st.dictionaries(FIELD, JSON, max_size=8) | st.fixed_dictionaries(
    {"ph": PHASE, "ts": JSON, "pid": JSON, "tid": JSON}, optional={"dur": JSON, "id": JSON, "args": JSON, "name": JSON}
)


@pytest.mark.e2e  # 300 examples, ~4 s
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(JSON, st.lists(EVENT | JSON, max_size=12), st.fixed_dictionaries({"traceEvents": st.lists(EVENT, max_size=12)})))
def test_any_json_loads_or_raises_trace_format_error(obj: Any) -> None:
    """Any JSON, as a trace file: it loads, or says what is wrong. (Found by this test in CI: a
    float timestamp of 1.8e305 µs overflowed to inf in ns and raised OverflowError.)"""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trace = from_chrome(obj)
    except TraceFormatError:
        return
    trace.validate()
    assert all(isinstance(th.tid, int) for th in trace.threads)
    json.dumps(to_chrome(trace))


# ---------------------------------------------------------------------------- well-formed random traces
@st.composite
def well_formed(draw: st.DrawFn) -> tuple[list[dict[str, Any]], int]:
    """Random Chrome events: per thread a properly nested forest as X or B/E, plus instants, counters, flows."""
    events: list[dict[str, Any]] = []
    n_slices = 0
    for t in range(draw(st.integers(1, 3))):
        pid, tid = (
            draw(st.sampled_from([1, 2, 2**63 + 5])),
            draw(st.sampled_from([t, 2**64 - 1 - t, 2**40 + t])),
        )  # distinct per t
        if draw(st.booleans()):
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": draw(st.text(max_size=6))}})
        ts = draw(st.integers(0, 10**12))
        stack: list[tuple[str, int, bool]] = []
        for _ in range(draw(st.integers(0, 12))):
            action = draw(st.sampled_from(["open", "close", "leaf", "instant"]))
            ts += draw(st.integers(0, 50))
            name = draw(st.text(max_size=4))
            if action == "open":
                as_be = draw(st.booleans())
                if as_be:
                    events.append({"ph": "B", "name": name, "pid": pid, "tid": tid, "ts": ts})
                stack.append((name, ts, as_be))
            elif action == "close" and stack:
                name, start, as_be = stack.pop()
                if as_be:
                    events.append({"ph": "E", "pid": pid, "tid": tid, "ts": ts})
                else:
                    events.append({"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": start, "dur": ts - start})
                n_slices += 1
            elif action == "leaf":
                dur = draw(st.integers(0, 20)) + draw(st.sampled_from([0, 0.25, 0.5]))
                events.append(
                    {"ph": "X", "name": name, "cat": "c", "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": {"n": 1}}
                )
                ts += int(dur) + 1
                n_slices += 1
            else:
                events.append({"ph": "i", "name": name, "pid": pid, "tid": tid, "ts": ts + 0.5, "s": "t"})
        while stack:
            ts += 1
            name, start, as_be = stack.pop()
            events.append(
                {"ph": "E", "pid": pid, "tid": tid, "ts": ts}
                if as_be
                else {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": start, "dur": ts - start}
            )
            n_slices += 1
        events.append({"ph": "C", "name": "ctr", "pid": pid, "ts": ts, "args": {"v": draw(st.integers(0, 9))}})
        events.append({"ph": "s", "id": t, "cat": "flow", "name": "f", "pid": pid, "tid": tid, "ts": 0})
        events.append({"ph": "f", "id": t, "cat": "flow", "name": "f", "pid": pid, "tid": tid, "ts": ts, "bp": "e"})
    order = draw(st.permutations(range(len(events))))
    # Shuffle, but keep each thread's B/E in file order (a stack depends on it when timestamps tie).
    be = [i for i in range(len(events)) if events[i]["ph"] in "BE"]
    rest = [i for i in order if i not in set(be)]
    merged = be + rest if draw(st.booleans()) else rest + be
    return [events[i] for i in merged], n_slices


@pytest.mark.e2e  # 150 examples, ~1-2 s
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(well_formed(), st.booleans())
def test_well_formed_random_traces_load_validate_and_round_trip(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[list[dict[str, Any]], int], bare: bool
) -> None:
    events, n_slices = case
    t, warned = imported(events) if bare else imported(events, displayTimeUnit="ns")
    assert warned == []
    assert t.metadata["dropped_events"] == 0
    assert len(t.spans) == n_slices
    assert t.validate() == []
    assert len(t.flows) == len({e["id"] for e in events if e["ph"] == "s"})
    path = tmp_path_factory.mktemp("rt") / "t.json"
    t.save(path)
    assert_same(t, load(path))


def test_a_large_foreign_trace_loads_in_linear_time() -> None:
    """200k B/E events on 4 hashed threads: a guard against quadratic matching (the benchmark has the 1M numbers)."""
    ev = []
    for t in range(4):
        for k in range(25_000):
            ev.append({"ph": "B", "name": "op", "pid": 0, "tid": 2**63 + t, "ts": k * 10})
            ev.append({"ph": "E", "pid": 0, "tid": 2**63 + t, "ts": k * 10 + 5})
    t0 = time.perf_counter()
    t, _ = imported(ev)
    assert time.perf_counter() - t0 < 10
    assert len(t.spans) == 100_000


def test_opprofs_gil_tracks_without_its_other_data_come_back_as_thread_states_not_spans() -> None:
    """A file of ours stripped of its ``otherData`` goes through the importer: its ``gil`` tracks
    are the thread states (holders mapped to the importer's thread ids; the period is lost), not spans."""
    import numpy as np

    from opprof.trace import Span, ThreadInfo
    from opprof.trace.threadstates import ThreadState as S
    from opprof.trace.threadstates import ThreadStates

    threads = [ThreadInfo(1, "MainThread"), ThreadInfo(7, "opprof-custom-0"), ThreadInfo(9, "worker", 1)]
    spans = [Span("a", "operator", 1, 0, 100), Span("b", "operator", 7, 10, 90), Span("c", "operator", 9, 0, 50)]
    runs = [
        (1, S.HELD, 0, 60, -1),
        (1, S.HELD_OFF_CPU, 60, 80, -1),
        (7, S.BLOCKED, 0, 30, -1),
        (7, S.WAIT, 30, 60, 1),
        (7, S.WAIT, 60, 80, -1),
        (9, S.RUNNING, 5, 45, -1),
    ]
    trace = Trace(threads=threads, spans=spans)
    trace.thread_states = ThreadStates(*(np.array(c, dtype=np.int64) for c in zip(*runs, strict=True)), period_ns=1_000)
    obj = to_chrome(trace)
    del obj["otherData"]
    back = from_chrome(obj)
    assert back.n_spans == 3 and "gil" not in set(back.table.strs(back.table.cat).tolist())
    ts = back.thread_states
    assert ts is not None and ts.period_ns == 0 and ts.check() == []
    name, names = back.thread_names(), trace.thread_names()
    got = sorted(
        (name[t], s, a, b, name.get(h, "-"))
        for t, s, a, b, h in zip(*(c.tolist() for c in (ts.tid, ts.state, ts.start, ts.end, ts.holder)), strict=True)
    )
    want = sorted((names[t], int(s), a, b, names.get(h, "-")) for t, s, a, b, h in runs)
    assert got == want


@pytest.mark.parametrize("ts", [1.7976931348623157e305, -1.7976931348623157e305, 1e300])
def test_a_float_time_past_the_range_is_dropped_and_said(ts: float) -> None:
    """Another tool's slice whose float timestamp overflows once made ns (inf past ~1.8e305 µs) or
    passes int64: dropped as out of range, the others kept, one warning saying so."""
    events = [{"ph": "X", "ts": ts, "dur": 1.0, "name": "far"}, {"ph": "X", "ts": 5.0, "dur": 2.0, "name": "near"}]
    with pytest.warns(UserWarning, match="out of range"):
        trace = from_chrome(events)
    assert [trace.table.strings[n] for n in trace.table.name] == ["near"]
    assert trace.metadata["dropped_events"] == 1
    with pytest.warns(UserWarning, match="duration out of range"):
        trace = from_chrome([{"ph": "X", "ts": 5.0, "dur": 1.7976931348623157e305, "name": "long"}, events[1]])
    assert len(trace.table) == 1


def test_our_own_file_with_a_float_duration_past_the_range_says_so() -> None:
    """The reader of opprof's own Chrome files: a duration of inf, nan or past the range is a
    format error naming the event, not an OverflowError or ValueError."""
    ours = to_chrome(from_chrome([{"ph": "X", "ts": 1.0, "dur": 2.0, "name": "a", "pid": 1, "tid": 1}]))
    at = next(i for i, ev in enumerate(ours["traceEvents"]) if ev.get("ph") == "X")
    for dur in (1.7976931348623157e305, float("nan"), float("inf")):
        ours["traceEvents"][at]["dur"] = dur
        with pytest.raises(TraceFormatError, match=f"event {at}: duration"):
            from_chrome(ours)
