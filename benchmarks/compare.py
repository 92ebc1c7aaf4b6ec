"""Compare runs (issue 17): how often ``opprof.compare`` finds a change that is there, and how
often it calls no change "no clear change", on this noisy machine.

Run: ``python benchmarks/compare.py [--trials T] [--runs N]`` (or ``make bench``).

A custom op whose Python does a fixed amount of CPU work (a NumPy loop of known size) runs as A;
B is the same with the work made 10 % or 30 % larger, or unchanged. Each trial profiles N = 5 runs
per side, interleaved (A, B, A, B, ...: a noisy neighbour hits both alike) and judged in pairs
(``compare(..., paired=True)``, what ``opprof.compare_functions`` does), and reads the verdict
on the op's wall time and on end to end. Goals (the issue's): the 30 % change found in >= 95 % of
trials, the 10 % one in >= 80 %, the no-change pair "no clear change" in >= 95 %.

The blocked rows take the runs as a user does (A's block, then B's; each calibrated to runs of >=
100 ms as ``%%opprof --repeat`` does): identical code on three workloads of a few ms and one of
~100 ms must get a verdict in at most 5 % of trials end to end and of all rows; +30 % and +10 % on
the ~100 ms workload must be found in 95 % and 80 % of trials; +30 % on a few-ms workload found or
declined, never reversed. N = 20 runs a side: at 10 the +10 % was found in about three trials of four
(74 of 100 on 2026-12-04: 46 of 60 kept trials, 17 and 11 of 20 in two runs), at 20 in 19 of 20, the
fastest runs' block-to-block swing halving (1.9 % -> 0.9-1.0 %). Blocks are judged on the fastest
half of their runs since 2026-12-05 (docs/compare.md: 41 of 50 against the fastest run's 37 of 50,
on the same runs).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

import opprof as mx
from opprof.profiler.ab import pair_order
from opprof.trace import Trace
from opprof.trace.compare import BLOCK_RUNS_FOR_10_PERCENT, RowKey, RowKind, Verdict, compare

try:
    from benchmarks.common import Row, print_rows, progress
except ImportError:  # run as a script: python benchmarks/compare.py
    from common import Row, print_rows, progress  # type: ignore[no-redef]

SECTION = "Compare runs"
_WORK = {"n": 0}
_CALLS = 3
_BASE_WORK = 400  # NumPy passes over a 20k array per call: ~11 ms here, well above the engine's own ~0.1 ms per call


class _Work(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        v = np.ones(20_000)
        for _ in range(_WORK["n"]):
            v = np.sqrt(v + 1.0)
        self.assign(out_data[0], req[0], in_data[0] + float(v[0] > 0))


@mx.operator.register("BenchWork")
class _WorkProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):  # type: ignore[no-untyped-def]
        return _Work()


def _run(work: int) -> Trace:
    _WORK["n"] = work
    with mx.profile() as prof:
        x = mx.nd.ones((4, 4))
        for _ in range(_CALLS):
            x = mx.nd.Custom(x, op_type="BenchWork")
        x.wait_to_read()
    assert prof.trace is not None
    return prof.trace


def _trial(factor: float, runs: int) -> tuple[Verdict, Verdict]:
    work = (_BASE_WORK, round(_BASE_WORK * factor))
    sides: tuple[list[Trace], list[Trace]] = ([], [])
    for k in range(runs):  # interleaved, as compare_functions runs them
        for side in pair_order(k):
            sides[side].append(_run(work[side]))
    c = compare(*sides, paired=True)  # interleaved runs: judged in pairs, as compare_functions does
    e2e = c.end_to_end
    assert e2e is not None
    return c.row(RowKey(RowKind.CUSTOM_OP, "BenchWork", "wall")).verdict, e2e.verdict


def measure(trials: int = 20, runs: int = 5) -> list[Row]:
    _run(_BASE_WORK)  # warm-up: imports, the pool's threads
    rows: list[Row] = []
    for factor, goal, wanted in ((1.3, 0.95, Verdict.SLOWER), (1.1, 0.80, Verdict.SLOWER), (1.0, 0.95, Verdict.NO_CLEAR_CHANGE)):
        op_hits = e2e_hits = 0
        for k in range(trials):
            op, e2e = _trial(factor, runs)
            op_hits += op is wanted
            e2e_hits += e2e is wanted
            if (k + 1) % 5 == 0:
                progress(f"compare, work x{factor}: {k + 1}/{trials} trials; as expected: op {op_hits}, end to end {e2e_hits}")
        what = "no clear change" if wanted is Verdict.NO_CLEAR_CHANGE else f"+{round(100 * (factor - 1))} % found"
        rate = op_hits / trials
        rows.append(
            Row(
                SECTION,
                f"custom op +{round(100 * (factor - 1))} % work: {what} (op wall time), N = {runs} runs a side",
                100 * rate,
                "% of trials",
                f"{op_hits}/{trials} trials; end to end {e2e_hits}/{trials}",
                f"≥ {round(100 * goal)} %",
                rate >= goal,
            )
        )
    return rows


# ---------------------------------------------------------------------------- blocks, as users run them
# `%%opprof --repeat N --label A`, a change, `%%opprof --repeat N --compare A`: A's runs in one block,
# B's in another after it. Each block is calibrated as the magic calibrates it (its warm-up's time
# sets the loops of a run of >= 100 ms) and the verdicts come from compare(), as the magic's do.
_SIZE = {"calls": 20, "ops": 300, "nap_s": 0.001}


class _Tiny(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        self.assign(out_data[0], req[0], in_data[0] + 1)


@mx.operator.register("BenchTiny")
class _TinyProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):  # type: ignore[no-untyped-def]
        return _Tiny()


class _Nap(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        import time

        time.sleep(_SIZE["nap_s"])
        self.assign(out_data[0], req[0], in_data[0] + 1)


@mx.operator.register("BenchBlockNap")
class _NapProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):  # type: ignore[no-untyped-def]
        return _Nap()


def _custom_ops(scale: float) -> None:
    x = mx.nd.ones((10, 10))
    for _ in range(round(_SIZE["calls"] * scale)):
        x = mx.nd.Custom(x, op_type="BenchTiny")
    x.wait_to_read()


def _small_ops(scale: float) -> None:
    a = mx.nd.ones((10, 10))
    for _ in range(round(_SIZE["ops"] * scale)):
        a = a + 1
    a.wait_to_read()


def _naps(scale: float) -> None:
    _SIZE["nap_s"] = 0.001 * scale
    x = mx.nd.ones((10, 10))
    for _ in range(3):
        x = mx.nd.Custom(x, op_type="BenchBlockNap")
    x.wait_to_read()


def _heavy(scale: float) -> None:
    _WORK["n"] = round(_BASE_WORK * scale)
    x = mx.nd.ones((4, 4))
    for _ in range(8):  # ~100 ms a run without loops
        x = mx.nd.Custom(x, op_type="BenchWork")
    x.wait_to_read()


#: (label, workload, what a run takes before calibration): three of a few ms, one of ~100 ms.
WORKLOADS: list[tuple[str, Any, str]] = [
    ("trivial custom ops", _custom_ops, "a few ms"),
    ("small ops", _small_ops, "a few ms"),
    ("custom ops that sleep", _naps, "a few ms"),
    ("custom ops of NumPy work", _heavy, "~100 ms"),
]


def _block(fn: Any, scale: float, runs: int, loops: int | None = None) -> tuple[list[Trace], int]:
    """A block as the magic takes it: a warm-up (which sets the loops, unless given: ``--compare``
    takes the labelled side's), then ``runs`` runs; and its loops."""
    from opprof.profiler.ab import loops_after_warmup, profiled_run, run_seconds

    t0 = time.perf_counter()
    warmup = profiled_run(lambda: fn(scale))
    if loops is None:
        loops = loops_after_warmup(run_seconds(warmup, time.perf_counter() - t0))
    return [profiled_run(lambda: fn(scale), loops) for _ in range(runs)], loops


def blocked_trial(fn: Any, factor: float, runs: int) -> tuple[Verdict, int, int, Verdict]:
    """A's block, then B's (``factor`` times the work) with A's loops, as ``%%opprof --compare A``
    runs it: (end-to-end verdict, rows with a verdict, rows, the verdict of the row that changed most)."""
    a, loops = _block(fn, 1.0, runs)
    b, _ = _block(fn, factor, runs, loops)
    c = compare(a, b)
    e2e = c.end_to_end
    assert e2e is not None
    judged = [r for r in c.rows if r.verdict not in (Verdict.ADDED, Verdict.REMOVED)]
    called = sum(r.verdict in (Verdict.FASTER, Verdict.SLOWER) for r in judged)
    return e2e.verdict, called, len(judged), e2e.verdict


def blocked_rows(trials: int, runs: int) -> list[Row]:
    out: list[Row] = []
    for label, fn, size in WORKLOADS:
        fn(1.0)  # warm: imports, the pools' threads
        false_e2e = called = total = 0
        for _ in range(trials):
            e2e, c, n, _ = blocked_trial(fn, 1.0, runs)
            false_e2e += e2e in (Verdict.FASTER, Verdict.SLOWER)
            called += c
            total += n
        progress(f"compare, blocked A/A, {label}: {false_e2e}/{trials} end-to-end verdicts")
        out.append(
            Row(
                SECTION,
                f"blocked A/A (same code, A's block then B's), {label} ({size} a run, calibrated): false verdicts end to end",
                100 * false_e2e / trials,
                "% of trials",
                f"{false_e2e}/{trials} trials; {called}/{total} rows ({100 * called / max(1, total):.1f} %) "
                f"with a verdict; N = {runs} a side",
                "≤ 5 %",
                false_e2e / trials <= 0.05 and called / max(1, total) <= 0.05,
            )
        )
    heavy = WORKLOADS[-1]
    for factor, goal in ((1.3, 0.95), (1.1, 0.80)):
        found = reversed_ = 0
        for _ in range(trials):
            e2e, _, _, _ = blocked_trial(heavy[1], factor, runs)
            found += e2e is Verdict.SLOWER
            reversed_ += e2e is Verdict.FASTER
        progress(f"compare, blocked A/B +{round(100 * (factor - 1))} %, {heavy[0]}: found {found}/{trials}")
        out.append(
            Row(
                SECTION,
                f"blocked A/B, {heavy[0]} ({heavy[2]} a run): +{round(100 * (factor - 1))} % found end to end",
                100 * found / trials,
                "% of trials",
                f"{found}/{trials} trials, {reversed_} reversed; N = {runs} a side",
                f"≥ {round(100 * goal)} %",
                found / trials >= goal and reversed_ == 0,
            )
        )
    for label, fn, size in WORKLOADS[:1]:
        found = declined = reversed_ = 0
        for _ in range(trials):
            e2e, _, _, _ = blocked_trial(fn, 1.3, runs)
            found += e2e is Verdict.SLOWER
            declined += e2e in (Verdict.UNSTABLE, Verdict.NO_CLEAR_CHANGE)
            reversed_ += e2e is Verdict.FASTER
        out.append(
            Row(
                SECTION,
                f"blocked A/B, {label} ({size} a run, calibrated): +30 % found or declined, never reversed",
                100 * reversed_ / trials,
                "% reversed",
                f"found {found}, declined {declined}, reversed {reversed_} of {trials} trials; N = {runs} a side",
                "0 % reversed",
                reversed_ == 0,
            )
        )
    return out


def rows(quick: bool = False, repeats: int | None = None) -> list[Row]:
    # trials, not rounds: --repeats does not apply
    out = measure(trials=3 if quick else 20, runs=3 if quick else 5)
    # Blocks of the size compare's note asks for when a blocked comparison finds nothing.
    return out + blocked_rows(trials=2 if quick else 20, runs=4 if quick else BLOCK_RUNS_FOR_10_PERCENT)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    print_rows(SECTION, measure(args.trials, args.runs))


if __name__ == "__main__":
    sys.exit(main())
