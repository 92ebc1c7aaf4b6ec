"""The threaded engine: ready ops run on a pool of hot worker threads, custom-op Python on its own.

A worker that completes an op runs the op that became ready next itself, so a chain of dependent
ops costs no thread hand-off at all (a hand-off to a parked thread costs 40-55 µs across cores on
this kind of machine). An idle thread polls its queue for up to ``spin_us`` before it parks
(:data:`opprof.engine.handoff.SPIN_US`), so work handed back soon (a custom op's sub-ops, its next
call) costs no wake either. Threads are named ``opprof-engine-N`` and ``opprof-custom-N``
(:data:`ENGINE_THREAD_PREFIX`, :data:`CUSTOM_THREAD_PREFIX`).
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from ..trace.records import CUSTOM_THREAD_PREFIX, DEFAULT_MAX_PENDING, ENGINE_THREAD_PREFIX
from . import gil, handoff
from . import interrupts as _guard
from .core import Engine
from .interrupts import shielded
from .opr import OP_SEQ, Opr, OprInfo, Var, report_uncaught
from .state import thread_state

__all__ = ["CUSTOM_THREAD_PREFIX", "ENGINE_THREAD_PREFIX", "CustomPool", "ThreadedEngine"]

# Thread names, so a trace (and a person reading ``threading.enumerate()``) can tell them apart:
# their prefixes live in the trace layer (opprof.trace.records.ENGINE_POOL / CUSTOM_POOL), which
# reads them back.


#: The most threads an engine's pool may be asked for: far past any machine's cores (Python threads
#: share one GIL), and each costs a stack: 99,999,999,999 asked for once took 11 GB before failing.
MAX_POOL_THREADS = 1024


class CustomPool:
    """Worker threads for custom operators' Python; grows while its workers are blocked in waits.

    A custom op whose ``forward()`` waits on an array that another queued custom op produces would
    deadlock a fixed-size pool. Blocked workers therefore do not count toward the pool's size.
    """

    def __init__(self, size: int, prefix: str, spin_us: float = 0.0) -> None:
        self._size = max(1, size)
        self._prefix = prefix
        self._tasks = handoff.work_queue(handoff.QueueKind.CUSTOM, spin_us)  # timed hand-offs where compiled
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        # Tasks submitted and not yet claimed by a thread: counted under the lock, with the put
        # and with the taker's _idle -= 1, never read off the queue (see _grow).
        self._queued = 0
        self._blocked = 0
        self._names = itertools.count()
        self._closing = False
        # The pool's own threads start now, not at its first tasks: a thread started there is
        # started by the engine worker running the custom op, which waits in Thread.start() until
        # the new thread holds the GIL, and a profile cannot sample a thread before its first line
        # of Python. Behind a thread spinning in Python, a fresh engine's first four custom ops
        # waited 15 ms that way and were said to queue for a busy pool or a wake (2026-12-05); a
        # thread parked on the queue costs nothing meanwhile. Threads past the size are still
        # started on demand (see _grow).
        with self._lock:
            for _ in range(self._size):
                self._start_thread()

    def submit(self, task: Callable[[], None]) -> None:
        with self._lock:
            self._queued += 1
            self._grow()
        # Put after the lock: a woken thread takes the lock first thing, and the putter held it
        # while it grew the pool. Counted before it is put, so the counts never miss a task that a
        # thread has taken (an unclaimed task counted a moment early can only start a thread the
        # pool was short of anyway).
        self._tasks.put(task)  # never blocks

    def blocked(self, delta: int) -> None:
        with self._lock:
            self._blocked += delta
            if delta > 0:
                self._grow()

    def _grow(self) -> None:
        # More tasks unclaimed than idle threads to claim them: start another. A thread counts as
        # idle, and its task as unclaimed, until it has both taken a task off the queue and said
        # so under the lock: the two counts move together. (The queue's qsize() instead no longer
        # counted a task a thread had just taken while that thread, not yet past the lock, still
        # counted as idle: a fresh pool of 3 started 2 threads for a burst of 3 and ran the third
        # after them, on either queue. Comparing with "no idle thread" let a burst run one at a
        # time while the first new thread waited for the GIL.)
        if self._closing:  # close()'s stop tokens must not start threads (they are not counted anyway)
            return
        active = len(self._threads) - self._blocked
        if active < self._size and self._queued > self._idle:
            self._start_thread()

    def _start_thread(self) -> None:
        """With the lock held: one more thread, idle until it takes its first task."""
        t = threading.Thread(target=self._run, name=f"{self._prefix}{next(self._names)}", daemon=True)
        self._threads.append(t)
        self._idle += 1
        t.start()

    def _run(self) -> None:
        thread_state.custom_pool = self
        gil.register_engine_thread()  # a profile's GIL sampler knows this thread (a no-op without it)
        tasks = self._tasks
        while True:
            task = tasks.get()
            with self._lock:
                self._idle -= 1
                if task is not None:  # close()'s stop tokens were never counted as queued
                    self._queued -= 1
            if task is None:
                gil.unregister_thread()
                return
            try:
                task()
            except BaseException:
                # A task completes its op whatever happens in it (each is shielded); one that
                # raised anyway is a bug, said as an uncaught exception in a thread is, and the
                # pool keeps this thread: a thread gone would still count as one of its size.
                report_uncaught()
            finally:
                task = None  # its closure holds the custom op's arrays: not until the next task
                with self._lock:
                    # Past the pool's size (it grew while Pythons were blocked in waits: a deep
                    # fan-out left 265 threads), a thread with nothing queued for it retires.
                    surplus = len(self._threads) - self._blocked > self._size and self._queued <= self._idle
                    if surplus and not self._closing and threading.current_thread() in self._threads:
                        self._threads.remove(threading.current_thread())
                        retire = True
                    else:
                        retire = False
                        self._idle += 1
                        # A task may have arrived while every worker was busy.
                        self._grow()
            if retire:
                gil.unregister_thread()
                return

    def close(self) -> None:
        with self._lock:
            # Set before the stop tokens go in: a worker finishing its task calls _grow, which
            # would otherwise count the tokens as work and start a thread that takes one of them,
            # leaving a thread it was meant for running forever (seen as a hung join).
            self._closing = True
            threads = list(self._threads)
            self._threads.clear()
        for _ in threads:
            self._tasks.put(None)
        for t in threads:
            t.join()


class ThreadedEngine(Engine):
    """Runs ready ops on ``workers`` hot threads; custom-op Python on its own thread pool."""

    kind = "threaded"

    def __init__(
        self,
        workers: int | None = None,
        custom_workers: int | None = None,
        max_pending: int = DEFAULT_MAX_PENDING,
        spin_us: float | None = None,
    ) -> None:
        super().__init__()
        if max_pending < 2:
            raise ValueError(f"max_pending must be at least 2, got {max_pending}")
        #: µs a thread of this engine that finds its queue empty polls it before parking
        #: (:data:`opprof.engine.handoff.SPIN_US`; compiled queues only).
        self.spin_us = handoff.check_spin_us(handoff.SPIN_US if spin_us is None else spin_us)
        self.max_pending = max_pending
        cpus = os.cpu_count() or 1
        for what, n in (("workers", workers), ("custom_workers", custom_workers)):
            if n is not None and n > MAX_POOL_THREADS:
                raise ValueError(f"{what}={n:,}: at most {MAX_POOL_THREADS:,} threads a pool (each takes a stack)")
        self.workers = max(1, workers if workers is not None else cpus)
        self.custom_workers = max(1, custom_workers if custom_workers is not None else max(2, cpus))
        self._ready = handoff.work_queue(handoff.QueueKind.ENGINE, self.spin_us)
        self._threads = [
            threading.Thread(target=self._worker, name=f"{ENGINE_THREAD_PREFIX}{i}", daemon=True) for i in range(self.workers)
        ]
        for t in self._threads:
            t.start()
        self._custom = CustomPool(self.custom_workers, CUSTOM_THREAD_PREFIX, self.spin_us)

    @shielded
    def push_op(
        self,
        fn: Callable[..., Any],
        reads: tuple[Var, ...],
        writes: tuple[Var, ...],
        name: str,
        kernel: bool = False,
        *,
        is_async: bool = False,
        no_skip: bool = False,
        info: OprInfo = None,
    ) -> None:
        """Register an op on its vars in this one frame when nothing special applies.

        Nothing special: the Ctrl-C shield in place (so nothing interrupts this frame), no
        throttling due, no deleted var; everything else takes :meth:`push`'s path, whose five
        frames (push, _check and its two _normalise, _submit, _push) cost 2.1 µs more a push.
        """
        if (
            self._closed
            or (self._pending >= self.max_pending and self._may_throttle())
            or _guard.getsignal(_guard.SIGINT) is not _guard.on_sigint
        ):
            self._submit(Opr(fn, *self._check(reads, writes), name, is_async, no_skip, info))
            return
        for v in reads:
            if v.deleted:
                self._check(reads, writes)  # raises
        for v in writes:
            if v.deleted:
                self._check(reads, writes)
        opr = Opr(fn, reads, writes, name, is_async, no_skip, info)
        obs = self.observer
        if obs is not None:
            obs.on_push(opr)  # before the op is registered, as on the general path
        blocked = 0
        lock = self._lock
        lock.acquire()  # not ``with``: 0.18 µs less a push, and nothing can interrupt this frame
        try:
            self._pending += 1
            self._seq = opr.seq = next(OP_SEQ)
            # Engine._push's registration without its interruption bookkeeping (the shield holds here).
            for v in reads:
                if v._writing or v._queue:
                    blocked += 1
                    (v._queue or v.new_queue()).append((opr, False))
                else:
                    v._running_reads += 1
            for v in writes:
                if v._writing or v._running_reads or v._queue:
                    blocked += 1
                    (v._queue or v.new_queue()).append((opr, True))
                else:
                    v._writing = True
            opr.wait = blocked
        finally:
            lock.release()
        if blocked == 0:
            opr.dispatched = True
            self._ready.put(opr)
        if _guard.deferred is not None:  # a Ctrl-C that landed in this frame (an observer's on_push)
            _guard.raise_deferred(sys._getframe(1))

    @shielded
    def _dispatch(self, opr: Opr) -> None:
        opr.dispatched = True  # nothing can interrupt between this and the put
        self._ready.put(opr)

    def _worker(self) -> None:
        st = thread_state
        st.engine_worker = self
        handoffs = st.custom_handoffs = []  # see run_custom
        gil.register_engine_thread()  # a profile's GIL sampler knows this thread (a no-op without it)
        ready = self._ready
        execute = self._execute
        complete = self._complete
        while True:
            opr = ready.get()
            if opr is None:
                gil.unregister_thread()
                return
            # Run the chain of ops that each completion makes ready here, without a hand-off;
            # any further ready ops go to the queue for the other workers.
            while True:
                if opr.is_async or (self._failed_vars and not opr.no_skip):
                    nxt = execute(opr)
                    while handoffs:  # the op's custom-op Python, handed over as the op returns
                        self._custom.submit(handoffs.pop(0))
                else:
                    # _execute's common case, two frames fewer (it and call_user: 0.3 µs an op).
                    # call_user only matters on the main thread, where a Ctrl-C can land; no var
                    # holds an error (or the op runs anyway), so the op cannot be one to skip.
                    obs = self.observer
                    try:
                        if obs is None:
                            opr.fn()
                        else:
                            obs.run(opr, opr.fn)
                    except BaseException as e:
                        nxt = complete(opr, e)
                    else:
                        nxt = complete(opr, None)
                if not nxt:
                    break
                opr = nxt[0]
                if len(nxt) > 1:
                    for other in nxt[1:]:
                        ready.put(other)
            # Nothing of the last op kept while this thread waits for the next, which may be long:
            # its observer may be a profile that has stopped since, with all its records.
            opr = obs = None
            del nxt

    def run_custom(self, task: Callable[[], None]) -> None:
        """Hand ``task`` (a custom op's Python) to the custom-op pool.

        Called by the custom op's async op on one of this engine's workers, the task is handed
        over when that op returns, not here: the woken custom-op thread needs the GIL, which this
        worker holds until it parks on its queue again, and everything between this call and that
        park (the op's return, a profile's span end) was the hop's GIL wait. Handed over as the op
        returns, the hop to a custom-op thread (put to GIL held, median of 300 trivial custom ops)
        went from 1.05 µs, 2.15x a two-thread ping-pong's one way, to 0.55 µs, 1.16x (9 rounds each).
        """
        st = thread_state
        handoffs = st.custom_handoffs
        if st.engine_worker is self and handoffs is not None:
            handoffs.append(task)
        else:
            self._custom.submit(task)

    def shutdown(self) -> None:
        if self._closed:
            return
        try:
            self._wait_idle()
        finally:
            self._closed = True
            for _ in self._threads:
                self._ready.put(None)
            for t in self._threads:
                t.join()
            self._custom.close()
            _guard.restore()
        if _guard.deferred is not None:
            _guard.raise_deferred(sys._getframe(1))
