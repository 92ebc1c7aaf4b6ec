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

from collections import deque
from collections.abc import Callable

import numpy as np

from ...data import TraceData
from ...threadstates import GIL_METADATA, STATES, ThreadState

__all__ = ["DEFAULT_SWITCH_INTERVAL", "EXACT_PERIOD_NS", "Gil", "gil_shares", "gil_transfer_ns"]

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
    h, w = ov[:, _K[ThreadState.HELD]], ov[:, _K[ThreadState.WAIT]]
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


def gil_transfer_ns(trace: TraceData) -> int:
    """What handing the GIL to a waiting thread cost in the recording: the median wake of the
    engine's timed hand-offs (the same OS wake-up), or what a model's prediction recorded; 0
    where neither is known (the GIL then changes hands at once)."""
    meta = trace.metadata.get(GIL_METADATA)
    if not isinstance(meta, dict):
        return 0
    if isinstance(meta.get("transfer_ns"), int):
        return int(meta["transfer_ns"])
    hand = meta.get("handoffs")
    every = hand.get("all") if isinstance(hand, dict) else None
    return int(every.get("wake_ns_median", 0)) if isinstance(every, dict) else 0


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
    ) -> None:
        self.interval = max(1, interval_ns)
        #: What handing the GIL to a thread that waits for it costs: the OS waking that thread
        #: (the GIL is held by no one meanwhile). Taking a free GIL costs nothing.
        self.transfer = max(0, transfer_ns)
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
        self.ratio: list[float] = []  # ns without the GIL per ns with it
        self.chunk: list[int] = []  # ns with the GIL since the piece's last stretch without
        self.switches = 0  # drops forced by the switch interval

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
        self.ratio.append(free_ns / gil_ns if gil_ns > 0 else 0.0)
        self.chunk.append(0)
        self._ask(i, t)

    def _ask(self, i: int, t: int) -> None:
        key = self.keys[i]
        self.arrived[i] = self.asked[i] = t
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
        if gen > 0 and gen % 2:  # a piece back from a stretch without the GIL
            self._ask((gen - 1) // 2, t)
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
        if self.queue:
            nxt = self.queue.popleft()
            at = t + self.transfer  # the waiter is woken: it holds the GIL once the OS ran it
            if self.queue:  # the next waiter's interval starts at the switch
                self.arrived[self.queue[0]] = max(self.arrived[self.queue[0]], at)
            self._acquire(nxt, at)
