"""The engine's timed work queue (``opprof.engine.handoff``): a FIFO like ``queue.SimpleQueue`` whose
parked getters are timed. Known answers: a getter parked before the put is woken after it and holds
the GIL after waking; a getter that finds an item logs nothing; a hand-off while another thread spins
in Python waits for the GIL about one switch interval."""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
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


def _waiting_in(wait: Callable[[], object], settle: float) -> threading.Thread:
    """A thread that has been in ``wait()`` for at least ``settle`` s."""
    began = threading.Event()
    th = threading.Thread(target=lambda: (began.set(), wait()))
    th.start()
    began.wait()
    time.sleep(settle)
    return th


def _parked_getter(settle: float) -> tuple[handoff.WorkQueue, threading.Thread]:
    """A thread parked in get() on a new engine queue for at least ``settle`` s."""
    q = handoff.work_queue(handoff.QueueKind.ENGINE)
    return q, _waiting_in(q.get, settle)


def _waiting_at_gate(settle: float) -> tuple[handoff.Gate, threading.Thread]:
    """A thread waiting at a new closed gate for at least ``settle`` s."""
    gate = handoff.closed_gate()
    return gate, _waiting_in(gate.acquire, settle)


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
def test_a_wait_in_progress_is_an_open_wait_until_it_ends(log: object) -> None:
    """A getter parked on a queue, and a thread at a closed gate, have logged nothing yet: each is an
    open wait from its park (its thread, its queue's kind), and is not once its item came or its
    gate opened (then it is a logged hand-off instead)."""
    before = time.monotonic_ns()
    q, th = _parked_getter(0.0)
    gate, waiter = _waiting_at_gate(0.02)
    opened = handoff.open_waits()
    mine = {int(r["native_id"]): r for r in opened if int(r["native_id"]) in (th.native_id, waiter.native_id)}
    assert set(mine) == {th.native_id, waiter.native_id}, opened
    assert int(mine[th.native_id]["queue"]) == handoff.QueueKind.ENGINE
    assert int(mine[waiter.native_id]["queue"]) == handoff.QueueKind.WAIT
    for r in mine.values():
        assert before <= int(r["park"]) <= time.monotonic_ns() - 15_000_000
    assert len(handoff.drain()) == 0  # nothing logged of them yet
    q.put(1)
    gate.release()
    th.join(5)
    waiter.join(5)
    assert not {int(r["native_id"]) for r in handoff.open_waits()} & {th.native_id, waiter.native_id}
    assert {int(n) for n in handoff.drain().records["native_id"]} == {th.native_id, waiter.native_id}


@needs_compiled
def test_a_wait_begun_while_not_logging_is_no_open_wait() -> None:
    handoff.stop()
    q, th = _parked_getter(0.01)
    try:
        assert th.native_id not in {int(r["native_id"]) for r in handoff.open_waits()}
    finally:
        q.put(1)
        th.join(5)


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


def _my_thread_state() -> int:
    """The calling thread's PyThreadState address (what a hand-off logs as the GIL's holder)."""
    import ctypes

    get = ctypes.pythonapi.PyThreadState_Get
    get.restype = ctypes.c_void_p
    return int(get())


@needs_compiled
def test_waking_behind_a_spinning_holder_waits_for_the_gil(log: object) -> None:
    """Known answer: the putter spins in pure Python for 30 ms right after the put, so the woken
    getter waits for the GIL about one switch interval (5 ms), longer than the OS took to wake it,
    and the log names the putter as the GIL's holder when it woke."""

    def check() -> None:
        handoff.drain()
        q, th = _parked_getter(0.01)
        q.put(1)
        end = time.perf_counter() + 0.03
        while time.perf_counter() < end:
            pass
        th.join(5)
        (rec,) = handoff.drain().records.tolist()
        _, put, woke, gil, _, _, holder = rec
        interval = sys.getswitchinterval() * 1e9
        assert gil - woke >= 0.5 * interval, (woke - put, gil - woke)
        assert gil - woke > woke - put, (woke - put, gil - woke)
        assert holder == _my_thread_state(), (hex(holder), hex(_my_thread_state()))  # the spinner, named exactly

    retried(check)


def test_the_pure_path_is_a_simple_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handoff, "_native", None)
    assert isinstance(handoff.work_queue(handoff.QueueKind.ENGINE), SimpleQueue)
    assert handoff.start() is False
    assert len(handoff.drain()) == 0


def test_ping_pong_measures_one_way() -> None:
    """A parked getter's hand-off takes a wake (µs at least); a polling one's, where a CPU is spare
    and the queue polls (compiled), takes less: the pair is what the engine's default buys."""

    def check() -> None:
        parked, polled = handoff.ping_pong_us(200, spin_us=0), handoff.ping_pong_us(200)
        assert 0.5 < parked < 50_000 and 0 < polled < 50_000
        assert np.isfinite(parked) and np.isfinite(polled)
        if handoff.AVAILABLE and _cpus() > 1:
            assert polled < parked, (polled, parked)

    retried(check)


def test_medians_of_known_hand_offs() -> None:
    """Three hand-offs with known stamps: the wake runs from the put (or the park, where the item
    was put before the getter parked) to the OS running the getter, the GIL wait from then to holding it."""
    r = np.zeros(3, dtype=handoff.HANDOFF_DTYPE)
    r["park"] = [0, 0, 100]
    r["put"] = [10, 20, 50]  # the third was put before its getter parked: its wait began at the park
    r["woke"] = [30, 50, 120]
    r["gil"] = [40, 90, 125]
    got = handoff.Handoffs(r).medians()
    assert got == {"count": 3, "wake_ns_median": 20, "gil_ns_median": 10, "hop_ns_median": 30, "wake_ns_max": 30}
    assert handoff.Handoffs(r).medians(np.array([True, False, False])) == {
        "count": 1,
        "wake_ns_median": 20,
        "gil_ns_median": 10,
        "hop_ns_median": 30,
        "wake_ns_max": 20,
    }
    assert handoff.Handoffs(r[:0]).medians() == {"count": 0}


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(*[st.integers(0, 10**6)] * 4, st.integers(0, 3)), max_size=30))
def test_medians_of_several_subsets_are_each_subsets_medians(rows: list[tuple[int, int, int, int, int]]) -> None:
    """All subsets at once (a profile's metadata) say what each asked alone says, an empty one too."""
    r = np.zeros(len(rows), dtype=handoff.HANDOFF_DTYPE)
    for k, (park, put, woke, gil, queue) in enumerate(rows):
        r[k]["park"], r[k]["put"], r[k]["queue"] = park, put, queue
        r[k]["woke"] = max(park, put) + woke  # a getter runs after its item's put and its own park
        r[k]["gil"] = r[k]["woke"] + gil
    masks = {str(q): r["queue"] == q for q in range(4)} | {"all": None}

    def alone(mask: np.ndarray | None) -> dict[str, int]:  # the definitions, one hand-off at a time
        picked = [x for x, keep in zip(r.tolist(), mask if mask is not None else [True] * len(r), strict=True) if keep]
        if not picked:
            return {"count": 0}
        names = handoff.HANDOFF_DTYPE.names
        rec = [dict(zip(names, x, strict=True)) for x in picked]
        signal = [min(max(x["put"], x["park"]), x["woke"]) for x in rec]
        wake = [x["woke"] - s for x, s in zip(rec, signal, strict=True)]
        gil = [x["gil"] - x["woke"] for x in rec]
        hop = [x["gil"] - s for x, s in zip(rec, signal, strict=True)]
        return {
            "count": len(rec),
            "wake_ns_median": int(statistics.median(wake)),
            "gil_ns_median": int(statistics.median(gil)),
            "hop_ns_median": int(statistics.median(hop)),
            "wake_ns_max": max(wake),
        }

    assert handoff.Handoffs(r).medians_of(masks) == {name: alone(m) for name, m in masks.items()}


@needs_compiled
def test_a_timed_ping_pong_logs_its_own_hand_offs() -> None:
    """The ping-pong read as a profile reads the engine's queues: one logged hand-off at most per
    trip each way (polled gets that found their item log nothing), each a wake then a GIL wait."""
    one_way, got = handoff.timed_ping_pong(200, spin_us=0)
    assert one_way > 0 and 100 <= got["count"] <= 2 * 200 + 3, got  # + the start-up round trip and the final None
    assert 0 <= got["wake_ns_median"] <= got["hop_ns_median"] and got["gil_ns_median"] >= 0, got
    assert handoff.start()  # it left logging off
    handoff.stop()
    handoff.drain()


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


# ------------------------------------------------------------------ polling before parking
def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1


needs_spare_cpu = pytest.mark.skipif(_cpus() < 2, reason="a getter polls only while another CPU is left: this process has one")


def _spins(run: Callable[[], None]) -> dict[str, int]:
    """How ``run`` moved :func:`handoff.spin_stats` (caught, timed_out, refused)."""
    before = handoff.spin_stats()
    run()
    after = handoff.spin_stats()
    return {k: after[k] - before[k] for k in after}


def _getter(q: handoff.WorkQueue, cpu: set[int] | None = None) -> tuple[threading.Thread, list[object]]:
    """A thread that takes one item off ``q`` (pinned to ``cpu`` first, if given), started and in get()."""
    got: list[object] = []
    ready = threading.Event()

    def run() -> None:
        if cpu is not None:
            os.sched_setaffinity(0, cpu)  # this thread only (Linux: 0 is the calling thread)
        ready.set()
        got.append(q.get())

    th = threading.Thread(target=run, daemon=True)  # a getter never served must not hold the process
    th.start()
    ready.wait()
    return th, got


@needs_compiled
@needs_spare_cpu
def test_a_polling_getter_takes_its_item_without_a_wake(log: object) -> None:
    """Known answer: a getter that may poll 50 ms, given its item 5 ms after it found the queue
    empty, sees it at once: its spin is counted as caught, and its hand-off shows it parked (polled)
    from the get to the put and saw the item microseconds after it, not a wake's tens later."""

    def check() -> None:
        handoff.drain()
        q = handoff.work_queue(handoff.QueueKind.ENGINE, spin_us=50_000)

        def run() -> None:
            th, got = _getter(q)
            time.sleep(0.005)  # the GIL released: the getter is polling by now
            q.put(7)
            th.join(5)
            assert got == [7]

        moved = _spins(run)
        assert moved["caught"] == 1 and moved["timed_out"] == 0, moved
        ((park, put, woke, gil, _, _, _),) = handoff.drain().records.tolist()
        assert put - park >= 3_000_000
        assert put <= woke <= gil
        assert woke - put < 200_000, (woke - put, gil - woke)

    retried(check)


@needs_compiled
def test_a_getter_that_polls_in_vain_parks_and_gets_its_item(log: object) -> None:
    """A 1 ms poll and an item 30 ms later: the poll times out, the getter parks, and the put wakes it."""
    q = handoff.work_queue(handoff.QueueKind.CUSTOM, spin_us=1_000)

    def run() -> None:
        th, got = _getter(q)
        time.sleep(0.03)
        q.put("late")
        th.join(5)
        assert got == ["late"]

    moved = _spins(run)
    assert moved["caught"] == 0 and moved["timed_out"] + moved["refused"] == 1, moved
    ((park, put, woke, gil, _, _, _),) = handoff.drain().records.tolist()
    assert put - park >= 25_000_000 and put <= woke <= gil


@needs_compiled
def test_no_poll_on_one_cpu_nor_with_spin_zero() -> None:
    """A getter pinned to one CPU would only delay the thread it waits for: it is refused a poll and
    parks. A queue made with spin_us=0 never polls at all."""
    cpu = {min(os.sched_getaffinity(0))}
    q = handoff.work_queue(handoff.QueueKind.ENGINE, spin_us=50_000)

    def pinned() -> None:
        th, got = _getter(q, cpu)
        time.sleep(0.01)
        q.put(1)
        th.join(5)
        assert got == [1]

    moved = _spins(pinned)
    assert moved["caught"] == 0 and moved["timed_out"] == 0 and moved["refused"] == 1, moved

    never = handoff.work_queue(handoff.QueueKind.ENGINE, spin_us=0)

    def at_once() -> None:
        th, got = _getter(never)
        time.sleep(0.01)
        never.put(2)
        th.join(5)
        assert got == [2]

    assert _spins(at_once) == {"caught": 0, "timed_out": 0, "refused": 0}


@needs_compiled
@needs_spare_cpu
def test_a_polling_getter_waits_for_a_busy_holder_as_for_the_gil(log: object) -> None:
    """Known answer: the putter spins in pure Python for 30 ms right after the put. The polling
    getter sees the item at once (woke - put: µs), then waits for the GIL (gil - woke: at least
    about a switch interval), and the log calls that wait the GIL's, not the wake's."""

    def check() -> None:
        handoff.drain()
        q = handoff.work_queue(handoff.QueueKind.ENGINE, spin_us=50_000)
        th, got = _getter(q)
        time.sleep(0.005)
        q.put(1)
        end = time.perf_counter() + 0.03
        while time.perf_counter() < end:
            pass
        th.join(5)
        assert got == [1]
        ((_, put, woke, gil, _, _, _),) = handoff.drain().records.tolist()
        interval = sys.getswitchinterval() * 1e9
        assert woke - put < 1_000_000, (woke - put, gil - woke)
        assert gil - woke >= 0.5 * interval, (woke - put, gil - woke)

    retried(check)


@needs_compiled
@needs_spare_cpu
def test_two_items_reach_a_poller_and_a_parked_getter() -> None:
    """Known answer: one getter parked (pinned to one CPU, so it never polls), one polling, and two
    items put back to back. The first put wakes no one (the poller will take it); the second must
    wake the parked getter: each then holds one item and waits for the other at a barrier, as a
    custom op's Python may wait for another's. A put that woke no one while anyone polled would
    leave the barrier broken."""
    q = handoff.work_queue(handoff.QueueKind.CUSTOM, spin_us=50_000)
    meet = threading.Barrier(2, timeout=3)
    got: list[object] = []

    def take(cpu: set[int] | None) -> None:
        if cpu is not None:
            os.sched_setaffinity(0, cpu)
        got.append(q.get())
        meet.wait()

    parked = threading.Thread(target=take, args=({min(os.sched_getaffinity(0))},), daemon=True)
    parked.start()
    time.sleep(0.01)
    poller = threading.Thread(target=take, args=(None,), daemon=True)
    poller.start()
    time.sleep(0.005)
    q.put("a")
    q.put("b")
    parked.join(5)
    poller.join(5)
    assert not meet.broken and sorted(got) == ["a", "b"]  # type: ignore[type-var]


@settings(max_examples=15, deadline=None)
@given(
    spin_us=st.sampled_from([0.0, 5.0, 50.0, 500.0]),
    getters=st.integers(1, 3),
    putters=st.integers(1, 2),
    pauses=st.lists(st.integers(0, 3), min_size=1, max_size=8),
)
def test_polling_and_parked_getters_lose_no_item(spin_us: float, getters: int, putters: int, pauses: list[int]) -> None:
    """Getters polling, parked, or between the two, fed by several putters that pause now and then
    (a put that finds a poller wakes no one: the poller must take it, or another must be woken):
    every item is taken exactly once, and every getter returns."""
    q = handoff.work_queue(handoff.QueueKind.CUSTOM, spin_us=spin_us)
    n = 400
    taken: list[list[object]] = [[] for _ in range(getters)]

    def take(k: int) -> None:
        while (x := q.get()) is not None:
            taken[k].append(x)

    def put(p: int) -> None:
        for i in range(n):
            q.put((p, i))
            pause = pauses[i % len(pauses)]
            if pause and i % 37 == 0:
                time.sleep(pause * 1e-4)

    takers = [threading.Thread(target=take, args=(k,), daemon=True) for k in range(getters)]
    givers = [threading.Thread(target=put, args=(p,)) for p in range(putters)]
    for th in takers + givers:
        th.start()
    for th in givers:
        th.join(10)
    for _ in takers:
        q.put(None)
    for th in takers:
        th.join(10)
    assert not any(th.is_alive() for th in takers + givers)
    everything = [x for got in taken for x in got]
    assert sorted(everything) == sorted((p, i) for p in range(putters) for i in range(n))  # type: ignore[type-var]


def test_spin_is_checked() -> None:
    for bad in (-1, float("nan"), 2e6, "100", True):
        with pytest.raises(ValueError, match="spin_us"):
            handoff.work_queue(handoff.QueueKind.ENGINE, spin_us=bad)  # type: ignore[arg-type]


@needs_compiled
@needs_spare_cpu
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_polls_though_a_parent_thread_was_polling() -> None:
    """A thread polling in the parent at the fork does not exist in the child: the child's getters
    may poll all the same (the count of pollers starts again at none)."""
    q = handoff.work_queue(handoff.QueueKind.ENGINE, spin_us=1_000_000)
    th, got = _getter(q)
    time.sleep(0.01)  # polling now (for up to 1 s), holding the one poller's slot of 2 CPUs
    pid = os.fork()
    if pid == 0:  # the child: exit 0 if its own getter polled and caught its item
        code = 1
        try:
            mine = handoff.work_queue(handoff.QueueKind.ENGINE, spin_us=50_000)

            def run() -> None:
                child_th, child_got = _getter(mine)
                time.sleep(0.005)
                mine.put(1)
                child_th.join(5)
                assert child_got == [1]

            code = 0 if _spins(run)["caught"] == 1 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    q.put(0)
    th.join(5)
    assert got == [0]
    assert os.waitstatus_to_exitcode(status) == 0


@needs_compiled
def test_a_wait_at_a_gate_is_timed_as_a_wait(log: object) -> None:
    """Known answer: a thread waits at a closed gate that another opens 20 ms later: one record of
    kind WAIT for the waiter, park <= put <= woke <= gil, the put when release() ran."""
    gate, th = _waiting_at_gate(0.02)
    put_at = time.monotonic_ns()
    gate.release()
    gate.release()  # a second opening changes nothing
    th.join(5)
    assert not th.is_alive()
    (rec,) = handoff.drain().records
    assert int(rec["queue"]) == handoff.QueueKind.WAIT and int(rec["native_id"]) == th.native_id
    assert int(rec["put"]) - int(rec["park"]) >= 15_000_000
    assert abs(int(rec["put"]) - put_at) < 5_000_000
    assert int(rec["park"]) <= int(rec["put"]) <= int(rec["woke"]) <= int(rec["gil"])


@pytest.mark.parametrize("compiled", [True, False])
def test_a_gate_opened_before_the_wait_lets_it_through_at_once(compiled: bool) -> None:
    """Both gates (the compiled one, the pure path's locked Lock) are closed when made, let one
    wait through once opened, and the compiled one logs no hand-off for a wait that did not wait."""
    if compiled and not handoff.AVAILABLE:
        pytest.skip(handoff.WHY_NOT)
    started = handoff.start() if compiled else False
    try:
        handoff.drain()
        gate = handoff.closed_gate() if compiled else handoff._locked_lock()
        assert gate.locked()  # type: ignore[attr-defined]
        gate.release()
        assert gate.acquire()
        assert len(handoff.drain()) == 0
    finally:
        if started:
            handoff.stop()
