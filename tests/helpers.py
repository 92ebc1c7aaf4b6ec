"""Test helpers shared by several test files (import as ``from tests.helpers import ...``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

import opprof as mx
from opprof.engine import EngineObserver
from opprof.trace import Span, Trace
from opprof.trace.records import GC_CATEGORY


class PushRecorder(EngineObserver):
    """An engine observer that remembers every pushed op (and still runs it)."""

    def __init__(self) -> None:
        self.oprs: list[Any] = []

    def on_push(self, opr: Any) -> None:
        self.oprs.append(opr)

    def run(self, opr: Any, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    @property
    def names(self) -> list[str]:
        return [o.name for o in self.oprs]

    @property
    def backward_names(self) -> list[str]:
        return [n for n in self.names if n.startswith("_backward_")]


@contextmanager
def record_pushes() -> Iterator[PushRecorder]:
    """Record the ops pushed to the current engine inside the block (waits for them at the end)."""
    eng = mx.get_engine()
    rec = PushRecorder()
    prev = eng.observer
    eng.observer = rec
    try:
        yield rec
    finally:
        try:
            mx.nd.waitall()
        finally:
            eng.observer = prev


def engine_spans(trace: Trace) -> list[Span]:
    """The spans of the engine's records: all but the garbage collector's, which come whenever a
    collection of a millisecond or more runs (a full one, in a suite's large heap) and take no
    slot of the event cap. Counts of ops, of drops and of lanes are read from these."""
    return [s for s in trace.spans if s.cat != GC_CATEGORY]


def spin(seconds: float) -> None:
    """Pure Python for ``seconds``: holds the GIL, dropping it only at the switch interval (a
    known answer's GIL holder; a sleep releases it instead)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def register_op(name: str, op: type[mx.operator.CustomOp]) -> None:
    """Register custom op ``op`` under ``name``, its prop making one per call (the tests' ops take no arguments)."""

    class _Prop(mx.operator.CustomOpProp):
        def create_operator(self, ctx, shapes, dtypes):  # type: ignore[no-untyped-def]
            return op()

    mx.operator.register(name)(_Prop)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (for a test server)."""
    from benchmarks.jupyter import free_port as free

    return free()


def stop_process(proc: Any, grace_s: float = 10) -> None:
    """Terminate a test server by its PID, then kill it if it lingers past ``grace_s``."""
    from benchmarks.jupyter import stop_process as stop

    stop(proc, grace_s)


# The op of the MXNet 1.9.1 trace script (tests/data/mxnet-1.9.1-custom-op.py), for the tests that mirror it.
class MyAddOne(mx.operator.CustomOp):
    """The op of the MXNet trace script: out = (2 tanh(x) + 1) * 3, grad = 3 * out_grad."""

    def forward(self, is_train, req, in_data, out_data, aux):
        x = in_data[0]
        y = np.tanh(x.asnumpy()) * 2
        z = mx.nd.array(y) + 1
        z = z * 3
        self.assign(out_data[0], req[0], z)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], out_grad[0] * 3)


class MyAddOneProp(mx.operator.CustomOpProp):
    def __init__(self):
        super().__init__(need_top_grad=True)

    def list_arguments(self):
        return ["data"]

    def list_outputs(self):
        return ["output"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return MyAddOne()


def profiled_naps(engine: Any, n: int, nap_s: float) -> tuple[Any, float]:
    """``n`` independent ops that each sleep ``nap_s`` (the GIL released), pushed in a loop on
    ``engine`` and profiled: the trace and the wall time (s) of the profiled block."""
    vs = [engine.new_var() for _ in range(n)]
    t = time.perf_counter()
    with mx.profile() as prof:
        for v in vs:
            engine.push(lambda: time.sleep(nap_s), writes=[v], name="nap")
        mx.nd.waitall()
    took = time.perf_counter() - t
    assert prof.trace is not None
    return prof.trace, took


def retried(attempt: Callable[[], None], tries: int = 3, pause: float = 0.0) -> None:
    """Run a timing test until it passes once, at most ``tries`` times. Its known answers hold on a
    machine of its own (CI's); other processes on these 2 cores can push one run off them (a holder
    the OS preempts keeps the GIL longer, a waiter it leaves off a CPU shows RUNNABLE, not WAIT).
    ``pause`` seconds between tries let a passing burst of other work (the processes the suite's
    browser and notebook tests leave winding down) end first."""
    for i in range(tries):
        try:
            attempt()
            return
        except AssertionError:
            if i == tries - 1:
                raise
            time.sleep(pause)
