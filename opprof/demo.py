"""The built-in workload: a small regression model with two custom operators, trained a few steps.

``python -m opprof.demo`` (what ``make demo`` runs) trains it under the profiler and prints the
loss per step, the busiest ops and, per custom operator, how its wall time splits into python,
sub-operators and waiting; the Chrome trace goes to ``opprof-demo/trace.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

import numpy as np

from opprof import engine, nd
from opprof.nd import autograd, operator
from opprof.profiler import profile
from opprof.trace.text import why_text


class ScaledTanh(operator.CustomOp):
    """``tanh(x) * scale + 1``: NumPy on the custom-op thread, then NDArray sub-operators."""

    def __init__(self, scale: float) -> None:
        self.scale = scale

    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        t = np.tanh(in_data[0].asnumpy())  # pure Python/NumPy part
        y = nd.array(t, dtype=t.dtype) * self.scale + 1  # sub-operators
        self.assign(out_data[0], req[0], y)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):  # type: ignore[no-untyped-def]
        t = (out_data[0] - 1) / self.scale  # tanh(x), recovered from the output
        self.assign(in_grad[0], req[0], out_grad[0] * (1 - t * t) * self.scale)


@operator.register("ScaledTanh")
class ScaledTanhProp(operator.CustomOpProp):
    def __init__(self, scale: str = "1.0") -> None:
        super().__init__(need_top_grad=True)
        self.scale = float(scale)  # MXNet passes keyword arguments as strings

    def create_operator(self, ctx, in_shapes, in_dtypes):  # type: ignore[no-untyped-def]
        return ScaledTanh(self.scale)


class RowSquaredError(operator.CustomOp):
    """Per-row squared error of two inputs: all sub-operators, no NumPy."""

    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        d = in_data[0] - in_data[1]
        self.assign(out_data[0], req[0], (d * d).sum(axis=1))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):  # type: ignore[no-untyped-def]
        g = (in_data[0] - in_data[1]) * 2 * out_grad[0].reshape((-1, 1))
        self.assign(in_grad[0], req[0], g)
        self.assign(in_grad[1], req[1], -g)


@operator.register("RowSquaredError")
class RowSquaredErrorProp(operator.CustomOpProp):
    def list_arguments(self):  # type: ignore[no-untyped-def]
        return ["pred", "label"]

    def infer_shape(self, in_shape):  # type: ignore[no-untyped-def]
        return in_shape, [(in_shape[0][0],)], []

    def create_operator(self, ctx, in_shapes, in_dtypes):  # type: ignore[no-untyped-def]
        return RowSquaredError()


def train(steps: int = 5, batch: int = 64, features: int = 8, outputs: int = 4, seed: int = 0) -> list[float]:
    """Train the demo model for ``steps`` SGD steps; return the mean loss of each step."""
    rng = np.random.default_rng(seed)
    x = nd.array(rng.normal(size=(batch, features)))
    true_w = rng.normal(size=(features, outputs)) * 0.5
    y = nd.array(np.tanh(x.asnumpy() @ true_w) * 0.5 + 1)
    w = nd.array(rng.normal(size=(features, outputs)) * 0.1)
    w.attach_grad()
    losses = []
    for _ in range(steps):
        with autograd.record():
            h = nd.dot(x, w)
            a = nd.Custom(h, op_type="ScaledTanh", scale=0.5)
            assert isinstance(a, nd.NDArray)  # one output
            loss = nd.Custom(a, y, op_type="RowSquaredError")
            assert isinstance(loss, nd.NDArray)
        loss.backward()
        assert w.grad is not None
        w -= 0.05 * w.grad
        losses.append(float(loss.mean().asscalar()))
    return losses


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m opprof.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    parser.add_argument("--engine", choices=["threaded", "naive"], default="threaded")
    parser.add_argument("--threads", type=int, default=None, help="engine worker threads (default: CPU count)")
    parser.add_argument("--out", default="opprof-demo", help="directory for trace.json (default ./opprof-demo)")
    parser.add_argument("--top", type=int, default=12, help="rows of the per-op table (default 12)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    if args.threads is not None and not 1 <= args.threads <= engine.MAX_POOL_THREADS:
        parser.error(f"--threads must be from 1 to {engine.MAX_POOL_THREADS:,}")

    if args.engine == "threaded":
        engine.set_engine("threaded", workers=args.threads)
    else:
        engine.set_engine("naive")
    t0 = time.perf_counter()
    with profile() as prof:
        losses = train(args.steps)
    elapsed = time.perf_counter() - t0
    trace = prof.trace
    assert trace is not None

    print(f"opprof demo: {args.steps} training steps on the {engine.get_engine().kind} engine in {elapsed * 1e3:.1f} ms")
    recorder = trace.metadata.get("recorder", {})
    if recorder.get("path") == "compiled":
        print("  recorder: compiled (the engine's hooks in C)")
    else:
        print(f"  recorder: pure Python ({recorder.get('why_not', 'no compiled part')})")
    for i, loss in enumerate(losses):
        if i < 3 or i == len(losses) - 1:
            print(f"  step {i + 1:3d}  loss {loss:.5f}")
        elif i == 3:
            print("  ...")

    problems = trace.validate()
    print(f"\ntrace: {trace.n_spans} spans on {len(trace.threads)} threads, {trace.n_flows} flows; ", end="")
    print("valid" if not problems else f"{len(problems)} problems, first: {problems[0]}")
    rows = trace.stats()[: args.top]
    width = max(len(r.name) for r in rows)
    print(f"\ntop {len(rows)} by total time:")
    for r in rows:
        print(f"  {r.name:<{width}}  {r.count:5d} x  total {r.total_ns / 1e6:8.3f} ms  avg {r.avg_ns / 1e3:8.1f} us")
    print("\ncustom operators, where the wall time went:")
    for s in trace.analysis().op_types.rows():
        print(
            f"  {s.name:<28} {s.calls:4d} calls  wall {s.wall_ns / 1e6:8.3f} ms = python {100 * s.python_ns / s.wall_ns:5.1f}%"
            f" + sub-ops {100 * s.subops_ns / s.wall_ns:5.1f}% + waiting {100 * s.waiting_ns / s.wall_ns:5.1f}%"
        )

    print()
    print(why_text(trace))

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "trace.json")
    trace.save(path)
    native = os.path.join(args.out, "trace.opprof")
    trace.save(native)
    print(f"\nChrome trace written to {path}: open it in https://ui.perfetto.dev or chrome://tracing")
    print(f"opprof's own file, with the engine's edges, written to {native}: try `opprof why {native}`")
    if problems or losses[-1] >= losses[0]:
        print("error: invalid trace or the loss did not go down", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
