"""Reading a profile as a list of ``Span`` objects loses nothing the analyses need.

``trace.spans`` is the list view for code that iterates or edits. Each span carries the engine op
it ran (``Span.op``) and a Python's CPU time (``Span.cpu``), so the columns rebuilt from the list
still link the spans to the engine's edges: the causes and the exact critical path are the same
as before the list was read, and an edit made through the list is seen.
"""

from __future__ import annotations

import pytest

import opprof as mx
from opprof.demo import train
from opprof.trace import Span, Trace

pytestmark = pytest.mark.timeout(120)


def _profile() -> Trace:
    mx.set_engine("threaded", workers=2, custom_workers=2)
    try:
        with mx.profile() as prof:
            train(steps=2)
    finally:
        mx.set_engine("threaded")
    assert prof.trace is not None
    return prof.trace


def test_the_list_view_keeps_the_edges_the_causes_and_the_exact_critical_path() -> None:
    trace = _profile()
    before_path = trace.critical_path()
    before_causes = trace.waiting_causes()
    assert before_causes.has_edges and not before_path.approximate

    again = _profile()  # the same workload, read through the list before any analysis
    spans = again.spans
    assert all(isinstance(s, Span) for s in spans)
    assert any(s.op >= 0 for s in spans) and any(s.cpu >= 0 for s in spans)
    path = again.critical_path()
    causes = again.waiting_causes()
    assert causes.has_edges, "the list view dropped the spans' links to the engine's edges"
    assert not path.approximate
    assert set(causes.keys) == set(before_causes.keys)
    assert again.validate() == []


def test_an_edit_through_the_list_is_seen_and_the_links_stay() -> None:
    trace = _profile()
    ops_before = trace.table.op.copy()
    spans = trace.spans
    spans[0].name = "renamed"
    t = trace.table
    assert t.strings[t.name[0]] == "renamed"
    assert (t.op == ops_before).all()


def test_a_span_made_by_hand_has_no_engine_op() -> None:
    s = Span("x", "operator", 1, 0, 10)
    assert s.op == -1 and s.cpu == -1
    trace = Trace(spans=[s])
    assert (trace.table.op == -1).all()
    assert trace.critical_path().approximate
