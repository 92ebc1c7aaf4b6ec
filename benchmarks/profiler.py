"""Profiler cost, as ratios and per-item medians measured in one run.

Run: ``python benchmarks/profiler.py``. Figures are medians of ``--repeats`` interleaved runs.

* naming: the hot-path part of naming an op (``Recorder.on_push``: who pushed it, inside which
  custom op) for a regular op and for a sub-op pushed inside a custom op's Python; the string
  ``Type::op`` itself is made once per span at build time, measured separately.
* on/off: a chain of ``--ops`` small ops and ``--calls`` trivial custom ops, profiler off vs on.
* export: a synthetic trace of ``--spans`` spans to Chrome JSON bytes (orjson), and back.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np

import opprof as mx
from opprof import operator as op_mod
from opprof.engine import Var, _Opr
from opprof.recorder import Recorder
from opprof.trace import Span, ThreadInfo, Trace


class _AddOne(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        self.assign(out_data[0], req[0], in_data[0] + 1)


@mx.operator.register("ProfBenchAddOne")
class _AddOneProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, in_shapes, in_dtypes):  # type: ignore[no-untyped-def]
        return _AddOne()


def naming_cost_ns(n: int, inside: bool) -> float:
    rec = Recorder()
    opr = _Opr(lambda: None, (), (Var(),), "_plus_scalar", False, False, None)
    inv = op_mod.Invocation("MyAddOne", 1, False)
    prev = getattr(op_mod._tls, "invocation", None)
    op_mod._tls.invocation = inv if inside else None
    try:
        on_push = rec.on_push
        t = time.perf_counter_ns()
        for _ in range(n):
            on_push(opr)
        return (time.perf_counter_ns() - t) / n
    finally:
        op_mod._tls.invocation = prev


def _run(work: Callable[[], None], profiled: bool) -> tuple[float, float]:
    """(seconds until the engine is idle, seconds to build the trace afterwards)."""
    mx.nd.waitall()
    prof = mx.Profiler() if profiled else None
    t = time.perf_counter()
    if prof is not None:
        prof.start()
    work()
    mx.nd.waitall()
    recorded = time.perf_counter() - t
    if prof is None:
        return recorded, 0.0
    t = time.perf_counter()
    prof.stop()
    return recorded, time.perf_counter() - t


def chain(ops: int, profiled: bool) -> tuple[float, float]:
    a = mx.nd.ones((10, 10))

    def work() -> None:
        nonlocal a
        for _ in range(ops):
            a = a + 1

    return _run(work, profiled)


def custom_calls(calls: int, profiled: bool) -> tuple[float, float]:
    a = mx.nd.ones((10, 10))

    def work() -> None:
        nonlocal a
        for _ in range(calls):
            a = mx.nd.Custom(a, op_type="ProfBenchAddOne")

    return _run(work, profiled)


def synthetic_trace(n: int) -> Trace:
    threads = [ThreadInfo(i + 1, f"opprof-engine-{i}") for i in range(4)]
    spans = [Span("_plus_scalar", "operator", 1 + i % 4, i * 1000, i * 1000 + 700) for i in range(n)]
    return Trace(threads=threads, spans=spans)


def median(fn: Callable[[], float], repeats: int) -> float:
    return statistics.median(fn() for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=20_000)
    parser.add_argument("--calls", type=int, default=2_000)
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    machine = f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs"
    print(f"# opprof profiler benchmark: {machine}, numpy {np.__version__}; medians of {args.repeats} runs\n")

    regular = median(lambda: naming_cost_ns(200_000, False), args.repeats)
    sub = median(lambda: naming_cost_ns(200_000, True), args.repeats)
    print(f"naming, hot path, regular op : {regular / 1e3:.3f} us  (seed's bar < 1 us; goal <= 0.1 us)")
    print(f"naming, hot path, sub-op     : {sub / 1e3:.3f} us  (seed's bar < 10 us; goal <= 0.5 us)")

    for kind in ("threaded", "naive"):
        mx.set_engine(kind)
        for label, fn, n, unit in (("small ops", chain, args.ops, "op"), ("custom ops", custom_calls, args.calls, "call")):
            runs = [(fn(n, False), fn(n, True)) for _ in range(args.repeats)]
            off = statistics.median(r[0][0] for r in runs)
            on = statistics.median(r[1][0] for r in runs)
            build = statistics.median(r[1][1] for r in runs)
            goal = " (MXNet 1.4-2.0x; goal <= 1.15x)" if unit == "op" else ""
            print(
                f"{kind:8s} {n} {label}: off {off / n * 1e6:6.2f} us/{unit}, on {on / n * 1e6:6.2f} us/{unit}, "
                f"on/off {on / off:.2f}x{goal}; building the trace afterwards {build / n * 1e6:.2f} us/{unit}"
            )
    mx.set_engine("threaded")

    trace = synthetic_trace(args.spans)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "big.json")
        t = time.perf_counter()
        trace.save(path)
        save_s = time.perf_counter() - t
        size = os.path.getsize(path)
        t = time.perf_counter()
        back = mx.trace.load(path)
        load_s = time.perf_counter() - t
    assert len(back.spans) == args.spans
    print(
        f"export {args.spans} spans to Chrome JSON (orjson): {save_s:.2f} s, {size / 1e6:.1f} MB (goal <= 3 s); "
        f"load {load_s:.2f} s"
    )


if __name__ == "__main__":
    main()
