"""The client's merge of workers' records, on records made to order (no cluster): a hypothesis
property over random workers, tasks, dependencies and clock offsets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("distributed")

from opprof.dask.clock import ClockEstimate
from opprof.dask.merge import DASK_CATEGORY, WorkerRecords, merge
from opprof.dask.worker import TaskChunk


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[WorkerRecords], int]:
    n_workers = draw(st.integers(1, 3))
    workers = []
    k = 0
    cursor = 0  # client time: tasks one after another, so none overlaps and inputs end first
    all_keys: list[str] = []
    for w in range(n_workers):
        rec = WorkerRecords(f"tcp://w{w}:1", name=str(w), pid=100 + w)
        offset = draw(st.integers(-(10**7), 10**7))
        rec.clock = ClockEstimate(offset, 300_000, 0, 30)
        for _ in range(draw(st.integers(0, 3))):  # chunks
            c = TaskChunk()
            n = draw(st.integers(0, 6))
            starts, stops, dep_at = [], [], [0]
            for i in range(n):
                key = f"t-{k}"
                k += 1
                c.keys.append(key)
                c.prefixes.append("t")
                c.threads.append(draw(st.sampled_from(["Dask-Default-0", "Dask-Default-1"])))
                t0 = cursor + draw(st.integers(0, 10**6))
                cursor = t0 + draw(st.integers(0, 10**6))
                starts.append(t0 + offset)  # on the worker's clock
                stops.append(cursor + offset)
                c.deps.extend(draw(st.lists(st.sampled_from(all_keys), max_size=2, unique=True)) if all_keys else [])
                dep_at.append(len(c.deps))
                all_keys.append(key)
                if draw(st.booleans()) and i == 0:
                    c.errors[i] = "ValueError('x')"
            c.start, c.stop = np.array(starts, dtype=np.int64), np.array(stops, dtype=np.int64)
            c.dep_at = np.array(dep_at, dtype=np.int64)
            if n:
                rec.chunks.append(c)
        workers.append(rec)
    return workers, k


@pytest.mark.e2e  # 60 clusters, ~2 s
@settings(max_examples=60, deadline=None)
@given(c=clusters())
def test_every_task_arrives_on_its_worker_and_the_clients_clock_with_its_edges(c: tuple[list[WorkerRecords], int]) -> None:
    workers, n_tasks = c
    trace = merge(None, workers, {})
    t = trace.table
    tasks = np.flatnonzero(t.cat == t.strings.index(DASK_CATEGORY)) if DASK_CATEGORY in t.strings else np.zeros(0, int)
    assert len(tasks) == n_tasks
    assert trace.processes == {k + 1: f"worker {w.name}" for k, w in enumerate(workers)}
    lanes = [(th.pid, th.name) for th in trace.threads]
    assert len(lanes) == len(set(lanes)) and len({th.tid for th in trace.threads}) == len(trace.threads)
    pid_of = {th.tid: th.pid for th in trace.threads}
    made = {}
    for k, w in enumerate(workers):
        assert w.clock is not None
        for ch in w.chunks:
            for i, key in enumerate(ch.keys):
                made[key] = (k + 1, int(ch.start[i]) - w.clock.offset_ns, int(ch.stop[i]) - w.clock.offset_ns, ch.errors.get(i))
    got = {}
    for i in tasks.tolist():
        args = t.args_of(i) or {}
        got[args["key"]] = (pid_of[int(t.tid[i])], int(t.start[i]), int(t.end[i]), args.get("error"))
    assert got == made
    edges = sum(len(ch.deps) for w in workers for ch in w.chunks)
    assert trace.n_flows == edges
    f = trace.flow_table
    assert bool(np.all(f.src_ts <= f.dst_ts))  # from an input's end to its consumer's start, on one clock
    assert trace.validate() == []


def test_each_workers_gil_evidence_stays_on_its_threads_and_clock() -> None:
    """A worker's engine segment with thread states (the GIL's evidence): the merged trace keeps
    them, each run on that worker's lane of the same thread, shifted onto the client's clock, a WAIT's
    holder mapped with it; the metadata says the GIL was sampled."""
    from opprof.trace import Trace
    from opprof.trace.records import ThreadInfo
    from opprof.trace.threadstates import GIL_METADATA, ThreadState, ThreadStates

    workers = []
    for w, offset in enumerate((1_000, -5_000)):
        rec = WorkerRecords(f"tcp://w{w}:1", name=str(w), pid=100 + w)
        rec.clock = ClockEstimate(offset, 300_000, 0, 30)
        held_wait = [int(ThreadState.HELD), int(ThreadState.WAIT)]
        states = ThreadStates([1, 2], held_wait, [10_000 + offset] * 2, [20_000 + offset] * 2, [-1, 1], 1_000_000)
        seg = Trace(
            [ThreadInfo(1, "MainThread"), ThreadInfo(2, "opprof-engine-0")],
            metadata={GIL_METADATA: {"period_ns": 1_000_000, "source": "test"}},
            thread_states=states,
        )
        rec.segments.append(seg)
        workers.append(rec)
    trace = merge(None, workers, {})
    ts = trace.thread_states
    assert ts is not None and len(ts) == 4
    lane = {th.tid: (th.pid, th.name) for th in trace.threads}
    runs = zip(ts.tid, ts.state, ts.start, ts.end, ts.holder, strict=True)
    got = sorted((lane[t], s, a, b, lane.get(h)) for t, s, a, b, h in runs)
    assert got == sorted(
        [((pid, "MainThread"), int(ThreadState.HELD), 10_000, 20_000, None) for pid in (1, 2)]
        + [((pid, "opprof-engine-0"), int(ThreadState.WAIT), 10_000, 20_000, (pid, "MainThread")) for pid in (1, 2)]
    )
    assert trace.metadata[GIL_METADATA]["period_ns"] == 1_000_000


def test_each_workers_wait_for_a_cpu_stays_on_its_threads_lanes() -> None:
    """Known answer: two workers' segments and a client, each counting its threads' waits for a CPU
    under its own tids: the merged trace keeps every one on its own lane (a worker's two segments'
    waits on one lane add up), never on a lane another process's tid names."""
    from opprof.trace import Trace
    from opprof.trace.records import ThreadInfo
    from opprof.trace.threadstates import CPU_WAIT_METADATA

    def part(ns: dict[str, int]) -> Trace:
        threads = [ThreadInfo(1, "MainThread"), ThreadInfo(2, "opprof-engine-0")]
        outside = {"ns": 100, "threads": 2}  # each process's BLAS pool of two, in each segment
        return Trace(threads, metadata={CPU_WAIT_METADATA: {"source": "test", "ns": ns, "outside_python": outside}})

    workers = []
    for w in range(2):
        rec = WorkerRecords(f"tcp://w{w}:1", name=str(w), pid=100 + w)
        rec.clock = ClockEstimate(0, 300_000, 0, 30)
        rec.segments += [part({"2": 1_000 * (w + 1)}), part({"2": 10, "1": 7})]
        workers.append(rec)
    client = Trace([ThreadInfo(5, "MainThread")], metadata={CPU_WAIT_METADATA: {"source": "test", "ns": {"5": 3}}})
    trace = merge(client, workers, {})
    lane = {th.tid: (th.pid, th.name) for th in trace.threads}
    got = {lane[int(k)]: v for k, v in trace.metadata[CPU_WAIT_METADATA]["ns"].items()}
    assert got == {
        (0, "MainThread"): 3,
        (1, "opprof-engine-0"): 1_010,
        (1, "MainThread"): 7,
        (2, "opprof-engine-0"): 2_010,
        (2, "MainThread"): 7,
    }
    # The threads outside Python: CPU time summed over every segment, each process's pool once.
    assert trace.metadata[CPU_WAIT_METADATA]["outside_python"] == {"ns": 400, "threads": 4}


def test_a_task_that_ran_on_two_workers_keeps_both_runs_and_the_metadata_says_so() -> None:
    """Known answer: Dask ran ``inc-1`` on both workers (a steal that raced the first start, as seen
    once in ~30,000 tasks on a real cluster). Both spans stay; ``ran_again`` counts one extra run and
    names the key, so spans (3) and tasks (2) are not confused."""
    workers = []
    for w, keys in enumerate((["inc-0", "inc-1"], ["inc-1"])):
        rec = WorkerRecords(f"tcp://w{w}:1", name=str(w), pid=100 + w)
        rec.clock = ClockEstimate(0, 300_000, 0, 30)
        c = TaskChunk()
        for key in keys:
            c.keys.append(key)
            c.prefixes.append("inc")
            c.threads.append("Dask-Default-0")
        n = len(keys)
        c.start = np.arange(n, dtype=np.int64) * 10_000 + 1_000 * w
        c.stop = c.start + 5_000
        c.dep_at = np.zeros(n + 1, dtype=np.int64)
        rec.chunks.append(c)
        workers.append(rec)
    trace = merge(None, workers, {"dask": {"lost": []}})
    t = trace.table
    assert int((t.cat == t.strings.index(DASK_CATEGORY)).sum()) == 3
    assert trace.metadata["dask"]["ran_again"] == {"extra_runs": 1, "keys": ["inc-1"]}
    assert trace.metadata["dask"]["lost"] == []  # what the session said is kept
    once = merge(None, workers[:1], {"dask": {"lost": []}})
    assert "ran_again" not in once.metadata["dask"]


def test_two_threads_of_one_name_in_a_part_keep_lanes_of_their_own() -> None:
    """Known answer: a worker's segment with two threads both named ``Thread-1`` (a process's thread
    names are not unique), each holding the GIL at the same moment on its own: the merge gives
    each its own lane, so their states never overlap, and a second segment's threads meet them."""
    from opprof.trace import Trace
    from opprof.trace.records import ThreadInfo
    from opprof.trace.threadstates import GIL_METADATA, ThreadState, ThreadStates

    rec = WorkerRecords("tcp://w0:1", name="0", pid=100)
    rec.clock = ClockEstimate(0, 300_000, 0, 30)
    for at in (0, 100_000):
        states = ThreadStates([1, 2], [int(ThreadState.BLOCKED)] * 2, [at, at], [at + 50_000] * 2, [-1, -1], 1_000_000)
        threads = [ThreadInfo(1, "Thread-1"), ThreadInfo(2, "Thread-1")]
        rec.segments.append(Trace(threads, metadata={GIL_METADATA: {"period_ns": 1_000_000}}, thread_states=states))
    trace = merge(None, [rec], {})
    assert trace.validate() == []
    lanes = sorted(th.name for th in trace.threads if th.pid == 1 and th.name.startswith("Thread-1"))
    assert lanes == ["Thread-1", "Thread-1 (2)"]
    assert trace.thread_states is not None and len(trace.thread_states) == 4
