"""The live timeline: spans drawn as they finish, while the profiled work still runs.

A small ipywidgets ``VBox``: a status line ("live: N spans, t = X s") over a Bokeh figure in a
``jupyter_bokeh.BokehModel``, one lane per thread (added as threads appear). :meth:`LiveTimeline.add`
takes one poll's spans (a :class:`~opprof.trace.live.SpanChunk`, such as :class:`opprof.profiler.live.LiveSpans`) and
``ColumnDataSource.stream``-s them, which BokehModel sends to the page as it happens; the caller
(:mod:`opprof.jupyter.live`) polls from a thread. It is a progress view, not the timeline:
no merging, no controls, no parents. When the work ends the full
:class:`~.widget.TimelineWidget` takes its place and :meth:`LiveTimeline.retire` lets go of this one.

Every column sent is a number (names go as codes into a names source that grows only when a new
name appears), so a poll's message is binary: ~30 bytes a span. The x range is a
``DataRange1d``: BokehJS widens it to the data on every stream until the user zooms or pans, and
the reset tool gives the following back.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as W
import numpy as np
from bokeh.models import (
    ColumnDataSource,
    CustomJSHover,
    CustomJSTickFormatter,
    DataRange1d,
    FixedTicker,
    HoverTool,
    LinearColorMapper,
    PanTool,
    Range1d,
    ResetTool,
    WheelZoomTool,
)
from bokeh.plotting import figure

from ..trace.live import SpanChunk
from .figure import ROLE_COLORS, ROLE_LABELS
from .layout import ROLE_NAMES

__all__ = ["LIVE_NAMES_SOURCE", "LIVE_OUTER_SOURCE", "LIVE_SOURCE", "ROLLOVER", "LiveTimeline", "SpanChunk"]

#: Names of the page's data sources (tests find them in ``Bokeh.documents``): the spans nothing
#: nests in (nearly all), the spans others nest in (a custom op's Python, a user's Task), the names.
LIVE_SOURCE, LIVE_OUTER_SOURCE, LIVE_NAMES_SOURCE = "opprof_live_spans", "opprof_live_outer", "opprof_live_names"
#: Spans the page keeps per source; older ones roll off. BokehJS redraws every bar on every
#: stream (four a second): headless Chromium on this 2-core machine, software canvas, takes
#: 210-250 ms for 20,000 bars and 800 ms for 100,000 (WebGL on SwiftShader: 400 ms and 2 s).
ROLLOVER = 20_000
#: The lane band a span fills (y grows downward; a lane is 1 high): spans that others nest in
#: fill most of it, the rest sit lower and on top, leaving the nesting span's top strip visible.
_OUTER_Y, _OUTER_H = 0.5, 0.84
_INNER_Y, _INNER_H = 0.58, 0.68
_LANE_PX = 26  # figure height per lane, between 180 and 600 px in all
_PALETTE = [ROLE_COLORS[r] for r in ROLE_NAMES]

_FMT_JS = """
function fmt(us, ref) {
  const a = Math.abs(ref);
  const [unit, scale] = a >= 1e6 ? ["s", 1e6] : a >= 1e3 ? ["ms", 1e3] : ["\\u00b5s", 1];
  const r = Math.abs(ref / scale);
  return (us / scale).toFixed(r === 0 ? 0 : Math.max(0, Math.min(6, 2 - Math.floor(Math.log10(r))))) + " " + unit;
}
"""
#: The colours' key, as HTML beside the status (a Bokeh legend costs ~15 models, a third of the
#: figure's 170 ms to build and serialise).
_LEGEND_HTML = " ".join(
    f'<span style="color:{ROLE_COLORS[r]}">&#9632;</span>&nbsp;{ROLE_LABELS[r]}' for r in ROLE_NAMES if r != "parent"
)
_TICK_JS = _FMT_JS + "return fmt(tick, ticks.length > 1 ? ticks[1] - ticks[0] : tick);"


def _empty() -> dict[str, np.ndarray]:
    return {
        "left": np.zeros(0),
        "right": np.zeros(0),
        "y": np.zeros(0),
        "c": np.zeros(0, np.int8),
        "name": np.zeros(0, np.int32),
    }


def _hover(renderers: list[Any], names: ColumnDataSource) -> HoverTool:
    """Name, start and duration of the span under the pointer (the duration from the hovered
    renderer's own source, so one tool serves both)."""
    duration = (
        "const s = special_vars.glyph_view.parent.model.data_source.data, i = special_vars.index;"
        " const d = s.right[i] - s.left[i]; return fmt(d, d);"
    )
    return HoverTool(
        renderers=renderers,
        tooltips=[("name", "@name{custom}"), ("start", "@left{custom}"), ("duration", "@right{custom}")],
        formatters={
            "@name": CustomJSHover(args={"names": names}, code="return names.data.name[value] ?? '';"),
            "@left": CustomJSHover(code=_FMT_JS + "return fmt(value, value);"),
            "@right": CustomJSHover(code=_FMT_JS + duration),
        },
    )


class LiveTimeline(W.VBox):
    """A status line over a figure that grows with each :meth:`add` (see the module docstring)."""

    def __init__(self, *, width: int = 1000, rollover: int = ROLLOVER, backend: str = "canvas") -> None:
        from jupyter_bokeh import BokehModel

        self.rollover = int(rollover)
        self.lanes: dict[str, int] = {}  # thread name -> lane (a thread re-made under the same name keeps its lane)
        self._codes: dict[str, int] = {}
        self.sent = 0  # spans streamed to the page
        self.skipped = 0  # spans the polls left out (over their cap)
        self.total = 0
        self.source = ColumnDataSource(_empty(), name=LIVE_SOURCE)
        self.outer = ColumnDataSource(_empty(), name=LIVE_OUTER_SOURCE)
        self.names = ColumnDataSource({"name": []}, name=LIVE_NAMES_SOURCE)
        wheel = WheelZoomTool(dimensions="width")
        self.figure = p = figure(
            title="opprof live view: spans as they finish (the full timeline replaces it when the cell ends)",
            width=width,
            height=180,
            x_range=DataRange1d(range_padding=0.02),
            y_range=Range1d(1, 0),  # lane 0 at the top
            tools=[PanTool(dimensions="width"), wheel, ResetTool()],
            active_scroll=wheel,
            x_axis_label="time since the cell started",
            toolbar_location="above",
            output_backend=backend,
        )
        p.xaxis.formatter = CustomJSTickFormatter(code=_TICK_JS)
        p.yaxis.ticker = FixedTicker(ticks=[])
        p.ygrid.grid_line_color = None
        color = {"field": "c", "transform": LinearColorMapper(palette=_PALETTE, low=-0.5, high=len(_PALETTE) - 0.5)}
        bars = {"y": "y", "left": "left", "right": "right", "fill_color": color, "line_color": color}
        # Outer spans first, so the spans nested in them draw on top.
        r_outer = p.hbar(height=_OUTER_H, source=self.outer, **bars)
        r_inner = p.hbar(height=_INNER_H, source=self.source, **bars)
        for r in (r_outer, r_inner):  # nothing selects or mutes: fewer models to build and send
            r.nonselection_glyph = r.muted_glyph = None
        p.add_tools(_hover([r_inner, r_outer], self.names))
        self.status = W.Label(value="live: waiting for the first spans")
        self.bokeh = BokehModel(p, combine_events=True)
        legend = W.HTML(_LEGEND_HTML)
        top = W.HBox([self.status, legend])
        self._parts: list[Any] = [top, self.status, legend, self.bokeh]  # what retire() closes
        super().__init__([top, self.bokeh])

    def __repr__(self) -> str:  # the text/plain of its mimebundle (a terminal, nbconvert)
        return f"opprof live view ({self.status.value})"

    # ------------------------------------------------------------------ streaming
    def add(self, chunk: SpanChunk) -> None:
        """Stream one poll's spans into the page and update the status line."""
        lane_of = self._lanes(chunk.threads)
        n = len(chunk.start)
        if n:
            codes = self._name_codes(chunk.name)
            y = lane_of[chunk.thread].astype(np.float64)
            outer = np.asarray(chunk.outer, bool)
            for source, mask, dy in ((self.outer, outer, _OUTER_Y), (self.source, ~outer, _INNER_Y)):
                if mask.any():
                    source.stream(
                        {
                            "left": chunk.start[mask],
                            "right": chunk.end[mask],
                            "y": y[mask] + dy,
                            "c": chunk.role[mask].astype(np.int8),
                            "name": codes[mask],
                        },
                        rollover=self.rollover,
                    )
        self.sent += n
        self.skipped += chunk.skipped
        self.total = chunk.total
        self.status.value = self._status_text(chunk)

    def _status_text(self, chunk: SpanChunk) -> str:
        t = chunk.now_us / 1e6
        text = f"live: {self.total:,} spans, t = {t:.1f} s"
        if self.skipped:
            text += f"; {self.skipped:,} not drawn (each poll draws a sample of at most its cap)"
        if self.sent > self.rollover:
            text += f"; the view keeps the last {self.rollover:,} of each kind"
        if chunk.stopped:
            text += " — recording stopped, building the full timeline…"
        return text

    def _lanes(self, threads: list[str]) -> np.ndarray:
        """The lane of each thread of the feed, lanes added (and the figure grown) for new names."""
        lanes = self.lanes
        before = len(lanes)
        out = np.empty(len(threads), dtype=np.int64)
        for i, name in enumerate(threads):
            out[i] = lanes.setdefault(name, len(lanes))
        if len(lanes) != before:
            p = self.figure
            k = len(lanes)
            p.yaxis.ticker.ticks = [j + 0.5 for j in range(k)]  # the same ticker: a new model costs a document walk
            p.yaxis.major_label_overrides = {j + 0.5: name for name, j in lanes.items()}
            p.y_range.start = k
            p.height = int(min(600, max(180, 70 + _LANE_PX * k)))
        return out

    def _name_codes(self, names: list[str]) -> np.ndarray:
        """A code per name; the names not seen before streamed to the names source first."""
        codes = self._codes
        new = [s for s in dict.fromkeys(names) if s not in codes]
        if new:
            for s in new:
                codes[s] = len(codes)
            self.names.stream({"name": new})
        return np.fromiter(map(codes.__getitem__, names), dtype=np.int32, count=len(names))

    def retire(self) -> None:
        """Close the children (their comms, the Bokeh document's data) but keep this box's own model.

        Once another widget has taken this one's place in the output (``update_display_data``),
        JupyterLab's widget renderer still holds this box's view and hides the whole output when
        that view's model closes (jupyterlab_widgets 3: ``WidgetRenderer.renderModel``), taking
        the full timeline with it. So only the children close; the empty box stays, a few bytes.
        """
        self.children = ()
        for w in self._parts:
            if w is self.bokeh:
                # As a plain widget: BokehModel's own ``close`` also unhooks it from the Bokeh
                # document, and raises if called twice, which its ``__del__`` does (jupyter_bokeh 4.1).
                W.DOMWidget.close(w)
            else:
                w.close()
        # The box stays registered with ipywidgets for good: it lets go of the figure and its data.
        del self.figure, self.bokeh, self.source, self.outer, self.names
        self._parts = []
