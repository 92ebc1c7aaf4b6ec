"""What-if and the cores: the model's schedule has none, so the recording's CPU work over its cores
bounds a prediction (the ops' runs on a CPU by the thread states, the custom ops' Python by its CPU
clock, the process's native threads by the OS). Known answers from naps with the native CPU set by
hand, and from real NumPy dots whose BLAS pool fills every core."""

from __future__ import annotations

import numpy as np
import pytest

import opprof
import opprof as mx
from opprof import nd
from opprof.engine import ThreadedEngine, gil
from opprof.trace import Trace
from opprof.trace.analysis.whatif import WhatIf, what_if
from opprof.trace.analysis.whatif.prepare import extent, prepare
from tests.helpers import profiled_naps, retried

pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(not gil.AVAILABLE, reason=f"no thread states here: {gil.WHY_NOT}")]


def _naps(n: int, nap_s: float, workers: int) -> Trace:
    return profiled_naps(mx.set_engine(ThreadedEngine(workers=workers)), n, nap_s)[0]


def test_the_cpu_work_bounds_a_prediction_and_says_so(restore_engine: None) -> None:
    """Cores are not in the model's schedule; the recording's CPU work over its cores bounds the
    prediction. Known answers on 20 naps of 2 ms recorded on one worker (their runs are off a CPU),
    with the native threads' CPU set by hand: none, and two workers halve the run as the model
    says; two cores' worth (a BLAS pool filling both cores), and two workers cannot beat the
    recording, with a note giving the figures. Without the cores' count (an older file) the
    bound is not known, and a note says the native threads took cores."""
    from opprof.trace.records import CPUS_KEY
    from opprof.trace.threadstates import CPU_WAIT_METADATA

    trace = _naps(20, 0.002, workers=1)
    end = prepare(trace).end
    assert trace.metadata[CPUS_KEY] >= 1
    trace.metadata[CPUS_KEY] = 2

    def predict(native_ns: int) -> tuple[float, list[str]]:
        trace.metadata.setdefault(CPU_WAIT_METADATA, {"source": "test", "ns": {}})["outside_python"] = {
            "ns": native_ns,
            "threads": 2,
        }
        w = what_if(trace, engine_threads=2)
        return w.predicted_ns / w.recorded_ns, w.notes

    ratio, notes = predict(0)
    assert ratio < 0.6 and not [n for n in notes if "CPU work bounds" in n]
    ratio, notes = predict(2 * end)
    assert ratio >= 0.99, ratio
    (said,) = [n for n in notes if n.startswith("The run's CPU work bounds it")]
    assert "2 to run on" in said
    assert what_if(trace).predicted_ns == what_if(trace).baseline_ns  # no change: no bound
    del trace.metadata[CPUS_KEY]
    ratio, notes = predict(2 * end)
    assert ratio < 0.6
    assert [n for n in notes if n.startswith("Threads of this process outside Python")]


_BIG = np.random.default_rng(0).random((300, 300), dtype=np.float32)


def _dots(workers: int) -> Trace:
    """60 independent 300x300 dots in NumPy (BLAS, on every core): the median of three profiles."""
    engine = mx.set_engine(ThreadedEngine(workers=workers))
    runs = []
    for _ in range(4):
        with opprof.profile() as prof:
            for v in [engine.new_var() for _ in range(60)]:
                engine.push(lambda: _BIG @ _BIG, writes=[v], name="dot")
            nd.waitall()
        assert prof.trace is not None
        runs.append(prof.trace)
    return sorted(runs[1:], key=lambda t: extent(t)[1] - extent(t)[0])[1]  # the first warms BLAS's threads


def _dots_predicted_on_two() -> WhatIf:
    """The dots recorded on one worker and replayed on two; skipped where BLAS ran on one thread
    (the native threads took no core: nothing bounds the model there)."""
    recorded = _dots(1)
    native = (recorded.metadata.get("cpu_wait") or {}).get("outside_python", {}).get("ns", 0)
    if native * 4 < prepare(recorded).end:
        pytest.skip("BLAS ran on one thread here: the cores were not filled")
    return what_if(recorded, engine_threads=2)


@pytest.mark.e2e  # real runs, ~1 s a try
def test_a_second_worker_for_dots_whose_blas_fills_the_cores(restore_engine: None) -> None:
    """Recorded on one worker, the dots' BLAS already used both cores: the model's schedule alone
    says a second worker runs them 2x faster (-41 to -52 % off real runs); bounded by the run's CPU
    work over the cores, it gains at most a quarter (0.84-0.94x the recording, three CI tries), with
    a note giving the figures. Where the native threads took no core (a machine whose BLAS runs one
    thread), the prediction is left to the model."""

    def attempt() -> None:
        w = _dots_predicted_on_two()
        print(f"recorded {w.recorded_ns / 1e6:.1f} ms, predicted on 2 {w.predicted_ns / 1e6:.1f} ms")
        assert w.predicted_ns >= 0.75 * w.recorded_ns, f"predicted {w.change:.2f}x the recording"
        assert [n for n in w.notes if n.startswith("The run's CPU work bounds it")]

    retried(attempt)


@pytest.mark.e2e  # real runs, ~2 s a try
@pytest.mark.xfail(
    strict=False,
    reason="on a busy shared host the real run on two workers pays what oversubscribed cores cost "
    "(4 BLAS threads on 2): in one CI run 16-33 % slower than the CPU-work bound, in others within 15 %",
)
def test_a_second_worker_for_dots_against_a_real_run(restore_engine: None) -> None:
    """The prediction above against the dots run for real on two workers: within 15 %."""

    def attempt() -> None:
        w = _dots_predicted_on_two()
        real = what_if(_dots(2)).recorded_ns  # the median of three profiles on two workers
        err = w.predicted_ns / real - 1
        print(f"recorded {w.recorded_ns / 1e6:.1f} ms, predicted on 2 {w.predicted_ns / 1e6:.1f} ms, real {real / 1e6:.1f} ms")
        assert abs(err) <= 0.15, f"predicted {err:+.1%} off the real run on two workers"

    retried(attempt)
