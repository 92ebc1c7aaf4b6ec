"""Reading a Chrome JSON file that opprof wrote straight into columns, or saying it cannot.

:func:`.chrome.save` writes one chunk of events per line. Here each line is decoded by msgspec
into small typed structs (no dict per event: about twice as fast as orjson on these files) and
every step after that works on whole lines at once: the slices' columns through ``map`` and
NumPy, the custom-op tracks, the thread states' ``gil`` tracks and flow arrows matched as brackets
with array operations.

Anything this path does not expect (a field of the wrong type, a negative duration, a track
that closes more than it opened, a phase it does not read) raises :class:`NotFast`, and the
careful reader in :mod:`.chrome` reads the file instead: it gives the same trace, and names the
event when one is wrong. So this module decides only how fast a file loads, never what it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import compress, repeat
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np

from ..columns import FlowTable, SpanTable, StringTable
from ..records import CUSTOM_OP, Role
from ..threadstates import GIL_CATEGORY, STATE_OF_LABEL

__all__ = ["NotFast", "read_lines"]


class NotFast(Exception):
    """The file holds something only the careful reader handles."""


class _Ev(msgspec.Struct, gc=False):
    """Every field an event opprof writes can have (others are ignored, as the careful reader does)."""

    ph: Any = None
    name: Any = ""
    cat: Any = ""
    pid: Any = 0  # read only from metadata events (tids are unique across a trace's processes)
    tid: Any = 0
    ts: Any = None
    dur: Any = 0
    id: Any = None
    args: Any = None


_DECODER = msgspec.json.Decoder(list[_Ev])


def _numbers(values: list[Any]) -> np.ndarray:
    """``values`` as float64, if every one is a JSON number (not a bool); else :class:`NotFast`."""
    types = set(map(type, values))
    if not types <= {int, float}:
        raise NotFast
    a = np.array(values, dtype=np.float64)
    if len(a) and not np.abs(a).max() * 1e3 < 2**62:  # out of a trace's range (or NaN): let the careful reader say so
        raise NotFast
    return a


def _ns(t0: int, us: np.ndarray) -> np.ndarray:
    # The careful reader's ``t0 + round(ts * 1e3)``: the same float product, rounded half to even.
    return t0 + np.rint(us * 1e3).astype(np.int64)


class _Gathered:
    """What the lines hold, as columns, until the whole file is read. Each line's events become
    columns before the next line is decoded, so the decoded structs (and the slices' args dicts)
    of one line only are alive at a time."""

    def __init__(self) -> None:
        self.strings = StringTable()  # shared by every line's table: concatenating needs no remap
        self.tables: list[SpanTable] = []
        # custom-op b/e events: is it a b, its (tid, id), its time; the b events that have args
        self.track_open: list[np.ndarray] = []
        self.track_tid: list[Any] = []
        self.track_id: list[Any] = []
        self.track_ts: list[np.ndarray] = []
        self.track_args: dict[int, tuple[Any, Any, Any]] = {}  # position -> (name, tid, args)
        # s/f events
        self.flow_open: list[np.ndarray] = []
        self.flow_id: list[Any] = []
        self.flow_name: list[Any] = []
        self.flow_cat: list[Any] = []
        self.flow_tid: list[Any] = []
        self.flow_ts: list[np.ndarray] = []
        # b/e events of the thread states' gil tracks: is it a b, its tid, its state (a b's), time, holder
        self.state_open: list[np.ndarray] = []
        self.state_tid: list[Any] = []
        self.state_code: list[int] = []
        self.state_ts: list[np.ndarray] = []
        self.state_holder: list[Any] = []


#: The category of the thread states' tracks, and each state by its slice name.
GIL = GIL_CATEGORY
_STATE_OF_LABEL = STATE_OF_LABEL

#: Thread-state runs as columns: (tid, state, start, end, holder).
Runs = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def read_lines(
    lines: Iterator[bytes], t0: int, point: Callable[[dict[str, Any]], None]
) -> tuple[SpanTable, FlowTable, Runs | None]:
    """The spans, flows and thread-state runs (None: no ``gil`` track) of the lines ``save`` wrote
    (each a chunk of events without brackets).

    The few other events (thread names, instants, counters) go to ``point`` as dicts: the careful
    reader's own handling, so both readers give them one meaning.
    """
    g = _Gathered()
    for line in lines:
        try:
            evs = _DECODER.decode(b"[" + line + b"]")
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise NotFast from None
        _line(g, evs, t0, point)
        del evs
    parents = _parents(g, t0)
    tables = g.tables + ([parents] if parents is not None else [])
    spans = SpanTable.concat(tables) if tables else SpanTable.empty()
    return spans.sorted_by_start(), _flows(g, t0), _runs(g, t0)


#: Phase -> a small code, so that each line is split by phase with integer comparisons.
_PH = {"X": 0, "b": 1, "e": 2, "s": 3, "f": 4}
_OTHER_PH = 5


def _line(g: _Gathered, evs: list[_Ev], t0: int, point: Callable[[dict[str, Any]], None]) -> None:
    ph = np.fromiter(map(_PH.get, map(attrgetter("ph"), evs), repeat(_OTHER_PH)), dtype=np.int8, count=len(evs))
    is_x = ph == 0
    if is_x.any():
        xs = list(compress(evs, is_x.tolist()))
        names = list(map(attrgetter("name"), xs))
        cats = list(map(attrgetter("cat"), xs))
        if set(map(type, names)) - {str} or set(map(type, cats)) - {str}:
            raise NotFast
        ts = _numbers(list(map(attrgetter("ts"), xs)))
        dur = _numbers(list(map(attrgetter("dur"), xs)))
        if (dur < 0).any():
            raise NotFast
        start = _ns(t0, ts)
        end = start + np.rint(dur * 1e3).astype(np.int64)
        args = list(map(attrgetter("args"), xs))
        if set(map(type, args)) - {type(None), dict}:
            raise NotFast
        tids = list(map(attrgetter("tid"), xs))
        try:
            g.tables.append(SpanTable.from_rows(names, cats, tids, start, end, args, strings=g.strings))
        except (TypeError, ValueError, OverflowError):
            raise NotFast from None
    is_be = (ph == 1) | (ph == 2)
    if is_be.any():
        is_gil = np.zeros(len(evs), dtype=bool)
        is_gil[is_be] = np.fromiter((ev.cat == GIL for ev in compress(evs, is_be.tolist())), dtype=bool, count=int(is_be.sum()))
        if is_gil.any():
            _states(g, list(compress(evs, is_gil.tolist())), ph[is_gil] == 1)
            is_be &= ~is_gil
    if is_be.any():
        evs_be = list(compress(evs, is_be.tolist()))
        if set(map(attrgetter("cat"), evs_be)) != {CUSTOM_OP}:
            raise NotFast  # another tool's async events: the careful reader skips them as it should
        base = len(g.track_tid)
        g.track_open.append(ph[is_be] == 1)
        g.track_tid.extend(map(attrgetter("tid"), evs_be))
        g.track_id.extend(map(attrgetter("id"), evs_be))
        g.track_ts.append(_numbers(list(map(attrgetter("ts"), evs_be))))
        # Only an opening event with args can be a parent: the children's carry none.
        for k, ev in enumerate(evs_be):
            if ev.args is not None and ev.ph == "b":
                g.track_args[base + k] = (ev.name, ev.tid, ev.args)
    is_sf = (ph == 3) | (ph == 4)
    if is_sf.any():
        evs_sf = list(compress(evs, is_sf.tolist()))
        g.flow_open.append(ph[is_sf] == 3)
        g.flow_id.extend(map(attrgetter("id"), evs_sf))
        g.flow_name.extend(map(attrgetter("name"), evs_sf))
        g.flow_cat.extend(map(attrgetter("cat"), evs_sf))
        g.flow_tid.extend(map(attrgetter("tid"), evs_sf))
        g.flow_ts.append(_numbers(list(map(attrgetter("ts"), evs_sf))))
    for ev in compress(evs, (ph == _OTHER_PH).tolist()):
        point({"ph": ev.ph, "name": ev.name, "cat": ev.cat, "pid": ev.pid, "tid": ev.tid, "ts": ev.ts, "args": ev.args})


def _states(g: _Gathered, evs: list[_Ev], opens: np.ndarray) -> None:
    """Gather the ``b``/``e`` events of ``gil`` tracks (a ``b`` names its state, and its holder if any)."""
    g.state_open.append(opens)
    g.state_tid.extend(map(attrgetter("tid"), evs))
    g.state_ts.append(_numbers(list(map(attrgetter("ts"), evs))))
    for ev, b in zip(evs, opens.tolist(), strict=True):
        if not b:
            g.state_code.append(0)
            g.state_holder.append(-1)
            continue
        code = _STATE_OF_LABEL.get(ev.name) if type(ev.name) is str else None
        args = ev.args
        if code is None or not (args is None or type(args) is dict):
            raise NotFast  # the careful reader names it
        g.state_code.append(code)
        g.state_holder.append(-1 if args is None else args.get("holder", -1))


def _runs(g: _Gathered, t0: int) -> Runs | None:
    """A run per ``b`` and the ``e`` that closes it on its thread's ``gil`` track."""
    if not g.state_tid:
        return None
    if set(map(type, g.state_tid)) - {int} or set(map(type, g.state_holder)) - {int}:
        raise NotFast
    opens = np.concatenate(g.state_open)
    tid = np.array(g.state_tid, dtype=np.int64)
    ts = _ns(t0, np.concatenate(g.state_ts))
    b, e = _brackets(tid, opens)
    code = np.array(g.state_code, dtype=np.int8)
    holder = np.array(g.state_holder, dtype=np.int64)
    return tid[b], code[b], ts[b], ts[e], holder[b]


def _keys(values: list[Any]) -> np.ndarray:
    """Integer codes of hashable values (ids, (tid, id) pairs), first-seen order."""
    try:
        index: dict[Any, int] = {}
        return np.fromiter(map(index.setdefault, values, iter(range(len(values)))), dtype=np.int64, count=len(values))
    except TypeError:
        raise NotFast from None


def _pair_keys(tids: list[Any], ids: list[Any]) -> np.ndarray:
    """One int64 key per (tid, id): arithmetic when both are small ints (always, in opprof's own
    files), else codes through a dict."""
    if not (set(map(type, tids)) - {int}) and not (set(map(type, ids)) - {int}):
        try:
            t, i = np.array(tids, dtype=np.int64), np.array(ids, dtype=np.int64)
        except OverflowError:
            t = i = np.zeros(0, dtype=np.int64)
        if len(t) and t.min() >= 0 and t.max() < 2**30 and i.min() >= 0 and i.max() < 2**32:
            return t * 2**32 + i
    return _keys(list(zip(tids, ids, strict=True)))


def _brackets(key: np.ndarray, opens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (opening position, closing position) of events in file order, matched per key as a
    stack (an open pushes, a close pops the latest open of its key); :class:`NotFast` when a key
    closes more than it opened (the careful reader ignores such a close)."""
    delta = np.where(opens, 1, -1)
    # Stable sorts (timsort): a key's events mostly lie together in the file, so these are merges.
    order = np.argsort(key, kind="stable")
    k, d = key[order], delta[order]
    first = np.concatenate(([True], k[1:] != k[:-1]))
    csum = np.cumsum(d)
    base = np.maximum.accumulate(np.where(first, csum - d, np.iinfo(np.int64).min))
    depth = csum - base  # each key's own running depth, after each event
    if (depth < 0).any():
        raise NotFast
    level = np.where(d > 0, depth, depth + 1)  # the stack level an open fills or a close empties
    by = np.lexsort((level, k))  # per key and level, in file order: open, close, open, close ...
    pos = order[by]
    o = d[by] > 0
    kb, lb = k[by], level[by]
    same = (kb[1:] == kb[:-1]) & (lb[1:] == lb[:-1])
    pair = np.flatnonzero(o[:-1] & ~o[1:] & same)
    return pos[pair], pos[pair + 1]


def _parents(g: _Gathered, t0: int) -> SpanTable | None:
    """A span per custom-op parent track (its ``b`` holds the parent's args; its ``e`` ends it)."""
    if not g.track_tid:
        return None
    opens = np.concatenate(g.track_open)
    key = _pair_keys(g.track_tid, g.track_id)
    ts = _ns(t0, np.concatenate(g.track_ts))
    b, e = _brackets(key, opens)
    by_close = np.argsort(e, kind="stable")  # the careful reader makes each parent at its close
    b, e = b[by_close], e[by_close]
    with_args = np.zeros(len(opens), dtype=bool)
    with_args[list(g.track_args)] = True
    keep_pair = with_args[b]
    b, e = b[keep_pair], e[keep_pair]
    names, tids, starts, ends, args = [], [], [], [], []
    for i, j in zip(b.tolist(), e.tolist(), strict=True):
        name, tid, a = g.track_args[i]
        if not isinstance(a, dict):
            raise NotFast
        if a and a.get("role") == Role.PARENT:
            if type(a.get("invocation")) is not int:
                raise NotFast
            names.append(str(name))
            tids.append(tid)
            starts.append(int(ts[i]))
            ends.append(int(ts[j]))
            args.append(dict(a))
    # One parent per invocation: the last one read, in the order invocations were first read.
    last: dict[int, int] = {}
    for k, a in enumerate(args):
        last[a["invocation"]] = k
    keep = list(last.values())
    return SpanTable.from_rows(
        [names[k] for k in keep],
        [CUSTOM_OP] * len(keep),
        [tids[k] for k in keep],
        [starts[k] for k in keep],
        [ends[k] for k in keep],
        [args[k] for k in keep],
        strings=g.strings,
    )


def _flows(g: _Gathered, t0: int) -> FlowTable:
    """An arrow per ``s`` and the ``f`` that closes it (matched per id as a stack), in ``f`` order."""
    if not g.flow_id:
        return FlowTable.empty()
    opens = np.concatenate(g.flow_open)
    key = _keys(g.flow_id)
    ts = _ns(t0, np.concatenate(g.flow_ts))
    s, f = _brackets(key, opens)
    by_f = np.argsort(f, kind="stable")
    s, f = s[by_f].tolist(), f[by_f].tolist()
    pick = list(map(g.flow_name.__getitem__, s)), list(map(g.flow_cat.__getitem__, s))
    if set(map(type, pick[0])) - {str} or set(map(type, pick[1])) - {str}:
        raise NotFast
    return FlowTable.from_rows(
        list(map(g.flow_id.__getitem__, s)),
        pick[0],
        pick[1],
        list(map(g.flow_tid.__getitem__, s)),
        ts[s],
        list(map(g.flow_tid.__getitem__, f)),
        ts[f],
    )
