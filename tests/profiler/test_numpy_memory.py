"""The NumPy data a custom op's Python allocates itself (opprof.profiler.npmem), on known answers:
three 8 MB temporaries alive at once are a 24 MB peak, none is ~0; nothing is installed without
memory recording, and the handler the Python's thread had is back after it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import opprof as mx
from opprof.profiler import npmem
from opprof.profiler.session import Profiler
from opprof.trace import Role, load
from opprof.trace.columns import ROLE_CODE
from opprof.trace.compare import side_by_side
from opprof.trace.text import split_table

try:
    from numpy._core.multiarray import get_handler_name
except ImportError:  # NumPy 1.x
    from numpy.core.multiarray import get_handler_name  # type: ignore[no-redef]

MB8 = 8_000_000  # a million float64
NAMES: list[str] = []  # the handler each forward saw, in its own thread


class ThreeTemps(mx.operator.CustomOp):
    """Three 8 MB NumPy temporaries alive at once, then freed."""

    def forward(self, is_train, req, in_data, out_data, aux):
        NAMES.append(get_handler_name())
        a = np.ones(1_000_000)
        b = np.tanh(a) * 2  # np.tanh's result is a fourth temporary, freed before b is kept
        del b
        b = np.full(1_000_000, 2.0)
        c = a + b
        del a, b, c
        self.assign(out_data[0], req[0], in_data[0])


class NoTemps(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        NAMES.append(get_handler_name())
        self.assign(out_data[0], req[0], in_data[0])


@mx.operator.register("NpThreeTemps")
class ThreeTempsProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return ThreeTemps()


@mx.operator.register("NpNoTemps")
class NoTempsProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return NoTemps()


needs_npmem = pytest.mark.skipif(not npmem.AVAILABLE, reason=f"opprof.profiler._npmem not in use: {npmem.WHY_NOT}")


def run(op_type: str, n: int = 3) -> None:
    x = mx.nd.ones((4, 4))
    for _ in range(n):
        x = mx.nd.Custom(x, op_type=op_type)
    x.wait_to_read()


def profiled(op_type: str, memory: bool = True, compiled: bool | None = None) -> Any:
    prof = Profiler(memory=memory, compiled=compiled).start()
    try:
        run(op_type)
    finally:
        prof.stop()
    return prof.trace


@needs_npmem
@pytest.mark.parametrize("compiled", [None, False], ids=["default-recorder", "python-recorder"])
def test_three_temporaries_peak_at_24_mb(engine: Any, compiled: bool | None, tmp_path: Path) -> None:
    NAMES.clear()
    trace = profiled("NpThreeTemps", compiled=compiled)
    assert NAMES == ["opprof_npmem"] * 3
    rows = [r for r in trace.custom_ops() if r.op_type == "NpThreeTemps"]
    assert len(rows) == 3
    for r in rows:
        assert r.python_numpy_peak_bytes is not None
        assert abs(r.python_numpy_peak_bytes - 3 * MB8) <= 0.05 * 3 * MB8, r.python_numpy_peak_bytes
    assert "NumPy data its Python allocated itself" in trace.metadata["memory"]["python"]
    # Each is kept on its Python's span: one per invocation, none on any other span.
    t = trace.table
    python = t.role == ROLE_CODE[Role.PYTHON]
    assert sorted(t.numpy_peak[python].tolist()) == sorted(r.python_numpy_peak_bytes for r in rows)
    assert (t.numpy_peak[~python] == -1).all()
    # The numbers survive a file, and a merge that numbers invocations anew (A and B side by side).
    trace.save(tmp_path / "t.opprof")
    back = [r.python_numpy_peak_bytes for r in load(tmp_path / "t.opprof").custom_ops()]
    assert back == [r.python_numpy_peak_bytes for r in rows]
    none = profiled("NpNoTemps", compiled=compiled)
    merged = side_by_side(none, trace).custom_ops()
    assert (
        sorted((r.op_type, r.python_numpy_peak_bytes is not None and r.python_numpy_peak_bytes >= MB8) for r in merged)
        == [("NpNoTemps", False)] * 3 + [("NpThreeTemps", True)] * 3
    )
    assert "py-numpy" in split_table(trace)


@needs_npmem
def test_no_temporaries_peak_near_zero(engine: Any) -> None:
    trace = profiled("NpNoTemps")
    rows = [r for r in trace.custom_ops() if r.op_type == "NpNoTemps"]
    assert len(rows) == 3
    for r in rows:
        assert r.python_numpy_peak_bytes is not None
        assert 0 <= r.python_numpy_peak_bytes < 64 * 1024, r.python_numpy_peak_bytes


def test_not_installed_without_memory(engine: Any) -> None:
    before = get_handler_name()
    NAMES.clear()
    trace = profiled("NpThreeTemps", memory=False)
    assert NAMES == [before] * 3
    assert all(r.python_numpy_peak_bytes is None for r in trace.custom_ops())
    assert (trace.table.numpy_peak == -1).all()


def test_handler_back_after_profiling(engine: Any) -> None:
    """After a profile with memory, the Python's thread (a custom-op worker, or the caller on the
    naive engine) runs the next custom op with the handler it had before."""
    before = get_handler_name()
    profiled("NpThreeTemps")
    NAMES.clear()
    run("NpThreeTemps")
    assert NAMES == [before] * 3
    assert get_handler_name() == before


def test_metadata_says_why_not_where_unavailable() -> None:
    trace = profiled("NpNoTemps")
    python = trace.metadata["memory"]["python"]
    if npmem.AVAILABLE:
        assert "NumPy data its Python allocated itself" in python
        assert all(r.python_numpy_peak_bytes is not None for r in trace.custom_ops())
    else:
        assert npmem.WHY_NOT in python
        assert all(r.python_numpy_peak_bytes is None for r in trace.custom_ops())
        assert "py-numpy" not in split_table(trace)


@needs_npmem
def test_enter_leave_nest_and_count_realloc() -> None:
    outer = npmem.enter()
    a = np.ones(1_000_000)  # 8 MB
    inner = npmem.enter()
    b = np.ones(2_000_000)  # 16 MB
    del b
    assert abs(npmem.leave(inner) - 2 * MB8) <= 1024  # give or take a small array NumPy makes itself
    c = np.zeros(10)
    c.resize(1_000_000, refcheck=False)  # a realloc: 80 bytes grown to 8 MB
    del a
    assert abs(npmem.leave(outer) - 3 * MB8) <= 1024
    assert get_handler_name() == "default_allocator"
    del c


@needs_npmem
def test_a_leave_that_skipped_inner_ones_ends_them_and_a_wrong_token_is_refused() -> None:
    """Tokens are depths on this thread: a leave whose inner enters were never left (an error
    skipped their leave) ends them too and puts NumPy's handler back; a token of no open enter is a
    ValueError; an enter nested past the 32 kept measures nothing (None) and spoils no outer one."""
    outer = npmem.enter()
    a = np.ones(1_000_000)  # 8 MB
    npmem.enter()  # never left
    b = np.ones(1_000_000)
    assert abs(npmem.leave(outer) - 2 * MB8) <= 1024
    assert get_handler_name() == "default_allocator" and npmem._npmem.counters()[2] == 0
    with pytest.raises(ValueError, match="not yet left"):
        npmem.leave(outer)
    del a, b
    # The outer one's peak before an inner enter that was never left still counts.
    outer = npmem.enter()
    big = np.ones(2_000_000)  # 16 MB, gone before the inner enter
    del big
    npmem.enter()  # never left
    assert abs(npmem.leave(outer) - 2 * MB8) <= 1024
    tokens = [npmem.enter() for _ in range(40)]
    assert all(isinstance(t, int) for t in tokens[:32]) and tokens[32:] == [None] * 8
    c = np.ones(1_000_000)
    assert [npmem.leave(t) for t in reversed(tokens[32:])] == [-1] * 8
    assert abs(npmem.leave(tokens[0]) - MB8) <= 1024
    assert get_handler_name() == "default_allocator" and npmem._npmem.counters()[2] == 0
    del c


@needs_npmem
@pytest.mark.parametrize("escaping", [3, 40])  # fewer blocks than the leave pops one by one, and more
def test_blocks_that_escape_a_python_leave_the_table_empty(escaping: int) -> None:
    """Arrays made inside and kept past ``leave`` (a custom op's outputs) are forgotten at the
    outermost leave, whether it pops them one by one or clears the table, and the next measurement
    counts from there."""
    _npmem = npmem._npmem
    kept = []
    token = npmem.enter()
    for _ in range(escaping):
        kept.append(np.ones(1000))
    assert _npmem.counters()[3] == escaping  # used slots: one per block made inside
    npmem.leave(token)
    assert _npmem.counters()[3] == 0
    kept.clear()
    token = npmem.enter()
    fresh = np.ones(1_000_000)
    assert abs(npmem.leave(token) - MB8) <= 1024
    assert _npmem.counters()[3] == 0
    del fresh


@needs_npmem
def test_a_sticky_enter_keeps_the_handler_until_unstick_and_each_call_still_counts_its_own() -> None:
    """``enter(sticky=True)`` (a custom-op pool thread's) leaves the counting handler installed, so
    the next enter sets nothing; each enter/leave still measures its own peak; ``unstick()`` puts
    back the handler the sticky enter replaced, once."""
    _npmem = npmem._npmem
    before = get_handler_name()
    token = npmem.enter(True)
    a = np.ones(1_000_000)
    assert abs(npmem.leave(token) - MB8) <= 1024
    assert get_handler_name() == _npmem.HANDLER_NAME  # still installed
    token = npmem.enter(True)
    b = np.ones(2_000_000)
    assert abs(npmem.leave(token) - 2 * MB8) <= 1024  # its own peak, not the first call's too
    assert _npmem.counters()[2:] == (0, 0)  # no enter open, the size table empty
    assert _npmem.unstick() is True
    assert get_handler_name() == before
    assert _npmem.unstick() is False
    del a, b


@needs_npmem
def test_an_enter_over_the_watching_handler_stays_and_the_recordings_stop_puts_the_first_back() -> None:
    """On a recording thread (the watching handler installed) the counting one stays after leave:
    the recording's ``watch_leave`` puts back what was there before either."""
    _npmem = npmem._npmem
    before = get_handler_name()
    watch = _npmem.watch_enter()
    assert get_handler_name() == _npmem.WATCH_NAME
    token = npmem.enter()
    x = np.ones(1_000_000)
    assert abs(npmem.leave(token) - MB8) <= 1024
    assert get_handler_name() == _npmem.HANDLER_NAME
    assert _npmem.unstick() is False  # nothing of a sticky enter's to put back here
    _npmem.watch_leave(watch)
    assert get_handler_name() == before
    del x


def _data(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


@needs_npmem
def test_the_recycling_handler_reuses_a_freed_block_of_its_class_and_keeps_contents_right() -> None:
    """Inside :func:`npmem.recycling`: a large block freed is the next one of its size class (its
    address again), zeros are zeros on a dirty block, a realloc keeps the contents growing and
    shrinking, small arrays and arrays made outside go to NumPy's default handler, and an array
    made inside is freed through the handler after it has left."""
    with npmem.recycling() as on:
        assert on and get_handler_name() == npmem._npmem.RECYCLE_NAME
        dirty = np.full(100_000, 7.0)  # 800 kB
        at = _data(dirty)
        del dirty
        blocks, _ = npmem._npmem.recycle_spares()
        assert blocks >= 1
        again = np.zeros(99_000)  # 792 kB: the same class (800 kB rounded to an eighth of 512 kB)
        assert _data(again) == at and not again.any()
        grown = np.arange(1000, dtype=np.int64)
        grown.resize(200_000, refcheck=False)  # a realloc into a large class
        assert grown[:1000].tolist() == list(range(1000)) and not grown[1000:].any()
        grown.resize(500, refcheck=False)
        assert grown.tolist() == list(range(500))
        small = np.ones(10)
        assert get_handler_name(small) == npmem._npmem.RECYCLE_NAME and small.sum() == 10
        kept = np.ones(50_000)
    assert get_handler_name() == "default_allocator" and get_handler_name(np.ones(3)) == "default_allocator"
    assert get_handler_name(kept) == npmem._npmem.RECYCLE_NAME
    del kept, again, grown, small  # freed through the handler, outside it: no crash, spares bounded
    blocks, nbytes = npmem._npmem.recycle_spares()
    assert 1 <= blocks <= 64 and 0 < nbytes <= 32 << 20


@needs_npmem
def test_the_recycling_handler_keeps_at_most_its_cap() -> None:
    """Forty 2 MB blocks freed at once: the spares stop at 32 MB (the rest goes back to malloc)."""
    with npmem.recycling():
        blocks = [np.ones(262_144) for _ in range(40)]  # 2 MB each
        del blocks
    n, nbytes = npmem._npmem.recycle_spares()
    assert nbytes <= 32 << 20 and n <= 64


@needs_npmem
def test_the_final_build_makes_its_columns_through_the_recycling_handler() -> None:
    """stop()'s build runs inside :func:`npmem.recycling` (its blocks kept for the next build), a
    live snapshot's does not, and the thread's handler is NumPy's default again after."""
    mx.set_engine("threaded")
    prof = Profiler().start()
    a = mx.nd.ones((10, 10))
    for _ in range(300):
        a = a + 1
    mx.nd.waitall()
    live = prof.snapshot()
    trace = prof.stop()
    assert sum(1 for name in trace.table.str_list(trace.table.name) if name == "_plus_scalar") == 300
    assert get_handler_name(trace.table.start) == npmem._npmem.RECYCLE_NAME
    assert get_handler_name(live.table.start) == "default_allocator"
    assert get_handler_name() == "default_allocator"
