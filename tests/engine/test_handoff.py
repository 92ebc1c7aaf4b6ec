"""The engine's timed work queue (``opprof.engine.handoff``): a FIFO like ``queue.SimpleQueue`` whose
parked getters are timed. Known answers: a getter parked before the put is woken after it and holds
the GIL after waking; a getter that finds an item logs nothing; a hand-off while another thread spins
in Python waits for the GIL about one switch interval."""

from __future__ import annotations

import sys
import threading
import time
from queue import SimpleQueue

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opprof.engine import handoff
from tests.helpers import retried

needs_compiled = pytest.mark.skipif(not handoff.AVAILABLE, reason=f"hand-offs not timed here: {handoff.WHY_NOT}")


@pytest.fixture
def log() -> object:
    """Hand-off logging on for the test (and off, drained, after)."""
    assert handoff.start()
    handoff.drain()
    yield
    handoff.stop()
    handoff.drain()


@settings(max_examples=50, deadline=None)
@given(ops=st.lists(st.one_of(st.integers(), st.none()), max_size=60))
def test_a_fifo_like_simple_queue(ops: list[int | None]) -> None:
    """put/get/qsize in one thread: the same answers as queue.SimpleQueue (None puts an item; a
    get happens only when the oracle has one, as a get on an empty queue would park)."""
    q, oracle = handoff.work_queue(handoff.QueueKind.ENGINE), SimpleQueue[object]()
    for k, op in enumerate(ops):
        if op is not None and op % 3 == 0 and not oracle.empty():
            assert q.get() == oracle.get()
        else:
            item = (k, op)
            q.put(item)
            oracle.put(item)
        assert q.qsize() == oracle.qsize()


def test_items_cross_threads_in_order_and_none_is_lost() -> None:
    q = handoff.work_queue(handoff.QueueKind.CUSTOM)
    got: list[int] = []

    def consume() -> None:
        while (x := q.get()) is not None:
            got.append(x)

    th = threading.Thread(target=consume)
    th.start()
    for i in range(5000):
        q.put(i)
        if i % 500 == 0:
            time.sleep(0.001)  # the consumer parks now and then
    q.put(None)
    th.join(10)
    assert not th.is_alive() and got == list(range(5000))


def test_items_are_released_with_the_queue() -> None:
    q = handoff.work_queue(handoff.QueueKind.ENGINE)
    item = object()
    before = sys.getrefcount(item)
    q.put(item)
    assert sys.getrefcount(item) == before + 1
    del q
    assert sys.getrefcount(item) == before


def _parked_getter(settle: float) -> tuple[handoff.WorkQueue, threading.Thread]:
    """A thread parked in get() on a new engine queue for at least ``settle`` s."""
    q = handoff.work_queue(handoff.QueueKind.ENGINE)
    parked = threading.Event()
    th = threading.Thread(target=lambda: (parked.set(), q.get()))
    th.start()
    parked.wait()
    time.sleep(settle)
    return q, th


@needs_compiled
def test_a_parked_getter_is_timed(log: object) -> None:
    """Known answer: the getter parks at least 20 ms before the put; then put <= woke <= gil."""
    q, th = _parked_getter(0.02)
    put_at = time.monotonic_ns()
    q.put(1)
    th.join(5)
    r = handoff.drain().records
    assert len(r) == 1
    rec = r[0]
    assert int(rec["native_id"]) == th.native_id
    assert int(rec["queue"]) == handoff.QueueKind.ENGINE
    assert int(rec["put"]) - int(rec["park"]) >= 15_000_000
    assert abs(int(rec["put"]) - put_at) < 5_000_000
    assert int(rec["put"]) <= int(rec["woke"]) <= int(rec["gil"])


@needs_compiled
def test_a_get_that_finds_an_item_is_no_hand_off(log: object) -> None:
    q = handoff.work_queue(handoff.QueueKind.ENGINE)
    for i in range(100):
        q.put(i)
    assert [q.get() for _ in range(100)] == list(range(100))
    assert len(handoff.drain()) == 0


@needs_compiled
def test_nothing_is_logged_while_not_profiling() -> None:
    handoff.stop()
    handoff.drain()
    q = handoff.work_queue(handoff.QueueKind.ENGINE)
    th = threading.Thread(target=q.get)
    th.start()
    time.sleep(0.01)
    q.put(1)
    th.join(5)
    assert len(handoff.drain()) == 0


@needs_compiled
def test_waking_behind_a_spinning_holder_waits_for_the_gil(log: object) -> None:
    """Known answer: the putter spins in pure Python for 30 ms right after the put, so the woken
    getter waits for the GIL about one switch interval (5 ms), longer than the OS took to wake it."""

    def check() -> None:
        handoff.drain()
        q, th = _parked_getter(0.01)
        q.put(1)
        end = time.perf_counter() + 0.03
        while time.perf_counter() < end:
            pass
        th.join(5)
        (rec,) = handoff.drain().records.tolist()
        _, put, woke, gil, _, _ = rec
        interval = sys.getswitchinterval() * 1e9
        assert gil - woke >= 0.5 * interval, (woke - put, gil - woke)
        assert gil - woke > woke - put, (woke - put, gil - woke)

    retried(check)


def test_the_pure_path_is_a_simple_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handoff, "_native", None)
    assert isinstance(handoff.work_queue(handoff.QueueKind.ENGINE), SimpleQueue)
    assert handoff.start() is False
    assert len(handoff.drain()) == 0


def test_ping_pong_measures_one_way() -> None:
    us = handoff.ping_pong_us(200)
    assert 0.5 < us < 50_000
    assert np.isfinite(us)


def test_an_item_stays_queued_until_its_taker_holds_the_gil() -> None:
    """As queue.SimpleQueue: a woken getter takes its item only once it runs Python again, so a
    thread holding the GIL meanwhile still sees it queued (qsize() answers as SimpleQueue's does)."""
    q, th = _parked_getter(0.01)
    q.put(1)
    # Still holding the GIL (no blocking call since the put): the getter cannot have taken it yet.
    end = time.perf_counter() + 0.002
    while time.perf_counter() < end:
        pass
    assert q.qsize() == 1
    th.join(5)
    assert q.qsize() == 0


def test_a_custom_op_pool_of_two_runs_its_first_burst_of_two_at_once() -> None:
    import opprof as mx
    from opprof import nd

    ran: list[tuple[str, float, float]] = []

    class Nap(mx.operator.CustomOp):
        def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
            t0 = time.perf_counter()
            time.sleep(0.05)
            ran.append((threading.current_thread().name, t0, time.perf_counter()))
            self.assign(out_data[0], req[0], in_data[0] + 1)

    @mx.operator.register("HandoffBurstNap")
    class NapProp(mx.operator.CustomOpProp):
        def create_operator(self, ctx, shapes, dtypes):  # type: ignore[no-untyped-def]
            return Nap()

    def check() -> None:
        mx.set_engine("threaded", workers=2, custom_workers=2)
        try:
            x = nd.ones((2, 2))
            nd.Custom(x, op_type="HandoffBurstNap").wait_to_read()  # one thread exists
            ran.clear()
            a, b = nd.Custom(x, op_type="HandoffBurstNap"), nd.Custom(x, op_type="HandoffBurstNap")
            nd.waitall()
            assert float(a.asnumpy()[0, 0]) == float(b.asnumpy()[0, 0]) == 2.0
        finally:
            mx.set_engine("threaded")
        (n1, s1, e1), (n2, s2, e2) = ran
        assert n1 != n2 and max(s1, s2) < min(e1, e2), ran  # on two threads, overlapping

    retried(check)
