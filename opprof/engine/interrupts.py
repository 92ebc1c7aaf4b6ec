"""Ctrl-C that never lands in the middle of the engine's bookkeeping.

A KeyboardInterrupt is raised in the main thread between any two bytecodes. Landing inside the
engine's own bookkeeping (registering an op on its vars, completing it, running the ready ops after
it, finishing a custom op with ``Dummy_Wait``) it would leave an op that never completes, and every
later wait would hang. MXNet never has this problem: that bookkeeping is C++, which a signal does
not cut short. Here it is Python, so it is shielded the way Trio shields its own internals:

* functions that do bookkeeping are marked :func:`shielded` where they are defined (as Trio's
  ``enable_ki_protection``); the places where the engine calls user code (an op's function, a
  custom op's ``forward``, a blocking wait) go through :func:`call_user`, which is :func:`unshielded`;
* our SIGINT handler looks at the interrupted stack: the innermost marked frame decides. Inside a
  protected one the interrupt is deferred; anywhere else it is raised at once, as Python would;
* a deferred interrupt is raised by the engine's public entry points (:func:`raise_deferred`) as
  soon as no protected frame is left below them, so it reaches the user one push later at most.

The handler only ever replaces Python's own ``default_int_handler`` and falls through to it, so a
program (or a kernel) with its own SIGINT handling keeps it; :func:`restore` puts the default back
when an engine shuts down. On the hot path it costs a 15 ns check
per push that the handler is in place (``Engine._push``) and one extra frame per op call.
"""

from __future__ import annotations

import _signal
import signal
import threading
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_MAIN = threading.main_thread().ident
# code object -> True (protected bookkeeping) or False (user code runs below this frame)
_MARKS: dict[CodeType, bool] = {}
# An interrupt that arrived inside protected code: True for a signal, or the KeyboardInterrupt an
# op already failed with (the naive engine runs ops inline, so a Ctrl-C can land in one).
deferred: BaseException | bool | None = None
skip: Any = None  # a SIGINT handler that is not ours to wrap (checked once, not on every push)
# ``signal.getsignal`` wraps the answer in an enum lookup (2 µs); the C function takes 15 ns.
getsignal = _signal.getsignal
SIGINT = signal.SIGINT.value


def shielded(fn: F) -> F:
    """Mark ``fn`` as engine bookkeeping: an interrupt inside it (or below it) waits until it is done.

    A mark on the code object, read by the SIGINT handler; the function itself is returned as it
    is, so the mark costs nothing per call.
    """
    _MARKS[_code(fn)] = True
    return fn


def unshielded(fn: F) -> F:
    """Mark ``fn`` as the boundary below which user code runs and may be interrupted at once."""
    _MARKS[_code(fn)] = False
    return fn


def _code(fn: Callable[..., Any]) -> CodeType:
    return getattr(fn, "__func__", fn).__code__


@unshielded
def call_user(fn: Callable[..., Any], *args: Any) -> Any:
    """Call user code (or block) from protected bookkeeping; a Ctrl-C inside it is raised at once.

    Only for callers that treat an exception from ``fn`` as its failure: the interrupt may also be
    raised here before ``fn`` starts. That is where a Ctrl-C deferred by the bookkeeping just
    before is delivered, rather than holding it back while ``fn`` runs or blocks on a stuck op.
    """
    global deferred
    if deferred is True and threading.get_ident() == _MAIN:
        deferred = None
        raise KeyboardInterrupt
    return fn(*args)


def protected(frame: FrameType | None) -> bool:
    """Is ``frame`` inside engine bookkeeping? The innermost marked frame on its stack decides."""
    while frame is not None:
        mark = _MARKS.get(frame.f_code)
        if mark is not None:
            return mark
        frame = frame.f_back
    return False


def on_sigint(signum: int, frame: FrameType | None) -> Any:
    global deferred
    if protected(frame):
        if deferred is None:
            deferred = True
        return None
    deferred = None  # this interrupt is raised now: a deferred one merges with it
    return signal.default_int_handler(signum, frame)


def install() -> None:
    """Shield the engine from Ctrl-C if Python's default handler is the one in place.

    Called on pushes whenever our handler is not installed; cheap when it cannot be (a worker
    thread, or a program with its own handler, remembered so it is not looked at again).
    """
    global skip
    if threading.get_ident() != _MAIN:
        return
    current = getsignal(signal.SIGINT)
    if current is on_sigint:
        return
    if current is not signal.default_int_handler:
        skip = current
        return
    try:
        signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main interpreter
        skip = current


def restore() -> None:
    """Put Python's default SIGINT handler back if ours is the one in place (an engine shut down).

    Another engine still in use installs the shield again at its next push.
    """
    global skip
    if threading.get_ident() != _MAIN:
        return
    skip = None
    try:
        if getsignal(signal.SIGINT) is on_sigint:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:  # not the main interpreter
        pass


def after_fork() -> None:
    """In a forked child: the thread that forked is the main thread now, and nothing is held back."""
    global _MAIN, deferred, skip
    _MAIN = threading.main_thread().ident
    deferred = None
    skip = None


def defer(error: BaseException) -> None:
    """Raise ``error`` (a KeyboardInterrupt an op failed with) once the bookkeeping is done."""
    global deferred
    if threading.get_ident() == _MAIN and not isinstance(deferred, BaseException):
        deferred = error


def raise_deferred(frame: FrameType | None) -> None:
    """Raise a deferred interrupt if ``frame`` (an entry point's caller) is outside bookkeeping."""
    global deferred
    pending = deferred
    if pending is None or threading.get_ident() != _MAIN or protected(frame):
        return
    deferred = None
    if isinstance(pending, BaseException):
        raise pending
    raise KeyboardInterrupt


def merge_deferred() -> None:
    """A KeyboardInterrupt is leaving an entry point: a Ctrl-C held back meanwhile goes with it.

    A second Ctrl-C that lands in the bookkeeping an interrupt unwinds through (a ``finally`` that
    restores state) would otherwise surface at some later, unrelated push.
    """
    global deferred
    if threading.get_ident() == _MAIN:
        deferred = None
