"""What the engine tells the layers above it while it runs: the observer protocol.

The engine calls an observer at five points: on the pushing thread when an op is pushed, when a
completion makes ops ready, around an op's function on the thread that runs it, after a blocking
wait, and around a custom op's Python. :class:`EngineObserver` is the protocol and a no-op base at
once: a profiler overrides what it needs. An engine has at most one observer on its hot path; :class:`Observers` fans out to
several (a recorder and a live view), so that an engine with one observer pays for one call.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

from .opr import Opr, Var, report_uncaught
from .state import Invocation

__all__ = ["EngineObserver", "Observers", "guarded", "tell_ready"]


def tell_ready(observer: EngineObserver, ready: list[Opr], by: int) -> None:
    """``observer.on_ready(ready, by)`` for the engine, which calls it under its lock with ops it
    dispatches next: an observer that fails there (a bug in it, out of memory in a recorder) must
    not keep them from running, so its error is said as an uncaught exception in a thread is
    (``threading.excepthook``: printed, or a test's warning) and the engine goes on; the ops lose
    their ready stamps only."""
    try:
        observer.on_ready(ready, by)
    except Exception:
        report_uncaught()


class EngineObserver:
    """Hooks the engine calls while it runs; each does nothing here."""

    #: The clock waits and custom-op Python are timed with (ns); a recorder may bring its own.
    clock: Callable[[], int] = time.perf_counter_ns

    @property
    def hot_path(self) -> EngineObserver:
        """What the engine calls for this observer: itself, or a stand-in that does the same for it
        faster and names it as its ``reports_to`` (the compiled recorder's C object, whose hooks are
        methods of its type: called as instance attributes of the recorder, each call looked its
        method up in the recorder's dict, ~420 instructions an op of a threaded 10x10 loop)."""
        return self

    def on_push(self, opr: Opr) -> None:
        """``opr`` is being pushed (on the pushing thread, before it is registered on its vars)."""

    def run(self, opr: Opr, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``opr`` by calling ``fn(*args)`` on the executing thread (time it, if you like).
        Call it exactly once, before anything of your own that may fail: the engine's own ops
        (a wait's, ``Dummy_Wait``) release their waiters in ``fn``. (Where a ``run`` other than
        opprof's raises before calling it, or never does, the engine calls it: see :func:`guarded`.)"""
        fn(*args)

    def run_pushed(
        self, name: str, seq: int, reads: tuple[Var, ...], writes: tuple[Var, ...], fn: Callable[..., Any], *args: Any
    ) -> None:
        """An op pushed and run at once, on this thread (the naive engine's fast path, which makes
        no ``Opr`` of its own): :meth:`on_push` then :meth:`run` here; an observer may do both at
        once, with one clock read and no ``Opr``."""
        opr = Opr(fn, reads, writes, name, False, False, None)
        opr.seq = seq
        opr.dispatched = True
        self.on_push(opr)
        self.run(opr, fn, *args)

    def on_ready(self, ready: list[Opr], by: int) -> None:
        """The ops ``ready`` became ready now, when the op ``by`` (its seq) completed: the enabling
        edge, stamped on each (``ready_ns`` on this observer's clock, ``by``), for the op's record
        when it runs. Called under the engine's lock, so kept to that; a compiled recorder does it
        in C (it runs at nearly every completion of a chain of ops)."""
        now = self.clock()
        for r in ready:
            r.ready_ns = now
            r.by = by

    def on_wait(self, name: str, t0: int, t1: int, by: int = 0, var: int = 0) -> None:
        """The calling thread was blocked in a wait (``WaitForVar``, ``WaitForAll``) from ``t0`` to
        ``t1``; ``by`` is the op (its seq) whose completion ended it (0: none had to), ``var`` the
        var waited on (0 for all)."""

    def on_held_back(self, t0: int, t1: int, pending: int) -> None:
        """The calling thread's push was held from ``t0`` to ``t1`` by the engine's back-pressure:
        ``pending`` ops were pushed and not yet done, and it waited until half of them had run."""

    def on_python(self, inv: Invocation, t0: int, t1: int, cpu_ns: int = -1, numpy_peak: int = -1) -> None:
        """A custom op's Python ran from ``t0`` to ``t1`` on the calling thread, ``cpu_ns`` of it
        on a CPU (the thread's CPU time; -1 when not measured), allocating at most ``numpy_peak``
        bytes of NumPy data itself (its temporaries; -1 when not measured)."""

    def on_error(self, inv: Invocation, error: BaseException) -> None:
        """A custom-op invocation ended with ``error``."""

    def follow(self, engine: Any) -> None:
        """``set_engine`` (or ``use``) made ``engine`` current and moved this observer onto it: what
        is pushed from now on goes there (a profiler records it, rather than losing it)."""


class Observers(EngineObserver):
    """Several observers as one: each hears every hook, the first one's clock times them all."""

    def __init__(self, observers: Sequence[EngineObserver]) -> None:
        if not observers:
            raise ValueError("Observers needs at least one observer")
        self.observers = tuple(observers)
        self.clock = self.observers[0].clock
        # What measures a custom op's own NumPy data (a recorder's, where it records memory): the
        # custom-op machinery asks the engine's one observer for it.
        self.numpy_memory = next((m for o in self.observers if (m := getattr(o, "numpy_memory", None)) is not None), None)

    def on_push(self, opr: Opr) -> None:
        for o in self.observers:
            o.on_push(opr)

    def run(self, opr: Opr, fn: Callable[..., Any], *args: Any) -> None:
        # Each observer's run wraps the next one's, so every one of them times the op itself.
        for o in reversed(self.observers[1:]):
            fn, args = functools.partial(o.run, opr, fn, *args), ()
        self.observers[0].run(opr, fn, *args)

    def on_ready(self, ready: list[Opr], by: int) -> None:
        self.observers[0].on_ready(ready, by)  # the stamps are the ops' own: one clock stamps them for all

    def on_wait(self, name: str, t0: int, t1: int, by: int = 0, var: int = 0) -> None:
        for o in self.observers:
            o.on_wait(name, t0, t1, by, var)

    def on_held_back(self, t0: int, t1: int, pending: int) -> None:
        for o in self.observers:
            o.on_held_back(t0, t1, pending)

    def on_python(self, inv: Invocation, t0: int, t1: int, cpu_ns: int = -1, numpy_peak: int = -1) -> None:
        for o in self.observers:
            # The peak goes to the observer whose meter measured it (positional only: a compiled
            # observer's on_python takes no keyword); an observer that measures none may be one
            # written before memory was recorded, and takes no peak.
            if numpy_peak < 0 or getattr(o, "numpy_memory", None) is None:
                o.on_python(inv, t0, t1, cpu_ns)
            else:
                o.on_python(inv, t0, t1, cpu_ns, numpy_peak)

    def on_error(self, inv: Invocation, error: BaseException) -> None:
        for o in self.observers:
            o.on_error(inv, error)

    def follow(self, engine: Any) -> None:
        for o in self.observers:
            o.follow(engine)


def _runs_fn_as_told(observer: EngineObserver) -> bool:
    """Whether ``observer``'s ``run`` is opprof's own (the base's, a recorder's, the compiled hot
    path's): those call the op's function first and once, as the protocol asks."""
    for klass in type(observer).__mro__:
        if "run" in vars(klass):
            return klass.__module__.startswith("opprof.")
    return True


class _RunGuard(EngineObserver):
    """Another's observer as the engine calls it, with the protocol's promise kept for it: each op's
    function is called once. Where the observer's ``run`` never calls it, the guard does (an async
    op's completion is in it: a custom op never completed and its readers waited forever); where
    ``run`` raises before calling it, the op fails with that error, and the engine's own ops (a
    wait's release, ``Dummy_Wait``, a delete: ``no_skip``) still run, since they release the threads
    waiting on them (``wait_to_read`` waited forever). Every other hook goes straight through."""

    def __init__(self, inner: EngineObserver) -> None:
        self.inner = inner
        self.reports_to = getattr(inner, "reports_to", inner)
        self.clock = inner.clock
        self.numpy_memory = getattr(inner, "numpy_memory", None)

    def on_push(self, opr: Opr) -> None:
        self.inner.on_push(opr)

    def run(self, opr: Opr, fn: Callable[..., Any], *args: Any) -> None:
        ran = False

        def once(*a: Any) -> None:
            nonlocal ran
            if not ran:  # called twice, an engine op would release its waiters twice
                ran = True
                fn(*a)

        try:
            self.inner.run(opr, once, *args)
        except BaseException:
            if not ran and opr.no_skip:  # the engine's own op: its waiters go, whatever failed
                once(*args)
            raise  # the op fails with the observer's error (an async op completes with it)
        if not ran:  # returned without running it: it runs all the same (an async op's completion is in it)
            once(*args)

    # run_pushed: the base's, on_push then the guarded run (an observer's own run_pushed would call
    # its own run, which may never call the function: the naive engine's plain op then never ran).

    def on_ready(self, ready: list[Opr], by: int) -> None:
        self.inner.on_ready(ready, by)

    def on_wait(self, name: str, t0: int, t1: int, by: int = 0, var: int = 0) -> None:
        self.inner.on_wait(name, t0, t1, by, var)

    def on_held_back(self, t0: int, t1: int, pending: int) -> None:
        self.inner.on_held_back(t0, t1, pending)

    def on_python(self, inv: Invocation, t0: int, t1: int, cpu_ns: int = -1, numpy_peak: int = -1) -> None:
        if numpy_peak < 0:  # as the engine calls an observer written before memory was recorded
            self.inner.on_python(inv, t0, t1, cpu_ns)
        else:
            self.inner.on_python(inv, t0, t1, cpu_ns, numpy_peak)

    def on_error(self, inv: Invocation, error: BaseException) -> None:
        self.inner.on_error(inv, error)

    def follow(self, engine: Any) -> None:
        self.inner.follow(engine)


def guarded(observer: EngineObserver) -> EngineObserver:
    """``observer`` as the engine's hot path calls it: itself where its ``run`` is opprof's own,
    else behind :class:`_RunGuard` (a closure per op, ~0.2 µs, for others' observers only)."""
    return observer if _runs_fn_as_told(observer) else _RunGuard(observer)
