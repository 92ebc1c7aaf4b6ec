"""The GIL in the replay: how much of each piece of work needs it (read off the recording), and the
lock itself, one resource handed over as CPython does (see :mod:`opprof.trace.analysis.whatif`).

**What needs it.** Every piece the model times (an engine op's run, each stretch of a custom op's
Python or of a program between its pushes and waits) is split into *work with the GIL* and *work
without it*. Where the profile sampled the GIL (``trace.thread_states``), the piece's time waiting
for the GIL is dropped (the model re-derives it) and the rest is split by what its thread did
meanwhile: ``HELD`` needs the GIL; ``RUNNING`` without it, ``BLOCKED`` (asleep, I/O) and
``RUNNABLE`` do not. Without thread states, a custom op's Python holds the GIL for its recorded CPU
share of each stretch and the rest (which may have been a wait for the GIL) runs without it; ops
and programs are taken to release it (nothing recorded says otherwise).

**The lock.** One holder at a time. A piece takes it when free, else queues (first come, first
served). The holder keeps it until its GIL work is done, or, while another thread waits, until that
waiter has waited one switch interval (``sys.getswitchinterval()``: the waiter asks for a drop, the
holder drops at once and queues again at the back). A piece with work both with and without the
GIL alternates them in chunks of one switch interval with the GIL (and its share of the rest
without), as Python that computes and sleeps or calls into NumPy in turn does; where inside a piece
the recording had them is not kept. A free-threaded build (``gil=False``) has no lock: every piece
runs at once.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

import numpy as np

from ...data import TraceData
from ...records import CUSTOM_POOL, ENGINE_POOL
from ...threadstates import GIL_METADATA, HOLDING, STATES, ThreadState, ThreadStates

__all__ = [
    "ASLEEP_NS",
    "DEFAULT_SWITCH_INTERVAL",
    "EXACT_PERIOD_NS",
    "Gil",
    "gil_shares",
    "gil_transfer_ns",
    "hand_offs_hold_gil",
    "held_after_handoff",
    "hop_held_ns",
    "name_shares",
    "tail_held_ns",
    "one_holder",
    "outside_holds",
]

#: The ``period_ns`` of thread states a model wrote (a predicted trace's): exact, not sampled.
EXACT_PERIOD_NS = 1
#: CPython's default switch interval (s), for a trace that did not record its own.
DEFAULT_SWITCH_INTERVAL = 0.005
_K = {s: k for k, s in enumerate(STATES)}


def gil_shares(
    trace: TraceData,
    tid: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    cpu_share: np.ndarray,
    python: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """For each piece ``[start, end)`` on thread ``tid`` (absolute ns): the ns it waited for the GIL
    (dropped from its work) and the share of the rest that held the GIL.

    ``cpu_share`` is the piece's share of time on a CPU where known (a custom op's Python; -1 where
    not). Where the GIL was sampled, a piece with a CPU share holds the GIL for its CPU time (less
    what the states say ran without it) and waited for it for the part of its off-CPU time the
    states call a wait: the CPU clock is exact, the states are samples. A piece without one splits
    by the states alone. Where the GIL was not sampled, the CPU share holds it (else nothing);
    in a trace that sampled it, a ``python`` piece outside the sampled time (a program's own
    time before the sampler's first sample) is taken to hold it.
    """
    n = len(tid)
    wait = np.zeros(n, dtype=np.int64)
    has_cpu = cpu_share >= 0
    cpu = np.where(has_cpu, np.clip(cpu_share, 0.0, 1.0), 0.0).astype(np.float64)
    ts = trace.thread_states
    if ts is None or not len(ts) or not n:
        return wait, cpu
    period = ts.period_ns or 1_000_000
    if period <= EXACT_PERIOD_NS:  # a model's own states (a predicted trace): exact, used alone
        has_cpu = np.zeros(n, dtype=bool)
    # A RUNNING run of one sample is most often a thread caught between dropping and taking the GIL.
    keep = (ts.state != ThreadState.RUNNING) | (ts.end - ts.start > period * 3 // 2)
    ov = ts.take(keep).overlap(tid, start, end).astype(np.float64)
    # Off a CPU or not, a holder held it: the replay keeps the time as recorded (cores are not modelled).
    h, w = sum(ov[:, _K[s]] for s in HOLDING), ov[:, _K[ThreadState.WAIT]]
    run, off = ov[:, _K[ThreadState.RUNNING]], w + ov[:, _K[ThreadState.BLOCKED]] + ov[:, _K[ThreadState.RUNNABLE]]
    d = np.maximum(end - start, 0).astype(np.float64)
    sampled = ov.sum(axis=1) > 0
    # With a CPU share: held = CPU time x HELD / (HELD + RUNNING); waited = off-CPU x WAIT / off states.
    on = d * cpu
    c_wait = np.where(off > 0, (d - on) * w / np.maximum(off, 1), 0.0)
    c_held = np.where(h + run > 0, on * h / np.maximum(h + run, 1), on)
    # Without: the states' shares. A piece shorter than two periods sits inside one or two sampled
    # runs, taken before or after it ran (a worker parked at the tick, woken and gone back since):
    # only a run of RUNNING says it ran without the GIL; anything else is Python that needs it.
    short = d < 2 * period
    s_wait = np.where(short, 0.0, np.minimum(w, d))
    total = ov.sum(axis=1)
    s_rest = total - np.where(short, 0.0, w)
    s_held = np.where(short, total - run, h)
    s_share = np.where(s_rest > 0, s_held / np.maximum(s_rest, 1), 0.0)
    work_c = d - c_wait
    c_share = np.where(work_c > 0, c_held / np.maximum(work_c, 1), 0.0)
    wait_f = np.where(sampled, np.where(has_cpu, c_wait, s_wait), 0.0)
    unknown = cpu if python is None else np.where(python & ~has_cpu, 1.0, cpu)
    share = np.where(sampled, np.where(has_cpu, c_share, s_share), unknown)
    return np.round(wait_f).astype(np.int64), np.clip(share, 0.0, 1.0)


#: Sampled instants inside an op's runs (all runs of one name) that its short runs need before they
#: take the share those instants show; with fewer, a short run is taken to hold the GIL.
MIN_NAME_SAMPLES = 5
#: Instants read off one thread's states at most: past it they are read further apart (an hour's
#: profile at 1 ms is 3.6M a thread; a hostile file's runs could ask for any number).
_MAX_INSTANTS = 1_000_000


def name_shares(states: ThreadStates | None, tid: np.ndarray, start: np.ndarray, end: np.ndarray, name: np.ndarray) -> np.ndarray:
    """For each op's run ``[start, end)`` on ``tid`` (the runs of one thread do not overlap), the
    share of the GIL held at the sampler's instants that fell inside the runs of its ``name``: HELD
    (on a CPU or not) over HELD, RUNNING, BLOCKED and RUNNABLE (a WAIT is left to the model). NaN
    where that name's runs hold fewer than :data:`MIN_NAME_SAMPLES` instants, or without samples.

    Why: a run shorter than two sampling periods has at most one sample inside it, and the runs
    around it were often sampled while its thread was parked between ops; :func:`gil_shares` takes
    it to hold the GIL. That is wrong for an op that sleeps or does I/O: 100 ops of 0.5 ms that
    sleep, recorded on one worker (sampled every 4 ms: no contention) and replayed on two, took
    as long as on one (+67 to +87 % against a real run; -8 % read this way). An instant inside an op's run is direct evidence
    of what that op did, and an op's name gathers it from many short runs. A run of states begins
    at a sample and repeats it every period until the state changes: its instants are its start
    and every period after."""
    n = len(tid)
    out = np.full(n, np.nan)
    ts = states
    if ts is None or not len(ts) or not n or not ts.period_ns or ts.period_ns <= EXACT_PERIOD_NS:
        return out
    p = ts.period_ns
    holding_states = [int(x) for x in HOLDING]
    evidence = holding_states + [int(x) for x in (ThreadState.RUNNING, ThreadState.BLOCKED, ThreadState.RUNNABLE)]
    codes, group = np.unique(name, return_inverse=True)
    held_n = np.zeros(len(codes))
    seen_n = np.zeros(len(codes))
    for th in np.unique(tid).tolist():
        mine = np.flatnonzero(tid == th)
        mine = mine[np.argsort(start[mine], kind="stable")]
        a, b = np.searchsorted(ts.tid, [th, th + 1])  # the thread's runs (sorted by thread, then start)
        runs = np.arange(a, b)
        runs = runs[np.isin(ts.state[runs], evidence) & (ts.end[runs] > start[mine[0]]) & (ts.start[runs] < end[mine].max())]
        if not len(runs):
            continue
        length = np.clip(ts.end[runs] - ts.start[runs], 0, 1 << 52)
        step = p * max(1, math.ceil(float(np.sum(length / p)) / _MAX_INSTANTS))
        count = np.minimum(np.maximum((length + step - 1) // step, 1), _MAX_INSTANTS)
        each = np.repeat(runs, count)
        at = ts.start[each] + (np.arange(len(each)) - np.repeat(np.cumsum(count) - count, count)) * step
        k = np.searchsorted(start[mine], at, side="right") - 1
        inside = (k >= 0) & (at < end[mine[np.maximum(k, 0)]])
        g = group[mine[k[inside]]]
        np.add.at(seen_n, g, 1)
        np.add.at(held_n, g, np.isin(ts.state[each[inside]], holding_states))
    enough = seen_n >= MIN_NAME_SAMPLES
    share = np.where(enough, held_n / np.maximum(seen_n, 1), np.nan)
    out[:] = share[group]
    return out


def one_holder(
    a: np.ndarray, b: np.ndarray, wait: np.ndarray, share: np.ndarray, rank: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``wait`` and ``share`` of pieces ``[a, b)`` (:func:`gil_shares`'), made to respect that one
    thread holds the GIL at a time: where the pieces taken to hold it overlap (at a moment, their
    held densities add up past 1), the GIL goes to the pieces of the highest ``rank`` first (the
    best evidence: a Python whose CPU clock was read, then an op's run, then a program's time
    between its pushes), shared in proportion to density within a rank, and what a piece loses of
    its held time becomes waiting for the GIL.

    Why: a piece with no sample inside it (shorter than the sampler's period, 1 ms) is taken to
    hold the GIL all along, which two overlapping pieces on two threads cannot both have done. The
    quickstart's 100x100 ops (tens of µs of NumPy, run without the GIL) waited for it inside their
    spans for up to 230 µs while a custom op's Python held it, and its program paused between two
    pushes for 450 µs while a worker ran; replayed as held, the model ran the cell +28 % too slow
    (median of 36 recordings)."""
    n = len(a)
    if n < 2:
        return wait, share
    rank = np.zeros(n, dtype=np.int64) if rank is None else rank
    d = np.maximum(b - a, 0).astype(np.float64)
    work = np.maximum(d - wait, 0.0)
    dens = np.where(d > 0, share * work / np.maximum(d, 1.0), 0.0)  # held per ns of the piece
    x = np.unique(np.concatenate([a, b]))
    ia, ib = np.searchsorted(x, a), np.searchsorted(x, b)
    seg = np.diff(x).astype(np.float64)
    free = np.ones(len(seg), dtype=np.float64)  # the GIL left on [x[j], x[j + 1]) for lower ranks
    held = np.zeros(n, dtype=np.float64)
    for r in sorted(set(rank.tolist()), reverse=True):
        mine = rank == r
        delta = np.zeros(len(x) + 1, dtype=np.float64)
        np.add.at(delta, ia[mine], dens[mine])
        np.add.at(delta, ib[mine], -dens[mine])
        load = np.cumsum(delta)[: len(seg)]  # this rank's held density on each segment
        kept = np.where(load > free, free / np.maximum(load, 1e-12), 1.0)  # the part of it the GIL allows
        cum = np.concatenate([[0.0], np.cumsum(seg * kept)])
        held[mine] = dens[mine] * (cum[ib[mine]] - cum[ia[mine]])
        free = np.maximum(free - load * kept, 0.0)
    lost = np.maximum(dens * d - held, 0.0)
    new_wait = wait + np.round(lost).astype(np.int64)
    new_work = np.maximum(d - new_wait, 0.0)
    new_share = np.where(new_work > 0, np.minimum(held / np.maximum(new_work, 1.0), 1.0), 0.0)
    return new_wait, np.where(lost > 0.5, new_share, share)


def held_after_handoff(states: ThreadStates) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tid, start, end) of each stretch in which a pool thread ran after a timed hand-off gave it
    the GIL: from the end of its wait for the GIL (exact, the hand-off's stamp) to its next state
    (its next park, exact too, or a sample), where nothing was recorded in between.

    Why: the thread then ran the engine's Python and its ops, holding the GIL most of the time,
    which the thread's op spans alone do not cover (the completions and dispatches between them).
    In the quickstart a worker got the GIL 430 µs after its wake and ran for 350 µs while the
    program sat between two pushes; without this, the program's stretch was taken to hold the GIL
    throughout and the replay kept the worker waiting for it."""
    if not len(states):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    tid, st, a, b = states.tid, states.state, states.start, states.end  # sorted by (tid, start)
    nxt_same = np.r_[tid[1:] == tid[:-1], False]
    gap_to = np.r_[a[1:], a[-1]]
    pick = (st == ThreadState.WAIT) & nxt_same & (gap_to > b)
    return tid[pick], b[pick], gap_to[pick]


#: Handovers :func:`gil_transfer_ns` needs to trust its own median; with fewer the GIL changes
#: hands at once.
MIN_TRANSFERS = 5
#: The same for handovers to a thread that had waited :data:`ASLEEP_NS` or longer (a program
#: waits for an op once a training step).
MIN_ASLEEP_TRANSFERS = 3
#: A thread that has waited this long for the GIL is taken to be asleep: handing it the GIL waits
#: for the OS to wake it. Measured here on the handovers of 72 quickstart cells, 24 demo runs and 24
#: runs of 40 small custom ops (from the holder's release to the waiter holding the GIL, by how long
#: the waiter had waited until that release): under 20 µs, medians 0.2-0.7 µs; 20-100 µs, 9-10 µs;
#: over 100 µs, 12-21 µs. A thread that just began to wait still has its CPU (a vCPU polls a while
#: before it halts); one that waited longer lost it.
ASLEEP_NS = 20_000


def gil_transfer_ns(trace: TraceData, *, asleep: bool = False) -> int:
    """What handing the GIL to a thread that waits for it cost in the recording (0 where unknown:
    the GIL then changes hands at once), or what a model's prediction recorded; ``asleep``: to one
    that had waited :data:`ASLEEP_NS` or longer.

    Measured where the recording shows both ends of a handover: a woken thread (a pool thread, or a
    program woken from its wait) waits for the GIL (a timed hand-off's ``WAIT``) while a pool thread
    parks in the engine's queue, which releases the GIL as it parks; from the last such park to the
    waiter holding the GIL is one handover. The median of those whose waiter had waited less than
    :data:`ASLEEP_NS`, at most the OS's median wake of a parked thread (a longer one paired the
    waiter with the wrong park), is the transfer; the median of the others, the asleep transfer.

    Why not the OS's wake where too few handovers were seen: on the 2-vCPU VM these numbers come
    from, a thread handed the GIL soon after it began to wait takes it at once (medians 0.15-0.17 µs
    over 24 recordings each of the demo and of 40 small custom ops) while that wake takes 20-36 µs.
    Charged the wake, the demo replayed 18 % too slow (the first model), and the quickstart's 2 ms
    cell, which shows one to four handovers, +10.4 % (median of 72 recordings, 31 within 10 %); at
    once, -3.3 % (51 within 10 %).

    Why the waiter's sleep matters: the demo's program, woken from its wait for each step's loss,
    waited 2-3 ms a run for the GIL in the recordings, handed it 4-20 µs after each release while the
    pool's threads, waiting for microseconds, took it in 0.2 µs; replayed with one transfer for all,
    0.6-1 ms, and the demo 8-9 % too fast (15 of 24 within 10 %); with the asleep transfer, -6.3 %
    (21 of 24), the quickstart and the small ops as before."""
    meta = trace.metadata.get(GIL_METADATA)
    if not isinstance(meta, dict):
        return 0
    said = meta.get("asleep_transfer_ns" if asleep else "transfer_ns")
    if isinstance(said, int):
        return said
    if asleep and isinstance(meta.get("transfer_ns"), int):  # a prediction made before the asleep one
        return int(meta["transfer_ns"])
    seen, waited = _handovers_at_park(trace.thread_states)
    if asleep:
        long = seen[waited >= ASLEEP_NS]
        return int(np.median(long)) if len(long) >= MIN_ASLEEP_TRANSFERS else 0
    short = seen[waited < ASLEEP_NS]
    if len(short) < MIN_TRANSFERS:
        return 0
    hand = meta.get("handoffs")
    every = hand.get("all") if isinstance(hand, dict) else None
    wake = int(every.get("wake_ns_median", 0)) if isinstance(every, dict) else 0
    median = int(np.median(short))
    return min(median, wake) if wake > 0 else median


def _joined(ts: ThreadStates, first: ThreadState, then: ThreadState) -> np.ndarray:
    """Each run ``i`` in state ``first`` that run ``i + 1`` follows on its thread at once, in state
    ``then``: how a timed hand-off's exact runs show among the states (parked, then being woken,
    then waiting for the GIL; :mod:`opprof.profiler.gil` lays them over the samples)."""
    same = (ts.tid[1:] == ts.tid[:-1]) & (ts.end[:-1] == ts.start[1:])
    return np.flatnonzero(same & (ts.state[:-1] == first) & (ts.state[1:] == then))


def _wait_ends(ts: ThreadStates) -> np.ndarray:
    """Per run: where the wait for the GIL it belongs to ends. One wait named by several holders in
    turn (a hand-off's wait that another's timed taking covers in part,
    :meth:`~opprof.trace.threadstates.ThreadStates.overlaid`) is several ``WAIT`` runs back to
    back; its end, the moment its thread held the GIL, is the last one's. Read as the first run's
    end, the demo's GIL handovers came out shorter, and its replay without change 8-12 % too fast
    where it was 2-6 % before the holds named them."""
    n = len(ts)
    if not n:
        return ts.end.copy()
    goes_on = (ts.tid[1:] == ts.tid[:-1]) & (ts.end[:-1] == ts.start[1:])
    goes_on &= (ts.state[:-1] == ThreadState.WAIT) & (ts.state[1:] == ThreadState.WAIT)
    new = np.ones(n, dtype=bool)
    new[1:] = ~goes_on
    last = np.flatnonzero(np.append(new[1:], True))
    return ts.end[last][np.cumsum(new) - 1]


def _handovers_at_park(ts: ThreadStates | None) -> tuple[np.ndarray, np.ndarray]:
    """(ns, how long the waiter had waited) from a pool thread parking (a timed hand-off's
    ``BLOCKED`` run, exact) to a woken thread that waited for the GIL meanwhile (a timed ``WAIT``,
    exact) holding it: the last such park of another thread inside each wait, where no thread held
    the GIL between the park and the waiter's hold; and from the start of that wait to the park."""
    none = np.zeros(0, dtype=np.int64)
    if ts is None or len(ts) < 2:
        return none, none
    waits = _joined(ts, ThreadState.RUNNABLE, ThreadState.WAIT) + 1
    parks = _joined(ts, ThreadState.BLOCKED, ThreadState.RUNNABLE)
    if not len(waits) or not len(parks):
        return none, none
    order = np.argsort(ts.start[parks], kind="stable")
    p_at, p_tid = ts.start[parks][order], ts.tid[parks][order]
    # A park is the release that handed the GIL over only if no thread held it in between: in a
    # convoy (a Python spinning beside a program reading small results) the waiter took the GIL
    # when the spinner's switch interval was up, 5-10 ms after some pool thread parked, and those
    # pairs made the asleep transfer 10 ms on one recording in eight (the replay +60-118 %).
    holds = np.flatnonzero(np.isin(ts.state, HOLDING))
    by_start = np.argsort(ts.start[holds], kind="stable")
    h_at = ts.start[holds][by_start]
    h_end_max = np.maximum.accumulate(ts.end[holds][by_start]) if len(holds) else h_at
    out: list[int] = []
    waited: list[int] = []
    wait_end = _wait_ends(ts)[waits]
    for a, g, tid in zip(ts.start[waits].tolist(), wait_end.tolist(), ts.tid[waits].tolist(), strict=True):
        k = int(np.searchsorted(p_at, g, side="right")) - 1
        while k >= 0 and p_tid[k] == tid and p_at[k] >= a:  # its own park is not a handover to it
            k -= 1
        if k >= 0 and p_at[k] >= a:
            h = int(np.searchsorted(h_at, g, side="left")) - 1  # holds begun before the waiter's
            if h >= 0 and h_end_max[h] > p_at[k]:
                continue
            out.append(g - int(p_at[k]))
            waited.append(int(p_at[k]) - a)
    return np.array(out, dtype=np.int64), np.array(waited, dtype=np.int64)


def hand_offs_hold_gil(trace: TraceData, sampled: bool) -> bool:
    """Whether the model's hand-offs take the GIL (:meth:`.model.Model._hop`): as a model's
    prediction recorded it, else where the recording says when the GIL was held (``sampled``: it
    has thread states).

    Why a prediction records it: its thread states are the model's own, so a trace without GIL
    samples (the pure-Python recorder) gave a prediction that has them, and its replay made every
    hand-off hold the GIL where the prediction had not: 1.9-10.6 µs off on 4 of 150 recordings."""
    meta = trace.metadata.get(GIL_METADATA)
    if isinstance(meta, dict) and isinstance(meta.get("hand_offs_hold_gil"), bool):
        return bool(meta["hand_offs_hold_gil"])
    return sampled


def hop_held_ns(trace: TraceData) -> dict[str, int]:
    """What a woken pool thread does with the GIL before its work starts, by pool (``"engine"``,
    ``"custom"``): the median from the moment a timed hand-off held the GIL again to the next span
    on its thread (the engine's own Python: taking the item, a custom op's set-up), or what a
    model's prediction recorded; a pool without timed hand-offs is left out.

    Why measured, not the hop's latency less the OS wake: that rest also holds the moments before
    the put and after the op's start was stamped, and taken as GIL work it tripled the engine's
    part (9 µs against 1.5-3.5 µs measured on the demo) and saturated the model's GIL."""
    meta = trace.metadata.get(GIL_METADATA)
    if isinstance(meta, dict) and isinstance(meta.get("hop_held_ns"), dict):
        return {str(k): int(v) for k, v in meta["hop_held_ns"].items()}
    ts = trace.thread_states
    t = trace.table
    if ts is None or not len(ts) or not len(t):
        return {}
    runnable = np.flatnonzero(ts.state[:-1] == ThreadState.RUNNABLE)
    if not len(runnable):
        return {}
    nxt = runnable + 1  # the run after each wake: its wait for the GIL, if it waited
    waited = np.isin(runnable, _joined(ts, ThreadState.RUNNABLE, ThreadState.WAIT))
    got = np.where(waited, _wait_ends(ts)[nxt], ts.end[runnable])
    tids = ts.tid[runnable]
    order = np.lexsort((t.start, t.tid))
    s_tid, s_start = t.tid[order], t.start[order]
    out: dict[str, int] = {}
    for pool, prefix in (("engine", ENGINE_POOL.thread_prefix), ("custom", CUSTOM_POOL.thread_prefix)):
        gaps: list[np.ndarray] = []
        for tid in np.unique(tids).tolist():
            if not trace.thread_name(tid).startswith(prefix):
                continue
            lo, hi = np.searchsorted(s_tid, tid), np.searchsorted(s_tid, tid, side="right")
            starts = s_start[lo:hi]
            g = got[tids == tid]
            k = np.searchsorted(starts, g)
            ok = k < len(starts)
            gaps.append(starts[k[ok]] - g[ok])
        every = np.concatenate(gaps) if gaps else np.zeros(0, dtype=np.int64)
        if len(every):
            out[pool] = int(np.median(every))
    return out


def tail_held_ns(trace: TraceData, python: np.ndarray, dummy_push: np.ndarray) -> int:
    """What a custom-op thread does with the GIL after its Python returned and it pushed
    ``Dummy_Wait``, before it parks in the pool's queue (the engine's own Python: the call's
    bookkeeping, returning to the queue): the median from each ``Dummy_Wait``'s push to the
    thread's next park (a timed hand-off's ``BLOCKED`` run, exact), where it parked before its
    next Python; or what a model's prediction recorded; 0 where unknown. ``python`` holds each
    custom-op family's Python span, ``dummy_push`` when its ``Dummy_Wait`` was pushed (ns), as
    :func:`.prepare.prepare` pairs them.

    Measured here: 2.1 µs a call of 40 small custom ops (24 recordings, mean 4 µs), 11 µs on the
    demo's custom ops (mean 11.7 µs, whose Python ran under autograd)."""
    meta = trace.metadata.get(GIL_METADATA)
    if isinstance(meta, dict) and isinstance(meta.get("tail_held_ns"), int):
        return int(meta["tail_held_ns"])
    ts, t = trace.thread_states, trace.table
    if ts is None or not len(ts) or not len(python):
        return 0
    parks = _joined(ts, ThreadState.BLOCKED, ThreadState.RUNNABLE)
    gaps: list[np.ndarray] = []
    for tid in np.unique(t.tid[python]).tolist():
        p_at = np.sort(ts.start[parks][ts.tid[parks] == tid])
        if not len(p_at):
            continue
        mine = np.flatnonzero(t.tid[python] == tid)
        mine = mine[np.argsort(t.start[python[mine]], kind="stable")]
        nxt = np.append(t.start[python[mine]][1:], np.iinfo(np.int64).max)  # the thread's next Python
        push = dummy_push[mine]
        j = np.searchsorted(p_at, push)
        park = p_at[np.minimum(j, len(p_at) - 1)]
        ok = (j < len(p_at)) & (park < nxt)
        gaps.append(park[ok] - push[ok])
    every = np.concatenate(gaps) if gaps else np.zeros(0, dtype=np.int64)
    return int(np.median(every)) if len(every) else 0


def outside_holds(
    trace: TraceData, t0: int, end: int, engine_tids: set[int]
) -> list[tuple[int, list[int], list[int], list[int]]]:
    """The GIL that threads outside the engine held while it ran: a user's data loader, a library's
    thread (not a program that pushed or waited, no span, no pool's). They compete for the GIL
    with the engine but nothing in the engine feeds them, so the replay gives each the stretches
    it recorded, in order. Per thread (tid, asks, holds, gaps), relative to ``t0`` and clipped to
    ``[t0, t0 + end]``: each stretch asked for the GIL at ``asks[k]`` (where its wait began, else
    where its holding did), held it ``holds[k]`` ns (adjacent held runs, on a CPU or off, are one
    stretch), and began ``gaps[k]`` ns after the previous stretch ended (its own time between).
    Without them, a recording whose loader held the GIL for 30 ms replayed in 1 ms (0.03x)."""
    ts = trace.thread_states
    if ts is None or not len(ts):
        return []
    pool = (ENGINE_POOL.thread_prefix, CUSTOM_POOL.thread_prefix)
    holding = {int(h) for h in HOLDING}
    wait = int(ThreadState.WAIT)
    out: list[tuple[int, list[int], list[int], list[int]]] = []
    for tid in np.unique(ts.tid).tolist():
        if tid in engine_tids or trace.thread_name(tid).startswith(pool):
            continue
        rows = np.flatnonzero(ts.tid == tid)  # sorted by start (ThreadStates keeps (tid, start) order)
        asks: list[int] = []
        holds: list[int] = []
        gaps: list[int] = []
        asked, last_end, prev_held_end = -1, 0, -1
        for st, a, b in zip(ts.state[rows].tolist(), ts.start[rows].tolist(), ts.end[rows].tolist(), strict=True):
            a, b = max(a, t0) - t0, min(b, t0 + end) - t0
            if b <= a:
                continue
            if st == wait:
                asked = a if asked < 0 else asked
            elif st in holding:
                if holds and asked < 0 and a == prev_held_end:  # the same stretch, on a CPU or off
                    holds[-1] += b - a
                else:
                    ask = asked if asked >= 0 else a
                    gaps.append(max(0, ask - last_end))
                    asks.append(ask)
                    holds.append(b - a)
                asked, prev_held_end, last_end = -1, b, b
            else:
                asked = -1
        if holds:
            out.append((int(tid), asks, holds, gaps))
    return out


class Gil:
    """The lock as a resource of the discrete-event model. ``at(t, arg)`` schedules a callback to
    :meth:`event` with ``arg`` (stale ones are ignored by their generation number); ``done(t, free,
    ev, arg)`` is called when a piece's GIL part is over.

    A thread (``key``) whose piece ends with nothing off the GIL after it keeps the GIL for that
    instant: when its next piece asks at the same time (a program pushing in a loop, a Python
    between its pushes) it goes on holding, as CPython's thread does until the switch interval
    forces a drop; otherwise the GIL goes to the first waiter.
    """

    def __init__(
        self,
        interval_ns: int,
        at: Callable[[int, int], None],
        done: Callable[[int, int, int, int], None],
        log: Callable[[int, int, int, int], None] | None = None,
        transfer_ns: int = 0,
        asleep_transfer_ns: int | None = None,
    ) -> None:
        self.interval = max(1, interval_ns)
        #: What handing the GIL to a thread that waits for it costs: the OS waking that thread
        #: (the GIL is held by no one meanwhile); ``asleep``, to one that had waited
        #: :data:`ASLEEP_NS` or longer (None: the same). Taking a free GIL costs nothing.
        self.transfer = max(0, transfer_ns)
        self.asleep_transfer = self.transfer if asleep_transfer_ns is None else max(0, asleep_transfer_ns)
        self._log = log or (lambda key, state, a, b: None)  # (thread, ThreadState, start, end): what it did
        self._at = at
        self._done = done
        self.piece = -1  # the piece holding the GIL, -1 none
        self.key = -1  # the thread holding it (or keeping it for this instant), -1 none
        self.lingering = False
        self.slice_since = 0  # when the holding thread got it (or last kept it past a waiter)
        self.piece_since = 0
        self.gen = 0
        self.queue: deque[int] = deque()
        self.keys: list[int] = []
        self.left: list[int] = []
        self.free: list[int] = []
        self.ev: list[int] = []
        self.arg: list[int] = []
        self.arrived: list[int] = []  # when the piece's switch-interval clock started (its ask, or a switch)
        self.asked: list[int] = []  # when the piece last asked for the GIL: where its wait began
        self.slept: list[int] = []  # since when its thread has waited without running (asked, or woken to a taken GIL)
        self.ratio: list[float] = []  # ns without the GIL per ns with it
        self.chunk: list[int] = []  # ns with the GIL since the piece's last stretch without
        self.switches = 0  # drops forced by the switch interval
        self.waking = -1  # the waiter handed the GIL, until the OS has run it (-1 none)
        self.wake_gen = 0

    def request(self, t: int, key: int, gil_ns: int, free_ns: int, ev: int, arg: int) -> None:
        """Thread ``key``'s piece needs ``gil_ns`` with the GIL, then ``free_ns`` without; then event ``ev``."""
        i = len(self.left)
        self.keys.append(key)
        self.left.append(gil_ns)
        self.free.append(free_ns)
        self.ev.append(ev)
        self.arg.append(arg)
        self.arrived.append(t)
        self.asked.append(t)
        self.slept.append(t)
        self.ratio.append(free_ns / gil_ns if gil_ns > 0 else 0.0)
        self.chunk.append(0)
        self._ask(i, t)

    def _ask(self, i: int, t: int) -> None:
        key = self.keys[i]
        self.arrived[i] = self.asked[i] = self.slept[i] = t
        if self.lingering and self.key == key:  # the holder goes on
            self.lingering = False
            self.piece, self.piece_since = i, t
            self._schedule(t)
            return
        if self.piece < 0 and not self.lingering:
            self._acquire(i, t)
        else:
            self.queue.append(i)
            if len(self.queue) == 1 and self.piece >= 0:
                self._schedule(t)

    def _acquire(self, i: int, t: int) -> None:
        if t > self.asked[i]:
            self._log(self.keys[i], int(ThreadState.WAIT), self.asked[i], t)
        self.piece, self.key = i, self.keys[i]
        self.slice_since = self.piece_since = t
        self._schedule(t)

    def _schedule(self, t: int) -> None:
        """When the holder lets go: its work done, or a waiter's interval up, whichever first."""
        i = self.piece
        run = self.left[i]
        if self.free[i] > 0:  # to the end of its chunk, then a stretch without the GIL
            run = min(run, max(1, self.interval - self.chunk[i]))
        end = self.piece_since + run
        if self.queue:
            first = max(self.slice_since, self.arrived[self.queue[0]])
            end = min(end, max(t, first + self.interval))
        self.gen += 1
        self._at(end, 2 * self.gen)

    def event(self, t: int, gen: int) -> None:
        if gen % 2:
            if gen > 0:  # a piece back from a stretch without the GIL
                self._ask((gen - 1) // 2, t)
            else:  # a waiter handed the GIL is up
                self._woken(t, (-gen - 1) // 2)
            return
        gen //= 2  # slice ends even, instants' ends negative and even
        if gen < 0:  # the instant a piece ended is over: a thread that did not ask again lets go
            if gen == -self.gen and self.lingering:
                self.lingering = False
                self._hand_over(t)
            return
        if gen != self.gen or self.piece < 0:
            return
        i = self.piece
        used = t - self.piece_since
        self._log(self.keys[i], int(ThreadState.HELD), self.piece_since, t)
        self.left[i] -= used
        self.chunk[i] += used
        self.piece = -1
        if self.left[i] > 0 and self.free[i] > 0 and self.chunk[i] >= self.interval:
            off = min(self.free[i], max(1, round(self.chunk[i] * self.ratio[i])))
            self.free[i] -= off
            self.chunk[i] = 0
            self._log(self.keys[i], int(ThreadState.BLOCKED), t, t + off)
            self._at(t + off, 2 * i + 1)
            self._hand_over(t)
            return
        if self.left[i] <= 0:
            if self.free[i] > 0:
                self._log(self.keys[i], int(ThreadState.BLOCKED), t, t + self.free[i])
            self._done(t, self.free[i], self.ev[i], self.arg[i])
            if self.free[i] <= 0:  # keep it for this instant: its thread may ask again at once
                self.lingering = True
                self.gen += 1
                self._at(t, -2 * self.gen)
                return
        else:  # forced to drop: to the back of the queue
            self.switches += 1
            self.arrived[i] = self.asked[i] = t
            self.queue.append(i)
        self._hand_over(t)

    def _hand_over(self, t: int) -> None:
        self.key = -1
        if not self.queue or self.waking >= 0:  # nobody waits, or one is being woken already
            return
        nxt = self.queue.popleft()
        transfer = self.asleep_transfer if t - self.slept[nxt] >= ASLEEP_NS else self.transfer
        if transfer <= 0:
            self._take(nxt, t)
            return
        # The first waiter is signalled and holds the GIL once the OS ran it. The GIL is free
        # meanwhile, and a thread that asks for it then takes it, as CPython's does (only a
        # switch-interval drop waits for the waiter): the waiter, up, waits again, still first.
        self.waking = nxt
        self.wake_gen += 1
        self._at(t + transfer, -(2 * self.wake_gen + 1))

    def _woken(self, t: int, gen: int) -> None:
        if gen != self.wake_gen or self.waking < 0:
            return
        nxt, self.waking = self.waking, -1
        if self.piece < 0 and not self.lingering:
            self._take(nxt, t)
        else:  # taken while it woke: awake now, waiting again
            self.slept[nxt] = t
            self.queue.appendleft(nxt)
            if self.piece >= 0 and len(self.queue) == 1:
                self._schedule(t)

    def _take(self, nxt: int, t: int) -> None:
        if self.queue:  # the next waiter's interval starts at the switch
            self.arrived[self.queue[0]] = max(self.arrived[self.queue[0]], t)
        self._acquire(nxt, t)
