"""The inline timeline widget: the Bokeh timeline inside ipywidgets, with controls and live detail.

``opprof.timeline(trace)`` (:func:`opprof.jupyter.timeline`, which first makes sure BokehJS is in
the page) returns a :class:`TimelineWidget`: an ipywidgets ``VBox`` holding the
figure (through ``jupyter_bokeh.BokehModel``, the standard bridge) under a row of controls. It
needs a kernel to be interactive because its callbacks are Python: level-of-detail refinement
when the x range changes, filters and table selection all rebuild the drawn columns from the
:class:`~.layout.Layout` and let BokehModel send the change to the browser.

Where widgets cannot render (nbconvert HTML, a terminal, GitHub) its mimebundle also carries a
static HTML timeline and a short text summary.
"""

from __future__ import annotations

import re
from typing import Any

import ipywidgets as W
import numpy as np

from ..trace import Trace
from ..trace.text import text_summary
from .figure import ROLE_LABELS, Timeline, build_timeline, save_html
from .layout import ROLE_NAMES

__all__ = ["TimelineWidget"]


class TimelineWidget(W.VBox):
    """Controls above a Bokeh timeline (see the module docstring); ``.save(path)`` writes HTML."""

    def __init__(self, trace: Trace, *, width: int = 1000, static_html: bool = True, **options: Any) -> None:
        from jupyter_bokeh import BokehModel

        self.trace = trace
        self.options = {"width": width, **options}
        self.with_static_html = static_html
        self.timeline: Timeline = build_timeline(trace, width=width, **options)
        tl = self.timeline
        self._names: tuple[np.ndarray, list[str]] | None = None
        self._html: str | None = None

        self.name_filter = W.Text(placeholder="filter names (substring)", description="name", layout=W.Layout(width="260px"))
        self.regex = W.Checkbox(value=False, description="regex", indent=False, layout=W.Layout(width="70px"))
        self.role_toggles = {
            r: W.ToggleButton(value=True, description=ROLE_LABELS[r], tooltip=f"show {ROLE_LABELS[r]} spans") for r in ROLE_NAMES
        }
        for b in self.role_toggles.values():
            b.layout = W.Layout(width="auto")
        labels = [ln.label for ln in tl.layout.lanes]
        self.lanes = W.SelectMultiple(
            options=[(label, k) for k, label in enumerate(labels)],
            value=tuple(range(len(labels))),
            description="lanes",
            rows=min(6, max(2, len(labels))),
            layout=W.Layout(width="300px"),
        )
        self.status = W.Label(value="")  # Label shows text, never HTML
        for w in (self.name_filter, self.regex, self.lanes, *self.role_toggles.values()):
            w.observe(self._on_control, names="value")

        tl.figure.x_range.on_change("start", self._on_range)
        tl.figure.x_range.on_change("end", self._on_range)
        tl.table_source.selected.on_change("indices", self._on_table)
        self.bokeh = BokehModel(tl.root, combine_events=True)
        controls = W.VBox(
            [W.HBox([self.name_filter, self.regex, self.lanes]), W.HBox(list(self.role_toggles.values())), self.status]
        )
        super().__init__([controls, self.bokeh])
        self._update_status()

    # ------------------------------------------------------------------ controls
    def mask(self) -> np.ndarray | None:
        """Which layout items the controls let through (None: all)."""
        lay = self.timeline.layout
        keep = np.ones(len(lay), dtype=bool)
        off = [ROLE_NAMES.index(r) for r, b in self.role_toggles.items() if not b.value]
        if off:
            keep &= ~np.isin(lay.role, off)
        if len(self.lanes.value) != len(self.lanes.options):
            keep &= np.isin(lay.lane, list(self.lanes.value))
        text = self.name_filter.value
        if text:
            codes, names = self._name_codes()
            if self.regex.value:
                try:
                    pattern = re.compile(text)
                except re.error as e:
                    self.status.value = f"bad regex: {e}"
                    return keep
                hit = np.fromiter((pattern.search(n) is not None for n in names), dtype=bool, count=len(names))
            else:
                hit = np.fromiter((text in n for n in names), dtype=bool, count=len(names))
            keep &= hit[codes[lay.span_index]]
        return None if keep.all() else keep

    def _name_codes(self) -> tuple[np.ndarray, list[str]]:
        """Every span's name as a code into the trace's strings (the table's own codes: no work)."""
        if self._names is None:
            t = self.trace.table
            self._names = t.name, list(t.strings)
        return self._names

    def _on_control(self, change: Any = None) -> None:
        self.status.value = ""
        self.redraw(force=True)

    def redraw(self, force: bool = False) -> None:
        """Recompute the drawn rectangles for the current x range, filters and level of detail."""
        tl = self.timeline
        xr = tl.figure.x_range
        x0, x1 = float(xr.start), float(xr.end)
        if not force and not self._needs_refine(x0, x1):
            return
        tl.refresh(x0, x1, self.mask())
        self._reapply_table_selection()
        self._update_status()

    def _needs_refine(self, x0: float, x1: float) -> bool:
        """Idempotent: BokehJS echoes the range on first render, and small pans stay in the window."""
        if self.timeline.full_detail or x1 <= x0:
            return False
        lo, hi = self.timeline.window
        computed_w = (hi - lo) / 2  # the window is the view padded by half a view on each side
        ratio = (x1 - x0) / computed_w if computed_w > 0 else 0.0
        return not (lo <= x0 and x1 <= hi and 0.6 <= ratio <= 1.6)

    def _on_range(self, attr: str, old: Any, new: Any) -> None:
        self.redraw()

    def _on_table(self, attr: str, old: Any, new: Any) -> None:
        self._reapply_table_selection()

    def _reapply_table_selection(self) -> None:
        """Select the drawn spans whose names are selected in the stats table (also after a redraw)."""
        tl = self.timeline
        picked = tl.table_source.selected.indices
        if not picked:
            return
        wanted = {tl.table_source.data["name"][i] for i in picked}
        lookup = tl.names.data["name"]
        hit = np.fromiter((n in wanted for n in lookup), dtype=bool, count=len(lookup))
        codes = np.asarray(tl.source.data["name"])
        counts = np.asarray(tl.source.data["count"])
        tl.source.selected.indices = np.nonzero(hit[codes] & (counts == 1))[0].tolist()

    def _update_status(self) -> None:
        tl = self.timeline
        drawn = len(tl.source.data["left"])
        msg = f"{drawn:,} rectangles"
        if tl.merged:
            msg += f", {tl.merged:,} spans merged into pale blocks: zoom in to see them one by one"
        if not self.status.value.startswith("bad regex"):
            self.status.value = msg

    # ------------------------------------------------------------------ output
    def save(self, path: str, **options: Any) -> None:
        """Write the whole trace (not the filtered view) as standalone, offline HTML."""
        save_html(self.trace, path, **{**self.options, **options})

    def static_html(self) -> str:
        """The timeline as an HTML fragment with BokehJS inline, for front ends without widgets."""
        if self._html is None:
            from bokeh.embed import components
            from bokeh.resources import INLINE

            options = dict(self.options)
            if self.timeline.path is not None:
                options["critical_path"] = self.timeline.path  # computed once (seconds at 1M spans), not again
            fresh = build_timeline(self.trace, **options)  # its own document, unshared with the widget
            script, div = components(fresh.root)
            self._html = INLINE.render() + script + div
        return self._html

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        bundle = super()._repr_mimebundle_(**kwargs) or {}
        bundle["text/plain"] = text_summary(self.trace)
        if self.with_static_html:
            bundle["text/html"] = self.static_html()
        return bundle
