"""``opprof.timeline(trace)``: the timeline widget, with BokehJS loaded into the page first."""

from __future__ import annotations

from typing import Any

from ..trace import Trace
from .bokehjs import load_bokehjs

__all__ = ["timeline"]


def timeline(trace: Trace, *, load_js: bool = True, **options: Any) -> Any:
    """The interactive timeline of ``trace`` (an :class:`opprof.view.TimelineWidget`).

    Options: ``width`` (px), ``height``, ``detail_limit`` (draw every span up to this many
    rectangles), ``backend`` ("canvas" or "webgl"), ``title``, ``picture`` (add a still PNG to the
    output for viewers without widgets; default True), ``critical_path`` (default "lazy": computed
    on the toggle's first use). In a kernel, BokehJS is loaded first (served by the Jupyter server,
    else inline, once per kernel; see :func:`~.bokehjs.load_bokehjs`) unless ``load_js=False``.
    """
    from ..view import TimelineWidget  # Bokeh and ipywidgets: imported when a timeline is asked for

    if load_js:
        load_bokehjs(once=True)
    return TimelineWidget(trace, **options)
