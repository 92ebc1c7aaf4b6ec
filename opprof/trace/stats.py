"""Aggregate statistics: count, total, min and max duration per (category, name), and per op type.

The one stats implementation: ``Trace.stats()``, ``mx.profiler.dumps()``, ``opprof stats``, the
magic's tables and the widget's table all read it. It is vectorised (names factorised to codes,
then ``bincount`` and sorted ``reduceat``): a Python loop over 1M spans took 0.75 s.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from .records import CustomOpRow, Span

__all__ = ["SORT_KEYS", "OpTypeSplit", "StatRow", "custom_op_summary", "sort_rows", "span_stats"]

SORT_KEYS = ("total", "avg", "min", "max", "count")


@dataclass(frozen=True, slots=True)
class StatRow:
    name: str
    cat: str
    count: int
    total_ns: int
    min_ns: int
    max_ns: int

    @property
    def avg_ns(self) -> float:
        return self.total_ns / self.count if self.count else 0.0


def span_stats(spans: Sequence[Span]) -> list[StatRow]:
    """Stats per (category, name) of ``spans``, largest total first (then category, then name)."""
    n = len(spans)
    if not n:
        return []
    keys = list(zip(map(attrgetter("cat"), spans), map(attrgetter("name"), spans), strict=True))
    table = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    code = np.fromiter(map(table.__getitem__, keys), dtype=np.int64, count=n)
    dur = np.fromiter(map(attrgetter("end"), spans), np.int64, n) - np.fromiter(map(attrgetter("start"), spans), np.int64, n)
    k = len(table)
    count = np.bincount(code, minlength=k)
    total = np.zeros(k, dtype=np.int64)
    np.add.at(total, code, dur)  # exact integer sums (bincount's weights are float64)
    order = np.lexsort((dur, code))  # by key, then duration: each key's min first, max last
    firsts = np.searchsorted(code[order], np.arange(k))
    lasts = np.append(firsts[1:], n) - 1
    lo, hi = dur[order][firsts], dur[order][lasts]
    rows = [
        StatRow(name, cat, int(c), int(t), int(a), int(b))
        for (cat, name), c, t, a, b in zip(table, count.tolist(), total.tolist(), lo.tolist(), hi.tolist(), strict=True)
    ]
    rows.sort(key=lambda r: (-r.total_ns, r.cat, r.name))
    return rows


_SORT: dict[str, Callable[[StatRow], float]] = {
    "total": lambda r: r.total_ns,
    "avg": lambda r: r.avg_ns,
    "min": lambda r: r.min_ns,
    "max": lambda r: r.max_ns,
    "count": lambda r: r.count,
}


def sort_rows(rows: Iterable[StatRow], sort_by: str = "total", ascending: bool = False) -> list[StatRow]:
    """``rows`` in the order MXNet's ``dumps(sort_by=, ascending=)`` asks for."""
    if sort_by not in SORT_KEYS:
        raise ValueError(f"sort_by must be one of {', '.join(SORT_KEYS)}, got {sort_by!r}")
    key = _SORT[sort_by]
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
    """The invocations' splits summed per op type (forward and backward apart), largest wall first."""
    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0, 0])
    for r in rows:
        a = acc[r.name]
        a[0] += 1
        a[1] += r.wall_ns
        a[2] += r.python_ns
        a[3] += r.subops_ns
        a[4] += r.waiting_ns
        a[5] += r.error is not None
    out = [OpTypeSplit(name, *v) for name, v in acc.items()]
    out.sort(key=lambda s: -s.wall_ns)
    return out
