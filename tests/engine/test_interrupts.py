"""The Ctrl-C shield (opprof.engine.interrupts): held back inside bookkeeping, live in user code.

Real SIGINTs sent to the main thread (pytest runs tests there); the random-point stress tests are
in test_reliability.py.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import pytest

import opprof as mx
from opprof import nd
from opprof.engine import interrupts
from opprof.profiler import profile

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _clean_state() -> Iterator[None]:
    previous = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        interrupts.deferred = None
        signal.signal(signal.SIGINT, previous)
        mx.get_engine().observer = None
        mx.set_engine("threaded")


def _sigint_now() -> None:
    """Deliver a real SIGINT to this (main) thread and give the eval loop bytecodes to run it on."""
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
    for _ in range(1000):
        pass


def _bookkeeping(then: list[str]) -> None:
    _sigint_now()
    then.append("finished")


interrupts.shielded(_bookkeeping)


def test_a_ctrl_c_inside_bookkeeping_waits_for_it_then_the_next_push_raises_it() -> None:
    eng = mx.set_engine("threaded", workers=2)
    eng.push(lambda: None)  # installs the handler
    assert signal.getsignal(signal.SIGINT) is interrupts.on_sigint
    done: list[str] = []
    _bookkeeping(done)
    assert done == ["finished"], "the interrupt cut the bookkeeping short"
    assert interrupts.deferred is True
    with pytest.raises(KeyboardInterrupt):
        eng.push(lambda: None)
    assert interrupts.deferred is None
    eng.wait_for_all()
    assert eng.pending == 0


def _bookkeeping_calling_user_code(log: list[str]) -> None:
    try:
        interrupts.call_user(_sigint_now)
        log.append("user code ran on")
    except KeyboardInterrupt:
        log.append("interrupted")
    log.append("bookkeeping finished")


interrupts.shielded(_bookkeeping_calling_user_code)


def test_user_code_called_from_bookkeeping_stays_interruptible() -> None:
    mx.set_engine("naive").push(lambda: None)
    log: list[str] = []
    _bookkeeping_calling_user_code(log)
    assert log == ["interrupted", "bookkeeping finished"]
    assert interrupts.deferred is None


def test_outside_the_engine_ctrl_c_is_plain_python() -> None:
    mx.set_engine("naive").push(lambda: None)
    assert signal.getsignal(signal.SIGINT) is interrupts.on_sigint
    with pytest.raises(KeyboardInterrupt):
        _sigint_now()
    assert interrupts.deferred is None


def test_only_pythons_default_handler_is_wrapped() -> None:
    seen: list[int] = []

    def mine(signum: int, frame: object) -> None:
        seen.append(signum)

    signal.signal(signal.SIGINT, mine)
    eng = mx.set_engine("naive")
    eng.push(lambda: None)
    assert signal.getsignal(signal.SIGINT) is mine
    _sigint_now()
    assert seen == [signal.SIGINT]
    signal.signal(signal.SIGINT, signal.default_int_handler)
    eng.push(lambda: None)
    assert signal.getsignal(signal.SIGINT) is interrupts.on_sigint


def test_naive_engine_an_interrupt_inside_an_op_is_raised_by_its_push_once() -> None:
    """The op fails with it and the push raises it at once; the next wait does not raise it again."""
    eng = mx.set_engine("naive")
    out = nd.zeros((2,))
    ran_after: list[int] = []

    def interrupted() -> None:
        _sigint_now()
        ran_after.append(1)

    with profile() as prof:
        with pytest.raises(KeyboardInterrupt):
            eng.push(interrupted, (), (out._var,), "Interrupted")
        eng.wait_for_all()  # delivered already: not raised twice
        out.wait_to_read()
    assert ran_after == []
    assert prof.trace is not None and prof.trace.validate() == []
    assert any(s.name == "Interrupted" for s in prof.trace.spans)
    assert float((out + 1).sum().asscalar()) == 2.0
    assert eng.pending == 0


def test_naive_engine_a_kernel_op_completes_then_its_push_raises_the_interrupt() -> None:
    """A bound C call (``push_op(..., kernel=True)``, as scalar ops push NumPy's ufunc) runs no
    Python, so a Ctrl-C arriving during it is handled after it returns, inside the shielded push:
    the op completes and the push raises the interrupt. A Python op's function is user code: the
    same signal fails that op."""
    import functools

    eng = mx.set_engine("naive")
    main = threading.main_thread().ident
    assert main is not None
    kill = functools.partial(signal.pthread_kill, main, signal.SIGINT)  # the SIGINT from inside the op
    a, b = eng.new_var(), eng.new_var()
    eng.push(lambda: None, (), (a,), "first")  # a first push puts the shield in place (the fast path needs it)
    with pytest.raises(KeyboardInterrupt):
        eng.push_op(kill, (a,), (b,), "kernel", True)
    assert b.exception is None and eng.pending == 0  # completed, not failed
    eng.wait_for_var(b)  # nothing to raise
    c = eng.new_var()
    with pytest.raises(KeyboardInterrupt):
        eng.push_op(lambda: (kill(), [None for _ in range(1000)]), (a,), (c,), "python", False)
    assert isinstance(c.exception, KeyboardInterrupt) and eng.pending == 0  # this op failed with it
    eng.wait_for_all()  # raised once already: not again


def test_a_ctrl_c_inside_a_fast_push_is_raised_by_that_push_on_both_engines() -> None:
    """The front end's one-frame push (``push_op``) is bookkeeping: a Ctrl-C landing in it (here in
    an observer's ``on_push``, through a C call that runs the handler at once) is held back until
    the op is registered, then raised by that same push, not by some later wait. (The threaded
    push held it until the next wait or general push before: in a loop of ``a + 1``, the next push
    the backlog throttled.)"""
    from opprof.engine.observer import EngineObserver

    main = threading.main_thread().ident
    assert main is not None

    class Interrupting(EngineObserver):
        def on_push(self, opr: object) -> None:
            signal.pthread_kill(main, signal.SIGINT)

    for kind in ("threaded", "naive"):
        eng = mx.set_engine(kind)
        v = eng.new_var()
        eng.push(lambda: None, (), (v,), "first")  # puts the shield in place
        eng.wait_for_all()
        observer = Interrupting()
        eng.add_observer(observer)
        ran: list[int] = []
        try:
            with pytest.raises(KeyboardInterrupt):
                eng.push_op(lambda: ran.append(1), (), (v,), "pushed")
        finally:
            eng.remove_observer(observer)
        eng.wait_for_var(v)  # nothing left to raise
        assert eng.pending == 0, kind
        if kind == "threaded":  # registered, then run by a worker
            assert ran == [1]
        else:  # the op runs inline right after: the held-back Ctrl-C fails it before it starts
            assert ran == [] and isinstance(v.exception, KeyboardInterrupt)


def test_threaded_engine_an_interrupt_raised_in_an_op_is_its_error_at_the_wait() -> None:
    """Another thread runs it there: it is the op's error, like any exception, as in MXNet."""
    eng = mx.set_engine("threaded", workers=2)
    out = nd.zeros((2,))

    def raises() -> None:
        raise KeyboardInterrupt

    eng.push(raises, (), (out._var,), "Raises")
    with pytest.raises(KeyboardInterrupt):
        out.wait_to_read()
    out.wait_to_read()
    assert eng.pending == 0


def test_shutting_an_engine_down_gives_sigint_back_to_python() -> None:
    eng = mx.set_engine("threaded", workers=1)
    eng.push(lambda: None)
    eng.wait_for_all()
    assert signal.getsignal(signal.SIGINT) is interrupts.on_sigint
    mx.set_engine("naive")  # the threaded engine shuts down
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    mx.get_engine().push(lambda: None)  # the engine in use shields itself again at its next push
    assert signal.getsignal(signal.SIGINT) is interrupts.on_sigint


def test_shutdown_leaves_a_handler_of_the_program_alone() -> None:
    def mine(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, mine)
    eng = mx.set_engine("threaded", workers=1)
    eng.push(lambda: None)
    mx.set_engine("naive")
    assert signal.getsignal(signal.SIGINT) is mine
