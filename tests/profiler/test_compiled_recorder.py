"""The compiled recorder (opprof/profiler/_spanlog.c) records what the pure-Python one records.

The pure recorder is the oracle: the same workload, recorded by each, gives the same spans, roles,
threads and engine edges (op numbers taken relative to the first op, times aside). The hot path's
edge cases (an op that raises, the cap, a pause, ops with no var or several) are checked on both
paths. Under ``OPPROF_PURE=1`` (and where the extension is not built) only the pure path runs, and
asking for the compiled one says why it is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import opprof as mx
from opprof.engine import Invocation, get_engine
from opprof.profiler.build import DEPS_SCHEMA, FAM_SCHEMA, PLAIN_SCHEMA, SUB_SCHEMA, Tables, record_columns, schema_slots
from opprof.profiler.recorder import COMPILED_WHY_NOT, ProfilerError, Recorder
from opprof.trace import Trace
from tests.helpers import MyAddOneProp

pytestmark = pytest.mark.timeout(120)

mx.operator.register("CompiledRecAddOne")(MyAddOneProp)

PATHS = [False] if COMPILED_WHY_NOT else [False, True]
needs_compiled = pytest.mark.skipif(bool(COMPILED_WHY_NOT), reason=f"no compiled recorder: {COMPILED_WHY_NOT}")


def _record(workload: Callable[[], None], compiled: bool, **kw: Any) -> tuple[Recorder, Trace]:
    mx.nd.waitall()
    rec = Recorder(compiled=compiled, **kw).attach()
    try:
        workload()
        mx.nd.waitall()
    finally:
        rec.detach()
    return rec, rec.build()


def _mixed() -> None:
    """Plain ops (one var, two reads, no var at all), a custom op with its sub-ops, a wait, a user span."""
    a = mx.nd.ones((4, 4))
    b = a * 2
    c = a + b  # two reads
    eng = get_engine()
    eng.push(lambda: None, reads=(c._var, b._var), writes=(), name="two_reads_no_write")
    eng.push(lambda: None, name="no_vars")
    d = mx.nd.Custom(c, op_type="CompiledRecAddOne")
    d.wait_to_read()
    with mx.profiler.Task(mx.profiler.Domain("test"), "marked"):
        e = d - 1
    e.wait_to_read()


def _names(trace: Trace) -> list[str]:
    t = trace.table
    return [t.strings[i] for i in t.name.tolist()]


def _shape(trace: Trace) -> dict[str, Any]:
    """What must not depend on the recorder: spans (name, role, thread, op rank), the op table's
    edges, flows, in op order."""
    s = trace.table
    names = [s.strings[i] for i in s.name.tolist()]
    threads = {t.tid: t.name for t in trace.threads}
    ops = trace.ops
    real = ops.op[ops.op < 1 << 40] if ops is not None else np.zeros(0, np.int64)
    base = int(real.min()) if len(real) else 0

    def rank(x: int) -> int:
        return x - base if 0 <= x < 1 << 40 else x

    spans = sorted((names[i], int(s.role[i]), threads[int(s.tid[i])], rank(int(s.op[i]))) for i in range(len(s.start)))
    assert ops is not None
    edges = []
    for i in range(len(ops.op)):
        lo, hi = int(ops.acc_at[i]), int(ops.acc_at[i + 1])
        edges.append(
            (
                rank(int(ops.op[i])),
                int(ops.kind[i]),
                threads.get(int(ops.pusher[i]), "?"),
                rank(int(ops.by[i])) if ops.by[i] > 0 else -1,
                ops.strings[ops.site[i]] if ops.site[i] >= 0 else "",  # the user's line that pushed
                tuple(zip(ops.acc_var[lo:hi].tolist(), ops.acc_write[lo:hi].tolist(), strict=True)),
            )
        )
    return {"spans": spans, "edges": sorted(edges), "flows": trace.n_flows}


@needs_compiled
def test_compiled_and_pure_record_the_same_trace_on_the_naive_engine() -> None:
    mx.set_engine("naive")
    try:
        shapes = [_shape(_record(_mixed, compiled)[1]) for compiled in (False, True)]
    finally:
        mx.set_engine("threaded")
    pure, compiled = shapes
    # Var ids differ between the runs (fresh arrays): compare each access's var by its first use.
    for shape in shapes:
        seen: dict[int, int] = {}
        shape["edges"] = [(*e[:5], tuple((seen.setdefault(v, len(seen)), w) for v, w in e[5])) for e in sorted(shape["edges"])]
    assert compiled["spans"] == pure["spans"]
    assert any("helpers.py" in e[4] for e in compiled["edges"])  # a sub-op's line
    assert compiled["edges"] == pure["edges"]
    assert compiled["flows"] == pure["flows"]


@needs_compiled
def test_compiled_and_pure_agree_on_the_threaded_engine() -> None:
    mx.set_engine("threaded", workers=2, custom_workers=2)
    try:
        traces = [_record(_mixed, compiled)[1] for compiled in (False, True)]
    finally:
        mx.set_engine("threaded")
    pure, compiled = (_shape(t) for t in traces)
    # Which worker ran an op may differ; what ran, its role and its edges' shape may not.
    assert sorted((n, r, op) for n, r, _, op in compiled["spans"]) == sorted((n, r, op) for n, r, _, op in pure["spans"])
    assert [len(e[5]) for e in compiled["edges"]] == [len(e[5]) for e in pure["edges"]]
    assert [e[4] for e in compiled["edges"]] == [e[4] for e in pure["edges"]]
    assert compiled["flows"] == pure["flows"]
    assert traces[1].metadata["recorder"] == {"path": "compiled"}
    assert traces[0].metadata["recorder"]["path"] == "python"


@pytest.mark.parametrize("compiled", PATHS)
def test_a_failing_op_keeps_its_span_and_its_error(compiled: bool) -> None:
    def boom() -> None:
        raise ValueError("op failed")

    def work() -> None:
        v = get_engine().new_var()
        get_engine().push(boom, writes=(v,), name="boom")
        with pytest.raises(ValueError, match="op failed"):
            get_engine().wait_for_var(v)

    _, trace = _record(work, compiled)
    s = trace.table
    names = [s.strings[i] for i in s.name.tolist()]
    assert "boom" in names
    # The engine stays usable, and the next op is recorded too.
    _, again = _record(lambda: (mx.nd.ones((2, 2)) + 1).wait_to_read(), compiled)
    assert again.n_spans >= 1


@pytest.mark.parametrize("compiled", PATHS)
def test_the_cap_keeps_the_first_ops_and_counts_the_rest(compiled: bool) -> None:
    def work() -> None:
        a = mx.nd.ones((2, 2))
        for _ in range(50):
            a = a + 1
        a.wait_to_read()

    rec, trace = _record(work, compiled, max_events=10)
    assert rec.full
    plus = [n for n in _names(trace) if n == "_plus_scalar"]
    assert len(plus) <= 10 and trace.metadata["dropped_events"] >= 40


@pytest.mark.parametrize("compiled", PATHS)
def test_a_pause_records_nothing_until_resumed(compiled: bool, engine: Any) -> None:
    """Paused, the ops run (on the naive engine through its one-frame push, bare) and leave nothing;
    resumed, they are recorded again, a custom op's family included."""
    a = mx.nd.ones((2, 2))
    a.wait_to_read()
    rec = Recorder(compiled=compiled).attach()
    try:
        rec.recording = False
        for _ in range(5):
            a = a + 1
        a = mx.nd.Custom(a, op_type="CompiledRecAddOne")
        a.wait_to_read()
        assert rec.recording is False
        rec.recording = True
        b = mx.nd.Custom(a * 3, op_type="CompiledRecAddOne")
        b.wait_to_read()
    finally:
        rec.detach()

    def op(x: np.ndarray) -> np.ndarray:  # the custom op's forward
        return (2 * np.tanh(x) + 1) * 3

    np.testing.assert_allclose(b.asnumpy(), op(op(np.full((2, 2), 6.0, np.float32)) * 3), rtol=1e-6)
    trace = rec.build()
    names = _names(trace)
    assert "_plus_scalar" not in names and names.count("_mul_scalar") == 1
    assert names.count("CompiledRecAddOne") == 1 and "CompiledRecAddOne::_plus_scalar" in names
    assert trace.metadata["incomplete_invocations"] == 0


@pytest.mark.parametrize("compiled", PATHS)
def test_a_live_copy_reads_what_was_recorded_so_far(compiled: bool) -> None:
    a = mx.nd.ones((2, 2))
    a.wait_to_read()
    rec = Recorder(compiled=compiled).attach()
    try:
        for _ in range(20):
            a = a + 1
        a.wait_to_read()
        live = rec.build(live=True)
        for _ in range(5):
            a = a + 1
        a.wait_to_read()
    finally:
        rec.detach()
    done = rec.build()
    assert _names(live).count("_plus_scalar") == 20 and _names(done).count("_plus_scalar") == 25


def test_asking_for_the_compiled_recorder_where_there_is_none_says_why() -> None:
    if COMPILED_WHY_NOT:
        with pytest.raises(ProfilerError, match="no compiled recorder"):
            Recorder(compiled=True)
        assert Recorder().path == "python"
    else:
        assert Recorder().path == "compiled"
        with pytest.raises(ProfilerError, match="perf_counter_ns"):
            Recorder(clock=lambda: 0, compiled=True)
    assert Recorder(compiled=False).path == "python"


@pytest.mark.parametrize("compiled", PATHS)
def test_a_failing_op_pushed_and_run_at_once_keeps_its_span_and_its_error(compiled: bool) -> None:
    """The naive engine's one-frame push (``run_pushed``): the op's own error reaches the wait, its
    span is kept, outside a custom op's Python and inside one."""

    def boom() -> None:
        raise ValueError("pushed and failed")

    mx.set_engine("naive")
    try:

        def work() -> None:
            v = get_engine().new_var()
            get_engine().push_op(boom, (), (v,), "boom_pushed")
            with pytest.raises(ValueError, match="pushed and failed"):
                get_engine().wait_for_var(v)

        _, trace = _record(work, compiled)
    finally:
        mx.set_engine("threaded")
    assert "boom_pushed" in _names(trace)


# ------------------------------------------------------------------ the compiled logs against lists
if not COMPILED_WHY_NOT:
    from opprof.profiler import _spanlog
    from opprof.profiler.recorder import _CompiledRecorder

_INVOCATIONS = [Invocation("LogOpA", 1, False), Invocation("LogOpB", 2, True)]
_FILES = ["a.py", "b.py"]


def _field(kind: str) -> st.SearchStrategy[Any]:
    """One field of a record in its tuple form, of schema letter ``kind`` (see build.py's schemas)."""
    ints = st.integers(-(2**62), 2**62)
    if kind == "n":
        return st.sampled_from(["_plus_scalar", "_copyto", "Dummy_Wait", "ünïcode"])
    if kind == "v":
        return st.integers(1, 2**40) | st.tuples() | st.lists(st.integers(1, 2**40), min_size=2, max_size=4).map(tuple)
    if kind == "o":
        return st.none() | st.sampled_from(_INVOCATIONS)
    if kind == "s":
        # A new pair at every push (as the hooks make them), of a shared file name and a line.
        return st.none() | st.builds(lambda f, n: (f, n), st.sampled_from(_FILES), st.integers(0, 5000))
    if kind == "N":
        return st.tuples(ints, ints, _field("o"), _field("s"))
    return ints


@needs_compiled
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), schema=st.sampled_from([PLAIN_SCHEMA, SUB_SCHEMA, FAM_SCHEMA, DEPS_SCHEMA]))
def test_a_compiled_log_gives_back_its_records_and_the_columns_a_list_of_them_gives(data: st.DataObject, schema: str) -> None:
    """The pure path's lists are the oracle: records appended to a compiled log come back equal
    (indexing, slicing, a copy), and the build's columns of the log, after another thread's log (a
    log writes its records into its own columns of the build's array), equal those of the same
    records as lists of tuples, names, objects, vars and sites included."""
    records = data.draw(st.lists(st.tuples(*map(_field, schema)), max_size=40))
    before = data.draw(st.lists(st.tuples(*map(_field, schema)), max_size=5))
    hot = _CompiledRecorder()._hot
    log, first = _spanlog.Log(hot, schema), _spanlog.Log(hot, schema)
    log.extend(records)
    first.extend(before)
    assert len(log) == len(records)
    assert log[:] == records and list(log) == records and log.copy()[::2] == records[::2]
    if records:
        assert log[-1] == records[-1]
    from_list, from_log = Tables(), Tables()
    a = record_columns([list(before), list(records)], schema, from_list)
    b = record_columns([first, log], schema, from_log)
    assert a.shape == b.shape
    for _, slot, kind, _ in schema_slots(schema):
        if kind == "n":
            assert [from_list.names.strings[c] for c in a[slot]] == [from_log.names.strings[c] for c in b[slot]]
        elif kind == "s":
            assert [from_list.sites[c] if c >= 0 else None for c in a[slot]] == [
                from_log.sites[c] if c >= 0 else None for c in b[slot]
            ]
        elif kind == "v":
            assert list(map(from_list.vars_of, a[slot].tolist())) == list(map(from_log.vars_of, b[slot].tolist()))
        else:  # ints, and objects by id() (0: None)
            assert a[slot].tolist() == b[slot].tolist()


#: Where a Python int's digits change in number (30-bit digits; 15-bit builds too), and int64's ends.
_INT_EDGES = [0, 1, -1, 2**15 - 1, 2**15, 2**30 - 1, 2**30, -(2**30), 2**45, 2**60 - 1, 2**60, -(2**60) + 1, -(2**60)]
_INT_EDGES += [2**62, 2**63 - 1, -(2**63), True, False]


@needs_compiled
@pytest.mark.parametrize("value", _INT_EDGES)
def test_a_log_reads_every_int64_as_python_does(value: int) -> None:
    """An int field is read inline where the int has at most two digits, by the interpreter past
    that: either way the value Python has (a bool as its int), at each edge of the digit counts."""
    log = _spanlog.Log(_CompiledRecorder()._hot, FAM_SCHEMA)
    log.append((value, -value if value != -(2**63) else 0, value, None, value))
    assert log[0] == (int(value), -int(value) if value != -(2**63) else 0, int(value), None, int(value))


@needs_compiled
@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 2**64, 2**100])
def test_a_log_refuses_an_int_past_int64(value: int) -> None:
    log = _spanlog.Log(_CompiledRecorder()._hot, FAM_SCHEMA)
    with pytest.raises(OverflowError):
        log.append((1, value, 2, None, 3))
    assert len(log) == 0


@needs_compiled
def test_a_log_writes_its_columns_only_where_they_fit() -> None:
    """``Log.columns(out, at)`` writes into an int64 array of one row per slot with room from ``at``,
    and refuses anything else (a wrong dtype, rows or room, a view that is not contiguous) unwritten."""
    hot = _CompiledRecorder()._hot
    log = _spanlog.Log(hot, FAM_SCHEMA)
    log.extend([(0, 1, 2, None, 3), (0, 4, 5, None, 6)])
    width = len(schema_slots(FAM_SCHEMA))
    out = np.full((width, 3), -7, dtype=np.int64)
    log.columns(out, 1)
    assert out[:, 0].tolist() == [-7] * width and out[1, 1:].tolist() == [1, 4] and out[4, 1:].tolist() == [3, 6]
    for bad, at in (
        (np.zeros((width, 3), dtype=np.int32), 0),
        (np.zeros((width + 1, 3), dtype=np.int64), 0),
        (np.zeros((width, 3), dtype=np.int64), 2),
        (np.zeros((width, 6), dtype=np.int64)[:, ::2], 0),
        (np.zeros((width, 3), dtype=np.int64), -1),
    ):
        with pytest.raises((ValueError, BufferError)):
            log.columns(bad, at)
    ro = np.zeros((width, 2), dtype=np.int64)
    ro.flags.writeable = False
    with pytest.raises((ValueError, BufferError)):
        log.columns(ro, 0)
    with pytest.raises(TypeError):
        log.columns(out)
    with pytest.raises(TypeError):
        log.columns()


@needs_compiled
def test_a_released_log_is_empty_and_the_next_log_reads_only_its_own_records() -> None:
    """``Log.release`` empties a log and keeps its chunks for the next logs of the same width: a log
    written into those chunks (fewer records than they held, extras of its own) reads back exactly
    its records, nothing of the last log's; a released log takes records again."""
    hot = _CompiledRecorder()._hot
    old = _spanlog.Log(hot, PLAIN_SCHEMA)
    many = [(k, k + 1, f"op{k % 7}", k, k, k, k, k, k, (k, k + 1), k + 9) for k in range(10_000)]  # 3 chunks
    old.extend(many)
    old.release()
    assert len(old) == 0 and old[:] == []
    new = _spanlog.Log(hot, PLAIN_SCHEMA)
    few = [(k, 2 * k, "mine", -k, 0, 0, 0, 0, 0, (), (7,)) for k in range(5_000)]
    new.extend(few)
    assert new[:] == few
    old.append(many[3])
    assert old[:] == [many[3]]


@needs_compiled
def test_a_stopped_profile_gives_back_its_records_memory() -> None:
    """Once ``stop()`` has built the trace, the recorder's compiled logs are empty (their chunks go to
    the next recording, not to the collector's next pass), and the trace keeps every span."""
    mx.set_engine("threaded")
    prof = mx.Profiler(compiled=True).start()
    a = mx.nd.ones((2, 2))
    for _ in range(300):
        a = a + 1
    rec = prof._recorder
    assert rec is not None
    trace = prof.stop()
    assert sum(1 for name in trace.table.str_list(trace.table.name) if name == "_plus_scalar") == 300
    assert all(len(part) == 0 for b in rec.thread_records() for part in (b.plain, b.sub, b.fam, b.deps, b.buf))


@needs_compiled
def test_a_log_refuses_a_bad_schema_and_a_record_of_another_shape() -> None:
    hot = _CompiledRecorder()._hot
    with pytest.raises(ValueError, match="schema"):
        _spanlog.Log(hot, "iix")
    log = _spanlog.Log(hot, FAM_SCHEMA)
    with pytest.raises(TypeError, match="5 fields"):
        log.append((1, 2))
    with pytest.raises(TypeError, match="note"):
        _spanlog.Log(hot, SUB_SCHEMA).append((1, 2, "op", 3, (4, 5)))
    assert len(log) == 0


@needs_compiled
def test_pushes_at_one_line_share_one_site() -> None:
    """Sites are told apart by their code (or file) and offset, not by the pair's identity: a loop's
    thousand pushes from one line keep one site, not a thousand."""
    hot = _CompiledRecorder()._hot
    log = _spanlog.Log(hot, DEPS_SCHEMA)
    for k in range(1000):
        log.append((k, k, 0, 0, 0, 0, 1, 2, ("loop.py", 7)))
    out = np.zeros((len(DEPS_SCHEMA), 1000), dtype=np.int64)
    _names, objects, sites, x_ids, x_start = log.columns(out, 0)
    assert sites == [("loop.py", 7)] and objects == [] and x_ids == x_start == b""
    assert out[0].tolist() == list(range(1000)) and out[-1].tolist() == [0] * 1000  # every record, one site code


@needs_compiled
@pytest.mark.parametrize("engine", ["threaded", "naive"])
def test_op_names_stay_right_across_runs_of_one_name_and_recorders(engine: str) -> None:
    """The recorder keeps the last name it coded on each thread (loops push runs of one name): names
    made at run time, alternating, repeated, and the same ones again under a second recorder (whose
    codes are its own) each come back as pushed."""
    mx.set_engine(engine)
    try:
        eng = get_engine()
        names = [f"op_{k % 3}{'x' * (k // 4)}" for k in range(12)] + ["same"] * 5
        for fresh in (True, False, False):  # new str objects, then the same ones under a second recorder
            names.reverse()
            _, trace = _record(lambda: [eng.push(lambda: None, name="".join(n) if fresh else n) for n in names], True)
            table = trace.table
            pushed = table.strs(table.name)[np.argsort(table.op, kind="stable")]
            assert [n for n in pushed.tolist() if n != "WaitForAll"] == names
    finally:
        mx.set_engine("threaded")


def test_a_compiled_part_of_another_contract_or_other_records_is_refused_with_its_reason() -> None:
    """A compiled part left from an older install (a quiet build failure keeps the old one) is not
    used: the recorder says why, rather than failing when a profile starts."""
    from types import SimpleNamespace

    from opprof.profiler.recorder import SPANLOG_API, compiled_mismatch

    shapes = {"PLAIN_SCHEMA": PLAIN_SCHEMA, "SUB_SCHEMA": SUB_SCHEMA, "FAM_SCHEMA": FAM_SCHEMA, "DEPS_SCHEMA": DEPS_SCHEMA}
    assert compiled_mismatch(SimpleNamespace(API=SPANLOG_API, **shapes)) == ""
    assert "contract 1" in compiled_mismatch(SimpleNamespace(**shapes))  # before the contract was numbered
    assert "reinstall" in compiled_mismatch(SimpleNamespace(API=SPANLOG_API + 1, **shapes))
    assert "other shapes" in compiled_mismatch(SimpleNamespace(API=SPANLOG_API, **{**shapes, "FAM_SCHEMA": "iiio"}))
    assert "other shapes" in compiled_mismatch(SimpleNamespace(API=SPANLOG_API))  # plain ops only, as before
    if not COMPILED_WHY_NOT:
        assert compiled_mismatch(_spanlog) == ""


@needs_compiled
def test_the_compiled_ready_hook_stamps_as_the_observers_own() -> None:
    """``on_ready`` in C (each op's ``by`` and one ``ready_ns``, CLOCK_MONOTONIC) does what
    EngineObserver.on_ready does on perf_counter_ns, and refuses what it cannot read."""
    import time

    from opprof.engine import EngineObserver, Opr

    rec = Recorder(compiled=True)
    oprs = [Opr(lambda: None, (), (), f"op{k}", False, False, None) for k in range(3)]
    python_ops = [Opr(lambda: None, (), (), f"op{k}", False, False, None) for k in range(3)]
    before = time.perf_counter_ns()
    rec.on_ready(oprs, 41)
    EngineObserver.on_ready(rec, python_ops, 41)
    after = time.perf_counter_ns()
    assert [o.by for o in oprs] == [o.by for o in python_ops] == [41, 41, 41]
    assert len({o.ready_ns for o in oprs}) == 1 and before <= oprs[0].ready_ns <= python_ops[0].ready_ns <= after
    rec.on_ready([], 7)  # nothing made ready: nothing to do
    with pytest.raises(TypeError, match="on_ready"):
        rec.on_ready(tuple(oprs), 7)


@needs_compiled
def test_a_compiled_push_note_reads_as_the_python_recorders_tuple() -> None:
    """The compiled ``on_push`` keeps a push's note as a C object (its numbers not made into ints):
    read as a sequence it is the Python recorder's tuple (ts, records, invocation, site), which the
    Python recorder's general path unpacks, and a log takes it where it takes that tuple."""
    from opprof.engine import Opr

    compiled, pure = Recorder(compiled=True), Recorder(compiled=False)
    ours, theirs = (Opr(lambda: None, (), (), "op", False, False, None) for _ in range(2))
    compiled.on_push(ours)
    pure.on_push(theirs)
    note = ours.prof
    assert type(note) is not tuple and len(note) == 4 and "Note(" in repr(note)
    ts, records, inv, site = note  # as Recorder.run and _record unpack it
    assert (records, inv, site) == theirs.prof[1:] == (0, None, None)
    assert isinstance(ts, int) and 0 <= theirs.prof[0] - ts < 10**9  # CLOCK_MONOTONIC, perf_counter_ns's
    with pytest.raises(IndexError):
        note[4]
    log = _spanlog.Log(compiled._hot, SUB_SCHEMA)
    log.extend([(1, 2, "op", 3, note), (1, 2, "op", 3, tuple(note))])
    assert log[0] == log[1] == (1, 2, "op", 3, tuple(note))
    # An op of an info the C hooks leave to the Python recorder: recorded there, from the C note.
    odd = Opr(lambda: None, (), (), "odd", False, False, object())
    compiled.on_push(odd)
    compiled.run(odd, odd.fn)
    assert [s.name for s in compiled.build().spans] == ["odd"]


class _ManyLines(mx.operator.CustomOp):
    """Sub-ops pushed from twelve lines a few code units apart in one function (more than the
    compiled hooks' cache of sites holds), the same ones at every call."""

    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        x = in_data[0]
        # Each term on a line of its own: its push names that line.
        total = (
            (x + 1)
            + (x * 2)
            + (x - 3)
            + (x / 4)
            + (x + 5)
            + (x * 6)
            + (x - 7)
            + (x / 8)
            + (x + 9)
            + (x * 10)
            + (x - 11)
            + (x / 12)
        )
        self.assign(out_data[0], req[0], total)


@mx.operator.register("CompiledManyLines")
class _ManyLinesProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, in_shapes, in_dtypes):  # type: ignore[no-untyped-def]
        return _ManyLines()


@needs_compiled
@pytest.mark.parametrize("engine", ["threaded", "naive"])
def test_each_sub_op_keeps_the_line_that_pushed_it_through_the_cache_of_sites(engine: str) -> None:
    """The compiled hooks hand out a site met before from a small cache: every sub-op of every call
    still names its own line, as the Python recorder does."""

    def lines(compiled: bool) -> list[str]:
        mx.set_engine(engine)
        try:
            prof = mx.Profiler(compiled=compiled).start()
            x = mx.nd.ones((2, 2))
            for _ in range(5):
                x = mx.nd.Custom(x, op_type="CompiledManyLines")
            x.wait_to_read()
            trace = prof.stop()
        finally:
            mx.set_engine("threaded")
        ops = trace.ops
        assert ops is not None
        pushed = np.flatnonzero(ops.site >= 0)
        return [ops.strings[ops.site[i]] for i in pushed[np.argsort(ops.op[pushed], kind="stable")]]  # in push order

    pure, compiled = lines(False), lines(True)
    assert compiled == pure
    assert len(set(compiled)) >= 12 and len(compiled) >= 5 * 12  # twelve lines, every call
