"""Memory in a profile, on workloads with known answers: a sized array has known bytes, a chain
that drops its inputs holds two arrays at a time (as MXNet does), live bytes come back to where
they started, what a cell keeps is found; and MXNet's own ``profile_memory`` output is the
fixture for the schema (tests/data/mxnet-1.9.1-memory*, made with real MXNet 1.9.1)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import opprof
import opprof as mx
from opprof.trace import Trace, from_chrome, load
from opprof.trace.analysis.memory import live_from_counters
from opprof.trace.memory import MEMORY_CATEGORY, MEMORY_COUNTER, MemoryEvents
from opprof.trace.text import alive_text, mxnet_stats_json, stats_table

DATA = Path(__file__).resolve().parent.parent / "data"
MB4 = 4_000_000  # a 1000x1000 float32


class MemDouble(mx.operator.CustomOp):
    """Three 1000x1000 float32 sub-op outputs alive at once (12 MB), then one assigned."""

    def forward(self, is_train, req, in_data, out_data, aux):
        a = in_data[0] + 1
        b = in_data[0] * 2
        c = a + b
        self.assign(out_data[0], req[0], c)


@mx.operator.register("MemDouble")
class MemDoubleProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return MemDouble()


def chain() -> None:
    a = mx.nd.ones((1000, 1000))
    for k in range(5):
        a = a + k  # the previous array is dropped as the next is made
    a.wait_to_read()


def test_an_op_output_allocates_its_exact_bytes(engine: Any) -> None:
    with opprof.profile(memory=True) as prof:
        x = mx.nd.ones((1000, 1000))
        y = x * 3
        y.wait_to_read()
    trace = prof.trace
    assert trace.validate() == []
    m = trace.analysis().memory
    assert m is not None and trace.ops is not None
    names = {s.op: s.name for s in trace.spans if s.op is not None and s.op >= 0}
    by_name = {names[int(op)]: int(m.op_alloc[r]) for r, op in enumerate(trace.ops.op.tolist()) if int(op) in names}
    assert by_name["_ones"] == MB4 and by_name["_mul_scalar"] == MB4
    assert m.allocated == 2 * MB4
    del x, y


def test_a_chain_that_drops_its_inputs_holds_two_arrays_at_a_time(engine: Any) -> None:
    with opprof.profile(memory=True) as prof:
        chain()
    m = prof.trace.analysis().memory
    assert m is not None
    assert m.peak == 2 * MB4, (m.live // MB4).tolist()
    assert m.allocated == 6 * MB4
    assert int(m.live[-1]) == 0  # the last one too, once the chain's function returned


def test_live_bytes_come_back_to_the_start_once_arrays_are_deleted(engine: Any) -> None:
    with opprof.profile(memory=True) as prof:
        xs = [mx.nd.ones((100, 100)) * k for k in range(4)]
        mx.nd.waitall()
        del xs
        mx.nd.waitall()
    m = prof.trace.analysis().memory
    assert m is not None and m.peak >= 4 * 40_000
    assert int(m.live[-1]) == 0 and m.alive == []
    assert alive_text(prof.trace) == ""


def test_a_custom_ops_sub_ops_allocate_and_its_peak_is_while_it_ran(engine: Any) -> None:
    with opprof.profile(memory=True) as prof:
        x = mx.nd.ones((1000, 1000))
        y = mx.nd.Custom(x, op_type="MemDouble")
        y.wait_to_read()
    (row,) = prof.trace.custom_ops()
    assert row.allocated_bytes == 3 * MB4  # a, b and c; the assignment writes the output in place
    # x and the output, plus a, b and c at once: the peak while it ran.
    assert row.peak_bytes == 5 * MB4
    del x, y


def _line_of(marker: str) -> str:
    """``this file:line`` of the line of this file that holds ``marker``."""
    lines = Path(__file__).read_text().splitlines()
    return f"{__file__}:{next(k for k, line in enumerate(lines, 1) if marker in line and 'marker' not in line)}"


def _made_in_a_helper(k: int) -> Any:
    return mx.nd.ones((10, 10)) * k  # made-in-helper


class KeepsOne(mx.operator.CustomOp):
    """Its Python keeps one array it made (a leak inside a custom op)."""

    kept: ClassVar[list[Any]] = []

    def forward(self, is_train, req, in_data, out_data, aux):
        KeepsOne.kept.append(in_data[0] + 7)  # kept-in-forward
        self.assign(out_data[0], req[0], in_data[0])


@mx.operator.register("KeepsOne")
class KeepsOneProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return KeepsOne()


@pytest.mark.parametrize("compiled", [False, True], ids=["pure", "compiled"])
def test_what_stays_alive_is_named_by_the_op_and_the_line_that_made_it(engine: Any, compiled: bool) -> None:
    """The known answer: ten arrays appended to a list are named with their op and the line that
    made them; so are arrays made in a helper (its line, not the caller's) and in a custom op's
    Python; what is freed is not named at all."""
    _recording(compiled)  # skips the compiled side where it is not built
    kept: ClassVar[list[Any]] = []
    prof = opprof.Profiler(memory=True, compiled=None if compiled else False).start()
    try:
        for k in range(10):
            kept.append(mx.nd.ones((10, 10)) + k)  # kept-in-loop
        kept.append(_made_in_a_helper(3))
        kept.append(mx.nd.Custom(mx.nd.ones((2, 2)), op_type="KeepsOne"))
        (mx.nd.ones((10, 10)) * 2).wait_to_read()  # freed: not named
        mx.nd.waitall()
    finally:
        prof.stop()
    assert prof.trace is not None and prof.trace.metadata["memory"]["path"] == ("compiled" if compiled else "python")
    m = prof.trace.analysis().memory
    assert m is not None
    got = {(g.op, g.site, g.count, g.nbytes) for g in m.alive}
    assert ("_plus_scalar", _line_of("# kept-in-loop"), 10, 10 * 400) in got
    assert ("_mul_scalar", _line_of("# made-in-helper"), 1, 400) in got
    assert ("KeepsOne::_plus_scalar", _line_of("# kept-in-forward"), 1, 16) in got
    assert ("KeepsOne", _line_of('op_type="KeepsOne"'), 1, 16) in got  # its output, kept too
    assert sum(g.count for g in m.alive) == 10 + 1 + 1 + 1
    text = alive_text(prof.trace)
    assert "13 arrays" in text and f"10 x _plus_scalar at {os.path.basename(__file__)}:" in text
    kept.clear()
    KeepsOne.kept.clear()


def test_memory_is_off_unless_asked_and_costs_nothing_then() -> None:
    import opprof.nd.ndarray as nd_

    with opprof.profile() as prof:
        mx.nd.ones((3, 3)).wait_to_read()
        assert nd_._on_array is None
    assert prof.trace.memory is None and prof.trace.analysis().memory is None
    assert prof.trace.custom_ops() == [] and "memory" not in json.dumps(prof.trace.metadata)


def test_opprof_files_keep_the_events_and_chrome_json_the_counter(tmp_path: Path) -> None:
    with opprof.profile(memory=True) as prof:
        chain()
    trace = prof.trace
    trace.save(tmp_path / "t.opprof")
    back = load(tmp_path / "t.opprof")
    assert back == trace and back.memory is not None
    trace.save(tmp_path / "t.json")
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    counters = [e for e in events if e.get("ph") == "C" and e.get("name") == MEMORY_COUNTER]
    assert counters and all(e["cat"] == MEMORY_CATEGORY and set(e["args"]) == {MEMORY_COUNTER} for e in counters)
    m = trace.analysis().memory
    assert m is not None
    assert [e["args"][MEMORY_COUNTER] for e in counters] == m.live.tolist()
    _, live = live_from_counters(load(tmp_path / "t.json").counters)
    assert live.tolist() == m.live.tolist()


def test_mxnets_memory_counter_reads_as_mxnet_wrote_it() -> None:
    """Real MXNet 1.9.1 (its profile_memory): the counter's live bytes, 4,000,000 for a 1000x1000 float32."""
    trace = from_chrome(json.loads((DATA / "mxnet-1.9.1-memory.json").read_text()))
    ts, live = live_from_counters(trace.counters)
    assert len(live) == 26 and int(live.max()) == 8_000_000 and MB4 in live.tolist()
    assert np.all(np.diff(ts) >= 0)


def test_dumps_has_mxnets_memory_section() -> None:
    """``dumps(format='json')``'s Memory section has MXNet's keys, units and arithmetic ("Avg" is
    half the range), and the table its "Device Storage" lines (fixtures: real MXNet 1.9.1)."""
    theirs = json.loads((DATA / "mxnet-1.9.1-memory-dumps.json").read_text())
    with opprof.profile(memory=True) as prof:
        chain()
    ours = json.loads(mxnet_stats_json([prof.trace]))
    assert set(ours) == set(theirs) and ours["Unit"] == theirs["Unit"]
    (cat,) = theirs["Memory"]
    assert set(ours["Memory"]) == {cat} and set(ours["Memory"][cat]) == set(theirs["Memory"][cat])
    mine = ours["Memory"][cat][MEMORY_COUNTER]
    assert set(mine) == set(theirs["Memory"][cat][MEMORY_COUNTER]) == {"Count", "Min", "Max", "Avg"}
    assert mine["Max"] == 8000 and mine["Avg"] == (mine["Max"] - mine["Min"]) / 2
    their_lines = (DATA / "mxnet-1.9.1-memory-dumps.txt").read_text().splitlines()
    k = their_lines.index(MEMORY_CATEGORY)
    table = stats_table([prof.trace]).splitlines()
    j = table.index(MEMORY_CATEGORY)
    assert table[j : j + 4] == their_lines[k : k + 4]  # title, rule, header, rule: as MXNet prints them
    assert table[j + 4].startswith(MEMORY_COUNTER) and table[j + 4].split()[-2] == "8000.0000"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 10**9), st.integers(0, 10**6), st.booleans()), max_size=40))
def test_memory_events_round_trip_through_opprof_files(tmp_path_factory: Any, rows: list[tuple[int, int, bool]]) -> None:
    """Any consistent events (each storage made once, freed at most once, later) come back exact."""
    ts, storage, var, nbytes = [], [], [], []
    for k, (size, t, freed) in enumerate(rows):
        ts.append(t)
        storage.append(k)
        var.append(k + 1)
        nbytes.append(size)
        if freed:
            ts.append(t + 1 + size % 997)
            storage.append(k)
            var.append(k + 1)
            nbytes.append(-size)
    # Each allocation left alive names one of three lines.
    freed_storages = {s for s, n in zip(storage, nbytes, strict=True) if n < 0}
    site = [k % 3 if n > 0 and s not in freed_storages else -1 for k, (s, n) in enumerate(zip(storage, nbytes, strict=True))]
    lines = ("a.py:1", "In [3], line 2", "b.py:10")
    events = MemoryEvents(np.array(ts), np.array(storage), np.array(var), np.array(nbytes), None, np.array(site), lines)
    assert events.check() == []
    trace = Trace(memory=events)
    path = tmp_path_factory.mktemp("mem") / "t.opprof"
    trace.save(path)
    back = load(path)
    assert back.memory is not None and back == trace


def test_inconsistent_memory_events_are_refused_saying_why() -> None:
    bad = MemoryEvents(np.array([1, 2]), np.array([0, 1]), np.array([1, 2]), np.array([8, -8]))
    assert any("freed of 8 bytes without an allocation" in p for p in bad.check())
    twice = MemoryEvents(np.array([1, 2]), np.array([0, 0]), np.array([1, 1]), np.array([8, 8]))
    assert any("allocated twice" in p for p in twice.check())
    lost = MemoryEvents(np.array([1]), np.array([0]), np.array([1]), np.array([8]), None, np.array([2]), ("a.py:1",))
    assert any("refers to lines outside its 1 sites" in p for p in lost.check())


# ---------------------------------------------------------------- the compiled path against the pure one
def _recording(compiled: bool) -> Any:
    """A memory recording on the given path (the compiled side skipped, saying why, where it is not built)."""
    import time

    from opprof.profiler import memory as memory_

    if compiled and (memory_._memlog is None or memory_.COMPILED_WHY_NOT):
        pytest.skip(f"no compiled memory log here: {memory_.COMPILED_WHY_NOT}")
    rec = memory_.MemoryRecording(time.perf_counter_ns, compiled=compiled)
    assert rec.path == ("compiled" if compiled else "python")
    return rec


def aliasing_workload() -> list[Any]:
    """Makes, aliases, views and frees arrays, each step waited for so that the order is the same
    on every run: what it returns is still alive when the recording stops."""
    a = mx.nd.ones((4, 6))  # an allocation
    b = a.detach()  # the same storage: none
    c = a[1:3]  # a view of a 2-D array: none
    assert c._data.base is not None
    d = (a + 1) * 2  # two; the first freed once the second op has run
    e = mx.nd.zeros((0, 3))  # no bytes: none
    mx.nd.waitall()
    del a  # b and c still hold the storage
    f = b.copy()
    mx.nd.waitall()
    del b, c  # now it is freed
    g = [mx.nd.ones((k + 1, 2)) * k for k in range(5)]  # ten: each ones freed once its product ran
    mx.nd.waitall()
    del g[1::2]  # two freed, three kept
    mx.nd.waitall()
    del f
    return [d, e, *g]


def _normalised(events: MemoryEvents) -> list[tuple[int, int, int, str | None]]:
    """(storage, var, bytes, line made at) in time order, each var id as its rank among the run's
    (ids count on across runs; ranks say the same)."""
    rank = {v: k for k, v in enumerate(sorted(set(events.var.tolist())))}
    cols = zip(events.storage.tolist(), events.var.tolist(), events.nbytes.tolist(), range(len(events)), strict=True)
    return [(s, rank[v], n, events.site_of(k)) for s, v, n, k in cols]


def _record(
    compiled: bool, workload: Callable[[], Any] = aliasing_workload
) -> tuple[list[tuple[int, int, int, str | None]], Any]:
    """``workload`` recorded on the given path: its events, normalised, and what it returned (kept alive)."""
    rec = _recording(compiled)
    rec.start()
    kept = workload()
    rec.stop()
    events = rec.table()
    assert events is not None and events.check() == []
    return _normalised(events), kept


def test_the_compiled_and_pure_paths_record_the_same_events(engine: Any) -> None:
    pure, kept_pure = _record(False)
    compiled, kept_compiled = _record(True)
    # a, a + 1, its double, f, five ones and their products: 14 allocations; a, a + 1, f, the five
    # ones and two products freed.
    assert sum(n > 0 for _, _, n, _ in pure) == 14 and sum(n < 0 for _, _, n, _ in pure) == 10, pure
    # The four kept (d, and three of g) name their lines in aliasing_workload; no other does.
    lines = {site for *_, site in pure if site is not None}
    assert sum(site is not None for *_, site in pure) == 4 and {x.rsplit(":", 1)[0] for x in lines} == {__file__}, pure
    assert compiled == pure
    del kept_pure, kept_compiled


#: A step of a random program over numbered slots: ("make", slot, rows) puts a new array in a slot
#: (the one there is dropped), ("alias", slot, source) the source's storage, ("drop", slot, _) empties it.
_STEPS = st.lists(
    st.tuples(st.sampled_from(["make", "make", "alias", "drop"]), st.integers(0, 119), st.integers(1, 4)), max_size=300
)


def _on_both_paths(program: Callable[[list[Any]], None]) -> None:
    """``program`` over 200 slots recorded on the pure path and on the compiled one, on the naive
    engine (each step done in place: the same order of frees both times): the same events, and the
    same lines for the arrays still alive at the stop."""

    def run() -> list[Any]:
        slots: list[Any] = [None] * 200
        program(slots)
        return slots

    mx.set_engine("naive")
    try:
        pure, kept_pure = _record(False, run)
        compiled, kept_compiled = _record(True, run)
    finally:
        mx.set_engine("threaded")
    assert compiled == pure
    del kept_pure, kept_compiled


@settings(max_examples=25, deadline=None)
@given(_STEPS)
def test_the_compiled_path_records_what_the_pure_one_does_for_any_program(steps: list[tuple[str, int, int]]) -> None:
    """A random program of makes, aliases and drops, up to 120 arrays alive at once."""

    def program(slots: list[Any]) -> None:
        for verb, k, n in steps:
            if verb == "make":
                slots[k] = mx.nd.ones((n, 3))
            elif verb == "alias":
                slots[k] = slots[n * 29 % 120].detach() if slots[n * 29 % 120] is not None else None
            else:
                slots[k] = None

    _on_both_paths(program)


def test_the_compiled_path_records_what_the_pure_one_does_with_many_alive() -> None:
    """200 arrays alive (the compiled table of watched storages grown twice from its 64 entries),
    then freed in strides (deletions in the middle of its probe runs), some made again meanwhile."""

    def program(slots: list[Any]) -> None:
        for k in range(200):
            slots[k] = mx.nd.ones((k % 4 + 1, 3))
        for stride in (2, 3, 5):
            for k in range(0, 200, stride):
                slots[k] = None
            for k in range(0, 200, stride * 7):
                slots[k] = mx.nd.ones((2, 2))
        for k in range(1, 200, 2):
            slots[k] = None

    _on_both_paths(program)


def _live(rec: Any) -> int:
    """How many storages a recording watches: by a weak reference, or (compiled, where NumPy's
    data-memory handler allocated them) in its table of the handler's blocks."""
    return int(rec._log.live + rec._log.watched) if rec.path == "compiled" else len(rec._live)


@pytest.mark.parametrize("compiled", [False, True], ids=["pure", "compiled"])
def test_stop_releases_every_watched_storage(engine: Any, compiled: bool) -> None:
    rec = _recording(compiled)
    rec.start()
    kept = [mx.nd.ones((3, 3)) + k for k in range(20)]
    mx.nd.waitall()
    assert _live(rec) >= 20
    rec.stop()
    assert _live(rec) == 0 and not rec.on
    n = len(rec.table())
    kept.clear()
    import gc

    gc.collect()
    mx.nd.ones((3, 3)).wait_to_read()  # nor is anything made after stop() recorded
    assert len(rec.table()) == n


@pytest.mark.parametrize("compiled", [False, True], ids=["pure", "compiled"])
def test_a_released_recording_starts_the_next_from_nothing(engine: Any, compiled: bool) -> None:
    """``release()`` (once stopped and read) drops the events; the compiled log keeps its buffer for
    the next recording's log, which reads back only its own events (a chain of 50 4x4 float32
    arrays: 50 allocations of 64 bytes), nothing of the 2,000 before."""
    first = _recording(compiled)
    first.start()
    a = mx.nd.ones((8, 8))
    for _ in range(1_000):
        a = a + 1
    mx.nd.waitall()
    first.stop()
    assert len(first.table()) >= 1_000
    with pytest.raises(RuntimeError, match="once stopped"):
        started = _recording(compiled)
        started.start()
        try:
            started.release()
        finally:
            started.stop()
    first.release()
    assert len(first.table()) == 0 and first.recorded() == 0
    second = _recording(compiled)
    second.start()
    b = mx.nd.ones((4, 4), dtype="float32")
    for _ in range(49):
        b = b + 1
    mx.nd.waitall()
    second.stop()
    events = second.table()
    assert events.check() == [] and int(np.count_nonzero(events.nbytes > 0)) == 50
    assert set(events.nbytes[events.nbytes > 0].tolist()) == {64}
    del a, b


class _DroppingVar:
    """A var whose id, when the hook reads it, drops the last reference to the storage made before:
    its free is recorded while the hook runs, as when a collection inside the hook (its weak
    reference is a GC allocation) frees an array only a cycle held. Deterministic, where the
    collector's timing differs between Python versions."""

    def __init__(self, id: int, held: list[Any]) -> None:
        self._id = id
        self.held = held

    @property
    def id(self) -> int:
        self.held.clear()
        return self._id


@pytest.mark.parametrize("compiled", [False, True], ids=["pure", "compiled"])
def test_a_free_during_the_hook_is_recorded_whole(compiled: bool) -> None:
    import opprof.nd.ndarray as nd_

    rec = _recording(compiled)
    rec.start()
    hook = nd_._on_array  # the recording's own, called directly
    assert hook is not None
    held: list[Any] = []
    try:
        for k in range(100):
            data = np.ones(4)
            hook(data, _DroppingVar(k + 1, held))  # storage k - 1 freed inside, then storage k made
            held.append(data)
            del data
    finally:
        rec.stop()
    held.clear()  # after stop(): not recorded
    events = rec.table()
    assert events is not None and events.check() == []
    assert events.storage.tolist() == [k // 2 for k in range(199)]
    assert events.var.tolist() == [k // 2 + 1 for k in range(199)]
    assert events.nbytes.tolist() == [32, -32] * 99 + [32]


def test_the_compiled_path_is_taken_only_with_the_clock_it_reads() -> None:
    """It stamps CLOCK_MONOTONIC (perf_counter_ns's clock): any other clock keeps the Python path,
    and where it is not built the default is the Python path, saying why."""
    import time

    from opprof.profiler import memory as memory_

    assert memory_.MemoryRecording(lambda: 0).path == "python"
    with pytest.raises(RuntimeError, match="no compiled memory recording here"):
        memory_.MemoryRecording(lambda: 0, compiled=True)
    default = memory_.MemoryRecording(time.perf_counter_ns)
    assert default.path == ("python" if memory_.COMPILED_WHY_NOT else "compiled")
    assert (memory_._memlog is None) == bool(memory_.COMPILED_WHY_NOT)


def test_the_why_text_tells_the_memory_story_where_memory_was_recorded() -> None:
    from opprof.trace.text import why_text

    kept = []
    with opprof.profile(memory=True) as prof:
        x = mx.nd.ones((1000, 1000))
        y = mx.nd.Custom(x, op_type="MemDouble")
        y.wait_to_read()
        kept.append(y)
    text = why_text(prof.trace)
    assert "Memory: peak 20.0 MB of live NDArrays" in text and "reached by MemDouble::elemwise_add" in text
    assert "Still alive when the profile stopped: 8.0 MB" in text
    with opprof.profile() as plain:
        (mx.nd.ones((10, 10)) + 1).wait_to_read()
    assert "Memory:" not in why_text(plain.trace)
    del x, y
    kept.clear()


def test_stats_and_the_split_table_carry_the_bytes() -> None:
    from opprof.trace.text import split_table, stats_json

    with opprof.profile(memory=True) as prof:
        x = mx.nd.ones((1000, 1000))
        y = mx.nd.Custom(x, op_type="MemDouble")
        z = x * 2
        mx.nd.waitall()
    by_name = {r.name: r.allocated_bytes for r in prof.trace.stats()}
    assert by_name["_ones"] == MB4 and by_name["_mul_scalar"] == MB4
    assert by_name["MemDouble::_plus_scalar"] == MB4 and by_name["MemDouble"] == MB4
    stats = json.loads(stats_json([prof.trace]))
    assert stats["categories"]["operator"]["_mul_scalar"]["Allocated Bytes"] == MB4
    table = split_table(prof.trace).splitlines()
    heads = table[0].split()
    assert heads[heads.index("alloc") + 1] == "peak"
    assert "12.0 MB" in table[1]  # MemDouble's sub-ops: a, b and c
    from opprof.profiler import npmem

    # Its Python's own NumPy data (none: its arrays are sub-op outputs), where NumPy is watched.
    assert ("py-numpy" in heads) == npmem.AVAILABLE
    with opprof.profile() as plain:
        (mx.nd.ones((10, 10)) + 1).wait_to_read()
    assert all(r.allocated_bytes is None for r in plain.trace.stats())
    del x, y, z


def test_the_compiled_log_reads_numpy_arrays_off_their_struct_where_checked() -> None:
    """Where the compiled log is built it reads an array's base and bytes off NumPy's struct, having
    checked the layout on sample arrays at import (views, 0-d, empty, structured dtypes); the
    events it records for such arrays are the pure path's (test above), and a layout check that
    fails leaves getattr in use."""
    from opprof.profiler import memory as memory_

    if memory_._memlog is None:
        pytest.skip(f"no compiled memory log here: {memory_.COMPILED_WHY_NOT}")
    assert memory_.NUMPY_STRUCT
    assert memory_._memlog.bind_numpy(np.ndarray, memory_._numpy_samples())


def test_frees_are_seen_through_numpys_handler_where_it_allocated_the_storage(engine: Any) -> None:
    """Compiled, with opprof's NumPy handler: what the recording thread makes while recording is
    watched in the handler's table (no weak reference) and its free recorded wherever it happens
    (another thread too, and after a realloc moved it); storage NumPy allocated before the
    recording keeps a weak reference; what is freed after stop() is not recorded, nor is anything
    left watched."""
    import threading

    from opprof.profiler import memory as memory_

    if memory_.WATCH_WHY_NOT:
        pytest.skip(f"frees not seen through NumPy's handler here: {memory_.WATCH_WHY_NOT}")
    before = np.ones(1000, dtype=np.float32)  # allocated by NumPy's default handler
    rec = _recording(True)
    rec.start()
    try:
        old = mx.nd.NDArray(before)  # storage from before: a weak reference
        made = [mx.nd.ones((10, 10)) for _ in range(3)]  # 400 bytes each, watched
        mx.nd.waitall()
        assert rec._log.watched >= 3 and rec._log.live >= 1
        moved = made.pop()
        moved._data.resize(200, refcheck=False)  # the handler's realloc: the storage goes on elsewhere
        other = made.pop()
        t = threading.Thread(target=lambda: made.clear())  # the last reference dies on another thread
        t.start()
        t.join()
        del other, moved, old, before
        mx.nd.waitall()
    finally:
        rec.stop()
    assert rec._log.watched == 0 and rec._log.live == 0
    events = rec.table()
    assert events.check() == []
    made_ = {int(s): int(n) for s, n in zip(events.storage, events.nbytes, strict=True) if n > 0}
    freed = {int(s) for s, n in zip(events.storage, events.nbytes, strict=True) if n < 0}
    assert sorted(made_.values()) == [400, 400, 400, 4000]
    assert freed == set(made_), "every storage made was freed, the moved and the other thread's too"
    n = len(events)
    keep = mx.nd.ones((10, 10))
    del keep  # after stop(): not recorded
    assert len(rec.table()) == n
