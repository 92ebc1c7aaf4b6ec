"""The comparison of two sets of runs as a differential bar chart: one bar per row, its change.

Each row of :func:`opprof.trace.compare.compare` (end to end first, then by how much of its change
they explain) becomes a horizontal bar from 0 to its change in percent, (B/A - 1) x 100, with
its 95 % interval as a whisker, coloured by verdict: green *faster*, red *slower*, grey *no clear
change*. A bar whose whisker crosses 0 is grey by construction: the colour never claims what the
interval does not support. Hover gives both medians, the ratio, the interval and the share of
the end-to-end change.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from bokeh.models import ColumnDataSource, HoverTool
from bokeh.plotting import figure

from ..trace.compare import Comparison, Verdict
from ..trace.text import fmt_us

__all__ = ["VERDICT_COLORS", "diff_figure"]

VERDICT_COLORS = {
    Verdict.FASTER: "#2ca02c",
    Verdict.SLOWER: "#d62728",
    Verdict.NO_CLEAR_CHANGE: "#9a9a9a",
    Verdict.UNSTABLE: "#e8a33d",  # declined: a change within the blocks' own drift
}
_ROW_PX = 22


def diff_figure(comparison: Comparison, *, top: int = 15, width: int = 900, title: str | None = None) -> Any:
    """The bar chart of ``comparison``'s first ``top`` rows with a ratio (added/removed rows have none)."""
    c = comparison
    rows = [r for r in c.rows if r.verdict in VERDICT_COLORS and not math.isnan(r.ratio)][:top]
    labels = [r.key.label() for r in rows]
    pct = np.array([100 * (r.ratio - 1) for r in rows])
    low = np.array([100 * (r.low - 1) if not math.isnan(r.low) else 100 * (r.ratio - 1) for r in rows])
    high = np.array([100 * (r.high - 1) if not math.isnan(r.high) else 100 * (r.ratio - 1) for r in rows])
    source = ColumnDataSource(
        {
            "row": labels,
            "pct": pct,
            "zero": np.zeros(len(rows)),
            "low": low,
            "high": high,
            "color": [VERDICT_COLORS[r.verdict] for r in rows],
            "verdict": [r.verdict.value for r in rows],
            "a": [fmt_us(r.median_a / 1e3) for r in rows],
            "b": [fmt_us(r.median_b / 1e3) for r in rows],
            "interval": [f"{r.low:.3f} - {r.high:.3f}" if not math.isnan(r.low) else "none (one run a side)" for r in rows],
            "of": [r.estimate.value for r in rows],
            "share": [f"{100 * r.share:+.0f} %" if r.share else "" for r in rows],
        },
        name="diff_rows",
    )
    span = max(5.0, float(np.nanmax(np.abs(np.concatenate([low, high, pct])))) * 1.15) if len(rows) else 5.0
    p = figure(
        title=title or f"{c.label_b} against {c.label_a}: change per row, with its 95 % interval",
        y_range=list(reversed(labels)) or ["(no rows)"],
        x_range=(-span, span),
        width=width,
        height=60 + _ROW_PX * max(1, len(rows)),
        x_axis_label=f"change in % ({c.label_b} / {c.label_a} - 1)",
        toolbar_location=None,
        tools="",
    )
    bars = p.hbar(y="row", left="zero", right="pct", height=0.6, color="color", source=source, name="diff_bars")
    p.segment(x0="low", y0="row", x1="high", y1="row", line_color="black", line_width=1.5, source=source, name="diff_whiskers")
    p.add_tools(
        HoverTool(
            renderers=[bars],
            tooltips=[
                ("row", "@row"),
                (c.label_a, "@a"),
                (c.label_b, "@b"),
                ("change", "@pct{+0.0} %"),
                ("95 % interval of B/A", "@interval"),
                ("B/A of the", "@of"),
                ("verdict", "@verdict"),
                ("of the end-to-end change", "@share"),
            ],
        )
    )
    p.ygrid.grid_line_color = None
    return p
