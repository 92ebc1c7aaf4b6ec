"""MXNet's ``mx.profiler`` API: ``set_config``, ``set_state``, ``dump``, ``dumps`` and user objects.

MXNet profiling code runs unchanged on it: a module-level session started by ``set_state('run')``,
finished traces kept for ``dumps()`` until ``reset=True``, and ``Domain``/``Task``/``Frame``/
``Event``/``Counter``/``Marker`` recorded on the running recorder.
"""

from __future__ import annotations

import numbers
import os
from typing import Any

import numpy as np

from ..engine import get_engine
from ..trace import Trace
from ..trace.records import USER
from ..trace.text import mxnet_stats_json, stats_table
from .recorder import ProfilerError, Recorder
from .session import Profiler

__all__ = [
    "Counter",
    "Domain",
    "Event",
    "Frame",
    "Marker",
    "Task",
    "dump",
    "dumps",
    "last_trace",
    "pause",
    "resume",
    "set_config",
    "set_state",
]


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
_traces: list[Trace] = []  # finished runs (last_trace, dump)
# What dumps() aggregates: finished runs since the last dumps(reset=True), and the running
# session's records from the reset on (MXNet resets the statistics, not the trace).
_stats: list[Trace] = []
_reset_at: int | None = None  # the running session's clock at that reset


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
    global _reset_at
    if state == "run":
        if _session is None:
            memory = bool(_config.get("profile_memory") or _config.get("profile_all"))
            _session = Profiler(int(_config["max_events"]), memory=memory).start()
            _reset_at = None
    elif state == "stop":
        if _session is not None:
            session, _session = _session, None
            try:
                session.stop()
            finally:
                if session.trace is not None:
                    _traces.append(session.trace)
                    _stats.append(_since(session.trace, _reset_at))
                _reset_at = None
    else:
        raise ValueError(f"set_state: state must be 'run' or 'stop', got {state!r}")


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
    """Write the recorded trace to the configured ``filename``: stopping first when ``finished``,
    else what is recorded so far, recording going on (MXNet's continuous dump)."""
    if _session is not None:
        if not finished:
            _session.snapshot().save(_config["filename"])
            return
        set_state("stop")
    trace = last_trace()
    if trace is None:
        raise ProfilerError("nothing to dump: call set_state('run') and set_state('stop') first")
    trace.save(_config["filename"])


def dumps(reset: bool = False, format: str = "table", sort_by: str = "total", ascending: bool = False) -> str:
    """Aggregate statistics since the last reset, the running session's so far included, as MXNet
    prints them; ``format='json'`` is MXNet's schema (``{"Time": ..., "Memory": ..., "Unit": ...}``).

    opprof's own JSON, with the custom-op split, is :func:`opprof.trace.text.stats_json`
    (``opprof stats --format json``).
    """
    global _reset_at
    if format not in ("table", "json"):
        raise ValueError(f"dumps: format must be 'table' or 'json', got {format!r}")
    traces = list(_stats)
    if _session is not None:
        traces.append(_since(_session.snapshot(), _reset_at))
    if reset:
        _stats.clear()
        _reset_at = _session.clock() if _session is not None else None
    if format == "json":
        return mxnet_stats_json(traces, sort_by=sort_by, ascending=ascending)
    return stats_table(traces, sort_by=sort_by, ascending=ascending)


def _since(trace: Trace, t_ns: int | None) -> Trace:
    """``trace`` with only the spans that start at ``t_ns`` or later (all when None)."""
    if t_ns is None:
        return trace
    t = trace.table
    spans = t.take(np.flatnonzero(t.start >= t_ns))
    # The memory counter is the session's, as MXNet's is the process's: not cut at a reset.
    return Trace(
        trace.threads, spans, trace.instants, trace.counters, trace.flow_table, trace.metadata, processes=trace.processes,
        memory=trace.memory,
    )  # fmt: skip


def _recorder() -> Recorder | None:
    return next((o for o in get_engine().observers if isinstance(o, Recorder)), None)


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
    _cat = USER

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
        self.value: float = 0
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
