"""The naive engine: every op runs inline, at push time, on the pushing thread.

Slow and easy to reason about: it is the oracle the tests compare the threaded engine against, and
the engine to debug with (a traceback points at the push that failed).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

from . import interrupts as _guard
from .core import Engine, closed_gate, open_gates
from .handoff import Gate
from .interrupts import call_user, shielded
from .observer import tell_ready
from .opr import OP_SEQ, Opr, OprInfo, Var
from .state import thread_state

__all__ = ["NaiveEngine"]


class NaiveEngine(Engine):
    """Runs each op inline, at push time, on the pushing thread: the oracle for tests."""

    kind = "naive"

    def __init__(self) -> None:
        super().__init__()
        self._async_done: dict[int, Gate] = {}

    @shielded
    def _dispatch(self, opr: Opr) -> None:
        opr.dispatched = True
        prev = thread_state.engine_worker
        ready = [opr]
        while ready:
            nxt = ready.pop(0)
            prev_async = thread_state.async_body
            if nxt.is_async:
                thread_state.async_body = True
            else:
                thread_state.engine_worker = self
            try:
                ready.extend(self._execute(nxt))
            finally:
                thread_state.engine_worker = prev
                thread_state.async_body = prev_async

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
        """Run a front-end op at once when nothing stands in its way; else as :meth:`push` does.

        The common case (every var idle and without an error, the Ctrl-C shield in place, so
        nothing can interrupt this frame) registers, runs and completes the op here: the general
        path's ten frames (push, _check, _submit, _push, _dispatch, _execute, _complete...) cost
        4.3 µs a push on the project's machine, 5.6 times NumPy's ``x + 1`` there; this one 1.6 µs
        (2026-12-01, issue 19). An observer hears it through ``run_pushed`` (by default its ``on_push``
        and ``run``, as on the general path).
        """
        taken = False
        lock = self._lock
        # The engine's own kinds of op (async, no_skip, with info) need the completion machinery.
        plain = not (is_async or no_skip or info is not None)
        if plain and not self._closed and _guard.getsignal(_guard.SIGINT) is _guard.on_sigint:
            # acquire/release, not ``with``: 0.12 µs against 0.30 a pair here, twice a push. Safe
            # without the with-statement's guarantee because nothing can interrupt this frame (the
            # shield is in place, checked above, and the code between cannot raise).
            lock.acquire()
            try:
                taken = True
                for v in reads:
                    if v._writing or v._queue or v.exception is not None or v.deleted:
                        taken = False
                        break
                if taken:
                    for v in writes:
                        if v._writing or v._running_reads or v._queue or v.exception is not None or v.deleted:
                            taken = False
                            break
                if taken:
                    self._pending += 1
                    self._seq = seq = next(OP_SEQ)
                    for v in reads:
                        v._running_reads += 1
                    for v in writes:
                        v._writing = True
            finally:
                lock.release()
        if not taken:
            self._submit(Opr(fn, *self._check(reads, writes), name, is_async, no_skip, info))
            return
        obs = self.observer
        error: BaseException | None = None
        if kernel:  # no Python runs in fn: nothing to refuse a wait in, no Ctrl-C boundary to mark
            try:
                if obs is None:
                    fn()
                else:
                    obs.run_pushed(name, seq, reads, writes, fn)
            except BaseException as e:
                error = e
        else:
            state = thread_state
            prev = state.engine_worker
            state.engine_worker = self  # a wait inside the op is refused, as on a worker
            try:
                if obs is None:
                    call_user(fn)
                else:
                    obs.run_pushed(name, seq, reads, writes, call_user, fn)
            except BaseException as e:
                error = e
            state.engine_worker = prev
        ready: list[Opr] = []
        lock.acquire()
        try:
            if error is not None:
                self._record_error(writes, error)
            for v in reads:
                v._running_reads -= 1
                if v._running_reads == 0 and v._queue:
                    self._release(v, ready)
            for v in writes:
                v._writing = False
                if v._queue:  # another thread pushed behind this op meanwhile
                    self._release(v, ready)
            self._pending -= 1
            if self._idle_gates and self._pending == 0:
                self._last_done = seq
                open_gates(self._idle_gates)
            if ready and obs is not None:  # the enabling edge, as _complete notes it
                tell_ready(obs, ready, seq)
        finally:
            lock.release()
        for nxt in ready:
            self._dispatch(nxt)
        if _guard.deferred is not None:  # a Ctrl-C the op failed with (see _record_error)
            _guard.raise_deferred(sys._getframe(1))

    @shielded
    def _push(self, opr: Opr) -> None:
        super()._push(opr)
        if opr.is_async:
            # An async op whose completion comes from another thread: naive means push returns
            # only when the op is complete, so wait for it here.
            with self._lock:
                if opr.done:
                    return
                gate = self._async_done[id(opr)] = closed_gate()
            self._block(gate.acquire)

    @shielded
    def _finish(self, opr: Opr, error: BaseException | None, from_worker: bool) -> None:
        super()._finish(opr, error, from_worker)
        with self._lock:
            gate = self._async_done.pop(id(opr), None)
        if gate is not None:
            gate.release()

    @shielded
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
