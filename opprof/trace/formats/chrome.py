"""Trace <-> Chrome Trace Event JSON, the format Perfetto and chrome://tracing open.

Export writes, with timestamps in microseconds relative to the trace start (fractional, so
nanoseconds survive):

* ``M`` metadata: each process's name (and, for several, their order: by pid) and every thread's
  real name and sort order (small int tids, unique across processes);
* one ``X`` slice per span on its thread (a custom-op ``parent`` crosses threads, so it has none);
* per custom-op invocation, a nestable async track (``b``/``e`` sharing the invocation id) holding
  the parent and, properly nested inside it, its python span, waits, ``Dummy_Wait`` and every
  sub-op that fits without crossing a sibling (the rest stay on their thread, linked by a flow);
* flow events (``s``/``f``) from the push inside a custom op's Python to the sub-op's slice;
* for a profile with engine edges, what they tell a reader in Perfetto: each parent's waiting by
  cause in the ``args`` of its closing ``e`` event (Perfetto shows them on the slice), and the
  critical path as flow arrows of category ``critical_path`` where it moves between threads;
* where the GIL was sampled, the thread states (:mod:`..threadstates`): per thread one async track
  of category ``gil`` (``id2.local`` = the thread's tid, so each thread's track is its own in its
  process), a ``b``/``e`` slice per run named by its state (:data:`~..threadstates.STATE_LABELS`),
  a wait's ``args`` naming the thread that held the GIL (``holder``, ``holder_thread``).

Every event carries the pid of its thread's process (:attr:`~.records.ThreadInfo.pid`; counters,
which have no thread, pid 0), so Perfetto groups a trace of several processes by process. A trace
of one process writes pid 0 throughout, as files always had.

``load`` reads such a file back losslessly (the thread states too: ``otherData.opprof`` says their
sampling period) but for the engine's edges (:mod:`.ops`), which Chrome JSON has no place for, and
what is derived from them (the causes, the path's arrows: dropped, made again from the trace).
``otherData.opprof`` carries what Chrome has no field for. Every other Chrome trace (MXNet,
PyTorch, VizTracer, Chrome itself) goes to :mod:`.importer`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ..analysis import analysis_of
from ..analysis.causes import has_edges
from ..columns import ROLE_CODE, FlowTable, SpanTable
from ..data import TraceData
from ..memory import MEMORY_CATEGORY, MEMORY_COUNTER
from ..records import CUSTOM_OP, CounterSample, Instant, Role, ThreadInfo
from ..threadstates import GIL_CATEGORY, STATE_LABELS, STATE_OF_LABEL, ThreadStates
from . import chrome_fast
from .importer import NS_LIMIT, SourceThread, import_chrome
from .jsonio import TraceFormatError, TraceSaveError, dumps, loads, no_gc, open_maybe_gzip, parse_json, read_trace_file

__all__ = ["from_chrome", "load", "save", "to_chrome"]

#: The pid of a trace of one process, and of counters (which belong to no thread).
PID = 0


def _us(ns: int, t0: int) -> float:
    return (ns - t0) / 1e3


def _async_children(members: list[int], starts: list[int], ends: list[int], p_start: int, p_end: int) -> list[int]:
    """The children (sorted by start, longer first) that nest properly inside their parent on one track."""
    kept: list[int] = []
    stack: list[tuple[int, int]] = [(p_start, p_end)]
    for i in members:
        a, b = starts[i], ends[i]
        while len(stack) > 1 and stack[-1][1] <= a:
            stack.pop()
        if a >= stack[-1][0] and b <= stack[-1][1]:
            kept.append(i)
            stack.append((a, b))
    return kept


def to_chrome(trace: TraceData) -> dict[str, Any]:
    """The Chrome Trace Event JSON object for ``trace``."""
    with no_gc():  # millions of small acyclic dicts: collections would only walk them
        t0 = _origin(trace)
        events = [ev for chunk in _event_chunks(trace, t0) for ev in chunk]
        return {"traceEvents": events, "otherData": _other_data(trace, t0)}


#: Events per chunk when saving: each chunk is serialised and freed before the next is built, so a
#: 1M-span save never holds its ~2.5M event dicts (about 1 GB) at once, and reuses warm memory.
CHUNK = 50_000


def _origin(trace: TraceData) -> int:
    """The earliest time in the trace: Chrome JSON's timestamps are µs after it. Raises
    :class:`TraceSaveError` for a trace whose times lie 146 years or more apart, which :func:`load` could not read back."""
    t0 = _first(trace)
    t, f = trace.table, trace.flow_table
    lasts = [int(t.end.max()) if len(t) else t0]
    if len(f):
        lasts.append(int(f.dst_ts.max()))
    states = trace.thread_states
    if states is not None and len(states):
        lasts.append(int(states.end.max()))
    if trace.memory is not None and len(trace.memory):
        lasts.append(int(trace.memory.ts.max()))
    last = max([*lasts, *(i.ts for i in trace.instants), *(c.ts for c in trace.counters)])
    if last - t0 >= NS_LIMIT:
        raise TraceSaveError(
            f"the trace's times lie {(last - t0) / 3.156e16:,.0f} years apart: Chrome JSON's µs timestamps "
            "cannot hold that (146 years at most); save it as .opprof"
        )
    return t0


def _first(trace: TraceData) -> int:
    t, f = trace.table, trace.flow_table
    firsts = [int(t.start.min()) if len(t) else 0]
    if len(f):
        firsts.append(int(f.src_ts.min()))
    states = trace.thread_states
    if states is not None and len(states):  # the sampler starts with the profile, before its first span
        firsts.append(int(states.start.min()))
    if trace.memory is not None and len(trace.memory):
        firsts.append(int(trace.memory.ts.min()))
    return min([*firsts, *(i.ts for i in trace.instants), *(c.ts for c in trace.counters)])


def _other_data(trace: TraceData, t0: int) -> dict[str, Any]:
    # Flows are not repeated here: their s/f events hold every field (files before 2026-11-30 did).
    ours: dict[str, Any] = {"t0_ns": t0, "metadata": trace.metadata}
    if trace.thread_states is not None:  # the runs are events (category GIL); this says there are states at all
        ours[STATES_KEY] = {"period_ns": trace.thread_states.period_ns}
    return {"opprof": ours}


#: The async tracks of the thread states (one per thread), and the key in ``otherData.opprof``
#: that says the trace has them (``{"period_ns": …}``).
GIL = GIL_CATEGORY
STATES_KEY = "thread_states"


class _Columns:
    """The span columns export reads, as Python lists (one ``tolist`` each beats indexing arrays)."""

    def __init__(self, t: SpanTable, t0: int, pids: np.ndarray) -> None:
        self.names = t.str_list(t.name)
        self.cats = t.str_list(t.cat)
        self.tids = t.tid.tolist()
        self.pids = pids.tolist()  # each span's thread's process
        self.starts = t.start.tolist()
        self.ends = t.end.tolist()
        # Times in µs from the origin, computed in NumPy: the same IEEE operations as
        # ``(start - t0) / 1e3`` in Python (an exact int64 difference, then a float division).
        self.ts = ((t.start - t0) / 1e3).tolist()
        self.te = ((t.end - t0) / 1e3).tolist()
        self.dur = ((t.end - t.start) / 1e3).tolist()
        self.args = t.all_args()
        self.is_parent = (t.role == ROLE_CODE[Role.PARENT]).tolist()
        self.t = t


def _event_chunks(trace: TraceData, t0: int) -> Iterator[list[dict[str, Any]]]:
    """The trace's events, in lists of at most about ``CHUNK``: names, slices, custom-op tracks, flows, the rest.

    Each part is one loop that reads fields directly (no properties, no helper call per event):
    a profile of 1M spans is about 2.5M events.
    """
    t = trace.table
    c = _Columns(t, t0, trace.pids_of(t.tid))
    yield from _slice_chunks(trace, c, t0)
    yield from _track_chunks(c, t0, _why_args(trace))
    yield from _flow_chunks(trace, t0)
    yield from _state_chunks(trace, t0)
    yield _path_flows(trace, t0)
    yield _point_events(trace, t0)


#: The flow category of the critical path's arrows: derived from the edges, so a reader drops them.
CRITICAL_PATH = "critical_path"


def _why_args(trace: TraceData) -> dict[int, dict[str, Any]]:
    """Each parent's waiting by cause (µs), for the ``why`` args of its closing event, where the
    trace has edges: for people reading the file in Perfetto. They are derived from the edges,
    which Chrome JSON cannot hold, so a reader does not take them back (save ``.opprof`` for that)."""
    t = trace.table
    if not has_edges(t, trace.ops):
        return {}
    a = analysis_of(trace)
    c = a.causes
    out: dict[int, dict[str, Any]] = {}
    rows = zip(c.parents.tolist(), c.ns.tolist(), c.cpu.tolist(), a.callers.tolist(), strict=True)
    for p, row, cpu, caller in rows:
        why: dict[str, Any] = {f"{k}_us": v / 1e3 for k, v in zip(c.keys, row, strict=True)}
        if cpu >= 0:
            why["python_cpu_us"] = cpu / 1e3
        if caller >= 0:  # called inside that invocation's Python (the push's flow arrow shows where)
            why["called_by_invocation"] = caller
        out[p] = why
    return out


def _path_flows(trace: TraceData, t0: int) -> list[dict[str, Any]]:
    """The critical path as arrows (category :data:`CRITICAL_PATH`) where it moves between threads:
    from the middle of one piece that runs on a span to the start of the next one on another thread
    (both inside their slices, where Perfetto binds a flow)."""
    if not has_edges(trace.table, trace.ops):
        return []
    p = analysis_of(trace).critical_path
    t = trace.table
    on = np.flatnonzero(p.on_threads())
    on = on[p.seg_end[on] > p.seg_start[on]]
    tid = t.tid[p.seg_span[on]]
    hop = np.flatnonzero(tid[1:] != tid[:-1])
    src, dst = on[hop], on[hop + 1]
    fid = int(trace.flow_table.id.max()) + 1 if trace.n_flows else 1
    events: list[dict[str, Any]] = []
    # A piece can reach outside the span it is charged to (the GIL an op waited for before its span
    # began: 30 of 623 pieces in a recording of the Perfetto check's workload): each end is kept
    # inside its slice, where Perfetto binds it (else "flow_no_enclosing_slice").
    mids = (_inside(t, p.seg_span[src], (p.seg_start[src] + p.seg_end[src]) // 2) - t0) / 1e3
    starts = (_inside(t, p.seg_span[dst], p.seg_start[dst]) - t0) / 1e3
    ends = (tid[hop].tolist(), trace.pids_of(tid[hop]).tolist(), tid[hop + 1].tolist(), trace.pids_of(tid[hop + 1]).tolist())
    for k, (ts_s, ts_f, a, pa, b, pb) in enumerate(zip(mids.tolist(), starts.tolist(), *ends, strict=True)):
        arrow = {"name": "critical path", "cat": CRITICAL_PATH, "id": fid + k}
        events.append({**arrow, "ph": "s", "pid": pa, "tid": a, "ts": ts_s})
        events.append({**arrow, "ph": "f", "bp": "e", "pid": pb, "tid": b, "ts": ts_f})
    return events


def _inside(t: Any, span: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """``ts`` moved into the slice of each ``span``, its last ns at most (a flow binds to the slice
    that encloses it)."""
    return np.clip(ts, t.start[span], np.maximum(t.start[span], t.end[span] - 1))


def _without_path_flows(trace: TraceData) -> TraceData:
    """A read trace without the critical path's arrows: derived data, made again from the trace."""
    f = trace.flow_table
    codes = [i for i, s in enumerate(f.strings) if s == CRITICAL_PATH]
    if codes and len(f):
        drop = np.isin(f.cat, codes)
        if drop.any():
            trace.flows = f.take(np.flatnonzero(~drop))
    return trace


def _slice_chunks(trace: TraceData, c: _Columns, t0: int) -> Iterator[list[dict[str, Any]]]:
    """Metadata, then one ``X`` slice per span on its thread (a custom-op parent has its own track)."""
    events = _process_events(trace)
    for i, th in enumerate(trace.threads):
        events.append({"ph": "M", "name": "thread_name", "pid": th.pid, "tid": th.tid, "args": {"name": th.name}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": th.pid, "tid": th.tid, "args": {"sort_index": i}})
    append = events.append
    cols = (c.names, c.cats, c.pids, c.tids, c.ts, c.dur, c.args, c.is_parent)
    for name, cat, pid, tid, ts, dur, args, parent in zip(*cols, strict=True):
        if parent:
            continue
        ev = {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
        if args:
            ev["args"] = args
        append(ev)
        if len(events) >= CHUNK:
            yield events
            events = []
            append = events.append
    yield events


def _process_events(trace: TraceData) -> list[dict[str, Any]]:
    """A ``process_name`` per process the events use (pid 0 too when counters sit there), and for
    several a ``process_sort_index`` putting them in pid order; a trace of one process gets the one
    ``process_name`` it always had."""
    pids = trace.process_ids()
    if trace.counters and PID not in pids:
        pids = [PID, *pids]
    events = [{"ph": "M", "name": "process_name", "pid": p, "tid": 0, "args": {"name": trace.process_name(p)}} for p in pids]
    if len(pids) > 1:
        events += [
            {"ph": "M", "name": "process_sort_index", "pid": p, "tid": 0, "args": {"sort_index": k}} for k, p in enumerate(pids)
        ]
    return events


def _families(t: SpanTable) -> list[tuple[int, list[int]]]:
    """(parent, its other members sorted by start, longer first) per invocation that has a parent,
    in the order each invocation first appears in the trace."""
    members = np.flatnonzero(t.inv >= 0)
    if not len(members):
        return []
    invs, first, group = np.unique(t.inv[members], return_index=True, return_inverse=True)
    group = group.ravel()
    is_p = t.role[members] == ROLE_CODE[Role.PARENT]
    parent_of = np.full(len(invs), -1, dtype=np.int64)
    pm, pg = members[is_p], group[is_p]
    parent_of[pg[::-1]] = pm[::-1]  # the first parent of each invocation wins
    # Members by group, each group by (start, -end), then by position (lexsort is stable).
    order = np.lexsort((-t.end[members], t.start[members], group))
    sm, sg = members[order], group[order]
    bounds = np.searchsorted(sg, np.arange(len(invs) + 1))
    sm_list = sm.tolist()
    out = []
    for g in np.argsort(first, kind="stable").tolist():
        p = int(parent_of[g])
        if p < 0:
            continue
        out.append((p, [i for i in sm_list[bounds[g] : bounds[g + 1]] if i != p]))
    return out


def _track_chunks(c: _Columns, t0: int, why: dict[int, dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """One nestable async track per invocation: its parent, and the children that nest inside it."""
    events: list[dict[str, Any]] = []
    append = events.append
    names, starts, ends, tids, pids, all_args, ts, te = c.names, c.starts, c.ends, c.tids, c.pids, c.args, c.ts, c.te
    invs = c.t.inv.tolist()
    for p, family in _families(c.t):
        inv = invs[p]
        tid = tids[p]
        pid = pids[p]
        name = names[p]
        ps, pe = starts[p], ends[p]
        append(
            {
                "name": name,
                "cat": CUSTOM_OP,
                "id": inv,
                "pid": pid,
                "tid": tid,
                "ph": "b",
                "ts": ts[p],
                "args": all_args[p],
            }
        )
        end = {"name": name, "cat": CUSTOM_OP, "id": inv, "pid": pid, "tid": tid, "ph": "e", "ts": te[p]}
        if p in why:  # on the closing event: Perfetto shows it with the slice; opprof's readers skip it
            end["args"] = {"why": why[p]}
        append(end)
        # The children carry no args here: their slices on their threads have them (a quarter of
        # a profile's file was these copies).
        for i in _async_children(family, starts, ends, ps, pe):
            name = names[i]
            append({"name": name, "cat": CUSTOM_OP, "id": inv, "pid": pid, "tid": tid, "ph": "b", "ts": ts[i]})
            append({"name": name, "cat": CUSTOM_OP, "id": inv, "pid": pid, "tid": tid, "ph": "e", "ts": te[i]})
        if len(events) >= CHUNK:
            yield events
            events = []
            append = events.append
    yield events


def _flow_chunks(trace: TraceData, t0: int) -> Iterator[list[dict[str, Any]]]:
    """Flow arrows: an ``s`` at the push, an ``f`` at the start of the op it pushed."""
    f = trace.flow_table
    events: list[dict[str, Any]] = []
    append = events.append
    names = [f.strings[k] for k in f.name.tolist()]
    cats = [f.strings[k] for k in f.cat.tolist()]
    src_us, dst_us = ((f.src_ts - t0) / 1e3).tolist(), ((f.dst_ts - t0) / 1e3).tolist()
    src_pid, dst_pid = trace.pids_of(f.src_tid).tolist(), trace.pids_of(f.dst_tid).tolist()
    cols = (f.id.tolist(), names, cats, src_pid, f.src_tid.tolist(), src_us, dst_pid, f.dst_tid.tolist(), dst_us)
    for fid, name, cat, s_pid, src_tid, src_ts, d_pid, dst_tid, dst_ts in zip(*cols, strict=True):
        append({"name": name, "cat": cat, "id": fid, "pid": s_pid, "ph": "s", "tid": src_tid, "ts": src_ts})
        append({"name": name, "cat": cat, "id": fid, "pid": d_pid, "ph": "f", "bp": "e", "tid": dst_tid, "ts": dst_ts})
        if len(events) >= CHUNK:
            yield events
            events = []
            append = events.append
    yield events


def _state_chunks(trace: TraceData, t0: int) -> Iterator[list[dict[str, Any]]]:
    """The thread states: a ``b``/``e`` pair per run on its thread's ``gil`` track (runs of a thread
    never overlap, so the track's slices never cross); a run with a holder names it in its args."""
    ts = trace.thread_states
    if ts is None or not len(ts):
        return
    names = trace.thread_names()
    labels = {int(s): label for s, label in STATE_LABELS.items()}
    state_names = [labels.get(k, str(k)) for k in ts.state.tolist()]
    cols = (
        ts.tid.tolist(),
        trace.pids_of(ts.tid).tolist(),
        state_names,
        ((ts.start - t0) / 1e3).tolist(),
        ((ts.end - t0) / 1e3).tolist(),
        ts.holder.tolist(),
    )
    events: list[dict[str, Any]] = []
    append = events.append
    for tid, pid, name, a, b, holder in zip(*cols, strict=True):
        track = {"local": tid}
        begin = {"name": name, "cat": GIL, "id2": track, "pid": pid, "tid": tid, "ph": "b", "ts": a}
        if holder >= 0:
            begin["args"] = {"holder": holder, "holder_thread": names.get(holder, f"thread {holder}")}
        append(begin)
        append({"name": name, "cat": GIL, "id2": track, "pid": pid, "tid": tid, "ph": "e", "ts": b})
        if len(events) >= CHUNK:
            yield events
            events = []
            append = events.append
    yield events


def _states_of(ours: Any, runs: tuple[np.ndarray, ...] | None) -> ThreadStates | None:
    """The thread states read back: the runs (tid, state, start, end, holder) where the file says it
    has states (``otherData.opprof``'s :data:`STATES_KEY`), else None."""
    meta = ours.get(STATES_KEY) if isinstance(ours, dict) else None
    if not isinstance(meta, dict):
        return None
    period = int(meta.get("period_ns", 0))
    if runs is None or not len(runs[0]):
        return ThreadStates.empty(period)
    tid, state, start, end, holder = runs
    return ThreadStates(tid, state, start, end, holder, period)


def _point_events(trace: TraceData, t0: int) -> list[dict[str, Any]]:
    """Instants and counter samples."""
    events: list[dict[str, Any]] = []
    pids = trace.pids_of(np.array([inst.tid for inst in trace.instants], dtype=np.int64)).tolist()
    for inst, pid in zip(trace.instants, pids, strict=True):
        ev = {"ph": "i", "s": "t", "name": inst.name, "cat": inst.cat, "pid": pid, "tid": inst.tid, "ts": _us(inst.ts, t0)}
        if inst.args:
            ev["args"] = inst.args
        events.append(ev)
    for c in trace.counters:
        events.append({"ph": "C", "name": c.name, "pid": PID, "tid": 0, "ts": _us(c.ts, t0), "args": c.values})
    # Live bytes as MXNet's profile_memory writes them: a counter of category "Device Storage",
    # one event per change (Perfetto draws it as a counter track; opprof reads it back as one).
    m = analysis_of(trace).memory if trace.memory is not None else None
    if m is not None:  # each process's counter in that process (a merged trace's workers too)
        for ts, live, pid in zip(m.ts.tolist(), m.live.tolist(), m.pid.tolist(), strict=True):
            events.append(
                {"ph": "C", "name": MEMORY_COUNTER, "cat": MEMORY_CATEGORY, "pid": pid, "tid": 0, "ts": _us(ts, t0),
                 "args": {MEMORY_COUNTER: live}}
            )  # fmt: skip
    return events


#: How a saved file starts. Its events come in chunks, one chunk per line: JSON never has a raw
#: newline inside a string, so every newline in the file separates two chunks and :func:`load` can
#: parse one chunk at a time (peak memory of one chunk, not of the whole file's parsed objects).
_CHUNKED_HEAD = b'{"traceEvents":[\n'
_CHUNKED_TAIL = b'],"otherData":'


def save(trace: TraceData, path: str | os.PathLike[str]) -> None:
    """Write ``trace`` as Chrome trace JSON; gzipped when ``path`` ends in ``.gz``.

    The same JSON as ``dumps(to_chrome(trace))`` but for newlines between chunks of events,
    written chunk by chunk.
    """
    with no_gc(), open_maybe_gzip(path, "wb") as f:
        t0 = _origin(trace)
        f.write(_CHUNKED_HEAD)
        sep = b""
        for chunk in _event_chunks(trace, t0):
            if chunk:
                data = dumps(chunk)
                f.write(sep)
                f.write(memoryview(data)[1:-1])  # the chunk's items, without its brackets
                sep = b",\n"
            del chunk
        f.write(b"\n" + _CHUNKED_TAIL)
        f.write(dumps(_other_data(trace, t0)))
        f.write(b"}")


def load(path: str | os.PathLike[str]) -> TraceData:
    """Read a Chrome trace JSON file (``.json`` or ``.json.gz``): opprof's own losslessly (but for the edges), any other
    tool's through :mod:`.importer`."""
    box = [read_trace_file(path)]  # handed over, not held here: the parse frees the bytes early
    try:
        return _load_raw(box, path)
    except TraceFormatError:
        raise
    except _DATA_ERRORS as e:  # a shape no reader foresaw: still the file's fault, said as such
        raise TraceFormatError(f"{path}: malformed trace: {type(e).__name__}: {_short(e)}") from None
    except MemoryError:
        raise TraceFormatError(f"{path}: too large to load here (out of memory)") from None


#: What malformed data raises from deep inside a reader (a list where a dict was, a huge number,
#: nesting too deep): a load turns it into :class:`TraceFormatError` naming the file.
_DATA_ERRORS = (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError, RecursionError, ZeroDivisionError)


def _short(e: BaseException) -> str:
    msg = str(e)
    return msg if len(msg) <= 200 else msg[:200] + "…"


def _load_raw(box: list[bytes], path: str | os.PathLike[str]) -> TraceData:
    raw = box.pop()
    with no_gc():
        if raw.startswith(_CHUNKED_HEAD):
            trace = _load_chunked(raw, str(path))
            if trace is not None:
                return _without_path_flows(trace)
        obj, truncated = parse_json(raw, str(path))
        del raw
        if not _is_ours(obj):
            return import_chrome(obj, str(path), truncated=truncated)
        try:
            return _without_path_flows(_from_ours_obj(obj))
        except TraceFormatError as e:
            raise TraceFormatError(f"{path}: {e}") from None


def _load_chunked(raw: bytes, path: str) -> TraceData | None:
    """Read a file :func:`save` wrote, a chunk (line) at a time; None if it is not laid out so."""
    last = raw.rfind(b"\n")
    tail = raw[last + 1 :].rstrip()
    if not tail.startswith(_CHUNKED_TAIL):
        return None  # cut short, or edited: the whole-file parser says what is wrong
    try:
        other = loads(b"{" + tail[2:])["otherData"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(other, dict) or "opprof" not in other:
        return None

    def lines() -> Iterator[tuple[int, bytes]]:
        start = len(_CHUNKED_HEAD)
        while start < last:
            end = raw.find(b"\n", start, last)
            end = last if end < 0 else end
            line = raw[start:end].rstrip().rstrip(b",")
            start = end + 1
            if line:
                yield start, line

    ours = other.get("opprof")
    if not (isinstance(ours, dict) and "flows" in ours):  # files before 2026-11-30 kept flows apart
        try:
            reader = _OwnEventReader(int(ours["t0_ns"]) if ours else 0)

            def point(ev: dict[str, Any]) -> None:
                try:
                    reader.read(ev, -1)
                except (TraceFormatError, ValueError, KeyError, TypeError, AttributeError, OverflowError):
                    raise chrome_fast.NotFast from None  # the careful reader names the event

            spans, flows, reader.run_columns = chrome_fast.read_lines((line for _, line in lines()), reader.t0, point)
            return reader.assemble(spans, flows, ours)
        except chrome_fast.NotFast:
            pass  # the careful reader below reads it, and names what is wrong if anything is
        except (KeyError, TypeError, ValueError, OverflowError):
            pass

    def chunks() -> Iterator[list[Any]]:
        for start, line in lines():
            try:
                yield loads(b"[" + line + b"]")
            except ValueError as e:
                raise TraceFormatError(f"not valid JSON at byte {start}: {e}") from None

    try:
        return _from_ours(chunks(), other)
    except TraceFormatError as e:
        raise TraceFormatError(f"{path}: {e}") from None


def _is_ours(obj: Any) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("otherData"), dict) and "opprof" in obj["otherData"]


_US_LIMIT = NS_LIMIT / 1e3 / 2  # µs: a start and a duration each within it keep the end in range


def _ns(value: Any, t0: int, i: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TraceFormatError(f"event {i}: timestamp {value!r} is not a number")
    if not -NS_LIMIT < value * 1e3 < NS_LIMIT:
        raise TraceFormatError(f"event {i}: timestamp {value!r} is out of range (more than 146 years from the origin)")
    return t0 + round(value * 1e3)


def from_chrome(obj: Any) -> TraceData:
    """The records of a Chrome trace object (dict with ``traceEvents``, or a list)."""
    with no_gc():
        if not _is_ours(obj):
            return import_chrome(obj)
        return _without_path_flows(_from_ours_obj(obj))


def _from_ours_obj(obj: Any) -> TraceData:
    events = obj.get("traceEvents")
    if not isinstance(events, list):
        raise TraceFormatError("expected a JSON list of events or an object with a 'traceEvents' list")
    return _from_ours([events], obj["otherData"])


class _BadEvent(Exception):
    """A field of event ``index`` that the careful reader could not read (``error``), on its way to
    :func:`_from_ours`, which names the event in the :class:`TraceFormatError` it raises."""

    def __init__(self, index: int, error: ValueError | KeyError | TypeError | AttributeError) -> None:
        super().__init__(index, error)
        self.index = index
        self.error = error


def _malformed(where: str, e: Exception) -> TraceFormatError:
    return TraceFormatError(f"{where}: malformed field: {type(e).__name__}: {e}")


def _from_ours(event_chunks: Iterable[list[Any]], other: dict[str, Any]) -> TraceData:
    try:
        return _from_chrome(event_chunks, other)
    except TraceFormatError:
        raise
    except OverflowError:
        raise TraceFormatError("a timestamp or id is out of range (times must lie within 146 years of the origin)") from None
    except _BadEvent as e:
        raise _malformed(f"event {e.index}", e.error) from None
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise _malformed("trace header", e) from None


def _from_chrome(event_chunks: Iterable[list[Any]], other: dict[str, Any]) -> TraceData:
    ours = other.get("opprof")
    reader = _OwnEventReader(int(ours["t0_ns"]) if ours else 0)
    t0, read = reader.t0, reader.read
    add_name, add_cat, add_tid = reader.names.append, reader.cats.append, reader.tids.append
    add_start, add_end, add_args = reader.starts.append, reader.ends.append, reader.args.append
    i = -1
    for events in event_chunks:
        for ev in events:
            i += 1
            # The bulk of a file: a well-formed X slice, read inline into the columns. Anything
            # else (or anything odd about it) takes the careful path, which names the event when
            # it is wrong.
            if type(ev) is dict and ev.get("ph") == "X":
                ts: Any = ev.get("ts")
                dur: Any = ev.get("dur", 0)
                tt, td = type(ts), type(dur)
                if (
                    (tt is float or tt is int)
                    and (td is float or td is int)
                    and 0 <= dur < _US_LIMIT
                    and -_US_LIMIT < ts < _US_LIMIT
                ):
                    start = t0 + round(ts * 1e3)
                    add_start(start)
                    add_end(start + round(dur * 1e3))
                    name, cat = ev.get("name", ""), ev.get("cat", "")
                    add_name(name if type(name) is str else str(name))
                    add_cat(cat if type(cat) is str else str(cat))
                    add_tid(ev.get("tid", 0))
                    add_args(ev.get("args"))
                    continue
            try:
                read(ev, i)
            except TraceFormatError:
                raise
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise _BadEvent(i, e) from e
        del events
    return reader.trace(ours)


class _OwnEventReader:
    """What reading opprof's own Chrome events gathers, event by event, until the trace is built.

    Spans gather as one list per column, so the trace is built as columns without ever holding
    a :class:`~.records.Span` per span.
    """

    def __init__(self, t0: int) -> None:
        self.t0 = t0
        self.thread_names: dict[int, str] = {}
        self.order: dict[int, int] = {}
        self.thread_pids: dict[int, int] = {}  # tid -> pid, from its thread_name event
        self.process_names: dict[int, str] = {}
        self.names: list[str] = []
        self.cats: list[str] = []
        self.tids: list[int] = []
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.args: list[dict[str, Any] | None] = []
        self.parents: dict[int, tuple[str, int, int, int, dict[str, Any]]] = {}
        self.instants: list[Instant] = []
        self.counters: list[CounterSample] = []
        # custom-op async tracks: open ``b`` events per (tid, invocation id), matched by ``e``
        self.open_b: dict[tuple[int, Any], list[dict[str, Any]]] = {}
        self.flows: list[tuple[Any, str, str, int, int, int, int]] = []
        self.open_flows: dict[Any, list[dict[str, Any]]] = {}  # ``s`` events waiting for their ``f``
        # thread states: open ``b`` events of the ``gil`` tracks per tid, and the runs they closed
        self.open_states: dict[int, list[dict[str, Any]]] = {}
        self.runs: list[tuple[int, int, int, int, int]] = []  # (tid, state, start, end, holder)
        #: the fast reader's runs as columns (tid, state, start, end, holder), when it read the file
        self.run_columns: tuple[np.ndarray, ...] | None = None

    def span(self, name: str, cat: str, tid: int, start: int, end: int, args: dict[str, Any] | None) -> None:
        self.names.append(name)
        self.cats.append(cat)
        self.tids.append(tid)
        self.starts.append(start)
        self.ends.append(end)
        self.args.append(args)

    def read(self, ev: Any, i: int) -> None:
        """Take event number ``i``; raise :class:`TraceFormatError` naming it when it is wrong."""
        if not isinstance(ev, dict):
            raise TraceFormatError(f"event {i}: expected an object, got {type(ev).__name__}")
        t0 = self.t0
        ph = ev.get("ph")
        tid = ev.get("tid", 0)
        if ph == "M":
            if ev.get("name") == "thread_name":
                self.thread_names[tid] = str((ev.get("args") or {}).get("name", ""))
                self.thread_pids[tid] = _pid(ev.get("pid", 0))
            elif ev.get("name") == "process_name":
                self.process_names[_pid(ev.get("pid", 0))] = str((ev.get("args") or {}).get("name", ""))
            elif ev.get("name") == "thread_sort_index":
                self.order[tid] = int((ev.get("args") or {}).get("sort_index", 0))
        elif ph == "X":
            start = _ns(ev.get("ts"), t0, i)
            dur = ev.get("dur", 0)
            if isinstance(dur, float) and not -_US_LIMIT < dur < _US_LIMIT:  # nan, inf, or past the range: round() raises
                raise TraceFormatError(f"event {i}: duration {dur!r} is out of range")
            end = start + round(dur * 1e3) if isinstance(dur, (int, float)) else start
            if end < start:
                raise TraceFormatError(f"event {i}: negative duration {dur!r}")
            if end - start >= NS_LIMIT:
                raise TraceFormatError(f"event {i}: duration {dur!r} is out of range")
            self.span(str(ev.get("name", "")), str(ev.get("cat", "")), tid, start, end, ev.get("args") or None)
        elif ph == "b" and ev.get("cat") == CUSTOM_OP:
            self.open_b.setdefault((tid, ev.get("id")), []).append(ev)
        elif ph == "e" and ev.get("cat") == CUSTOM_OP:
            stack = self.open_b.get((tid, ev.get("id")))
            if stack:
                b = stack.pop()
                args = b.get("args") or {}
                if args.get("role") == Role.PARENT:
                    start, end = _ns(b.get("ts"), t0, i), _ns(ev.get("ts"), t0, i)
                    self.parents[args["invocation"]] = (str(b.get("name", "")), tid, start, end, dict(args))
        elif ph == "b" and ev.get("cat") == GIL:
            self.open_states.setdefault(tid, []).append(ev)
        elif ph == "e" and ev.get("cat") == GIL:
            stack = self.open_states.get(tid)
            if stack:
                b = stack.pop()
                name = b.get("name")
                if name not in STATE_OF_LABEL:
                    raise TraceFormatError(f"event {i}: unknown thread state {name!r} on a {GIL!r} track")
                holder = (b.get("args") or {}).get("holder", -1)
                if type(holder) is not int:
                    raise TraceFormatError(f"event {i}: the GIL's holder {holder!r} is not a thread id")
                run = (tid, STATE_OF_LABEL[name], _ns(b.get("ts"), t0, i), _ns(ev.get("ts"), t0, i), holder)
                self.runs.append(run)
        elif ph == "s":
            self.open_flows.setdefault(ev.get("id"), []).append(ev)
        elif ph == "f":
            starts = self.open_flows.get(ev.get("id"))
            if starts:
                src = starts.pop()
                src_ts, dst_ts = _ns(src.get("ts"), t0, i), _ns(ev.get("ts"), t0, i)
                name, cat = str(src.get("name", "")), str(src.get("cat", ""))
                self.flows.append((src.get("id"), name, cat, src.get("tid", 0), src_ts, tid, dst_ts))
        elif ph in ("i", "I"):
            name, cat = str(ev.get("name", "")), str(ev.get("cat", ""))
            self.instants.append(Instant(name, cat, tid, _ns(ev.get("ts"), t0, i), ev.get("args")))
        elif ph == "C":
            self.counters.append(CounterSample(str(ev.get("name", "")), _ns(ev.get("ts"), t0, i), dict(ev.get("args") or {})))

    def trace(self, ours: Any) -> TraceData:
        for name, tid, start, end, args in self.parents.values():
            self.span(name, CUSTOM_OP, tid, start, end, args)
        table = SpanTable.from_rows(self.names, self.cats, self.tids, self.starts, self.ends, self.args).sorted_by_start()
        rows = [tuple(f) for f in ours["flows"]] if ours and "flows" in ours else self.flows
        flows = FlowTable.from_rows(*(list(col) for col in zip(*rows, strict=True))) if rows else FlowTable.empty()
        return self.assemble(table, flows, ours)

    def assemble(self, table: SpanTable, flows: FlowTable, ours: Any) -> TraceData:
        """The trace of what was read: threads in the file's sort order, each in its process, and the
        processes' names and the metadata given back."""
        names, order = self.thread_names, self.order
        tids = sorted({*names, *np.unique(table.tid).tolist()}, key=lambda t: (order.get(t, 1 << 30), t))
        meta = dict(ours.get("metadata", {})) if ours else {"producer": "chrome-json"}
        pids = self.thread_pids
        if not any(pids.values()) and not any(self.process_names.keys() - {PID}):
            # One process in the events: a file from before they carried pids, whose imported trace
            # kept each thread's process (small int) in its metadata only. Give it back.
            rows = (SourceThread.from_row(row) for row in meta.get("source_threads", ()))
            pids = {row.tid: row.pid for row in rows if row is not None}
        threads = [ThreadInfo(t, names.get(t) or f"thread {t}", pids.get(t, 0)) for t in tids]
        trace = TraceData(
            threads=threads, spans=table, instants=self.instants, counters=self.counters, flows=flows, metadata=meta
        )
        # A name the writer gave a process only for want of one (pid 0's "opprof", "process 3") is
        # not kept: a trace of one process reads back with no process names, as it was written.
        trace.processes = {p: n for p, n in sorted(self.process_names.items()) if n != trace.process_name(p)}
        runs = self.run_columns
        if runs is None and self.runs:
            runs = tuple(np.array(c, dtype=np.int64) for c in zip(*self.runs, strict=True))
        trace.thread_states = _states_of(ours, runs)
        return trace


def _pid(value: Any) -> int:
    """A process id of opprof's own file: a small int (a file that holds anything else is not ours)."""
    if type(value) is not int:
        raise ValueError(f"pid {value!r} is not an integer")
    return value
