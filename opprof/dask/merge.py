"""The workers' records merged into one :class:`~opprof.trace.Trace` on the client.

Each worker is a process (``pid`` 1, 2, ... in the order the workers were first heard from; the
client is 0) with its threads as lanes: a lane is (process, thread name), so a worker's Dask
thread that ran tasks and also pushed engine ops is one lane, and a thread id is unique in the
whole trace. Every time is mapped onto the client's clock (the worker's offset from :mod:`.clock`).
The trace layer's :class:`~opprof.trace.combine.Combiner` does the combining; this module adds what
only Dask has: tasks, their phases and the task graph.

Tasks become spans named by their key's prefix (category ``dask``, the full key in args, an
error's text too); Dask's other phases (``transfer``, ``disk-read``) go on a lane of their own per
worker, as they run on its event loop, not on a task thread. Each task's inputs become **flows**
from the task that made them (wherever it ran) to the task's start: the edges the critical path
and the widget follow across the cluster. The engine's records inside tasks keep the engine's op
table too, its ids made unique in the merged trace (op ids, var ids and wait ids are per process),
so the waiting causes of each worker's custom ops are told apart as in a local profile; the
critical path follows threads and the task graph (an engine's walk cannot cross a task), and says so.

Built from columns, with one Python loop over the tasks only where a dict is needed (their args,
and keys that are some task's input): 1,000,000 tasks merge in about a second (see the Dask rows
of ``python -m benchmarks``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..trace import Trace
from ..trace.analysis.critical import APPROXIMATE_PATH
from ..trace.columns import FlowTable, SpanTable, StringTable
from ..trace.combine import Combiner, Lanes
from .clock import ClockEstimate
from .worker import Reply, TaskChunk

__all__ = ["DASK_CATEGORY", "RAN_AGAIN_KEYS", "WorkerRecords", "merge", "ran_again"]

DASK_CATEGORY = "dask"
DEPENDENCY = "dask dependency"
_I64 = np.int64


@dataclass
class WorkerRecords:
    """What the client has received from one worker (its replies, in order) and what it knows of it."""

    address: str
    name: str = ""
    pid: int = 0  # the worker's own OS pid
    chunks: list[TaskChunk] = field(default_factory=list)
    segments: list[Trace] = field(default_factory=list)
    sent: int = 0
    overflow: int = 0
    clock: ClockEstimate | None = None
    gone: str | None = None  # why it stopped answering (died, restarted), None while it answers
    engine_pending: bool = False  # its last reply said the engine held unsent records
    problems: list[str] = field(default_factory=list)

    def add(self, reply: Reply) -> None:
        self.name, self.pid = reply.name, reply.pid
        if len(reply.tasks):
            self.chunks.append(reply.tasks)
        if reply.engine is not None and reply.engine.n_spans:
            self.segments.append(reply.engine)
        self.sent, self.overflow, self.engine_pending = reply.sent, reply.overflow, reply.engine_pending
        self.problems.extend(reply.problems)

    @property
    def received(self) -> int:
        return sum(len(c) for c in self.chunks)

    @property
    def label(self) -> str:
        """What the timeline calls the worker's process: ``worker <name>`` (its address when unnamed)."""
        return f"worker {self.name}" if self.name and self.name != self.address else f"worker {self.address}"


def _task_table(pid: int, chunks: list[TaskChunk], shift: int, lanes: Lanes) -> tuple[SpanTable, list[str]]:
    """The spans of a worker's tasks (``chunks``: at least one, none empty), and their keys."""
    keys = [k for c in chunks for k in c.keys]
    tid = lanes.tids_of(pid, [t for c in chunks for t in c.threads])
    start = np.concatenate([c.start for c in chunks]) - shift
    end = np.concatenate([c.stop for c in chunks]) - shift
    args: list[dict[str, Any]] = [{"key": k} for k in keys]
    base = 0
    for c in chunks:
        for i, text in c.errors.items():
            args[base + i]["error"] = text
        base += len(c)
    return _dask_spans(start, end, tid, [p for c in chunks for p in c.prefixes], args), keys


def _phase_table(pid: int, chunks: list[TaskChunk], keys: list[str], shift: int, lanes: Lanes) -> SpanTable:
    actions = [a for c in chunks for a in c.phase_action]
    m = len(actions)
    if not m:
        return SpanTable.empty()
    base = np.cumsum([0] + [len(c) for c in chunks])[:-1]
    task = np.concatenate([c.phase_task + b for c, b in zip(chunks, base.tolist(), strict=True)])
    sources = [s for c in chunks for s in c.phase_source]
    # A lane per kind of phase ("dask transfer", "dask disk-read"): they overlap one another.
    tid = lanes.tids_of(pid, [f"dask {a}" for a in actions])
    args = [{"key": keys[t], "from": s} if s else {"key": keys[t]} for t, s in zip(task.tolist(), sources, strict=True)]
    start = np.concatenate([c.phase_start for c in chunks]) - shift
    return _dask_spans(start, np.concatenate([c.phase_stop for c in chunks]) - shift, tid, actions, args)


def _dask_spans(start: np.ndarray, end: np.ndarray, tid: np.ndarray, names: list[str], args: list[dict[str, Any]]) -> SpanTable:
    """Spans of category ``dask`` outside any custom op, each with its args (built as columns:
    ``SpanTable.from_rows`` would look in every args dict for custom-op fields)."""
    n = len(names)
    st = StringTable([DASK_CATEGORY])
    return SpanTable(
        strings=st.strings,
        start=start.astype(_I64),
        end=end.astype(_I64),
        tid=tid,
        name=st.codes(names),
        cat=np.zeros(n, np.int32),
        role=np.zeros(n, np.int8),
        inv=np.full(n, -1, _I64),
        op_type=np.full(n, -1, np.int32),
        backward=np.full(n, -1, np.int8),
        args_at=np.arange(n, dtype=_I64),
        args=args,
    )


def _owners(chunks: list[TaskChunk], first: int) -> np.ndarray:
    """For each entry of the chunks' ``deps`` in turn, the index of the task that used it (the
    chunks' tasks numbered from ``first``)."""
    out, base = [], first
    for c in chunks:
        out.append(np.repeat(np.arange(base, base + len(c), dtype=_I64), np.diff(c.dep_at)))
        base += len(c)
    return np.concatenate(out)


def _flows(keys: list[str], tid: np.ndarray, start: np.ndarray, end: np.ndarray, deps: list[str], owner: np.ndarray) -> FlowTable:
    """A flow from each task's input's task (its end) to the task (its start), where both were
    recorded: ``deps[j]`` is an input of task ``owner[j]``."""
    if not deps:
        return FlowTable.empty()
    wanted = set(deps)
    index = {k: i for i, k in enumerate(keys) if k in wanted}
    src, dst = [], []
    for dep, used_by in zip(deps, owner.tolist(), strict=True):
        made_by = index.get(dep)
        if made_by is not None:
            src.append(made_by)
            dst.append(used_by)
    if not src:
        return FlowTable.empty()
    s, d = np.array(src, dtype=_I64), np.array(dst, dtype=_I64)
    st = StringTable([DEPENDENCY, DASK_CATEGORY])
    m = len(s)
    return FlowTable(
        st.strings,
        np.arange(1, m + 1, dtype=_I64),
        np.zeros(m, np.int32),
        np.ones(m, np.int32),
        tid[s],
        end[s],
        tid[d],
        start[d],
    )


#: How many keys of tasks that ran more than once :func:`ran_again` names.
RAN_AGAIN_KEYS = 10


def ran_again(keys: list[str]) -> dict[str, Any] | None:
    """The tasks the cluster ran more than once, or None: Dask may run a task on two workers (work
    stealing races with the first worker's start: seen once in ~30,000 tasks here, two runs 4.6 ms
    apart on the two workers) or again after its worker died. Both runs really happened and both
    spans stay in the trace; ``metadata["dask"]["ran_again"]`` says how many runs were extra and
    names up to :data:`RAN_AGAIN_KEYS` keys, so counting spans is not mistaken for counting tasks.
    A set of the keys first: 1,000,000 keys in ~0.1 s, and the count only where there are repeats."""
    if len(set(keys)) == len(keys):
        return None
    counts = Counter(keys)
    return {
        "extra_runs": sum(n - 1 for n in counts.values()),
        "keys": [k for k, n in counts.items() if n > 1][:RAN_AGAIN_KEYS],
    }


def merge(client: Trace | None, workers: list[WorkerRecords], metadata: dict[str, Any] | None = None) -> Trace:
    """One trace of the client's own records (``client``, pid 0) and every worker's (see the module docstring)."""
    c = Combiner()
    processes: dict[int, str] = {}
    if client is not None:
        c.add(client, 0)
        processes[0] = "client"
    # Every worker's tasks in one numbering: an input may come from another worker.
    keys: list[str] = []
    tasks: list[SpanTable] = []
    deps: list[str] = []
    owners: list[np.ndarray] = []
    labels = [w.label for w in workers]
    for k, w in enumerate(workers):
        pid = k + 1
        # Two processes under one name (a worker restarted at its address) get its OS pid as well.
        processes[pid] = f"{w.label} (process {w.pid})" if labels.count(w.label) > 1 and w.pid else w.label
        shift = w.clock.offset_ns if w.clock is not None else 0
        if not w.chunks and not w.segments:
            c.lanes.tid(pid, "dask tasks")  # an empty lane, so the worker still shows
        if w.chunks:
            table, worker_keys = _task_table(pid, w.chunks, shift, c.lanes)
            owners.append(_owners(w.chunks, len(keys)))
            keys += worker_keys
            deps += [d for ch in w.chunks for d in ch.deps]
            tasks.append(table)
            c.add_spans(table)
            c.add_spans(_phase_table(pid, w.chunks, worker_keys, shift, c.lanes))
        for seg in w.segments:  # one engine, one id space: the worker's pid is their group
            c.add(seg, pid, shift_ns=shift)
    if tasks:
        tid, start, end = (np.concatenate([getattr(t, col) for t in tasks]) for col in ("tid", "start", "end"))
        c.add_flows(_flows(keys, tid, start, end, deps, np.concatenate(owners)))
    meta = dict(client.metadata) if client is not None else {}
    meta.update(metadata or {})
    again = ran_again(keys)
    if again is not None:
        meta["dask"] = {**(meta.get("dask") or {}), "ran_again": again}
    meta[APPROXIMATE_PATH] = (
        "a Dask cluster's trace: its tasks are no engine ops, so the path follows each thread and the task "
        "graph's dependency arrows (the engine's edges inside each worker still explain its custom ops' waiting)"
    )
    return c.build(processes, meta)
