"""Engine cost per op and per custom-op invocation, as ratios measured in one run.

Run: ``python benchmarks/engine.py`` (or ``make bench``). Every figure is the median of
``--repeats`` interleaved runs, so a noisy neighbour slows all variants alike; read the ratios.

* chain: ``a = a + 1`` repeated ``--ops`` times then ``waitall()``, on 10x10 and 100x100 float32,
  through the threaded and the naive engine, against plain NumPy doing the same.
* custom op: a trivial custom op (one ``_plus_scalar`` sub-op, then ``assign``), forward only
  and forward + backward, per invocation.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable

import numpy as np

import opprof as mx

MXNET_PER_OP_US = 22.0  # MXNet 1.9.1 Python API, this kind of machine (see the issue)
MXNET_CUSTOM_US = 1000.0


class _AddOne(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        self.assign(out_data[0], req[0], in_data[0] + 1)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):  # type: ignore[no-untyped-def]
        self.assign(in_grad[0], req[0], out_grad[0])


@mx.operator.register("BenchAddOne")
class _AddOneProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, in_shapes, in_dtypes):  # type: ignore[no-untyped-def]
        return _AddOne()


def numpy_chain(n: int, ops: int) -> float:
    x = np.ones((n, n), np.float32)
    t = time.perf_counter()
    for _ in range(ops):
        x = x + 1
    return time.perf_counter() - t


def engine_chain(n: int, ops: int) -> float:
    a = mx.nd.ones((n, n))
    mx.nd.waitall()
    t = time.perf_counter()
    for _ in range(ops):
        a = a + 1
    mx.nd.waitall()
    dt = time.perf_counter() - t
    assert a.asnumpy()[0, 0] == ops + 1
    return dt


def custom_forward(calls: int) -> float:
    a = mx.nd.ones((10, 10))
    mx.nd.waitall()
    t = time.perf_counter()
    for _ in range(calls):
        a = mx.nd.Custom(a, op_type="BenchAddOne")
    mx.nd.waitall()
    dt = time.perf_counter() - t
    assert a.asnumpy()[0, 0] == calls + 1
    return dt


def custom_forward_backward(calls: int) -> float:
    x = mx.nd.ones((10, 10))
    x.attach_grad()
    mx.nd.waitall()
    t = time.perf_counter()
    for _ in range(calls):
        with mx.autograd.record():
            y = mx.nd.Custom(x, op_type="BenchAddOne")
        y.backward()
    mx.nd.waitall()
    dt = time.perf_counter() - t
    assert x.grad.asnumpy()[0, 0] == 1
    return dt


def median_us(fn: Callable[[], float], per: int, repeats: int) -> float:
    return statistics.median(fn() for _ in range(repeats)) / per * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=20_000)
    parser.add_argument("--calls", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    machine = f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs"
    print(f"# opprof engine benchmark: {machine}, numpy {np.__version__}")
    print(f"# medians of {args.repeats} runs; chain of {args.ops} ops, {args.calls} custom-op calls\n")
    rows: list[tuple[str, float, str]] = []
    for n in (10, 100):
        base = median_us(lambda n=n: numpy_chain(n, args.ops), args.ops, args.repeats)
        rows.append((f"numpy x + 1, {n}x{n}", base, "1.00x numpy"))
        for kind in ("threaded", "naive"):
            mx.set_engine(kind)
            us = median_us(lambda n=n: engine_chain(n, args.ops), args.ops, args.repeats)
            note = f"{us / base:.2f}x numpy, {MXNET_PER_OP_US / us:.1f}x cheaper than MXNet"
            rows.append((f"{kind} a = a + 1, {n}x{n}", us, note))
    for kind in ("threaded", "naive"):
        mx.set_engine(kind)
        us = median_us(lambda: custom_forward(args.calls), args.calls, args.repeats)
        rows.append((f"{kind} custom op, forward", us, f"{MXNET_CUSTOM_US / us:.1f}x cheaper than MXNet (goal >= 4x)"))
        us = median_us(lambda: custom_forward_backward(args.calls), args.calls, args.repeats)
        rows.append((f"{kind} custom op, forward+backward", us, ""))
    mx.set_engine("threaded")

    width = max(len(r[0]) for r in rows)
    print(f"{'case':<{width}}  {'us/op':>9}  ratio")
    for name, us, note in rows:
        print(f"{name:<{width}}  {us:9.2f}  {note}")


if __name__ == "__main__":
    main()
