"""The profiler's front: ``with opprof.profile() as prof`` and MXNet's ``mx.profiler`` API.

Both drive one :class:`~opprof.recorder.Recorder` attached to the current engine. Stopping waits
for all engine work first (a program returns before its asynchronous ops have run), then builds
the :class:`~opprof.trace.Trace`.
"""

from __future__ import annotations

import numbers
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .engine import get_engine
from .recorder import ProfilerError, Recorder
from .trace import Trace

__all__ = [
    "Counter",
    "Domain",
    "Event",
    "Frame",
    "Marker",
    "Profiler",
    "ProfilerError",
    "Task",
    "dump",
    "dumps",
    "last_trace",
    "pause",
    "profile",
    "resume",
    "set_config",
    "set_state",
]


#: After Ctrl-C, how long stopping waits for queued work before it keeps what it has (seconds).
INTERRUPT_GRACE_S = 1.0


class Profiler:
    """One profiling session: ``start()``, ``stop()``, then ``trace``."""

    def __init__(self, max_events: int = 5_000_000) -> None:
        self.max_events = max_events
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
        self._recorder = Recorder(self.max_events).attach(get_engine())
        self.trace = None
        self._unbuilt = None
        return self

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
            self._build(rec)
        if self.error is not None:
            raise self.error
        return self.trace

    def _build(self, rec: Recorder) -> Trace:
        # Building takes seconds at a million spans. A Ctrl-C meanwhile stops it, but the records
        # stay in ``_unbuilt``: calling ``stop()`` again builds the trace from them.
        self.trace = rec.build()
        self._unbuilt = None
        return self.trace


@contextmanager
def profile(max_events: int = 5_000_000, path: str | os.PathLike[str] | None = None) -> Iterator[Profiler]:
    """Profile the block; ``prof.trace`` holds the result, also when the block raised.

    With ``path``, the trace is saved there as Chrome trace JSON (``.json`` or ``.json.gz``).
    """
    prof = Profiler(max_events).start()
    try:
        yield prof
    except BaseException as e:
        try:
            prof.stop(wait=INTERRUPT_GRACE_S if isinstance(e, KeyboardInterrupt) else True)
        except BaseException:
            pass  # the block's own error is the one to report
        raise
    else:
        prof.stop()
    finally:
        if path is not None and prof.trace is not None:
            prof.trace.save(path)


# ---------------------------------------------------------------------------- MXNet's mx.profiler
_CONFIG_KEYS = {
    "profile_all": bool,
    "profile_symbolic": bool,
    "profile_imperative": bool,
    "profile_memory": bool,
    "profile_api": bool,
    "filename": str,
    "continuous_dump": bool,
    "dump_period": float,
    "aggregate_stats": bool,
    "profile_process": str,
    "max_events": int,
}
_config: dict[str, Any] = {"filename": "profile.json", "aggregate_stats": False, "max_events": 5_000_000}
_session: Profiler | None = None
_traces: list[Trace] = []  # finished runs since the last dumps(reset=True)


def set_config(**kwargs: Any) -> None:
    """Configure the next ``set_state('run')`` (MXNet's keys; ``max_events`` caps memory)."""
    for key, value in kwargs.items():
        kind = _CONFIG_KEYS.get(key)
        if kind is None:
            raise ValueError(f"set_config: unknown option {key!r}; valid options: {', '.join(sorted(_CONFIG_KEYS))}")
        if kind is bool and not isinstance(value, (bool, int)):
            raise TypeError(f"set_config: {key} must be True or False, got {value!r}")
        if kind in (int, float) and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
            raise TypeError(f"set_config: {key} must be a number, got {value!r}")
        if kind is str and not isinstance(value, (str, os.PathLike)):
            raise TypeError(f"set_config: {key} must be a string, got {value!r}")
        if key == "max_events" and (not isinstance(value, numbers.Integral) or value < 1):
            raise ValueError(f"set_config: max_events must be a whole number at least 1, got {value!r}")
        if key == "dump_period" and not value >= 0:
            raise ValueError(f"set_config: dump_period must be at least 0 seconds, got {value!r}")
        if key == "filename" and not os.fspath(value):
            raise ValueError("set_config: filename must not be empty")
    _config.update(kwargs)


def set_state(state: str = "stop", profile_process: str = "worker") -> None:
    """``'run'`` starts recording on the current engine; ``'stop'`` waits for it and stops."""
    global _session
    if state == "run":
        if _session is None:
            _session = Profiler(int(_config["max_events"])).start()
    elif state == "stop":
        if _session is not None:
            session, _session = _session, None
            try:
                session.stop()
            finally:
                if session.trace is not None:
                    _traces.append(session.trace)
    else:
        raise ValueError(f"set_state: state must be 'run' or 'stop', got {state!r}")


def state() -> str:
    return "run" if _session is not None else "stop"


def pause(profile_process: str = "worker") -> None:
    if _session is not None:
        _session.pause()


def resume(profile_process: str = "worker") -> None:
    if _session is not None:
        _session.resume()


def last_trace() -> Trace | None:
    """The trace of the most recent ``set_state('stop')``."""
    return _traces[-1] if _traces else None


def dump(finished: bool = True, profile_process: str = "worker") -> None:
    """Write the recorded trace to the configured ``filename`` (stopping first when ``finished``)."""
    if _session is not None:
        if not finished:
            raise ValueError("dump(finished=False) while running is not supported; call set_state('stop') or dump()")
        set_state("stop")
    trace = last_trace()
    if trace is None:
        raise ProfilerError("nothing to dump: call set_state('run') and set_state('stop') first")
    trace.save(_config["filename"])


def dumps(reset: bool = False, format: str = "table", sort_by: str = "total", ascending: bool = False) -> str:
    """Aggregate statistics of every run since the last reset, as MXNet prints them."""
    from .report import stats_json, stats_table

    if format not in ("table", "json"):
        raise ValueError(f"dumps: format must be 'table' or 'json', got {format!r}")
    traces = list(_traces)
    if reset:
        _traces.clear()
    if format == "json":
        return stats_json(traces, sort_by=sort_by, ascending=ascending)
    return stats_table(traces, sort_by=sort_by, ascending=ascending)


def _recorder() -> Recorder | None:
    obs = get_engine().observer
    return obs if isinstance(obs, Recorder) else None


class Domain:
    """A named group for user objects; its name is their category."""

    def __init__(self, name: str) -> None:
        self.name = str(name)

    def new_task(self, name: str) -> Task:
        return Task(self, name)

    def new_frame(self, name: str) -> Frame:
        return Frame(self, name)

    def new_counter(self, name: str, value: int | None = None) -> Counter:
        return Counter(self, name, value)

    def new_marker(self, name: str) -> Marker:
        return Marker(self, name)

    def __str__(self) -> str:
        return self.name


class _UserSpan:
    _cat = "user"

    def __init__(self, domain: Domain | None, name: str) -> None:
        self.domain = domain
        self.name = str(name)
        self._t0: int | None = None

    def start(self) -> None:
        rec = _recorder()
        self._t0 = rec.clock() if rec is not None else None

    def stop(self) -> None:
        rec = _recorder()
        if rec is not None and self._t0 is not None:
            rec.on_user_span(self.name, self.domain.name if self.domain else self._cat, self._t0, rec.clock())
        self._t0 = None

    def __enter__(self) -> _UserSpan:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Task(_UserSpan):
    """A span of user work: ``start()``/``stop()`` or ``with``."""


class Frame(_UserSpan):
    """Like :class:`Task`; MXNet draws frames per iteration."""


class Event(_UserSpan):
    """A span without a domain."""

    def __init__(self, name: str) -> None:
        super().__init__(None, name)


class Counter:
    """A value over time (a ``C`` track in the Chrome trace)."""

    def __init__(self, domain: Domain, name: str, value: int | None = None) -> None:
        self.domain = domain
        self.name = str(name)
        self.value = 0
        if value is not None:
            self.set_value(value)

    def set_value(self, value: float) -> None:
        self.value = value
        rec = _recorder()
        if rec is not None:
            rec.on_counter(self.name, rec.clock(), value)

    def increment(self, delta: float = 1) -> None:
        self.set_value(self.value + delta)

    def decrement(self, delta: float = 1) -> None:
        self.set_value(self.value - delta)

    def __iadd__(self, delta: float) -> Counter:
        self.increment(delta)
        return self

    def __isub__(self, delta: float) -> Counter:
        self.decrement(delta)
        return self


class Marker:
    """An instant event."""

    def __init__(self, domain: Domain, name: str) -> None:
        self.domain = domain
        self.name = str(name)

    def mark(self, scope: str = "process") -> None:
        rec = _recorder()
        if rec is not None:
            rec.on_instant(self.name, self.domain.name, rec.clock())
