"""A against B run by run (``opprof.compare_functions``) and runs calibrated to last long enough.

Known answers: a custom op that sleeps 2 ms against one that sleeps 3 ms is slower by about half,
found in pairs; the same function on both sides gets no verdict; loops are calibrated so that a
run lasts at least ``MIN_RUN_S``, and the comparison is per loop.
"""

from __future__ import annotations

import time

import pytest

import opprof as mx
from opprof.profiler.ab import MAX_LOOPS, calibrate_loops, compare_functions, profiled_run, run_seconds
from opprof.trace import Trace
from opprof.trace.compare import RowKey, RowKind, Verdict
from tests.helpers import retried

pytestmark = pytest.mark.timeout(120)

_NAP = {"s": 0.002}


class _Nap(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        time.sleep(_NAP["s"])
        self.assign(out_data[0], req[0], in_data[0] + 1)


@mx.operator.register("ABTestNap")
class _NapProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):  # type: ignore[no-untyped-def]
        return _Nap()


def _napping(seconds: float):  # type: ignore[no-untyped-def]
    def run() -> None:
        _NAP["s"] = seconds
        x = mx.nd.ones((4, 4))
        for _ in range(2):
            x = mx.nd.Custom(x, op_type="ABTestNap")
        x.wait_to_read()

    return run


def test_calibration_makes_runs_long_enough() -> None:
    assert calibrate_loops(0.004) == 25 and calibrate_loops(0.2) == 1 and calibrate_loops(0.1) == 1
    assert calibrate_loops(1e-9) == MAX_LOOPS and calibrate_loops(0.0) == MAX_LOOPS
    trace = profiled_run(_napping(0.002), loops=3)
    assert trace.metadata["loops"] == 3
    assert sum(1 for r in trace.custom_ops() if r.op_type == "ABTestNap") == 6
    with pytest.raises(ValueError, match="loops"):
        profiled_run(_napping(0.002), loops=0)


def test_a_run_is_timed_without_the_build_after_it() -> None:
    """Calibration reads a run's length as the comparison does: the profile's start to the end of
    its final wait, not the wall time with the trace's build; without those stamps, the wall time."""
    wall0 = time.perf_counter()
    trace = profiled_run(_napping(0.01))
    wall = time.perf_counter() - wall0
    got = run_seconds(trace, wall)
    assert 0.02 <= got < wall, (got, wall)  # two naps of 10 ms, and less than with the build
    assert run_seconds(Trace(), 0.5) == 0.5
    assert run_seconds(Trace(metadata={"t_start_ns": 10, "t_stop_ns": 5}), 0.5) == 0.5  # nonsense stamps: the wall time


def test_interleaved_finds_a_slower_function_and_says_how_it_ran() -> None:
    def attempt() -> None:
        c = compare_functions(_napping(0.002), _napping(0.003), runs=6, loops=4, label_a="2ms", label_b="3ms")
        assert c.paired_runs and c.notes[0].startswith("interleaved: 2ms and 3ms ran alternately, 6 runs each of 4 call(s)")
        wall = c.row(RowKey(RowKind.CUSTOM_OP, "ABTestNap", "wall"))
        assert wall.verdict is Verdict.SLOWER and 1.15 < wall.ratio < 2.0, (wall.ratio, wall.low, wall.high)

    retried(attempt)


def test_interleaved_identical_functions_get_no_verdict_end_to_end() -> None:
    def attempt() -> None:
        fn = _napping(0.002)
        c = compare_functions(fn, fn, runs=6, loops="auto")
        e2e = c.end_to_end
        assert e2e is not None and e2e.verdict is not Verdict.SLOWER and e2e.verdict is not Verdict.FASTER
        # auto: runs of at least 100 ms, the same loops on both sides
        assert not any("too short" in n for n in c.notes)

    retried(attempt)


def test_bad_arguments_say_what_is_wrong() -> None:
    fn = _napping(0.001)
    with pytest.raises(ValueError, match="runs must be at least 2"):
        compare_functions(fn, fn, runs=1)
    with pytest.raises(ValueError, match="loops must be"):
        compare_functions(fn, fn, runs=2, loops="many")


def test_interleaved_pairs_take_turns_going_first() -> None:
    """After one warm-up call of each, the pairs run A, B then B, A, as ``%%opprof --interleave``
    runs them: neither side always runs second."""
    calls: list[str] = []
    c = compare_functions(lambda: calls.append("a"), lambda: calls.append("b"), runs=4, loops=1)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b", "b", "a"]
    assert c.paired_runs and c.runs_a == c.runs_b == 4
