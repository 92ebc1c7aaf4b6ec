"""Read Chrome Trace Event JSON written by other tools (MXNet, PyTorch, VizTracer, Chrome, ...).

:func:`opprof.trace.formats.chrome.load` and :func:`~opprof.trace.formats.chrome.from_chrome` (under
:func:`opprof.trace.load` and :func:`opprof.trace.from_chrome`) hand every file that is not one of
opprof's own to :func:`import_chrome`. What it understands, by phase (``ph``):

* ``X`` complete slices; ``B``/``E`` pairs, matched with a stack per thread in time order (an ``E``
  closes the innermost open ``B``, as Chrome and Perfetto do);
* ``b``/``n``/``e`` nestable async and legacy ``S``/``T``/``F`` async slices, matched per
  (scope, category, id) with ``id`` or ``id2``; a track whose id equals its thread id is drawn on
  that thread, the others are packed into a few "async" lanes per process (opprof's own ``gil``
  tracks, in a file of ours stripped of its ``otherData``, become the thread states instead);
* ``s``/``t``/``f`` flows, chained per (category, id), one :class:`~opprof.trace.Flow` per hop;
* ``i``/``I``/``R`` instants, ``C`` counters (one :class:`~opprof.trace.CounterSample` per event,
  numeric values only), ``M`` metadata (process/thread names and sort indices);
* anything else (samples, object snapshots, memory dumps, unknown letters) is skipped and counted in
  ``metadata["skipped_phases"]``.

Thread identities ``(pid, tid)`` -- any JSON value, 64-bit hashes included -- become small ints;
threads without a ``thread_name`` get a readable one (``"cpu/0 / tid 1628…242"``) and the original
ids are kept in ``metadata["source_threads"]``, a row per thread (:class:`SourceThread`). Processes
become small pids in file order (:attr:`~opprof.trace.ThreadInfo.pid`), named in
:attr:`~opprof.trace.TraceData.processes` by their ``process_name`` (``"pid 3"`` without one);
MXNet's pids are categories, so its trace is one process.

Bad events never stop a load: an event with a non-numeric timestamp or duration, a negative
duration, an ``E`` (or async ``e``, flow ``f``) with nothing to close, a ``B`` never closed, or an
event that is not an object is dropped; one ``warnings.warn`` per load says how many of each and the
index of the first, and ``metadata["dropped_events"]`` holds the total (``metadata["dropped"]`` the
count per reason). A ``B`` never closed is dropped rather than stretched to the end of the trace:
its duration would be invented, and invented durations poison stats. Whole-file problems (empty,
binary, not JSON, a truncated object, the wrong shape) and self-contradicting metadata (a sort index
that is not a number, an opprof parent without an invocation) raise :class:`TraceFormatError`.
A bare JSON array cut short (a process killed while tracing) loads up to its last whole event, as
the Chrome format allows, with a warning and ``metadata["truncated"] = True``.

MXNet 1.9.1 traces are recognised by their process names and get two extra steps (see
:func:`recover_mxnet`): the ``b``/``e`` copies MXNet writes of its ``B``/``E`` ops are merged away,
and custom-operator families are rebuilt from the ``Type::op`` names as far as the data allows, with
``metadata["custom_op_recovery"]`` saying what could not be recovered.
"""

from __future__ import annotations

import json
import math
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np

from ..columns import FlowTable, SpanTable
from ..data import TraceData
from ..records import CUSTOM_OP, CounterSample, Flow, Instant, Role, Span, ThreadInfo, role_of
from ..threadstates import GIL_CATEGORY, STATE_OF_LABEL, ThreadStates
from .jsonio import TraceFormatError
from .mxnet import MXNET_PROCESSES, recover_mxnet

__all__ = ["SourceThread", "import_chrome"]


class SourceThread(NamedTuple):
    """A row of an imported trace's ``metadata["source_threads"]``, written as a JSON list:
    the thread's small ``tid`` and ``pid`` in the trace, and its ids in the file it came from."""

    tid: int
    pid: int
    source_pid: Any  # any JSON value the file used (MXNet's are category names, PyTorch's numbers)
    source_tid: Any  # ditto; "async <category> <n>" for a lane of async tracks

    @classmethod
    def from_row(cls, row: Any) -> SourceThread | None:
        """The row read back from a file, or None if it is not one (a list of those four, ``tid``
        and ``pid`` ints): metadata is the file's to say, so it is checked, never trusted."""
        if not isinstance(row, (list, tuple)) or len(row) != len(cls._fields):
            return None
        found = cls(*row)
        return found if type(found.tid) is int and type(found.pid) is int else None


_INF = float("inf")


# ---------------------------------------------------------------------------- small helpers
def _abbrev(value: Any) -> str:
    """A thread or process id for a label: long numbers (64-bit hashes) shortened, strings as they are."""
    if isinstance(value, str):
        return repr(value) if not value.strip() else value
    s = str(value)
    return s if len(s) <= 8 else f"{s[:4]}…{s[-3:]}"


def _hashable(value: Any) -> Any:
    if value is None or isinstance(value, (int, str, float)):
        return value
    return json.dumps(value, sort_keys=True, default=str)


#: Times a trace holds, in ns: the columns are int64, and within ±2**62 (±146 years) an end, a
#: duration or a difference of two never overflows.
NS_LIMIT = 1 << 62


def _us_to_ns(value: Any) -> int | None:
    """Chrome microseconds (int or finite float) as integer nanoseconds; None when not a number. A
    float past :data:`NS_LIMIT` comes back as the limit itself, which the callers' range checks drop."""
    t = type(value)
    if t is int:
        return value * 1000
    if t is float and -_INF < value < _INF:
        ns = value * 1000  # inf past ~1.8e305 µs: round() would raise, so clamp to the range's ends
        return round(ns) if -NS_LIMIT < ns < NS_LIMIT else (NS_LIMIT if ns > 0 else -NS_LIMIT)
    return None


def _text(value: Any) -> str:
    if type(value) is str:
        return value
    return "" if value is None else str(value)


def _sort_index(ev: dict[str, Any], where: str) -> int:
    args = ev.get("args")
    value = args.get("sort_index") if isinstance(args, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TraceFormatError(f"{where}: {ev.get('name')} {value!r} is not a number")
    return int(value)


class _Drops:
    """Dropped events by reason, with the index of the first of each."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.first: dict[str, int] = {}

    def add(self, reason: str, index: int) -> None:
        self.count[reason] += 1
        if reason not in self.first or index < self.first[reason]:
            self.first[reason] = index

    @property
    def total(self) -> int:
        return sum(self.count.values())

    def message(self) -> str:
        parts = []
        for reason, n in self.count.most_common():
            parts.append(f"{n} {reason} (first: event {self.first[reason]})")
        return "; ".join(parts)


# ---------------------------------------------------------------------------- the importer
def _events_of(obj: Any, source: str) -> tuple[list[Any], dict[str, Any]]:
    if isinstance(obj, list):
        return obj, {}
    if isinstance(obj, dict):
        events = obj.get("traceEvents")
        if events is None and "traceEvents" not in obj:
            raise TraceFormatError(
                f"{source}: not a Chrome trace: a JSON object without 'traceEvents' (keys: {', '.join(list(obj)[:5])})"
            )
        if not isinstance(events, list):
            raise TraceFormatError(f"{source}: 'traceEvents' is a {type(events).__name__}, expected a list of events")
        return events, obj
    raise TraceFormatError(
        f"{source}: not a Chrome trace: expected a JSON list of events or an object with a 'traceEvents' list, "
        f"got a {type(obj).__name__}"
    )


def _producer(top: dict[str, Any], process_names: set[str]) -> str:
    if "viztracer_metadata" in top:
        return "viztracer"
    if "schemaVersion" in top or "deviceProperties" in top or "distributedInfo" in top:
        return "pytorch"
    if process_names & MXNET_PROCESSES:
        return "mxnet"
    return "chrome-json"


def import_chrome(obj: Any, source: str | None = None, *, truncated: bool = False) -> TraceData:
    """The records of a parsed Chrome trace (object with ``traceEvents``, or a bare list).

    ``source`` names the file in messages. Warns once (``UserWarning``) when events were dropped.
    """
    src = source or "trace"
    events, top = _events_of(obj, src)
    return _Importer(events, top, src, truncated).run()


@dataclass
class _Read:
    """What one pass over the events gathers."""

    spans: list[Span] = field(default_factory=list)
    instants: list[Instant] = field(default_factory=list)
    counters: list[CounterSample] = field(default_factory=list)
    be: dict[int, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))  # tid -> [(ts, i for B / ~i for E)]
    be_sorted: dict[int, int] = field(default_factory=dict)  # threads whose B/E came out of time order
    asyncs: dict[tuple[Any, ...], list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))
    flows: dict[tuple[Any, Any], list[tuple[int, int, int]]] = field(default_factory=lambda: defaultdict(list))


class _Importer:
    def __init__(self, events: list[Any], top: dict[str, Any], source: str, truncated: bool) -> None:
        self.events = events
        self.source = source
        self.truncated = truncated
        self.drops = _Drops()
        self.skipped: Counter[str] = Counter()
        self.proc_names: dict[Any, str] = {}
        self.proc_sort: dict[Any, int] = {}
        self.thread_names: dict[tuple[Any, Any], str] = {}
        self.thread_sort: dict[tuple[Any, Any], int] = {}
        # Pre-scan metadata: the producer decides how threads are keyed.
        for i, ev in enumerate(events):
            if type(ev) is dict and ev.get("ph") == "M":
                self._metadata(ev, i)
        self.producer = _producer(top, set(self.proc_names.values()))
        # MXNet's pids are per-category hashes ("operator", "MXNET_C_API", ...), not processes: the
        # same engine thread appears under several of them, so its threads are keyed by tid alone.
        self.by_tid_only = self.producer == "mxnet"
        self.tids: dict[tuple[Any, Any], int] = {}
        self.tid_key: list[tuple[Any, Any]] = []
        self.procs_of_tid: dict[Any, list[str]] = {}
        # opprof's GIL tracks (a file of ours without its otherData): (tid, state, start, end, holder)
        self.state_runs: list[tuple[int, int, int, int, int]] = []

    # -------------------------------------------------------------- threads
    def _key(self, pid: Any, tid: Any) -> tuple[Any, Any]:
        if self.by_tid_only:
            return (None, _hashable(tid))
        return (_hashable(pid), _hashable(tid))

    def _tid_of(self, pid: Any, tid: Any) -> int:
        key = self._key(pid, tid)
        small = self.tids.get(key)
        if small is None:
            small = self.tids[key] = len(self.tid_key)
            self.tid_key.append(key if not self.by_tid_only else (_hashable(pid), key[1]))
        return small

    def _metadata(self, ev: dict[str, Any], i: int) -> None:
        name = ev.get("name")
        where = f"{self.source}: event {i}"
        if name == "process_name":
            args = ev.get("args")
            self.proc_names[_hashable(ev.get("pid"))] = _text(args.get("name") if isinstance(args, dict) else None)
        elif name == "process_sort_index":
            self.proc_sort[_hashable(ev.get("pid"))] = _sort_index(ev, where)
        elif name == "thread_name":
            args = ev.get("args")
            self.thread_names[(_hashable(ev.get("pid")), _hashable(ev.get("tid")))] = _text(
                args.get("name") if isinstance(args, dict) else None
            )
        elif name == "thread_sort_index":
            self.thread_sort[(_hashable(ev.get("pid")), _hashable(ev.get("tid")))] = _sort_index(ev, where)

    # -------------------------------------------------------------- main pass
    def run(self) -> TraceData:
        r = _Read()
        self._read(r)
        for tid, lst in r.be.items():
            if tid in r.be_sorted:
                lst.sort(key=_first)
            self._match_be(tid, lst, r.spans)
        async_spans = self._match_async(r.asyncs, r.instants)
        meta: dict[str, Any] = {"producer": self.producer}
        self._place_async(async_spans, r.spans, meta)
        flow_list = self._match_flows(r.flows)
        return self._assemble(r.spans, r.instants, r.counters, flow_list, meta)

    def _read(self, r: _Read) -> None:
        """One pass over the events: slices, instants and counters as they are; the rest to match.

        One loop with every phase inline: it runs once per event (millions), where a call per
        event would cost a tenth of the load.
        """
        events = self.events
        drops = self.drops
        spans, instants, counters = r.spans, r.instants, r.counters
        be, be_sorted, asyncs, flows = r.be, r.be_sorted, r.asyncs, r.flows
        tids = self.tids
        by_tid_only = self.by_tid_only
        skipped = self.skipped

        for i, ev in enumerate(events):
            if type(ev) is not dict:
                drops.add("events that are not JSON objects", i)
                continue
            ph = ev.get("ph")
            if ph == "M":
                continue
            if type(ph) is not str or ph not in _HANDLED:
                skipped[_text(ph) or "(none)"] += 1
                continue
            start = _us_to_ns(ev.get("ts"))
            if start is None:
                drops.add("with a missing or non-numeric timestamp", i)
                continue
            if not -NS_LIMIT < start < NS_LIMIT:
                drops.add("with a timestamp out of range (more than 146 years from 0)", i)
                continue
            pid = ev.get("pid", 0)
            raw_tid = ev.get("tid", 0)
            try:
                key = (None, raw_tid) if by_tid_only else (pid, raw_tid)
                tid = tids.get(key)
            except TypeError:  # an unhashable pid/tid
                tid = None
            if tid is None:
                tid = self._tid_of(pid, raw_tid)
            if ph == "X":
                d = _us_to_ns(ev.get("dur", 0))
                if d is None:
                    drops.add("'X' slices with a non-numeric duration", i)
                    continue
                if d >= NS_LIMIT:
                    drops.add("'X' slices with a duration out of range", i)
                    continue
                if d < 0:
                    drops.add("'X' slices with a negative duration", i)
                    continue
                args = ev.get("args")
                if type(args) is dict and args:
                    if "role" in args:  # a file of ours without its otherData
                        args["role"] = role_of(args["role"]) or args["role"]
                else:
                    args = None
                spans.append(Span(_text(ev.get("name")), _text(ev.get("cat")), tid, start, start + d, args))
            elif ph == "B" or ph == "E":
                lst = be[tid]
                if lst and start < lst[-1][0]:
                    be_sorted[tid] = 1
                lst.append((start, i if ph == "B" else ~i))
            elif ph in _ASYNC:
                akey = self._async_key(ev, pid)
                if akey is None:
                    drops.add("async events without an 'id'", i)
                    continue
                asyncs[akey].append((start, i))
            elif ph in ("s", "t", "f"):
                fid = ev.get("id", ev.get("id2"))
                if fid is None or ev.get("bind_id") is not None:
                    drops.add("flow events without an 'id'", i)
                    continue
                flows[(_text(ev.get("cat")), _hashable(fid))].append((start, _FLOW_RANK[ph], i))
            elif ph == "i" or ph == "I" or ph == "R":
                args = ev.get("args")
                instants.append(
                    Instant(
                        _text(ev.get("name")), _text(ev.get("cat")), tid, start, args if type(args) is dict and args else None
                    )
                )
            elif ph == "C":
                sample = self._counter(ev, start)
                if sample is None:
                    drops.add("counters without a numeric value", i)
                else:
                    counters.append(sample)
            else:  # pragma: no cover - _HANDLED and the branches above agree
                skipped[_text(ph)] += 1

    # -------------------------------------------------------------- B/E
    def _match_be(self, tid: int, lst: list[tuple[int, int]], spans: list[Span]) -> None:
        events = self.events
        stack: list[tuple[int, int]] = []
        push, pop, append = stack.append, stack.pop, spans.append
        for ts, code in lst:
            if code >= 0:
                push((ts, code))
                continue
            if not stack:
                self.drops.add("'E' events without an open 'B' on their thread", ~code)
                continue
            bts, bi = pop()
            b = events[bi]
            e = events[~code]
            args = b.get("args")
            if type(args) is not dict or not args:
                args = None
            if "args" in e:
                e_args = e["args"]
                if type(e_args) is dict and e_args:
                    args = {**args, **e_args} if args else dict(e_args)
            name = b.get("name")
            if type(name) is not str:
                name = _text(e.get("name") if name is None else name)
            cat = b.get("cat")
            if type(cat) is not str:
                cat = _text(cat)
            append(Span(name, cat, tid, bts, ts, args))
        for _, bi in stack:
            self.drops.add("'B' events never closed by an 'E'", bi)

    # -------------------------------------------------------------- async
    def _async_key(self, ev: dict[str, Any], pid: Any) -> tuple[Any, ...] | None:
        cat = _text(ev.get("cat"))
        if "id" in ev:
            return (
                "p" if not self.by_tid_only else None,
                _hashable(pid) if not self.by_tid_only else None,
                cat,
                _hashable(ev["id"]),
            )
        id2 = ev.get("id2")
        if isinstance(id2, dict):
            if "global" in id2:
                return ("g", None, cat, _hashable(id2["global"]))
            if "local" in id2:
                return ("l", _hashable(pid), cat, _hashable(id2["local"]))
        return None

    def _match_async(
        self, asyncs: dict[tuple[Any, ...], list[tuple[int, int]]], instants: list[Instant]
    ) -> list[tuple[tuple[Any, ...], Span, int]]:
        """Async slices per track: ``(track key, span with tid of its first event, event index)``."""
        events = self.events
        out: list[tuple[tuple[Any, ...], Span, int]] = []
        for key, lst in asyncs.items():
            lst.sort(key=_first)
            stack: list[tuple[int, int]] = []
            for ts, i in lst:
                ev = events[i]
                ph = ev["ph"]
                if ph == "b" or ph == "S":
                    stack.append((ts, i))
                elif ph == "e" or ph == "F":
                    if not stack:
                        self.drops.add("async 'e' events without an open 'b'", i)
                        continue
                    bts, bi = stack.pop()
                    b = events[bi]
                    args = b.get("args")
                    span = Span(
                        _text(b.get("name")), _text(b.get("cat")), self.tids[self._key(b.get("pid", 0), b.get("tid", 0))],
                        bts, ts, dict(args) if type(args) is dict and args else None,
                    )  # fmt: skip
                    out.append((key, span, bi))
                else:  # n, T, p: a point on the track
                    args = ev.get("args")
                    tid = self.tids[self._key(ev.get("pid", 0), ev.get("tid", 0))]
                    instants.append(
                        Instant(
                            _text(ev.get("name")), _text(ev.get("cat")), tid, ts, args if type(args) is dict and args else None
                        )
                    )
            for _, bi in stack:
                self.drops.add("async 'b' events never closed by an 'e'", bi)
        return out

    def _place_async(self, async_spans: list[tuple[tuple[Any, ...], Span, int]], spans: list[Span], meta: dict[str, Any]) -> None:
        """Put async slices on their thread (track id == tid) or on packed per-process async lanes.

        An async slice that repeats a thread slice (same name, thread and start: MXNet writes every
        op both as ``B``/``E`` and as ``b``/``e``) is a duplicate and is merged away. opprof's own
        ``custom_op`` tracks (a file of ours without its ``otherData``) give back the parent spans.
        """
        if not async_spans:
            return
        events = self.events
        on_thread: set[tuple[int, str, int]] | None = None
        duplicates = 0
        tracks: dict[tuple[Any, ...], list[Span]] = defaultdict(list)
        for key, span, bi in async_spans:
            b = events[bi]
            args = span.args or {}
            if span.cat == GIL_CATEGORY and span.name in STATE_OF_LABEL:  # opprof's thread states, not spans
                self._state_run(span, args, b)
                continue
            role = role_of(args.get("role"))
            if span.cat == CUSTOM_OP and role is not None:
                args["role"] = role
                if role == Role.PARENT:
                    inv = args.get("invocation")
                    if isinstance(inv, bool) or not isinstance(inv, int):
                        raise TraceFormatError(
                            f"{self.source}: event {bi}: opprof parent {span.name!r} has no integer invocation"
                        )
                    spans.append(span)
                else:
                    duplicates += 1  # the export's copy of a thread slice
                continue
            if key[3] == _hashable(b.get("tid")):
                if on_thread is None:
                    on_thread = {(s.tid, s.name, s.start) for s in spans}
                if (span.tid, span.name, span.start) in on_thread:
                    duplicates += 1
                    continue
                spans.append(span)
                continue
            tracks[key].append(span)
        if duplicates:
            meta["duplicates_merged"] = duplicates
        # Pack whole tracks into lanes per (process, category): a lane is reused once its last track ended.
        groups: dict[tuple[Any, str], list[tuple[int, int, tuple[Any, ...]]]] = defaultdict(list)
        for key, members in tracks.items():
            pid = self.tid_key[members[0].tid][0]
            groups[(pid, key[2])].append((min(s.start for s in members), max(s.end for s in members), key))
        for (pid, cat), extents in groups.items():
            extents.sort(key=lambda x: (x[0], x[1]))
            lane_end: list[int] = []
            lane_tid: list[int] = []
            for lo, hi, key in extents:
                n = next((k for k, end in enumerate(lane_end) if end <= lo), len(lane_end))
                if n == len(lane_end):
                    lane_end.append(hi)
                    lane_tid.append(self._tid_of_key(("async", pid, cat, n), pid))
                lane_end[n] = hi
                for s in tracks[key]:
                    s.tid = lane_tid[n]
                    spans.append(s)

    def _state_run(self, span: Span, args: dict[str, Any], b: dict[str, Any]) -> None:
        """A run of opprof's thread states; its holder (a tid of the file) is a thread of the same
        process (the GIL is one per process), -1 when the file names none the trace knows."""
        raw = args.get("holder", -1)
        holder = -1
        if type(raw) is int and raw >= 0:
            holder = self.tids.get(self._key(b.get("pid", 0), raw), -1)
        self.state_runs.append((span.tid, STATE_OF_LABEL[span.name], span.start, span.end, holder))

    def _tid_of_key(self, key: tuple[Any, ...], pid: Any) -> int:
        small = self.tids.get(key)
        if small is None:
            small = self.tids[key] = len(self.tid_key)
            self.tid_key.append((pid, key))
        return small

    # -------------------------------------------------------------- flows, counters
    def _match_flows(self, flows: dict[tuple[Any, Any], list[tuple[int, int, int]]]) -> list[Flow]:
        events = self.events
        out: list[Flow] = []
        next_id = 1
        for lst in flows.values():
            lst.sort(key=_two)  # by time; at one timestamp a start before a step before a finish
            prev: tuple[int, int] | None = None  # (tid, ts) of the chain's last point
            chain_id = 0
            prev_i = -1
            for ts, _, i in lst:
                ev = events[i]
                ph = ev["ph"]
                tid = self.tids[self._key(ev.get("pid", 0), ev.get("tid", 0))]
                if ph == "s":
                    if prev is not None:
                        self.drops.add("flow starts ('s') never finished", prev_i)
                    prev, prev_i, chain_id = (tid, ts), i, next_id
                    next_id += 1
                    continue
                if prev is None:
                    self.drops.add(f"flow '{ph}' events without a start", i)
                    continue
                out.append(Flow(chain_id, _text(ev.get("name")), _text(ev.get("cat")), prev[0], prev[1], tid, ts))
                if ph == "f":
                    prev = None
                else:
                    prev, prev_i = (tid, ts), -1
            if prev is not None and prev_i >= 0:
                self.drops.add("flow starts ('s') never finished", prev_i)
        return out

    @staticmethod
    def _counter(ev: dict[str, Any], ts: int) -> CounterSample | None:
        args = ev.get("args")
        if type(args) is not dict:
            return None
        values = {
            _text(k): float(v)
            for k, v in args.items()
            if not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
        }
        if not values:
            return None
        name = _text(ev.get("name"))
        if ev.get("id") is not None:
            name = f"{name} {ev['id']}"
        return CounterSample(name, ts, values)

    # -------------------------------------------------------------- the trace
    def _thread_name(self, key: tuple[Any, Any]) -> str:
        pid, tid = key
        if isinstance(tid, tuple):  # a packed async lane
            _, _, cat, n = tid
            proc = self.proc_names.get(pid) or f"pid {_abbrev(pid)}"
            return f"{proc} / async {cat}" + (f" {n + 1}" if n else "")
        if self.by_tid_only:
            for (_, t), name in self.thread_names.items():
                if t == tid and name:
                    return name
            procs = ", ".join(self.procs_of_tid.get(tid, ()))
            return f"tid {_abbrev(tid)}" + (f" ({procs})" if procs else "")
        else:
            named = self.thread_names.get((pid, tid))
            if named:
                return named
        proc = self.proc_names.get(pid) or f"pid {_abbrev(pid)}"
        return f"{proc} / tid {_abbrev(tid)}"

    def _assemble(
        self, spans: list[Span], instants: list[Instant], counters: list[CounterSample], flows: list[Flow], meta: dict[str, Any]
    ) -> TraceData:
        if self.by_tid_only:  # name each thread after the (category) processes it shows up in
            pairs = {(_hashable(e.get("pid")), _hashable(e.get("tid"))) for e in self.events if type(e) is dict and "tid" in e}
            for pid, tid in sorted(pairs, key=str):
                if pid in self.proc_names:
                    self.procs_of_tid.setdefault(tid, []).append(self.proc_names[pid])
        pid_small: dict[Any, int] = {}
        for pid, _ in self.tid_key:
            pid_small.setdefault(pid, len(pid_small))
        big = 1 << 62
        # Each thread's process, as a small int. MXNet's pids are categories, not processes (its
        # threads show up under several): its trace is one process, as it was recorded.
        pid_of = (lambda pid: 0) if self.by_tid_only else pid_small.__getitem__

        def order(tid: int) -> tuple[int, int, int, int, int]:
            pid, t = self.tid_key[tid]
            lane = isinstance(t, tuple)
            sort_t = big if lane else self.thread_sort.get((pid, t), big)
            return (self.proc_sort.get(pid, big), pid_small[pid], int(lane), sort_t, tid)

        threads = [
            ThreadInfo(tid, self._thread_name(self.tid_key[tid]), pid_of(self.tid_key[tid][0]))
            for tid in sorted(range(len(self.tid_key)), key=order)
        ]
        spans.sort(key=_start)
        instants.sort(key=_ts)
        counters.sort(key=_ts)
        meta["source_threads"] = [
            list(SourceThread(tid, pid_of(pid), pid, t if not isinstance(t, tuple) else f"async {t[2]} {t[3] + 1}"))
            for tid, (pid, t) in enumerate(self.tid_key)
        ]
        meta["processes"] = [[small, pid, self.proc_names.get(pid, "")] for pid, small in pid_small.items()]
        if self.skipped:
            meta["skipped_phases"] = dict(self.skipped)
        if self.truncated:
            meta["truncated"] = True
        # The processes' names as the file gives them; among several, one it leaves unnamed is
        # called what its threads' names call it ("pid 3"), to be told apart.
        processes: dict[int, str] = {}
        for p, small in pid_small.items():
            name = self.proc_names.get(p) or (f"pid {_abbrev(p)}" if len(pid_small) > 1 else "")
            if name and not self.by_tid_only:
                processes[small] = name
        trace = TraceData(
            threads=threads, spans=spans, instants=instants, counters=counters, flows=flows, metadata=meta, processes=processes
        )
        if self.producer == "mxnet":
            recover_mxnet(trace)  # edits the span list, so it runs before the columns are made
        trace.set_table(SpanTable.from_spans(trace.spans))
        trace.flows = FlowTable.from_flows(trace.flows)
        if self.state_runs:  # the sampling period went with the otherData: unknown (0)
            tid, state, start, end, holder = (np.array(c, dtype=np.int64) for c in zip(*self.state_runs, strict=True))
            trace.thread_states = ThreadStates(tid, state, start, end, holder)
        meta["dropped_events"] = self.drops.total
        if self.drops.total:
            meta["dropped"] = dict(self.drops.count)
        notes = []
        if self.truncated:
            notes.append("the file is cut short; read up to its last complete event")
        if self.drops.total:
            notes.append(f"dropped {self.drops.total} of {len(self.events)} events: {self.drops.message()}")
        if self.skipped:
            notes.append(
                "skipped phases opprof does not model: " + ", ".join(f"{k!r} x{v}" for k, v in self.skipped.most_common())
            )
        if notes:
            warnings.warn(f"{self.source}: " + "; ".join(notes), UserWarning, stacklevel=4)
        return trace


_HANDLED = frozenset("XBEbneSTFpstfiIRC")
_ASYNC = frozenset("bneSTFp")
_FLOW_RANK = {"s": 0, "t": 1, "f": 2}
_first = lambda x: x[0]
_two = lambda x: (x[0], x[1])
_start = attrgetter("start")
_ts = attrgetter("ts")
