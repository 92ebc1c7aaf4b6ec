"""Trace <-> Chrome Trace Event JSON, the format Perfetto and chrome://tracing open.

Export writes, with timestamps in microseconds relative to the trace start (fractional, so
nanoseconds survive):

* ``M`` metadata: the process name and every thread's real name and sort order (small int tids);
* one ``X`` slice per span on its thread (a custom-op ``parent`` crosses threads, so it has none);
* per custom-op invocation, a nestable async track (``b``/``e`` sharing the invocation id) holding
  the parent and, properly nested inside it, its python span, waits, ``Dummy_Wait`` and every
  sub-op that fits without crossing a sibling (the rest stay on their thread, linked by a flow);
* flow events (``s``/``f``) from the push inside a custom op's Python to the sub-op's slice.

``load`` reads such a file back losslessly (``otherData.opprof`` carries what Chrome has no field for);
every other Chrome trace (MXNet, PyTorch, VizTracer, Chrome itself) goes to :mod:`.importer`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

from .importer import import_chrome
from .jsonio import TraceFormatError, dumps, loads, no_gc, open_maybe_gzip, parse_json, read_trace_file
from .records import CUSTOM_OP, ROLE_OF, CounterSample, Flow, Instant, Role, Span, ThreadInfo, TraceData

__all__ = ["from_chrome", "load", "save", "to_chrome"]

PID = 0


def _us(ns: int, t0: int) -> float:
    return (ns - t0) / 1e3


def _async_children(parent: Span, family: list[Span]) -> list[Span]:
    """The children that nest properly inside ``parent`` on one async track (greedy, by start)."""
    kept: list[Span] = []
    stack: list[Span] = [parent]
    for s in sorted(family, key=lambda s: (s.start, -s.end)):
        if s is parent:
            continue
        while len(stack) > 1 and stack[-1].end <= s.start:
            stack.pop()
        if s.start >= stack[-1].start and s.end <= stack[-1].end:
            kept.append(s)
            stack.append(s)
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
    t0 = min((s.start for s in trace.spans), default=0)
    return min([t0, *(f.src_ts for f in trace.flows), *(i.ts for i in trace.instants), *(c.ts for c in trace.counters)])


def _other_data(trace: TraceData, t0: int) -> dict[str, Any]:
    # Flows are not repeated here: their s/f events hold every field (files before 2026-11-30 did).
    return {"opprof": {"t0_ns": t0, "metadata": trace.metadata}}


def _event_chunks(trace: TraceData, t0: int) -> Iterator[list[dict[str, Any]]]:
    """The trace's events, in lists of at most about ``CHUNK``: names, slices, custom-op tracks, flows, the rest.

    Each part is one loop that reads fields directly (no properties, no helper call per event):
    a profile of 1M spans is about 2.5M events.
    """
    families: dict[int, list[Span]] = {}
    parents: dict[int, Span] = {}
    yield from _slice_chunks(trace, t0, families, parents)
    yield from _track_chunks(families, parents, t0)
    yield from _flow_chunks(trace, t0)
    yield _point_events(trace, t0)


def _slice_chunks(
    trace: TraceData, t0: int, families: dict[int, list[Span]], parents: dict[int, Span]
) -> Iterator[list[dict[str, Any]]]:
    """Metadata, then one ``X`` slice per span on its thread; fills ``families`` and ``parents``."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": trace.metadata.get("process_name", "opprof")}}
    ]
    for i, t in enumerate(trace.threads):
        events.append({"ph": "M", "name": "thread_name", "pid": PID, "tid": t.tid, "args": {"name": t.name}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": PID, "tid": t.tid, "args": {"sort_index": i}})
    append = events.append
    for s in trace.spans:
        args = s.args
        if args:
            inv = args.get("invocation")
            if inv is not None:
                family = families.get(inv)
                if family is None:
                    families[inv] = family = []
                family.append(s)
            if args.get("role") == Role.PARENT:
                if inv is not None:
                    parents.setdefault(inv, s)
                continue
        ev = {
            "ph": "X",
            "name": s.name,
            "cat": s.cat,
            "pid": PID,
            "tid": s.tid,
            "ts": (s.start - t0) / 1e3,
            "dur": (s.end - s.start) / 1e3,
        }
        if args:
            ev["args"] = args
        append(ev)
        if len(events) >= CHUNK:
            yield events
            events = []
            append = events.append
    yield events


def _track_chunks(families: dict[int, list[Span]], parents: dict[int, Span], t0: int) -> Iterator[list[dict[str, Any]]]:
    """One nestable async track per invocation: its parent, and the children that nest inside it."""
    events: list[dict[str, Any]] = []
    append = events.append
    for inv, family in families.items():
        parent = parents.get(inv)
        if parent is None:
            continue
        tid = parent.tid
        name = parent.name
        ts = (parent.start - t0) / 1e3
        append({"name": name, "cat": CUSTOM_OP, "id": inv, "pid": PID, "tid": tid, "ph": "b", "ts": ts, "args": parent.args})
        append({"name": name, "cat": CUSTOM_OP, "id": inv, "pid": PID, "tid": tid, "ph": "e", "ts": (parent.end - t0) / 1e3})
        # The children carry no args here: their slices on their threads have them (a quarter of
        # a profile's file was these copies).
        for s in _async_children(parent, family):
            name = s.name
            append({"name": name, "cat": CUSTOM_OP, "id": inv, "pid": PID, "tid": tid, "ph": "b", "ts": (s.start - t0) / 1e3})
            append({"name": name, "cat": CUSTOM_OP, "id": inv, "pid": PID, "tid": tid, "ph": "e", "ts": (s.end - t0) / 1e3})
        if len(events) >= CHUNK:
            yield events
            events = []
            append = events.append
    yield events


def _flow_chunks(trace: TraceData, t0: int) -> Iterator[list[dict[str, Any]]]:
    """Flow arrows: an ``s`` at the push, an ``f`` at the start of the op it pushed."""
    events: list[dict[str, Any]] = []
    append = events.append
    for f in trace.flows:
        name, cat, fid = f.name, f.cat, f.id
        append({"name": name, "cat": cat, "id": fid, "pid": PID, "ph": "s", "tid": f.src_tid, "ts": (f.src_ts - t0) / 1e3})
        append(
            {"name": name, "cat": cat, "id": fid, "pid": PID, "ph": "f", "bp": "e", "tid": f.dst_tid, "ts": (f.dst_ts - t0) / 1e3}
        )
        if len(events) >= CHUNK:
            yield events
            events = []
            append = events.append
    yield events


def _point_events(trace: TraceData, t0: int) -> list[dict[str, Any]]:
    """Instants and counter samples."""
    events: list[dict[str, Any]] = []
    for inst in trace.instants:
        ev = {"ph": "i", "s": "t", "name": inst.name, "cat": inst.cat, "pid": PID, "tid": inst.tid, "ts": _us(inst.ts, t0)}
        if inst.args:
            ev["args"] = inst.args
        events.append(ev)
    for c in trace.counters:
        events.append({"ph": "C", "name": c.name, "pid": PID, "tid": 0, "ts": _us(c.ts, t0), "args": c.values})
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
    """Read a Chrome trace JSON file (``.json`` or ``.json.gz``): opprof's own losslessly, any other
    tool's through :mod:`.importer`."""
    raw = read_trace_file(path)
    with no_gc():
        if raw.startswith(_CHUNKED_HEAD):
            trace = _load_chunked(raw, str(path))
            if trace is not None:
                return trace
        obj, truncated = parse_json(raw, str(path))
        del raw
        if not _is_ours(obj):
            return import_chrome(obj, str(path), truncated=truncated)
        try:
            return _from_ours_obj(obj)
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

    def chunks() -> Iterator[list[Any]]:
        start = len(_CHUNKED_HEAD)
        while start < last:
            end = raw.find(b"\n", start, last)
            end = last if end < 0 else end
            line = raw[start:end].rstrip().rstrip(b",")
            start = end + 1
            if line:
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


def _ns(value: Any, t0: int, i: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TraceFormatError(f"event {i}: timestamp {value!r} is not a number")
    return t0 + round(value * 1e3)


def from_chrome(obj: Any) -> TraceData:
    """The records of a Chrome trace object (dict with ``traceEvents``, or a list)."""
    with no_gc():
        if not _is_ours(obj):
            return import_chrome(obj)
        return _from_ours_obj(obj)


def _from_ours_obj(obj: Any) -> TraceData:
    events = obj.get("traceEvents")
    if not isinstance(events, list):
        raise TraceFormatError("expected a JSON list of events or an object with a 'traceEvents' list")
    return _from_ours([events], obj["otherData"])


def _from_ours(event_chunks: Iterable[list[Any]], other: dict[str, Any]) -> TraceData:
    try:
        return _from_chrome(event_chunks, other)
    except TraceFormatError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        where = getattr(e, "opprof_where", "trace header")
        raise TraceFormatError(f"{where}: malformed field: {type(e).__name__}: {e}") from None


def _from_chrome(event_chunks: Iterable[list[Any]], other: dict[str, Any]) -> TraceData:
    ours = other.get("opprof")
    reader = _OwnEventReader(int(ours["t0_ns"]) if ours else 0)
    t0, add_span, read = reader.t0, reader.spans.append, reader.read
    i = -1
    for events in event_chunks:
        for ev in events:
            i += 1
            # The bulk of a file: a well-formed X slice, read inline. Anything else (or anything
            # odd about it) takes the careful path, which names the event when it is wrong.
            if type(ev) is dict and ev.get("ph") == "X":
                ts: Any = ev.get("ts")
                dur: Any = ev.get("dur", 0)
                tt, td = type(ts), type(dur)
                if (tt is float or tt is int) and (td is float or td is int) and dur >= 0:
                    start = t0 + round(ts * 1e3)
                    end = start + round(dur * 1e3)
                    name, cat, args = str(ev.get("name", "")), str(ev.get("cat", "")), ev.get("args") or None
                    if args is not None:
                        role = args.get("role")
                        if type(role) is str:
                            args["role"] = ROLE_OF.get(role, role)
                    add_span(Span(name, cat, ev.get("tid", 0), start, end, args))
                    continue
            try:
                read(ev, i)
            except TraceFormatError:
                raise
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                e.opprof_where = f"event {i}"  # type: ignore[union-attr]
                raise
        del events
    return reader.trace(ours)


class _OwnEventReader:
    """What reading opprof's own Chrome events gathers, event by event, until the trace is built."""

    def __init__(self, t0: int) -> None:
        self.t0 = t0
        self.names: dict[int, str] = {}
        self.order: dict[int, int] = {}
        self.spans: list[Span] = []
        self.parents: dict[int, Span] = {}
        self.instants: list[Instant] = []
        self.counters: list[CounterSample] = []
        # custom-op async tracks: open ``b`` events per (tid, invocation id), matched by ``e``
        self.open_b: dict[tuple[int, Any], list[dict[str, Any]]] = {}
        self.flows: list[Flow] = []
        self.open_flows: dict[Any, list[dict[str, Any]]] = {}  # ``s`` events waiting for their ``f``

    def read(self, ev: Any, i: int) -> None:
        """Take event number ``i``; raise :class:`TraceFormatError` naming it when it is wrong."""
        if not isinstance(ev, dict):
            raise TraceFormatError(f"event {i}: expected an object, got {type(ev).__name__}")
        t0 = self.t0
        ph = ev.get("ph")
        tid = ev.get("tid", 0)
        if ph == "M":
            if ev.get("name") == "thread_name":
                self.names[tid] = str((ev.get("args") or {}).get("name", ""))
            elif ev.get("name") == "thread_sort_index":
                self.order[tid] = int((ev.get("args") or {}).get("sort_index", 0))
        elif ph == "X":
            start = _ns(ev.get("ts"), t0, i)
            dur = ev.get("dur", 0)
            end = start + round(dur * 1e3) if isinstance(dur, (int, float)) else start
            if end < start:
                raise TraceFormatError(f"event {i}: negative duration {dur!r}")
            args = ev.get("args") or None
            if args is not None and type(args.get("role")) is str:
                args["role"] = ROLE_OF.get(args["role"], args["role"])
            self.spans.append(Span(str(ev.get("name", "")), str(ev.get("cat", "")), tid, start, end, args))
        elif ph == "b" and ev.get("cat") == CUSTOM_OP:
            self.open_b.setdefault((tid, ev.get("id")), []).append(ev)
        elif ph == "e" and ev.get("cat") == CUSTOM_OP:
            stack = self.open_b.get((tid, ev.get("id")))
            if stack:
                b = stack.pop()
                args = b.get("args") or {}
                if args.get("role") == Role.PARENT:
                    start, end = _ns(b.get("ts"), t0, i), _ns(ev.get("ts"), t0, i)
                    parent_args = {**args, "role": Role.PARENT}
                    self.parents[args["invocation"]] = Span(str(b.get("name", "")), CUSTOM_OP, tid, start, end, parent_args)
        elif ph == "s":
            self.open_flows.setdefault(ev.get("id"), []).append(ev)
        elif ph == "f":
            starts = self.open_flows.get(ev.get("id"))
            if starts:
                src = starts.pop()
                src_ts, dst_ts = _ns(src.get("ts"), t0, i), _ns(ev.get("ts"), t0, i)
                name, cat = str(src.get("name", "")), str(src.get("cat", ""))
                fid: Any = src.get("id")  # as the file has it
                self.flows.append(Flow(fid, name, cat, src.get("tid", 0), src_ts, tid, dst_ts))
        elif ph in ("i", "I"):
            name, cat = str(ev.get("name", "")), str(ev.get("cat", ""))
            self.instants.append(Instant(name, cat, tid, _ns(ev.get("ts"), t0, i), ev.get("args")))
        elif ph == "C":
            self.counters.append(CounterSample(str(ev.get("name", "")), _ns(ev.get("ts"), t0, i), dict(ev.get("args") or {})))

    def trace(self, ours: Any) -> TraceData:
        spans = self.spans
        spans.extend(self.parents.values())
        spans.sort(key=lambda s: (s.start, -s.end))
        order, names = self.order, self.names
        tids = sorted({*names, *(s.tid for s in spans)}, key=lambda t: (order.get(t, 1 << 30), t))
        flows = [Flow(*f) for f in ours["flows"]] if ours and "flows" in ours else self.flows
        meta = dict(ours.get("metadata", {})) if ours else {"producer": "chrome-json"}
        # An imported trace keeps each thread's process (small int) in its metadata: give it back.
        pids = {row[0]: row[1] for row in meta.get("source_threads", ()) if isinstance(row, list) and len(row) == 4}
        threads = [ThreadInfo(t, names.get(t) or f"thread {t}", pids.get(t, 0)) for t in tids]
        return TraceData(threads=threads, spans=spans, instants=self.instants, counters=self.counters, flows=flows, metadata=meta)
