"""Read Chrome Trace Event JSON written by other tools (MXNet, PyTorch, VizTracer, Chrome, ...).

:func:`opprof.chrome.load` and :func:`opprof.chrome.from_chrome` hand every file that is not one of
opprof's own to :func:`import_chrome`. What it understands, by phase (``ph``):

* ``X`` complete slices; ``B``/``E`` pairs, matched with a stack per thread in time order (an ``E``
  closes the innermost open ``B``, as Chrome and Perfetto do);
* ``b``/``n``/``e`` nestable async and legacy ``S``/``T``/``F`` async slices, matched per
  (scope, category, id) with ``id`` or ``id2``; a track whose id equals its thread id is drawn on
  that thread, the others are packed into a few "async" lanes per process;
* ``s``/``t``/``f`` flows, chained per (category, id), one :class:`~opprof.trace.Flow` per hop;
* ``i``/``I``/``R`` instants, ``C`` counters (one :class:`~opprof.trace.CounterSample` per event,
  numeric values only), ``M`` metadata (process/thread names and sort indices);
* anything else (samples, object snapshots, memory dumps, unknown letters) is skipped and counted in
  ``metadata["skipped_phases"]``.

Thread identities ``(pid, tid)`` -- any JSON value, 64-bit hashes included -- become small ints;
threads without a ``thread_name`` get a readable one (``"cpu/0 / tid 1628…242"``) and the original
ids are kept in ``metadata["source_threads"]``.

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

import gc
import gzip
import json
import math
import os
import re
import warnings
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from operator import attrgetter
from typing import Any

from .trace import ROLES, CounterSample, Flow, Instant, Span, ThreadInfo, Trace

__all__ = ["TraceFormatError", "import_chrome", "read_trace_file", "parse_json", "recover_mxnet", "no_gc"]


class TraceFormatError(ValueError):
    """A trace file that cannot be read; the message names the file, the problem and where."""


# Phases a viewer knows but opprof's model has no place for: counted in metadata, never fatal.
KNOWN_SKIPPED = {"P": "sample", "O": "object snapshot", "N": "object created", "D": "object destroyed",
                 "(": "context enter", ")": "context leave", "c": "clock sync", "v": "memory dump",
                 "V": "memory dump", "a": "mark"}  # fmt: skip
MXNET_PROCESSES = {"MXNET_C_API", "Custom Operator", "Device Storage"}
_INF = float("inf")


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while building millions of acyclic objects.

    Each collection walks every live object, so a load of 1M events otherwise pays ~1 s (a third of
    its time) for collections that find nothing. Nothing built here forms a cycle.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# ---------------------------------------------------------------------------- reading the file
def read_trace_file(path: str | os.PathLike[str]) -> bytes:
    """The decompressed bytes of a trace file. ``.gz`` must be gzip; other names are sniffed."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise TraceFormatError(f"{path}: cannot read: {e.strerror or e}") from None
    gz = str(path).endswith(".gz")
    if gz or raw[:2] == b"\x1f\x8b":
        if not raw:
            raise TraceFormatError(f"{path}: the file is empty")
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:  # not gzip, or cut short
            raise TraceFormatError(f"{path}: cannot read: not a complete gzip stream ({e})") from None
    return raw


def _loads(data: bytes) -> Any:
    try:
        import orjson
    except ImportError:  # pragma: no cover - orjson is a dependency
        return json.loads(data)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        # The standard library also reads NaN/Infinity (Python's own json.dump writes them).
        return json.loads(data)


def parse_json(raw: bytes, source: str) -> tuple[Any, bool]:
    """Parse trace bytes; returns ``(object, truncated)``. Raises :class:`TraceFormatError`."""
    head = raw[:4096]
    if not raw.strip():
        raise TraceFormatError(f"{source}: the file is empty")
    if b"\x00" in head or (head[:2] in (b"\xff\xfe", b"\xfe\xff")):
        raise TraceFormatError(f"{source}: a binary file, not Chrome trace JSON")
    try:
        return _loads(raw), False
    except (ValueError, RecursionError) as e:  # JSONDecodeError (both libraries), UnicodeDecodeError
        first_error = e
    repaired = _repair_truncated_array(raw)
    if repaired is not None:
        return repaired, True
    raise TraceFormatError(f"{source}: not valid JSON ({_short(first_error)})") from None


def _short(e: BaseException) -> str:
    msg = str(e)
    return msg if len(msg) <= 200 else msg[:200] + "…"


def _repair_truncated_array(raw: bytes, attempts: int = 8) -> list[Any] | None:
    """A bare event array cut short, read up to its last complete event (bounded work)."""
    body = raw.rstrip()
    if not body.lstrip()[:1] == b"[":
        return None
    end = len(body)
    for _ in range(attempts):
        cut = body[:end].rstrip()
        while cut.endswith(b","):
            cut = cut[:-1].rstrip()
        try:
            obj = _loads(cut + b"]")
        except (ValueError, RecursionError):
            end = body.rfind(b"}", 0, end - 1 if end == len(body) else end) + 1
            if end <= 0:
                return None
            continue
        return obj if isinstance(obj, list) else None
    return None


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


def _us_to_ns(value: Any) -> int | None:
    """Chrome microseconds (int or finite float) as integer nanoseconds; None when not a number."""
    t = type(value)
    if t is int:
        return value * 1000
    if t is float and -_INF < value < _INF:
        return round(value * 1000)
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


def import_chrome(obj: Any, source: str | None = None, *, truncated: bool = False) -> Trace:
    """A :class:`Trace` from a parsed Chrome trace (object with ``traceEvents``, or a bare list).

    ``source`` names the file in messages. Warns once (``UserWarning``) when events were dropped.
    """
    src = source or "trace"
    events, top = _events_of(obj, src)
    return _Importer(events, top, src, truncated).run()


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
    def run(self) -> Trace:
        events = self.events
        drops = self.drops
        spans: list[Span] = []
        instants: list[Instant] = []
        counters: list[CounterSample] = []
        be: dict[int, list[tuple[int, int]]] = defaultdict(list)  # small tid -> [(ts, +i for B / ~i for E)]
        be_sorted: dict[int, int] = {}
        asyncs: dict[tuple[Any, ...], list[tuple[int, int]]] = defaultdict(list)
        flows: dict[tuple[Any, Any], list[tuple[int, int, int]]] = defaultdict(list)
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
                if d < 0:
                    drops.add("'X' slices with a negative duration", i)
                    continue
                args = ev.get("args")
                spans.append(
                    Span(
                        _text(ev.get("name")),
                        _text(ev.get("cat")),
                        tid,
                        start,
                        start + d,
                        args if type(args) is dict and args else None,
                    )
                )
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

        for tid, lst in be.items():
            if tid in be_sorted:
                lst.sort(key=_first)
            self._match_be(tid, lst, spans)
        async_spans = self._match_async(asyncs, instants)
        meta: dict[str, Any] = {"producer": self.producer}
        self._place_async(async_spans, spans, meta)
        flow_list = self._match_flows(flows)
        return self._assemble(spans, instants, counters, flow_list, meta)

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
            if span.cat == "custom_op" and args.get("role") in ROLES:
                if args.get("role") == "parent":
                    inv = args.get("invocation")
                    if isinstance(inv, bool) or not isinstance(inv, int):
                        raise TraceFormatError(
                            f"{self.source}: event {bi}: opprof parent {span.name!r} has no integer invocation"
                        )
                    span.cat = "custom"
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

    def _tid_of_key(self, key: tuple[Any, ...], pid: Any) -> int:
        small = self.tids.get(key)  # type: ignore[arg-type]
        if small is None:
            small = self.tids[key] = len(self.tid_key)  # type: ignore[index]
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
            name = self.thread_names.get((pid, tid))
            if name:
                return name
        proc = self.proc_names.get(pid) or f"pid {_abbrev(pid)}"
        return f"{proc} / tid {_abbrev(tid)}"

    def _assemble(
        self, spans: list[Span], instants: list[Instant], counters: list[CounterSample], flows: list[Flow], meta: dict[str, Any]
    ) -> Trace:
        if self.by_tid_only:  # name each thread after the (category) processes it shows up in
            pairs = {(_hashable(e.get("pid")), _hashable(e.get("tid"))) for e in self.events if type(e) is dict and "tid" in e}
            for pid, tid in sorted(pairs, key=str):
                if pid in self.proc_names:
                    self.procs_of_tid.setdefault(tid, []).append(self.proc_names[pid])
        pid_small: dict[Any, int] = {}
        for pid, _ in self.tid_key:
            pid_small.setdefault(pid, len(pid_small))
        big = 1 << 62

        def order(tid: int) -> tuple[int, int, int, int, int]:
            pid, t = self.tid_key[tid]
            lane = isinstance(t, tuple)
            sort_t = big if lane else self.thread_sort.get((pid, t), big)
            return (self.proc_sort.get(pid, big), pid_small[pid], int(lane), sort_t, tid)

        threads = [
            ThreadInfo(tid, self._thread_name(self.tid_key[tid]), pid_small[self.tid_key[tid][0]])
            for tid in sorted(range(len(self.tid_key)), key=order)
        ]
        spans.sort(key=_start)
        instants.sort(key=_ts)
        counters.sort(key=_ts)
        meta["source_threads"] = [
            [tid, pid_small[pid], pid, t if not isinstance(t, tuple) else f"async {t[2]} {t[3] + 1}"]
            for tid, (pid, t) in enumerate(self.tid_key)
        ]
        meta["processes"] = [[small, pid, self.proc_names.get(pid, "")] for pid, small in pid_small.items()]
        if self.skipped:
            meta["skipped_phases"] = dict(self.skipped)
        if self.truncated:
            meta["truncated"] = True
        trace = Trace(threads=threads, spans=spans, instants=instants, counters=counters, flows=flows, metadata=meta)
        if self.producer == "mxnet":
            recover_mxnet(trace)
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


# ---------------------------------------------------------------------------- MXNet custom ops
_FAMILY = re.compile(r"^(_backward_)?([A-Za-z_][\w.]*)::(.*)$")
# Engine housekeeping MXNet 1.9.1 names after whichever custom op is running (see DESIGN.md).
MXNET_MISATTRIBUTED = frozenset({"ResourceParallelRandomSetSeed"})


def _role(suffix: str) -> str:
    if suffix == "pure_python":
        return "python"
    if suffix in ("", "Dummy_Wait"):
        return "dummy_wait"
    if suffix == "WaitForVar":
        return "wait"
    return "subop"


class _Inv:
    __slots__ = ("closed", "members", "number", "python", "tid")

    def __init__(self, number: int, python: Span | None, tid: int) -> None:
        self.number = number
        self.python = python
        self.tid = tid
        self.members: list[Span] = [python] if python is not None else []
        self.closed: Span | None = None


def recover_mxnet(trace: Trace) -> dict[str, Any]:
    """Rebuild custom-op families of an MXNet 1.9.1 trace from its ``Type::op`` names, in place.

    MXNet records ``Type::pure_python`` (the Python of one invocation), sub-ops ``Type::op`` and the
    completion op ``Type::`` but nothing that ties a sub-op to an invocation. Rules, per op type and
    direction (``_backward_Type``), in time order:

    * each ``pure_python`` span opens one invocation;
    * a completion closes the one open invocation whose Python had returned before it started; with
      none or several such invocations it is left unattributed;
    * a sub-op or wait belongs to an invocation only if exactly one is open when it starts;
    * with no ``pure_python`` spans at all, each completion closes the group of the type's events since
      the previous one (this assumes one invocation in flight at a time);
    * ``Type::ResourceParallelRandomSetSeed`` is engine housekeeping MXNet misnames: never attributed.

    Each invocation gets a synthesized ``parent`` span from its first known part to its completion (or
    its last known part, ``args["complete"] = False``), and every part gets ``op_type``, ``role`` and
    ``invocation`` args, so :meth:`Trace.custom_ops` and the timeline work. What could not be
    attributed, and why, goes to ``trace.metadata["custom_op_recovery"]`` (also returned).
    """
    by_family: dict[tuple[bool, str], list[Span]] = defaultdict(list)
    misattributed: Counter[str] = Counter()
    for s in trace.spans:
        m = _FAMILY.match(s.name)
        if m is None or s.role == "parent":
            continue
        backward, op_type, suffix = bool(m.group(1)), m.group(2), m.group(3)
        if suffix in MXNET_MISATTRIBUTED:
            misattributed[s.name] += 1
            s.args = {**(s.args or {}), "op_type": op_type, "misattributed": True}
            continue
        s.args = {**(s.args or {}), "op_type": op_type, "role": _role(suffix)}
        by_family[(backward, op_type)].append(s)

    report: dict[str, Any] = {"recovered": 0, "complete": 0, "attributed": 0, "unattributed": 0, "unrecoverable": []}
    notes: list[str] = report["unrecoverable"]
    parents: list[Span] = []
    number = max((inv for inv in (s.invocation for s in trace.spans) if isinstance(inv, int)), default=0)
    for (backward, op_type), members in sorted(by_family.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        label = f"_backward_{op_type}" if backward else op_type
        members.sort(key=lambda s: (s.start, -s.end))
        pythons = [s for s in members if s.role == "python"]
        invs: list[_Inv] = []
        unattributed: Counter[str] = Counter()
        reasons: Counter[str] = Counter()
        if pythons:
            open_: list[_Inv] = []
            events = sorted(members, key=lambda s: (s.start, s.role != "python"))
            for s in events:
                if s.role == "python":
                    number += 1
                    inv = _Inv(number, s, s.tid)
                    invs.append(inv)
                    open_.append(inv)
                    continue
                if s.role == "dummy_wait":
                    ready = [v for v in open_ if v.python is not None and v.python.end <= s.start]
                    if len(ready) == 1:
                        ready[0].members.append(s)
                        ready[0].closed = s
                        open_.remove(ready[0])
                        continue
                    reasons[
                        "a completion ran before its Python returned"
                        if not ready
                        else "several invocations were ready to complete"
                    ] += 1
                else:
                    live = [v for v in open_ if v.python is not None and v.python.start <= s.start]
                    if len(live) == 1:
                        live[0].members.append(s)
                        continue
                    reasons["several invocations were open" if live else "no invocation was open"] += 1
                unattributed[s.name] += 1
        else:
            group: list[Span] = []
            for s in members:
                group.append(s)
                if s.role == "dummy_wait":
                    number += 1
                    inv = _Inv(number, None, s.tid)
                    inv.members = group
                    inv.closed = s
                    invs.append(inv)
                    group = []
            for s in group:
                unattributed[s.name] += 1
            if group:
                reasons["no completion followed them"] += len(group)
            if invs:
                notes.append(
                    f"{label}: no pure_python spans; invocations were cut at each completion, assuming one in flight at a time"
                )
        for inv in invs:
            start = min(s.start for s in inv.members)
            end = inv.closed.end if inv.closed is not None else max(s.end for s in inv.members)
            p_args: dict[str, Any] = {
                "op_type": op_type,
                "role": "parent",
                "invocation": inv.number,
                "backward": backward,
                "complete": inv.closed is not None,
                "recovered": True,
            }
            parents.append(Span(label, "custom", inv.tid, start, end, p_args))
            for s in inv.members:
                assert s.args is not None
                s.args["invocation"] = inv.number
            report["recovered"] += 1
            report["complete"] += inv.closed is not None
            report["attributed"] += len(inv.members)
        n_un = sum(unattributed.values())
        report["unattributed"] += n_un
        if n_un:
            what = ", ".join(f"{name} x{n}" for name, n in unattributed.most_common())
            why = "; ".join(f"{r} ({n})" for r, n in reasons.most_common())
            notes.append(f"{label}: {n_un} events not tied to an invocation ({what}): {why}")
        incomplete = sum(1 for inv in invs if inv.closed is None)
        if incomplete:
            notes.append(f"{label}: {incomplete} of {len(invs)} invocations have no completion op; their end is a lower bound")
    for name, n in misattributed.most_common():
        notes.append(f"{name} x{n}: engine housekeeping MXNet names after the running custom op; not attributed")
    if by_family:
        notes.append("MXNet 1.9.1 records no link from a sub-op to the invocation that pushed it; attribution is by time only")
    trace.spans.extend(parents)
    trace.spans.sort(key=_start)
    trace.metadata["custom_op_recovery"] = report
    return report
