"""The ``%%opprof`` live view: a thread that polls the recording and streams it into the cell's output.

While the cell runs, :class:`LiveView`'s thread wakes every :data:`PERIOD_S`, takes the spans
finished since its last look (a :class:`~opprof.trace.live.SpanFeed`: :class:`opprof.profiler.live.LiveFeed`,
or :class:`opprof.dask.live.DaskLiveFeed` with ``--dask``) and adds them to a
:class:`opprof.view.live.LiveTimeline`, whose BokehModel sends them to the page at once: comm
messages go out on ipykernel's IOPub thread, which any thread may send through, and need no
idle kernel (the page's replies would; the live view asks none).

The view appears only once the cell has run one period (a quick cell never flashes one), and is
displayed from the thread: a thread without a parent message of its own sends its output under
the kernel's current one, the running cell's. When the cell ends, :meth:`LiveView.stop` joins
the thread and :meth:`LiveView.replace` puts the full timeline in the live view's place
(``update_display_data``), so the saved notebook holds the full widget with its still picture, as
without the live view.

Its cost to the cell is the thread's GIL time: a poll (at most 2,000 spans) and its stream take
~1-4 ms every 250 ms (under 2 %), and building the view 60-150 ms once (``benchmarks/live.py``:
the row "profiler on/off with the live view").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from IPython.display import display

from ..trace.live import SpanChunk, SpanFeed

__all__ = ["PERIOD_S", "LiveView", "LiveWidget"]

#: Between polls. A span shows in the page at most one period (plus ~10 ms to poll and send)
#: after it finished: the issue asks for half a second.
PERIOD_S = 0.25
#: How long :meth:`LiveView.stop` waits for a poll in progress (a poll takes milliseconds).
JOIN_S = 5.0


class LiveWidget(Protocol):
    """What :class:`LiveView` needs of the widget it shows (:class:`opprof.view.live.LiveTimeline` is one)."""

    def add(self, chunk: SpanChunk) -> None:
        """Draw one poll's spans."""

    def retire(self) -> None:
        """Let go of what it holds once another widget has taken its place."""


class LiveView:
    """Polls ``feed`` from a daemon thread into a live timeline shown in the cell (see the module docstring).

    ``make_view`` builds the widget (default :class:`opprof.view.live.LiveTimeline`); ``show`` displays
    it and returns a handle with ``update(obj)`` (default: IPython's ``display(..., display_id=True)``).
    """

    def __init__(
        self,
        feed: SpanFeed,
        *,
        period_s: float = PERIOD_S,
        make_view: Callable[[], LiveWidget] | None = None,
        show: Callable[[Any], Any] | None = None,
    ) -> None:
        self.feed = feed
        self.period_s = period_s
        self._make_view = make_view or _live_timeline
        self._show = show or (lambda widget: display(widget, display_id=True))
        self.view: LiveWidget | None = None  # the live widget, once shown
        self.handle: Any = None  # its display handle
        self.error: BaseException | None = None  # what stopped the thread early, if anything
        self.polls: list[tuple[float, int, int]] = []  # (perf_counter, spans this poll, spans so far) per poll
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="opprof-live-view", daemon=True)

    def start(self) -> LiveView:
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.period_s):
                self.tick()
        except Exception as e:  # never into the kernel from here; the cell reports it at its end
            self.error = e

    def tick(self) -> None:
        """One poll: show the view if it is not yet, then stream the new spans into it."""
        spans = self.feed.poll()
        if self._stop.is_set():  # the cell has ended: the view may be replaced already
            return
        if self.view is None:
            self.view = self._make_view()
            self.handle = self._show(self.view)
        self.view.add(spans)
        self.polls.append((time.perf_counter(), len(spans), spans.total))

    def stop(self) -> None:
        """Stop polling and wait for the thread (idempotent; call it in a ``finally``)."""
        self._stop.set()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(JOIN_S)

    def replace(self, widget: Any) -> bool:
        """Put ``widget`` where the live view is shown and let the live view go; False if none was shown."""
        if self.handle is None:
            return False
        self.handle.update(widget)
        self.close()
        return True

    def close(self) -> None:
        """Let the live widget go, if it was made: its parts close, its outer box stays open
        (see :meth:`opprof.view.live.LiveTimeline.retire`: closing it would hide what replaced it)."""
        view, self.view = self.view, None
        if view is not None:
            view.retire()


def _live_timeline() -> LiveWidget:
    from ..view.live import LiveTimeline  # Bokeh and ipywidgets: only once a live view is shown

    return LiveTimeline()
