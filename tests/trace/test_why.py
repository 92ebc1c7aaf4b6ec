"""Why it waits: causes, blockers, off-CPU Python and the critical path, on workloads whose answer
is known because they were built so (sleeps release the GIL and last what they say)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import opprof
import opprof as mx
from opprof import nd
from opprof.trace import Trace, from_chrome, load
from opprof.trace.analysis.causes import CAUSES, QUEUE_PARTS
from opprof.trace.analysis.critical import SegmentKind
from opprof.trace.text import split_table, why_text

MS = 1_000_000


class _Sleepy(mx.operator.CustomOp):
    """Its Python sleeps ``ms`` (off a CPU), then adds one (a sub-op)."""

    def __init__(self, ms: float, extra: Any = None) -> None:
        self.ms = ms
        self.extra = extra

    def forward(self, is_train: bool, req: list[str], in_data: list[Any], out_data: list[Any], aux: list[Any]) -> None:
        time.sleep(self.ms / 1000)
        y = in_data[0] + 1 if self.extra is None else in_data[0] + self.extra
        self.assign(out_data[0], req[0], y)

    def backward(
        self, req: list[str], out_grad: list[Any], in_data: list[Any], out_data: list[Any], in_grad: list[Any], aux: list[Any]
    ) -> None:
        self.assign(in_grad[0], req[0], out_grad[0])


_EXTRA: dict[str, Any] = {}


def _register(name: str, ms: float) -> None:
    @mx.operator.register(name)
    class _Prop(mx.operator.CustomOpProp):
        def list_arguments(self) -> list[str]:
            return ["data"]

        def list_outputs(self) -> list[str]:
            return ["output"]

        def infer_shape(self, in_shape: list[Any]) -> tuple[list[Any], list[Any], list[Any]]:
            return in_shape, [in_shape[0]], []

        def create_operator(self, ctx: Any, shapes: Any, dtypes: Any) -> _Sleepy:
            return _Sleepy(ms, _EXTRA.get(name))


_register("WhySleep30", 30)
_register("WhySleep10", 10)
_register("WhyReadsGlobal", 0)


@pytest.fixture
def threaded() -> Iterator[Any]:
    yield mx.set_engine("threaded", workers=2, custom_workers=1)
    mx.set_engine("threaded")


def _row(trace: Trace, k: int) -> Any:
    return trace.custom_ops()[k]


def test_pool_of_one_queues_the_second_invocation_behind_the_first(threaded: Any) -> None:
    a, b = nd.ones((4, 4)), nd.ones((4, 4))
    with opprof.profile() as prof:
        nd.Custom(a, op_type="WhySleep30")
        nd.Custom(b, op_type="WhySleep10")
    trace = prof.trace
    assert trace.validate() == []
    first, second = sorted(trace.custom_ops(), key=lambda r: r.start_ns)
    # The four causes, and where the GIL was sampled the queues' parts (causes.QUEUE_PARTS).
    gil_parts = {p for parts in QUEUE_PARTS.values() for p in parts}
    assert set(CAUSES) <= set(second.waiting_by_cause) <= set(CAUSES) | gil_parts
    assert sum(second.waiting_by_cause.values()) == second.waiting_ns
    # The second waited for the only custom-op thread while the first's Python (30 ms) ran.
    pool = second.waiting_by_cause["custom_pool"]
    assert 0.8 * first.python_ns <= pool <= first.python_ns + 10 * MS
    assert second.waiting_by_cause["custom_pool"] > 0.8 * second.waiting_ns
    text = why_text(trace)
    assert "WhySleep10" in text and "queued for a custom-op thread" in text
    assert "the pool of 1 was busy with WhySleep30" in text


def test_a_sub_op_blocked_by_a_slow_producer_names_it(threaded: Any) -> None:
    eng = mx.engine.get_engine()
    x = nd.ones((4, 4))
    _EXTRA["WhyReadsGlobal"] = x
    try:
        with opprof.profile() as prof:
            eng.push(lambda: time.sleep(0.04), (), (x._var,), "SlowProducer")
            nd.Custom(nd.ones((4, 4)), op_type="WhyReadsGlobal").wait_to_read()
    finally:
        _EXTRA.pop("WhyReadsGlobal")
    trace = prof.trace
    assert trace.validate() == []
    (row,) = trace.custom_ops()
    dep = row.waiting_by_cause["dependency"]
    assert dep >= 25 * MS, row
    top = row.blockers[0]
    assert top.name == "SlowProducer" and top.var == x._var.id and top.invocation is None
    assert top.ns >= 0.9 * dep
    # The sub-op that waited names the line of forward() that pushed it.
    t, ops = trace.table, trace.ops
    assert ops is not None
    sub = [i for i in range(len(t)) if t.strings[t.name[i]] == "WhyReadsGlobal::elemwise_add"]
    site = ops.site_of(int(ops.rows_of(t.op[sub])[0]))
    assert site is not None and site.startswith(__file__) and int(site.rsplit(":", 1)[1]) > 0
    assert "most by SlowProducer" in why_text(trace)


@pytest.mark.parametrize("kind", ["naive", "threaded"])
def test_sleeping_python_is_off_cpu(kind: str) -> None:
    mx.set_engine(kind)
    try:
        with opprof.profile() as prof:
            nd.Custom(nd.ones((4, 4)), op_type="WhySleep30").wait_to_read()
    finally:
        mx.set_engine("threaded")
    (row,) = prof.trace.custom_ops()
    assert row.python_cpu_ns is not None and row.python_cpu_ns < 10 * MS
    assert row.python_off_cpu_ns is not None and row.python_off_cpu_ns >= 25 * MS
    assert prof.trace.validate() == []


class _Busy(mx.operator.CustomOp):
    def forward(self, is_train: bool, req: list[str], in_data: list[Any], out_data: list[Any], aux: list[Any]) -> None:
        t_end = time.thread_time() + 0.03  # 30 ms of this thread's own CPU
        n = 0
        while time.thread_time() < t_end:
            n += 1
        self.assign(out_data[0], req[0], in_data[0] + n * 0)

    def backward(
        self, req: list[str], out_grad: list[Any], in_data: list[Any], out_data: list[Any], in_grad: list[Any], aux: list[Any]
    ) -> None:
        self.assign(in_grad[0], req[0], out_grad[0])


@mx.operator.register("WhyBusy")
class _BusyProp(mx.operator.CustomOpProp):
    def infer_shape(self, in_shape: list[Any]) -> tuple[list[Any], list[Any], list[Any]]:
        return in_shape, [in_shape[0]], []

    def create_operator(self, ctx: Any, shapes: Any, dtypes: Any) -> _Busy:
        return _Busy()


def test_python_competing_with_a_busy_thread_for_the_gil_is_partly_off_cpu(threaded: Any) -> None:
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(1000))

    rival = threading.Thread(target=spin, daemon=True)
    rival.start()
    try:
        with opprof.profile() as prof:
            nd.Custom(nd.ones((4, 4)), op_type="WhyBusy").wait_to_read()
    finally:
        stop.set()
        rival.join()
    (row,) = prof.trace.custom_ops()
    assert row.python_cpu_ns is not None and row.python_cpu_ns >= 25 * MS
    # Two threads that each want the GIL: the Python ran on a CPU only part of its wall time.
    assert row.python_off_cpu_ns is not None and row.python_off_cpu_ns >= 0.2 * row.python_ns


def _chain_and_one_beside(kind: str) -> Trace:
    eng = mx.set_engine(kind, **({"workers": 2} if kind == "threaded" else {}))
    try:
        with opprof.profile() as prof:
            a, b, c, d = (eng.new_var() for _ in range(4))
            eng.push(lambda: time.sleep(0.02), (), (a,), "A")
            eng.push(lambda: time.sleep(0.02), (a,), (b,), "B")
            eng.push(lambda: time.sleep(0.02), (b,), (c,), "C")
            eng.push(lambda: time.sleep(0.025), (), (d,), "D")
            eng.wait_for_all()
    finally:
        mx.set_engine("threaded")
    assert prof.trace is not None
    return prof.trace


def test_critical_path_of_a_chain_beside_an_independent_op() -> None:
    trace = _chain_and_one_beside("threaded")
    assert trace.validate() == []
    cp = trace.critical_path()
    assert not cp.approximate
    assert sum(g.dur for g in cp.segments) == cp.end - cp.start == cp.total
    runs = [g.name for g in cp.segments if g.kind is SegmentKind.RUN]
    assert runs == ["A", "B", "C"]
    t = trace.table
    names = t.str_list(t.name)
    slack = dict(zip(names, cp.slack.tolist(), strict=False))
    dur = dict(zip(names, t.dur.tolist(), strict=False))
    end = dict(zip(names, t.end.tolist(), strict=False))
    # D could have ended as late as the chain did: by about the chain's length minus its own.
    chain = dur["A"] + dur["B"] + dur["C"]
    assert abs(slack["D"] - (chain - dur["D"])) <= 0.15 * (chain - dur["D"]) + (end["C"] - end["A"] - dur["B"] - dur["C"])
    assert abs(slack["D"] - (end["C"] - end["D"])) <= 2 * MS
    for op in "ABC":
        assert slack[op] < 2 * MS
    assert "Critical path" in why_text(trace)


def test_critical_path_tiles_on_the_naive_engine_too() -> None:
    trace = _chain_and_one_beside("naive")
    cp = trace.critical_path()
    assert cp.check() == [] and trace.validate() == []
    assert [g.name for g in cp.segments if g.kind is SegmentKind.RUN] == ["A", "B", "C", "D"]


def test_edges_survive_the_native_format_and_chrome_keeps_the_causes(tmp_path: Any, threaded: Any) -> None:
    with opprof.profile() as prof:
        y = nd.Custom(nd.ones((4, 4)), op_type="WhySleep10")
        (y + 1).wait_to_read()
    trace = prof.trace
    native = tmp_path / "t.opprof"
    trace.save(native)
    back = load(native)
    assert back.ops is not None and np.array_equal(back.table.op, trace.table.op)
    assert [s.dur for s in back.critical_path().segments] == [s.dur for s in trace.critical_path().segments]
    obj = trace.to_chrome()
    cats = {ev.get("cat") for ev in obj["traceEvents"] if ev.get("ph") in ("s", "f")}
    assert "critical_path" in cats
    closing = next(ev for ev in obj["traceEvents"] if ev.get("ph") == "e" and "why" in (ev.get("args") or {}))
    (row,) = trace.custom_ops()
    assert closing["args"]["why"] == {f"{k}_us": v / 1e3 for k, v in row.waiting_by_cause.items()} | {
        "python_cpu_us": row.python_cpu_ns / 1e3
    }
    chrome = from_chrome(obj)
    # Chrome JSON holds no edges: the arrows and causes derived from them are not read back.
    # It holds the GIL's thread states (a gil track per thread), as .opprof files do.
    assert back.thread_states is not None or trace.thread_states is None
    assert (chrome.thread_states is None) == (trace.thread_states is None)
    assert chrome.ops is None and chrome.n_flows == trace.n_flows and chrome == trace
    assert set(chrome.custom_ops()[0].waiting_by_cause) == {"custom_pool", "unattributed"}
    cp = chrome.critical_path()
    assert cp.approximate and "approximate" in cp.note and cp.check() == []


def test_the_critical_paths_arrows_are_in_their_threads_processes(threaded: Any, check_chrome: Any) -> None:
    """In a trace of several processes each arrow's ends carry their threads' pids, as every event does."""
    from opprof.trace import ThreadInfo

    with opprof.profile() as prof:
        y = nd.Custom(nd.ones((4, 4)), op_type="WhySleep10")
        (y + 1).wait_to_read()
    trace = prof.trace
    trace.threads = [ThreadInfo(th.tid, th.name, k) for k, th in enumerate(trace.threads)]  # a process each
    trace.processes = {k: f"worker-{k}" for k in range(len(trace.threads))}
    obj = trace.to_chrome()
    assert check_chrome(obj) == []
    pid_of = {th.tid: th.pid for th in trace.threads}
    arrows = [ev for ev in obj["traceEvents"] if ev.get("cat") == "critical_path"]
    assert arrows and all(ev["pid"] == pid_of[ev["tid"]] for ev in arrows)
    assert all(s["pid"] != f["pid"] for s, f in zip(arrows[::2], arrows[1::2], strict=True))  # each hop: to another thread


def test_each_end_of_a_critical_path_arrow_lies_inside_a_slice_of_its_thread() -> None:
    """Perfetto binds a flow's end to the slice that encloses it ("flow_no_enclosing_slice" where
    none does). A piece of the path can reach outside the span it is charged to (the GIL an op
    waited for before its span began), so an arrow at the piece's edge missed its slice in ~40 % of
    these recordings before the ends were kept inside their slices."""
    from tests.e2e.test_perfetto import _build_trace

    for _ in range(4):
        obj = _build_trace().to_chrome()
        slices: dict[tuple[int, int], list[tuple[float, float]]] = {}
        for ev in obj["traceEvents"]:
            if ev["ph"] == "X":
                slices.setdefault((ev["pid"], ev["tid"]), []).append((ev["ts"], ev["ts"] + ev["dur"]))
        ends = [ev for ev in obj["traceEvents"] if ev.get("cat") == "critical_path"]
        assert ends
        outside = [ev for ev in ends if not any(a <= ev["ts"] <= b for a, b in slices.get((ev["pid"], ev["tid"]), []))]
        assert outside == [], outside


def test_a_trace_without_edges_says_its_path_is_approximate() -> None:
    from opprof.trace.synthetic import synthetic_trace

    trace = Trace.of(synthetic_trace(2_000, seed=3))
    cp = trace.critical_path()
    assert cp.approximate and cp.check() == []
    rows = trace.custom_ops()
    assert rows and all(set(r.waiting_by_cause) == {"custom_pool", "unattributed"} for r in rows)
    assert all(sum(r.waiting_by_cause.values()) == r.waiting_ns for r in rows)
    assert trace.validate() == []


def test_a_pool_of_two_runs_a_burst_of_four_two_at_a_time() -> None:
    """Four custom ops pushed at once: two Pythons run together from the start (the pool grew for
    the second although the first new thread had not taken its task yet), never three."""
    mx.set_engine("threaded", workers=2, custom_workers=2)
    try:
        with opprof.profile() as prof:
            outs = [nd.Custom(nd.ones((4, 4)), op_type="WhySleep30") for _ in range(4)]
            for o in outs:
                o.wait_to_read()
    finally:
        mx.set_engine("threaded")
    t = prof.trace.table
    py = np.flatnonzero(t.role_is(opprof.trace.Role.PYTHON))
    edges = np.concatenate(
        [np.stack([t.start[py], np.ones(len(py), np.int64)], 1), np.stack([t.end[py], -np.ones(len(py), np.int64)], 1)]
    )
    edges = edges[np.lexsort((edges[:, 1], edges[:, 0]))]
    running = np.cumsum(edges[:, 1])
    assert int(running.max()) == 2
    rows = prof.trace.custom_ops()
    # Two rounds of two 30 ms sleeps side by side, not four one after another: measured on the
    # trace's own clock, not against a wall-clock bound that a busy CI machine breaks (106 ms once).
    two_at_once = int(np.sum(np.diff(edges[:, 0])[running[:-1] == 2]))
    assert two_at_once >= 1.5 * 30 * MS
    assert max(r.waiting_by_cause["custom_pool"] for r in rows) >= 20 * MS  # the third and fourth queued


def test_a_cycle_in_a_files_edges_stops_the_walk_and_says_so() -> None:
    """Edges are data: a malformed file whose enabling edges loop must not hang the analysis."""
    eng = mx.set_engine("threaded", workers=2)
    try:
        with opprof.profile() as prof:
            a, b = eng.new_var(), eng.new_var()
            eng.push(lambda: time.sleep(0.005), (), (a,), "A")
            eng.push(lambda: time.sleep(0.005), (a,), (b,), "B")
            eng.wait_for_all()
    finally:
        mx.set_engine("threaded")
    trace = prof.trace
    ops = trace.ops
    assert ops is not None
    t = trace.table
    ids = {t.strings[t.name[i]]: int(t.op[i]) for i in range(len(t)) if t.op[i] >= 0}
    ops.by[ops.rows_of(np.array([ids["A"]]))] = ids["B"]  # A enabled by B, B by A
    path = trace.critical_path()
    assert "cycle" in path.note and path.check() == []


def test_a_repeated_profile_has_each_copys_analyses(threaded: Any) -> None:
    """The benchmarks' million-span profile is a real one repeated: each copy must read as itself."""
    from opprof.trace.synthetic import repeated_trace

    with opprof.profile() as prof:
        nd.Custom(nd.ones((4, 4)), op_type="WhySleep10")
        nd.Custom(nd.ones((4, 4)), op_type="WhySleep10").wait_to_read()
    one = prof.trace
    three = repeated_trace(one, 3)
    assert three.n_spans == 3 * one.n_spans and three.validate() == []
    assert np.array_equal(three.waiting_causes().ns, np.tile(one.waiting_causes().ns, (3, 1)))
    assert [r.waiting_by_cause for r in three.custom_ops()] == 3 * [r.waiting_by_cause for r in one.custom_ops()]
    kinds = one.critical_path().by_kind()
    assert three.critical_path().by_kind().get("run", 0) == 3 * kinds.get("run", 0)


@pytest.mark.parametrize("engine", ["naive", "threaded"])
def test_the_naive_engine_is_never_said_to_wait_for_a_thread(engine: str) -> None:
    """The naive engine (as MXNet's NaiveEngine) runs every op inline on the pushing thread: the
    time between a push and the run is its own bookkeeping, and the words say so, never "queued for
    a custom-op thread" or "waking a thread" (the threaded engine's words stay)."""
    mx.set_engine(engine)
    try:
        x = nd.ones((4, 4))
        with mx.profile() as prof:
            ys = [nd.Custom(x, op_type="WhyReadsGlobal") for _ in range(20)]
            nd.waitall()
    finally:
        mx.set_engine("threaded")
    trace = prof.trace
    assert trace is not None and len(ys) == 20
    text = why_text(trace) + "\n" + split_table(trace)
    names = [s.name for s in trace.critical_path().segments]
    thread_words = ("custom-op thread", "waking", "engine worker")
    from opprof.view.figure import build_timeline

    legend = [item.label.value for item in build_timeline(trace).bars.legend[0].items]
    text += "\n" + "\n".join(legend)
    if engine == "naive":
        assert trace.ran_inline
        assert not any(w in text for w in thread_words), text
        # Nor where the OS kept the program waiting for a CPU (a busy machine: a CI run's words
        # said "a hand-off's waking includes this wait" here): made so, half the recording.
        from opprof.trace.threadstates import CPU_WAIT_METADATA

        main = next(th.tid for th in trace.threads if th.name == "MainThread")
        wall = trace.metadata["t_stop_ns"] - trace.metadata["t_start_ns"]
        trace.metadata[CPU_WAIT_METADATA] = {"source": "test", "ns": {str(main): wall // 2}}
        busy = why_text(trace)
        assert "Waiting for a CPU" in busy and not any(w in busy for w in thread_words), busy
        assert not any("queued" in n for n in names), names
        assert "the naive engine's own bookkeeping, inline" in text, text
    else:
        assert not trace.ran_inline
        assert any(w in text for w in thread_words), text


@pytest.mark.parametrize("engine", ["threaded", "naive"])
def test_the_wait_a_profile_ends_with_is_the_with_line(engine: str) -> None:
    """``with opprof.profile():`` ends in a wait pushed from the standard library's contextlib (the
    profile is a generator context manager): its site is the ``with`` line, not contextlib.py."""
    import inspect

    mx.set_engine(engine)
    try:
        x = nd.ones((2, 2))
        line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        with opprof.profile() as prof:
            x = x + 1
    finally:
        mx.set_engine("threaded")
    ops = prof.trace.ops
    assert ops is not None
    sites = {ops.site_of(i) for i in range(len(ops))} - {None}
    assert sites and all(s is not None and "contextlib" not in s for s in sites), sites
    assert any(s.endswith(f"test_why.py:{line}") for s in sites if s), sites


def test_a_pools_longest_wake_is_said_where_it_alone_may_be_the_story() -> None:
    """Known answer: eight hand-offs to custom-op threads, a median wake of 385 ns and one of 651 µs
    (a woken thread left in the OS's run queue); the engine's, 2 µs and at most 9 µs. The longest is
    said for the custom-op threads only, and a file from before it was recorded says nothing of it."""
    from opprof.trace.synthetic import synthetic_trace
    from opprof.trace.threadstates import GIL_METADATA

    trace = synthetic_trace(60)
    hops = {
        "custom": {"count": 8, "wake_ns_median": 385, "gil_ns_median": 1_000, "hop_ns_median": 1_500, "wake_ns_max": 651_000},
        "engine": {"count": 9, "wake_ns_median": 2_000, "gil_ns_median": 500, "hop_ns_median": 2_600, "wake_ns_max": 9_000},
    }
    trace.metadata[GIL_METADATA] = {"handoffs": hops}
    line = next(x for x in why_text(trace).splitlines() if x.startswith("Thread hand-offs"))
    assert "8 to custom-op threads, 385 ns to wake + 1.00 µs for the GIL (medians), the longest wake 651 µs" in line
    assert line.endswith("9 to engine workers, 2.00 µs to wake + 500 ns for the GIL (medians).")
    del hops["custom"]["wake_ns_max"]
    assert "longest" not in why_text(trace)
