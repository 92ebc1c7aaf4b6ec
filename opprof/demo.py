"""The built-in workload: a small regression model with two custom operators, trained a few steps.

``python -m opprof.demo`` (what ``make demo`` runs) trains it on the current engine and prints the
loss per step and which engine ops ran, by name, so the custom operators and their sub-operators
can be seen. The same workload is what the profiler, the widget and the benchmarks look at.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import opprof as mx
from opprof.operator import current_invocation


class ScaledTanh(mx.operator.CustomOp):
    """``tanh(x) * scale + 1``: NumPy on the custom-op thread, then NDArray sub-operators."""

    def __init__(self, scale: float) -> None:
        self.scale = scale

    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        t = np.tanh(in_data[0].asnumpy())  # pure Python/NumPy part
        y = mx.nd.array(t, dtype=t.dtype) * self.scale + 1  # sub-operators
        self.assign(out_data[0], req[0], y)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):  # type: ignore[no-untyped-def]
        t = (out_data[0] - 1) / self.scale  # tanh(x), recovered from the output
        self.assign(in_grad[0], req[0], out_grad[0] * (1 - t * t) * self.scale)


@mx.operator.register("ScaledTanh")
class ScaledTanhProp(mx.operator.CustomOpProp):
    def __init__(self, scale: str = "1.0") -> None:
        super().__init__(need_top_grad=True)
        self.scale = float(scale)  # MXNet passes keyword arguments as strings

    def create_operator(self, ctx, in_shapes, in_dtypes):  # type: ignore[no-untyped-def]
        return ScaledTanh(self.scale)


class RowSquaredError(mx.operator.CustomOp):
    """Per-row squared error of two inputs: all sub-operators, no NumPy."""

    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        d = in_data[0] - in_data[1]
        self.assign(out_data[0], req[0], (d * d).sum(axis=1))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):  # type: ignore[no-untyped-def]
        g = (in_data[0] - in_data[1]) * 2 * out_grad[0].reshape((-1, 1))
        self.assign(in_grad[0], req[0], g)
        self.assign(in_grad[1], req[1], -g)


@mx.operator.register("RowSquaredError")
class RowSquaredErrorProp(mx.operator.CustomOpProp):
    def list_arguments(self):  # type: ignore[no-untyped-def]
        return ["pred", "label"]

    def infer_shape(self, in_shape):  # type: ignore[no-untyped-def]
        return in_shape, [(in_shape[0][0],)], []

    def create_operator(self, ctx, in_shapes, in_dtypes):  # type: ignore[no-untyped-def]
        return RowSquaredError()


class _OpCounter:
    """Counts engine pushes by display name (``Type::op`` inside a custom op's Python)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def on_push(self, opr: Any) -> None:
        inv = current_invocation()
        # The custom op itself is pushed from outside its Python; everything pushed inside is its own.
        name = opr.name if inv is None else f"{inv.name}::{opr.name}"
        with self._lock:
            self.counts[name] += 1

    def run(self, opr: Any, fn: Callable[..., Any], *args: Any) -> None:
        fn(*args)


def train(steps: int = 5, batch: int = 64, features: int = 8, outputs: int = 4, seed: int = 0) -> list[float]:
    """Train the demo model for ``steps`` SGD steps; return the mean loss of each step."""
    rng = np.random.default_rng(seed)
    x = mx.nd.array(rng.normal(size=(batch, features)))
    true_w = rng.normal(size=(features, outputs)) * 0.5
    y = mx.nd.array(np.tanh(x.asnumpy() @ true_w) * 0.5 + 1)
    w = mx.nd.array(rng.normal(size=(features, outputs)) * 0.1)
    w.attach_grad()
    losses = []
    for _ in range(steps):
        with mx.autograd.record():
            h = mx.nd.dot(x, w)
            a = mx.nd.Custom(h, op_type="ScaledTanh", scale=0.5)
            loss = mx.nd.Custom(a, y, op_type="RowSquaredError")
        loss.backward()
        w -= 0.05 * w.grad
        losses.append(float(loss.mean().asscalar()))
    return losses


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m opprof.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    parser.add_argument("--engine", choices=["threaded", "naive"], default="threaded")
    parser.add_argument("--threads", type=int, default=None, help="engine worker threads (default: CPU count)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")

    engine = mx.set_engine(args.engine, workers=args.threads) if args.engine == "threaded" else mx.set_engine("naive")
    counter = _OpCounter()
    engine.observer = counter
    t0 = time.perf_counter()
    try:
        losses = train(args.steps)
        mx.nd.waitall()
    finally:
        engine.observer = None
    elapsed = time.perf_counter() - t0

    print(f"opprof demo: {args.steps} training steps on the {engine.kind} engine in {elapsed * 1e3:.1f} ms")
    for i, loss in enumerate(losses):
        if i < 3 or i == len(losses) - 1:
            print(f"  step {i + 1:3d}  loss {loss:.5f}")
        elif i == 3:
            print("  ...")
    print(f"\n{sum(counter.counts.values())} engine ops pushed, by name:")
    width = max(len(n) for n in counter.counts)
    for name, n in sorted(counter.counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {name:<{width}}  {n:6d}")
    if losses[-1] >= losses[0]:
        print("warning: the loss did not go down", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
