"""A dependency engine in the style of MXNet's ThreadedEngine.

Work is pushed as *ops* that declare the *vars* they read and write. An op runs once every earlier
op that conflicts with it on a var has finished: reads of a var may overlap, a write is exclusive.
Each var keeps a FIFO of waiting ops (a "version queue"); there is no global graph.

Two engines share the dependency machinery and differ only in where a ready op runs:

* :class:`ThreadedEngine` hands ready ops to a pool of hot worker threads. A worker that completes
  an op runs the op that became ready next itself, so a chain of dependent ops costs no thread
  hand-off at all (a hand-off costs 40-55 µs across cores on this kind of machine).
* :class:`NaiveEngine` runs every op inline, on the pushing thread, at push time. It is slow, easy
  to reason about, and the oracle that tests compare the threaded engine against.

Errors: an exception raised by an op is stored on every var the op writes. Ops that touch a failed
var are skipped and pass the same exception object on to the vars they write. The exception is
raised (with its original traceback) at the next wait on an affected var, or at ``wait_for_all``.
Raising it clears it, so the engine and the arrays stay usable afterwards - as in MXNet.

Ctrl-C: the bookkeeping (registering, completing and dispatching ops) is shielded by
:mod:`opprof.interrupts`, so an interrupt never leaves an op half-registered; user code an op runs
goes through :func:`~opprof.interrupts.call_user` and stays interruptible. Blocking waits use a
plain lock as a gate (acquired in C, atomically), never a Condition on the engine lock: an interrupt
inside ``Condition.wait`` can leave the lock it guards released while its owner thinks it holds it.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from queue import SimpleQueue
from typing import Any

from . import interrupts as _guard
from .interrupts import call_user

__all__ = [
    "Var",
    "Engine",
    "ThreadedEngine",
    "NaiveEngine",
    "get_engine",
    "set_engine",
    "EngineError",
]

_var_ids = itertools.count(1)

#: ``info`` of the engine's own bookkeeping ops (the token a wait pushes); profilers skip them.
INTERNAL = object()


class EngineError(RuntimeError):
    """Misuse of the engine that would otherwise deadlock or corrupt state."""


class Var:
    """A dependency token: ops that read or write it are ordered through its version queue.

    The fields are engine-private state, mutated only under the engine's lock.
    """

    __slots__ = ("_cleared_at", "_queue", "_running_reads", "_writing", "deleted", "exception", "id", "name")

    def __init__(self, name: str | None = None) -> None:
        self.id = next(_var_ids)
        self.name = name
        # Waiting ops in push order: (opr, is_write).
        self._queue: deque[tuple[_Opr, bool]] = deque()
        self._running_reads = 0
        self._writing = False
        self.exception: BaseException | None = None
        # Set when a wait has raised ``exception``: ops pushed from then on no longer see it,
        # while ops pushed earlier (and still queued) are skipped as they would have been.
        self._cleared_at: int | None = None
        self.deleted = False

    def __repr__(self) -> str:
        label = f" {self.name!r}" if self.name else ""
        return f"<Var {self.id}{label}>"


class _Opr:
    """One pushed operation and the number of vars it still waits for."""

    __slots__ = ("dispatched", "done", "fn", "info", "is_async", "name", "no_skip", "prof", "reads", "seq", "wait", "writes")

    def __init__(
        self,
        fn: Callable[..., Any],
        reads: tuple[Var, ...],
        writes: tuple[Var, ...],
        name: str,
        is_async: bool,
        no_skip: bool,
        info: Any,
    ) -> None:
        self.fn = fn
        self.reads = reads
        self.writes = writes
        self.name = name
        self.wait = 0
        self.is_async = is_async
        self.no_skip = no_skip
        self.done = False
        self.dispatched = False  # handed to _dispatch (set before anything can interrupt it)
        self.seq = 0  # push order, set under the engine lock
        self.prof: Any = None  # what a profiler noted at push time
        # Free slot for the layers above (the profiler records who pushed the op here).
        self.info = info


class _Completion:
    """The callback handed to an async op; calling it (once) completes the op."""

    __slots__ = ("_engine", "_opr")

    def __init__(self, engine: Engine, opr: _Opr) -> None:
        self._engine = engine
        self._opr = opr

    def __call__(self, error: BaseException | None = None) -> None:
        try:
            self._engine._finish(self._opr, error, from_worker=False)
        except KeyboardInterrupt:
            _guard.merge_deferred()
            raise
        if _guard.deferred is not None:
            _guard.raise_deferred(sys._getframe(1))


class _ThreadState(threading.local):
    """What the engine knows about the current thread. The class attributes are the defaults, so
    reading one on a thread that never set it is a plain lookup: ``getattr(local, name, None)``
    on a missing name raises and swallows an AttributeError, ~0.4 µs on every push."""

    engine_worker: Engine | None = None  # the engine whose op this thread is running
    custom_pool: _CustomPool | None = None  # the custom-op pool this thread works for
    async_body: bool = False  # running an async op's body inline (naive engine)
    bound_engine: Engine | None = None  # the engine this thread pushes to (a custom op's Python)


_tls = _ThreadState()


def _normalise(vars_: Iterable[Var] | None) -> tuple[Var, ...]:
    if not vars_:
        return ()
    out: list[Var] = []
    for v in vars_:
        if not isinstance(v, Var):
            raise TypeError(f"expected an engine Var, got {type(v).__name__}")
        if v not in out:
            out.append(v)
    return tuple(out)


def _entry_point(method: Callable[..., Any]) -> Callable[..., Any]:
    """A public wait: a KeyboardInterrupt leaving it takes any Ctrl-C held back meanwhile with it."""

    @functools.wraps(method)
    def entry(*args: Any) -> Any:
        try:
            return method(*args)
        except KeyboardInterrupt:
            _guard.merge_deferred()
            raise

    return entry


class Engine:
    """Dependency tracking shared by every engine; subclasses decide where ready ops run."""

    kind = "base"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending = 0  # ops pushed and not yet complete
        self._seq = 0  # ops pushed so far
        # Locked gates of threads waiting for no op to be pending; released (under the lock) then.
        self._idle_gates: list[threading.Lock] = []
        # Errors not yet raised to the user, in the order they happened, and the vars holding them.
        self._errors: dict[int, BaseException] = {}
        self._failed_vars: set[Var] = set()
        self._closed = False
        # Back-pressure: a pusher that runs too far ahead waits until the backlog halves. Running
        # ahead without bound allocates every output at once (20,000 pushed 100x100 adds are 800
        # MB of fresh pages, which made each op ~15x slower) instead of reusing warm buffers. The
        # threaded default, 128, keeps a 100x100 chain's buffers in cache: 9.3 µs/op against
        # 13.7 µs with 1,024 and 10.4 µs with 64 (which hands the GIL over more often).
        self.max_pending: float = float("inf")
        self._space_gates: list[threading.Lock] = []  # throttled pushers, released when the backlog halves
        # Hook for the profiler (and tests): ``observer.on_push(opr)`` on the pushing thread, then
        # ``observer.run(opr, fn, *args)`` must call ``fn(*args)`` on the executing thread. An
        # observer with ``clock()`` and ``on_wait(name, t0, t1)`` also hears of blocking waits.
        self.observer: Any = None

    # ------------------------------------------------------------------ public API
    def new_var(self, name: str | None = None) -> Var:
        """A fresh var with no pending ops."""
        return Var(name)

    def push(
        self,
        fn: Callable[[], Any],
        reads: Sequence[Var] = (),
        writes: Sequence[Var] = (),
        name: str = "op",
        *,
        no_skip: bool = False,
        info: Any = None,
    ) -> None:
        """Run ``fn()`` once every earlier conflicting op on ``reads``/``writes`` has finished.

        ``no_skip`` ops run even when a var they touch holds an error (waits and completions need
        that), and Ctrl-C never cuts them short; other ops are skipped and pass the error on to the
        vars they write.
        """
        self._submit(_Opr(fn, *self._check(reads, writes), name, False, no_skip, info))

    def push_async(
        self,
        fn: Callable[[Callable[..., None]], Any],
        reads: Sequence[Var] = (),
        writes: Sequence[Var] = (),
        name: str = "op",
        *,
        no_skip: bool = False,
        info: Any = None,
    ) -> None:
        """Like :meth:`push`, but ``fn(on_complete)`` returns at once and the op is complete only
        when ``on_complete()`` (or ``on_complete(error)``) is called, from any thread."""
        self._submit(_Opr(fn, *self._check(reads, writes), name, True, no_skip, info))

    def _submit(self, opr: _Opr) -> None:
        """Push ``opr``; then deliver a Ctrl-C that the bookkeeping held back (see opprof.interrupts)."""
        try:
            self._push(opr)
        except KeyboardInterrupt:
            _guard.merge_deferred()
            raise
        if _guard.deferred is not None:
            _guard.raise_deferred(sys._getframe(2))  # the caller of push/push_async

    @_entry_point
    def wait_for_var(self, var: Var) -> None:
        """Block until every write pushed so far to ``var`` is done; raise its error if it failed."""
        self._forbid_wait_in_op("wait_for_var")
        obs = self.observer if hasattr(self.observer, "on_wait") else None
        t0 = obs.clock() if obs is not None else 0
        with self._lock:
            quiet = not var._writing and not var._queue
        if not quiet:
            self._wait_for_op(var)
        if obs is not None:
            obs.on_wait("WaitForVar", t0, obs.clock())
        if _guard.deferred is not None:  # a Ctrl-C held back by the bookkeeping above; before the
            _guard.raise_deferred(sys._getframe(2))  # var's error is taken, so that is not lost
        with self._lock:
            exc = var.exception if var._cleared_at is None else None
            if exc is not None:
                var._cleared_at = self._seq + 1
                self._errors.pop(id(exc), None)
        if exc is not None:
            raise exc

    @_entry_point
    def wait_for_all(self) -> None:
        """Block until every pushed op is done; raise the first error no wait has raised yet."""
        self._forbid_wait_in_op("wait_for_all")
        if _tls.custom_pool is not None or _tls.async_body:
            raise EngineError(
                "wait_for_all (mx.nd.waitall) was called inside a custom operator's Python; it would "
                "wait for that operator itself. Wait on the arrays you need (asnumpy, wait_to_read) instead."
            )
        obs = self.observer if hasattr(self.observer, "on_wait") else None
        t0 = obs.clock() if obs is not None else 0
        self._wait_idle()
        if obs is not None:
            obs.on_wait("WaitForAll", t0, obs.clock())
        if _guard.deferred is not None:
            _guard.raise_deferred(sys._getframe(2))
        with self._lock:
            errors = list(self._errors.values())
            self._errors.clear()
            for v in self._failed_vars:
                v.exception = None
                v._cleared_at = None
            self._failed_vars.clear()
        if errors:
            raise errors[0]

    def delete_var(self, var: Var) -> None:
        """Free ``var`` once the ops pushed on it so far are done; pushing on it later is an error."""

        def _delete() -> None:
            var.deleted = True

        self.push(_delete, (), (var,), "DeleteVariable", no_skip=True)

    def shutdown(self) -> None:
        """Finish pending work and stop every thread this engine started."""
        self._closed = True

    @property
    def pending(self) -> int:
        """Ops pushed and not yet complete."""
        return self._pending

    # ------------------------------------------------------------------ custom-op support
    def run_custom(self, task: Callable[[], None]) -> None:
        """Run a custom operator's Python body (on its own worker thread where there is one)."""
        raise NotImplementedError

    def on_custom_thread(self) -> bool:
        return _tls.custom_pool is not None

    # ------------------------------------------------------------------ machinery
    def _check(self, reads: Sequence[Var], writes: Sequence[Var]) -> tuple[tuple[Var, ...], tuple[Var, ...]]:
        r = _normalise(reads)
        w = _normalise(writes)
        if r and w:
            both = [v for v in r if v in w]
            if both:
                raise ValueError(
                    f"var {both[0]!r} is in both reads and writes of one op; "
                    "list it only in writes (a write already has exclusive access)"
                )
        for v in itertools.chain(r, w):
            if v.deleted:
                raise EngineError(f"{v!r} was deleted with delete_var and cannot be used again")
        if self._closed:
            raise EngineError(f"this {type(self).__name__} has been shut down; use opprof.engine.get_engine()")
        return r, w

    def _push(self, opr: _Opr) -> None:
        handler = _guard.getsignal(_guard.SIGINT)
        if handler is not _guard.on_sigint and handler is not _guard.skip:
            _guard.install()
        if self._pending >= self.max_pending and self._may_throttle():
            self._throttle()
        obs = self.observer
        if obs is not None:
            obs.on_push(opr)
        # A KeyboardInterrupt reaches the main thread between bytecodes. This function is shielded
        # (see opprof.interrupts), but a program with its own SIGINT handler is not, so an
        # interrupted push is still finished first (MXNet's push, one C call, is never cut short
        # either) and the interrupt raised after it.
        n = 0  # vars registered so far: reads, then writes
        blocked = 0
        try:
            with self._lock:
                try:
                    self._pending += 1
                    self._seq += 1
                    opr.seq = self._seq
                    for v in opr.reads:
                        if v._writing or v._queue:
                            blocked += 1
                            v._queue.append((opr, False))
                        else:
                            v._running_reads += 1
                        n += 1
                    for v in opr.writes:
                        if v._writing or v._running_reads or v._queue:
                            blocked += 1
                            v._queue.append((opr, True))
                        else:
                            v._writing = True
                        n += 1
                    opr.wait = blocked
                except BaseException:
                    if opr.seq:
                        blocked = opr.wait = self._register_rest(opr, n)
                    raise
            if blocked == 0:
                self._dispatch(opr)
        except BaseException:
            if opr.seq and blocked == 0 and not opr.dispatched:
                self._dispatch(opr)
            raise

    @staticmethod
    def _register_rest(opr: _Opr, n: int) -> int:
        """Register ``opr`` on its vars from the ``n``-th on (after an interrupt); return how many block it."""
        vars_ = opr.reads + opr.writes
        if n < len(vars_) and vars_[n]._queue and vars_[n]._queue[-1][0] is opr:
            n += 1  # interrupted right after queuing on this var
        for i in range(n, len(vars_)):
            v = vars_[i]
            if i < len(opr.reads):
                if v._writing or v._queue:
                    v._queue.append((opr, False))
                else:
                    v._running_reads += 1
            elif v._writing or v._running_reads or v._queue:
                v._queue.append((opr, True))
            else:
                v._writing = True
        return sum(any(o is opr for o, _ in v._queue) for v in vars_)

    def _dispatch(self, opr: _Opr) -> None:
        raise NotImplementedError

    def _execute(self, opr: _Opr) -> list[_Opr]:
        """Run one ready op on the current thread; return the ops its completion made ready.

        The op's function is user code, called through ``call_user`` so that Ctrl-C stays live in
        it; everything around it is bookkeeping that must not be cut short. ``no_skip`` ops (waits,
        ``Dummy_Wait``, deletes) are bookkeeping themselves: an interrupt must not stop them.
        """
        error: BaseException | None = None
        if not opr.no_skip:
            seq = opr.seq
            for v in itertools.chain(opr.reads, opr.writes):
                if v.exception is not None and (v._cleared_at is None or seq < v._cleared_at):
                    error = v.exception
                    break
        if error is None:
            obs = self.observer
            try:
                if opr.is_async:
                    if obs is not None:
                        obs.run(opr, call_user, opr.fn, _Completion(self, opr))
                    else:
                        call_user(opr.fn, _Completion(self, opr))
                    return []
                if opr.no_skip:  # the engine's own completions and waits: bookkeeping, not user code
                    if obs is not None:
                        obs.run(opr, opr.fn)
                    else:
                        opr.fn()
                elif obs is not None:
                    obs.run(opr, call_user, opr.fn)
                else:
                    call_user(opr.fn)
            except BaseException as e:
                error = e
                if opr.is_async and opr.done:
                    # on_complete already ran; the late error still must not vanish.
                    with self._lock:
                        self._record_error(opr.writes, e)
                    return []
        return self._complete(opr, error)

    def _finish(self, opr: _Opr, error: BaseException | None, from_worker: bool) -> None:
        ready = self._complete(opr, error)
        for nxt in ready:
            self._dispatch(nxt)

    def _record_error(self, writes: tuple[Var, ...], error: BaseException) -> None:
        self._errors.setdefault(id(error), error)
        for v in writes:
            v.exception = error
            v._cleared_at = None
            self._failed_vars.add(v)

    def _complete(self, opr: _Opr, error: BaseException | None) -> list[_Opr]:
        ready: list[_Opr] = []
        with self._lock:
            if opr.done:
                raise EngineError(f"op {opr.name!r} completed twice (on_complete called more than once)")
            opr.done = True
            if error is not None:
                self._record_error(opr.writes, error)
            for v in opr.reads:
                v._running_reads -= 1
                if v._running_reads == 0 and v._queue:
                    self._release(v, ready)
            for v in opr.writes:
                v._writing = False
                if error is None and v.exception is not None and not opr.no_skip:
                    # A successful write after the error was raised: the var holds good data again.
                    v.exception = None
                    v._cleared_at = None
                    self._failed_vars.discard(v)
                self._release(v, ready)
            self._pending -= 1
            if self._idle_gates and self._pending == 0:
                _open(self._idle_gates)
            if self._space_gates and self._pending <= self.max_pending // 2:
                _open(self._space_gates)
        return ready

    @staticmethod
    def _release(v: Var, ready: list[_Opr]) -> None:
        """Grant the var to the ops at the head of its queue: a run of reads, or one write."""
        q = v._queue
        while q:
            opr, is_write = q[0]
            if is_write:
                if v._running_reads == 0 and not v._writing:
                    q.popleft()
                    v._writing = True
                    opr.wait -= 1
                    if opr.wait == 0:
                        ready.append(opr)
                return
            q.popleft()
            v._running_reads += 1
            opr.wait -= 1
            if opr.wait == 0:
                ready.append(opr)

    @staticmethod
    def _may_throttle() -> bool:
        # Only a user's own thread waits for the backlog to shrink. Engine workers never block, and
        # a custom op's Python must not: the backlog may be exactly the ops waiting for it to finish.
        return _tls.engine_worker is None and _tls.custom_pool is None

    def _throttle(self) -> None:
        self._wait_until(self._space_gates, lambda: self._pending <= self.max_pending // 2)

    def _wait_for_op(self, var: Var) -> None:
        gate = _closed_gate()
        self.push(gate.release, (var,), (), "WaitForVar", no_skip=True, info=INTERNAL)
        self._block(gate.acquire)

    def _wait_idle(self) -> None:
        """Block until no op is pending."""
        self._wait_until(self._idle_gates, lambda: self._pending == 0)

    def _wait_until(self, gates: list[threading.Lock], satisfied: Callable[[], bool]) -> None:
        """Block until ``satisfied()`` (checked under the lock); ``_complete`` opens ``gates`` then."""
        with self._lock:
            if satisfied():
                return
            gate = _closed_gate()
            gates.append(gate)
        try:
            self._block(gate.acquire)
        finally:
            with self._lock:
                if gate in gates:  # interrupted: nobody needs to open it any more
                    gates.remove(gate)

    def _block(self, wait: Callable[[], Any]) -> None:
        """Block the calling thread; a blocked custom-op worker is replaced so work can go on."""
        pool = _tls.custom_pool
        if pool is None:
            call_user(wait)
            return
        pool.blocked(+1)
        try:
            call_user(wait)
        finally:
            pool.blocked(-1)

    def _forbid_wait_in_op(self, what: str) -> None:
        if _tls.engine_worker is not None:
            raise EngineError(
                f"{what} was called inside an engine op; an op that waits on the engine could wait "
                "forever for ops queued behind it. Push the dependent work as another op instead."
            )


class NaiveEngine(Engine):
    """Runs each op inline, at push time, on the pushing thread: the oracle for tests."""

    kind = "naive"

    def _dispatch(self, opr: _Opr) -> None:
        opr.dispatched = True
        prev = _tls.engine_worker
        ready = [opr]
        while ready:
            nxt = ready.pop(0)
            prev_async = _tls.async_body
            if nxt.is_async:
                _tls.async_body = True
            else:
                _tls.engine_worker = self
            try:
                ready.extend(self._execute(nxt))
            finally:
                _tls.engine_worker = prev
                _tls.async_body = prev_async

    def __init__(self) -> None:
        super().__init__()
        self._async_done: dict[int, threading.Lock] = {}

    def _push(self, opr: _Opr) -> None:
        super()._push(opr)
        if opr.is_async:
            # An async op whose completion comes from another thread: naive means push returns
            # only when the op is complete, so wait for it here.
            with self._lock:
                if opr.done:
                    return
                gate = self._async_done[id(opr)] = _closed_gate()
            self._block(gate.acquire)

    def _finish(self, opr: _Opr, error: BaseException | None, from_worker: bool) -> None:
        super()._finish(opr, error, from_worker)
        with self._lock:
            gate = self._async_done.pop(id(opr), None)
        if gate is not None:
            gate.release()

    def _record_error(self, writes: tuple[Var, ...], error: BaseException) -> None:
        super()._record_error(writes, error)
        if isinstance(error, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
            # Ops run inline here, so Ctrl-C can land inside one. The op fails with it (its family,
            # its dependents), then the push that ran it raises it at once, as a synchronous call
            # would, instead of letting the user's loop run on. Raised, it is not raised again.
            self._errors.pop(id(error), None)
            for v in writes:
                v._cleared_at = self._seq + 1
            _guard.defer(error)

    def run_custom(self, task: Callable[[], None]) -> None:
        task()


class _CustomPool:
    """Worker threads for custom operators' Python; grows while its workers are blocked in waits.

    A custom op whose ``forward()`` waits on an array that another queued custom op produces would
    deadlock a fixed-size pool. Blocked workers therefore do not count toward the pool's size.
    """

    def __init__(self, size: int, prefix: str) -> None:
        self._size = max(1, size)
        self._prefix = prefix
        self._tasks: SimpleQueue[Callable[[], None] | None] = SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._blocked = 0
        self._names = itertools.count()

    def submit(self, task: Callable[[], None]) -> None:
        self._tasks.put(task)
        with self._lock:
            self._grow()

    def blocked(self, delta: int) -> None:
        with self._lock:
            self._blocked += delta
            if delta > 0:
                self._grow()

    def _grow(self) -> None:
        active = len(self._threads) - self._blocked
        if self._idle == 0 and active < self._size and not self._tasks.empty():
            t = threading.Thread(target=self._run, name=f"{self._prefix}{next(self._names)}", daemon=True)
            self._threads.append(t)
            self._idle += 1  # counted idle until it takes its first task
            t.start()

    def _run(self) -> None:
        _tls.custom_pool = self
        tasks = self._tasks
        while True:
            task = tasks.get()
            with self._lock:
                self._idle -= 1
            if task is None:
                return
            try:
                task()
            finally:
                with self._lock:
                    self._idle += 1
                    # A task may have arrived while every worker was busy.
                    self._grow()

    def close(self) -> None:
        with self._lock:
            threads = list(self._threads)
            self._threads.clear()
        for _ in threads:
            self._tasks.put(None)
        for t in threads:
            t.join()


class ThreadedEngine(Engine):
    """Runs ready ops on ``workers`` hot threads; custom-op Python on its own thread pool."""

    kind = "threaded"

    def __init__(self, workers: int | None = None, custom_workers: int | None = None, max_pending: int = 128) -> None:
        super().__init__()
        if max_pending < 2:
            raise ValueError(f"max_pending must be at least 2, got {max_pending}")
        self.max_pending = max_pending
        cpus = os.cpu_count() or 1
        self.workers = max(1, workers if workers is not None else cpus)
        self.custom_workers = max(1, custom_workers if custom_workers is not None else max(2, cpus))
        self._ready: SimpleQueue[_Opr | None] = SimpleQueue()
        self._threads = [
            threading.Thread(target=self._worker, name=f"opprof-engine-{i}", daemon=True) for i in range(self.workers)
        ]
        for t in self._threads:
            t.start()
        self._custom = _CustomPool(self.custom_workers, "opprof-custom-")

    def _dispatch(self, opr: _Opr) -> None:
        opr.dispatched = True  # nothing can interrupt between this and the put
        self._ready.put(opr)

    def _worker(self) -> None:
        _tls.engine_worker = self
        ready = self._ready
        execute = self._execute
        while True:
            opr = ready.get()
            if opr is None:
                return
            # Run the chain of ops that each completion makes ready here, without a hand-off;
            # any further ready ops go to the queue for the other workers.
            while opr is not None:
                nxt = execute(opr)
                if not nxt:
                    break
                opr = nxt[0]
                for other in nxt[1:]:
                    ready.put(other)

    def run_custom(self, task: Callable[[], None]) -> None:
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
        if _guard.deferred is not None:
            _guard.raise_deferred(sys._getframe(1))


def _closed_gate() -> threading.Lock:
    gate = threading.Lock()
    gate.acquire()
    return gate


def _open(gates: list[threading.Lock]) -> None:
    for gate in gates:
        gate.release()
    gates.clear()


# The engine's bookkeeping: a Ctrl-C that lands in it (on the main thread) waits until it is done.
_guard.protect(
    _Completion.__call__,
    Engine._push,
    Engine._register_rest,
    Engine._execute,
    Engine._finish,
    Engine._record_error,
    Engine._complete,
    Engine._release,
    Engine._throttle,
    Engine._wait_until,
    Engine._block,
    NaiveEngine._dispatch,
    NaiveEngine._push,
    NaiveEngine._finish,
    NaiveEngine._record_error,
    ThreadedEngine._dispatch,
)

# ---------------------------------------------------------------------------- current engine
_current: Engine | None = None
_current_lock = threading.Lock()


def _from_env() -> Engine:
    kind = os.environ.get("OPPROF_ENGINE", "threaded").strip().lower() or "threaded"
    workers = os.environ.get("OPPROF_ENGINE_THREADS")
    custom = os.environ.get("OPPROF_CUSTOM_THREADS")
    return make_engine(
        kind,
        workers=int(workers) if workers else None,
        custom_workers=int(custom) if custom else None,
    )


def make_engine(kind: str = "threaded", *, workers: int | None = None, custom_workers: int | None = None) -> Engine:
    """A new engine of ``kind`` (``"threaded"`` or ``"naive"``); it is not made current."""
    if kind == "threaded":
        return ThreadedEngine(workers, custom_workers)
    if kind == "naive":
        if workers is not None or custom_workers is not None:
            raise ValueError("the naive engine runs everything inline; it takes no thread counts")
        return NaiveEngine()
    raise ValueError(f"unknown engine kind {kind!r}; expected 'threaded' or 'naive' (OPPROF_ENGINE)")


def get_engine() -> Engine:
    """The engine that NDArray operations push to (made from ``OPPROF_ENGINE`` on first use).

    Inside a custom op's Python it is the engine running that op, even if ``set_engine`` has
    since made another engine current: the op's sub-ops and its ``Dummy_Wait`` must share one.
    """
    eng = _tls.bound_engine or _current
    if eng is None:
        with _current_lock:
            if _current is None:
                _set(_from_env())
            eng = _current
    assert eng is not None
    return eng


def bind_thread(engine: Engine | None) -> Engine | None:
    """Make this thread push to ``engine`` (``None``: the current engine); return the previous binding."""
    prev = _tls.bound_engine
    _tls.bound_engine = engine
    return prev


def _set(engine: Engine | None) -> Engine | None:
    global _current
    old, _current = _current, engine
    return old


def set_engine(kind: str | Engine = "threaded", *, workers: int | None = None, custom_workers: int | None = None) -> Engine:
    """Make a new engine current; the old one finishes its work and stops its threads first.

    Errors that the old engine held and nobody waited for are raised here rather than lost.
    """
    engine = kind if isinstance(kind, Engine) else make_engine(kind, workers=workers, custom_workers=custom_workers)
    with _current_lock:
        old = _set(engine)
    if old is not None and old is not engine:
        try:
            old.wait_for_all()
        finally:
            old.shutdown()
    return engine


def _shutdown_at_exit() -> None:
    eng = _set(None)
    if eng is not None:
        try:
            eng.shutdown()
        except BaseException:
            pass


atexit.register(_shutdown_at_exit)
