"""Python's cyclic garbage collector while a profile records: each collection a span on the thread
that ran it.

A collection runs on whichever thread's allocation crossed the collector's threshold, holds the
GIL from start to end and runs no Python of the program's: every other thread that wants the GIL
meanwhile waits for it. A full collection (generation 2) of a process with a few hundred thousand
objects takes tens of milliseconds (23 ms measured here, in a test process, on an engine worker),
longer than the switch interval, and without its span the GIL's holder reads as the op or the
engine's Python it interrupted ("held most by opprof-engine-0, the engine's own Python, between
ops"). With it, :func:`~opprof.trace.analysis.gil.span_at` finds the collection as the deepest span
open on the holder, and the waiting is named after it.

``gc.callbacks`` tells each collection's start and stop on the collecting thread; the recording
stamps both on the recorder's clock, and a collection of :data:`MIN_SPAN_NS` or longer becomes a
span. Two calls of a small function a collection (~1 µs; a loop of small ops sets off a young
collection every few hundred ops): nothing on the per-op path. The collector runs no collection
inside its callbacks, so the callback may allocate.

The collecting thread gets a lane if it had none yet (the recorder's lock is reentrant for it:
the collection may start inside it), and every collection is also counted in ``metadata["gc"]``,
paused or not.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

from ..trace.records import GC_METADATA, gc_span_name

__all__ = ["MIN_SPAN_NS", "GcRecording"]

_GENERATIONS = 3
#: A collection shorter than this is counted but gets no span: the GIL's holder is sampled once a
#: millisecond (:data:`~.gil.PERIOD_NS`), so a shorter hold names no one's wait but by chance, and a
#: young collection (every few hundred allocations; 10-100 µs here) a span each would strew the
#: lanes with slivers. A full collection of a real program's heap lasts tens of milliseconds.
MIN_SPAN_NS = 1_000_000


class GcRecording:
    """The collections between :meth:`start` and :meth:`stop`: each handed to ``on_collection``
    (``(t0, t1, span name)``, called on the collecting thread), all of them counted."""

    def __init__(self, clock: Callable[[], int], on_collection: Callable[[int, int, str], None]) -> None:
        self._clock = clock
        self._on_collection = on_collection
        self._names = [gc_span_name(g) for g in range(_GENERATIONS)]
        self._t0 = 0  # the running collection's start (collections never overlap: one collector)
        self.count = [0] * _GENERATIONS
        self.ns = [0] * _GENERATIONS
        self.spans = 0  # the collections handed on as spans (MIN_SPAN_NS or longer)
        self._callback: Callable[[str, dict[str, Any]], None] | None = None

    def start(self) -> None:
        if self._callback is not None:
            return

        def callback(phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                self._t0 = self._clock()
                return
            t1 = self._clock()
            gen = min(int(info.get("generation", 0)), _GENERATIONS - 1)
            self.count[gen] += 1
            self.ns[gen] += t1 - self._t0
            if t1 - self._t0 >= MIN_SPAN_NS:
                self.spans += 1
                self._on_collection(self._t0, t1, self._names[gen])

        self._callback = callback
        gc.callbacks.append(callback)

    def stop(self) -> None:
        if self._callback is not None:
            # A collection under way on another thread finishes without this recording's callback.
            try:
                gc.callbacks.remove(self._callback)
            except ValueError:  # someone cleared gc.callbacks meanwhile
                pass
            self._callback = None

    def metadata(self) -> dict[str, Any]:
        """``metadata["gc"]``: the collections on every thread, their time, and per generation."""
        return {
            GC_METADATA: {
                "collections": sum(self.count),
                "ns": sum(self.ns),
                "spans": self.spans,
                "min_span_ns": MIN_SPAN_NS,
                "by_generation": [{"collections": c, "ns": n} for c, n in zip(self.count, self.ns, strict=True)],
            }
        }
