"""The profiler: a recorder the engine tells of every op, sessions, and MXNet's ``mx.profiler`` API.

``opprof.profile()`` / :class:`Profiler` are opprof's own front; everything else here is MXNet's
``mx.profiler`` (so this package is that namespace). It reads the engine and writes the trace
model; it knows nothing of NDArrays or of Bokeh.
"""

from .mxnet_api import (
    Counter,
    Domain,
    Event,
    Frame,
    Marker,
    Task,
    dump,
    dumps,
    last_trace,
    pause,
    resume,
    set_config,
    set_state,
)
from .recorder import ProfilerError, Recorder
from .session import INTERRUPT_GRACE_S, Profiler, ProfileSession, profile, stop_after

__all__ = [
    "INTERRUPT_GRACE_S",
    "Counter",
    "Domain",
    "Event",
    "Frame",
    "Marker",
    "ProfileSession",
    "Profiler",
    "ProfilerError",
    "Recorder",
    "Task",
    "dump",
    "dumps",
    "last_trace",
    "pause",
    "profile",
    "resume",
    "set_config",
    "set_state",
    "stop_after",
]
