"""The columnar trace: lossless against the Span objects it replaced, and its files.

Random traces (hypothesis) hold everything a trace may hold: plain spans, custom-op families with
known and unknown roles, parents with stored splits (whole ns, or µs that are not), errors,
imported args and the GIL's thread states (or none). Properties: columns -> spans -> columns is the
identity; ``.opprof`` and Chrome JSON files read back the same trace, thread states included
(Chrome's fast reader and its careful one alike); and stats,
``custom_ops()`` and ``validate()`` on the columns equal the object-model implementations they
replaced, kept here as plain loops over :class:`Span` objects (the oracle).
"""

from __future__ import annotations

import dataclasses
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opprof.trace import (
    CUSTOM_OP,
    CounterSample,
    CustomOpRow,
    Flow,
    Instant,
    Role,
    Span,
    SpanTable,
    ThreadInfo,
    Trace,
    TraceFormatError,
    load,
    split_invocation,
)
from opprof.trace.analysis.split import stored_split
from opprof.trace.formats import chrome_fast, native
from opprof.trace.threadstates import ThreadState, ThreadStates

pytestmark = pytest.mark.timeout(120)
THREADS = [ThreadInfo(1, "MainThread"), ThreadInfo(2, "opprof-engine-0"), ThreadInfo(3, "opprof-custom-0", 1)]
ROLE_WORDS = ["parent", "python", "subop", "wait", "dummy_wait", "mystery", None]
CHILD = {"python", "subop", "wait", "dummy_wait"}


@st.composite
def span_args(draw: st.DrawFn, invocations: list[int]) -> dict[str, Any] | None:
    kind = draw(st.sampled_from(["none", "child", "parent", "foreign", "odd"]))
    if kind == "none":
        return None
    if kind == "foreign":
        return draw(
            st.dictionaries(st.sampled_from(["x", "y", "step", "note"]), st.integers(-5, 5) | st.text(max_size=3), min_size=1)
        )
    inv = draw(st.sampled_from(invocations)) if invocations else 0
    args: dict[str, Any] = {"op_type": draw(st.sampled_from(["MyOp", "Other"]))}
    role = draw(st.sampled_from(ROLE_WORDS)) if kind != "parent" else "parent"
    if role is not None:
        args["role"] = draw(st.sampled_from([role, Role(role)])) if role in {r.value for r in Role} else role
    args["invocation"] = inv
    if draw(st.booleans()):
        args["backward"] = draw(st.booleans())
    if kind == "parent":
        if draw(st.booleans()):
            whole = draw(st.booleans())
            for key in ("python_us", "subops_us", "waiting_us"):
                ns = draw(st.integers(0, 10**6))
                args[key] = ns / 1e3 if whole else ns / 1e3 + 0.0001
        if draw(st.booleans()):
            args["error"] = "ValueError: boom"
    if kind == "odd":
        args[draw(st.sampled_from(["extra", "step"]))] = draw(st.integers(0, 3))
    return args


@st.composite
def traces(draw: st.DrawFn, max_spans: int = 30) -> Trace:
    invocations = draw(st.lists(st.integers(0, 40), min_size=0, max_size=5, unique=True))
    n = draw(st.integers(0, max_spans))
    spans = []
    for _ in range(n):
        a = draw(st.integers(0, 400))
        spans.append(
            Span(
                draw(st.sampled_from(["MyOp", "MyOp::_plus", "MyOp::pure_python", "Other::Dummy_Wait", "_ones", "é ☃"])),
                draw(st.sampled_from(["operator", CUSTOM_OP, "wait", "user"])),
                draw(st.sampled_from([1, 2, 3])),
                a,
                a + draw(st.integers(0, 200)),
                draw(span_args(invocations)),
            )
        )
    flows = [
        Flow(k + 1, draw(st.sampled_from(["MyOp::_plus", "x"])), "push", draw(st.sampled_from([1, 3])), a, 2, a + d)
        for k, (a, d) in enumerate(draw(st.lists(st.tuples(st.integers(0, 400), st.integers(0, 50)), max_size=4)))
    ]
    trace = Trace(
        threads=list(THREADS),
        spans=spans,
        flows=flows,
        instants=[Instant("mark", "user", 1, 7, {"k": 1})] if draw(st.booleans()) else [],
        counters=[CounterSample("memory", 9, {"value": 2.5})] if draw(st.booleans()) else [],
        metadata={"producer": "test", "n": n},
    )
    trace.thread_states = draw(thread_states())
    return trace


@st.composite
def thread_states(draw: st.DrawFn) -> ThreadStates | None:
    """None (no GIL evidence), or runs on some of the threads: back to back or with gaps, of any
    state, a wait's holder another thread or unknown (-1)."""
    if draw(st.booleans()):
        return None
    rows = []
    for tid in draw(st.lists(st.sampled_from([th.tid for th in THREADS]), unique=True, max_size=3)):
        t = draw(st.integers(-50, 300))
        for _ in range(draw(st.integers(0, 6))):
            t += draw(st.sampled_from([0, 0, 3]))  # mostly back to back, as the sampler makes them
            state = draw(st.sampled_from(list(ThreadState)))
            others = [-1, *(th.tid for th in THREADS if th.tid != tid)]
            holder = draw(st.sampled_from(others)) if state == ThreadState.WAIT else -1
            d = draw(st.integers(0, 80))
            rows.append((tid, int(state), t, t + d, holder))
            t += d
    cols = [np.array(c, dtype=np.int64) for c in zip(*rows, strict=True)] if rows else [np.zeros(0, dtype=np.int64)] * 5
    return ThreadStates(*cols, period_ns=draw(st.sampled_from([0, 200_000, 1_000_000])))


@st.composite
def multi_process_traces(draw: st.DrawFn) -> Trace:
    """A trace of :func:`traces` with its threads in several processes (pids 0-5, each thread in
    one), some of them named, as a trace merged from Dask workers is."""
    t = draw(traces())
    pids = draw(st.lists(st.integers(0, 5), min_size=len(THREADS), max_size=len(THREADS)))
    t.threads = [ThreadInfo(th.tid, th.name, pid) for th, pid in zip(t.threads, pids, strict=True)]
    named = draw(st.lists(st.integers(0, 6), unique=True, max_size=4))  # pid 6: a process without threads
    names = st.sampled_from(["client", "worker tcp://127.0.0.1:4567", "é ☃", "", "opprof", "process 1"])
    t.processes = {pid: draw(names) for pid in named}
    return t


def _key(s: Span) -> tuple[Any, ...]:
    return (s.start, -s.end, s.name, s.cat, s.tid, repr(sorted((k, str(v)) for k, v in (s.args or {}).items())))


# ---------------------------------------------------------------------------- columns <-> spans
@pytest.mark.e2e  # 200 examples, ~3 s
@settings(max_examples=200, deadline=None)
@given(traces())
def test_columns_and_spans_round_trip(t: Trace) -> None:
    spans = list(t.spans)
    table = SpanTable.from_spans(spans)
    assert table.to_spans() == spans
    assert table.take(np.arange(len(table))).to_spans() == spans
    # Sub-tables keep their sparse args and splits with the right spans.
    keep = np.arange(len(table))[::2][::-1]
    assert table.take(keep).to_spans() == [spans[i] for i in keep.tolist()]
    both = SpanTable.concat([table, table.take(keep)])
    assert both.to_spans() == spans + [spans[i] for i in keep.tolist()]


def test_a_trace_builds_its_span_list_only_when_asked_and_then_the_list_is_the_trace() -> None:
    t = Trace(threads=list(THREADS), spans=SpanTable.from_spans([Span("a", "operator", 1, 0, 10)]))
    assert not t.has_span_list and t.n_spans == 1
    t.stats()
    assert not t.has_span_list, "analyses read the columns"
    t.spans[0].end = 30  # an edit to the list view is an edit to the trace
    assert t.stats()[0].total_ns == 30
    t.spans.append(Span("b", "operator", 2, 5, 6))
    assert t.n_spans == 2 and len(t.table) == 2


# ---------------------------------------------------------------------------- files
def _same(a: Trace, b: Trace, *, ordered: bool = True) -> None:
    assert b.threads == a.threads
    if ordered:
        assert b.spans == a.spans
    else:
        assert sorted(b.spans, key=_key) == sorted(a.spans, key=_key)
    assert b.flows == a.flows
    assert b.instants == a.instants and b.counters == a.counters
    assert b.metadata == a.metadata
    assert b.processes == a.processes
    _same_states(a, b)


def _same_states(a: Trace, b: Trace) -> None:
    sa, sb = a.thread_states, b.thread_states
    assert (sa is None) == (sb is None)
    if sa is not None and sb is not None:
        assert sb.period_ns == sa.period_ns
        for col in ("tid", "state", "start", "end", "holder"):
            assert getattr(sb, col).tolist() == getattr(sa, col).tolist(), col


@pytest.mark.e2e  # 100 files, ~2-4 s
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(t=traces(), compress=st.booleans())
def test_native_files_round_trip_exactly(tmp_path: Path, t: Trace, compress: bool) -> None:
    path = tmp_path / "t.opprof"
    t.save(path, compress=compress)
    assert zipfile.is_zipfile(path)
    _same(t, load(path))


@pytest.mark.e2e  # 100 files, ~3 s
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(t=multi_process_traces())
def test_native_files_keep_every_threads_process_and_the_processes_names(tmp_path: Path, t: Trace) -> None:
    path = tmp_path / "t.opprof"
    t.save(path)
    back = load(path)
    assert [th.pid for th in back.threads] == [th.pid for th in t.threads]
    assert back.processes == t.processes and list(back.processes) == sorted(t.processes)
    assert back == t


def _chrome_safe(t: Trace) -> Trace:
    """What Chrome JSON carries: a parent only with a unique invocation (its async track's id), in
    the track's category."""
    seen: set[int] = set()
    spans = []
    for s in t.spans:
        a = s.args or {}
        if a.get("role") == "parent":
            inv = a.get("invocation")
            if not isinstance(inv, int) or inv in seen:
                continue
            seen.add(inv)
            s = Span(s.name, CUSTOM_OP, s.tid, s.start, s.end, s.args)  # its track's category
        spans.append(s)
    # A process's name that only says what it is called without one is not read back.
    unnamed = Trace(metadata=t.metadata)
    processes = {p: n for p, n in t.processes.items() if n != unnamed.process_name(p)}
    out = Trace(t.threads, spans, t.instants, t.counters, t.flows, t.metadata, processes=processes)
    out.thread_states = t.thread_states
    return out


def _both_readers(tmp_path: Path, t: Trace, monkeypatch: pytest.MonkeyPatch) -> tuple[Trace, Trace]:
    """``t`` saved as Chrome JSON and read back by the fast reader, then by the careful one."""
    path = tmp_path / "t.json"
    t.save(path)
    fast = load(path)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise chrome_fast.NotFast

    with monkeypatch.context() as m:
        m.setattr(chrome_fast, "read_lines", refuse)
        careful = load(path)
    return fast, careful


@pytest.mark.e2e  # 100 files, ~2-4 s
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(t=traces())
def test_chrome_files_round_trip_through_the_fast_and_the_careful_reader(
    tmp_path: Path, t: Trace, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = _chrome_safe(t)
    fast, careful = _both_readers(tmp_path, t, monkeypatch)
    _same(t, fast, ordered=False)
    assert careful.spans == fast.spans  # the same trace, in the same order
    assert careful.flows == fast.flows and careful.threads == fast.threads
    _same_states(t, careful)  # the thread states too, through either reader


@pytest.mark.e2e  # 100 files, ~2 s
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(t=multi_process_traces())
def test_chrome_files_keep_every_threads_process_through_both_readers(
    tmp_path: Path, t: Trace, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = _chrome_safe(t)
    fast, careful = _both_readers(tmp_path, t, monkeypatch)
    _same(t, fast, ordered=False)
    assert all(fast.process_name(p) == t.process_name(p) for p in t.process_ids())
    assert careful.threads == fast.threads and careful.processes == fast.processes


def test_native_and_chrome_files_are_told_apart_by_content(tmp_path: Path) -> None:
    t = Trace(threads=list(THREADS), spans=[Span("a", "operator", 1, 0, 10)], metadata={"producer": "test"})
    t.save(tmp_path / "a.opprof")
    t.save(tmp_path / "b.json")
    (tmp_path / "a.opprof").rename(tmp_path / "native-named.json")
    (tmp_path / "b.json").rename(tmp_path / "chrome-named.opprof")
    assert load(tmp_path / "native-named.json").spans == t.spans
    assert load(tmp_path / "chrome-named.opprof").spans == t.spans


def _native(tmp_path: Path) -> Path:
    path = tmp_path / "t.opprof"
    Trace(threads=list(THREADS), spans=[Span("a", "operator", 1, 0, 10, {"x": 1})], metadata={"producer": "test"}).save(path)
    return path


def _rewrite(path: Path, edit: Any) -> None:
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    edit(members)
    with zipfile.ZipFile(path, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)


def _header(members: dict[str, bytes], old: bytes, new: bytes) -> None:
    assert old in members["opprof.json"]
    members["opprof.json"] = members["opprof.json"].replace(old, new)


def _npy(a: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=True)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.pop("spans.start.npy"), "column spans.start is missing"),
        (lambda m: m.__setitem__("spans.end.npy", _npy(np.zeros(1, dtype=np.float64))), "spans.end has dtype float64"),
        (lambda m: m.__setitem__("spans.tid.npy", _npy(np.zeros(3, dtype=np.int64))), r"spans.tid has shape \(3,\)"),
        (lambda m: m.__setitem__("spans.name.npy", _npy(np.array([9], dtype=np.int32))), "outside its table"),
        (lambda m: m.__setitem__("opprof.json", b"{not json"), "not valid JSON"),
        (lambda m: m.__setitem__("opprof.json", m["opprof.json"].replace(b'"version":2', b'"version":99')), "newer than"),
        (lambda m: m.__setitem__("opprof.json", m["opprof.json"].replace(b'"format":"opprof"', b'"format":"x"')), "format"),
        (lambda m: m.__setitem__("spans.args_at.npy", _npy(np.array([0, 0], dtype=np.int64))), "span_args holds 1 entries for 2"),
        (lambda m: _header(m, b'"processes":[]', b'"processes":{"0":"client"}'), "processes is not a list of .pid, name. pairs"),
        (lambda m: _header(m, b'"processes":[]', b'"processes":[[0,"client"],["1","worker"]]'), "processes entry 1 is not"),
        (lambda m: _header(m, b'"processes":[]', b'"processes":[[0,"client"],[0,"again"]]'), "processes entry 1 is not"),
        (lambda m: _header(m, b'"processes":[]', b'"processes":[[0]]'), r"processes entry 0 is not a \[pid, name\] pair"),
    ],
)
def test_a_malformed_native_file_says_what_is_wrong(tmp_path: Path, edit: Any, message: str) -> None:
    path = _native(tmp_path)
    _rewrite(path, edit)
    with pytest.raises(TraceFormatError, match=message) as err:
        load(path)
    assert str(path) in str(err.value)


def test_a_native_file_from_before_processes_reads_as_one_unnamed_process(tmp_path: Path) -> None:
    path = _native(tmp_path)
    _rewrite(path, lambda m: _header(m, b'"processes":[],', b""))
    back = load(path)
    assert back.processes == {} and back.threads == THREADS


def test_opening_a_native_file_never_unpickles(tmp_path: Path) -> None:
    """An object array (which only pickle can hold) is refused, not loaded."""
    path = _native(tmp_path)
    _rewrite(path, lambda m: m.__setitem__("spans.start.npy", _npy(np.array([object()], dtype=object))))
    with pytest.raises(TraceFormatError, match=r"not a readable opprof trace file|pickle"):
        load(path)


def test_a_cut_short_native_file_is_an_error(tmp_path: Path) -> None:
    path = _native(tmp_path)
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(TraceFormatError):
        native.load(path)


# ---------------------------------------------------------------------------- the object-model oracle
def oracle_stats(spans: list[Span]) -> list[tuple[str, str, int, int, int, int]]:
    acc: dict[tuple[str, str], list[int]] = {}
    for s in spans:
        a = acc.setdefault((s.cat, s.name), [0, 0, 1 << 62, -(1 << 62)])
        a[0] += 1
        a[1] += s.dur
        a[2] = min(a[2], s.dur)
        a[3] = max(a[3], s.dur)
    rows = [(name, cat, *v) for (cat, name), v in acc.items()]
    rows.sort(key=lambda r: (-r[3], r[1], r[0]))
    return [(r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows]


def oracle_families(spans: list[Span]) -> dict[int, list[Span]]:
    fam: dict[int, list[Span]] = defaultdict(list)
    for s in spans:
        if s.invocation is not None:
            fam[s.invocation].append(s)
    return dict(fam)


def oracle_custom_ops(spans: list[Span]) -> list[CustomOpRow]:
    rows = []
    for inv, fam in oracle_families(spans).items():
        p = next((s for s in fam if s.role == "parent"), None)
        if p is None:
            continue
        py, sub, wait = stored_split(p) or split_invocation(p, fam)
        a = p.args or {}
        op, bw = str(a.get("op_type", p.name)), bool(a.get("backward", False))
        rows.append(CustomOpRow(op, bw, inv, p.start, p.dur, py, sub, wait, a.get("error")))
    rows.sort(key=lambda r: (r.start_ns, r.invocation))
    return rows


def oracle_validate(t: Trace) -> list[str]:
    """The object-model ``validate`` this package had before its columns (same messages)."""
    spans = t.spans
    names = {th.tid: th.name for th in t.threads}
    out = []
    for i, s in enumerate(spans):
        if s.end < s.start:
            out.append(f"span {i} {s.name!r}: ends at {s.end} before it starts at {s.start}")
        if s.tid not in names:
            out.append(f"span {i} {s.name!r}: thread {s.tid} is not in trace.threads")
    by_tid: dict[int, list[Span]] = defaultdict(list)
    for s in spans:
        if s.role != "parent":
            by_tid[s.tid].append(s)
    for tid, ss in by_tid.items():
        ss.sort(key=lambda s: (s.start, -s.end))
        stack: list[Span] = []
        for s in ss:
            while stack and stack[-1].end <= s.start:
                stack.pop()
            if stack and s.end > stack[-1].end:
                top = stack[-1]
                out.append(
                    f"thread {tid} ({names.get(tid, f'thread {tid}')}): {s.name!r} [{s.start}, {s.end}] overlaps "
                    f"{top.name!r} [{top.start}, {top.end}] without nesting"
                )
                continue
            stack.append(s)
    for inv, fam in oracle_families(spans).items():
        parents = [s for s in fam if s.role == "parent"]
        if len(parents) != 1:
            out.append(f"invocation {inv}: {len(parents)} parent spans, expected 1")
            continue
        p = parents[0]
        dummies = [s for s in fam if s.role == "dummy_wait"]
        if len(dummies) != 1:
            out.append(f"invocation {inv} ({p.name}): {len(dummies)} Dummy_Wait spans, expected 1")
        elif dummies[0].end != p.end:
            out.append(f"invocation {inv} ({p.name}): parent ends at {p.end}, its Dummy_Wait at {dummies[0].end}")
        if not any(s.role == "python" for s in fam):
            out.append(f"invocation {inv} ({p.name}): no python span")
        prefix = p.name + "::"
        for s in fam:
            if s is p:
                continue
            if s.role not in CHILD:
                out.append(f"invocation {inv}: span {s.name!r} has unknown role {s.role!r}")
            if not s.name.startswith(prefix):
                out.append(f"invocation {inv}: child {s.name!r} is not named {prefix}<op>")
            if s.start < p.start or s.end > p.end:
                where = f"[{s.start}, {s.end}] is outside its parent {p.name!r} [{p.start}, {p.end}]"
                out.append(f"invocation {inv}: {s.name!r} {where}")
        stored = stored_split(p)
        if stored is not None and abs(sum(stored) - p.dur) > 10:
            out.append(f"invocation {inv}: split {sum(stored) / 1e3:.3f} us does not sum to the parent's {p.dur / 1e3:.3f} us")
    for f in t.flows:
        if f.dst_ts < f.src_ts:
            out.append(f"flow {f.id} {f.name!r}: arrives at {f.dst_ts} before it leaves at {f.src_ts}")
    return out


def _role_text(messages: list[str]) -> list[str]:
    # The oracle prints a role as the args hold it ('python' or <Role.PYTHON: 'python'>); compare words.
    return sorted(m.replace("<Role.", "").replace(">", "") for m in messages)


@pytest.mark.e2e  # 300 examples, ~5 s
@settings(max_examples=300, deadline=None)
@given(traces())
def test_analyses_on_columns_equal_the_object_model(t: Trace) -> None:
    spans = list(t.spans)
    columns = Trace(t.threads, SpanTable.from_spans(spans), t.instants, t.counters, t.flow_table, t.metadata)
    assert [(r.name, r.cat, r.count, r.total_ns, r.min_ns, r.max_ns) for r in columns.stats()] == oracle_stats(spans)
    rows = columns.custom_ops()
    # The oracle knows the split; the causes are checked to sum to its waiting (tests/trace/test_why.py
    # checks their values on workloads with known answers).
    bare = [dataclasses.replace(r, waiting_by_cause={}, python_cpu_ns=None, blockers=[]) for r in rows]
    assert bare == oracle_custom_ops(spans)
    assert all(sum(r.waiting_by_cause.values()) == r.waiting_ns for r in rows)
    got = columns.validate()
    want = oracle_validate(Trace(t.threads, spans, t.instants, t.counters, t.flows, t.metadata))
    assert sorted(m.split(": ", 1)[0] for m in got) == sorted(m.split(": ", 1)[0] for m in want)
    assert len(got) == len(want)
    for m in want:
        if "unknown role" not in m:
            assert m in got


def test_stats_break_many_ties_by_category_then_name() -> None:
    """Thousands of groups with one total (a trace of one-off names) take the ranked path."""
    rng = np.random.default_rng(0)
    spans = [
        Span(f"step {k}", str(rng.choice(["python", "user"])), 1, 10 * k, 10 * k + int(rng.choice([5, 7])))
        for k in rng.permutation(3000).tolist()
    ]
    t = Trace(threads=list(THREADS), spans=spans)
    assert [(r.name, r.cat, r.count, r.total_ns, r.min_ns, r.max_ns) for r in t.stats()] == oracle_stats(spans)


def test_the_library_never_builds_span_objects(tmp_path: Path) -> None:
    """Profiling, every analysis, both file formats, the text renderers and the timeline work on the
    columns: the list view (``trace.spans``) is never built for them."""
    import opprof
    from opprof.demo import train
    from opprof.trace.text import split_table, stats_table, summary_line, text_summary
    from opprof.view.figure import build_timeline

    with opprof.profile() as prof:
        train(steps=1)
    trace = prof.trace
    assert trace is not None
    trace.stats(), trace.custom_ops(), trace.validate(), trace.to_chrome()
    stats_table([trace]), split_table(trace), summary_line(trace), text_summary(trace)
    build_timeline(trace)
    for name in ("t.opprof", "t.json"):
        trace.save(tmp_path / name)
        back = load(tmp_path / name)
        back.custom_ops(), build_timeline(back)
        assert not back.has_span_list and not back.has_flow_list
    assert not trace.has_span_list and not trace.has_flow_list
