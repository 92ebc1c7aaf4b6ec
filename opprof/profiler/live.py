"""A live feed of the spans a running recorder has finished, for a view that grows while work runs.

:meth:`LiveFeed.poll` returns only the spans finished since the last poll, as NumPy columns. It
builds no trace: it remembers how far it has read each thread's lists (:class:`~.build.ThreadRecords`)
and reads the new tail. The lists only ever grow and a thread appends without a lock, so the
tail is read as ``lst[seen:len(lst)]``: ``len`` and the slice are each one step under the GIL, and
a record appended in between is simply read by the next poll. Nothing is read twice.

What a span is called and which role it has follows :meth:`~.recorder.Recorder.build` (so the
live view and the final timeline agree), except that a custom op's ``parent`` span is left out:
it needs its engine op and its ``Dummy_Wait``, which finish on different threads and polls.
The final trace has it.

A poll is capped (:data:`POLL_CAP`): past it, spans are kept at an even stride and the rest
counted in ``skipped``, so a cell of a million ops cannot flood the page. Cost in GIL time,
measured on this machine (2 cores, Python 3.11, medians of 5, ``benchmarks/live.py``'s rows,
2026-12-05): a poll of 5,000 new plain ops 0.8 ms; of 1,000,000, strided down to the cap, 1.8 ms;
a poll that finds nothing, 0.03 ms; of 1,000 custom-op calls (4,000 spans, their records read one
by one, then thinned) 3.2 ms (2026-12-02).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np

from ..engine import Invocation
from ..trace import Role
from ..trace.columns import COLLECTION_ROLE, NO_ROLE, ROLE_CODE
from ..trace.records import GC_CATEGORY
from .build import (
    BUF_INFO,
    BUF_KIND,
    BUF_NAME,
    BUF_PUSHED,
    BUF_T0,
    BUF_T1,
    DUMMY,
    FAM_INV,
    FAM_KIND,
    FAM_T0,
    FAM_T1,
    NAME,
    NOTE_INV,
    OP,
    PYTHON,
    SUB_NOTE,
    T0,
    T1,
    USER,
    WAIT_REC,
)
from .recorder import Recorder

__all__ = ["POLL_CAP", "LiveFeed", "LiveSpans"]

#: Spans one poll returns at most: at four polls a second (:mod:`opprof.jupyter.live`) 8,000
#: spans a second, a 58 kB message a poll (29 bytes a span), and the page's 20,000 a source
#: (:data:`opprof.view.live.ROLLOVER`) hold the last 2.5 s of even the busiest cell. Spans that
#: come faster are narrower than a pixel anyway.
POLL_CAP = 2_000

_PYTHON, _SUBOP, _WAIT, _DUMMY = (ROLE_CODE[r] for r in (Role.PYTHON, Role.SUBOP, Role.WAIT, Role.DUMMY_WAIT))
# Plain ops' and sub-ops' records start alike: one getter each reads both.
_T0, _T1, _NAME = itemgetter(T0), itemgetter(T1), itemgetter(NAME)


@dataclass(frozen=True)
class LiveSpans:
    """The spans finished since the previous poll (columns of equal length), and where things stand.

    ``start``/``end`` are µs since the recording started; ``thread`` indexes ``threads`` (every
    recording thread's name so far, in the order they first recorded: a lane each); ``role`` holds
    the trace's role codes (:data:`~opprof.trace.columns.ROLE_CODE`, 0 for a span outside any
    custom op, :data:`~opprof.trace.columns.COLLECTION_ROLE` for a garbage collection); ``outer``
    marks spans that others on their thread nest in (a custom op's Python, a user's
    ``Task``/``Frame``), which a view draws underneath.
    """

    threads: list[str]
    thread: np.ndarray  # int32
    start: np.ndarray  # float64 µs
    end: np.ndarray  # float64 µs
    name: list[str]
    role: np.ndarray  # int8
    outer: np.ndarray  # bool
    skipped: int = 0  # finished spans this poll left out (over the cap)
    total: int = 0  # finished spans seen so far, this poll's included (sent or skipped)
    now_us: float = 0.0  # the poll's time, µs since the recording started
    stopped: bool = False  # the recorder has stopped: nothing more will come
    t_start_ns: int = field(default=0, repr=False)

    def __len__(self) -> int:
        return len(self.start)


class LiveFeed:
    """Polls a :class:`~.recorder.Recorder` while it records (see the module docstring)."""

    def __init__(self, recorder: Recorder, cap: int = POLL_CAP) -> None:
        if cap < 1:
            raise ValueError(f"cap must be at least 1, got {cap}")
        self.recorder = recorder
        recorder.watched = True  # read after stop() too: its records are not released
        self.cap = int(cap)
        self._seen: list[list[int]] = []  # per thread (its records' index): how far plain, sub, fam, buf were read
        self._total = 0
        self._names: dict[tuple[str, bool, str], str] = {}  # ``Type::op`` strings, made once each

    def poll(self) -> LiveSpans:
        """The spans finished since the last poll (at most ``cap``; see :class:`LiveSpans`)."""
        rec = self.recorder
        t_stop = rec.t_stop
        stopped = t_stop is not None
        now = t_stop if t_stop is not None else rec.clock()
        threads = rec.thread_records()
        seen = self._seen
        while len(seen) < len(threads):
            seen.append([0, 0, 0, 0])
        # Where each list ends now: read once, so every count below describes the same records.
        ends = [(r, s, len(r.plain), len(r.sub), len(r.fam), len(r.buf)) for r, s in zip(threads, seen, strict=True)]
        # Past twice the cap, a whole stride is taken while slicing (so a million new records cost
        # a slice, not a million reads), leaving between one and two caps' worth; the columns are
        # then thinned to the cap exactly, evenly.
        new = sum(p - s[0] + q - s[1] + f - s[2] + b - s[3] for _, s, p, q, f, b in ends)
        step = new // self.cap if new >= 2 * self.cap else 1
        cols: list[tuple[Any, ...]] = []
        skipped = 0
        for r, s, p, q, f, b in ends:
            plain, sub = r.plain[s[0] : p : step], r.sub[s[1] : q : step]
            skipped += (p - s[0]) - len(plain) + (q - s[1]) - len(sub)
            cols.append((r.index, plain, sub, r.fam[s[2] : f], r.buf[s[3] : b]))
            s[:] = [p, q, f, b]
        out = self._columns(cols, step)
        skipped += out.pop()
        n = len(out[1])
        if n > self.cap:
            keep = np.linspace(0, n - 1, self.cap).astype(np.int64)
            skipped += n - self.cap
            out = [c[keep] if isinstance(c, np.ndarray) else [c[i] for i in keep.tolist()] for c in out]
        thread, start, end, name, role, outer = out
        self._total += len(start) + skipped
        t0 = rec.t_start
        return LiveSpans(
            threads=[r.name for r in threads],
            thread=thread,
            start=(start - t0) / 1e3,
            end=(end - t0) / 1e3,
            name=name,
            role=role,
            outer=outer,
            skipped=skipped,
            total=self._total,
            now_us=(now - t0) / 1e3,
            stopped=stopped,
            t_start_ns=t0,
        )

    def _columns(self, cols: list[tuple[Any, ...]], step: int) -> list[Any]:
        """(thread, start ns, end ns, name, role, outer) of the sliced records, then the count skipped."""
        label = self._label
        threads: list[np.ndarray] = []
        t0s: list[list[int]] = []
        t1s: list[list[int]] = []
        names: list[list[str]] = []
        roles: list[np.ndarray] = []
        outers: list[np.ndarray] = []
        # fam and buf records become spans one by one (few; see poll), then take the stride.
        o_thread: list[int] = []
        o_t0: list[int] = []
        o_t1: list[int] = []
        o_name: list[str] = []
        o_role: list[int] = []
        o_outer: list[bool] = []
        for index, plain, sub, fam, buf in cols:
            # Plain ops and sub-ops: columns in C (``map(itemgetter)``), names looked up per distinct pair.
            n = len(plain) + len(sub)
            if n:
                both = plain + sub
                threads.append(np.full(n, index, np.int32))
                t0s.append(list(map(_T0, both)))
                t1s.append(list(map(_T1, both)))
                names.append(list(map(_NAME, plain)) + [label(x[SUB_NOTE][NOTE_INV], x[NAME]) for x in sub])
                roles.append(np.concatenate([np.zeros(len(plain), np.int8), np.full(len(sub), _SUBOP, np.int8)]))
                outers.append(np.zeros(n, bool))
            for f in fam:
                kind = f[FAM_KIND]
                if kind == PYTHON or kind == DUMMY:  # a START is the instant it handed over: no span
                    o_thread.append(index)
                    o_t0.append(f[FAM_T0])
                    o_t1.append(f[FAM_T1])
                    o_name.append(label(f[FAM_INV], "pure_python" if kind == PYTHON else "Dummy_Wait"))
                    o_role.append(_PYTHON if kind == PYTHON else _DUMMY)
                    o_outer.append(kind == PYTHON)
            for r in buf:
                kind, name = r[BUF_KIND], r[BUF_NAME]
                if kind == OP:
                    pushed_in = r[BUF_PUSHED]
                    sub_op = isinstance(pushed_in, Invocation)
                    o_name.append(label(pushed_in, name) if sub_op else name)
                    o_role.append(_SUBOP if sub_op else NO_ROLE)
                elif kind == WAIT_REC:
                    info = r[BUF_INFO]
                    own = isinstance(info, Invocation)
                    o_name.append(label(info, name) if own else name)
                    o_role.append(_WAIT if own else NO_ROLE)
                elif kind == USER:
                    o_name.append(name)
                    o_role.append(COLLECTION_ROLE if r[BUF_INFO] == GC_CATEGORY else NO_ROLE)
                else:  # errors, instants, counters: not spans
                    continue
                o_thread.append(index)
                o_t0.append(r[BUF_T0])
                o_t1.append(r[BUF_T1])
                o_outer.append(kind == USER)
        m = len(o_t0)
        taken = range(0, m, step)
        skipped = m - len(taken)
        if m:
            threads.append(np.array(o_thread[::step], np.int32))
            t0s.append(o_t0[::step])
            t1s.append(o_t1[::step])
            names.append(o_name[::step])
            roles.append(np.array(o_role[::step], np.int8))
            outers.append(np.array(o_outer[::step], bool))
        t0 = list(chain.from_iterable(t0s))
        t1 = list(chain.from_iterable(t1s))
        return [
            np.concatenate(threads) if threads else np.zeros(0, np.int32),
            np.fromiter(t0, np.int64, len(t0)),
            np.fromiter(t1, np.int64, len(t1)),
            list(chain.from_iterable(names)),
            np.concatenate(roles) if roles else np.zeros(0, np.int8),
            np.concatenate(outers) if outers else np.zeros(0, bool),
            skipped,
        ]

    def _label(self, inv: Invocation, name: str) -> str:
        """``Type::name`` (``_backward_Type::name``), as the final trace names a custom op's spans."""
        key = (inv.op_type, inv.backward, name)
        try:
            return self._names[key]
        except KeyError:
            text = self._names[key] = f"{inv.name}::{name}"
            return text
