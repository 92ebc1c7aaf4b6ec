"""Every text opprof prints about a trace: MXNet-style tables, the custom-op split, summary lines.

Renderers are pure functions of traces (``Trace -> str``), shared by ``mx.profiler.dumps()``, the
``opprof`` command, the ``%%opprof`` magic and the widget's text fallback. They live in the trace
layer, not the view layer, because the profiler's ``dumps()`` (below the views) prints them too.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from .columns import SpanTable
from .model import Trace
from .records import CUSTOM_OP, Role
from .stats import StatRow, custom_op_summary, sort_rows, span_stats

__all__ = ["fmt_us", "mxnet_stats_json", "split_table", "stats_json", "stats_table", "summary_line", "text_summary"]


def _aggregate(traces: Sequence[Trace]) -> list[StatRow]:
    """Stats per (category, name) over several traces."""
    return span_stats(SpanTable.concat([t.table for t in traces]))


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.4f}"


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:5.1f}%" if whole else "    -"


def stats_table(traces: Sequence[Trace], sort_by: str = "total", ascending: bool = False, top: int | None = None) -> str:
    """MXNet's ``dumps()`` layout: one table per category, then the custom-op split.

    ``top`` keeps only the first ``top`` rows in the chosen order (over all categories).
    """
    rows = sort_rows(_aggregate(traces), sort_by, ascending)[:top]
    lines = ["Profile Statistics:", "\tNote that times are in milliseconds (ms).", ""]
    by_cat: dict[str, list[StatRow]] = defaultdict(list)
    for r in rows:
        by_cat[r.cat].append(r)
    width = max([len(r.name) for r in rows] + [30])
    cols = ("Total Count", "Time (ms)", "Min Time (ms)", "Max Time (ms)", "Avg Time (ms)")
    header = f"{'Name':<{width}}" + "".join(f"  {c:>13}" for c in cols)
    for cat, cat_rows in by_cat.items():
        lines += [cat, "=" * len(cat), header, "-" * len(header)]
        for r in cat_rows:
            values = (str(r.count), _ms(r.total_ns), _ms(r.min_ns), _ms(r.max_ns), _ms(r.avg_ns))
            lines.append(f"{r.name:<{width}}" + "".join(f"  {v:>13}" for v in values))
        lines.append("")
    split = custom_op_summary(row for t in traces for row in t.custom_ops())
    if split:
        w = max([len(s.name) for s in split] + [20])
        head = f"{'Custom operator':<{w}}  {'Calls':>6}  {'Wall (ms)':>11}  {'Python':>16}  {'Sub-ops':>16}  {'Waiting':>16}"
        lines += ["Custom operators: where the wall time went", "=" * 42, head, "-" * len(head)]
        for s in split:
            lines.append(
                f"{s.name:<{w}}  {s.calls:>6}  {_ms(s.wall_ns):>11}  "
                f"{_ms(s.python_ns):>9} {_pct(s.python_ns, s.wall_ns)}  "
                f"{_ms(s.subops_ns):>9} {_pct(s.subops_ns, s.wall_ns)}  "
                f"{_ms(s.waiting_ns):>9} {_pct(s.waiting_ns, s.wall_ns)}" + (f"  ({s.errors} failed)" if s.errors else "")
            )
        lines.append("")
    dropped = sum(int(t.metadata.get("dropped_events", 0) or 0) for t in traces)
    if dropped:
        lines.append(f"WARNING: {dropped} events were dropped at the event cap (max_events); totals are incomplete.")
    if not traces:
        lines.append("(no profiling run has finished: call set_state('run') then set_state('stop'))")
    return "\n".join(lines)


def stats_json(traces: Sequence[Trace], sort_by: str = "total", ascending: bool = False) -> str:
    rows = sort_rows(_aggregate(traces), sort_by, ascending)
    out: dict[str, Any] = {"Time": "ms", "categories": defaultdict(dict)}
    for r in rows:
        out["categories"][r.cat][r.name] = {
            "Total Count": r.count,
            "Total Time": r.total_ns / 1e6,
            "Min Time": r.min_ns / 1e6,
            "Max Time": r.max_ns / 1e6,
            "Avg Time": r.avg_ns / 1e6,
        }
    out["custom_ops"] = [
        {
            "name": s.name,
            "calls": s.calls,
            "wall_ms": s.wall_ns / 1e6,
            "python_ms": s.python_ns / 1e6,
            "subops_ms": s.subops_ns / 1e6,
            "waiting_ms": s.waiting_ns / 1e6,
            "errors": s.errors,
        }
        for s in custom_op_summary(row for t in traces for row in t.custom_ops())
    ]
    out["dropped_events"] = sum(int(t.metadata.get("dropped_events", 0) or 0) for t in traces)
    return json.dumps(out, indent=2)


#: MXNet's names for the categories it reports custom-op work under.
_MXNET_CATEGORY = {CUSTOM_OP: "Custom Operator"}


def mxnet_stats_json(traces: Sequence[Trace], sort_by: str = "total", ascending: bool = False) -> str:
    """MXNet's ``profiler.dumps(format='json')`` schema: times in ms per category and name, sorted.

    ``{"Time": {category: {name: {"Count", "Total", "Min", "Max", "Avg"}}}, "Memory": {...},
    "Unit": {"Time": "ms", "Memory": "kB"}}``; custom-op work is under ``"Custom Operator"``, as in
    MXNet. opprof records no memory, so ``"Memory"`` is empty.
    """
    by_cat: dict[str, list[StatRow]] = defaultdict(list)
    for r in _aggregate(traces):
        by_cat[_MXNET_CATEGORY.get(r.cat, r.cat)].append(r)
    time = {
        cat: {
            r.name: {
                "Count": r.count,
                "Total": r.total_ns / 1e6,
                "Min": r.min_ns / 1e6,
                "Max": r.max_ns / 1e6,
                "Avg": r.avg_ns / 1e6,
            }
            for r in sort_rows(rows, sort_by, ascending)
        }
        for cat, rows in by_cat.items()
    }
    return json.dumps({"Time": time, "Memory": {}, "Unit": {"Time": "ms", "Memory": "kB"}}, indent=4)


def fmt_us(us: float) -> str:
    """``1234.5`` -> ``"1.23 ms"``: three significant digits in the largest unit below the value."""
    a = abs(us)
    unit, scale = ("s", 1e6) if a >= 1e6 else ("ms", 1e3) if a >= 1e3 else ("µs", 1.0) if a >= 1 else ("ns", 1e-3)
    v = us / scale
    digits = 0 if v == 0 else max(0, min(6, 2 - math.floor(math.log10(abs(v)))))
    return f"{v:.{digits}f} {unit}"


def summary_line(trace: Trace, wall_s: float | None = None) -> str:
    """One line: wall time, spans, threads, custom-op calls and their overall split."""
    rows = trace.custom_ops()
    parts = []
    if wall_s is not None:
        parts.append(f"{wall_s * 1e3:.1f} ms wall")
    parts.append(f"{trace.n_spans} spans on {len(trace.threads)} threads")
    if rows:
        wall = sum(r.wall_ns for r in rows) or 1
        py = sum(r.python_ns for r in rows)
        sub = sum(r.subops_ns for r in rows)
        wait = sum(r.waiting_ns for r in rows)
        split = f"python {100 * py / wall:.0f}% / sub-ops {100 * sub / wall:.0f}% / waiting {100 * wait / wall:.0f}%"
        parts.append(f"{len(rows)} custom-op calls: {split}")
    dropped = trace.metadata.get("dropped_events", 0)
    if dropped:
        parts.append(f"{dropped} events dropped at the cap")
    return "opprof: " + ", ".join(parts)


def split_table(trace: Trace) -> str:
    """The per-custom-op-type split as a small text table."""
    split = custom_op_summary(trace.custom_ops())
    if not split:
        return "(no custom operators ran in this cell)"
    w = max(len(s.name) for s in split)
    lines = [f"{'custom op':<{w}}  calls   wall ms  python  sub-ops  waiting"]
    for s in split:
        wall = s.wall_ns or 1
        lines.append(
            f"{s.name:<{w}}  {s.calls:5d}  {s.wall_ns / 1e6:8.3f}  {100 * s.python_ns / wall:5.1f}%  "
            f"{100 * s.subops_ns / wall:6.1f}%  {100 * s.waiting_ns / wall:6.1f}%"
        )
    return "\n".join(lines)


def text_summary(trace: Trace) -> str:
    """A few lines about ``trace`` for front ends that show only text (where no widget renders)."""
    t = trace.table
    n_inv = int(np.count_nonzero(t.role_is(Role.PARENT)))
    if len(t):
        length = fmt_us((int(t.end.max()) - int(t.start.min())) / 1e3)
    else:
        length = "0 s"
    return (
        f"opprof timeline: {len(t):,} spans on {len(trace.threads)} threads over {length}, "
        f"{n_inv:,} custom-op invocations.\n"
        "Display it in JupyterLab or Notebook 7 for the interactive widget, or .save('timeline.html')."
    )
