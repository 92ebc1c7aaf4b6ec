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

Runs of a side are usually taken as a block (``--repeat N --label A``, a change, ``--repeat N
--compare A``), minutes from the other side's block; a shift of the whole block (the machine's
state, caches, a neighbour) is then noise the within-block spread cannot see, and identical code
was called "2.3x faster" with 95 % confidence. So each side's block is split into halves, in run
order, and the larger of the two sides' half-to-half differences (:func:`block_shift`), doubled
(:data:`BLOCK_DISTANCE`), widens the interval in log space: a verdict stands only if it holds with
the whole interval moved by that much. A row whose plain interval gave a verdict that the widened
one does not is *unstable*: its verdict is declined, with a note saying by how much the halves
differed. Runs are divided by their ``loops`` (the times the cell ran inside one measured run,
``metadata["loops"]``), so both sides compare per loop whatever each was calibrated to. The
strongest comparison interleaves A and B run by run (:func:`opprof.profiler.ab.compare_functions`):
a shift then hits both sides alike.

**Blocks judge the fastest half of their runs** (:class:`Estimate` FASTEST_HALF; every time
positive, at least :data:`MIN_RUNS_FOR_HALVES` runs a side): the mean of B's fastest half over A's
(:func:`fastest_half`), a percentile bootstrap for the interval, widened by twice the larger shift
of the halves' own fastest halves, and a verdict only where all runs agree (their Welch interval,
widened once by their halves' drift). Noise only adds time, so the runs the machine disturbed
least stand for a side; half of them, not the one fastest, because one run is itself a draw that
swings from block to block. Measured here (2026-12-04) on 60 blocked trials each of four
workloads of identical code and 60 of a real +10 % on the ~100 ms one, 10 runs a side: the
geometric means found the +10 % in 34 of 60 with 3 false verdicts of 240, the fastest run in 46
of 60 with 1 of 240 (without the all-runs check 51 of 60, but 8 false verdicts: a block's fastest
runs can shift as a whole). Then (2026-12-05, 20 runs a side, every rule on the same runs: 50
trials of +10 % on the ~100 ms workload, half of them beside a neighbour that took a CPU at
random, and 125 of identical code, 25 on each workload and 25 beside that neighbour): the fastest
run found 37 of 50 with 1 false verdict, the fastest half 44 of 50 with none (the fastest quarter
40, the medians 43, the geometric means 42; the last two also none); widened by the larger of its
halves' shift and of all their runs' (see :func:`judged`), the fastest half finds 41 of 50, with
none. Rows with a zero in some run (a waiting cause that did not occur) keep the geometric means'
interval.

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
from typing import Any, NamedTuple

import numpy as np

from .analysis.causes import QUEUE_PARTS
from .analysis.critical import APPROXIMATE_PATH
from .columns import NO_ROLE
from .combine import Combiner
from .records import CustomOpRow
from .trace import Trace

__all__ = [
    "BLOCK_DISTANCE",
    "CONFIDENCE",
    "MIN_RUNS_FOR_HALVES",
    "SHORT_RUN_NS",
    "Comparison",
    "RowKey",
    "RowKind",
    "RowResult",
    "Verdict",
    "BLOCK_RUNS_FOR_10_PERCENT",
    "BOOTSTRAP_RESAMPLES",
    "CallResult",
    "Estimate",
    "Judgement",
    "block_shift",
    "fastest_half",
    "fastest_half_interval",
    "compare",
    "judged",
    "loops_of",
    "paired_interval",
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
    MEMORY = "memory"  # bytes, where memory was recorded: the run's peak and allocations, a custom op's


class Verdict(str, Enum):
    FASTER = "faster"
    SLOWER = "slower"
    NO_CLEAR_CHANGE = "no clear change"
    UNSTABLE = "unstable"  # a change within what the sides' own halves differ by: declined
    ADDED = "added"  # in B only
    REMOVED = "removed"  # in A only


class Estimate(str, Enum):
    """What a row's ratio B/A is the ratio of: which runs' times stand for each side."""

    FASTEST_HALF = "fastest half"  # blocks of runs with every time positive: see the module docstring
    GEOMETRIC_MEAN = "geometric means"  # blocks where a run has a zero (a cause that did not occur)
    PAIRS = "pairs"  # runs taken alternately: the geometric mean of the per-pair ratios
    MEDIANS = "medians"  # no interval (one run on a side): the plain ratio of the medians


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
    loops = loops_of(trace)
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
    if loops > 1:  # per loop: sides calibrated to different loops compare alike
        rows = {k: v / loops for k, v in rows.items()}
    rows.update(memory_rows(trace, loops))
    return rows


#: The memory rows' parts that add up over a run's loops (a peak does not).
_SUMMED = ("allocated",)


def memory_rows(trace: Trace, loops: int = 1) -> dict[RowKey, float]:
    """A run's memory rows, in bytes, where memory was recorded: its peak and the bytes allocated,
    and per custom op (forward and backward apart) its sub-ops' allocations and its highest peak;
    allocations per loop, peaks as they were."""
    a = trace.analysis()
    m = a.memory
    if m is None:
        return {}
    rows = {RowKey(RowKind.MEMORY, "run", "peak"): float(m.peak), RowKey(RowKind.MEMORY, "run", "allocated"): float(m.allocated)}
    for op in a.custom_ops:
        if op.allocated_bytes is None or op.peak_bytes is None:
            continue
        key = RowKey(RowKind.MEMORY, op.name, "allocated")
        rows[key] = rows.get(key, 0.0) + op.allocated_bytes
        peak = RowKey(RowKind.MEMORY, op.name, "peak")
        rows[peak] = max(rows.get(peak, 0.0), float(op.peak_bytes))
    if loops > 1:
        rows = {k: v / loops if k.part in _SUMMED else v for k, v in rows.items()}
    return rows


def loops_of(trace: Trace) -> int:
    """How many times the measured code ran inside this run (``metadata["loops"]``; 1 when unsaid)."""
    try:
        n = int(trace.metadata.get("loops", 1))
    except (TypeError, ValueError):
        return 1
    return max(1, n)


@dataclass(frozen=True)
class RowResult:
    """One row of a comparison (times in ns; ``ratio`` is B/A of ``estimate``)."""

    key: RowKey
    a: np.ndarray  # per run (0 where a run of that side lacks the row but the side has it)
    b: np.ndarray
    median_a: float
    median_b: float
    ratio: float  # of ``estimate`` (the fastest halves, the geometric means, the pairs or the medians); nan when A's is 0
    low: float  # 95 % interval of the ratio; nan without one (N < 2, or added/removed)
    high: float
    verdict: Verdict
    share: float = 0.0  # of the end-to-end change (median B - median A), signed
    #: How far the blocks may have shifted apart (a fraction: 0.18 = 18 %): :data:`BLOCK_DISTANCE`
    #: times A's and B's half-to-half shifts (see :func:`judged`); ``low``..``high`` is widened by it.
    block_noise: float = 0.0
    #: Why the verdict was declined (``verdict`` UNSTABLE); empty otherwise.
    why_unstable: str = ""
    #: What ``ratio`` is the ratio of.
    estimate: Estimate = Estimate.MEDIANS

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
    estimate: Estimate = Estimate.MEDIANS  # what ``ratio`` is the ratio of

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
    #: Whether the runs were taken alternately and judged in pairs (:func:`compare`'s ``paired``).
    paired_runs: bool = False

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
            said = judged(va, vb, self.label_a, self.label_b, paired=self.paired_runs)
            out.append(CallResult(name, k, part, va, vb, ma, mb, said.ratio, said.low, said.high, said.verdict, said.estimate))
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


#: A side needs this many runs to be split into halves (two a half); with fewer, no shift is known.
MIN_RUNS_FOR_HALVES = 4
#: The interval is widened by this many times the halves' shift: the halves' centres are n/2 runs
#: apart, the two blocks' at least n (more, with the minutes between them), and a machine that
#: drifts steadily moves twice as far over twice the distance. Measured here on blocked runs of
#: identical code (12 trials each of four workloads, 5 runs a block): Welch alone gave 6 false
#: verdicts of 48, once 0.67x; widened by 1x the shift 1, by 2x none. On made-up blocks that share
#: one random walk (10 runs each, 400 draws) 1x left 18 % false verdicts, 2x 3 %; the fastest runs
#: widened alike, and confirmed by all runs, 4 % (the fastest halves, :data:`Estimate.FASTEST_HALF`:
#: tests/trace/test_compare.py holds them to 5 %).
BLOCK_DISTANCE = 2.0
#: The least the blocks of a blocked comparison are taken to have shifted apart (1 %): a block's
#: halves can agree by chance while the machine moved between the blocks. Measured here, blocks of
#: 20 runs of identical ~100 ms code: their fastest runs' ratio swings by 0.9-1.0 % from trial to
#: trial (their fastest halves' by 1.4-1.9 %, their fastest runs' by 1.6-2.5 % on 2026-12-05), and
#: of 50 such trials the one that got a verdict (2026-12-05) called a 0.7 % change [0.1 %, 1.7 %]
#: "slower" on halves that agreed to 0.4 %. With the floor the 10 % and 30 % changes are found as
#: before (their intervals are 1-2 % wide), and no change under 1 % is called.
MIN_BLOCK_NOISE = 0.01
#: Runs a side that a blocked comparison needs to find a 10 % change most of the time here: on a
#: ~100 ms workload (2026-12-04) blocks of 10 found +10 % in 74 of 100 trials, blocks of 20 in 19 of
#: 20 (the fastest runs' block-to-block swing 0.9-1.0 % against 1.7-1.9 %), identical code getting a
#: verdict in 1 of 240 and 2 of 80 trials. A blocked comparison with fewer that finds no change says so.
BLOCK_RUNS_FOR_10_PERCENT = 20
#: Resamples of the fastest halves' bootstrap: the fastest run's 2.5 % and 97.5 % quantiles moved
#: by < 0.2 % of the ratio between seeds at 2,000 (10 runs a side); a mean of half the runs moves less.
BOOTSTRAP_RESAMPLES = 2000


def fastest_half(values: np.ndarray) -> np.ndarray:
    """The mean of the fastest half of the runs along the last axis (the faster ``ceil(n / 2)``):
    the statistic a blocked verdict judges, each row of a bootstrap's resamples at once."""
    v = np.asarray(values, dtype=np.float64)
    k = (v.shape[-1] + 1) // 2
    return np.partition(v, k - 1, axis=-1)[..., :k].mean(axis=-1)


def block_shift(values: np.ndarray, *, fastest: bool = False) -> float:
    """How much a block of runs (in run order) drifted: the difference between the mean of its
    second half and of its first, in log space where every run is positive (else relative to the
    mean); 0 with fewer than :data:`MIN_RUNS_FOR_HALVES` runs. The middle run of an odd count is in
    neither half. ``fastest``: between the halves' own fastest halves (:func:`fastest_half`; all
    positive), the statistic the blocked verdict judges."""
    v = np.asarray(values, dtype=np.float64)
    n = len(v)
    if n < MIN_RUNS_FOR_HALVES:
        return 0.0
    h = n // 2
    first, second = v[:h], v[n - h :]
    if fastest:
        return abs(math.log(float(fastest_half(second)) / float(fastest_half(first))))
    if (v > 0).all():
        return abs(float(np.log(second).mean() - np.log(first).mean()))
    base = float(v.mean())
    return abs(float(second.mean() - first.mean())) / base if base > 0 else 0.0


def fastest_half_interval(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """(ratio, low, high) of B's fastest half over A's (:func:`fastest_half`), with a 95 %
    percentile-bootstrap interval (each side's runs resampled on their own; a fixed seed, so the
    same runs give the same verdict). Every time must be positive."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    rng = np.random.default_rng(0)
    fa = fastest_half(a[rng.integers(0, len(a), (BOOTSTRAP_RESAMPLES, len(a)))])
    fb = fastest_half(b[rng.integers(0, len(b), (BOOTSTRAP_RESAMPLES, len(b)))])
    low, high = np.quantile(np.log(fb / fa), [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2])
    return float(fastest_half(b) / fastest_half(a)), math.exp(float(low)), math.exp(float(high))


def paired_interval(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """(ratio, low, high) of B/A for runs taken in pairs (A's k-th beside B's k-th, interleaved): a
    t interval on the per-pair log ratios, so a shift of the machine that hit both runs of a pair
    cancels. Where a run is zero, the difference of the times relative to A's mean."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    n = min(len(a), len(b))
    if n < 2 or len(a) != len(b):
        return ratio_interval(a, b)
    logs = bool((a > 0).all() and (b > 0).all())
    if logs:
        d = np.log(b) - np.log(a)
    else:
        base = float(a.mean())
        if base <= 0:
            return float("nan"), float("nan"), float("nan")
        d = (b - a) / base
    mean = float(d.mean())
    half = _t_quantile(0.5 + CONFIDENCE / 2, n - 1) * float(d.std(ddof=1)) / math.sqrt(n)
    if logs:
        return math.exp(mean), math.exp(mean - half), math.exp(mean + half)
    return 1 + mean, max(0.0, 1 + mean - half), 1 + mean + half


class Judgement(NamedTuple):
    """One row's B/A, its 95 % interval (widened where the runs came in blocks) and its verdict."""

    ratio: float
    low: float
    high: float
    verdict: Verdict
    #: How far the blocks may have shifted apart (0.18 = 18 %); the interval is widened by it.
    block_noise: float
    #: Why the verdict was declined (``verdict`` UNSTABLE); empty otherwise.
    why_unstable: str
    estimate: Estimate


def judged(a: np.ndarray, b: np.ndarray, label_a: str = "A", label_b: str = "B", *, paired: bool = False) -> Judgement:
    """B/A of runs ``a`` and ``b``, judged. Blocks (A's runs, then B's): where both sides have at
    least :data:`MIN_RUNS_FOR_HALVES` runs and every time is positive, the ratio of the fastest
    halves with its bootstrap interval (:func:`fastest_half_interval`) widened by :data:`BLOCK_DISTANCE`
    times the largest of the two sides' half-to-half shifts, of their fastest halves or of all their
    runs' means; else the geometric
    means' interval (:func:`ratio_interval`) widened by twice the larger shift of the halves'
    means; either widened by at least :data:`MIN_BLOCK_NOISE` (a change under it is no clear
    change). For the fastest halves a verdict also needs all runs to agree: their Welch interval,
    widened once by the larger shift of their halves' means, must say the same (a few lucky runs do
    not make a change). A verdict the plain Welch interval gave and the judged one does not is
    declined as *unstable*, saying why (unless the floor alone declined it). ``paired`` (runs
    interleaved A, B, A, B): the paired interval (:func:`paired_interval`), which a shift of the
    machine does not bias: no widening. Without an interval (fewer than two runs a side, A's times
    all zero): the ratio of the medians and no verdict."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    ratio, lo, hi = paired_interval(a, b) if paired else ratio_interval(a, b)
    if math.isnan(ratio):  # no interval: the plain ratio of the medians, and no verdict
        ma, mb = float(np.median(a)), float(np.median(b))
        medians = mb / ma if ma > 0 else float("nan")
        return Judgement(medians, lo, hi, Verdict.NO_CLEAR_CHANGE, 0.0, "", Estimate.MEDIANS)
    if paired:
        return Judgement(ratio, lo, hi, verdict_of(lo, hi), 0.0, "", Estimate.PAIRS)
    plain = verdict_of(lo, hi)
    fastest = min(len(a), len(b)) >= MIN_RUNS_FOR_HALVES and bool((a > 0).all() and (b > 0).all())
    shift_a, shift_b = block_shift(a, fastest=fastest), block_shift(b, fastest=fastest)
    if fastest:
        # The runs the machine disturbed least stand for a side (noise only adds time): the mean
        # of its fastest half, which swings less from block to block than its one fastest run
        # (1.4-1.9 % against 1.6-2.5 % on identical ~100 ms code, 2026-12-05). All runs must agree,
        # their interval widened once by their own halves' drift: see the module docstring.
        drift_a, drift_b = block_shift(a), block_shift(b)
        drift = max(drift_a, drift_b)
        agrees = verdict_of(lo * math.exp(-drift), hi * math.exp(drift))
        ratio, lo, hi = fastest_half_interval(a, b)
        estimate = Estimate.FASTEST_HALF
        # The blocks' shift is read off whichever moved more between a side's halves, its fastest
        # half or all its runs: on made-up blocks that share a random walk (400 draws, 20 runs a
        # side) the fastest halves' shift alone left 25 false verdicts (the fastest run's, 28); the
        # larger of the two, 20. On the real runs of the module docstring: +10 % found in 41 of 50
        # (the fastest run: 37), identical code given no verdict in 125.
        shift_a, shift_b = max(shift_a, drift_a), max(shift_b, drift_b)
    else:
        estimate = Estimate.GEOMETRIC_MEAN
    measured = BLOCK_DISTANCE * max(shift_a, shift_b)
    noise = max(measured, math.log1p(MIN_BLOCK_NOISE))

    def widened_by(w: float) -> Verdict:
        """The verdict of the interval widened by ``w`` (log), all runs agreeing where it is the fastest halves'."""
        v = verdict_of(lo * math.exp(-w), hi * math.exp(w))
        return Verdict.NO_CLEAR_CHANGE if fastest and v is not agrees else v

    wide_lo, wide_hi = lo * math.exp(-noise), hi * math.exp(noise)
    widened = widened_by(noise)
    why = ""
    # Declined for the floor alone (the halves' own shift would have kept the verdict): a change
    # this small is no clear change between blocks, not an unstable machine.
    floor_only = widened_by(measured) is plain
    if widened is not plain and plain is not Verdict.NO_CLEAR_CHANGE and not floor_only:
        # The halves' larger difference, of their fastest halves or of all their runs.
        side = label_a if shift_a >= shift_b else label_b
        why = (
            f"the two halves of {side} differ by {100 * math.expm1(max(shift_a, shift_b)):.0f} %: "
            f"too unstable to call a {100 * abs(ratio - 1):.0f} % change"
        )
        widened = Verdict.UNSTABLE
    return Judgement(ratio, wide_lo, wide_hi, widened, math.expm1(noise), why, estimate)


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
    paired: bool = False,
) -> Comparison:
    """Compare runs ``a`` with runs ``b``: each a trace, a sequence of traces of the same program,
    or a ``%%opprof --repeat`` result (its ``runs``). ``paired``: the runs were taken alternately
    (A's k-th just before B's k-th; :func:`opprof.profiler.ab.compare_functions`), so each row is
    judged on its per-pair ratios."""
    a, b = _runs(a), _runs(b)
    if paired and len(a) != len(b):
        raise ValueError(f"paired runs come in pairs: {len(a)} and {len(b)} runs")
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
    loops_a, loops_b = sorted({loops_of(t) for t in a}), sorted({loops_of(t) for t in b})
    if loops_a != loops_b:
        notes.append(
            f"{label_a}'s runs ran the code {_counts(loops_a)} time(s) each and {label_b}'s {_counts(loops_b)}: rows are per "
            "loop, so what happens once a run (the final wait for the engine, a run's first ops) weighs differently on "
            "the two sides and can look like a change; give both the same loops (%%opprof --compare does; --loops K)"
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
        j = judged(va, vb, label_a, label_b, paired=paired)
        results.append(
            RowResult(
                key,
                va,
                vb,
                ma,
                mb,
                j.ratio,
                j.low,
                j.high,
                j.verdict,
                block_noise=j.block_noise,
                why_unstable=j.why_unstable,
                estimate=j.estimate,
            )
        )
    e2e = next((r for r in results if r.key.kind is RowKind.END_TO_END), None)
    notes += _stability_notes(e2e, results, a, b, paired=paired)
    total = e2e.delta if e2e is not None else 0.0
    # A time row's share of the end-to-end change; bytes are no share of a time (memory rows: 0).
    shares = [
        replace(r, share=(r.delta / total) if total and r.key.kind is not RowKind.MEMORY else 0.0) if r is not e2e else r
        for r in results
    ]
    # End to end, then the time rows by how much they moved, then the memory rows (bytes) alike.
    shares.sort(key=lambda r: (r.key.kind is not RowKind.END_TO_END, r.key.kind is RowKind.MEMORY, -abs(r.delta), r.key))
    calls_paired, unpaired = _pair_calls(ops_a, ops_b)
    if unpaired:
        notes.append(
            "calls not paired by order for "
            + "; ".join(f"{name}: {why}" for name, why in unpaired.items())
            + " (their per-type rows above still compare)"
        )
    return Comparison(shares, len(a), len(b), label_a, label_b, notes, calls_paired, unpaired, paired_runs=paired)


#: A measured run shorter than this swings with the machine's state (a timer tick, a cache, a
#: woken vCPU is a large share of it): the comparison says so. Runs are calibrated to 100 ms (as
#: pyperf does; :data:`opprof.profiler.ab.MIN_RUN_S`) from an estimate: half that is plainly short.
SHORT_RUN_NS = 50_000_000


def _stability_notes(
    e2e: RowResult | None, rows: list[RowResult], a: list[Trace], b: list[Trace], *, paired: bool = False
) -> list[str]:
    """What a reader must know before trusting the verdicts: runs too short, blocks too few to find
    a small change, an unstable block."""
    notes = []
    if e2e is not None and len(e2e.a) and len(e2e.b):
        # A run's own length (all its loops), not the per-loop row.
        lengths = [float(t.table.length_ns) for t in (*a, *b) if len(t.table)]
        shortest = float(np.median(lengths)) if lengths else 0.0
        if 0 < shortest < SHORT_RUN_NS:
            notes.append(
                f"runs last {shortest / 1e6:.1f} ms (median): too short to compare reliably here "
                f"(under {SHORT_RUN_NS / 1e6:.0f} ms a run swings with the machine's state; 100 ms is safe); "
                "run the code several times inside each run (%%opprof --repeat N --loops auto does) or interleave A and B "
                "(opprof.compare_functions)"
            )
    unstable = [r for r in rows if r.verdict is Verdict.UNSTABLE]
    few = min(len(a), len(b))
    undecided = (Verdict.NO_CLEAR_CHANGE, Verdict.UNSTABLE)
    if not paired and e2e is not None and e2e.verdict in undecided and 2 <= few < BLOCK_RUNS_FOR_10_PERCENT:
        notes.append(
            f"blocks of {few} runs may miss a change of ~10 %: run {BLOCK_RUNS_FOR_10_PERCENT} a side "
            f"(%%opprof --repeat {BLOCK_RUNS_FOR_10_PERCENT}) or interleave A and B (opprof.compare_functions)"
        )
    if e2e is not None and e2e.verdict is Verdict.UNSTABLE:
        notes.append(f"end to end seems unstable: {e2e.why_unstable} (declined, not called faster or slower)")
    elif unstable:
        notes.append(f"{len(unstable)} row(s) declined as unstable: their sides' halves differ by more than the change")
    return notes


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
