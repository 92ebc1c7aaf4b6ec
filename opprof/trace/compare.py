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

Invocations are paired by their order within their op type: where every run on both sides made
the same number of calls of a type (the same program), :meth:`Comparison.calls` compares the k-th
call of A's runs with the k-th call of B's, so a change confined to one call (the first, which
warms a cache; the last, which copies out) is seen where the type's sum dilutes it.

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

from .analysis.causes import QUEUE_PARTS
from .analysis.critical import APPROXIMATE_PATH
from .columns import NO_ROLE
from .combine import Combiner
from .records import CustomOpRow
from .trace import Trace

__all__ = [
    "CONFIDENCE",
    "Comparison",
    "RowKey",
    "RowKind",
    "RowResult",
    "Verdict",
    "CallResult",
    "compare",
    "ratio_interval",
    "run_rows",
    "side_by_side",
    "typical_run",
    "verdict_of",
]

#: The parts of one call that :meth:`Comparison.calls` pairs (ns, from :class:`CustomOpRow`).
CALL_PARTS = ("wall", "python", "sub-ops", "waiting")

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


#: Each queued cause's part (split off where the GIL was sampled) -> the cause it is part of.
_QUEUE_BASE = {part: base for base, parts in QUEUE_PARTS.items() for part in parts}


def run_rows(trace: Trace, *, fold_gil: bool = False) -> dict[RowKey, float]:
    """One run's rows, in ns: end to end, every custom op type's parts summed over its calls (the
    split table's sums: :attr:`~opprof.trace.analysis.Analysis.op_types`), and every regular span
    name's total (spans outside custom ops, by category and name). ``fold_gil``: the queued causes'
    GIL and hand-off parts (:data:`~opprof.trace.analysis.causes.QUEUE_PARTS`) added back to their
    cause, as a run without the GIL's evidence has them."""
    t = trace.table
    rows: dict[RowKey, float] = {}
    if not len(t):
        return rows
    rows[RowKey(RowKind.END_TO_END)] = float(t.length_ns)
    sums: dict[RowKey, float] = defaultdict(float)
    for op in trace.analysis().op_types.rows():
        parts: dict[str, float] = {"wall": op.wall_ns, "sub-ops": op.subops_ns, "waiting": op.waiting_ns}
        if op.python_cpu_ns is not None and op.python_off_cpu_ns is not None:
            parts["python on CPU"] = op.python_cpu_ns
            parts["python off CPU"] = op.python_off_cpu_ns
        else:  # another tool's trace: no thread CPU time
            parts["python (CPU not measured)"] = op.python_ns
        for cause, ns in op.waiting_by_cause.items():
            base = _QUEUE_BASE.get(cause, cause) if fold_gil else cause
            parts[f"waiting: {base}"] = parts.get(f"waiting: {base}", 0) + ns
        for part, part_ns in parts.items():
            sums[RowKey(RowKind.CUSTOM_OP, op.name, part)] = part_ns
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


@dataclass(frozen=True)
class CallResult:
    """The ``index``-th call (from 0) of custom op ``name`` paired across runs (times in ns)."""

    name: str
    index: int
    part: str
    a: np.ndarray  # per run
    b: np.ndarray
    median_a: float
    median_b: float
    ratio: float
    low: float
    high: float
    verdict: Verdict

    def label(self) -> str:
        return f"{self.name} call {self.index + 1}" + ("" if self.part == "wall" else f" · {self.part}")


def _call_parts(rows: list[CustomOpRow]) -> dict[str, np.ndarray]:
    """One run's calls per custom-op name in invocation order, as ``(calls, len(CALL_PARTS))``."""
    by_name: dict[str, list[CustomOpRow]] = defaultdict(list)
    for r in rows:
        by_name[r.name].append(r)
    return {
        name: np.array(
            [
                [r.wall_ns, r.python_ns, r.subops_ns, r.waiting_ns]
                for r in sorted(calls, key=lambda r: (r.invocation, r.start_ns))
            ],
            dtype=np.float64,
        ).reshape(len(calls), len(CALL_PARTS))
        for name, calls in by_name.items()
    }


def _pair_calls(
    ops_a: list[list[CustomOpRow]], ops_b: list[list[CustomOpRow]]
) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, str]]:
    """Pair calls by their order within each op type where every run made as many of them."""
    runs_a = [_call_parts(ops) for ops in ops_a]
    runs_b = [_call_parts(ops) for ops in ops_b]
    names = set().union(*runs_a, *runs_b)
    paired: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    unpaired: dict[str, str] = {}
    for name in sorted(names):
        counts_a = [len(r.get(name, ())) for r in runs_a]
        counts_b = [len(r.get(name, ())) for r in runs_b]
        if 0 in counts_a or 0 in counts_b:
            unpaired[name] = "not called in every run"
        elif len(set(counts_a + counts_b)) > 1:
            unpaired[name] = f"the runs made different numbers of calls (A: {_counts(counts_a)}; B: {_counts(counts_b)})"
        else:
            paired[name] = (np.stack([r[name] for r in runs_a]), np.stack([r[name] for r in runs_b]))
    return paired, unpaired


def _counts(counts: list[int]) -> str:
    return ", ".join(str(n) for n in sorted(set(counts)))


@dataclass
class Comparison:
    """Rows sorted by how much of the end-to-end change they explain (end to end first)."""

    rows: list[RowResult]
    runs_a: int
    runs_b: int
    label_a: str = "A"
    label_b: str = "B"
    notes: list[str] = field(default_factory=list)
    #: Per custom-op name (``MyOp``, ``_backward_MyOp``), the calls of each run in order, as
    #: ``(runs, calls, len(CALL_PARTS))`` arrays for A and B; only names paired (see :meth:`calls`).
    paired: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    #: Names that could not be paired, with why (counts differ between runs).
    unpaired: dict[str, str] = field(default_factory=dict)

    def calls(self, name: str, part: str = "wall") -> list[CallResult]:
        """The k-th call of custom op ``name`` (``_backward_MyOp`` for its backward) in A's runs
        against the k-th in B's, for each k: medians over runs, ratio, interval and verdict of
        ``part`` (one of :data:`CALL_PARTS`). Raises ``KeyError`` saying why when it is not paired."""
        if part not in CALL_PARTS:
            raise ValueError(f"part must be one of {', '.join(CALL_PARTS)}, got {part!r}")
        if name not in self.paired:
            why = self.unpaired.get(name, f"no custom op named {name!r} in both sides")
            raise KeyError(f"{name}: calls not paired: {why}")
        a, b = self.paired[name]
        j = CALL_PARTS.index(part)
        out = []
        for k in range(a.shape[1]):
            va, vb = a[:, k, j], b[:, k, j]
            ma, mb = float(np.median(va)), float(np.median(vb))
            ratio, lo, hi = ratio_interval(va, vb)
            if math.isnan(ratio):
                ratio, verdict = (mb / ma if ma > 0 else float("nan")), Verdict.NO_CLEAR_CHANGE
            else:
                verdict = verdict_of(lo, hi)
            out.append(CallResult(name, k, part, va, vb, ma, mb, ratio, lo, hi, verdict))
        return out

    def most_changed_calls(self, top: int = 5) -> list[CallResult]:
        """Across every paired op, the calls with a verdict, largest change of median wall time first."""
        found = [c for name in self.paired for c in self.calls(name) if c.verdict in (Verdict.FASTER, Verdict.SLOWER)]
        found.sort(key=lambda c: -abs(c.median_b - c.median_a))
        return found[:top]

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
    ops_a = [t.analysis().custom_ops for t in a]
    ops_b = [t.analysis().custom_ops for t in b]
    # A run with the GIL's evidence splits its queued causes further than one without: where the
    # runs differ in that, every run's are compared whole (else "queued, all busy" in A would meet
    # "queued, for any reason" in B and differ for no reason of the program's).
    evidence = {t.thread_states is not None for t in (*a, *b)}
    fold = len(evidence) > 1
    rows_a = [run_rows(t, fold_gil=fold) for t in a]
    rows_b = [run_rows(t, fold_gil=fold) for t in b]
    keys_a = set().union(*rows_a)
    keys_b = set().union(*rows_b)
    notes: list[str] = []
    if fold:
        notes.append(
            "some runs hold the GIL's evidence and some do not: their queued waiting is compared whole, "
            "not split into the GIL, the hand-off and busy threads"
        )
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
    paired, unpaired = _pair_calls(ops_a, ops_b)
    if unpaired:
        notes.append(
            "calls not paired by order for "
            + "; ".join(f"{name}: {why}" for name, why in unpaired.items())
            + " (their per-type rows above still compare)"
        )
    return Comparison(shares, len(a), len(b), label_a, label_b, notes, paired, unpaired)


def typical_run(runs: Trace | Sequence[Trace] | Any) -> Trace:
    """Of a side's runs, the one whose end-to-end time is the median (the lower of the middle two
    for an even count): the run a side-by-side view shows, neither its luckiest nor its unluckiest."""
    out = [t for t in _runs(runs) if len(t.table)]
    if not out:
        raise ValueError("no run with any span to show")
    order = sorted(range(len(out)), key=lambda k: out[k].table.length_ns)
    return out[order[(len(order) - 1) // 2]]


def side_by_side(
    a: Trace | Sequence[Trace] | Any, b: Trace | Sequence[Trace] | Any, *, label_a: str = "A", label_b: str = "B"
) -> Trace:
    """A's typical run above B's (:func:`typical_run`) on one time axis, both starting at 0: one
    trace in which each run is a process named by its label, so the timeline draws them as two lane
    groups and a zoom moves both. Each keeps everything it recorded, the engine's edges included
    (its split and waiting causes read as in the run itself); the critical path through both would
    mean nothing, so it is the approximation, and its note says why."""
    ra, rb = typical_run(a), typical_run(b)
    c = Combiner()
    for pid, run, group in ((1, ra, "A"), (2, rb, "B")):
        c.add(run, pid, shift_ns=int(run.table.start.min()), group=group)
    meta: dict[str, Any] = {
        "side_by_side": {label_a: ra.metadata.get("run"), label_b: rb.metadata.get("run")},
        APPROXIMATE_PATH: f"two runs side by side ({label_a} above {label_b}): the path runs through the one that ends last",
    }
    return c.build({1: label_a, 2: label_b}, meta)
