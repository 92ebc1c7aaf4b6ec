"""A trace's timeline as data a page embeds: its still picture, and its Bokeh document as a
``json_item`` for ``Bokeh.embed.embed_item`` (what opprof's Jupyter server extension answers a
saved notebook with; see :mod:`opprof.jupyter.saved`).

Why a document made on request and not saved with the notebook: a timeline widget's saved state
is ~105 KB of Bokeh models even for 20 custom ops (most of it boilerplate: glyph copies, views,
selections, tools), so a notebook of three profiled cells executed by nbclient weighed 409 KB. The
trace itself, compressed, is a few KB: the notebook keeps that and the server draws it again.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from ..trace import Trace, load
from ..trace.text import text_summary
from .figure import build_timeline
from .layout import build_layout
from .picture import timeline_png

__all__ = ["STILL_NOTE", "timeline_item", "timeline_picture", "trace_bytes", "trace_from_bytes"]

#: Under the still picture: what it is, and how to get the real thing.
STILL_NOTE = "A still picture: open the notebook trusted, in a Jupyter with opprof, for the interactive timeline."


def timeline_item(trace: Trace, *, width: int = 1000, **options: Any) -> dict[str, Any]:
    """The whole timeline (figure, overview, tables, the critical path computed) as a ``json_item``."""
    from bokeh.embed import json_item

    tl = build_timeline(trace, width=width, **{"critical_path": True, **options})
    return dict(json_item(tl.root))


def timeline_picture(trace: Trace, *, width: int = 1000, note: str = STILL_NOTE) -> bytes:
    """The still PNG of the timeline, as the widget's (tens of KB): no Bokeh document is built."""
    header = text_summary(trace).splitlines()[0]
    return timeline_png(build_layout(trace), header, width=width, note=note)


def trace_bytes(trace: Trace) -> bytes:
    """``trace`` as the bytes of a compressed ``.opprof`` file (lossless: the engine's edges and the
    GIL's thread states kept, so the server draws what the kernel would)."""
    fd, path = tempfile.mkstemp(suffix=".opprof")
    os.close(fd)
    try:
        trace.save(path, compress=True)
        with open(path, "rb") as f:
            return f.read()
    finally:
        os.remove(path)


def trace_from_bytes(data: bytes) -> Trace:
    """Read ``.opprof`` bytes with the file reader's checks (data only, bounded inflation): a
    malformed payload raises :class:`~opprof.trace.TraceFormatError`."""
    fd, path = tempfile.mkstemp(suffix=".opprof")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return load(path)
    finally:
        os.remove(path)
