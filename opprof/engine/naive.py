"""The naive engine: every op runs inline, at push time, on the pushing thread.

Slow and easy to reason about: it is the oracle the tests compare the threaded engine against, and
the engine to debug with (a traceback points at the push that failed).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from . import interrupts as _guard
from .core import Engine, closed_gate
from .interrupts import shielded
from .opr import Opr, Var
from .state import thread_state

__all__ = ["NaiveEngine"]


class NaiveEngine(Engine):
    """Runs each op inline, at push time, on the pushing thread: the oracle for tests."""

    kind = "naive"

    def __init__(self) -> None:
        super().__init__()
        self._async_done: dict[int, threading.Lock] = {}

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
