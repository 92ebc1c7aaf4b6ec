"""A profiling session: ``with opprof.profile() as prof`` and the :class:`Profiler` under it.

A session drives one :class:`~.recorder.Recorder` attached to the current engine. Stopping waits
for all engine work first (a program returns before its asynchronous ops have run), then builds
the :class:`~opprof.trace.Trace`.

:class:`ProfileSession` is what the front ends (``%%opprof``, ``opprof run``) need of a running
profile; a :class:`Profiler` is one and so is a whole Dask cluster's
:class:`opprof.dask.DaskProfile`. :func:`stop_after` is how they all stop one after the work
ended, however it ended (after Ctrl-C, waiting only :data:`INTERRUPT_GRACE_S`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from ..engine import get_engine
from ..trace import Trace
from ..trace.live import SpanFeed
from .live import POLL_CAP, LiveFeed
from .recorder import ProfilerError, Recorder

__all__ = ["INTERRUPT_GRACE_S", "ProfileSession", "Profiler", "profile", "stop_after"]


#: After Ctrl-C, how long stopping waits for queued work before it keeps what it has (seconds).
INTERRUPT_GRACE_S = 1.0
#: Whether a profile records memory unless told (see :mod:`.memory` for its cost).
MEMORY_DEFAULT = False


class ProfileSession(Protocol):
    """A profile a front end runs around some work: :class:`Profiler`, :class:`opprof.dask.DaskProfile`.

    ``start()`` begins recording and returns the session; ``live_feed()`` polls it while it runs;
    ``stop(wait)`` waits for the queued work (``wait``: True for all of it, a number of seconds
    for at most that long, False not at all), stops and builds ``trace``. ``error`` is what that
    final wait raised (a :class:`Profiler`'s ``stop`` also raises it, after building the trace).
    After a build that a second Ctrl-C cut short, ``stop()`` again builds it if the records are
    still there (a :class:`Profiler` keeps them), else raises.
    """

    @property
    def trace(self) -> Trace | None: ...

    @property
    def error(self) -> BaseException | None: ...

    def start(self) -> ProfileSession: ...

    def stop(self, wait: bool | float = True) -> Trace: ...

    def live_feed(self) -> SpanFeed: ...


def stop_after(session: ProfileSession, error: BaseException | None) -> BaseException | None:
    """Stop ``session`` once the work it profiled has ended, with ``error`` (None: it ran to the end).

    Waits for all the queued work, but after Ctrl-C (``error`` a KeyboardInterrupt) at most
    :data:`INTERRUPT_GRACE_S`: the work still queued may be what hung. Whatever stopping raises
    (an op that failed and nobody waited for, another Ctrl-C) is returned rather than raised, so the
    caller reports the work's own error first; the trace is built either way (``session.trace``).
    """
    try:
        session.stop(wait=INTERRUPT_GRACE_S if isinstance(error, KeyboardInterrupt) else True)
    except BaseException as e:
        return e
    return None


class Profiler:
    """One profiling session: ``start()``, ``stop()``, then ``trace``."""

    def __init__(
        self,
        max_events: int = 5_000_000,
        clock: Callable[[], int] = time.perf_counter_ns,
        *,
        compiled: bool | None = None,
        memory: bool = MEMORY_DEFAULT,
        gil: bool = True,
    ) -> None:
        self.max_events = max_events
        #: Whether each NDArray's storage is recorded too (:mod:`.memory`).
        self.memory = memory
        #: Whether the GIL is sampled and the engine's hand-offs timed (:mod:`.gil`): the evidence
        #: behind "waiting for the GIL, held by T". Off, the sampler's wakes preempt none of the
        #: program's threads (on a threaded loop of tiny ops here 1.09-1.14x on/off against
        #: 1.11-1.20x; on trivial custom ops no cheaper, docs/why.md says why) and the trace says
        #: the evidence was turned off where it would be.
        self.gil = gil
        #: Which recorder: None the compiled one where built (:data:`~.recorder.COMPILED_WHY_NOT`
        #: says why not), False the pure-Python one, True the compiled one or an error.
        self.compiled = compiled
        #: ns; a Dask worker's may carry an offset injected on purpose (its clock-alignment tests).
        self.clock_fn = clock
        self._recorder: Recorder | None = None
        self._unbuilt: Recorder | None = None  # stopped, but the build was interrupted
        self.trace: Trace | None = None
        self.error: BaseException | None = None  # what the final wait raised, if anything

    @property
    def running(self) -> bool:
        return self._recorder is not None

    def start(self) -> Profiler:
        if self._recorder is not None:
            raise ProfilerError("this profiler is already running")
        self._recorder = Recorder(
            self.max_events, self.clock_fn, compiled=self.compiled, memory=self.memory, gil=self.gil
        ).attach(get_engine())
        self.trace = None
        self._unbuilt = None
        return self

    @property
    def recorded_any(self) -> bool:
        """Whether the running recording holds any record yet (a Dask worker sends none otherwise)."""
        rec = self._recorder
        return rec is not None and rec.recorded_any()

    def snapshot(self) -> Trace:
        """The trace recorded so far, while recording goes on (unfinished custom-op calls left out)."""
        if self._recorder is None:
            raise ProfilerError("the profiler is not running")
        return self._recorder.build({"snapshot": True}, live=True)

    def live_feed(self, cap: int = POLL_CAP) -> LiveFeed:
        """A feed of the spans this running session finishes, poll by poll (:class:`~.live.LiveFeed`)."""
        if self._recorder is None:
            raise ProfilerError("the profiler is not running")
        return LiveFeed(self._recorder, cap)

    def clock(self) -> int:
        """Now, on the clock the running recording uses."""
        if self._recorder is None:
            raise ProfilerError("the profiler is not running")
        return self._recorder.clock()

    def pause(self) -> None:
        if self._recorder is not None:
            self._recorder.recording = False

    def resume(self) -> None:
        if self._recorder is not None:
            self._recorder.recording = True

    def stop(self, wait: bool | float = True) -> Trace:
        """Wait for the engine, stop recording and build the trace.

        An error that the final wait raises is kept in ``self.error`` and raised after the trace is
        built, so the trace of a failed run is never lost. ``wait`` as a number of seconds waits at
        most that long and raises nothing (after Ctrl-C: the queued work may be what hung).
        """
        rec = self._recorder
        if rec is None:
            if self._unbuilt is not None:
                return self._build(self._unbuilt)
            if self.trace is None:
                raise ProfilerError("the profiler was never started")
            return self.trace
        self.error = None
        try:
            if wait is not True and wait and rec.engine is not None:
                deadline = time.monotonic() + float(wait)
                while rec.engine.pending and time.monotonic() < deadline:
                    time.sleep(0.001)
            elif wait and rec.engine is not None:
                rec.engine.wait_for_all()
        except BaseException as e:
            self.error = e
        finally:
            rec.detach()
            self._recorder = None
            self._unbuilt = rec
            trace = self._build(rec)
        if self.error is not None:
            raise self.error
        return trace

    def _build(self, rec: Recorder) -> Trace:
        # Building takes seconds at a million spans. A Ctrl-C meanwhile stops it, but the records
        # stay in ``_unbuilt``: calling ``stop()`` again builds the trace from them.
        trace = self.trace = rec.build()
        self._unbuilt = None
        rec.release()
        return trace


@contextmanager
def profile(
    max_events: int = 5_000_000,
    path: str | os.PathLike[str] | None = None,
    *,
    memory: bool = MEMORY_DEFAULT,
    gil: bool = True,
) -> Iterator[Profiler]:
    """Profile the block; ``prof.trace`` holds the result, also when the block raised.

    With ``path``, the trace is saved there as Chrome trace JSON (``.json`` or ``.json.gz``).
    ``memory``: record every NDArray's storage too (:mod:`.memory`). ``gil``: sample the GIL and
    time the engine's hand-offs (the default; see :class:`Profiler`).
    """
    prof = Profiler(max_events, memory=memory, gil=gil).start()
    try:
        yield prof
    except BaseException as e:
        stop_after(prof, e)  # what stopping raised is dropped: the block's own error is the one to report
        raise
    else:
        prof.stop()
    finally:
        if path is not None and prof.trace is not None:
            prof.trace.save(path)
