"""What a live view reads while work is still running: a :class:`SpanFeed` polled for :class:`SpanChunk`\\ s.

Two protocols, here in the trace layer so that every side can name them: the feeds
(:class:`opprof.profiler.live.LiveFeed`, :class:`opprof.dask.live.DaskLiveFeed`) satisfy them,
and the views that poll (:class:`opprof.jupyter.live.LiveView`) and draw
(:class:`opprof.view.live.LiveTimeline`) take them, without one layer importing the other.
mypy checks the fit where ``%%opprof`` hands a feed to its live view.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

__all__ = ["SpanChunk", "SpanFeed"]


class SpanChunk(Protocol):
    """One poll's spans, as columns of equal length, and where the recording stands
    (:class:`opprof.profiler.live.LiveSpans` is one)."""

    @property
    def threads(self) -> list[str]:
        """Every recording thread's name so far, in the order they first recorded; ``thread`` indexes it."""

    @property
    def thread(self) -> np.ndarray: ...

    @property
    def start(self) -> np.ndarray:
        """µs since the recording started."""

    @property
    def end(self) -> np.ndarray: ...

    @property
    def name(self) -> list[str]: ...

    @property
    def role(self) -> np.ndarray:
        """The trace's role codes (:data:`opprof.trace.columns.ROLE_CODE`), 0 outside any custom op,
        :data:`~opprof.trace.columns.COLLECTION_ROLE` for a garbage collection."""

    @property
    def outer(self) -> np.ndarray:
        """Spans that others on their thread nest in (a custom op's Python, a user's ``Task``)."""

    @property
    def skipped(self) -> int:
        """Finished spans this poll left out (over its cap)."""

    @property
    def total(self) -> int:
        """Finished spans seen so far, this poll's included (sent or skipped)."""

    @property
    def now_us(self) -> float:
        """The poll's time, µs since the recording started."""

    @property
    def stopped(self) -> bool:
        """The recording has stopped: nothing more will come."""

    def __len__(self) -> int: ...


class SpanFeed(Protocol):
    """A running recording's spans, poll by poll: each poll returns only what finished since the last."""

    def poll(self) -> SpanChunk: ...
