"""The recorder's raw records hold their fields where opprof.profiler.build names them.

The recorder appends plain tuples (its hot path builds nothing slower) and the readers (build,
the live feed) take their fields by build's index constants: this holds the writer to them.
"""

from __future__ import annotations

import pytest

import opprof as mx
from opprof.engine import Invocation
from opprof.profiler import build as b
from opprof.profiler.recorder import Recorder
from opprof.profiler.sites import resolve
from tests.helpers import MyAddOneProp

pytestmark = pytest.mark.timeout(60)

mx.operator.register("RawRecordsAddOne")(MyAddOneProp)


def test_each_record_has_its_fields_where_build_names_them() -> None:
    mx.set_engine("threaded", workers=2, custom_workers=2)
    try:
        x = mx.nd.ones((2, 2))
        x.wait_to_read()
        rec = Recorder().attach()
        try:
            y = x + 1
            z = mx.nd.Custom(y, op_type="RawRecordsAddOne")
            z.wait_to_read()
        finally:
            rec.detach()
    finally:
        mx.set_engine("threaded")
    threads = rec.thread_records()
    by_index = {r.index: r for r in threads}
    plain = [p for r in threads for p in r.plain]
    sub = [s for r in threads for s in r.sub]
    fam = [f for r in threads for f in r.fam]
    deps = [d for r in threads for d in r.deps]
    buf = [x for r in threads for x in r.buf]

    assert {len(p) for p in plain} == {b.PLAIN_FIELDS}
    [plus] = [p for p in plain if p[b.NAME] == "_plus_scalar"]
    assert plus[b.T0] <= plus[b.T1] and plus[b.SEQ] > 0
    assert plus[b.PUSH] <= plus[b.T0] and by_index[plus[b.PUSHER]].name == "MainThread"
    assert plus[b.READS] == x._var.id and plus[b.WRITES] == y._var.id
    assert isinstance(plus[b.READY], int) and isinstance(plus[b.BY], int) and isinstance(plus[b.BY_VAR], int)

    # The custom op's sub-ops, each with its push's note.
    assert {len(s) for s in sub} == {b.SUB_FIELDS} and sub
    for s in sub:
        note = s[b.SUB_NOTE]
        assert isinstance(note[b.NOTE_INV], Invocation) and note[b.NOTE_INV].op_type == "RawRecordsAddOne"
        assert note[b.NOTE_RECORDS] in by_index and note[b.NOTE_TS] <= s[b.T0] <= s[b.T1]
        site = note[b.NOTE_SITE]  # (file, line), or (code, offset) from the compiled recorder: resolved alike
        assert site is not None and resolve(site)[0].endswith("helpers.py")

    # Its start, its Python and its Dummy_Wait, one invocation.
    assert {len(f) for f in fam} == {b.FAM_FIELDS}
    assert sorted(f[b.FAM_KIND] for f in fam) == sorted([b.START, b.PYTHON, b.DUMMY])
    assert len({id(f[b.FAM_INV]) for f in fam}) == 1 and all(f[b.FAM_T0] <= f[b.FAM_T1] for f in fam)

    # The edges of every op that is not plain: the sub-ops, the start and the Dummy_Wait.
    assert {len(d) for d in deps} == {b.DEP_FIELDS} and len(deps) == len(sub) + 2
    sub_seqs = {s[b.SEQ] for s in sub}
    for d in deps:
        assert by_index[d[b.DEP_PUSHER]] is not None and d[b.DEP_PUSH] > 0
        assert (d[b.DEP_SITE] is not None) == (d[b.DEP_SEQ] in sub_seqs)

    # The wait for z, on the main thread (the custom op's own waits carry its invocation).
    waits = [x for x in buf if x[b.BUF_KIND] == b.WAIT_REC and x[b.BUF_INFO] is None]
    assert {len(x) for x in buf} == {b.BUF_FIELDS} and len(waits) == 1
    [w] = waits
    assert w[b.BUF_NAME] == "WaitForVar" and w[b.BUF_INFO] is None and w[b.BUF_T0] <= w[b.BUF_T1]
    assert w[b.BUF_X][b.WAIT_VAR] == z._var.id
