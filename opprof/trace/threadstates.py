"""What each thread was doing, over time, with respect to the GIL: the evidence for *why* work waited.

A Python engine's ready work most often waits for the GIL (another thread holds it, running Python)
or for a thread to wake, and neither shows in spans. While profiling with the compiled part
(:mod:`opprof.engine.gil`), a sampler records every few hundred µs which thread held the GIL and
what the others did; the profiler turns those samples into :class:`ThreadStates`: per thread,
runs of one :class:`ThreadState`, each with the thread that held the GIL meanwhile for a
``WAIT``. Edges are known to within one sampling period (``period_ns``).

A trace without them (the pure-Python path, a free-threaded build, another tool's trace) has
``TraceData.thread_states is None`` and says why in ``metadata["gil"]["why_not"]``: the analyses
then say they cannot tell the GIL from sleep or I/O rather than guess.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "CPU_WAIT_METADATA",
    "cpu_outside_python",
    "cpu_wait_ns",
    "GIL_CATEGORY",
    "GIL_METADATA",
    "HOLDING",
    "STATE_LABELS",
    "STATE_OF_LABEL",
    "PoolCondition",
    "ThreadState",
    "ThreadStates",
]

#: Metadata key: ``{"period_ns": …, "source": …}`` where the GIL was sampled, ``{"why_not": …}`` where not.
GIL_METADATA = "gil"
#: Metadata key: ``{"source": …, "ns": {"<tid>": ns}, "outside_python": {"ns": …, "threads": …}}``,
#: how long the OS kept each thread waiting for a CPU while recording, and how long the process's
#: threads outside Python ran meanwhile (:mod:`opprof.profiler.cpuwait`), or ``{"why_not": …}``.
CPU_WAIT_METADATA = "cpu_wait"


class ThreadState(enum.IntEnum):
    """A thread's state at a moment, as the sampler tells it (values as :class:`opprof.engine.gil.GilState`)."""

    HELD = 1  # held the GIL: running Python (or C code that kept the GIL)
    WAIT = 2  # waiting for the GIL (parked on the GIL's lock), held by another thread
    BLOCKED = 3  # in another system call: asleep, in I/O, on a lock or a queue (idle in the engine)
    RUNNING = 4  # on a CPU without the GIL: C code that released it (NumPy on large arrays)
    RUNNABLE = 5  # wanted a CPU and had none (a busy machine): neither the GIL nor blocked
    #: Held the GIL without running for a whole sampling period: the OS had given its CPU to other
    #: work (a busy machine), or it was blocked in C code that kept the GIL. Its waiters still
    #: waited for the GIL, but what held them up was the CPU (or that C code), not its Python.
    HELD_OFF_CPU = 6


def cpu_wait_ns(metadata: dict[str, Any]) -> dict[int, int] | None:
    """``metadata["cpu_wait"]["ns"]`` read back: ns per thread tid (keys are strings in JSON); None
    where the trace counted none. The one reader of that record (the analyses, the merge)."""
    meta = metadata.get(CPU_WAIT_METADATA)
    by_tid = meta.get("ns") if isinstance(meta, dict) else None
    if not isinstance(by_tid, dict):
        return None
    return {int(k): v for k, v in by_tid.items() if str(k).isdigit() and isinstance(v, int) and not isinstance(v, bool)}


def cpu_outside_python(metadata: dict[str, Any]) -> tuple[int, int] | None:
    """``metadata["cpu_wait"]["outside_python"]`` read back: (ns on a CPU, threads) of the process's
    threads outside Python while recording (a BLAS pool's); None where not counted. The one reader
    of that record (the why-text, the merge)."""
    meta = metadata.get(CPU_WAIT_METADATA)
    out = meta.get("outside_python") if isinstance(meta, dict) else None
    if not isinstance(out, dict):
        return None
    ns, threads = out.get("ns"), out.get("threads")
    ok = all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (ns, threads))
    return (ns, threads) if ok else None  # type: ignore[return-value]


#: Every state, in column order of :meth:`ThreadStates.overlap`.
STATES = tuple(ThreadState)

#: Each state in words: the timeline's legend and hover, and the slice names of the ``gil`` tracks in
#: Chrome JSON (opprof reads its own files back by these names).
STATE_LABELS = {
    ThreadState.HELD: "holds the GIL",
    ThreadState.WAIT: "waits for the GIL",
    ThreadState.BLOCKED: "blocked",
    ThreadState.RUNNING: "runs without the GIL",
    ThreadState.RUNNABLE: "waits for a CPU",
    ThreadState.HELD_OFF_CPU: "holds the GIL, off a CPU",
}
#: The states in which a thread held the GIL (on a CPU or not): who a waiter waited for.
HOLDING = (ThreadState.HELD, ThreadState.HELD_OFF_CPU)
#: A slice name of a ``gil`` track -> its state's value.
STATE_OF_LABEL = {label: int(s) for s, label in STATE_LABELS.items()}
#: The Chrome JSON category of the states' tracks (one async track per thread: :mod:`.formats.chrome`).
GIL_CATEGORY = "gil"


@dataclass(eq=False)
class ThreadStates:
    """Runs of one state per thread, as columns sorted by (tid, start); runs of a thread never overlap.

    ``holder`` is, for a ``WAIT`` run, the tid of the thread that held the GIL meanwhile (-1: the
    GIL was free, or held by a thread the sampler did not know); -1 for the other states.
    """

    tid: np.ndarray  # int64
    state: np.ndarray  # int8 (ThreadState)
    start: np.ndarray  # int64 ns
    end: np.ndarray  # int64 ns
    holder: np.ndarray  # int64 tid or -1
    period_ns: int = 0

    def __post_init__(self) -> None:
        self.tid = np.asarray(self.tid, dtype=np.int64)
        self.state = np.asarray(self.state, dtype=np.int8)
        self.start = np.asarray(self.start, dtype=np.int64)
        self.end = np.asarray(self.end, dtype=np.int64)
        self.holder = np.asarray(self.holder, dtype=np.int64)
        t, a = self.tid, self.start
        if len(t) > 1 and not bool(np.all((t[1:] > t[:-1]) | ((t[1:] == t[:-1]) & (a[1:] >= a[:-1])))):
            # Sorted already is the common case (a sweep's output, a take of sorted runs): checked
            # in one pass, where a sort cost ~0.1 ms a construction at 10,000 runs.
            order = _by_thread_then_time(t, a)
            for name in ("tid", "state", "start", "end", "holder"):
                setattr(self, name, getattr(self, name)[order])

    def __len__(self) -> int:
        return len(self.tid)

    @classmethod
    def empty(cls, period_ns: int = 0) -> ThreadStates:
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z.astype(np.int8), z, z, z, period_ns)

    def check(self) -> list[str]:
        """What is wrong with the columns (empty when nothing): lengths, ends before starts, a
        thread's runs that overlap, unknown states."""
        n = len(self.tid)
        problems = [
            f"column {c} has {len(getattr(self, c))} rows, tid has {n}"
            for c in ("state", "start", "end", "holder")
            if len(getattr(self, c)) != n
        ]
        if problems:
            return problems
        if np.any(self.end < self.start):
            problems.append(f"{int(np.count_nonzero(self.end < self.start))} thread-state runs end before they start")
        same = self.tid[1:] == self.tid[:-1]
        if np.any(same & (self.start[1:] < self.end[:-1])):
            problems.append("a thread's state runs overlap")
        if not np.isin(self.state, [int(s) for s in STATES]).all():
            problems.append("unknown thread states")
        return problems

    def take(self, keep: np.ndarray) -> ThreadStates:
        return ThreadStates(self.tid[keep], self.state[keep], self.start[keep], self.end[keep], self.holder[keep], self.period_ns)

    def overlaid(self, exact: ThreadStates, holds: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> ThreadStates:
        """These runs with ``exact`` ones (timed, not sampled: the engine's hand-offs) in their place
        wherever the exact ones are. An exact ``WAIT`` run without a holder, or one a sampling
        period long or longer, gets the thread these runs saw holding the GIL for most of it (where
        they saw none: its own, or -1). ``exact``'s runs of a thread must not overlap each other.

        ``holds``, ``(tid, start, end)`` columns, disjoint: who held the GIL when by a timed taking
        of it (:func:`opprof.profiler.gil._held_until`). Another thread's sampled holding stretched
        over one (a sample's run lasts a whole period) is cut away, and every wait for the GIL it
        covers names its thread (:func:`_waits_named_by`). Its own thread's state is what the runs
        say: the recording gives it an exact ``HELD`` run where a timed wait of another met the
        hold (:func:`opprof.profiler.gil._held_while_waited`), and leaves the samples elsewhere
        (it may have let the GIL go in a sleep, with no one else wanting it)."""
        z = np.zeros(0, dtype=np.int64)
        h_tid, h_a, h_b = (np.asarray(c, dtype=np.int64) for c in holds) if holds is not None else (z, z, z)
        if not len(exact) and not len(h_tid):
            return self
        by_start = np.argsort(h_a, kind="stable")
        h_tid, h_a, h_b = h_tid[by_start], h_a[by_start], h_b[by_start]
        # The samples outside the exact runs, each part keeping its run's state and holder: one
        # sweep for all (one per distinct state and holder cost 3-5 ms of a 2,000-call profile's
        # 21 ms build, 2026-12-04).
        cols, exact_cols = (self.tid, self.start, self.end), (exact.tid, exact.start, exact.end)
        fast = _outside_disjoint(*cols, *exact_cols) if len(self) and len(exact) else None
        tids, a, b, src = fast if fast is not None else _runs_outside(*cols, *exact_cols)
        cut = _unsorted(tids, self.state[src], a, b, self.holder[src], self.period_ns)
        if len(h_tid):
            cut = _holding_outside(cut, h_tid, h_a, h_b)
        # Holders are read from the samples *outside* the exact runs: a sampled HELD run stretches
        # one sample over a period (up to 4 ms while quiet), and where the exact runs say its
        # thread was parked meanwhile (the program gone into its wait just after the sample), it
        # did not hold the GIL then. Seen: a custom-op thread's 1 ms wait charged to "WaitForAll on
        # MainThread". With them, the exact holds.
        # An exact wait's own holder (the thread that held the GIL as it began: a hand-off reads it)
        # stands for a wait shorter than a sampling period, which no sample can resolve; a longer
        # one may have outlasted that holder (a putter that let go, then a spinner's turns), and
        # takes the thread sampled holding the GIL for most of it, where the samples name one.
        holder = exact.holder.copy()
        wait = exact.state == ThreadState.WAIT
        ask = np.flatnonzero(wait & ((holder < 0) | (exact.end - exact.start >= max(self.period_ns, 1))))
        # (The parts a hold covers name the hold's thread below, whatever the samples said.)
        if len(ask):
            sampled = cut._most_held(exact.tid[ask], exact.start[ask], exact.end[ask])
            holder[ask] = np.where(sampled >= 0, sampled, holder[ask])
        out = _joined(_unsorted(exact.tid, exact.state, exact.start, exact.end, holder, self.period_ns), cut)
        if len(h_tid):
            out = _waits_named_by(out, h_tid, h_a, h_b)
        # One sort, here: the steps above keep their parts in any order (each sort of a 2,000-call
        # profile's ~25,000 runs costs ~1 ms, and there were six).
        return ThreadStates(out.tid, out.state, out.start, out.end, out.holder, self.period_ns)

    def _most_held(self, tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Per wait ``[start, end)`` of thread ``tid``: the other thread these runs saw holding the
        GIL for most of it, -1 if none.

        Most of it, not at one moment of it: a sampled run stretches one sample over a whole
        period (1 ms), so a 5 ms wait behind a user's spinning thread had its middle land on an
        engine thread caught holding the GIL at one of the spinner's forced switches, and was
        charged to it. One holder per sample, so a sampler's HELD runs of all threads are
        disjoint: each wait meets a stretch of them, found by two sorted searches; a wait of a few
        µs meets one, and the rest are summed per (wait, thread) pair at once, with no pass per
        thread (one per thread cost ~1 ms of a 2,000-call profile's build)."""
        out = np.full(len(tid), -1, dtype=np.int64)
        held = np.flatnonzero(np.isin(self.state, HOLDING))
        held = held[np.argsort(self.start[held], kind="stable")]
        if not len(held) or not len(tid):
            return out
        if np.any(self.start[held][1:] < self.end[held][:-1]):  # not one sampler's (a file's): a pass per thread
            best = np.zeros(len(tid), dtype=np.int64)
            for t in np.unique(self.tid[held]).tolist():
                runs = held[self.tid[held] == t]
                got = self._covered(self.tid[runs], self.start[runs], self.end[runs], np.full(len(tid), t), start, end)
                better = (got > best) & (tid != t)
                out[better], best[better] = t, got[better]
            return out
        first, n = _stretches(self.start[held], self.end[held], start, end)
        one = np.flatnonzero(n == 1)
        th = self.tid[held[first[one]]]
        out[one] = np.where(th != tid[one], th, -1)
        n[one] = 0
        wait, k = _pairs(first, n)
        run = held[k]
        ns = np.minimum(self.end[run], end[wait]) - np.maximum(self.start[run], start[wait])
        th = self.tid[run]
        ok = (ns > 0) & (th != tid[wait])
        wait, th, ns = wait[ok], th[ok], ns[ok]
        if len(wait):
            threads, code = np.unique(th, return_inverse=True)
            keys, inv = np.unique(wait * len(threads) + code.ravel(), return_inverse=True)
            total = np.bincount(inv.ravel(), weights=ns)
            k_wait, k_th = keys // len(threads), threads[keys % len(threads)]
            order = np.lexsort((-total, k_wait))  # per wait, its thread with the most first
            top = order[np.concatenate(([True], k_wait[order][1:] != k_wait[order][:-1]))]
            out[k_wait[top]] = k_th[top]
        return out

    def overlap(self, tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """(n, len(STATES)) int64: how many ns of each interval ``[start, end)`` on thread ``tid``
        the thread spent in each state (column ``k`` is ``STATES[k]``); the rest was not sampled.

        One sorted search per interval end over each state's cumulative time: no loop per interval.
        """
        tid = np.asarray(tid, dtype=np.int64)
        start = np.asarray(start, dtype=np.int64)
        end = np.asarray(end, dtype=np.int64)
        out = np.zeros((len(tid), len(STATES)), dtype=np.int64)
        if not len(tid) or not len(self):
            return out
        for k, s in enumerate(STATES):
            runs = self.state == s
            if runs.any():
                out[:, k] = self._covered(self.tid[runs], self.start[runs], self.end[runs], tid, start, end)
        return out

    def holders(
        self, tid: np.ndarray, start: np.ndarray, end: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Who held the GIL while the intervals waited for it: (interval row, holder tid, ns, ns of
        it the holder held the GIL off a CPU), one row per (interval, holder) with any ``WAIT``
        time, summed (holder -1: none known). The waits' names are taken as they are: call it on
        :meth:`holders_checked` runs (an analysis's ``thread_states``)."""
        tid = np.asarray(tid, dtype=np.int64)
        start = np.asarray(start, dtype=np.int64)
        end = np.asarray(end, dtype=np.int64)
        none = (np.zeros(0, np.int64),) * 4
        wait = np.flatnonzero(self.state == ThreadState.WAIT)
        if not len(tid) or not len(wait):
            return none
        rows, holders, ns, off = [], [], [], []
        for h in np.unique(self.holder[wait]).tolist():
            runs = wait[self.holder[wait] == h]
            got = self._covered(self.tid[runs], self.start[runs], self.end[runs], tid, start, end)
            hit = np.flatnonzero(got > 0)
            rows.append(hit)
            holders.append(np.full(len(hit), h, dtype=np.int64))
            ns.append(got[hit])
            o_tid, o_a, o_b = self.off_cpu_parts(runs, h)
            none_off = np.zeros(len(hit), np.int64)
            off.append(self._covered(o_tid, o_a, o_b, tid[hit], start[hit], end[hit]) if len(o_tid) and len(hit) else none_off)
        return np.concatenate(rows), np.concatenate(holders), np.concatenate(ns), np.concatenate(off)

    def holder_runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(start, end, tid): who held the GIL when, as disjoint runs sorted by start: each thread's
        ``HELD`` and ``HELD_OFF_CPU`` runs, and where none is known, the holder a ``WAIT`` run
        names (read at a sample, or at a timed hand-off's wake: the exact waits of a 2 ms
        recording often have no sample between them, only the holder read as each began).
        Where two waits name different holders at once, the first thread's (lowest tid) is kept.
        The names are taken as they are: call it on :meth:`holders_checked` runs."""
        held = np.flatnonzero(np.isin(self.state, HOLDING))
        named = np.flatnonzero((self.state == ThreadState.WAIT) & (self.holder >= 0))
        none = np.zeros(0, dtype=np.int64)
        if not len(held) and not len(named):
            return none, none, none
        # Elementary pieces between every boundary; each takes a HELD run's thread where one covers
        # it, else the holder of the first waiting thread's run that covers it (one thread's runs
        # are disjoint, so each is one sorted search: HELD runs of two threads never overlap in a
        # sampler's states, but a file may say anything).
        t = np.unique(np.concatenate([self.start, self.end]))
        lo, hi = t[:-1], t[1:]
        mid = lo + (hi - lo) // 2
        who = np.full(len(lo), -1, dtype=np.int64)
        groups = [held[self.tid[held] == w] for w in np.unique(self.tid[held]).tolist()]
        groups += [named[self.tid[named] == w] for w in np.unique(self.tid[named]).tolist()]
        for rows in groups:
            hit, take = self._covering(rows, mid, who < 0)
            who[hit] = np.where(self.state[take] == ThreadState.WAIT, self.holder[take], self.tid[take])
        keep = who >= 0
        lo, hi, who = lo[keep], hi[keep], who[keep]
        if not len(lo):
            return lo, hi, who
        # Adjacent pieces of one holder are one run.
        new = np.ones(len(lo), dtype=bool)
        new[1:] = (who[1:] != who[:-1]) | (lo[1:] != hi[:-1])
        first = np.flatnonzero(new)
        last = np.append(first[1:], len(lo)) - 1
        return lo[first], hi[last], who[first]

    def _covering(self, rows: np.ndarray, at: np.ndarray, want: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Among disjoint runs ``rows``, the one covering each moment ``at`` where ``want``: (the
        moments' indices that have one, those runs' rows)."""
        rows = rows[np.argsort(self.start[rows], kind="stable")]
        j = np.searchsorted(self.start[rows], at, side="right") - 1
        hit = np.flatnonzero(want & (j >= 0) & (self.end[rows[np.maximum(j, 0)]] > at))
        return hit, rows[j[hit]]

    def off_cpu_parts(self, runs: np.ndarray, holder: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(tid, start, end) of the parts of rows ``runs`` (waits for the GIL that ``holder``
        held) during which the holder held it off a CPU (its ``HELD_OFF_CPU`` runs): what those
        waits really waited for was a CPU for the holder, or C code that kept the GIL."""
        w, a, b = self._parts_while(runs, holder, (ThreadState.HELD_OFF_CPU,))
        return self.tid[w], a, b

    def holders_checked(self) -> ThreadStates:
        """These runs with each wait's named holder kept only where that holder's own runs allow it.

        A wait names the holder it read as it began (a sample's, or a hand-off's at its wake),
        which may have let the GIL go since: where the holder's own runs say it held nothing
        (parked, itself waiting for the GIL, running without it), that part of the wait names no
        one (-1). Seen: a custom-op thread, sampled holding the GIL just before it parked, was named
        the holder of a millisecond it was parked through, exactly (its timed park), by the waits
        sampled with it. Where the holder has no run (not sampled then), the name stands.

        The one home of that rule: an analysis reads a trace's runs through it once
        (``Analysis.thread_states``), and every reader of holders (:meth:`holders`,
        :meth:`holder_runs`, the causes, the critical path, the timeline's hover) takes those runs
        as they are. The files keep the runs as recorded (a Chrome or ``.opprof`` file read back is
        the same trace), and are checked again when read. Returns ``self`` where nothing is
        contradicted."""
        named = np.flatnonzero((self.state == ThreadState.WAIT) & (self.holder >= 0))
        not_holding = tuple(s for s in STATES if s not in HOLDING)
        holders = np.unique(self.holder[named]).tolist()
        found = [self._parts_while(named[self.holder[named] == h], h, not_holding) for h in holders]
        if not any(len(f[0]) for f in found):
            return self
        w, a, b = (np.concatenate([f[i] for f in found]) for i in range(3))
        order = np.lexsort((a, w))  # a cut run's parts, in time order (one holder's runs: disjoint)
        w, a, b = w[order], a[order], b[order]
        first = np.concatenate(([True], w[1:] != w[:-1]))
        last = np.concatenate((w[1:] != w[:-1], [True]))
        # Per part: the named piece before it (from its run's start or the previous part's end),
        # the part itself (no one), and after a run's last part, the named rest of the run.
        piece_run = np.concatenate([w, w, w[last]])
        piece_a = np.concatenate([np.where(first, self.start[w], np.roll(b, 1)), a, b[last]])
        piece_b = np.concatenate([a, b, self.end[w[last]]])
        piece_holder = np.concatenate([self.holder[w], np.full(len(w), -1, dtype=np.int64), self.holder[w[last]]])
        ok = piece_b > piece_a
        uncut = np.ones(len(self), dtype=bool)
        uncut[w] = False
        rest = np.flatnonzero(uncut)
        run = np.concatenate([rest, piece_run[ok]])
        return ThreadStates(
            self.tid[run],
            self.state[run],
            np.concatenate([self.start[rest], piece_a[ok]]),
            np.concatenate([self.end[rest], piece_b[ok]]),
            np.concatenate([self.holder[rest], piece_holder[ok]]),
            self.period_ns,
        )

    def _parts_while(
        self, runs: np.ndarray, holder: int, states: tuple[ThreadState, ...]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row, start, end) of the parts of rows ``runs`` during which thread ``holder`` was in one of ``states``."""
        empty = (np.zeros(0, np.int64),) * 3
        off = np.flatnonzero((self.tid == holder) & np.isin(self.state, states))
        if not len(off) or not len(runs):
            return empty
        # One thread's runs are sorted and disjoint: each wait meets a stretch of them.
        oa, ob = self.start[off], self.end[off]
        which, k = _pairs(*_stretches(oa, ob, self.start[runs], self.end[runs]))
        w = runs[which]
        a, b = np.maximum(self.start[w], oa[k]), np.minimum(self.end[w], ob[k])
        keep = b > a
        return w[keep], a[keep], b[keep]

    def pool_condition(
        self,
        tids: np.ndarray,
        busy: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
        *,
        waiters: np.ndarray | None = None,
    ) -> PoolCondition:
        """What a pool of threads (``tids``) could do for a ready op at each moment (see
        :class:`PoolCondition`). ``busy``: (tid, start, end) of the work the threads ran (their
        spans): a thread blocked *inside* work (a custom op's Python asleep, an op in I/O) is
        busy, not idle; only one blocked outside all work is parked, waiting to be handed some.
        ``waiters``: the threads whose wait for the GIL holds the op up (default: ``tids``; a
        custom op's call also needs an engine worker first)."""
        tids = np.asarray(tids, dtype=np.int64)
        waiters = tids if waiters is None else np.asarray(waiters, dtype=np.int64)
        wait = np.isin(self.tid, waiters) & (self.state == ThreadState.WAIT)
        # Parked, or woken and not yet on a CPU (the hand-off's wake, timed where the engine's
        # queues are compiled): both mean the thread could not yet run the ready op.
        blocked = np.isin(self.tid, tids) & ((self.state == ThreadState.BLOCKED) | (self.state == ThreadState.RUNNABLE))
        w_a, w_b = self.start[wait], self.end[wait]
        i_a, i_b = self.start[blocked], self.end[blocked]
        if busy is not None and np.any(blocked):
            i_a, i_b = _idle_runs(self.tid[blocked], i_a, i_b, *busy)
        t = np.unique(np.concatenate([w_a, w_b, i_a, i_b]))
        if not len(t):
            return PoolCondition(t, np.zeros(0, dtype=np.int8))

        def count(a: np.ndarray, b: np.ndarray) -> np.ndarray:  # runs open on [t[i], t[i+1])
            d = np.zeros(len(t) + 1, dtype=np.int64)
            np.add.at(d, np.searchsorted(t, a), 1)
            np.add.at(d, np.searchsorted(t, b), -1)
            return np.cumsum(d)[:-1]

        n_wait, n_idle = count(w_a, w_b), count(i_a, i_b)
        code = np.where(n_wait > 0, PoolCondition.GIL, np.where(n_idle > 0, PoolCondition.IDLE, PoolCondition.BUSY))
        return PoolCondition(t, code.astype(np.int8))

    @staticmethod
    def _covered(
        r_tid: np.ndarray, r_start: np.ndarray, r_end: np.ndarray, tid: np.ndarray, start: np.ndarray, end: np.ndarray
    ) -> np.ndarray:
        """ns of each query ``[start, end)`` on ``tid`` covered by the disjoint runs (sorted by tid, start)."""
        # Runs of all threads on one time line: thread k's times shifted to k * span, so one search serves all.
        lo = int(min(r_start.min(), start.min()))
        width = int(max(r_end.max(), end.max())) - lo + 1
        threads, r_key = np.unique(r_tid, return_inverse=True)
        r_key = r_key.ravel().astype(np.int64)
        base = r_key * width - lo
        a, b = r_start + base, r_end + base
        order = np.argsort(a, kind="stable")
        a, b = a[order], b[order]
        done = np.concatenate(([0], np.cumsum(b - a)))  # covered time before run i starts

        def covered_before(x: np.ndarray) -> np.ndarray:
            i = np.searchsorted(a, x, side="right")  # runs starting at or before x
            j = np.maximum(i - 1, 0)
            inside = np.where(i > 0, np.clip(x - a[j], 0, b[j] - a[j]), 0)
            return done[np.maximum(i - 1, 0)] * (i > 0) + inside

        pos = np.minimum(np.searchsorted(threads, tid), len(threads) - 1)
        known = threads[pos] == tid
        q_base = pos.astype(np.int64) * width - lo
        got = covered_before(np.minimum(end, lo + width - 1) + q_base) - covered_before(np.maximum(start, lo) + q_base)
        return np.where(known & (end > start), np.maximum(got, 0), 0)


def _stretches(run_start: np.ndarray, run_end: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Runs sorted by start and disjoint (so sorted by end too) against queries ``[start, end)``:
    per query, its first run ending after its start and how many runs from there start before its
    end (two sorted searches, no pass per run)."""
    first = np.searchsorted(run_end, start, side="right")
    last = np.searchsorted(run_start, end, side="left") - 1
    return first, np.maximum(last - first + 1, 0)


def _unsorted(
    tid: np.ndarray, state: np.ndarray, start: np.ndarray, end: np.ndarray, holder: np.ndarray, period_ns: int
) -> ThreadStates:
    """Runs in any order, for the steps of :meth:`ThreadStates.overlaid` only (which sorts once at
    the end): the columns as given, with no check and no sort."""
    out = object.__new__(ThreadStates)
    out.tid, out.state, out.start, out.end, out.holder, out.period_ns = tid, state, start, end, holder, period_ns
    return out


def _subset(states: ThreadStates, keep: np.ndarray) -> ThreadStates:
    """:meth:`ThreadStates.take` without the order check (see :func:`_unsorted`)."""
    t = states
    return _unsorted(t.tid[keep], t.state[keep], t.start[keep], t.end[keep], t.holder[keep], t.period_ns)


def _joined(x: ThreadStates, y: ThreadStates) -> ThreadStates:
    """Two sets of runs (of one period) as one, unsorted (see :func:`_unsorted`): the caller keeps
    each thread's runs disjoint."""
    tid, state, start, end, holder = (
        np.concatenate([getattr(x, c), getattr(y, c)]) for c in ("tid", "state", "start", "end", "holder")
    )
    return _unsorted(tid, state, start, end, holder, max(x.period_ns, y.period_ns))


def _cover(
    states: ThreadStates, rows: np.ndarray, iv_tid: np.ndarray, iv_a: np.ndarray, iv_b: np.ndarray
) -> tuple[np.ndarray, tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    """Runs ``rows`` of ``states`` against intervals ``[iv_a, iv_b)`` of threads ``iv_tid``, sorted
    and disjoint, of other threads than the run's own: (which rows some interval meets; the parts
    covered as (row, interval, start, end); the parts not covered of those rows as (row, start,
    end)). Two sorted searches and index arithmetic, no pass per run: a 2,000-call profile has
    ~25,000 runs and ~4,000 intervals, where a sort of their edges per step cost ~1 ms."""
    a, b, tid = states.start[rows], states.end[rows], states.tid[rows]
    q, k, x, y, (g_q, g_a, g_b) = _met(a, b, iv_a, iv_b, iv_tid, tid)
    met = np.zeros(len(states), dtype=bool)
    met[rows[q]] = True
    return met, (rows[q], k, x, y), (rows[g_q], g_a, g_b)


def _met(
    a: np.ndarray,
    b: np.ndarray,
    iv_a: np.ndarray,
    iv_b: np.ndarray,
    iv_tid: np.ndarray | None = None,
    tid: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Runs ``[a, b)`` against intervals ``[iv_a, iv_b)``, sorted and disjoint (where ``iv_tid``
    and ``tid`` are given, only an interval of another thread than the run's counts): (run,
    interval, start, end) of each part covered, ascending by run, and (run, start, end) of the
    parts not covered of the runs some interval meets."""
    q, k = _pairs(*_stretches(iv_a, iv_b, a, b))
    x, y = np.maximum(a[q], iv_a[k]), np.minimum(b[q], iv_b[k])
    ok = y > x
    if iv_tid is not None and tid is not None:
        ok &= iv_tid[k] != tid[q]
    q, k, x, y = q[ok], k[ok], x[ok], y[ok]
    if not len(q):
        z = np.zeros(0, dtype=np.int64)
        return z, z, z, z, (z, z, z)
    # Between the covered parts of a run (in order: ``q`` ascends, and ``k`` within it), and at its
    # two ends, the parts not covered.
    last_of = np.ones(len(q), dtype=bool)
    last_of[:-1] = q[1:] != q[:-1]
    prev_end = np.empty(len(q), dtype=np.int64)
    prev_end[0] = a[q[0]]
    prev_end[1:] = np.where(q[1:] == q[:-1], y[:-1], a[q[1:]])
    gap_q = np.concatenate([q, q[last_of]])
    gap_a = np.concatenate([prev_end, y[last_of]])
    gap_b = np.concatenate([x, b[q[last_of]]])
    g = gap_b > gap_a
    return q, k, x, y, (gap_q[g], gap_a[g], gap_b[g])


def _changes(x: np.ndarray) -> np.ndarray:
    """Where a sorted (or grouped) ``x`` takes a new value: its first entry, and each that differs
    from the one before."""
    out = np.ones(len(x), dtype=bool)
    out[1:] = x[1:] != x[:-1]
    return out


def _outside_disjoint(
    tid: np.ndarray, a: np.ndarray, b: np.ndarray, w_tid: np.ndarray, w_a: np.ndarray, w_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`_runs_outside` where both the runs and the intervals are sorted by (thread, start)
    and disjoint per thread (the samples' runs and the hand-offs' exact ones): each thread's times
    shifted onto a line of its own, so that both sets are sorted and disjoint on one line and two
    sorted searches pair them, with no sort of their edges (the sweep's was ~0.3 of its ~1 ms in a
    2,000-call profile's build). None where the shifted times would not fit in int64."""
    lo = int(min(a.min(), w_a.min()))
    width = int(max(b.max(), w_b.max())) - lo + 1
    # Both sorted by thread: their threads from where each changes (np.union1d sorts them all: 0.2 ms).
    threads = np.unique(np.concatenate([tid[_changes(tid)], w_tid[_changes(w_tid)]]))
    if width <= 0 or width > (1 << 62) // max(len(threads), 1):
        return None
    shift = np.searchsorted(threads, tid) * width - lo
    w_shift = np.searchsorted(threads, w_tid) * width - lo
    q, _, _, _, (g_q, g_a, g_b) = _met(a + shift, b + shift, w_a + w_shift, w_b + w_shift)
    whole = np.ones(len(tid), dtype=bool)
    whole[q] = False
    rows = np.concatenate([np.flatnonzero(whole), g_q])
    starts = np.concatenate([a[whole], g_a - shift[g_q]])
    ends = np.concatenate([b[whole], g_b - shift[g_q]])
    # Put back in the runs' order, as the sweep's parts were (a merge of two blocks, each in order):
    # the steps after read them in that order ~2x faster (0.6 against 1.2 ms, 2,000 custom-op calls).
    order = np.argsort(rows, kind="stable")
    rows = rows[order]
    return tid[rows], starts[order], ends[order], rows


def _parts(states: ThreadStates, row: np.ndarray, a: np.ndarray, b: np.ndarray, holder: np.ndarray | None = None) -> ThreadStates:
    """Parts ``[a, b)`` of runs ``row``, each in its run's state (and holder, unless given)."""
    h = states.holder[row] if holder is None else holder
    return _unsorted(states.tid[row], states.state[row], a, b, h, states.period_ns)


def _holding_outside(states: ThreadStates, h_tid: np.ndarray, h_a: np.ndarray, h_b: np.ndarray) -> ThreadStates:
    """``states`` with each thread's holding runs cut where another thread's hold ``[h_a, h_b)``
    (sorted, disjoint) is: one thread holds the GIL at a time, and a sampled run is one moment
    stretched over a period (what its thread did after another took the GIL is not known: a gap)."""
    rows = np.flatnonzero(np.isin(states.state, HOLDING))
    met, _, (g_row, g_a, g_b) = _cover(states, rows, h_tid, h_a, h_b)
    if not met.any():
        return states
    return _joined(_subset(states, ~met), _parts(states, g_row, g_a, g_b))


def _waits_named_by(states: ThreadStates, h_tid: np.ndarray, h_a: np.ndarray, h_b: np.ndarray) -> ThreadStates:
    """``states`` with every ``WAIT`` run's parts that holds ``[h_a, h_b)`` (sorted, disjoint)
    cover naming those holds' threads: a wait named by the one moment it began (a sample's, or a
    hand-off's at its wake) outlasted that holder as often as not."""
    rows = np.flatnonzero(states.state == ThreadState.WAIT)
    met, (c_row, k, x, y), (g_row, g_a, g_b) = _cover(states, rows, h_tid, h_a, h_b)
    if not met.any():
        return states
    named = _joined(_parts(states, c_row, x, y, h_tid[k]), _parts(states, g_row, g_a, g_b))
    return _joined(_subset(states, ~met), named)


def _pairs(first: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_stretches`' answer as (query, run) index pairs, one per run a query meets."""
    k = np.repeat(first, n) + np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    return np.repeat(np.arange(len(n)), n), k


@dataclass(eq=False)
class PoolCondition:
    """A pool's condition over time, piecewise constant: on ``[t[i], t[i+1])`` it is ``code[i]``.

    ``GIL``: one of its threads was waiting for the GIL (it had work, or was woken for it, and
    could not run); else ``IDLE``: one was parked with nothing to run (a ready op waits for it to
    be woken); else ``BUSY``: every thread was running (or, outside the sampled time, unknown:
    ``BUSY`` then claims nothing beyond what the queue alone says).
    """

    t: np.ndarray  # int64 breakpoints, ascending
    code: np.ndarray  # int8, one per breakpoint (the last one's lasts forever)

    BUSY, IDLE, GIL = 0, 1, 2

    def time_in(self, code: int, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """ns of each ``[start, end)`` the pool spent in condition ``code`` (one sorted search each)."""
        start = np.asarray(start, dtype=np.int64)
        end = np.asarray(end, dtype=np.int64)
        if len(self.t) < 2 or not len(start):
            return np.zeros(len(start), dtype=np.int64)
        on = (self.code[:-1] == code).astype(np.int64)
        done = np.concatenate(([0], np.cumsum(on * np.diff(self.t))))  # time in ``code`` before t[i]

        def before(x: np.ndarray) -> np.ndarray:
            x = np.clip(x, self.t[0], self.t[-1])
            i = np.minimum(np.searchsorted(self.t, x, side="right") - 1, len(self.t) - 2)
            return done[i] + on[i] * (x - self.t[i])

        return np.maximum(before(end) - before(start), 0)


def _idle_runs(
    tid: np.ndarray, a: np.ndarray, b: np.ndarray, w_tid: np.ndarray, w_a: np.ndarray, w_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The parts of the runs ``[a, b)`` of each thread outside every interval ``[w_a, w_b)`` of the
    same thread (work: spans, which may nest and overlap): one sweep per thread, NumPy only."""
    _, out_a, out_b, _ = _runs_outside(tid, a, b, w_tid, w_a, w_b)
    return out_a, out_b


def _by_thread_then_time(tid: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The stable order by (tid, t): one stable sort of a combined key where the times span less
    than 2**40 ns (18 minutes) and the tids are small, else ``np.lexsort``. On what a sweep sorts
    (a few blocks, each in order already) the one sort merges them: 0.84 ms against lexsort's 1.85
    at 48,000 entries; on entries in random order the two cost the same."""
    if not len(t):
        return np.zeros(0, dtype=np.int64)
    lo, span = int(t.min()), int(t.max()) - int(t.min())
    t_lo, t_hi = int(tid.min()), int(tid.max())
    if span < 1 << 40 and t_lo >= 0 and t_hi < 1 << 22:
        return np.argsort((tid << 40) | (t - lo), kind="stable")
    return np.lexsort((t, tid))


def _runs_outside(
    tid: np.ndarray, a: np.ndarray, b: np.ndarray, w_tid: np.ndarray, w_a: np.ndarray, w_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(tid, start, end, run) of the parts of the runs ``[a, b)`` (disjoint per thread) outside every
    interval ``[w_a, w_b)`` of the same thread (which may nest and overlap); ``run`` is the index
    of the run each part is of.

    One sweep over every thread's edges at once, sorted by (thread, time): each thread's runs and
    intervals open and close as often, so the running counts are back at zero where the next
    thread's edges begin, and a part never spans two threads. (A loop per thread cost ~0.25 ms a
    thread, ~2 ms of a 10,000-span profile's build.)"""
    if not len(tid):
        z = np.zeros(0, dtype=np.int64)
        return z, z, z, z
    keep = np.isin(w_tid, tid)  # intervals of threads without runs change nothing
    w_tid, w_a, w_b = w_tid[keep], w_a[keep], w_b[keep]
    n, m = len(tid), len(w_tid)
    t = np.concatenate([a, b, w_a, w_b]).astype(np.int64)
    th = np.concatenate([tid, tid, w_tid, w_tid]).astype(np.int64)
    d_run = np.concatenate([np.ones(n, np.int64), -np.ones(n, np.int64), np.zeros(2 * m, np.int64)])
    d_work = np.concatenate([np.zeros(2 * n, np.int64), np.ones(m, np.int64), -np.ones(m, np.int64)])
    order = _by_thread_then_time(th, t)  # stable: ties keep run starts, run ends, interval starts, ends
    t, th = t[order], th[order]
    in_run, in_work = np.cumsum(d_run[order]), np.cumsum(d_work[order])
    idle = (in_run > 0) & (in_work == 0)
    seg = np.flatnonzero(idle[:-1] & (t[1:] > t[:-1]) & (th[1:] == th[:-1]))
    # The run open at each edge: the last run start at or before it (a thread's runs are disjoint,
    # so while one is open no other is; at a tie the next run's start sorts before the previous
    # one's end, and the part between them is empty).
    starts = order < n
    last = np.maximum.accumulate(np.where(starts, np.arange(len(order)), 0))
    return th[seg], t[seg], t[seg + 1], order[last[seg]]
