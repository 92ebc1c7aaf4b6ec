"""The GIL's evidence for one profiling session: the engine's sampler started and stopped with the
recording, its samples turned into the trace's :class:`~opprof.trace.threadstates.ThreadStates`.

Where the evidence cannot exist (:data:`opprof.engine.gil.WHY_NOT`: the compiled part missing, a
free-threaded Python, ``OPPROF_PURE=1``), or another session in the process is sampling already,
or the recording runs on a clock other than the sampler's, the trace gets no thread states and
``metadata["gil"]["why_not"]`` says why, for the readers to repeat.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..engine import gil, handoff
from ..trace.records import ThreadInfo
from ..trace.threadstates import GIL_METADATA, ThreadState, ThreadStates, _pairs, _stretches

__all__ = ["PERIOD_NS", "QUIET_PERIOD_NS", "SUSTAINED_AFTER_NS", "SUSTAINED_PERIOD_NS", "TURNED_OFF", "GilRecording"]

#: Why a profile made with ``gil=False`` has no GIL evidence (the readers repeat it).
TURNED_OFF = "the GIL's evidence was turned off for this profile (gil=False)"

#: 1 ms (1 kHz) while profiling: five samples per switch interval (5 ms, the longest a GIL waiter
#: waits for a holder that never blocks), at 1.7-3.8 % of a core here; 5 kHz costs 10-15 %
#: (~18 µs of CPU per timer wake on this VM), more than a profiler may take from a 2-core machine.
PERIOD_NS = 1_000_000
#: 4 ms while nothing contends (one thread at most running, none waiting for the GIL or a CPU):
#: under a switch interval, so contention is seen within one, and the hand-offs are timed exactly
#: anyway (:mod:`opprof.engine.handoff`). It brings an idle engine's sampler from ~3 % of a core to ~1 %.
QUIET_PERIOD_NS = 4_000_000
#: 2.5 ms (400 Hz) once threads have contended for :data:`SUSTAINED_AFTER_NS` without a break: a
#: timer wake alone is ~25 µs of CPU on this VM (a bare 1 kHz sleep loop: 2.8-2.9 % of a core), so
#: 1 kHz held through seconds of contention took 2.75 % of a core, over the 2 % a sampler may take;
#: two seconds of it now take 1.5-1.6 % (2 ms: 1.5-1.9 %, too near the goal). Still two samples per
#: switch interval; a long episode has hundreds either way.
SUSTAINED_PERIOD_NS = 2_500_000
#: 50 ms of unbroken contention (10 switch intervals, 50 samples at the fine rate) before the
#: sampler backs off: short episodes (a 30-40 ms spin, a notebook cell of a few ms) keep 1 kHz.
#: 100 ms held a busy profile of a few hundred ms (2,000 chained custom ops, 4-wide custom ops,
#: 20,000 small ops: 110-270 ms each) at 1.5-2.0 % of a core, on the goal's line; 50 ms takes it to
#: 1.3-1.8 % (2026-12-06). The known answers of the spinning Python and of the collection passed
#: 35 of 37 judged single tries at 50 ms, 42 of 43 at 100 ms; the misses were the machine's (a
#: spinner 4 ms off its CPU, the OS taking 1.6 ms a wake; at 100 ms, once, the collection's
#: waiters named its op's Python instead).
#: 25 ms was tried (2026-12-05): its wakes cost a profiled program more than their own CPU (each
#: preempts a thread, often the GIL's holder), but the on/off rows it gained were within what
#: repeated runs swing by (2,000 trivial custom ops 1.07-1.09x against 1.16-1.19x in two runs, then
#: 1.05x against 1.08x), and a holder became coarser: a custom-op thread's engine Python seen once
#: at 2.5 ms counts 2.5 ms of holding; known answer 1 (the spinner named as the holder) failed three
#: tries in a row on Python 3.10 in a CI run with it, a custom-op thread's 4 ms ahead of the spinner's 1.2.
SUSTAINED_AFTER_NS = 50_000_000


#: ``(tid, start, end)`` columns: who held the GIL when, by the engine's timed takings of it.
Holds = tuple[np.ndarray, np.ndarray, np.ndarray]


def _by_getter(tid: np.ndarray) -> np.ndarray:
    """The hand-offs' stable order by getter (``tid``; -1: no trace thread), each getter's in the
    order recorded: a radix sort of small numbers where the tids fit in 16 bits (a trace's few)."""
    small = len(tid) and 0 <= int(tid.min()) + 1 and int(tid.max()) < 1 << 15
    return np.argsort(tid.astype(np.int16) if small else tid, kind="stable")


def _held_until(tid: np.ndarray, park: np.ndarray, gil: np.ndarray, hi: int, sample_t: np.ndarray | None) -> np.ndarray:
    """Per hand-off (its getter ``tid``, the moments it parked and took the GIL; 0: not yet), until
    when its getter is known to have held the GIL it took: its own next park (it lets the GIL go
    there), another timed taking of the GIL, or the next sample, whichever comes first. From the
    next sample on, the samples say who held it. A taking not yet made (an open wait's) holds nothing.

    Why: the GIL changes hands every ~100 µs in a busy engine and the sampler sees one moment per
    ms, so most of a hand-off's GIL wait fell between samples with no holder known: on the demo,
    11-15 ms of a 31-36 ms critical path "holder not seen" (1.7-4.4 ms with the holds). These
    moments are exact and free: each hand-off already stamps when its getter took the GIL.

    What a hold does not say: that its thread ran Python all along. It may have let the GIL go in C
    code (a sleep, NumPy on a large array) with no one else taking it; so a hold names the waits it
    covers (a waiter would have taken a GIL let go, and its taking, timed, ends the hold), and is
    not its thread's own state (a custom op's 2 ms sleep after its taking read as holding the GIL)."""
    n = len(tid)
    end = np.full(n, hi, dtype=np.int64)
    took = gil > 0
    if not took.any():
        return gil.copy()
    # The next park of the same getter (its records are in order: each parks after its previous
    # taking, so a stable sort by getter alone keeps each one's in time), and the next taking by
    # any thread (the records are in the order of their takings, but for the open waits at the end).
    order = _by_getter(tid)
    nxt = np.full(n, hi, dtype=np.int64)
    same = tid[order][1:] == tid[order][:-1]
    nxt[order[:-1][same]] = park[order][1:][same]
    end = np.minimum(end, nxt)
    taken = np.flatnonzero(took)
    by_time = taken[np.argsort(gil[taken], kind="stable")]
    later = np.full(n, hi, dtype=np.int64)
    later[by_time[:-1]] = gil[by_time[1:]]
    end = np.minimum(end, later)
    if sample_t is not None and len(sample_t):
        j = np.searchsorted(sample_t, gil, side="right")
        end = np.minimum(end, np.where(j < len(sample_t), sample_t[np.minimum(j, len(sample_t) - 1)], hi))
    # Where a later sample or park came before the taking (clock ties), the hold is empty.
    return np.where(took, np.maximum(end, gil), gil)


def _held_while_waited(
    tid: np.ndarray, took: np.ndarray, until: np.ndarray, wait_a: np.ndarray, wait_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per hand-off: the part of its getter's hold ``[took, until)`` (:func:`_held_until`; the holds
    are disjoint) from the first moment another getter's timed GIL wait ``[wait_a, wait_b)`` met
    it to the last, as (start, end); (0, 0) where none did. There the getter held the GIL for sure:
    had it let it go (a sleep), the waiter would have taken it, and that taking ends the hold.
    Where no one waited, its own state stays as the samples say (a custom op that sleeps 2 ms right
    after its taking is blocked, not holding)."""
    n = len(tid)
    lo = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.zeros(n, dtype=np.int64)
    by_start = np.argsort(took, kind="stable")
    first, count = _stretches(took[by_start], until[by_start], wait_a, wait_b)
    w, k = _pairs(first, count)
    k = by_start[k]
    x, y = np.maximum(wait_a[w], took[k]), np.minimum(wait_b[w], until[k])
    ok = (y > x) & (tid[w] != tid[k])
    np.minimum.at(lo, k[ok], x[ok])
    np.maximum.at(hi, k[ok], y[ok])
    met = hi > lo
    return np.where(met, lo, 0), np.where(met, hi, 0)


def _looked_up(table: dict[int, int], keys: np.ndarray) -> np.ndarray:
    """``table[k]`` for each of ``keys`` (-1 where absent), by a sorted search among the table's
    few entries (threads): no pass per key in Python, and no sort of the keys."""
    if not table or not len(keys):
        return np.full(len(keys), -1, dtype=np.int64)
    known = np.array(sorted(table), dtype=np.int64)
    values = np.array([table[k] for k in known.tolist()], dtype=np.int64)
    at = np.minimum(np.searchsorted(known, keys), len(known) - 1)
    return np.where(known[at] == keys, values[at], -1)


def _columns(records: np.ndarray, opened: np.ndarray, *fields: str) -> list[np.ndarray]:
    """Fields of the hand-off records (:data:`~opprof.engine.handoff.HANDOFF_DTYPE`), then of the
    open waits (:data:`~opprof.engine.handoff.OPEN_WAIT_DTYPE`) after them, each as one contiguous
    column; 0 for an open wait's put, wake and GIL, unknown yet (:meth:`GilRecording._handoff_runs`
    puts them at the end). Column by column: a structured concatenation of the two cost ~0.2 ms
    (4,000 hand-offs) and left every field strided."""
    have = opened.dtype.names or ()
    return [
        np.concatenate([records[f], opened[f] if f in have else np.zeros(len(opened), dtype=np.int64)]).astype(np.int64)
        for f in fields
    ]


class GilRecording:
    """Start the sampler with a recording, stop it with the recording, then map its threads onto the
    trace's (by native thread id) as :meth:`thread_states`."""

    def __init__(self, clock: Callable[[], int], *, enabled: bool = True) -> None:
        """``enabled`` False: no sampler and no timed hand-offs (``Profiler(gil=False)``), and the
        trace says so where the evidence would be."""
        self.samples: gil.GilSamples | None = None
        self.handoffs: handoff.Handoffs | None = None
        #: The waits in progress when the profile stopped (handoff.open_waits): parked since.
        self.open_waits = np.zeros(0, dtype=handoff.OPEN_WAIT_DTYPE)
        self._timing_handoffs = False
        self.why_not = ""
        if not enabled:
            self.why_not = TURNED_OFF
        elif not gil.AVAILABLE:
            self.why_not = gil.WHY_NOT
        elif clock is not time.perf_counter_ns:
            self.why_not = "the recording runs on a clock of its own, not the GIL sampler's"
        self.sampler = (
            gil.GilSampler(
                PERIOD_NS,
                quiet_period_ns=QUIET_PERIOD_NS,
                sustained_period_ns=SUSTAINED_PERIOD_NS,
                sustained_after_ns=SUSTAINED_AFTER_NS,
            )
            if not self.why_not
            else None
        )

    def start(self) -> None:
        """Sample from now on: the calling thread (the program's), every other thread running
        Python now and every ``threading.Thread`` started until :meth:`stop` (the engine's
        register themselves for good; a user's own threads for the profile)."""
        s = self.sampler
        if s is None:
            return
        s.register_thread()
        if s.running:
            self.sampler, self.why_not = None, "another profile in this process was sampling the GIL already"
            return
        s.drain()  # samples of an earlier session are not this one's
        if not s.start():
            self.sampler, self.why_not = None, "the GIL sampler did not start"
            return
        s.register_others()
        s.follow_new_threads(True)
        self._timing_handoffs = handoff.start()
        if self._timing_handoffs:
            handoff.drain()

    def stop(self) -> None:
        """Stop sampling and keep the samples (idempotent)."""
        s = self.sampler
        if s is None or self.samples is not None:
            return
        s.follow_new_threads(False)
        s.stop()
        s.unregister_foreign()
        self.samples = s.drain()
        if self._timing_handoffs:
            self.open_waits = handoff.open_waits()  # before the log stops: its threads are parked still
            handoff.stop()
            self.handoffs = handoff.drain()

    def thread_states(
        self, threads: list[ThreadInfo], native_ids: dict[int, int], t0: int, t1: int | None
    ) -> ThreadStates | None:
        """The samples as runs per trace thread, clipped to ``[t0, t1]``. ``native_ids`` maps a
        native thread id to its tid in ``threads``; a sampled thread the trace does not list yet
        (one that held the GIL without recording a span) is appended to ``threads`` where it held,
        waited for or ran without the GIL meanwhile (one blocked throughout is left out)."""
        samples = self.samples
        if samples is None or not samples.available:
            if samples is not None and not self.why_not:
                self.why_not = samples.why_not
            return None
        runs = samples.intervals()
        start = np.maximum(runs.start, t0)
        end = runs.end if t1 is None else np.minimum(runs.end, t1)
        keep = end > start
        # A thread that recorded nothing is a lane only where it did something to the GIL's story
        # (held it, waited for it, ran): a notebook kernel's idle threads (IOPub, heartbeat,
        # history), sampled for the profile, stay out of the timeline.
        busy = keep & (runs.state != int(ThreadState.BLOCKED))
        holders_seen = runs.holder[busy & (runs.holder >= 0)]
        active = set(np.unique(runs.slot[busy]).tolist()) | set(np.unique(holders_seen).tolist())
        tid_of_slot = np.full(gil.MAX_THREADS + 1, -1, dtype=np.int64)  # the last entry: slot -1
        next_tid = max((t.tid for t in threads), default=0) + 1
        for slot, th in samples.threads.items():
            tid = native_ids.get(th.native_id)
            if tid is None:
                if slot not in active:
                    continue
                tid, next_tid = next_tid, next_tid + 1
                threads.append(ThreadInfo(tid, th.name or f"thread {th.native_id}"))
                native_ids[th.native_id] = tid
            tid_of_slot[slot] = tid
        keep &= tid_of_slot[runs.slot.astype(np.int64)] >= 0
        slots = runs.slot.astype(np.int64)[keep]
        holders = runs.holder.astype(np.int64)[keep]
        states, holder = runs.state[keep], tid_of_slot[holders]
        sampled = ThreadStates(tid_of_slot[slots], states, start[keep], end[keep], holder, samples.period_ns)
        exact, holds = self._handoff_runs(native_ids, t0, t1, samples.t)
        return sampled.overlaid(exact, holds)

    def _handoff_runs(
        self,
        native_ids: dict[int, int],
        t0: int,
        t1: int | None,
        sample_t: np.ndarray | None,
    ) -> tuple[ThreadStates, Holds]:
        """Each timed hand-off as exact runs of its getter: parked (``BLOCKED``) until the put, being
        woken (``RUNNABLE``) until the OS ran it, then waiting for the GIL (``WAIT``) until it held
        it. A program's wait (``QueueKind.WAIT``: its gate opened by the op it waited for) alike. A
        wait still in progress at the stop (:attr:`open_waits`) is ``BLOCKED`` from its park on.
        And each getter's hold of the GIL it took (:func:`_held_until`; ``sample_t``: the samples'
        times), as ``(tid, start, end)`` columns: who the waits meanwhile waited for."""
        z = np.zeros(0, dtype=np.int64)
        h = self.handoffs
        if h is None:
            return ThreadStates.empty(), (z, z, z)
        opened = self.open_waits
        if not len(h.records) and not len(opened):
            return ThreadStates.empty(), (z, z, z)
        native_id, park, woke, took, holder = _columns(h.records, opened, "native_id", "park", "woke", "gil", "holder")
        # Looked up among the trace's few threads by a sorted search, not per hand-off (a profile of
        # 2,000 custom-op calls times ~4,000: 2 ms as a list comprehension, 0.1 by np.unique).
        tid = _looked_up(native_ids, native_id)
        hi = np.iinfo(np.int64).max if t1 is None else t1
        # An open wait: parked until the end (its put there; its wake and GIL unknown, 0: no run after it).
        put = np.concatenate([h.signal, np.full(len(opened), hi, dtype=np.int64)]) if len(opened) else h.signal
        none = np.full(len(tid), -1, dtype=np.int64)
        until = np.minimum(_held_until(tid, park, took, hi, sample_t), hi)
        held_a, held_b = _held_while_waited(tid, took, until, woke, took)
        edges = [
            (ThreadState.BLOCKED, park, put, none),
            (ThreadState.RUNNABLE, put, woke, none),
            (ThreadState.WAIT, woke, took, self._holder_tids(holder, tid, native_ids)),
            (ThreadState.HELD, held_a, held_b, none),
        ]
        held = (tid >= 0) & (until > np.maximum(took, t0))
        holds = (tid[held], np.maximum(took, t0)[held], until[held])
        # A hand-off's four runs side by side, the hand-offs in the order ThreadStates keeps (by
        # thread, then time): a thread's hand-offs are recorded one after another (each by its
        # getter, once it holds the GIL), so a stable sort of the hand-offs by thread alone does it,
        # a radix sort of small numbers, before their runs are laid out (sorting the runs after
        # cost 4x the entries; by (thread, time), ~0.4 ms of a 2,000-call profile's build).
        by = _by_getter(tid)
        tid = tid[by]
        n = len(tid)
        starts = np.stack([np.maximum(a[by], t0) for _, a, _, _ in edges], axis=1)
        ends = np.stack([np.minimum(b[by], hi) for _, _, b, _ in edges], axis=1)
        holders = np.stack([h[by] for _, _, _, h in edges], axis=1)
        codes = np.broadcast_to(np.array([int(e[0]) for e in edges], dtype=np.int8), (n, len(edges)))
        keep = ((tid >= 0)[:, None] & (ends > starts)).ravel()
        runs = ThreadStates(
            np.repeat(tid, len(edges))[keep], codes.ravel()[keep], starts.ravel()[keep], ends.ravel()[keep], holders.ravel()[keep]
        )
        return runs, holds

    def _holder_tids(self, tstates: np.ndarray, getters: np.ndarray, native_ids: dict[int, int]) -> np.ndarray:
        """Each timed GIL wait's holder (the thread-state address the hand-off read as it woke) as a
        trace tid, through the sampled threads' addresses; -1 where the GIL was free, the address is
        no sampled thread's or several's (a thread's state freed and its memory reused by a later
        one), or it is the getter's own: those waits' holders come from the samples instead."""
        out = np.full(len(tstates), -1, dtype=np.int64)
        samples = self.samples
        if samples is None or not len(tstates):
            return out
        owners: dict[int, set[int]] = {}
        for th in samples.threads.values():
            if th.tstate:
                owners.setdefault(th.tstate, set()).add(th.native_id)
        tid_of = {ts: native_ids.get(next(iter(n)), -1) for ts, n in owners.items() if len(n) == 1}
        if not tid_of:
            return out
        mapped = _looked_up(tid_of, tstates)  # (np.unique of the addresses: 0.37 ms a 2,000-call profile)
        return np.where(mapped == getters, -1, mapped)  # ``getters``: each hand-off's getter's tid

    def metadata(self) -> dict[str, Any]:
        """``metadata["gil"]``: how the evidence was taken, or why there is none."""
        if self.why_not or self.samples is None or not self.samples.available:
            return {GIL_METADATA: {"why_not": self.why_not or "the GIL was not sampled"}}
        stats = self.samples.stats
        return {
            GIL_METADATA: {
                "source": "opprof's GIL sampler (the interpreter's GIL holder, thread CPU clocks, /proc syscalls)",
                "period_ns": self.samples.period_ns,
                "quiet_period_ns": QUIET_PERIOD_NS,
                "sustained_period_ns": SUSTAINED_PERIOD_NS,
                "sustained_after_ns": SUSTAINED_AFTER_NS,
                "samples": len(self.samples),
                **{k: stats[k] for k in ("dropped", "missed", "sampler_cpu_ns") if k in stats},
                "handoffs": self._handoff_summary(),
            }
        }

    def _handoff_summary(self) -> dict[str, Any]:
        """``metadata["gil"]["handoffs"]``: how many hand-offs were timed and their median wake and
        GIL wait per queue (the per-hop cost the why-text quotes), or why none were."""
        if not handoff.AVAILABLE:
            return {"why_not": handoff.WHY_NOT}
        h = self.handoffs
        if h is None:
            return {"why_not": "hand-offs were not timed (another session was timing them)"}
        out: dict[str, Any] = {
            "source": "the engine's queues and the program's waits, waited on in C",
            "count": len(h),
            "dropped": h.dropped,
        }
        queue = h.records["queue"]
        masks = {kind.name.lower(): queue == int(kind) for kind in handoff.QueueKind}
        # "all": the pools' hand-offs (work to a thread), not a program woken from its wait.
        masks["all"] = queue != int(handoff.QueueKind.WAIT)
        out.update((name, got) for name, got in h.medians_of(masks).items() if got["count"])
        return out
