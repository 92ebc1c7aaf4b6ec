"""Memory recording's cost on top of the profiler (the memory issue: ≤ 5 % more time on the loop of
small ops and of trivial custom ops), and nothing when off.

Each round runs the loop profiled without memory and with it (same engine, same machine minute),
in turn without-with and with-without (the order alternates: the engine's threads poll before they
park, and a run leaves them polling or parked for the next, so a fixed order favoured one side); the
row is the median of the per-round ratios over 25 rounds (7 gave 1.46x and 0.78x for the threaded
custom ops in two runs minutes apart: a run of them is bimodal, 40-150 µs a call; 15 gave 1.11x in
a full run and 1.05x and 0.99x in two runs of the row alone minutes later, 2026-12-06). The
profile's build after ``stop()`` is outside the timed region, as in the profiler section's on/off rows.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import opprof as mx
from opprof.profiler import memory as _memory

from .common import Row, progress
from .profiler import custom_calls  # noqa: F401 - registers ProfBenchAddOne

SECTION = "Memory"
#: The issue's goal: memory recording on top of the profiler, as a ratio of run times.
MEMORY_GOAL = 1.05


def _timed(work: Callable[[], None], memory: bool) -> float:
    mx.nd.waitall()
    prof = mx.Profiler(memory=memory).start()
    t = time.perf_counter()
    work()
    mx.nd.waitall()
    seconds = time.perf_counter() - t
    prof.stop()
    return seconds


def _small(ops: int) -> Callable[[], None]:
    def work() -> None:
        a = mx.nd.ones((10, 10))
        for _ in range(ops):
            a = a + 1

    return work


def _custom(calls: int) -> Callable[[], None]:
    def work() -> None:
        a = mx.nd.ones((10, 10))
        for _ in range(calls):
            a = mx.nd.Custom(a, op_type="ProfBenchAddOne")

    return work


def rows(quick: bool = False, repeats: int | None = None) -> list[Row]:
    ops, calls = (2_000, 200) if quick else (20_000, 2_000)
    rounds = repeats or (1 if quick else 25)
    path = "compiled" if not _memory.COMPILED_WHY_NOT else f"python ({_memory.COMPILED_WHY_NOT})"
    out: list[Row] = []
    try:
        for kind in ("threaded", "naive"):
            mx.set_engine(kind)
            for label, work, count in (("small ops", _small(ops), ops), ("trivial custom ops", _custom(calls), calls)):
                progress(f"memory: {count:,} {label} on the {kind} engine, profiled with memory off/on, {rounds} rounds")
                work()  # warm: threads started, op types registered
                pairs = []
                for k in range(rounds):
                    took = {memory: _timed(work, memory) for memory in ((True, False) if k % 2 else (False, True))}
                    pairs.append((took[False], took[True]))
                ratio = statistics.median(on / off for off, on in pairs)
                off = statistics.median(p[0] for p in pairs)
                on = statistics.median(p[1] for p in pairs)
                unit = label.split()[-1][:-1]  # "op", "op" (per custom op)
                detail = f"profiled {off / count * 1e6:.1f} µs/{unit}, with memory {on / count * 1e6:.1f}; {path} hook"
                out.append(
                    Row(
                        SECTION,
                        f"memory recording on top of the profiler, {count:,} {label}, {kind}",
                        ratio,
                        "x",
                        detail,
                        f"≤ {MEMORY_GOAL}x",
                        ratio <= MEMORY_GOAL,
                    )
                )
    finally:
        mx.set_engine("threaded")
    return out
