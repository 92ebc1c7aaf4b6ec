"""Text and JSON reports of traces: MXNet-style aggregate tables and the custom-op time split."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .trace import CustomOpRow, StatRow, Trace

__all__ = ["aggregate", "custom_op_summary", "stats_table", "stats_json", "SORT_KEYS", "OpTypeSplit"]

SORT_KEYS = ("total", "avg", "min", "max", "count")


def aggregate(traces: Iterable[Trace]) -> list[StatRow]:
    """Stats per (category, name) over several traces."""
    acc: dict[tuple[str, str], list[int]] = {}
    for t in traces:
        for r in t.stats():
            cur = acc.get((r.cat, r.name))
            if cur is None:
                acc[(r.cat, r.name)] = [r.count, r.total_ns, r.min_ns, r.max_ns]
            else:
                cur[0] += r.count
                cur[1] += r.total_ns
                cur[2] = min(cur[2], r.min_ns)
                cur[3] = max(cur[3], r.max_ns)
    return [StatRow(name, cat, *v) for (cat, name), v in acc.items()]


def _sort(rows: list[StatRow], sort_by: str, ascending: bool) -> list[StatRow]:
    if sort_by not in SORT_KEYS:
        raise ValueError(f"sort_by must be one of {', '.join(SORT_KEYS)}, got {sort_by!r}")
    key = {
        "total": lambda r: r.total_ns,
        "avg": lambda r: r.avg_ns,
        "min": lambda r: r.min_ns,
        "max": lambda r: r.max_ns,
        "count": lambda r: r.count,
    }[sort_by]
    return sorted(rows, key=lambda r: (key(r), r.name), reverse=not ascending)


@dataclass(frozen=True, slots=True)
class OpTypeSplit:
    """Where the wall time of one custom-op type (forward or backward) went, over all its calls."""

    name: str
    calls: int
    wall_ns: int
    python_ns: int
    subops_ns: int
    waiting_ns: int
    errors: int


def custom_op_summary(rows: Iterable[CustomOpRow]) -> list[OpTypeSplit]:
    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0, 0])
    for r in rows:
        a = acc[f"_backward_{r.op_type}" if r.backward else r.op_type]
        a[0] += 1
        a[1] += r.wall_ns
        a[2] += r.python_ns
        a[3] += r.subops_ns
        a[4] += r.waiting_ns
        a[5] += r.error is not None
    out = [OpTypeSplit(name, *v) for name, v in acc.items()]
    out.sort(key=lambda s: -s.wall_ns)
    return out


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.4f}"


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:5.1f}%" if whole else "    -"


def stats_table(traces: Sequence[Trace], sort_by: str = "total", ascending: bool = False, top: int | None = None) -> str:
    """MXNet's ``dumps()`` layout: one table per category, then the custom-op split.

    ``top`` keeps only the first ``top`` rows in the chosen order (over all categories).
    """
    rows = _sort(aggregate(traces), sort_by, ascending)[:top]
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
    rows = _sort(aggregate(traces), sort_by, ascending)
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
