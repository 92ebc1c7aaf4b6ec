"""Compare's memory rows: bytes judged like times, with their own words (more, less)."""

from __future__ import annotations

import opprof
import opprof as mx
from opprof.trace import Trace
from opprof.trace.compare import RowKey, RowKind, Verdict, compare
from opprof.trace.text import compare_table
from tests.profiler.test_memory import MB4  # registers MemDouble


def runs(rows: int, n: int = 3, memory: bool = True) -> list[Trace]:
    out = []
    for _ in range(n):
        with opprof.profile(memory=memory) as prof:
            x = mx.nd.ones((rows, 1000))
            y = mx.nd.Custom(x, op_type="MemDouble")
            y.wait_to_read()
            del x, y
        out.append(prof.trace)
    return out


def test_the_same_program_has_the_same_bytes_and_a_bigger_one_more() -> None:
    same = compare(runs(100), runs(100))
    mem = [r for r in same.rows if r.key.kind is RowKind.MEMORY]
    assert {r.key for r in mem} >= {RowKey(RowKind.MEMORY, "run", "peak"), RowKey(RowKind.MEMORY, "MemDouble", "allocated")}
    assert all(r.verdict is Verdict.NO_CLEAR_CHANGE and r.ratio == 1.0 and r.share == 0.0 for r in mem)
    bigger = compare(runs(100), runs(110))
    alloc = bigger.row(RowKey(RowKind.MEMORY, "MemDouble", "allocated"))
    assert alloc.median_a == 3 * MB4 / 10 and abs(alloc.ratio - 1.1) < 1e-9 and alloc.verdict is Verdict.SLOWER
    table = compare_table(bigger)
    line = next(ln for ln in table.splitlines() if ln.startswith("MemDouble · allocated"))
    assert "1.2 MB" in line and "1.3 MB" in line and line.split()[-1] == "more"


def test_runs_without_memory_have_no_memory_rows() -> None:
    c = compare(runs(10, 2, memory=False), runs(10, 2, memory=False))
    assert not [r for r in c.rows if r.key.kind is RowKind.MEMORY]
