"""Dependency tracking shared by every engine, in the style of MXNet's ThreadedEngine.

Work is pushed as *ops* that declare the *vars* they read and write. An op runs once every earlier
op that conflicts with it on a var has finished: reads of a var may overlap, a write is exclusive.
Each var keeps a FIFO of waiting ops (a "version queue"); there is no global graph. Subclasses
decide only where a ready op runs (:mod:`.naive`: inline; :mod:`.threaded`: on hot workers).

Errors: an exception raised by an op is stored on every var the op writes. Ops that touch a failed
var are skipped and pass the same exception object on to the vars they write. The exception is
raised (with its original traceback) at the next wait on an affected var, or at ``wait_for_all``.
Raising it clears it, so the engine and the arrays stay usable afterwards - as in MXNet.

Ctrl-C: the bookkeeping (registering, completing and dispatching ops) is :func:`~.interrupts.shielded`,
so an interrupt never leaves an op half-registered; user code an op runs goes through
:func:`~.interrupts.call_user` and stays interruptible. Blocking waits use a plain lock as a gate
(acquired in C, atomically), never a Condition on the engine lock: an interrupt inside
``Condition.wait`` can leave the lock it guards released while its owner thinks it holds it.
"""

from __future__ import annotations

import functools
import itertools
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from . import interrupts as _guard
from .handoff import Gate
from .handoff import closed_gate as _closed_gate
from .interrupts import call_user, shielded
from .observer import EngineObserver, Observers, guarded, tell_ready
from .opr import INTERNAL, OP_SEQ, EngineError, Opr, OprInfo, Var, as_mxnet_error
from .state import thread_state

__all__ = ["Engine", "closed_gate", "open_gates"]


class _Completion:
    """The callback handed to an async op; calling it (once) completes the op."""

    __slots__ = ("_engine", "_opr")

    def __init__(self, engine: Engine, opr: Opr) -> None:
        self._engine = engine
        self._opr = opr

    @shielded
    def __call__(self, error: BaseException | None = None) -> None:
        try:
            self._engine._finish(self._opr, error, from_worker=False)
        except KeyboardInterrupt:
            _guard.merge_deferred()
            raise
        if _guard.deferred is not None:
            _guard.raise_deferred(sys._getframe(1))


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
        self._idle_gates: list[Gate] = []
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
        self._space_gates: list[Gate] = []  # throttled pushers, released when the backlog halves
        # What the hot path calls: None, one observer, or several as one (see add_observer). The
        # hot path reads it without a lock (one attribute read); changes are made under the lock,
        # each from the current list, so that two threads attaching and detaching at once can
        # neither lose an observer nor bring back one that was removed.
        self.observer: EngineObserver | None = None
        self._observers_lock = threading.Lock()
        # The op whose completion last let a waiter of wait_for_all go (its seq), for observers.
        self._last_done = 0

    # ------------------------------------------------------------------ observers
    def add_observer(self, observer: EngineObserver, *, unless: Callable[[EngineObserver], bool] | None = None) -> bool:
        """Let ``observer`` hear of every push, op, wait and custom-op call from now on (once: one
        already added stays as it is). ``unless``: refuse (return False, add nothing) if any
        observer already added satisfies it; the check and the adding are one step, so two
        profilers started at once cannot both get in."""
        with self._observers_lock:
            current = self.observers
            if unless is not None and any(unless(o) for o in current if o is not observer):
                return False
            if not any(o is observer for o in current):
                self.observer = _combine([*current, observer])
            return True

    def remove_observer(self, observer: EngineObserver) -> None:
        """Stop telling ``observer``; one that was never added is ignored."""
        with self._observers_lock:
            self.observer = _combine([o for o in self.observers if o is not observer])

    def hand_observers_to(self, engine: Engine, drain: Callable[[], None]) -> None:
        """Move every observer of this engine onto ``engine`` (which becomes current in its place),
        telling each (:meth:`EngineObserver.follow`): a profile follows an engine switch. They hear
        both engines while ``drain`` runs (this engine finishing its queued work), so that no op
        pushed on either side of the switch goes unrecorded; then they leave this one."""
        moving = self.observers if engine is not self else ()
        for o in moving:
            engine.add_observer(o)
            o.follow(engine)
        try:
            drain()
        finally:
            for o in moving:
                self.remove_observer(o)

    @property
    def observers(self) -> tuple[EngineObserver, ...]:
        """The observers added, each as it was added (the hot path may call a stand-in for one:
        :attr:`EngineObserver.hot_path`)."""
        obs = self.observer
        if obs is None:
            return ()
        called = obs.observers if isinstance(obs, Observers) else (obs,)
        return tuple(getattr(o, "reports_to", o) for o in called)

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
        info: OprInfo = None,
    ) -> None:
        """Run ``fn()`` once every earlier conflicting op on ``reads``/``writes`` has finished.

        ``no_skip`` ops run even when a var they touch holds an error (waits and completions need
        that), and Ctrl-C never cuts them short; other ops are skipped and pass the error on to the
        vars they write.
        """
        self._submit(Opr(fn, *self._check(reads, writes), name, False, no_skip, info))

    def push_async(
        self,
        fn: Callable[[Callable[..., None]], Any],
        reads: Sequence[Var] = (),
        writes: Sequence[Var] = (),
        name: str = "op",
        *,
        no_skip: bool = False,
        info: OprInfo = None,
    ) -> None:
        """Like :meth:`push`, but ``fn(on_complete)`` returns at once and the op is complete only
        when ``on_complete()`` (or ``on_complete(error)``) is called, from any thread."""
        self._submit(Opr(fn, *self._check(reads, writes), name, True, no_skip, info))

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
        """The push of opprof's own layers (the NDArray front end, the custom-op machinery): like
        :meth:`push` (or :meth:`push_async` with ``is_async``), for a caller that guarantees
        ``reads`` and ``writes`` are tuples of distinct vars with none in both.

        ``kernel``: ``fn`` is a NumPy call that runs no Python (a ufunc with its arguments bound),
        so it can neither wait on the engine nor be interrupted half-way by Ctrl-C; the naive
        engine then skips the guards for both (0.25 µs of a 5 µs push).

        Engines override it with a path that skips what the caller guarantees (checking and
        normalising the vars); whatever the fast path cannot take goes through :meth:`push`'s.
        """
        self._submit(Opr(fn, *self._check(reads, writes), name, is_async, no_skip, info))

    def _submit(self, opr: Opr) -> None:
        """Push ``opr``; then deliver a Ctrl-C that the bookkeeping held back (see opprof.engine.interrupts)."""
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
        obs = self.observer
        t0 = obs.clock() if obs is not None else 0
        with self._lock:
            quiet = not var._writing and not var._queue
        gate = None if quiet else self._wait_for_op(var)
        if obs is not None:
            # What ended the wait: the write whose completion released the wait's token.
            obs.on_wait("WaitForVar", t0, obs.clock(), gate.by if gate is not None else 0, var.id)
        if _guard.deferred is not None:  # a Ctrl-C held back by the bookkeeping above; before the
            _guard.raise_deferred(sys._getframe(2))  # var's error is taken, so that is not lost
        with self._lock:
            exc = var.exception if var._cleared_at is None else None
            if exc is not None:
                var._cleared_at = self._seq + 1
                self._errors.pop(id(exc), None)
        if exc is not None:
            raise as_mxnet_error(exc)

    @_entry_point
    def wait_for_all(self) -> None:
        """Block until every pushed op is done; raise the first error no wait has raised yet."""
        self._forbid_wait_in_op("wait_for_all")
        if thread_state.custom_pool is not None or thread_state.async_body:
            raise EngineError(
                "wait_for_all (mx.nd.waitall) was called inside a custom operator's Python; it would "
                "wait for that operator itself. Wait on the arrays you need (asnumpy, wait_to_read) instead."
            )
        obs = self.observer
        t0 = obs.clock() if obs is not None else 0
        before = self._last_done
        self._wait_idle()
        if obs is not None:
            last = self._last_done
            obs.on_wait("WaitForAll", t0, obs.clock(), last if last != before else 0, 0)
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
            raise as_mxnet_error(errors[0])

    def delete_var(self, var: Var) -> None:
        """Free ``var`` once the ops pushed on it so far are done; pushing on it later is an error."""

        def _delete() -> None:
            var.deleted = True

        self.push(_delete, (), (var,), "DeleteVariable", no_skip=True)

    def shutdown(self) -> None:
        """Finish pending work, stop every thread this engine started, give SIGINT back to Python."""
        self._closed = True
        _guard.restore()

    def wait_idle(self) -> None:
        """Block until no op is pending; raise nothing (errors stay for the next wait to raise)."""
        self._wait_idle()

    def abandon(self) -> None:
        """Mark this engine unusable without touching its threads (they do not exist after a fork)."""
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
        return thread_state.custom_pool is not None

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

    @shielded
    def _push(self, opr: Opr) -> None:
        handler = _guard.getsignal(_guard.SIGINT)
        if handler is not _guard.on_sigint and handler is not _guard.skip:
            _guard.install()
        if self._pending >= self.max_pending and self._may_throttle():
            self._throttle()
        obs = self.observer
        if obs is not None:
            obs.on_push(opr)
        # A KeyboardInterrupt reaches the main thread between bytecodes. This function is shielded
        # (see opprof.engine.interrupts), but a program with its own SIGINT handler is not, so an
        # interrupted push is still finished first (MXNet's push, one C call, is never cut short
        # either) and the interrupt raised after it.
        n = 0  # vars registered so far: reads, then writes
        blocked = 0
        try:
            with self._lock:
                try:
                    self._pending += 1
                    self._seq = opr.seq = next(OP_SEQ)
                    for v in opr.reads:
                        if v._writing or v._queue:
                            blocked += 1
                            (v._queue or v.new_queue()).append((opr, False))
                        else:
                            v._running_reads += 1
                        n += 1
                    for v in opr.writes:
                        if v._writing or v._running_reads or v._queue:
                            blocked += 1
                            (v._queue or v.new_queue()).append((opr, True))
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
    @shielded
    def _register_rest(opr: Opr, n: int) -> int:
        """Register ``opr`` on its vars from the ``n``-th on (after an interrupt); return how many block it."""
        vars_ = opr.reads + opr.writes
        q = vars_[n]._queue if n < len(vars_) else ()
        if isinstance(q, deque) and q and q[-1][0] is opr:
            n += 1  # interrupted right after queuing on this var
        for i in range(n, len(vars_)):
            v = vars_[i]
            if i < len(opr.reads):
                if v._writing or v._queue:
                    (v._queue or v.new_queue()).append((opr, False))
                else:
                    v._running_reads += 1
            elif v._writing or v._running_reads or v._queue:
                (v._queue or v.new_queue()).append((opr, True))
            else:
                v._writing = True
        return sum(any(o is opr for o, _ in v._queue) for v in vars_)

    def _dispatch(self, opr: Opr) -> None:
        raise NotImplementedError

    @shielded
    def _execute(self, opr: Opr) -> list[Opr]:
        """Run one ready op on the current thread; return the ops its completion made ready.

        The op's function is user code, called through ``call_user`` so that Ctrl-C stays live in
        it; everything around it is bookkeeping that must not be cut short. ``no_skip`` ops (waits,
        ``Dummy_Wait``, deletes) are bookkeeping themselves: an interrupt must not stop them.
        """
        error: BaseException | None = None
        if self._failed_vars and not opr.no_skip:
            # Only a var in _failed_vars holds an error (set and cleared under the lock, and the
            # op was released under it after the failure): most ops skip the scan.
            error = self._inherited_error(opr)
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

    @staticmethod
    def _inherited_error(opr: Opr) -> BaseException | None:
        """The error a var ``opr`` touches holds for it (ops pushed after it was raised don't see it)."""
        seq = opr.seq
        for v in itertools.chain(opr.reads, opr.writes):
            if v.exception is not None and (v._cleared_at is None or seq < v._cleared_at):
                return v.exception
        return None

    @shielded
    def _finish(self, opr: Opr, error: BaseException | None, from_worker: bool) -> None:
        ready = self._complete(opr, error)
        for nxt in ready:
            self._dispatch(nxt)

    @shielded
    def _record_error(self, writes: tuple[Var, ...], error: BaseException) -> None:
        self._errors.setdefault(id(error), error)
        for v in writes:
            v.exception = error
            v._cleared_at = None
            self._failed_vars.add(v)

    @shielded
    def _complete(self, opr: Opr, error: BaseException | None) -> list[Opr]:
        ready: list[Opr] = []
        # acquire/release, not ``with`` (0.12 µs against 0.30 here, on every op): an engine worker
        # never sees a KeyboardInterrupt (only the main thread does), and on the main thread this
        # frame is shielded. (A program's own SIGINT handler, which the shield cannot wrap, could
        # cut this bookkeeping short either way: a ``with`` would free the lock, not finish it.)
        lock = self._lock
        lock.acquire()
        try:
            if opr.done:
                raise EngineError(f"op {opr.name!r} completed twice (on_complete called more than once)")
            opr.done = True
            # Its function (and the arrays it holds) goes now, not with the op: an op is kept as
            # long as the next op it enabled names it (``by``), and a worker holds its last op
            # until it gets another. MXNet frees a dropped array once its last op ran.
            opr.fn = _ran
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
                if v._queue:
                    self._release(v, ready)
            self._pending -= 1
            if self._idle_gates and self._pending == 0:
                self._last_done = opr.seq
                open_gates(self._idle_gates)
            if self._space_gates and self._pending <= self.max_pending // 2:
                open_gates(self._space_gates)
            obs = self.observer
            if ready and obs is not None:
                # The enabling edge: this op's completion made them ready, now. (Which var did
                # it is noted by _release, which knows.)
                tell_ready(obs, ready, opr.seq)
        finally:
            lock.release()
        return ready

    @staticmethod
    @shielded
    def _release(v: Var, ready: list[Opr]) -> None:
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
                        opr.by_var = v.id
                        ready.append(opr)
                return
            q.popleft()
            v._running_reads += 1
            opr.wait -= 1
            if opr.wait == 0:
                opr.by_var = v.id
                ready.append(opr)

    @staticmethod
    def _may_throttle() -> bool:
        # Only a user's own thread waits for the backlog to shrink. Engine workers never block, and
        # a custom op's Python must not: the backlog may be exactly the ops waiting for it to finish.
        return thread_state.engine_worker is None and thread_state.custom_pool is None

    @shielded
    def _throttle(self) -> None:
        # Timed for an observer: a program held here is neither running its Python nor waiting for
        # a result it asked for, and a profile that did not say so left the time unexplained (719
        # ms of a loop pushing 20,000 custom ops, 2026-12-04).
        obs = self.observer
        t0 = obs.clock() if obs is not None else 0
        pending = self._pending
        if self._wait_until(self._space_gates, lambda: self._pending <= self.max_pending // 2) and obs is not None:
            obs.on_held_back(t0, obs.clock(), pending)

    def _wait_for_op(self, var: Var) -> Opr:
        """Block until the writes pushed so far to ``var`` are done; return the wait's token op
        (its ``by`` names the write that ended the wait)."""
        gate = closed_gate()
        token = Opr(gate.release, *self._check((var,), ()), "WaitForVar", False, True, INTERNAL)
        self._submit(token)
        self._block(gate.acquire)
        return token

    def _wait_idle(self) -> None:
        """Block until no op is pending."""
        self._wait_until(self._idle_gates, lambda: self._pending == 0)

    @shielded
    def _wait_until(self, gates: list[Gate], satisfied: Callable[[], bool]) -> bool:
        """Block until ``satisfied()`` (checked under the lock); ``_complete`` opens ``gates`` then.
        Whether it had to block."""
        with self._lock:
            if satisfied():
                return False
            gate = closed_gate()
            gates.append(gate)
        try:
            self._block(gate.acquire)
        finally:
            with self._lock:
                if gate in gates:  # interrupted: nobody needs to open it any more
                    gates.remove(gate)
        return True

    @shielded
    def _block(self, wait: Callable[[], Any]) -> None:
        """Block the calling thread; a blocked custom-op worker is replaced so work can go on."""
        pool = thread_state.custom_pool
        if pool is None:
            call_user(wait)
            return
        pool.blocked(+1)
        try:
            call_user(wait)
        finally:
            pool.blocked(-1)

    def _forbid_wait_in_op(self, what: str) -> None:
        if thread_state.engine_worker is not None:
            raise EngineError(
                f"{what} was called inside an engine op; an op that waits on the engine could wait "
                "forever for ops queued behind it. Push the dependent work as another op instead."
            )


def _combine(observers: list[EngineObserver]) -> EngineObserver | None:
    """What the hot path calls for ``observers``: None, one's hot path, or all of theirs as one."""
    if not observers:
        return None
    hot = [guarded(o.hot_path) for o in observers]
    return hot[0] if len(hot) == 1 else Observers(hot)


def _ran(*args: Any) -> None:
    """What a completed op's function becomes (see :meth:`Engine._complete`)."""
    raise EngineError("this op has run: its function is gone")


#: A closed gate for a thread to wait at (:data:`.handoff.closed_gate`: the wait timed where compiled).
closed_gate = _closed_gate


def open_gates(gates: list[Gate]) -> None:
    for gate in gates:
        gate.release()
    gates.clear()
