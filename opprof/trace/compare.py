"""Did a change make it faster? Two sets of runs compared row by row, with confidence intervals.

On a shared machine one run differs from the next by 20-50 %, so a single pair of traces cannot
say whether a 10 % change is real. :func:`compare` takes several runs per side and, for each
**row** of the program's structure, gives both medians, the ratio B/A and its 95 % confidence
interval; its verdict is *faster* or *slower* only when the whole interval says so, else *no
clear change*.

Rows are matched by structure, not by parsing names back: a :class:`RowKey` is the end-to-end
time, a custom op type's part (forward and backward apart; wall, Python on and off CPU, sub-ops,
waiting and each waiting cause) or the total time of a regular span name in its category. A row
present on one side only is *added* or *removed*.

The interval: Welch's t interval on the logarithms of the run times, so the ratio is that of the
geometric means and the noise may be multiplicative and differ between the sides. Tried first, a
percentile bootstrap of the ratio of medians (a median of 5 runs wastes most of them) found a
30 % change under 10 % noise in only 85 % of seeded draws (170 of 200), where Welch on the logs
finds it in 93 % (185 of the same 200); on no-change draws under 30 % noise both stay near the
nominal 5 % of false verdicts (bootstrap 13, Welch 17 of 400). A row with a zero in some run (a
waiting cause that did not occur) has no logarithm: its interval is Welch's on the times
themselves, divided by A's mean.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

import numpy as np

from .columns import NO_ROLE
from .model import Trace
from .stats import custom_op_summary

__all__ = [
    "CONFIDENCE", "Comparison", "RowKey", "RowKind", "RowResult", "Verdict",
    "compare", "ratio_interval", "run_rows", "verdict_of",
]

CONFIDENCE = 0.95


class RowKind(str, Enum):
    END_TO_END = "end to end"
    CUSTOM_OP = "custom op"
    SPAN = "span"  # a regular span name (engine op, wait, user task) in its category


class Verdict(str, Enum):
    FASTER = "faster"
    SLOWER = "slower"
    NO_CLEAR_CHANGE = "no clear change"
    ADDED = "added"  # in B only
    REMOVED = "removed"  # in A only


@dataclass(frozen=True, order=True)
class RowKey:
    """What a row measures: ``kind``, ``name`` (op type or span name) and ``part`` (a custom op's
    part, a span's category; empty for end to end)."""

    kind: RowKind
    name: str = ""
    part: str = ""

    def label(self) -> str:
        if self.kind is RowKind.END_TO_END:
            return "end to end"
        return f"{self.name} · {self.part}" if self.part else self.name


def run_rows(trace: Trace) -> dict[RowKey, float]:
    """One run's rows, in ns: end to end, every custom op type's parts summed over its calls, and
    every regular span name's total (spans outside custom ops, by category and name)."""
    t = trace.table
    rows: dict[RowKey, float] = {}
    if not len(t):
        return rows
    rows[RowKey(RowKind.END_TO_END)] = float(t.length_ns)
    sums: dict[RowKey, float] = defaultdict(float)
    for op in custom_op_summary(trace.custom_ops()):  # the split table's sums, so both read alike
        parts = {"wall": op.wall_ns, "sub-ops": op.subops_ns, "waiting": op.waiting_ns}
        if op.python_cpu_ns is not None:
            parts["python on CPU"] = min(op.python_cpu_ns, op.python_ns)
            parts["python off CPU"] = op.python_ns - parts["python on CPU"]
        else:  # another tool's trace: no thread CPU time
            parts["python (CPU not measured)"] = op.python_ns
        for cause, ns in op.waiting_by_cause.items():
            parts[f"waiting: {cause}"] = ns
        for part, ns in parts.items():
            sums[RowKey(RowKind.CUSTOM_OP, op.name, part)] = ns
    plain = np.flatnonzero(t.role == NO_ROLE)
    if len(plain):
        key = t.cat[plain].astype(np.int64) * (len(t.strings) + 1) + t.name[plain]
        used, group = np.unique(key, return_inverse=True)
        totals = np.bincount(group.ravel(), weights=(t.end[plain] - t.start[plain]).astype(np.float64))
        for k, total in zip(used.tolist(), totals.tolist(), strict=True):
            cat, name = divmod(k, len(t.strings) + 1)
            sums[RowKey(RowKind.SPAN, t.strings[name], t.strings[cat])] += total
    rows.update(sums)
    return rows


@dataclass(frozen=True)
class RowResult:
    """One row of a comparison (times in ns; ``ratio`` is B/A of the medians)."""

    key: RowKey
    a: np.ndarray  # per run (0 where a run of that side lacks the row but the side has it)
    b: np.ndarray
    median_a: float
    median_b: float
    ratio: float  # of the geometric means where there is an interval, else of the medians; nan when A's is 0
    low: float  # 95 % interval of the ratio; nan without one (N < 2, or added/removed)
    high: float
    verdict: Verdict
    share: float = 0.0  # of the end-to-end change (median B - median A), signed

    @property
    def delta(self) -> float:
        return self.median_b - self.median_a


@dataclass
class Comparison:
    """Rows sorted by how much of the end-to-end change they explain (end to end first)."""

    rows: list[RowResult]
    runs_a: int
    runs_b: int
    label_a: str = "A"
    label_b: str = "B"
    notes: list[str] = field(default_factory=list)

    def row(self, key: RowKey) -> RowResult:
        for r in self.rows:
            if r.key == key:
                return r
        raise KeyError(key)

    @property
    def end_to_end(self) -> RowResult | None:
        return next((r for r in self.rows if r.key.kind is RowKind.END_TO_END), None)

    def slower_than(self, percent: float) -> bool:
        """Whether end to end is *slower* (its interval above 1) by more than ``percent`` % (for CI gates)."""
        e = self.end_to_end
        return e is not None and e.verdict is Verdict.SLOWER and e.ratio > 1 + percent / 100


def _t_quantile(p: float, df: float) -> float:
    """Student's t quantile (``p`` > 0.5) by bisection on its CDF, itself Simpson's rule on the
    density: NumPy has no t distribution, and a dependency for one number is not worth it."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def cdf(x: float) -> float:
        xs = np.linspace(0.0, x, 401)
        ys = c * (1 + xs * xs / df) ** (-(df + 1) / 2)
        h = x / 400
        return 0.5 + h / 3 * float(ys[0] + ys[-1] + 4 * ys[1:-1:2].sum() + 2 * ys[2:-1:2].sum())

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def _welch(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Mean(y) - mean(x) and the half-width of its 95 % Welch interval."""
    vx, vy = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    se2 = vx + vy
    diff = float(y.mean() - x.mean())
    if se2 == 0:
        return diff, 0.0
    df = se2 * se2 / (vx * vx / (len(x) - 1) + vy * vy / (len(y) - 1))
    return diff, _t_quantile(0.5 + CONFIDENCE / 2, df) * math.sqrt(se2)


def ratio_interval(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """(ratio, low, high): B/A as the ratio of geometric means with its 95 % interval (see the
    module docstring); nan without one (fewer than two runs on a side, or A's times all zero)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if min(len(a), len(b)) < 2:
        return float("nan"), float("nan"), float("nan")
    if (a > 0).all() and (b > 0).all():
        diff, half = _welch(np.log(a), np.log(b))
        return math.exp(diff), math.exp(diff - half), math.exp(diff + half)
    base = float(a.mean())
    if base <= 0:
        return float("nan"), float("nan"), float("nan")
    diff, half = _welch(a, b)
    return 1 + diff / base, max(0.0, 1 + (diff - half) / base), 1 + (diff + half) / base


def verdict_of(low: float, high: float) -> Verdict:
    """*faster* only when the whole interval of B/A is below 1, *slower* only when above; else no clear change."""
    if high < 1:
        return Verdict.FASTER
    if low > 1:
        return Verdict.SLOWER
    return Verdict.NO_CLEAR_CHANGE


def _runs(side: Any) -> list[Trace]:
    """A side of a comparison: a trace, a sequence of traces, or a result holding ``runs`` (``%%opprof``'s)."""
    if isinstance(side, Trace):
        return [side]
    runs = getattr(side, "runs", side)
    out = list(runs)
    bad = [type(r).__name__ for r in out if not isinstance(r, Trace)]
    if bad:
        raise TypeError(f"compare() takes traces, sequences of them or %%opprof results; got {', '.join(sorted(set(bad)))}")
    return out


def compare(
    a: Trace | Sequence[Trace] | Any,
    b: Trace | Sequence[Trace] | Any,
    *,
    label_a: str = "A",
    label_b: str = "B",
) -> Comparison:
    """Compare runs ``a`` with runs ``b``: each a trace, a sequence of traces of the same program,
    or a ``%%opprof --repeat`` result (its ``runs``)."""
    a, b = _runs(a), _runs(b)
    if not len(a) or not len(b):
        raise ValueError(f"compare() needs at least one run per side, got {len(a)} and {len(b)}")
    rows_a = [run_rows(t) for t in a]
    rows_b = [run_rows(t) for t in b]
    keys_a = set().union(*rows_a)
    keys_b = set().union(*rows_b)
    notes: list[str] = []
    if min(len(a), len(b)) < 2:
        notes.append(
            f"{min(len(a), len(b))} run on one side: ratios without intervals, so no verdicts "
            "(run each side at least twice; five runs find a 10 % change on this kind of machine)"
        )
    only_a = {k.name for k in keys_a - keys_b if k.kind is not RowKind.END_TO_END}
    only_b = {k.name for k in keys_b - keys_a if k.kind is not RowKind.END_TO_END}
    if only_a or only_b:
        notes.append(
            "the runs differ in what they ran: "
            + "; ".join(
                s
                for s in (
                    f"only in {label_a}: {', '.join(sorted(only_a))}" if only_a else "",
                    f"only in {label_b}: {', '.join(sorted(only_b))}" if only_b else "",
                )
                if s
            )
            + " (compared: what both ran)"
        )
    results: list[RowResult] = []
    for key in sorted(keys_a | keys_b):
        va = np.array([r.get(key, 0.0) for r in rows_a])
        vb = np.array([r.get(key, 0.0) for r in rows_b])
        ma, mb = float(np.median(va)), float(np.median(vb))
        if key not in keys_b or key not in keys_a:
            verdict = Verdict.REMOVED if key not in keys_b else Verdict.ADDED
            results.append(RowResult(key, va, vb, ma, mb, float("nan"), float("nan"), float("nan"), verdict))
            continue
        ratio, lo, hi = ratio_interval(va, vb)
        if math.isnan(ratio):  # no interval: the plain ratio of medians, and no verdict
            ratio = mb / ma if ma > 0 else float("nan")
            verdict = Verdict.NO_CLEAR_CHANGE
        else:
            verdict = verdict_of(lo, hi)
        results.append(RowResult(key, va, vb, ma, mb, ratio, lo, hi, verdict))
    e2e = next((r for r in results if r.key.kind is RowKind.END_TO_END), None)
    total = e2e.delta if e2e is not None else 0.0
    shares = [replace(r, share=(r.delta / total) if total else 0.0) if r is not e2e else r for r in results]
    shares.sort(key=lambda r: (r.key.kind is not RowKind.END_TO_END, -abs(r.delta), r.key))
    return Comparison(shares, len(a), len(b), label_a, label_b, notes)
