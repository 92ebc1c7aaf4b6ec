"""Runs long enough to measure, and A against B run by run.

A comparison is only as good as its runs. Two things make runs of a few milliseconds poor
evidence on a shared machine: one run swings with whatever else the machine does during it, and a
block of runs taken minutes after another block differs from it as a whole (caches, the
allocator, a neighbour, a vCPU that the host halted). :func:`calibrate_loops` makes each measured
run last at least :data:`MIN_RUN_S` by running the code several times inside it, as pyperf does
(its runs last 100 ms too); the loops are kept in the trace's metadata (``loops``) and the
comparison divides by them. :func:`compare_functions` runs A and B alternately, each run profiled
on its own: a shift of the machine's state then hits both sides alike, the strongest comparison
there is when both versions of the code can be called from one place.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from ..trace import Trace
from ..trace.compare import Comparison, compare
from .session import profile

__all__ = [
    "CALIBRATION_MARGIN",
    "MAX_LOOPS",
    "MIN_RUN_S",
    "calibrate_loops",
    "compare_functions",
    "loops_after_warmup",
    "pair_order",
    "profiled_run",
    "run_seconds",
]

#: A measured run lasts at least this long once calibrated (pyperf's default minimum is 100 ms).
MIN_RUN_S = 0.1
#: At most this many loops a run (a cell of 1 µs would otherwise loop 100,000 times).
MAX_LOOPS = 1000


#: What a calibration aims at, over the minimum: an estimate from one warm-up run is off by what the
#: first runs still warm, so runs calibrated to exactly the minimum come out short.
CALIBRATION_MARGIN = 1.2


def run_seconds(trace: Trace, wall_s: float) -> float:
    """How long a profiled run of the code took, as a measured run's length counts it: from the
    profile's start to the end of the final wait for the engine (``t_start_ns``/``t_stop_ns``),
    without the trace's build after it; ``wall_s`` where the trace does not say (a cluster's).
    Calibrating from the wall time, build included, gave small ops (~2.3 ms a call) 9-28 loops a
    run where 100 ms needs ~50 (2026-12-04): the build's fixed part is most of a short warm-up."""
    t0, t1 = trace.metadata.get("t_start_ns"), trace.metadata.get("t_stop_ns")
    if isinstance(t0, int) and isinstance(t1, int) and 0 < t1 - t0 <= wall_s * 1e9:
        return (t1 - t0) / 1e9
    return wall_s


def pair_order(k: int) -> tuple[int, int]:
    """Which side (0: A, 1: B) runs first in the ``k``-th pair of an interleaved comparison: A, B
    then B, A in turn, so that neither side always runs second, after the other's garbage and on
    its warmed caches."""
    return (0, 1) if k % 2 == 0 else (1, 0)


def loops_after_warmup(warmup_s: float, min_run_s: float = MIN_RUN_S) -> int:
    """The loops for runs of at least ``min_run_s``, from one warm-up run of ``warmup_s`` (what
    ``%%opprof --repeat N --loops auto`` does), with :data:`CALIBRATION_MARGIN`."""
    return calibrate_loops(warmup_s, min_run_s * CALIBRATION_MARGIN)


def calibrate_loops(one_run_s: float, min_run_s: float = MIN_RUN_S) -> int:
    """How many times code that took ``one_run_s`` once must run inside one measured run for the
    run to last ``min_run_s`` (1 for code that takes that long already; at most :data:`MAX_LOOPS`)."""
    if not one_run_s > 0:
        return MAX_LOOPS
    return max(1, min(MAX_LOOPS, math.ceil(min_run_s / one_run_s)))


def _calibrated(a: Callable[[], Any], b: Callable[[], Any], min_run_s: float) -> int:
    """Loops for runs of at least ``min_run_s`` of the quicker of ``a`` and ``b``: estimated from one
    call, then checked on a run of that many and scaled up while short (as pyperf does; a first
    call's estimate is off by what the first calls still warm)."""
    n = 1
    for _ in range(4):
        took = []
        for fn in (a, b):
            t0 = time.perf_counter()
            trace = profiled_run(fn, n)
            took.append(run_seconds(trace, time.perf_counter() - t0))
        if min(took) >= min_run_s or n >= MAX_LOOPS:
            return n
        n = max(n + 1, loops_after_warmup(min(took) / n, min_run_s))
        n = min(n, MAX_LOOPS)
    return n


def profiled_run(fn: Callable[[], Any], loops: int = 1) -> Trace:
    """One measured run: ``fn()`` called ``loops`` times under one profile (waiting for the engine's
    work), its trace saying how many (``metadata["loops"]``)."""
    if loops < 1:
        raise ValueError(f"loops must be at least 1, got {loops}")
    with profile() as prof:
        for _ in range(loops):
            fn()
    trace = prof.trace
    assert trace is not None  # profile() builds the trace on exit
    trace.metadata["loops"] = loops
    return trace


def compare_functions(
    a: Callable[[], Any],
    b: Callable[[], Any],
    *,
    runs: int = 10,
    loops: int | str = "auto",
    label_a: str = "A",
    label_b: str = "B",
    min_run_s: float = MIN_RUN_S,
) -> Comparison:
    """Compare ``a()`` with ``b()`` run alternately (A, B, then B, A, ...), each run profiled on its own.

    ``loops``: how many calls make one run ("auto": enough for ``min_run_s``, calibrated on a
    warm-up call of each, the same for both sides). The first call of each is a warm-up, kept out.
    """
    if runs < 2:
        raise ValueError(f"runs must be at least 2 (an interval needs two runs a side), got {runs}")
    if loops == "auto":
        for fn in (a, b):  # the warm-up: imports, caches and the pools' threads are paid here
            profiled_run(fn)
        n = _calibrated(a, b, min_run_s)
    elif isinstance(loops, int) and not isinstance(loops, bool) and loops >= 1:
        n = loops
        profiled_run(a)
        profiled_run(b)
    else:
        raise ValueError(f"loops must be a positive integer or 'auto', got {loops!r}")
    fns = (a, b)
    sides: tuple[list[Trace], list[Trace]] = ([], [])
    for k in range(runs):
        for side in pair_order(k):
            sides[side].append(profiled_run(fns[side], n))
    c = compare(sides[0], sides[1], label_a=label_a, label_b=label_b, paired=True)
    c.notes.insert(0, f"interleaved: {label_a} and {label_b} ran alternately, {runs} runs each of {n} call(s)")
    return c
