"""The inline timeline widget: the Bokeh timeline inside ipywidgets, with controls and live detail.

``opprof.timeline(trace)`` (:func:`opprof.jupyter.timeline`, which first makes sure BokehJS is in
the page) returns a :class:`TimelineWidget`: an ipywidgets ``VBox`` holding the
figure (through ``jupyter_bokeh.BokehModel``, the standard bridge, batched: :mod:`.bridge`) under a row of controls. It
needs a kernel to be interactive because its callbacks are Python: level-of-detail refinement
when the x range changes, filters and table selection all rebuild the drawn columns from the
:class:`~.layout.Layout` and let BokehModel send the change to the browser.

Where widgets cannot render (an untrusted or kernel-less notebook, nbconvert HTML, GitHub, a
terminal) its mimebundle also carries a still PNG of the timeline (:mod:`.picture`, tens of KB)
and a short text summary: not a second Bokeh document, which weighed 4-5 MB per output and needs
the very scripts those places do not run.
"""

from __future__ import annotations

import base64
import functools
import re
from collections.abc import Callable
from typing import Any

import ipywidgets as W
import numpy as np
from bokeh.events import RangesUpdate
from ipywidgets.widgets.widget_bool import ToggleButtonStyle

from ..trace import Trace
from ..trace.text import text_summary
from .figure import ROLE_LABELS, Timeline, build_timeline, save_html
from .layout import ROLE_NAMES

__all__ = ["TimelineWidget"]

#: Under the still picture: what it is, and how to get the real thing.
_STILL_NOTE = "A still picture: run the notebook (trusted, with its kernel) for the interactive timeline."


@functools.cache
def _malloc_trim() -> Callable[[int], Any] | None:
    """glibc's ``malloc_trim``, looked up once (``find_library`` runs ``ldconfig``: ~2 ms a call); None elsewhere."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


def _return_freed_memory() -> None:
    """Hand the heap's free pages back to the OS (glibc only; a no-op elsewhere).

    Building a timeline of 1M spans frees ~100 MB of temporaries that glibc keeps in its heap,
    so a kernel showing one weighed ~440 MB where ~340 MB were live; ``malloc_trim`` returns them
    in ~5 ms. The notebook's kernel lives for hours: the memory is better given back.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


class TimelineWidget(W.VBox):
    """Controls above a Bokeh timeline (see the module docstring); ``.save(path)`` writes HTML."""

    def __init__(self, trace: Trace, *, width: int = 1000, picture: bool = True, **options: Any) -> None:
        from .bridge import BatchedBokehModel

        self.trace = trace
        self.options = {"width": width, **options}
        self.with_picture = picture
        # The critical path waits for its toggle (seconds at 1M spans, not before the first paint).
        self.timeline: Timeline = build_timeline(trace, width=width, **{"critical_path": "lazy", **options})
        tl = self.timeline
        if tl.path_toggle is not None and tl.path is None:
            tl.path_toggle.on_change("active", self._on_path_toggle)
        self._names: tuple[np.ndarray, list[str]] | None = None
        self._png: bytes | None = None

        self.name_filter = W.Text(placeholder="filter names (substring)", description="name", layout=W.Layout(width="260px"))
        self.regex = W.Checkbox(value=False, description="regex", indent=False, layout=W.Layout(width="70px"))
        # Each widget's layout given as it is made: one replaced afterwards stays registered in the
        # kernel, reachable by no close() (6 Layouts per timeline were left so). Widgets that look
        # alike share one Layout and one style: a notebook saves every widget model with all its
        # defaults (a Layout is 1.1 KB), and an nbclient-executed notebook keeps them all.
        plain = W.Layout()
        toggle_layout, toggle_style = W.Layout(width="auto"), ToggleButtonStyle()
        self.role_toggles = {
            r: W.ToggleButton(
                value=True,
                description=ROLE_LABELS[r],
                tooltip=f"show {ROLE_LABELS[r]} spans",
                layout=toggle_layout,
                style=toggle_style,
            )
            for r in ROLE_NAMES
        }
        labels = [ln.label for ln in tl.layout.lanes]
        self.lanes = W.SelectMultiple(
            options=[(label, k) for k, label in enumerate(labels)],
            value=tuple(range(len(labels))),
            description="lanes",
            rows=min(6, max(2, len(labels))),
            layout=W.Layout(width="300px"),
        )
        self.status = W.Label(value="", layout=plain)  # Label shows text, never HTML
        for w in (self.name_filter, self.regex, self.lanes, *self.role_toggles.values()):
            w.observe(self._on_control, names="value")

        # One RangesUpdate per zoom, pan or reset, with both ends: listening to start and end, BokehJS
        # sent them as two messages, the second after the kernel went idle (two refinements, the
        # first of a half-old range).
        self.refinements = 0  # Timeline.refresh calls caused by range changes
        tl.figure.on_event(RangesUpdate, self._on_range)
        tl.table_source.selected.on_change("indices", self._on_table)
        # Not combine_events: it holds each message until the kernel reports idle, so a zoom's
        # x_range start, end and RangesUpdate went one round trip apart (~70-110 ms each here).
        # The kernel handles a range message in 0.2 ms, and RangesUpdate comes once per gesture.
        self.bokeh = BatchedBokehModel(tl.root, combine_events=False, layout=plain)
        controls = W.VBox(
            [
                W.HBox([self.name_filter, self.regex, self.lanes], layout=plain),
                W.HBox(list(self.role_toggles.values()), layout=plain),
                self.status,
            ],
            layout=plain,
        )
        super().__init__([controls, self.bokeh], layout=plain)
        self._update_status()
        _return_freed_memory()

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

    def redraw(self, force: bool = False, view: tuple[float, float] | None = None) -> bool:
        """Recompute the drawn rectangles for the x range ``view`` (default: the figure's), filters and
        level of detail; unless ``force``, only when the view left the computed window. Returns
        whether it did."""
        tl = self.timeline
        if view is None:
            xr = tl.figure.x_range
            view = float(xr.start), float(xr.end)
        x0, x1 = view
        if not force and not self._needs_refine(x0, x1):
            return False
        with self.bokeh.batched():  # one message to the browser, not one per column (see .bridge)
            tl.refresh(x0, x1, self.mask())
            self._reapply_table_selection()
        self._update_status()
        return True

    def _needs_refine(self, x0: float, x1: float) -> bool:
        """Idempotent: BokehJS reports the range on first render, and small pans stay in the window."""
        if (self.timeline.full_detail and self.timeline.states_full) or x1 <= x0:
            return False
        lo, hi = self.timeline.window
        v0, v1 = self.timeline.view  # a refinement pads it by half a view each side; the first view is the window
        computed_w = v1 - v0
        ratio = (x1 - x0) / computed_w if computed_w > 0 else 0.0
        return not (lo <= x0 and x1 <= hi and 0.6 <= ratio <= 1.6)

    def _on_range(self, event: RangesUpdate) -> None:
        """A zoom, pan or reset ended: refine once, from the event's own (x0, x1), which BokehJS sends
        together (the figure's x_range may still hold a half-updated pair)."""
        if event.x0 is None or event.x1 is None:
            return
        if self.redraw(view=(float(event.x0), float(event.x1))):
            self.refinements += 1

    def _on_path_toggle(self, attr: str, old: Any, new: Any) -> None:
        """The first time the path is shown: compute it and draw it (the browser shows the layer at once)."""
        tl = self.timeline
        if new and tl.path is None:
            summary = tl.path_summary
            if summary is not None:
                summary.text = "computing the critical path..."
            with self.bokeh.batched():
                tl.set_path(self.trace.critical_path())
                if self.mask() is not None:  # drawn for every span: redraw it under the filters
                    self.redraw(force=True)

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
    def close(self) -> None:
        """Close this widget and every widget inside it, so the kernel can free the timeline.

        ipywidgets' own ``close()`` closes only the box: the BokehModel inside stayed registered,
        holding the figure's document and with it the layout (~100 MB at 1M spans)."""
        stack: list[Any] = [*self.children, self.layout]
        while stack:
            child = stack.pop()
            stack.extend(getattr(child, "children", ()))
            stack.extend(w for w in (getattr(child, "layout", None), getattr(child, "style", None)) if isinstance(w, W.Widget))
            child.close()
        super().close()

    def save(self, path: str, **options: Any) -> None:
        """Write the whole trace (not the filtered view) as standalone, offline HTML."""
        save_html(self.trace, path, **{**self.options, **options})

    def picture(self) -> bytes:
        """The timeline as a still PNG (tens of KB), for wherever the widget cannot run."""
        if self._png is None:
            from .picture import timeline_png

            lines = text_summary(self.trace).splitlines()
            self._png = timeline_png(self.timeline.layout, lines[0], width=int(self.options["width"]), note=_STILL_NOTE)
        return self._png

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        bundle = super()._repr_mimebundle_(**kwargs) or {}
        bundle["text/plain"] = text_summary(self.trace)
        if self.with_picture:
            bundle["image/png"] = base64.b64encode(self.picture()).decode("ascii")
        return bundle
