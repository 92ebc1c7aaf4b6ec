"""Aggregate statistics: count, total, min and max duration per (category, name), and per op type.

The one stats implementation, vectorised (:func:`stat_columns`): ``Trace.stats()``,
``mx.profiler.dumps()``, ``opprof stats``, the magic's tables and the widget's table all read it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ..columns import SpanTable
from ..records import Span

__all__ = [
    "SORT_KEYS",
    "StatColumns",
    "StatRow",
    "sort_rows",
    "span_stats",
    "stat_columns",
]

SORT_KEYS = ("total", "avg", "min", "max", "count")


@dataclass(frozen=True, slots=True)
class StatRow:
    name: str
    cat: str
    count: int
    total_ns: int
    min_ns: int
    max_ns: int
    #: Bytes the outputs of these ops allocated, where memory was recorded (None where not).
    allocated_bytes: int | None = None

    @property
    def avg_ns(self) -> float:
        return self.total_ns / self.count if self.count else 0.0


@dataclass(frozen=True)
class StatColumns:
    """Aggregate stats as columns: entry ``i`` is one group, largest total first (then category, name)."""

    names: list[str]
    cats: list[str] | None  # None: grouped by name alone
    count: np.ndarray
    total: np.ndarray  # ns, exact (int64)
    min: np.ndarray
    max: np.ndarray

    def __len__(self) -> int:
        return len(self.names)

    def rows(self, limit: int | None = None) -> list[StatRow]:
        """The first ``limit`` groups (all: None) as rows; built on demand, a million groups cost."""
        k = len(self) if limit is None else min(limit, len(self))
        cats = self.cats or [""] * k
        return [
            StatRow(*v)
            for v in zip(
                self.names[:k], cats[:k], *(c[:k].tolist() for c in (self.count, self.total, self.min, self.max)), strict=True
            )
        ]


def stat_columns(spans: SpanTable | Sequence[Span], *, by_category: bool = True) -> StatColumns:
    """Count, total, min and max duration per (category, name), or per name, of ``spans``.

    The table's name and category codes are the groups already: one stable sort of the combined
    code and ``reduceat`` give every group at once, with exact integer totals.
    """
    t = spans if isinstance(spans, SpanTable) else SpanTable.from_spans(spans)
    n = len(t)
    if not n:
        empty = np.zeros(0, dtype=np.int64)
        return StatColumns([], [] if by_category else None, empty, empty, empty, empty)
    # Codes of strings no span uses as a name (categories, op types) make empty groups: compact
    # them so that ranks and keys stay small.
    name_code, names_i = _compact(t.name)
    names = [t.strings[i] for i in names_i.tolist()]
    key = name_code
    cats: list[str] = []
    if by_category:
        cat_code, cats_i = _compact(t.cat)
        cats = [t.strings[i] for i in cats_i.tolist()]
        key = cat_code * max(1, len(names)) + name_code
    dur = t.end - t.start
    n_keys = max(1, len(names)) * max(1, len(cats) if by_category else 1)
    if n_keys <= 4 * n + (1 << 16):
        # Dense groups: reductions by group with no sort (a stable argsort of 10M keys took 1.7 s);
        # int64 ``ufunc.at`` keeps the totals exact.
        count_all = np.bincount(key, minlength=n_keys)
        used = np.flatnonzero(count_all)
        total_all = np.zeros(n_keys, dtype=np.int64)
        np.add.at(total_all, key, dur)
        lo_all = np.full(n_keys, np.iinfo(np.int64).max)
        np.minimum.at(lo_all, key, dur)
        hi_all = np.full(n_keys, np.iinfo(np.int64).min)
        np.maximum.at(hi_all, key, dur)
        count, total, lo, hi, group = count_all[used], total_all[used], lo_all[used], hi_all[used], used
        return _finish(names, cats, by_category, group, count, total, lo, hi)
    order = np.argsort(key, kind="stable")
    key, dur = key[order], dur[order]
    firsts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
    count = np.diff(np.append(firsts, n))
    total = np.add.reduceat(dur, firsts)
    lo = np.minimum.reduceat(dur, firsts)
    hi = np.maximum.reduceat(dur, firsts)
    group = key[firsts]
    return _finish(names, cats, by_category, group, count, total, lo, hi)


def _finish(
    names: list[str],
    cats: list[str],
    by_category: bool,
    group: np.ndarray,
    count: np.ndarray,
    total: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
) -> StatColumns:
    """The groups in their order: largest total first, then category and name as strings."""
    g_name = group % max(1, len(names))
    g_cat = group // max(1, len(names))
    by = np.argsort(-total, kind="stable")
    t = total[by]
    tied = np.zeros(len(t), dtype=bool)
    tied[1:] = t[1:] == t[:-1]
    tied[:-1] |= tied[1:]
    k = int(np.count_nonzero(tied))
    if k > 1000:
        # Many ties (a trace of many one-off names): rank the tied groups' strings in C.
        sub = by[tied]
        name_rank = _rank([names[i] for i in g_name[sub].tolist()])
        cat_rank = _rank([cats[i] for i in g_cat[sub].tolist()]) if by_category else np.zeros(k, dtype=np.int64)
        by[tied] = sub[np.lexsort((name_rank, cat_rank, -total[sub]))]
    elif k:
        # Ties in total go by category, then name, as strings: sorted only where totals tie.
        run_start = np.flatnonzero(np.concatenate(([True], t[1:] != t[:-1])))
        run_end = np.append(run_start[1:], len(t))
        long = run_end - run_start > 1
        for a, b in zip(run_start[long].tolist(), run_end[long].tolist(), strict=True):
            seg = by[a:b].tolist()
            seg.sort(key=lambda i: ((cats[g_cat[i]] if by_category else ""), names[g_name[i]]))
            by[a:b] = seg
    g_name, g_cat = g_name[by].tolist(), g_cat[by].tolist()
    return StatColumns(
        [names[i] for i in g_name],
        [cats[i] for i in g_cat] if by_category else None,
        count[by],
        total[by],
        lo[by],
        hi[by],
    )


def _compact(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dense codes 0..k-1, the original code of each): groups only for strings in use. Codes are
    small (a string table's), so a count per code finds them with no sort."""
    if not len(codes):
        return codes.astype(np.int64), codes.astype(np.int64)
    used = np.flatnonzero(np.bincount(codes))
    dense = np.full(int(codes.max()) + 1, -1, dtype=np.int64)
    dense[used] = np.arange(len(used))
    return dense[codes], used


def span_stats(spans: SpanTable | Sequence[Span]) -> list[StatRow]:
    """Stats per (category, name) of ``spans`` as rows, largest total first (then category, name)."""
    return stat_columns(spans).rows()


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


def _rank(values: list[str]) -> np.ndarray:
    """Each string's rank among the distinct ``values`` (equal strings, equal ranks)."""
    if not values:
        return np.zeros(0, dtype=np.int64)
    _, rank = np.unique(np.array(values, dtype=object), return_inverse=True)
    return rank.ravel().astype(np.int64)
