"""Comparing runs: the statistics on numbers with known answers (fixed seeds, no timing), rows
matched by structure on traces made to order, a real profile whose custom op sleeps longer, and
``opprof diff`` with its CI gate."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import opprof as mx
from opprof.cli import main as cli
from opprof.trace import Span, ThreadInfo, Trace
from opprof.trace.compare import (
    Estimate,
    RowKey,
    RowKind,
    Verdict,
    compare,
    ratio_interval,
    run_rows,
    side_by_side,
    typical_run,
    verdict_of,
)
from opprof.trace.text import compare_table
from tests.helpers import retried


# ---------------------------------------------------------------------------- the statistics
def test_the_interval_holds_the_true_ratio_and_excludes_one_for_a_clear_change() -> None:
    rng = np.random.default_rng(1)
    a = 100 * (1 + 0.1 * rng.standard_normal(5))  # 10 % noise, like a shared machine on a quiet day
    ratio, lo, hi = ratio_interval(a, 1.3 * a * (1 + 0.02 * rng.standard_normal(5)))
    assert lo < 1.3 < hi and lo > 1 and abs(ratio - 1.3) < 0.05, (ratio, lo, hi)
    assert verdict_of(lo, hi) is Verdict.SLOWER
    ratio, lo, hi = ratio_interval(a, a / 1.3)
    assert hi < 1 and abs(ratio - 1 / 1.3) < 1e-9 and verdict_of(lo, hi) is Verdict.FASTER
    ratio, lo, hi = ratio_interval(a, a)  # the same times on both sides: ratio 1, their noise its width
    assert ratio == pytest.approx(1.0) and lo < 1 < hi and verdict_of(lo, hi) is Verdict.NO_CLEAR_CHANGE


def test_the_t_quantile_matches_the_tables() -> None:
    from opprof.trace.compare import _t_quantile

    for df, table in ((1, 12.706), (4, 2.776), (8, 2.306), (30, 2.042), (1e6, 1.960)):
        assert abs(_t_quantile(0.975, df) - table) < 2e-3, df


def test_zeros_in_some_runs_still_give_an_interval() -> None:
    ratio, lo, hi = ratio_interval(np.array([0.0, 10, 20, 10]), np.array([30.0, 40, 30, 40]))
    assert ratio == pytest.approx(35 / 10) and lo > 1 and hi > lo
    assert np.isnan(ratio_interval(np.zeros(3), np.ones(3))[0])
    assert np.isnan(ratio_interval(np.ones(1), np.ones(3))[0])  # one run: no interval


def test_same_distribution_is_no_clear_change_at_least_nineteen_times_in_twenty() -> None:
    """The false-verdict rate of the method itself, on draws with no change (30 % noise, N = 5)."""
    rng = np.random.default_rng(7)
    calls = 0
    for _ in range(400):
        a = 100 * np.exp(0.3 * rng.standard_normal(5))
        b = 100 * np.exp(0.3 * rng.standard_normal(5))
        calls += verdict_of(*ratio_interval(a, b)[1:]) is not Verdict.NO_CLEAR_CHANGE
    assert calls / 400 <= 0.05, f"{calls} of 400 no-change pairs were given a verdict"


def test_a_thirty_percent_change_under_ten_percent_noise_is_found_nine_times_in_ten() -> None:
    """The method's power at N = 5: Welch's t on log times finds +30 % under 10 % noise with
    probability ~0.93 (185 of these 200 seeded draws); the issue's rates on the real machine are a
    benchmark's to measure, not a timed test's."""
    rng = np.random.default_rng(11)
    found = 0
    for _ in range(200):
        a = 100 * np.exp(0.1 * rng.standard_normal(5))
        b = 130 * np.exp(0.1 * rng.standard_normal(5))
        found += verdict_of(*ratio_interval(a, b)[1:]) is Verdict.SLOWER
    assert found / 200 >= 0.9, f"found in {found} of 200"


# ---------------------------------------------------------------------------- rows by structure
def _run(op_ns: int, wait_ns: int = 500, extra: str | None = None) -> Trace:
    """A made-to-order run: two ops on a worker, a wait on the main thread (known durations)."""
    spans = [
        Span("_plus_scalar", "operator", 2, 0, op_ns),
        Span("_mul_scalar", "operator", 2, op_ns, 2 * op_ns),
        Span("WaitForVar", "wait", 1, 0, wait_ns),
    ]
    if extra:
        spans.append(Span(extra, "operator", 2, 2 * op_ns, 3 * op_ns))
    return Trace(threads=[ThreadInfo(1, "MainThread"), ThreadInfo(2, "opprof-engine-0")], spans=spans)


def test_rows_are_end_to_end_and_each_span_name_in_its_category() -> None:
    rows = run_rows(_run(1_000))
    assert rows[RowKey(RowKind.END_TO_END)] == 2_000
    assert rows[RowKey(RowKind.SPAN, "_plus_scalar", "operator")] == 1_000
    assert rows[RowKey(RowKind.SPAN, "WaitForVar", "wait")] == 500


def test_a_slower_op_is_slower_the_unchanged_wait_is_not_and_the_change_is_explained() -> None:
    noise = [1.0, 1.04, 0.97, 1.02, 0.99]
    a = [_run(int(1_000 * f), int(500 * f)) for f in noise]
    b = [_run(int(1_300 * f), int(500 * g)) for f, g in zip(noise, noise[::-1], strict=True)]  # the wait: same draws
    c = compare(a, b)
    e2e = c.end_to_end
    assert e2e is not None and e2e.verdict is Verdict.SLOWER and abs(e2e.ratio - 1.3) < 0.05
    assert c.row(RowKey(RowKind.SPAN, "_plus_scalar", "operator")).verdict is Verdict.SLOWER
    assert c.row(RowKey(RowKind.SPAN, "WaitForVar", "wait")).verdict is Verdict.NO_CLEAR_CHANGE
    assert c.rows[0] is e2e  # end to end first, then by how much of its change a row explains
    top = c.rows[1]
    assert top.key.kind is RowKind.SPAN and 0.4 < top.share < 0.6  # each op: half of the 600 ns
    text = compare_table(c)
    assert "end to end" in text and "slower" in text and "95 %" in text


def test_different_programs_say_what_differs_and_compare_the_rest() -> None:
    a = [_run(1_000) for _ in range(3)]
    b = [_run(1_000, extra="_copyto") for _ in range(3)]
    c = compare(a, b)
    added = c.row(RowKey(RowKind.SPAN, "_copyto", "operator"))
    assert added.verdict is Verdict.ADDED and added.median_b == 1_000
    assert any("only in B: _copyto" in n for n in c.notes)
    assert c.row(RowKey(RowKind.SPAN, "_plus_scalar", "operator")).verdict is Verdict.NO_CLEAR_CHANGE
    assert "added: _copyto" in compare_table(c)


def test_one_run_a_side_gives_ratios_without_intervals_and_says_why() -> None:
    c = compare([_run(1_000)], [_run(2_000)])
    e2e = c.end_to_end
    assert e2e is not None and e2e.ratio == 2.0 and np.isnan(e2e.low) and e2e.verdict is Verdict.NO_CLEAR_CHANGE
    assert any("without intervals" in n for n in c.notes)
    with pytest.raises(ValueError, match="at least one run"):
        compare([], [_run(1)])


# ---------------------------------------------------------------------------- a real profile
class _Nap(mx.operator.CustomOp):
    seconds = 0.01

    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        time.sleep(type(self).seconds)
        self.assign(out_data[0], req[0], in_data[0] + 1)


@mx.operator.register("CompareNap")
class _NapProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):  # type: ignore[no-untyped-def]
        return _Nap()


def _profile(seconds: float, calls: int = 3) -> Trace:
    _Nap.seconds = seconds
    with mx.profile() as prof:
        x = mx.nd.ones((4, 4))
        for _ in range(calls):
            x = mx.nd.Custom(x, op_type="CompareNap")
        x.wait_to_read()
    assert prof.trace is not None
    return prof.trace


def test_a_custom_op_that_sleeps_longer_is_slower_in_its_python_off_cpu() -> None:
    # Blocks of 4 runs: where a block's halves (2 runs each) drift on this shared machine, the
    # verdict is declined as unstable (what blocks are judged with): a timing test, retried.
    def attempt() -> None:
        a = [_profile(0.010) for _ in range(4)]
        b = [_profile(0.016) for _ in range(4)]
        c = compare(a, b, label_a="10 ms", label_b="16 ms")
        off = c.row(RowKey(RowKind.CUSTOM_OP, "CompareNap", "python off CPU"))
        assert off.verdict is Verdict.SLOWER and 1.3 < off.ratio < 1.9, off
        assert c.end_to_end is not None and c.end_to_end.verdict is Verdict.SLOWER
        assert c.row(RowKey(RowKind.CUSTOM_OP, "CompareNap", "wall")).verdict is Verdict.SLOWER

    retried(attempt)


class _Steps(mx.operator.CustomOp):
    """Sleeps ``schedule[k]`` seconds in its k-th call of a run."""

    schedule: ClassVar[list[float]] = []
    calls: ClassVar[int] = 0

    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        time.sleep(_Steps.schedule[_Steps.calls % len(_Steps.schedule)])
        _Steps.calls += 1
        self.assign(out_data[0], req[0], in_data[0] + 1)


@mx.operator.register("CompareSteps")
class _StepsProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):  # type: ignore[no-untyped-def]
        return _Steps()


def _steps(schedule: list[float]) -> Trace:
    _Steps.schedule, _Steps.calls = schedule, 0
    with mx.profile() as prof:
        x = mx.nd.ones((4, 4))
        for _ in schedule:
            x = mx.nd.Custom(x, op_type="CompareSteps")
        x.wait_to_read()
    assert prof.trace is not None
    return prof.trace


def test_calls_are_paired_by_order_so_one_slower_call_is_named() -> None:
    """Only the second of four calls sleeps longer in B (4 -> 16 ms): the pairing names that call
    and finds the other three unchanged, and the table lists it among the calls that changed.

    A sleep here wakes late now and then (about 1 call in 20 takes 4-5 ms more: the GIL's 5 ms
    switch interval), so the runs are five a side, interleaved, and "unchanged" is read from the
    medians, against the changed call's move. Tried up to three times: in one CI run (the pure
    path, 2026-12-04) the slower call's wall got no verdict, its Python did."""

    def check() -> None:
        a, b = [], []
        for _ in range(5):  # interleaved, so a neighbour's load falls on both sides alike
            a.append(_steps([0.004, 0.004, 0.004, 0.004]))
            b.append(_steps([0.004, 0.016, 0.004, 0.004]))
        c = compare(a, b)
        # The change is in the Python (its sleep), so the calls' Python is where the known answer is
        # read: a call's wall also holds its queueing behind the one before (a 4 ms call once took 15).
        calls = c.calls("CompareSteps", "python")
        assert calls[1].verdict is Verdict.SLOWER and 2.5 < calls[1].ratio < 5.0 and calls[1].median_b > 15e6, calls[1]
        # The others moved by under half as much: late wake-ups cluster (three of five runs once woke a
        # 4 ms sleep ~5 ms late), which a fixed band around 1 does not allow for, but the 12 ms change stands out.
        changed = calls[1].median_b - calls[1].median_a
        assert all(abs(k.median_b - k.median_a) < 0.5 * changed for k in (calls[0], calls[2], calls[3])), calls
        sub = c.calls("CompareSteps", "sub-ops")[1]  # the sleep is Python: the call's sub-ops did not grow with it
        assert abs(sub.median_b - sub.median_a) < 0.1 * (calls[1].median_b - calls[1].median_a), sub
        most = c.most_changed_calls()
        assert most and most[0].index == 1, (most, c.calls("CompareSteps"))
        table = compare_table(c)
        assert "CompareSteps call 2" in table and "changed most" in table
        with pytest.raises(ValueError, match="part must be"):
            c.calls("CompareSteps", "python on CPU")

    retried(check)


def test_runs_with_different_call_counts_are_not_paired_and_say_why() -> None:
    def check() -> None:
        a, b = [], []
        for _ in range(3):  # interleaved, as above
            a.append(_steps([0.005] * 3))
            b.append(_steps([0.005] * 4))
        c = compare(a, b)
        assert "CompareSteps" not in c.paired
        with pytest.raises(KeyError, match=r"different numbers of calls \(A: 3; B: 4\)"):
            c.calls("CompareSteps")
        assert any("not paired" in n for n in c.notes)
        wall = c.row(RowKey(RowKind.CUSTOM_OP, "CompareSteps", "wall"))  # the type's row still compares: 4 calls for 3
        # 4 calls for 3: the medians, which one run stalled by late wake-ups (one took 31 ms for 16)
        # does not move; two of three stalled (seen once in ~10 full runs on a loaded machine) do.
        assert 1.1 < wall.median_b / wall.median_a < 1.7 and not np.isnan(wall.low), wall

    retried(check)


def test_opprof_diff_prints_the_table_and_gates_a_slower_b(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for side, ns in (("a", 1_000), ("b", 1_500)):
        (tmp_path / side).mkdir()
        for k, f in enumerate([1.0, 1.03, 0.98, 1.01, 0.99]):
            _run(int(ns * f)).save(str(tmp_path / side / f"run{k}.opprof"))
    assert cli(["diff", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "end to end" in out and "slower" in out
    assert cli(["diff", str(tmp_path / "a"), str(tmp_path / "b"), "--fail-if-slower", "10"]) == 2
    assert "slower end to end" in capsys.readouterr().err
    assert cli(["diff", str(tmp_path / "a"), str(tmp_path / "b"), "--fail-if-slower", "80"]) == 0  # 1.5x < 1.8x
    assert cli(["diff", str(tmp_path / "b"), str(tmp_path / "a"), "--fail-if-slower", "10"]) == 0  # faster: passes
    assert cli(["diff", str(tmp_path / "a" / "run*.opprof"), str(tmp_path / "nothing")]) == 1
    assert "no such file" in capsys.readouterr().err
    assert cli(["diff", str(tmp_path / "a"), str(tmp_path / "b"), "--calls", "NoSuchOp"]) == 1
    assert "NoSuchOp: calls not paired" in capsys.readouterr().err


def test_opprof_diff_calls_prints_each_call(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Tried up to three times, as the test above: in one CI run (3.x core suite, 2026-12-05) a stall
    made one run of A's 2 ms call last ~15 ms, its halves differed by 90 % and the changed call was
    rightly declined as "unstable" [0.43, 45.2], not called slower."""
    attempts = iter(range(3))

    def check() -> None:
        root = tmp_path / f"try{next(attempts)}"
        for side in ("a", "b"):
            (root / side).mkdir(parents=True)
        for k in range(5):  # interleaved: a loaded machine's stalls fall on both sides alike
            _steps([0.002, 0.002]).save(str(root / "a" / f"run{k}.opprof"))
            _steps([0.002, 0.016]).save(str(root / "b" / f"run{k}.opprof"))
        capsys.readouterr()
        assert cli(["diff", str(root / "a"), str(root / "b"), "--calls", "CompareSteps"]) == 0
        out = capsys.readouterr().out
        table = out[out.index("CompareSteps: each call") :].splitlines()
        rows = {ln.split()[2]: ln for ln in table if ln.startswith("CompareSteps call")}
        assert set(rows) == {"1", "2"} and "slower" in rows["2"], out  # call 1's verdict: see the test above

    retried(check)


def test_either_side_may_be_one_trace_a_list_or_a_result_with_runs() -> None:
    from types import SimpleNamespace

    result = SimpleNamespace(runs=[_run(1_000), _run(1_010)])  # what %%opprof --repeat leaves: its runs
    c = compare(_run(1_000), result)
    assert (c.runs_a, c.runs_b) == (1, 2)
    with pytest.raises(TypeError, match="takes traces"):
        compare([1, 2], [_run(1)])


def test_the_diff_chart_draws_each_row_coloured_by_its_verdict_with_its_interval() -> None:
    from opprof.view import diff_figure
    from opprof.view.diff import VERDICT_COLORS

    noise = [1.0, 1.04, 0.97, 1.02, 0.99]
    c = compare([_run(int(1_000 * f)) for f in noise], [_run(int(1_300 * f), extra="_copyto") for f in noise[::-1]])
    p = diff_figure(c)
    data = p.select_one({"name": "diff_rows"}).data
    shown = [r for r in c.rows if r.verdict in VERDICT_COLORS]  # added/removed rows have no ratio to draw
    assert data["row"] == [r.key.label() for r in shown] and data["row"][0] == "end to end"
    assert data["color"] == [VERDICT_COLORS[r.verdict] for r in shown]
    for k, r in enumerate(shown):
        assert data["pct"][k] == pytest.approx(100 * (r.ratio - 1))
        assert data["low"][k] <= data["pct"][k] <= data["high"][k]
        # The colour never claims more than the interval: grey (no change) or amber (declined as
        # unstable) exactly where the whisker crosses 0.
        undecided = {VERDICT_COLORS[Verdict.NO_CLEAR_CHANGE], VERDICT_COLORS[Verdict.UNSTABLE]}
        assert (data["color"][k] in undecided) == (data["low"][k] <= 0 <= data["high"][k])


def test_an_unstable_row_is_drawn_amber_and_named_in_the_table() -> None:
    from opprof.view import diff_figure
    from opprof.view.diff import VERDICT_COLORS

    a_us = [100, 101, 99, 100, 118, 119, 117, 118]
    b_us = [118, 117, 119, 118, 118, 117, 119, 118]
    c = compare([_run(us * 1_000) for us in a_us], [_run(us * 1_000) for us in b_us])
    e2e = c.end_to_end
    assert e2e is not None and e2e.verdict is Verdict.UNSTABLE
    data = diff_figure(c).select_one({"name": "diff_rows"}).data
    assert data["color"][0] == VERDICT_COLORS[Verdict.UNSTABLE] and data["verdict"][0] == "unstable"
    text = compare_table(c)
    assert "unstable" in text and "note: end to end seems unstable: the two halves of A differ by 18 %" in text


@pytest.mark.browser
def test_the_diff_chart_paints_red_for_slower_rows_in_a_real_browser(chromium_page: Any, tmp_path: Path) -> None:
    from bokeh.embed import file_html
    from bokeh.resources import INLINE

    from opprof.view import diff_figure

    page, _console, page_errors = chromium_page
    noise = [1.0, 1.04, 0.97, 1.02, 0.99]
    c = compare([_run(int(1_000 * f)) for f in noise], [_run(int(1_300 * f)) for f in noise[::-1]])
    path = tmp_path / "diff.html"
    path.write_text(file_html(diff_figure(c, title="opprof diff"), INLINE, "opprof diff"))
    page.goto(path.as_uri())
    red = """() => {
      const stack = [...((window.Bokeh && Bokeh.index) || [])];
      while (stack.length) {
        const v = stack.pop();
        if (v.model.type === "Figure" && v.canvas_view) {
          const cv = v.canvas_view.primary.canvas, d = cv.getContext("2d").getImageData(0, 0, cv.width, cv.height).data;
          let n = 0;
          for (let i = 0; i < d.length; i += 4) if (d[i] > 180 && d[i + 1] < 80 && d[i + 2] < 80) n++;
          return n;
        }
        stack.push(...(v.child_views ?? []));
      }
      return 0;
    }"""
    page.wait_for_function(f"() => ({red})() > 200", timeout=30_000)
    assert page_errors == []


# ---------------------------------------------------------------------------- side by side
def test_the_typical_run_is_the_median_one() -> None:
    runs = [_run(ns) for ns in (3_000, 1_000, 5_000, 2_000, 4_000)]
    lengths = sorted(r.table.length_ns for r in runs)
    assert typical_run(runs).table.length_ns == lengths[2]
    assert typical_run(runs[:4]).table.length_ns == sorted(r.table.length_ns for r in runs[:4])[1]  # the lower middle
    with pytest.raises(ValueError, match="no run"):
        typical_run([Trace()])


def test_side_by_side_puts_both_typical_runs_on_one_axis_from_zero() -> None:
    """10 ms naps against 20 ms ones: both runs start at 0, each is a process named by its label,
    and B's custom-op calls are twice as long, with their families and engine edges intact."""
    # Four calls a run: their median holds against a late wake-up (a 10 ms call once took 18).
    a = [_profile(0.010, calls=4) for _ in range(3)]
    b = [_profile(0.020, calls=4) for _ in range(3)]
    both = side_by_side(a, b, label_a="before", label_b="after")
    assert both.processes == {1: "before", 2: "after"} and both.validate() == []
    pid_of = {th.tid: th.pid for th in both.threads}
    t = both.table
    for pid in (1, 2):
        mine = np.array([pid_of[int(x)] == pid for x in t.tid.tolist()])
        assert int(t.start[mine].min()) == 0
    calls = both.custom_ops()
    by_side = {p: [c.wall_ns for c in calls if pid_of[int(t.tid[np.flatnonzero(t.start == c.start_ns)[0]])] == p] for p in (1, 2)}
    assert len(by_side[1]) == len(by_side[2]) == 4
    assert 1.6 < np.median(by_side[2]) / np.median(by_side[1]) < 2.4
    assert both.ops is not None and both.waiting_causes() is not None
    assert both.critical_path().approximate and "side by side" in both.critical_path().note


def test_opprof_diff_html_writes_both_runs_on_one_axis(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for side, seconds in (("a", 0.002), ("b", 0.004)):
        (tmp_path / side).mkdir()
        for k in range(3):
            _profile(seconds).save(str(tmp_path / side / f"run{k}.opprof"))
    out = tmp_path / "diff.html"
    assert cli(["diff", str(tmp_path / "a"), str(tmp_path / "b"), "--html", str(out)]) == 0
    assert "on one time axis" in capsys.readouterr().out and out.stat().st_size > 10_000
    html = out.read_text()
    assert "A \\u00b7 MainThread" in html and "B \\u00b7 MainThread" in html  # the lanes of both, named by side
    assert cli(["diff", str(tmp_path / "a"), str(tmp_path / "b"), "--html", str(tmp_path / "nowhere" / "x.html")]) == 1
    assert "no such directory" in capsys.readouterr().err


def test_runs_with_and_without_the_gils_evidence_compare_their_queued_time_whole() -> None:
    """The same recording twice a side, B's stripped of its thread states (as on the pure path): the
    queued causes are compared whole on both sides, equal, with a note; no row of a GIL part."""
    from opprof.trace import load

    path = Path(__file__).parent.parent / "data" / "whatif-gil-replay-drift.opprof"
    a = [load(path) for _ in range(2)]
    b = [load(path) for _ in range(2)]
    for t in b:
        t.thread_states = None
    assert any(k.endswith(("_gil", "_wake")) for r in a[0].custom_ops() for k in r.waiting_by_cause)
    c = compare(a, b)
    waiting = [r for r in c.rows if r.key.kind is RowKind.CUSTOM_OP and r.key.part.startswith("waiting: ")]
    assert waiting and not any(r.key.part.endswith(("_gil", "_wake")) for r in waiting)
    for r in waiting:
        assert r.median_a == r.median_b and r.verdict is Verdict.NO_CLEAR_CHANGE, r
    assert any("GIL's evidence" in n for n in c.notes)
    both = compare(a, a)  # the same evidence on both sides: the parts are rows of their own
    assert any(r.key.part.endswith("_gil") for r in both.rows if r.key.kind is RowKind.CUSTOM_OP)


# ---------------------------------------------------------------------------- blocks of runs, minutes apart
def test_halves_that_drift_widen_the_interval_and_a_small_change_inside_it_is_declined() -> None:
    """Known answer: A's block drifts 18 % between its halves (its second half ran slower), B is 8 %
    slower than A's mean with little noise. Welch alone calls it; within an 18 % drift it is declined,
    with the note that says why."""
    from opprof.trace.compare import block_shift, judged

    a = np.array([100.0, 101, 99, 100, 118, 119, 117, 118])  # halves: 100 and 118
    b = np.array([118.0, 117, 119, 118, 118, 117, 119, 118])
    assert block_shift(a) == pytest.approx(np.log(118 / 100), rel=1e-3)
    assert block_shift(b) < 0.01
    assert verdict_of(*ratio_interval(a, b)[1:]) is Verdict.SLOWER  # what the plain interval says
    j = judged(a, b)
    # The halves' fastest halves (two runs of four): 99.5 and 117.5 in A, 117.5 and 117.5 in B:
    # widened by twice the larger shift.
    assert j.estimate is Estimate.FASTEST_HALF and block_shift(a, fastest=True) == pytest.approx(np.log(117.5 / 99.5))
    assert j.verdict is Verdict.UNSTABLE and j.low < 1 < j.high
    assert j.block_noise == pytest.approx((117.5 / 99.5) ** 2 - 1, abs=0.01)
    assert j.why_unstable.startswith("the two halves of A differ by 18 %: too unstable to call a")


def test_a_real_change_larger_than_the_drift_still_stands() -> None:
    from opprof.trace.compare import judged

    a = np.array([100.0, 101, 99, 100, 104, 105, 103, 104])  # a 4 % drift
    b = 1.5 * a[::-1]
    j = judged(a, b)
    assert j.verdict is Verdict.SLOWER and j.low > 1 and j.why_unstable == "" and 0.06 < j.block_noise < 0.10  # twice a 4 % shift


def test_blocks_whose_halves_agree_still_do_not_call_a_change_under_one_percent() -> None:
    """Known answer: blocks of 20 runs with 0.1 % noise and halves that agree: B 0.6 % over A is
    not called (the blocks' shift between them is taken to be at least 1 %), 3 % over A is, and so
    are 0.6 % over A taken interleaved, in pairs, which a shift between blocks cannot fool."""
    from opprof.trace.compare import MIN_BLOCK_NOISE, judged

    rng = np.random.default_rng(11)
    a = 100 * np.exp(0.001 * rng.standard_normal(20))
    near = 100.6 * np.exp(0.001 * rng.standard_normal(20))
    assert verdict_of(*ratio_interval(a, near)[1:]) is Verdict.SLOWER  # what the plain interval says
    j = judged(a, near)
    assert j.verdict is Verdict.NO_CLEAR_CHANGE and j.why_unstable == "" and j.block_noise == pytest.approx(MIN_BLOCK_NOISE)
    assert judged(a, 103 * np.exp(0.001 * rng.standard_normal(20))).verdict is Verdict.SLOWER
    assert judged(a, near, paired=True).verdict is Verdict.SLOWER


def test_blocked_identical_code_gives_few_false_verdicts_when_the_machine_drifts() -> None:
    """Known answer for the method: identical programs, A's block of 10 runs then B's, on a machine
    whose state wanders (one random walk of 2 % a run through both blocks, 2 % noise). Welch alone
    calls a change in about half the trials; widened by the halves, in at most 5 %."""
    from opprof.trace.compare import judged

    rng = np.random.default_rng(5)
    plain = widened = 0
    trials = 400
    for _ in range(trials):
        v = 100 * np.exp(np.cumsum(0.02 * rng.standard_normal(20)) + 0.02 * rng.standard_normal(20))
        a, b = v[:10], v[10:]
        plain += verdict_of(*ratio_interval(a, b)[1:]) is not Verdict.NO_CLEAR_CHANGE
        widened += judged(a, b).verdict in (Verdict.FASTER, Verdict.SLOWER)
    assert plain / trials > 0.3, plain  # the case the widening is for
    assert widened / trials <= 0.05, f"{widened} of {trials} identical blocks on a drifting machine were given a verdict"


def test_interleaved_runs_are_judged_in_pairs_which_a_shared_shift_cannot_fool() -> None:
    """A and B taken alternately on a machine that drifts 40 % over the trial: each pair shares its
    moment, so the paired interval finds a 10 % change the blocked one cannot."""
    from opprof.trace.compare import judged, paired_interval

    rng = np.random.default_rng(3)
    drift = np.exp(np.linspace(0, np.log(1.4), 10))
    a = 100 * drift * np.exp(0.01 * rng.standard_normal(10))
    b = 110 * drift * np.exp(0.01 * rng.standard_normal(10))
    ratio, lo, hi = paired_interval(a, b)
    assert 1 < lo < 1.1 < hi and abs(ratio - 1.1) < 0.02
    assert judged(a, b, paired=True).verdict is Verdict.SLOWER
    assert judged(a, b).verdict is not Verdict.SLOWER  # as blocks, the drift swamps it


def test_runs_compare_per_loop_and_short_runs_are_said_to_be_short() -> None:
    def loops(t: Trace, n: int) -> Trace:
        t.metadata["loops"] = n
        return t

    noise = [1.0, 1.03, 0.98, 1.01, 0.99, 1.02]
    a = [loops(_run(int(4_000 * f)), 4) for f in noise]  # four loops of ~1,000 ns ops
    b = [loops(_run(int(1_000 * f)), 1) for f in noise]  # one loop of the same ops
    c = compare(a, b)
    e2e = c.end_to_end
    assert e2e is not None and e2e.verdict is Verdict.NO_CLEAR_CHANGE and abs(e2e.ratio - 1) < 0.03
    assert e2e.median_a == pytest.approx(2_000, rel=0.05)  # per loop: 8,000 ns a run / 4
    assert any(n.startswith("runs last ") and "too short" in n for n in c.notes)
    assert "note: runs last" in compare_table(c)
    assert any("A's runs ran the code 4 time(s) each and B's 1" in n for n in c.notes)  # once-a-run costs differ
    same = compare(a, [loops(_run(int(4_000 * f)), 4) for f in noise])
    assert not any("ran the code" in n for n in same.notes)


def test_fail_if_slower_does_not_fire_on_instability(tmp_path: Path) -> None:
    a_times = [100, 101, 99, 100, 118, 119, 117, 118]
    b_times = [118, 117, 119, 118, 118, 117, 119, 118]
    for side, times in (("a", a_times), ("b", b_times)):
        (tmp_path / side).mkdir()
        for k, us in enumerate(times):
            _run(us * 1_000).save(str(tmp_path / side / f"run{k}.opprof"))
    c = compare(
        [mx.trace.load(p) for p in sorted((tmp_path / "a").iterdir())],
        [mx.trace.load(p) for p in sorted((tmp_path / "b").iterdir())],
    )
    assert c.end_to_end is not None and c.end_to_end.verdict is Verdict.UNSTABLE
    assert any("seems unstable" in n for n in c.notes)
    assert cli(["diff", str(tmp_path / "a"), str(tmp_path / "b"), "--fail-if-slower", "5"]) == 0


def test_blocks_judge_the_fastest_half_so_disturbed_runs_do_not_hide_a_change() -> None:
    """Known answer: A's runs take 100 and B's 110 when undisturbed; two runs of each block were
    hit by a neighbour (+12-15 %). B/A of the fastest halves (the mean of each side's five fastest:
    100.2 and 110.2) is the undisturbed 1.10, found slower."""
    from opprof.trace.compare import fastest_half, judged

    a = np.array([100.0, 101, 115, 100, 100.5, 101, 112, 100, 100.5, 101])
    b = np.array([110.0, 126, 110.5, 111, 110, 110.5, 110, 124, 111, 110.5])
    assert fastest_half(a) == pytest.approx(100.2) and fastest_half(b) == pytest.approx(110.2)
    assert fastest_half(np.array([3.0, 1, 2])) == pytest.approx(1.5)  # an odd count: the faster ceil(n / 2)
    j = judged(a, b)
    assert j.estimate is Estimate.FASTEST_HALF and j.ratio == pytest.approx(110.2 / 100.2)
    assert j.verdict is Verdict.SLOWER and 1 < j.low <= j.ratio <= j.high
    assert judged(a, b) == j  # a fixed seed: the same runs, the same verdict


def test_lucky_fast_runs_do_not_make_a_change_when_the_runs_as_a_whole_did_not_move() -> None:
    """Known answer: B's runs are bimodal, four (in both halves) 10 % under A's and the rest 3-9 %
    over. Its one fastest run says 0.90, and it alone, widening and all, said faster (the estimate
    before 2026-12-05); four lucky runs cannot carry the fastest half (0.93, its interval reaching
    past 1), and the runs as a whole do not move (B/A of the geometric means 0.99): no verdict."""
    from opprof.trace.compare import fastest_half_interval, judged

    a = np.array([100.2, 100.0, 100.4, 100.1, 100.3, 100.0, 100.2, 100.1, 100.4, 100.3])
    b = np.array([106, 90.0, 103, 90.2, 108, 104, 89.9, 107, 90.1, 109])
    ratio, _low, high = fastest_half_interval(a, b)
    assert ratio == pytest.approx((89.9 + 90.0 + 90.1 + 90.2 + 103) / (100.0 + 100.0 + 100.1 + 100.1 + 100.2)) and high > 1
    assert verdict_of(*ratio_interval(a, b)[1:]) is Verdict.NO_CLEAR_CHANGE
    j = judged(a, b)
    assert j.estimate is Estimate.FASTEST_HALF and j.ratio == pytest.approx(ratio) and j.verdict is Verdict.NO_CLEAR_CHANGE


def test_a_row_with_a_zero_keeps_the_geometric_means_and_the_table_says_what_each_ratio_is() -> None:
    from opprof.trace.compare import judged

    a = np.array([0.0, 10, 12, 11, 9, 10])
    b = np.array([10.0, 11, 0, 10, 12, 9])
    assert judged(a, b).estimate is Estimate.GEOMETRIC_MEAN
    c = compare([_run(int(1_000 * f)) for f in (1.0, 1.02, 0.99, 1.01)], [_run(int(1_000 * f)) for f in (1.0, 1.01, 0.98, 1.02)])
    assert c.end_to_end is not None and c.end_to_end.estimate is Estimate.FASTEST_HALF
    assert "B/A of the fastest half of the runs" in compare_table(c).splitlines()[0]
    paired = compare([_run(1_000)] * 3, [_run(1_100)] * 3, paired=True)
    assert paired.end_to_end is not None and paired.end_to_end.estimate is Estimate.PAIRS
    assert "B/A of the pairs" in compare_table(paired).splitlines()[0]


def test_blocks_too_few_to_find_ten_percent_say_so_and_twenty_do_not() -> None:
    """A blocked comparison that finds no change with fewer than BLOCK_RUNS_FOR_10_PERCENT runs a
    side says how many would (or to interleave); with that many, or paired, or with a verdict, no such note."""
    from opprof.trace.compare import BLOCK_RUNS_FOR_10_PERCENT

    rng = np.random.default_rng(4)

    def runs(n: int, scale: float = 1.0) -> list[Trace]:
        return [_run(int(scale * 1_000 * np.exp(0.02 * rng.standard_normal()))) for _ in range(n)]

    few = compare(runs(10), runs(10))
    assert few.end_to_end is not None and few.end_to_end.verdict is not Verdict.SLOWER
    said = f"blocks of 10 runs may miss a change of ~10 %: run {BLOCK_RUNS_FOR_10_PERCENT} a side"
    assert any(n.startswith(said) for n in few.notes)
    n = BLOCK_RUNS_FOR_10_PERCENT
    enough = compare(runs(n), runs(n))
    assert not any("may miss" in note for note in enough.notes)
    assert not any("may miss" in note for note in compare(runs(10), runs(10), paired=True).notes)
    found = compare(runs(10), runs(10, 1.5))
    assert found.end_to_end is not None and found.end_to_end.verdict is Verdict.SLOWER
    assert not any("may miss" in note for note in found.notes)
