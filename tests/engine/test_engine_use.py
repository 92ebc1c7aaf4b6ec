"""``with opprof.engine.use(kind):`` — a block on another engine, and the one before it current again after."""

from __future__ import annotations

import os
import threading
import time

import pytest

from opprof.engine import EngineError, NaiveEngine, ThreadedEngine, get_engine, make_engine, set_engine, use

pytestmark = pytest.mark.timeout(60)


def opprof_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("opprof-")}


def runs(engine: object) -> bool:
    """Whether ``engine`` still takes work and runs it."""
    assert isinstance(engine, (NaiveEngine, ThreadedEngine))
    ran: list[int] = []
    engine.push(lambda: ran.append(1), writes=[engine.new_var()])
    engine.wait_for_all()
    return ran == [1]


def test_the_block_runs_on_the_new_engine_and_the_same_engine_is_current_after() -> None:
    before = get_engine()
    threads = opprof_threads()
    with use("naive") as inner:
        assert isinstance(inner, NaiveEngine) and get_engine() is inner
        assert runs(inner)
    assert get_engine() is before  # the very object, not a new one of its kind
    assert runs(before)  # set aside, not shut down
    with pytest.raises(EngineError):  # the engine use() made is shut down
        inner.push(lambda: None)
    assert opprof_threads() == threads


def test_the_thread_counts_go_to_the_new_engine() -> None:
    threads = opprof_threads()
    with use("threaded", workers=3, custom_workers=2) as inner:
        assert isinstance(inner, ThreadedEngine) and (inner.workers, inner.custom_workers) == (3, 2)
        assert runs(inner)
    assert opprof_threads() == threads  # its threads are stopped at the end
    with pytest.raises(ValueError), use("naive", workers=2):
        pass


def test_the_engine_before_is_restored_when_the_block_raises() -> None:
    before = get_engine()
    threads = opprof_threads()
    with pytest.raises(KeyError, match="from the block") as ei, use("naive") as inner:
        raise KeyError("from the block")
    assert ei.value.__context__ is None  # nothing from use() chained onto the block's error
    assert get_engine() is before and runs(before)
    with pytest.raises(EngineError):
        inner.push(lambda: None)
    assert opprof_threads() == threads


def test_a_ctrl_c_in_the_block_restores_the_engine_too() -> None:
    before = get_engine()
    with pytest.raises(KeyboardInterrupt), use("threaded", workers=1):
        raise KeyboardInterrupt
    assert get_engine() is before and runs(before)


def test_nested_uses_each_restore_the_engine_their_block_started_from() -> None:
    before = get_engine()
    threads = opprof_threads()
    with use("threaded", workers=1) as outer:
        with use("naive") as inner:
            assert get_engine() is inner
        assert get_engine() is outer and runs(outer)
        with pytest.raises(RuntimeError), use("naive"):
            raise RuntimeError("inner block")
        assert get_engine() is outer and runs(outer)
    assert get_engine() is before and runs(before)
    assert opprof_threads() == threads


def test_the_engine_before_finishes_its_work_before_the_block_starts() -> None:
    before = get_engine()
    done: list[str] = []
    gate = threading.Event()

    def slow() -> None:
        gate.wait(5)
        done.append("before's op")

    before.push(slow, writes=[before.new_var()])
    threading.Timer(0.05, gate.set).start()
    with use("naive"):
        assert done == ["before's op"]


def test_the_blocks_engine_finishes_its_work_before_the_one_before_is_back() -> None:
    done: list[str] = []
    with use("threaded", workers=1) as inner:
        inner.push(lambda: (time.sleep(0.05), done.append("inner's op")), writes=[inner.new_var()])
    assert done == ["inner's op"]


def test_an_error_the_blocks_engine_held_is_raised_at_the_end_unless_the_block_raised() -> None:
    before = get_engine()
    err = OSError("nobody waited")

    def failing() -> None:
        raise err

    with pytest.raises(OSError) as ei:
        with use("threaded", workers=1) as inner:
            inner.push(failing, writes=[inner.new_var()])
    assert ei.value.__cause__ is err  # as set_engine raises it
    assert get_engine() is before and runs(before)

    with pytest.raises(ValueError, match="the block's"):
        with use("threaded", workers=1) as inner:
            inner.push(failing, writes=[inner.new_var()])
            raise ValueError("the block's own error wins")
    assert get_engine() is before and runs(before)


def test_an_engine_given_is_used_and_left_running() -> None:
    before = get_engine()
    mine = make_engine("naive")
    with use(mine) as inner:
        assert inner is mine and get_engine() is mine
    assert get_engine() is before
    assert runs(mine)  # its owner's to stop
    mine.shutdown()


def test_an_engine_set_inside_the_block_is_stopped_at_its_end() -> None:
    before = get_engine()
    threads = opprof_threads()
    with use("naive"):
        replaced = set_engine("threaded", workers=1)
    assert get_engine() is before and runs(before)
    with pytest.raises(EngineError):
        replaced.push(lambda: None)
    assert opprof_threads() == threads


def test_use_as_the_current_engine_changes_nothing() -> None:
    before = get_engine()
    with use(before) as inner:
        assert inner is before
    assert get_engine() is before and runs(before)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_that_leaves_the_block_starts_with_a_fresh_engine() -> None:
    """The engine set aside has no threads in a child: the child gets a new one on first use."""
    before = get_engine()
    pid = -1
    try:
        with use("naive"):
            pid = os.fork()
        if pid == 0:
            fresh = get_engine()
            os._exit(0 if fresh is not before and runs(fresh) else 1)
    except BaseException:
        if pid == 0:
            os._exit(2)
        raise
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert get_engine() is before and runs(before)
