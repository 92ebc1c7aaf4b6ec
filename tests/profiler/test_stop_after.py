"""``stop_after``: how every front end (``profile()``, ``%%opprof``, ``opprof run``, ``opprof.dask.profile``) stops a profile."""

from __future__ import annotations

import threading
import time

import pytest

import opprof as mx
from opprof.profiler import INTERRUPT_GRACE_S, Profiler, ProfileSession, stop_after
from opprof.trace import Trace

pytestmark = pytest.mark.timeout(60)


class _Session:
    """A ProfileSession that records how it was stopped."""

    def __init__(self, raises: BaseException | None = None) -> None:
        self.waits: list[bool | float] = []
        self.raises = raises
        self.trace: Trace | None = None
        self.error: BaseException | None = None

    def start(self) -> _Session:
        return self

    def stop(self, wait: bool | float = True) -> Trace:
        self.waits.append(wait)
        self.trace = Trace()
        if self.raises is not None:
            raise self.raises
        return self.trace

    def live_feed(self) -> object:
        raise NotImplementedError


@pytest.mark.parametrize(
    ("ended", "wait"),
    [(None, True), (ValueError("the work's"), True), (KeyboardInterrupt(), INTERRUPT_GRACE_S)],
)
def test_all_the_queued_work_is_waited_for_except_after_ctrl_c(ended: BaseException | None, wait: bool | float) -> None:
    session = _Session()
    assert stop_after(session, ended) is None
    assert session.waits == [wait] and session.trace is not None


def test_what_stopping_raises_is_returned_not_raised() -> None:
    err = OSError("an op nobody waited for")
    session = _Session(raises=err)
    assert stop_after(session, None) is err
    assert session.trace is not None  # built before the error came out


def test_a_profiler_is_a_profile_session() -> None:
    session: ProfileSession = Profiler()  # what mypy checks in the magic, here at run time too
    assert session.start() is session
    (mx.nd.ones((2,)) + 1).wait_to_read()
    assert stop_after(session, None) is None
    assert session.trace is not None and any(s.name == "_plus_scalar" for s in session.trace.spans)


def test_after_ctrl_c_a_stuck_op_is_waited_for_only_the_grace() -> None:
    eng = mx.get_engine()
    if eng.kind != "threaded":
        pytest.skip("the naive engine runs an op inline: nothing stays queued")
    prof = Profiler().start()
    gate, started = threading.Event(), threading.Event()

    def stuck() -> None:
        started.set()
        gate.wait(30)

    eng.push(stuck, writes=[eng.new_var()])
    assert started.wait(10)
    t0 = time.monotonic()
    try:
        assert stop_after(prof, KeyboardInterrupt()) is None
        elapsed = time.monotonic() - t0
    finally:
        gate.set()
    assert INTERRUPT_GRACE_S <= elapsed < INTERRUPT_GRACE_S + 5
    assert prof.trace is not None
    eng.wait_for_all()


def test_an_op_that_failed_unwaited_is_returned_with_the_trace_built() -> None:
    eng = mx.get_engine()
    prof = Profiler().start()
    err = OSError("unwaited")

    def failing() -> None:
        raise err

    eng.push(failing, writes=[eng.new_var()])
    failed = stop_after(prof, None)
    assert failed is not None and (failed is err or failed.__cause__ is err)
    assert prof.trace is not None and prof.error is failed
