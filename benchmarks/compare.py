"""Compare runs (issue 17): how often ``opprof.compare`` finds a change that is there, and how
often it calls no change "no clear change", on this noisy machine.

Run: ``python benchmarks/compare.py [--trials T] [--runs N]`` (or ``make bench``).

A custom op whose Python does a fixed amount of CPU work (a NumPy loop of known size) runs as A;
B is the same with the work made 10 % or 30 % larger, or unchanged. Each trial profiles N = 5 runs
per side, interleaved (A, B, A, B, ...: a noisy neighbour hits both alike), and reads the verdict
on the op's wall time and on end to end. Goals (the issue's): the 30 % change found in >= 95 % of
trials, the 10 % one in >= 80 %, the no-change pair "no clear change" in >= 95 %.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import opprof as mx
from opprof.trace import Trace
from opprof.trace.compare import RowKey, RowKind, Verdict, compare

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
    a: list[Trace] = []
    b: list[Trace] = []
    for _ in range(runs):  # interleaved
        a.append(_run(_BASE_WORK))
        b.append(_run(round(_BASE_WORK * factor)))
    c = compare(a, b)
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


def rows(quick: bool = False, repeats: int | None = None) -> list[Row]:
    return measure(trials=3 if quick else 20, runs=3 if quick else 5)  # trials, not rounds: --repeats does not apply


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    print_rows(SECTION, measure(args.trials, args.runs))


if __name__ == "__main__":
    sys.exit(main())
