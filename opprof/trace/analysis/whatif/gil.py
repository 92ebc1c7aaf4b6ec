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
holder drops at once and queues again at the back). The work without the GIL follows the work
with it. A free-threaded build (``gil=False``) has no lock: every piece runs at once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

from ...data import TraceData
from ...threadstates import STATES, ThreadState

__all__ = ["DEFAULT_SWITCH_INTERVAL", "Gil", "gil_shares"]

#: CPython's default switch interval (s), for a trace that did not record its own.
DEFAULT_SWITCH_INTERVAL = 0.005
_K = {s: k for k, s in enumerate(STATES)}


def gil_shares(
    trace: TraceData, tid: np.ndarray, start: np.ndarray, end: np.ndarray, cpu_share: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each piece ``[start, end)`` on thread ``tid`` (absolute ns): the ns it waited for the GIL
    (dropped from its work) and the share of the rest that held the GIL.

    ``cpu_share`` is the fallback where the GIL was not sampled (-1: none known, taken as 0).
    """
    n = len(tid)
    wait = np.zeros(n, dtype=np.int64)
    share = np.where(cpu_share >= 0, np.clip(cpu_share, 0.0, 1.0), 0.0).astype(np.float64)
    ts = trace.thread_states
    if ts is None or not len(ts) or not n:
        return wait, share
    ov = ts.overlap(tid, start, end)
    held = ov[:, _K[ThreadState.HELD]]
    waited = ov[:, _K[ThreadState.WAIT]]
    # A piece shorter than two sampling periods sits inside one sampled run, which may have been a
    # wait for the GIL before it ran: its waiting is not told apart, and counts as needing the GIL.
    short = (end - start) < 2 * (ts.period_ns or 1_000_000)
    held = np.where(short, held + waited, held)
    waited = np.where(short, 0, waited)
    rest = ov.sum(axis=1) - waited
    sampled = (rest > 0) | (waited > 0)
    wait = np.where(sampled, np.minimum(waited, np.maximum(end - start, 0)), 0)
    share = np.where(rest > 0, held / np.maximum(rest, 1), np.where(sampled, 0.0, share))
    return wait.astype(np.int64), share


class Gil:
    """The lock as a resource of the discrete-event model; ``at(t, arg)`` schedules a callback
    to :meth:`slice_end` with ``arg`` (stale ones are ignored by their generation number)."""

    def __init__(self, interval_ns: int, at: Callable[[int, int], None], done: Callable[[int, int, int, int], None]) -> None:
        self.interval = max(1, interval_ns)
        self._at = at
        self._done = done  # (t, free ns, event, arg): the GIL part of a piece is over
        self.holder = -1
        self.since = 0
        self.gen = 0
        self.queue: deque[int] = deque()
        self.left: list[int] = []
        self.free: list[int] = []
        self.ev: list[int] = []
        self.arg: list[int] = []
        self.arrived: list[int] = []
        self.held_ns = 0
        self.switches = 0

    def request(self, t: int, gil_ns: int, free_ns: int, ev: int, arg: int) -> None:
        """A piece needs ``gil_ns`` with the GIL, then ``free_ns`` without; then event ``ev``."""
        i = len(self.left)
        self.left.append(gil_ns)
        self.free.append(free_ns)
        self.ev.append(ev)
        self.arg.append(arg)
        self.arrived.append(t)
        if self.holder < 0:
            self._acquire(i, t)
        else:
            self.queue.append(i)
            if len(self.queue) == 1:
                self._schedule(t)

    def _acquire(self, i: int, t: int) -> None:
        self.holder, self.since = i, t
        self._schedule(t)

    def _schedule(self, t: int) -> None:
        """When the holder lets go: its work done, or a waiter's interval up, whichever first."""
        i = self.holder
        end = self.since + self.left[i]
        if self.queue:
            first = max(self.since, self.arrived[self.queue[0]])
            end = min(end, max(t, first + self.interval))
        self.gen += 1
        self._at(end, self.gen)

    def slice_end(self, t: int, gen: int) -> None:
        if gen != self.gen or self.holder < 0:
            return
        i = self.holder
        used = t - self.since
        self.held_ns += used
        self.left[i] -= used
        self.holder = -1
        if self.left[i] <= 0:
            self._done(t, self.free[i], self.ev[i], self.arg[i])
        else:  # forced to drop: to the back of the queue, its waiter's timer starts now
            self.switches += 1
            self.arrived[i] = t
            self.queue.append(i)
        if self.queue and self.holder < 0:
            nxt = self.queue.popleft()
            if self.queue:
                self.arrived[self.queue[0]] = max(self.arrived[self.queue[0]], t)
            self._acquire(nxt, t)
