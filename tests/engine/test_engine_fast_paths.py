"""The engines' fast paths for front-end pushes (issue 19) do what the general path does.

``Engine.push_op`` registers (and, on the naive engine, runs and completes) an op in one frame when
nothing special applies; everything else goes the general way. These tests pin the cases where the
two could differ: a busy var, a failed var, an observer, and the custom-op pool's shutdown.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

import opprof as mx
from opprof.engine import EngineError, get_engine
from opprof.engine.threaded import CustomPool, ThreadedEngine
from tests.helpers import record_pushes, register_op, retried

# Every test on both engines (the ``engine`` fixture in tests/conftest.py).
pytestmark = pytest.mark.usefixtures("engine")


def test_push_op_orders_after_a_busy_var() -> None:
    eng = get_engine()
    v, w = eng.new_var(), eng.new_var()
    order: list[str] = []
    gate = threading.Event()

    def slow(done: Any) -> None:  # an async op holds ``v`` until another thread completes it
        threading.Thread(target=lambda: (gate.wait(5), order.append("write v"), done()), daemon=True).start()

    if eng.kind == "naive":
        gate.set()  # the naive engine's push_async returns only once the op is complete
    eng.push_async(slow, (), (v,), "slow")
    eng.push_op(lambda: order.append("read v"), (v,), (w,), "reader")
    gate.set()
    eng.wait_for_all()
    assert order == ["write v", "read v"]


def test_push_op_skips_an_op_whose_input_failed() -> None:
    y = mx.nd.ones((2, 2)) / 1
    eng = get_engine()

    def fail() -> None:
        raise ValueError("boom")

    eng.push(fail, (), (y.var,), "fail")
    ran: list[bool] = []
    z = mx.nd.zeros((2, 2))
    eng.push_op(lambda: ran.append(True), (y.var,), (z.var,), "reader")  # must be skipped, not run
    with pytest.raises(ValueError, match="boom"):
        z.wait_to_read()
    assert ran == []
    w = mx.nd.ones((2, 2)) + 1  # the engine goes on working
    np.testing.assert_array_equal(w.asnumpy(), np.full((2, 2), 2.0))


def test_push_op_refuses_a_deleted_var() -> None:
    eng = get_engine()
    v, w = eng.new_var(), eng.new_var()
    eng.delete_var(v)
    eng.wait_for_all()
    with pytest.raises(EngineError, match="deleted"):
        eng.push_op(lambda: None, (v,), (w,), "late")


def test_an_observer_hears_fast_path_ops_as_the_general_path_reports_them() -> None:
    a = mx.nd.ones((3, 3))
    with record_pushes() as seen:
        b = a + 1
        c = b * 2
        d = c - a
    assert d.asnumpy()[0, 0] == 3.0
    assert seen.names == ["_plus_scalar", "_mul_scalar", "elemwise_sub"]
    seqs = [o.seq for o in seen.oprs]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3
    assert seen.oprs[2].reads == (c.var, a.var) and seen.oprs[2].writes == (d.var,)


def test_profiled_fast_path_ops_become_spans() -> None:
    a = mx.nd.ones((3, 3))
    with mx.profile() as prof:
        for _ in range(5):
            a = a + 1
    assert a.asnumpy()[0, 0] == 6.0
    trace = prof.trace
    assert trace.validate() == []
    names = [s.name for s in trace.spans if s.name == "_plus_scalar"]
    assert len(names) == 5


def test_custom_pool_close_does_not_hang_when_a_task_finishes_during_it() -> None:
    # close() queues one stop token per thread; a worker finishing its task meanwhile used to count
    # the tokens as work and start a thread that took one, leaving another worker waiting forever.
    pool = CustomPool(2, "test-pool-")
    started = [threading.Event(), threading.Event()]
    release = [threading.Event(), threading.Event()]

    def task(i: int) -> None:
        started[i].set()
        release[i].wait(5)

    pool.submit(lambda: task(0))
    assert started[0].wait(5)  # taken (a thread just started counts as idle until it takes a task)
    pool.submit(lambda: task(1))
    assert started[1].wait(5)  # both workers busy
    closer = threading.Thread(target=pool.close, daemon=True)
    closer.start()
    time.sleep(0.05)  # both tokens queued while the tasks still run
    release[0].set()  # the first worker finishes: it must not start a third thread
    time.sleep(0.05)
    release[1].set()
    closer.join(10)
    assert not closer.is_alive(), "CustomPool.close() hung"


def _overlap(ran: list[tuple[str, float, float]], n: int) -> None:
    """``n`` runs, each on its own thread, all running at one moment (the latest start before the earliest end)."""
    assert len(ran) == n, ran
    assert len({name for name, _, _ in ran}) == n, ran
    assert max(s for _, s, _ in ran) < min(e for _, _, e in ran), ran


def test_a_fresh_custom_pool_of_three_runs_its_first_burst_of_three_at_once() -> None:
    # A thread that had just taken a task still counted as idle until it got the pool's lock, so
    # the second submit started no thread: a fresh pool of 3 ran a burst of 3 as two, then one.
    def attempt() -> None:
        pool = CustomPool(3, "test-burst-")
        ran: list[tuple[str, float, float]] = []
        done = threading.Semaphore(0)

        def task() -> None:
            t0 = time.perf_counter()
            time.sleep(0.03)
            ran.append((threading.current_thread().name, t0, time.perf_counter()))
            done.release()

        try:
            for _ in range(3):
                pool.submit(task)
            for _ in range(3):
                assert done.acquire(timeout=5)
        finally:
            pool.close()
        _overlap(ran, 3)

    retried(attempt)


_NAPS: list[tuple[str, float, float]] = []  # (thread, start, end) of each _Nap.forward


class _Nap(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        time.sleep(0.03)
        _NAPS.append((threading.current_thread().name, t0, time.perf_counter()))
        self.assign(out_data[0], req[0], in_data[0] + 1)


register_op("FastPathsBurstNap", _Nap)


def test_a_fresh_engines_custom_pool_of_three_runs_three_custom_ops_at_once() -> None:
    def attempt() -> None:
        eng = ThreadedEngine(custom_workers=3)
        try:
            with mx.engine.use(eng):
                xs = [mx.nd.ones((2, 2)) for _ in range(3)]
                _NAPS.clear()
                ys = [mx.nd.Custom(x, op_type="FastPathsBurstNap") for x in xs]
                mx.nd.waitall()
                assert [float(y.asnumpy()[0, 0]) for y in ys] == [2.0] * 3
        finally:
            eng.shutdown()
        _overlap(list(_NAPS), 3)

    retried(attempt)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32, np.int64, np.uint8])
@pytest.mark.parametrize("scalar", [3, 2.5])
def test_scalar_ops_keep_the_arrays_dtype_and_numpys_values(dtype: Any, scalar: Any) -> None:
    # Float arrays take the kernel path with ``out`` by position (no cast asked for); other dtypes
    # keep MXNet's rule, the result cast back to the array's dtype. Both must agree with NumPy.
    x = np.arange(1, 13, dtype=dtype).reshape(3, 4)
    a = mx.nd.array(x, dtype=dtype)
    got = {"+": a + scalar, "-": a - scalar, "*": a * scalar, "/": a / scalar, "r-": scalar - a, "r/": scalar / a}
    ufuncs = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide, "r-": np.subtract, "r/": np.true_divide}
    for sym, fn in ufuncs.items():
        want = np.empty_like(x)
        args = (scalar, x) if sym.startswith("r") else (x, scalar)
        fn(*args, out=want, casting="unsafe")
        assert got[sym].dtype == dtype, sym
        np.testing.assert_array_equal(got[sym].asnumpy(), want, err_msg=sym)


def test_a_kernel_op_that_fails_fails_its_output_and_the_engine_goes_on() -> None:
    eng = get_engine()
    src, dst = np.ones(3), np.empty(3)
    a, b = eng.new_var(), eng.new_var()
    # A ufunc bound to arrays that cannot broadcast: the kernel itself raises, as NumPy would.
    eng.push_op(lambda: np.add(src, np.ones(4), dst), (a,), (b,), "bad", True)
    with pytest.raises(ValueError, match="broadcast"):
        eng.wait_for_var(b)
    np.testing.assert_array_equal((mx.nd.ones((2,)) + 1).asnumpy(), [2.0, 2.0])


def test_a_custom_pool_task_that_raises_is_reported_and_the_thread_stays() -> None:
    # A task that raised used to end its thread, which the pool went on counting as one of its
    # size: a pool of 1 then never ran another task.
    pool = CustomPool(1, "test-raise-")
    seen: list[BaseException | None] = []
    hook, threading.excepthook = threading.excepthook, lambda args: seen.append(args.exc_value)
    try:
        pool.submit(lambda: 1 / 0)
        ran = threading.Event()
        pool.submit(ran.set)
        assert ran.wait(5), "the pool's only thread died with the task that raised"
    finally:
        threading.excepthook = hook
        pool.close()
    assert len(seen) == 1 and isinstance(seen[0], ZeroDivisionError)


_STARTS: list[float] = []  # perf_counter at each _Stamp.forward's start


class _Stamp(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        _STARTS.append(time.perf_counter())
        self.assign(out_data[0], req[0], in_data[0] + 1)


register_op("FastPathsStamp", _Stamp)


class _SlowToReturn(mx.engine.EngineObserver):
    """Wraps each op and, once it has run, sleeps 20 ms (the GIL released) before it returns."""

    def __init__(self) -> None:
        self.returned: dict[str, float] = {}

    def run(self, opr: mx.engine.Opr, fn: Any, *args: Any) -> None:
        fn(*args)
        time.sleep(0.02)
        self.returned[opr.name] = time.perf_counter()


def test_a_custom_ops_python_is_handed_to_its_thread_when_the_worker_is_done_with_its_op() -> None:
    # The worker holds the GIL from the hand-over until it parks again; a custom-op thread woken
    # before that only waits for it (the hop to a custom-op thread was 2x a ping-pong's). Here the
    # worker's op takes 20 ms to return with the GIL free: handed over inside the op, the Python
    # would start during that sleep.
    eng = ThreadedEngine(workers=1, custom_workers=1)
    obs = _SlowToReturn()
    try:
        with mx.engine.use(eng):
            eng.add_observer(obs)
            _STARTS.clear()
            y = mx.nd.Custom(mx.nd.ones((2, 2)), op_type="FastPathsStamp")
            assert float(y.asnumpy()[0, 0]) == 2.0
    finally:
        eng.shutdown()
    (started,) = _STARTS
    assert started >= obs.returned["FastPathsStamp"]
