"""The profiler's front: ``with opprof.profile() as prof`` and MXNet's ``mx.profiler`` API.

Both drive one :class:`~opprof.recorder.Recorder` attached to the current engine. Stopping waits
for all engine work first (a program returns before its asynchronous ops have run), then builds
the :class:`~opprof.trace.Trace`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from .engine import get_engine
from .recorder import ProfilerError, Recorder
from .trace import Trace

__all__ = ["Profiler", "profile", "ProfilerError"]


class Profiler:
    """One profiling session: ``start()``, ``stop()``, then ``trace``."""

    def __init__(self, max_events: int = 5_000_000) -> None:
        self.max_events = max_events
        self._recorder: Recorder | None = None
        self.trace: Trace | None = None
        self.error: BaseException | None = None  # what the final wait raised, if anything

    @property
    def running(self) -> bool:
        return self._recorder is not None

    def start(self) -> Profiler:
        if self._recorder is not None:
            raise ProfilerError("this profiler is already running")
        self._recorder = Recorder(self.max_events).attach(get_engine())
        self.trace = None
        return self

    def pause(self) -> None:
        if self._recorder is not None:
            self._recorder.recording = False

    def resume(self) -> None:
        if self._recorder is not None:
            self._recorder.recording = True

    def stop(self, wait: bool = True) -> Trace:
        """Wait for the engine, stop recording and build the trace.

        An error that the final wait raises is kept in ``self.error`` and raised after the trace is
        built, so the trace of a failed run is never lost.
        """
        rec = self._recorder
        if rec is None:
            if self.trace is None:
                raise ProfilerError("the profiler was never started")
            return self.trace
        self.error = None
        try:
            if wait and rec.engine is not None:
                rec.engine.wait_for_all()
        except BaseException as e:
            self.error = e
        finally:
            rec.detach()
            self._recorder = None
            self.trace = rec.build()
        if self.error is not None:
            raise self.error
        return self.trace


@contextmanager
def profile(max_events: int = 5_000_000, path: str | os.PathLike[str] | None = None) -> Iterator[Profiler]:
    """Profile the block; ``prof.trace`` holds the result, also when the block raised.

    With ``path``, the trace is saved there as Chrome trace JSON (``.json`` or ``.json.gz``).
    """
    prof = Profiler(max_events).start()
    try:
        yield prof
    except BaseException:
        try:
            prof.stop()
        except BaseException:
            pass  # the block's own error is the one to report
        raise
    else:
        prof.stop()
    finally:
        if path is not None and prof.trace is not None:
            prof.trace.save(path)
