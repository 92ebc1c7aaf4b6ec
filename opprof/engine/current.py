"""Which engine NDArray operations push to: made from the environment on first use, switchable.

After ``fork()`` (multiprocessing's default start method on Linux, which data loaders use) the
child has none of the parent's threads, and locks another thread held stay held. As MXNet does,
the engine finishes its queued work before the fork (so no array is left mid-write), and the
child starts with no engine: its first operation makes a fresh one. The parent goes on as it was.

``OPPROF_ENGINE=threaded|naive`` (``OPPROF_ENGINE_THREADS``, ``OPPROF_CUSTOM_THREADS``,
``OPPROF_ENGINE_SPIN_US``) chooses the first one; :func:`set_engine` replaces it, finishing the old one's work first, and
``with use(kind):`` runs a block on another engine and then puts the one before it back. A custom op's
Python is *bound* to the engine that runs it, so that its sub-ops and its ``Dummy_Wait`` share
one engine even if another was made current meanwhile.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from . import interrupts
from .core import Engine, EngineError
from .naive import NaiveEngine
from .state import thread_state
from .threaded import ThreadedEngine

__all__ = ["bind_thread", "bulk", "get_engine", "make_engine", "set_bulk_size", "set_engine", "use"]


class _Binding(threading.local):
    engine: Engine | None = None  # the engine this thread pushes to (a custom op's Python)


_binding = _Binding()
_current: Engine | None = None
_current_lock = threading.Lock()


def _from_env() -> Engine:
    kind = os.environ.get("OPPROF_ENGINE", "threaded").strip().lower() or "threaded"
    workers = os.environ.get("OPPROF_ENGINE_THREADS")
    custom = os.environ.get("OPPROF_CUSTOM_THREADS")
    spin = os.environ.get(SPIN_ENV, "").strip()
    try:
        spin_us = float(spin) if spin else None
    except ValueError:
        raise ValueError(f"{SPIN_ENV}={spin!r}: expected a number of µs (0: park at once)") from None
    return make_engine(
        kind,
        workers=int(workers) if workers else None,
        custom_workers=int(custom) if custom else None,
        spin_us=spin_us if kind == "threaded" else None,
    )


#: The environment variable that sets the first threaded engine's ``spin_us``.
SPIN_ENV = "OPPROF_ENGINE_SPIN_US"


def make_engine(
    kind: str = "threaded", *, workers: int | None = None, custom_workers: int | None = None, spin_us: float | None = None
) -> Engine:
    """A new engine of ``kind`` (``"threaded"`` or ``"naive"``); it is not made current.

    ``spin_us``: how long a threaded engine's idle thread polls its queue before parking
    (:data:`opprof.engine.handoff.SPIN_US` by default; 0 parks at once)."""
    if kind == "threaded":
        return ThreadedEngine(workers, custom_workers, spin_us=spin_us)
    if kind == "naive":
        if workers is not None or custom_workers is not None or spin_us is not None:
            raise ValueError("the naive engine runs everything inline; it takes no thread counts or spin")
        return NaiveEngine()
    raise ValueError(f"unknown engine kind {kind!r}; expected 'threaded' or 'naive' (OPPROF_ENGINE)")


def get_engine() -> Engine:
    """The engine that NDArray operations push to (made from ``OPPROF_ENGINE`` on first use).

    Inside a custom op's Python it is the engine running that op, even if ``set_engine`` has
    since made another engine current: the op's sub-ops and its ``Dummy_Wait`` must share one.
    """
    eng = _binding.engine or _current
    if eng is None:
        with _current_lock:
            if _current is None:
                _set(_from_env())
            eng = _current
    assert eng is not None
    return eng


def bind_thread(engine: Engine | None) -> Engine | None:
    """Make this thread push to ``engine`` (``None``: the current engine); return the previous binding."""
    prev = _binding.engine
    _binding.engine = engine
    return prev


def _set(engine: Engine | None) -> Engine | None:
    global _current
    old, _current = _current, engine
    return old


def set_engine(
    kind: str | Engine = "threaded",
    *,
    workers: int | None = None,
    custom_workers: int | None = None,
    spin_us: float | None = None,
) -> Engine:
    """Make a new engine current; the old one finishes its work and stops its threads first.

    Errors that the old engine held and nobody waited for are raised here rather than lost.
    """
    _refuse_inside_the_engine("set_engine")
    engine = (
        kind if isinstance(kind, Engine) else make_engine(kind, workers=workers, custom_workers=custom_workers, spin_us=spin_us)
    )
    with _current_lock:
        old = _set(engine)
    if old is not None and old is not engine:
        try:  # a running profile goes on recording on the new engine
            old.hand_observers_to(engine, old.wait_for_all)
        finally:
            old.shutdown()
    return engine


def _refuse_inside_the_engine(what: str) -> None:
    """Switching engines from an engine op or a custom op's Python would wait for that op itself
    (the old engine finishes its work first): refuse, as ``waitall`` does there."""
    st = thread_state
    if st.engine_worker is not None or st.custom_pool is not None or st.async_body or st.invocation is not None:
        raise EngineError(
            f"{what} was called inside an engine op or a custom operator's Python; it would wait for "
            "that operator itself. Switch engines outside the operator."
        )


@contextmanager
def use(
    kind: str | Engine = "threaded",
    *,
    workers: int | None = None,
    custom_workers: int | None = None,
    spin_us: float | None = None,
) -> Iterator[Engine]:
    """``with engine.use("naive"):`` runs the block on another engine, then makes the one before it current again.

    ``kind`` and the thread counts make a new engine, as :func:`set_engine` does; an :class:`Engine`
    given is used as it is. The current engine finishes its queued work first (the block's ops may
    read what it wrote; an error it held is raised here, before the block runs) and is set aside,
    not shut down. However the block ends, the engine it ran on then finishes its work, the engine
    set aside is current again (the same object, its threads kept), and an engine ``use`` made is
    shut down (one given is left running: it is its owner's to stop). An error that engine held
    and nobody waited for is raised then, as :func:`set_engine` raises it, unless the block raised
    an error of its own, which is the one to report. Nested, each ``use`` restores the engine its
    own block started from.
    """
    _refuse_inside_the_engine("engine.use")
    engine = (
        kind if isinstance(kind, Engine) else make_engine(kind, workers=workers, custom_workers=custom_workers, spin_us=spin_us)
    )
    pid = os.getpid()
    with _current_lock:
        previous = _set(engine)
    block_failed = False
    try:
        if previous is not None and previous is not engine:
            previous.hand_observers_to(engine, previous.wait_for_all)
        yield engine
    except BaseException:
        block_failed = True
        raise
    finally:
        if os.getpid() != pid and previous is not None:
            # A forked child leaving the block: the engine set aside has no threads in this
            # process. The child goes on with no engine, as after any fork (see the module docstring).
            previous.abandon()
            previous = None
        with _current_lock:
            inner = _set(previous)
        # Usually ``engine``; another one if the block called set_engine (which stopped ``engine``).
        if inner is not None and inner is not previous:
            try:
                try:
                    if previous is not None:
                        inner.hand_observers_to(previous, inner.wait_for_all)
                    else:
                        inner.wait_for_all()
                finally:
                    if inner is not kind:
                        inner.shutdown()
            except BaseException:
                if not block_failed:
                    raise


def _shutdown_at_exit() -> None:
    eng = _set(None)
    if eng is not None:
        try:
            eng.shutdown()
        except BaseException:
            pass


atexit.register(_shutdown_at_exit)


_bulk_size = 0


def set_bulk_size(size: int) -> int:
    """MXNet's hint to run up to ``size`` ops as one engine op; returns the previous size.

    opprof does not bulk: every op stays its own op (and its own span in a profile). The size is
    kept, so code that sets and restores it works unchanged.
    """
    global _bulk_size
    prev, _bulk_size = _bulk_size, int(size)
    return prev


@contextmanager
def bulk(size: int) -> Iterator[None]:
    """``with mx.engine.bulk(size):`` (see :func:`set_bulk_size`)."""
    prev = set_bulk_size(size)
    try:
        yield
    finally:
        set_bulk_size(prev)


def _before_fork() -> None:
    eng = _current
    # Only a user's thread may wait: an engine worker or a custom op's Python that forks would be
    # waiting for itself.
    if eng is None or thread_state.engine_worker is not None or thread_state.custom_pool is not None:
        return
    if not thread_state.async_body:
        eng.wait_idle()


def _after_fork_in_child() -> None:
    global _current, _current_lock
    old, _current = _current, None
    _current_lock = threading.Lock()  # another thread may have held it when the parent forked
    if old is not None:
        old.abandon()
    _binding.engine = None
    interrupts.after_fork()


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
