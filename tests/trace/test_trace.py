"""The trace model on hand-built traces, no engine: attribution, validation, stats, files, Chrome export.

Every time is an integer number of nanoseconds. The families below are built to look like what the
profiler records: on the threaded engine a custom op's Python runs on a custom-op worker while its
sub-ops run on engine workers; on the naive engine everything runs on one thread, the sub-ops nested
inside the Python span.
"""

from __future__ import annotations

import copy
import gzip
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opprof.trace import (
    CUSTOM_OP,
    CounterSample,
    Flow,
    Instant,
    Span,
    StatRow,
    ThreadInfo,
    Trace,
    TraceFormatError,
    from_chrome,
    load,
    split_invocation,
    validate,
)
from opprof.trace.formats import chrome
from opprof.trace.formats.chrome import to_chrome
from opprof.trace.formats.importer import SourceThread

pytestmark = pytest.mark.timeout(60)

MAIN, ENGINE, CUSTOM = 1, 2, 3
BIG = 2_913_589_117_617  # a realistic perf_counter_ns() origin


# ---------------------------------------------------------------------------- building traces
def child(op: str, what: str, role: str, tid: int, start: int, end: int, inv: int = 1) -> Span:
    return Span(f"{op}::{what}", CUSTOM_OP, tid, start, end, {"op_type": op, "role": role, "invocation": inv})


def parent(op: str, tid: int, start: int, end: int, inv: int = 1, backward: bool = False, **extra: Any) -> Span:
    name = f"_backward_{op}" if backward else op
    return Span(
        name, CUSTOM_OP, tid, start, end, {"op_type": op, "role": "parent", "invocation": inv, "backward": backward, **extra}
    )


def plain(name: str, tid: int, start: int, end: int, cat: str = "operator") -> Span:
    return Span(name, cat, tid, start, end)


def with_split(trace: Trace) -> Trace:
    """Store each parent's python/sub-ops/waiting split in its args, as the recorder does."""
    for fam in trace.families().values():
        for p in (s for s in fam if s.role == "parent"):
            py, sub, wait = split_invocation(p, fam)
            assert p.args is not None
            p.args.update(python_us=py / 1e3, subops_us=sub / 1e3, waiting_us=wait / 1e3)
    return trace


def threaded_trace(base: int = 0) -> Trace:
    """Two invocations as the threaded engine records them, plus plain ops and waits.

    Invocation 1 (``MyOp``, forward), parent [100, 200] on the engine worker:
        python [110, 160] on the custom worker, blocked in a wait [120, 130];
        sub-op [125, 140] and [170, 180] on the engine worker; Dummy_Wait [190, 200].
        python 40, sub-ops 25 (125-130, 170-180, 190-200), waiting 35.
    Invocation 2 (``_backward_MyOp``), parent [220, 250]: python [222, 240], a sub-op [230, 235]
        inside it (python time), Dummy_Wait [245, 250]: python 18, sub-ops 5, waiting 7.
    """
    b = base
    bw = "_backward_MyOp"
    spans = [
        plain("WaitForAll", MAIN, b + 40, b + 260, "wait"),
        plain("_ones", ENGINE, b + 50, b + 60),
        parent("MyOp", ENGINE, b + 100, b + 200, inv=1),
        child("MyOp", "pure_python", "python", CUSTOM, b + 110, b + 160),
        child("MyOp", "WaitForVar", "wait", CUSTOM, b + 120, b + 130),
        child("MyOp", "_plus_scalar", "subop", ENGINE, b + 125, b + 140),
        child("MyOp", "_mul_scalar", "subop", ENGINE, b + 170, b + 180),
        child("MyOp", "Dummy_Wait", "dummy_wait", ENGINE, b + 190, b + 200),
        plain("_plus_scalar", ENGINE, b + 205, b + 215),
        parent("MyOp", ENGINE, b + 220, b + 250, inv=2, backward=True, error="ValueError: boom"),
        Span(f"{bw}::pure_python", CUSTOM_OP, CUSTOM, b + 222, b + 240, {"op_type": "MyOp", "role": "python", "invocation": 2}),
        Span(f"{bw}::_mul_scalar", CUSTOM_OP, ENGINE, b + 230, b + 235, {"op_type": "MyOp", "role": "subop", "invocation": 2}),
        Span(
            f"{bw}::Dummy_Wait", CUSTOM_OP, ENGINE, b + 245, b + 250, {"op_type": "MyOp", "role": "dummy_wait", "invocation": 2}
        ),
    ]
    flows = [
        Flow(1, "MyOp::_plus_scalar", "push", CUSTOM, b + 115, ENGINE, b + 125),
        Flow(2, "MyOp::_mul_scalar", "push", CUSTOM, b + 150, ENGINE, b + 170),
        Flow(3, f"{bw}::_mul_scalar", "push", CUSTOM, b + 225, ENGINE, b + 230),
    ]
    threads = [ThreadInfo(MAIN, "MainThread"), ThreadInfo(ENGINE, "opprof-engine-0"), ThreadInfo(CUSTOM, "opprof-custom-0")]
    return with_split(Trace(threads=threads, spans=spans, flows=flows, metadata={"producer": "test", "engine": "threaded"}))


def naive_trace() -> Trace:
    """One invocation as the naive engine records it: everything on MainThread, nested.

    parent [0, 100]; python [10, 80] holding sub-ops [20, 30] and [50, 60] and a wait [35, 40];
    Dummy_Wait [85, 100]. python 45, sub-ops 35, waiting 20 (0-10, 35-40, 80-85).
    """
    spans = [
        parent("Op", MAIN, 0, 100),
        child("Op", "pure_python", "python", MAIN, 10, 80),
        child("Op", "_plus_scalar", "subop", MAIN, 20, 30),
        child("Op", "WaitForVar", "wait", MAIN, 35, 40),
        child("Op", "_mul_scalar", "subop", MAIN, 50, 60),
        child("Op", "Dummy_Wait", "dummy_wait", MAIN, 85, 100),
    ]
    return with_split(Trace(threads=[ThreadInfo(MAIN, "MainThread")], spans=spans))


def fam(trace: Trace, inv: int) -> tuple[Span, list[Span]]:
    spans = trace.families()[inv]
    (p,) = [s for s in spans if s.role == "parent"]
    return p, spans


# ---------------------------------------------------------------------------- split_invocation
def test_split_threaded_family_exact() -> None:
    t = threaded_trace()
    assert split_invocation(*fam(t, 1)) == (40, 25, 35)
    assert split_invocation(*fam(t, 2)) == (18, 5, 7)


def test_split_naive_family_inline_subops_are_not_python() -> None:
    t = naive_trace()
    assert split_invocation(*fam(t, 1)) == (45, 35, 20)


def test_split_python_overlapping_other_thread_subops_counts_as_python() -> None:
    p = parent("Op", ENGINE, 0, 100)
    spans = [
        p,
        child("Op", "pure_python", "python", CUSTOM, 0, 90),
        child("Op", "_plus_scalar", "subop", ENGINE, 20, 50),
        child("Op", "Dummy_Wait", "dummy_wait", ENGINE, 95, 100),
    ]
    assert split_invocation(p, spans) == (90, 5, 5)


def test_split_wait_overlapping_a_subop_is_subop_time() -> None:
    p = parent("Op", ENGINE, 0, 100)
    spans = [
        p,
        child("Op", "pure_python", "python", CUSTOM, 0, 60),
        child("Op", "WaitForVar", "wait", CUSTOM, 10, 50),  # blocked 10-50 ...
        child("Op", "_plus_scalar", "subop", ENGINE, 5, 30),  # ... on this sub-op until 30
        child("Op", "Dummy_Wait", "dummy_wait", ENGINE, 70, 100),
    ]
    # python: 0-10 and 50-60; sub-ops: 10-30 and 70-100; waiting: 30-50 and 60-70.
    assert split_invocation(p, spans) == (20, 50, 30)


def test_split_gaps_are_waiting_and_parts_outside_the_parent_are_clipped() -> None:
    p = parent("Op", ENGINE, 100, 200)
    spans = [
        p,
        child("Op", "pure_python", "python", CUSTOM, 90, 120),  # starts before the parent
        child("Op", "_plus_scalar", "subop", ENGINE, 150, 160),
        child("Op", "Dummy_Wait", "dummy_wait", ENGINE, 190, 210),  # ends after it
    ]
    assert split_invocation(p, spans) == (20, 20, 60)


def test_split_of_a_zero_length_parent_is_zero() -> None:
    p = parent("Op", ENGINE, 50, 50)
    assert split_invocation(p, [p, child("Op", "pure_python", "python", CUSTOM, 50, 50)]) == (0, 0, 0)


def test_split_only_python() -> None:
    p = parent("Op", ENGINE, 0, 10)
    assert split_invocation(p, [p, child("Op", "pure_python", "python", CUSTOM, 0, 10)]) == (10, 0, 0)


# ---------------------------------------------------------------------------- split: property
ROLES_TO_DRAW = (("python", 2), ("wait", 3), ("subop", 4), ("dummy_wait", 1))
N = 40


@st.composite
def random_family(draw: st.DrawFn) -> tuple[Span, list[Span]]:
    ps = draw(st.integers(0, N))
    pe = draw(st.integers(ps, N))
    p = parent("Op", ENGINE, ps, pe)
    spans = [p]
    for role, most in ROLES_TO_DRAW:
        for _ in range(draw(st.integers(0, most))):
            a = draw(st.integers(0, N))
            b = draw(st.integers(a, N))
            tid = draw(st.sampled_from([MAIN, ENGINE, CUSTOM]))
            spans.append(child("Op", role, role, tid, a, b))
    return p, draw(st.permutations(spans))


def brute_force_split(p: Span, spans: list[Span]) -> tuple[int, int, int]:
    """Classify each nanosecond [t, t+1) of the parent on its own, by the rule in the design notes."""
    py_tids = {s.tid for s in spans if s.role == "python"}

    def covers(s: Span, t: int) -> bool:
        return s.start <= t < s.end

    out = [0, 0, 0]
    for t in range(p.start, p.end):
        python = any(covers(s, t) for s in spans if s.role == "python")
        subop = any(covers(s, t) for s in spans if s.role in ("subop", "dummy_wait"))
        blocked = any(covers(s, t) for s in spans if s.role == "wait") or any(
            covers(s, t) for s in spans if s.role in ("subop", "dummy_wait") and s.tid in py_tids
        )
        out[0 if python and not blocked else 1 if subop else 2] += 1
    return out[0], out[1], out[2]


@pytest.mark.e2e  # 400 examples, ~1-1.5 s
@settings(max_examples=400, deadline=None)
@given(random_family())
def test_split_matches_per_nanosecond_classification(family: tuple[Span, list[Span]]) -> None:
    p, spans = family
    py, sub, wait = split_invocation(p, spans)
    assert py >= 0 and sub >= 0 and wait >= 0
    assert py + sub + wait == p.dur
    assert (py, sub, wait) == brute_force_split(p, spans)


# ---------------------------------------------------------------------------- validate
def test_valid_hand_built_traces_have_no_problems() -> None:
    assert validate(threaded_trace()) == []
    assert threaded_trace().validate() == []
    assert validate(naive_trace()) == []
    assert validate(Trace()) == []


def find(trace: Trace, name: str, inv: int | None = None) -> Span:
    (s,) = [s for s in trace.spans if s.name == name and (inv is None or s.invocation == inv)]
    return s


def _overlap_on_one_thread(t: Trace) -> str:
    t.spans += [plain("_a", MAIN, 300, 400), plain("_b", MAIN, 350, 450)]
    return "_b"


def _child_outside_parent(t: Trace) -> str:
    s = find(t, "MyOp::_mul_scalar")
    s.start, s.end = 260, 270  # after its parent [100, 200], alone on the engine thread
    return "MyOp::_mul_scalar"


def _parent_not_ending_with_dummy_wait(t: Trace) -> str:
    find(t, "MyOp::Dummy_Wait").end = 195
    with_split(t)
    return "Dummy_Wait"


def _two_parents(t: Trace) -> str:
    t.spans.append(parent("MyOp", ENGINE, 100, 200, inv=1))
    return "parent"


def _missing_python(t: Trace) -> str:
    t.spans.remove(find(t, "MyOp::pure_python"))
    t.spans.remove(find(t, "MyOp::WaitForVar"))
    with_split(t)
    return "python"


def _child_without_type_prefix(t: Trace) -> str:
    find(t, "MyOp::_mul_scalar").name = "_mul_scalar_orphan"
    return "_mul_scalar_orphan"


def _split_not_summing(t: Trace) -> str:
    p = find(t, "MyOp", inv=1)
    assert p.args is not None
    p.args["python_us"] += 0.05
    return "split"


def _span_on_unknown_thread(t: Trace) -> str:
    t.spans.append(plain("_ghost", 9, 300, 310))
    return "_ghost"


def _end_before_start(t: Trace) -> str:
    t.spans.append(plain("_backwards", MAIN, 310, 300))
    return "_backwards"


def _flow_backwards(t: Trace) -> str:
    t.flows.append(Flow(7, "MyOp::_mul_scalar", "push", CUSTOM, 175, ENGINE, 170))
    return "flow 7"


def _unknown_role(t: Trace) -> str:
    s = find(t, "MyOp::_mul_scalar")
    assert s.args is not None
    s.args["role"] = "mystery"
    return "mystery"


def _two_dummy_waits(t: Trace) -> str:
    t.spans.append(child("MyOp", "Dummy_Wait", "dummy_wait", MAIN, 190, 200))
    return "Dummy_Wait"


MUTATIONS: dict[str, Callable[[Trace], str]] = {
    "overlapping spans on one thread": _overlap_on_one_thread,
    "child outside its parent": _child_outside_parent,
    "parent not ending with its Dummy_Wait": _parent_not_ending_with_dummy_wait,
    "two parents": _two_parents,
    "missing python": _missing_python,
    "child without Type:: prefix": _child_without_type_prefix,
    "split not summing": _split_not_summing,
    "span on unknown thread": _span_on_unknown_thread,
    "end before start": _end_before_start,
    "flow backwards in time": _flow_backwards,
    "unknown role": _unknown_role,
    "two Dummy_Waits": _two_dummy_waits,
}

# What each message must say (besides naming the culprit), loosely.
KEYWORDS = {
    "overlapping spans on one thread": r"overlap|nest",
    "child outside its parent": r"outside|contain",
    "parent not ending with its Dummy_Wait": r"end",
    "two parents": r"\b2\b",
    "missing python": r"no python|python span|missing",
    "child without Type:: prefix": r"MyOp::|named|prefix",
    "split not summing": r"sum",
    "span on unknown thread": r"thread 9|\b9\b",
    "end before start": r"before|negative|end",
    "flow backwards in time": r"before|backward|earlier",
    "unknown role": r"role",
    "two Dummy_Waits": r"\b2\b",
}


@pytest.mark.parametrize("what", list(MUTATIONS))
def test_validate_reports_each_broken_invariant(what: str) -> None:
    t = threaded_trace()
    culprit = MUTATIONS[what](t)
    problems = validate(t)
    assert problems, f"{what}: validate() found nothing"
    assert all(isinstance(p, str) and p for p in problems)
    hits = [p for p in problems if culprit in p and re.search(KEYWORDS[what], p)]
    assert hits, f"{what}: no message names {culprit!r} and matches {KEYWORDS[what]!r}: {problems}"


def test_validate_accepts_touching_and_zero_length_spans() -> None:
    t = threaded_trace()
    t.spans += [plain("_x", MAIN, 260, 270), plain("_y", MAIN, 270, 270), plain("_z", MAIN, 270, 280)]
    assert validate(t) == []


def test_validate_ignores_parents_for_thread_nesting() -> None:
    # A parent crosses threads: it starts on the engine worker and spans other work there.
    t = threaded_trace()
    # [215, 236] on ENGINE crosses parent 2 [220, 250] there, and nests or touches everything else.
    t.spans.append(plain("_cross", ENGINE, 215, 236))
    assert validate(t) == []


# ---------------------------------------------------------------------------- stats and custom_ops
def test_stats_aggregates_per_category_and_name() -> None:
    t = Trace(
        threads=[ThreadInfo(1, "MainThread")],
        spans=[
            plain("a", 1, 0, 10),
            plain("a", 1, 10, 40),
            plain("a", 1, 40, 60),
            plain("a", 1, 60, 65, cat="custom"),
            plain("b", 1, 100, 200, cat="wait"),
        ],
    )
    rows = t.stats()
    assert rows == [
        StatRow("b", "wait", 1, 100, 100, 100),
        StatRow("a", "operator", 3, 60, 10, 30),
        StatRow("a", "custom", 1, 5, 5, 5),
    ]
    assert [r.avg_ns for r in rows] == [100.0, 20.0, 5.0]
    assert Trace().stats() == []


def test_stats_counts_every_span_of_the_family_trace() -> None:
    t = threaded_trace()
    rows = {(r.cat, r.name): r for r in t.stats()}
    assert sum(r.count for r in rows.values()) == len(t.spans)
    assert sum(r.total_ns for r in rows.values()) == sum(s.dur for s in t.spans)
    assert rows[(CUSTOM_OP, "MyOp")].count == 1 and rows[(CUSTOM_OP, "MyOp")].total_ns == 100
    assert rows[("operator", "_plus_scalar")].total_ns == 10


def test_custom_ops_rows() -> None:
    rows = threaded_trace(base=BIG).custom_ops()
    assert [(r.op_type, r.backward, r.invocation) for r in rows] == [("MyOp", False, 1), ("MyOp", True, 2)]
    r1, r2 = rows
    assert (r1.start_ns, r1.wall_ns, r1.python_ns, r1.subops_ns, r1.waiting_ns, r1.error) == (BIG + 100, 100, 40, 25, 35, None)
    assert (r2.start_ns, r2.wall_ns, r2.python_ns, r2.subops_ns, r2.waiting_ns) == (BIG + 220, 30, 18, 5, 7)
    assert r2.error == "ValueError: boom"
    for r in rows:
        assert r.python_ns + r.subops_ns + r.waiting_ns == r.wall_ns


def test_custom_ops_skips_families_without_parent() -> None:
    t = threaded_trace()
    t.spans.remove(find(t, "MyOp", inv=1))
    assert [r.invocation for r in t.custom_ops()] == [2]


# ---------------------------------------------------------------------------- save / load
def rich_trace() -> Trace:
    t = threaded_trace(base=BIG)
    t.threads.append(ThreadInfo(4, 'Thread "quoted" é\u2603 \\ tab\t'))
    t.spans.append(plain("user \u00e9 span", 4, BIG + 7, BIG + 1_000_000_007, cat="user"))
    t.instants.append(Instant("mark", "dom", 4, BIG + 33))
    t.instants.append(Instant("mark2", "dom", MAIN, BIG + 34, {"k": 1}))
    t.counters.append(CounterSample("mem", BIG + 41, {"mem": 3.5}))
    t.metadata.update({"dropped_events": 0, "incomplete_invocations": 0, "nested": {"a": [1, 2]}, "t_start_ns": BIG - 5})
    return t


def span_key(s: Span) -> tuple[Any, ...]:
    return (s.start, s.end, s.tid, s.name, s.cat, json.dumps(s.args or {}, sort_keys=True))


def assert_same_trace(a: Trace, b: Trace) -> None:
    assert b.threads == a.threads
    assert [span_key(s) for s in sorted(b.spans, key=span_key)] == [span_key(s) for s in sorted(a.spans, key=span_key)]
    assert b.flows == a.flows
    assert b.metadata == a.metadata
    assert b.instants == a.instants
    assert b.counters == a.counters


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_save_load_round_trip_is_lossless(tmp_path: Path, suffix: str) -> None:
    t = rich_trace()
    path = tmp_path / f"trace{suffix}"
    t.save(path)
    raw = path.read_bytes()
    if suffix.endswith(".gz"):
        assert raw[:2] == b"\x1f\x8b"
        raw = gzip.decompress(raw)
    json.loads(raw)  # plain Chrome JSON
    back = load(path)
    assert_same_trace(t, back)
    assert validate(back) == []
    assert back.custom_ops() == t.custom_ops()


spans_strategy = st.lists(
    st.tuples(
        st.text(min_size=1, max_size=8),
        st.sampled_from(["operator", "wait", "user"]),
        st.integers(1, 3),
        st.integers(0, 10**13),  # up to ~3 hours after the origin
        st.integers(0, 10**10),
    ),
    max_size=20,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spans=spans_strategy, base=st.integers(0, 2**62))
def test_round_trip_keeps_every_nanosecond(tmp_path: Path, spans: list[tuple[str, str, int, int, int]], base: int) -> None:
    t = Trace(
        threads=[ThreadInfo(1, "MainThread"), ThreadInfo(2, "b"), ThreadInfo(3, "c")],
        spans=[Span(name, cat, tid, base + a, base + a + d) for name, cat, tid, a, d in spans],
        metadata={"producer": "test"},
    )
    path = tmp_path / "t.json"
    t.save(path)
    assert_same_trace(t, load(path))


def test_from_chrome_round_trip_without_a_file() -> None:
    t = rich_trace()
    assert_same_trace(t, from_chrome(json.loads(json.dumps(to_chrome(t)))))


def test_files_that_kept_flows_in_other_data_still_load() -> None:
    """Before 2026-11-30, flows were also listed in ``otherData``; such a file keeps them exactly."""
    t = rich_trace()
    assert t.flows
    obj = json.loads(json.dumps(to_chrome(t)))
    obj["traceEvents"] = [ev for ev in obj["traceEvents"] if ev["ph"] not in ("s", "f")]
    obj["otherData"]["opprof"]["flows"] = [[f.id, f.name, f.cat, f.src_tid, f.src_ts, f.dst_tid, f.dst_ts] for f in t.flows]
    assert from_chrome(obj).flows == t.flows


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chrome, "CHUNK", 5)


def test_save_writes_chunks_that_load_reads_one_at_a_time(
    tmp_path: Path, small_chunks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file is the export's JSON (newlines between chunks aside), and loading it never parses it whole."""
    t = rich_trace()
    path = tmp_path / "t.json"
    t.save(path)
    raw = path.read_bytes()
    assert raw.count(b"\n") >= 5, "several chunks"
    assert json.loads(raw) == json.loads(json.dumps(to_chrome(t)))

    def whole_file_parse(*args: Any) -> Any:
        raise AssertionError("parsed the whole file")

    monkeypatch.setattr(chrome, "parse_json", whole_file_parse)
    back = load(path)
    assert_same_trace(t, back)
    assert back.custom_ops() == t.custom_ops()


def test_a_bad_event_in_a_saved_chunk_is_named_with_the_file(tmp_path: Path, small_chunks: None) -> None:
    path = tmp_path / "t.json"
    rich_trace().save(path)
    lines = path.read_bytes().split(b"\n")
    lines[3] = re.sub(rb'"ts":[0-9.]+', b'"ts":"soon"', lines[3], count=1)
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(TraceFormatError, match=r"event 1[5-9]: timestamp 'soon' is not a number") as err:
        load(path)
    assert str(path) in str(err.value)


def test_broken_json_inside_a_saved_chunk_is_an_error_naming_the_file(tmp_path: Path, small_chunks: None) -> None:
    path = tmp_path / "t.json"
    rich_trace().save(path)
    lines = path.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b"}", b"", 1)
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(TraceFormatError, match="not valid JSON") as err:
        load(path)
    assert str(path) in str(err.value)


@pytest.fixture
def good_file(tmp_path: Path) -> Path:
    p = tmp_path / "good.json"
    rich_trace().save(p)
    return p


BAD_FILES: dict[str, Callable[[bytes], bytes]] = {
    "empty.json": lambda good: b"",
    "blank.json": lambda good: b" \n\t\n",
    "truncated.json": lambda good: good[: len(good) // 2],
    "truncated-end.json": lambda good: good[:-1],
    "not-json.json": lambda good: b"this is not a trace\n",
    "binary.json": lambda good: b"\xff\xfe\x00\x01garbage",
    "scalar.json": lambda good: b"42",
    "empty.json.gz": lambda good: b"",
    "gzip-of-empty.json.gz": lambda good: gzip.compress(b""),
    "gzip-of-garbage.json.gz": lambda good: gzip.compress(b"{not json"),
    "plain-json-named.json.gz": lambda good: good,
    "truncated-gzip-stream.json.gz": lambda good: gzip.compress(good)[: len(gzip.compress(good)) // 2],
    "gzip-missing-trailer.json.gz": lambda good: gzip.compress(good)[:-4],
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_load_of_a_broken_file_raises_trace_format_error_naming_it(tmp_path: Path, good_file: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(BAD_FILES[name](good_file.read_bytes()))
    with pytest.raises(TraceFormatError) as err:
        load(path)
    assert str(path) in str(err.value)


def test_load_of_a_missing_file_raises_trace_format_error(tmp_path: Path) -> None:
    path = tmp_path / "nope.json"
    with pytest.raises(TraceFormatError, match=re.escape(str(path))):
        load(path)


MALFORMED = {
    "t0 not a number": {"traceEvents": [], "otherData": {"opprof": {"t0_ns": "soon"}}},
    "sort index not a number": {"traceEvents": [{"ph": "M", "name": "thread_sort_index", "tid": 1, "args": {"sort_index": "z"}}]},
    "parent without invocation": {
        "traceEvents": [
            {"ph": "b", "cat": "custom_op", "id": 1, "tid": 1, "ts": 0, "args": {"role": "parent"}},
            {"ph": "e", "cat": "custom_op", "id": 1, "tid": 1, "ts": 1},
        ]
    },
}


@pytest.mark.parametrize("what", list(MALFORMED))
def test_load_of_malformed_fields_raises_trace_format_error(tmp_path: Path, what: str) -> None:
    path = tmp_path / "malformed.json"
    path.write_text(json.dumps(MALFORMED[what]))
    with pytest.raises(TraceFormatError, match=re.escape(str(path))):
        load(path)


# ---------------------------------------------------------------------------- Chrome export
def test_chrome_export_is_well_formed(check_chrome: Callable[..., list[str]]) -> None:
    for t in (threaded_trace(), threaded_trace(base=BIG), naive_trace(), rich_trace()):
        obj = to_chrome(t)
        assert check_chrome(obj) == []
        json.dumps(obj)  # serialisable as it is


def test_chrome_export_contents() -> None:
    t = threaded_trace(base=BIG)
    obj = to_chrome(t)
    events = obj["traceEvents"]
    assert not [e for e in events if e["ph"] in ("B", "E")]
    xs = [e for e in events if e["ph"] == "X"]
    # One slice per span on its thread; a parent crosses threads, so it is on the async track only.
    assert sorted(e["name"] for e in xs) == sorted(s.name for s in t.spans if s.role != "parent")
    for e in xs:
        assert isinstance(e["tid"], int) and e["tid"] in {MAIN, ENGINE, CUSTOM}
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {MAIN: "MainThread", ENGINE: "opprof-engine-0", CUSTOM: "opprof-custom-0"}
    # Exact nanoseconds survive the microsecond timestamps.
    t0 = obj["otherData"]["opprof"]["t0_ns"]
    by_name = {s.name: s for s in t.spans if s.role != "parent"}
    for e in xs:
        s = by_name[e["name"]]
        assert (t0 + round(e["ts"] * 1000), round(e["dur"] * 1000)) == (s.start, s.dur)
    # Each invocation: an async track with its id holding the parent, its python and its Dummy_Wait.
    for inv, prefix in ((1, "MyOp"), (2, "_backward_MyOp")):
        track = [e for e in events if e["ph"] in ("b", "e") and e["id"] == inv]
        begun = {e["name"] for e in track if e["ph"] == "b"}
        assert {prefix, f"{prefix}::pure_python", f"{prefix}::Dummy_Wait"} <= begun
        (pb,) = [e for e in track if e["ph"] == "b" and e["name"] == prefix]
        assert pb["args"]["role"] == "parent" and pb["args"]["invocation"] == inv
    flows_s = {e["id"]: e for e in events if e["ph"] == "s"}
    flows_f = {e["id"]: e for e in events if e["ph"] == "f"}
    assert set(flows_s) == set(flows_f) == {1, 2, 3}
    for fid in flows_s:
        assert (flows_s[fid]["tid"], flows_f[fid]["tid"]) == (CUSTOM, ENGINE)


def test_chrome_checker_catches_broken_exports(check_chrome: Callable[..., list[str]]) -> None:
    # The checker itself: each defect it is meant to catch, planted in a good export.
    good = to_chrome(threaded_trace())
    assert check_chrome(good) == []

    def broken(edit: Callable[[list[dict[str, Any]]], None]) -> list[str]:
        obj = copy.deepcopy(good)
        edit(obj["traceEvents"])
        return check_chrome(obj)

    def first(evs: list[dict[str, Any]], ph: str, name: str | None = None) -> dict[str, Any]:
        return next(e for e in evs if e["ph"] == ph and (name is None or e["name"] == name))

    assert broken(lambda evs: evs.append({"ph": "B", "name": "x", "pid": 0, "tid": 1, "ts": 0}))
    assert broken(lambda evs: first(evs, "X", "_ones").update(dur=0.08))  # [50, 130] crosses a sub-op [125, 140]
    assert broken(lambda evs: first(evs, "X").update(tid=2**40))
    assert broken(lambda evs: evs.remove(first(evs, "M", "thread_name")))
    assert broken(lambda evs: evs.remove(first(evs, "e", "MyOp::pure_python")))
    assert broken(lambda evs: evs.remove(first(evs, "f")))
    assert broken(lambda evs: first(evs, "f").update(ts=-1.0))
    assert broken(lambda evs: first(evs, "e", "MyOp::pure_python").update(ts=0.155))  # python [110, 195] crosses Dummy_Wait


def test_chrome_export_of_an_empty_trace() -> None:
    obj = to_chrome(Trace())
    assert [e["ph"] for e in obj["traceEvents"]] == ["M"]
    back = from_chrome(obj)
    assert (back.spans, back.flows, back.threads) == ([], [], [])


# ---------------------------------------------------------------------------- several processes
PROCESSES = {0: "client", 1: "worker tcp://127.0.0.1:4567", 2: "worker tcp://127.0.0.1:4568"}


def multi_process_trace() -> Trace:
    """:func:`rich_trace` with its threads in three processes: the engine thread in one, the
    custom-op thread (and the user thread) in another, so flows, a family's async track and the
    instants each cross or sit in a process other than 0, as in a trace merged from Dask workers."""
    t = rich_trace()
    pid = {MAIN: 0, ENGINE: 1, CUSTOM: 2, 4: 2}
    t.threads = [ThreadInfo(th.tid, th.name, pid[th.tid]) for th in t.threads]
    t.processes = dict(PROCESSES)
    return t


def test_a_trace_of_one_process_has_no_process_names() -> None:
    t = rich_trace()
    assert t.processes == {} and {th.pid for th in t.threads} == {0}
    assert (t.process_name(0), t.process_name(3), t.process_ids()) == ("opprof", "process 3", [0])
    t.metadata["process_name"] = "trainer"
    assert t.process_name(0) == "trainer"
    t.processes = {0: "client"}
    assert t.process_name(0) == "client" and t != rich_trace()  # processes are part of the trace


def test_chrome_export_of_one_process_is_as_it_was() -> None:
    events = to_chrome(rich_trace())["traceEvents"]
    assert {e["pid"] for e in events} == {0}
    meta = [e for e in events if e["ph"] == "M" and e["name"].startswith("process_")]
    assert meta == [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "opprof"}}]
    assert from_chrome(to_chrome(rich_trace())).processes == {}


def test_chrome_export_puts_every_event_in_its_threads_process(check_chrome: Callable[..., list[str]]) -> None:
    t = multi_process_trace()
    obj = to_chrome(t)
    assert check_chrome(obj) == []
    events = obj["traceEvents"]
    assert {"X", "b", "e", "s", "f", "i", "C"} <= {e["ph"] for e in events}
    pid_of = {th.tid: th.pid for th in t.threads}
    on_threads = [e for e in events if e["ph"] in ("X", "b", "e", "s", "f", "i") or e.get("name", "").startswith("thread_")]
    assert [e["pid"] for e in on_threads] == [pid_of[e["tid"]] for e in on_threads]
    assert {e["pid"] for e in events if e["ph"] == "s"} == {2} and {e["pid"] for e in events if e["ph"] == "f"} == {1}
    assert {e["pid"] for e in events if e["ph"] in ("b", "e")} == {1}  # the parents' thread: the engine's
    assert {e["pid"] for e in events if e["ph"] == "C"} == {0}
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    order = {e["pid"]: e["args"]["sort_index"] for e in events if e["ph"] == "M" and e["name"] == "process_sort_index"}
    assert names == PROCESSES and order == {0: 0, 1: 1, 2: 2}
    # The checker sees an event put in another process than its thread's.
    first_x = next(e for e in events if e["ph"] == "X")
    assert check_chrome({**obj, "traceEvents": [{**first_x, "pid": 2 - pid_of[first_x["tid"]]}, *events]})


def test_chrome_export_names_a_process_without_a_name_and_puts_counters_in_process_0() -> None:
    t = multi_process_trace()
    t.threads = [ThreadInfo(th.tid, th.name, th.pid + 1) for th in t.threads]  # pids 1, 2, 3; counters stay on 0
    t.processes = {1: "client"}
    obj = to_chrome(t)
    names = {e["pid"]: e["args"]["name"] for e in obj["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {0: "opprof", 1: "client", 2: "process 2", 3: "process 3"}
    back = from_chrome(obj)
    assert back.processes == {1: "client"}  # the names given for want of one are not kept
    assert back.threads == t.threads


@pytest.mark.parametrize("suffix", [".json", ".json.gz", ".opprof"])
def test_a_trace_of_several_processes_round_trips(tmp_path: Path, suffix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    t = multi_process_trace()
    path = tmp_path / f"trace{suffix}"
    t.save(path)
    back = load(path)
    assert_same_trace(t, back)
    assert back.processes == PROCESSES
    if suffix == ".opprof":
        assert back == t  # lossless, spans in their order too
    else:  # the careful reader too, as a file the fast one would not take

        def refuse(*args: Any) -> Any:
            raise chrome.chrome_fast.NotFast

        monkeypatch.setattr(chrome.chrome_fast, "read_lines", refuse)
        careful = load(path)
        assert careful.threads == t.threads and careful.processes == PROCESSES


def test_a_pid_that_is_not_an_integer_is_named_as_the_event_it_is_in() -> None:
    obj = to_chrome(multi_process_trace())
    k, ev = next((k, e) for k, e in enumerate(obj["traceEvents"]) if e["ph"] == "M" and e["name"] == "thread_name")
    ev["pid"] = "one"
    with pytest.raises(TraceFormatError, match=rf"event {k}: .*pid 'one' is not an integer"):
        from_chrome(obj)


def test_a_file_from_before_pids_gives_an_imported_traces_processes_back() -> None:
    """Before 2026-12, every event had pid 0 and an imported trace kept its threads' processes in
    ``metadata["source_threads"]`` only: those files still read with each thread in its process."""
    t = multi_process_trace()
    t.processes = {}
    t.metadata["source_threads"] = [[th.tid, th.pid, 1000 + th.pid, th.tid] for th in t.threads]
    obj = to_chrome(t)
    for e in obj["traceEvents"]:
        e["pid"] = 0
    obj["traceEvents"] = [e for e in obj["traceEvents"] if e.get("name") != "process_sort_index"]
    assert from_chrome(obj).threads == t.threads


def test_source_thread_rows_are_read_by_what_they_hold_and_odd_ones_skipped() -> None:
    """Metadata is the file's to say: a row that is not ``[tid, pid, source pid, source tid]`` with
    int tid and pid is left out, not trusted (and not an error: the events are what matter)."""
    t = multi_process_trace()
    t.processes = {}
    moved = t.threads[-1]
    odd: list[Any] = [[moved.tid, "one", 9, 9], [moved.tid, 7], "a row", [float(moved.tid), 7, 9, 9], [moved.tid, 7, 9, 9, 9]]
    t.metadata["source_threads"] = [list(SourceThread(th.tid, th.pid, 1000 + th.pid, th.tid)) for th in t.threads] + odd
    obj = to_chrome(t)
    for e in obj["traceEvents"]:
        e["pid"] = 0
    obj["traceEvents"] = [e for e in obj["traceEvents"] if e.get("name") != "process_sort_index"]
    assert from_chrome(obj).threads == t.threads
    assert SourceThread.from_row([3, 1, "cpu/0", 1628]) == SourceThread(3, 1, "cpu/0", 1628)
    assert [SourceThread.from_row(row) for row in odd] == [None] * len(odd)


def test_a_bad_field_outside_the_events_is_named_as_the_header() -> None:
    obj = to_chrome(multi_process_trace())
    obj["otherData"]["opprof"]["t0_ns"] = "soon"
    with pytest.raises(TraceFormatError, match=r"^trace header: malformed field: ValueError: invalid literal"):
        from_chrome(obj)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["op", "custom_op", "wait"]), st.sampled_from(["a", "b", "a::x", "<b>"]), st.integers(0, 10**12)
        ),
        max_size=60,
    )
)
@settings(max_examples=150, deadline=None)
def test_vectorised_stats_equal_a_plain_loop(rows: list[tuple[str, str, int]]) -> None:
    spans = [Span(name, cat, 1, 1_000 * i, 1_000 * i + dur) for i, (cat, name, dur) in enumerate(rows)]
    expected: dict[tuple[str, str], list[int]] = {}
    for s in spans:
        acc = expected.setdefault((s.cat, s.name), [])
        acc.append(s.dur)
    want = sorted(
        (StatRow(name, cat, len(d), sum(d), min(d), max(d)) for (cat, name), d in expected.items()),
        key=lambda r: (-r.total_ns, r.cat, r.name),
    )
    assert Trace(threads=[ThreadInfo(1, "t")], spans=spans).stats() == want
