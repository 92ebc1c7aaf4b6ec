"""``what_if``: a recorded profile replayed with a change, checked against the changed program run for real.

Each accuracy case records a workload of sleeping ops, whose durations are known and which release
the GIL, so threads really run in parallel. It predicts the end-to-end time after a change
(an op faster or slower, a bigger pool), then makes that change in the program, runs it, and
asserts that the prediction is within 10 % of the measured run and that the model without change
is within 10 % of the recording. Sleeps are 15-40 ms, against ~50 µs of engine overhead per op.

Noise: this is a shared two-core machine. When other processes keep both cores busy, a sleep
overshoots and a hand-off waits by milliseconds. That time is added, not scaled: a recording
whose 40 ms sleeps each took 43 predicts 21.5 ms for a 20 ms sleep that takes 23. So the
recording is the median of three profiles, the measured time the median of three real runs (each
engine warmed up first: a pool thread's first start costs 0.2-4 ms), and a case that misses gets
two more attempts. An error in the model fails all three.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import opprof
import opprof as mx
from opprof import nd
from opprof.engine import gil
from opprof.trace import Role, Trace, from_chrome, load
from opprof.trace.analysis.whatif import WhatIf, what_if
from opprof.trace.analysis.whatif.prepare import BORROWED, LATENCY_WORDS
from opprof.trace.columns import ROLE_CODE
from opprof.trace.ops import WAIT_ID_BASE
from opprof.trace.synthetic import synthetic_trace

pytestmark = pytest.mark.timeout(120)

#: Seconds each sleeping op sleeps, by key; every case sets its own (and the fixture clears them).
SLEEP: dict[str, float] = {}


def nap(key: str) -> None:
    time.sleep(SLEEP.get(key, 0.001))


class SleepOp(mx.operator.CustomOp):
    """Python that sleeps (forward ``fwd``, backward ``bwd``), then one sub-op and the assignment."""

    def forward(self, is_train, req, in_data, out_data, aux):
        nap("fwd")
        self.assign(out_data[0], req[0], in_data[0] + 1)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        nap("bwd")
        self.assign(in_grad[0], req[0], out_grad[0] * 1)


@mx.operator.register("WhatIfSleep")
class SleepProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return SleepOp()


class SubSleepOp(mx.operator.CustomOp):
    """Python that pushes two independent sleeping sub-ops (``sub``) and waits for both."""

    def forward(self, is_train, req, in_data, out_data, aux):
        eng = opprof.engine.get_engine()
        vs = [eng.new_var() for _ in range(2)]
        for v in vs:
            eng.push(lambda: nap("sub"), writes=[v], name="nap")
        for v in vs:
            eng.wait_for_var(v)
        self.assign(out_data[0], req[0], in_data[0] + 1)


@mx.operator.register("WhatIfSubs")
class SubSleepProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return SubSleepOp()


@pytest.fixture(autouse=True)
def restore_engine() -> Iterator[None]:
    try:
        yield
    finally:
        SLEEP.clear()
        mx.set_engine("threaded")


# ---------------------------------------------------------------------------- workloads
def custom_chain() -> None:
    """Three custom-op calls, each on the last one's output."""
    y = nd.ones((4, 4))
    for _ in range(3):
        y = nd.Custom(y, op_type="WhatIfSleep")
    y.asnumpy()


def custom_spaced() -> None:
    """Four independent custom-op calls, 3 ms of the program's own work between their pushes."""
    x = nd.ones((4, 4))
    for _ in range(4):
        nd.Custom(x, op_type="WhatIfSleep")
        time.sleep(0.003)
    nd.waitall()


def plain_independent() -> None:
    """Four plain engine ops writing four vars: nothing orders them."""
    eng = opprof.engine.get_engine()
    for v in [eng.new_var() for _ in range(4)]:
        eng.push(lambda: nap("op"), writes=[v], name="nap")
    nd.waitall()


def plain_chain() -> None:
    """Three plain engine ops writing one var: a chain."""
    eng = opprof.engine.get_engine()
    v = eng.new_var()
    for name in ("nap_a", "nap_b", "nap_c"):
        eng.push(lambda name=name: nap(name), writes=[v], name=name)
    eng.wait_for_var(v)


def subop_chain() -> None:
    """Two custom-op calls in a chain, each waiting for two sleeping sub-ops of its own."""
    y = nd.ones((4, 4))
    for _ in range(2):
        y = nd.Custom(y, op_type="WhatIfSubs")
    y.asnumpy()


def training_step() -> None:
    """Two custom-op calls under autograd, then their backward."""
    x = nd.ones((4, 4))
    x.attach_grad()
    with mx.autograd.record():
        y = nd.Custom(nd.Custom(x, op_type="WhatIfSleep"), op_type="WhatIfSleep")
    y.backward()
    x.grad.asnumpy()


# ---------------------------------------------------------------------------- recording and measuring
def set_engine(kind: str, workers: int, custom: int) -> None:
    if kind == "naive":
        mx.set_engine("naive")
    else:
        mx.set_engine("threaded", workers=workers, custom_workers=custom)


def profiles(run: Callable[[], None], n: int) -> list[Trace]:
    """``n`` profiles of ``run`` on the current engine, after one run that warms its threads up."""
    run()
    out = []
    for _ in range(n):
        with opprof.profile() as prof:
            run()
        out.append(prof.trace)
    return out


def end_to_end(trace: Trace) -> int:
    """A profile's end-to-end time, measured as what_if measures the recording."""
    return what_if(trace).recorded_ns


@dataclass(frozen=True)
class Case:
    id: str
    run: Callable[[], None]
    sleep: dict[str, float]  # as recorded
    changed_sleep: dict[str, float]  # the change, made in the program
    speedup: dict[str, float] = field(default_factory=dict)
    workers: int = 2
    custom: int = 1
    engine_threads: int | None = None
    custom_threads: int | None = None
    engine: str = "threaded"


CASES = [
    Case(
        "custom_python_2x_faster",
        custom_chain,
        {"fwd": 0.040},
        {"fwd": 0.020},
        speedup={"WhatIfSleep::pure_python": 2.0},
    ),
    Case("custom_pool_1_to_2", custom_spaced, {"fwd": 0.030}, {"fwd": 0.030}, custom_threads=2),
    Case("engine_pool_1_to_2", plain_independent, {"op": 0.020}, {"op": 0.020}, workers=1, engine_threads=2),
    Case(
        "plain_op_2x_slower",
        plain_chain,
        {"nap_a": 0.015, "nap_b": 0.015, "nap_c": 0.015},
        {"nap_a": 0.015, "nap_b": 0.030, "nap_c": 0.015},
        speedup={"nap_b": 0.5},
    ),
    Case("subop_pool_1_to_2", subop_chain, {"sub": 0.015}, {"sub": 0.015}, workers=1, engine_threads=2),
    Case(
        "backward_2x_faster",
        training_step,
        {"fwd": 0.020, "bwd": 0.020},
        {"fwd": 0.020, "bwd": 0.010},
        speedup={"_backward_WhatIfSleep": 2.0},
    ),
    Case(
        "naive_python_2x_faster",
        custom_chain,
        {"fwd": 0.040},
        {"fwd": 0.020},
        speedup={"WhatIfSleep::pure_python": 2.0},
        engine="naive",
    ),
]


@dataclass(frozen=True)
class Outcome:
    prediction: WhatIf
    measured_ns: int

    @property
    def error(self) -> float:
        return (self.prediction.predicted_ns - self.measured_ns) / self.measured_ns

    @property
    def ok(self) -> bool:
        w = self.prediction
        return abs(self.error) <= 0.10 and abs(w.baseline_ns - w.recorded_ns) <= 0.10 * w.recorded_ns

    def __str__(self) -> str:
        w = self.prediction
        return (
            f"predicted {w.predicted_ns / 1e6:.2f} ms, measured {self.measured_ns / 1e6:.2f} ms "
            f"({self.error:+.1%}); recorded {w.recorded_ns / 1e6:.2f} ms, model without change "
            f"{w.baseline_ns / 1e6:.2f} ms ({w.model_error:+.1%})"
        )


def attempt(case: Case) -> Outcome:
    SLEEP.clear()
    SLEEP.update(case.sleep)
    set_engine(case.engine, case.workers, case.custom)
    recorded = sorted(profiles(case.run, 3), key=end_to_end)[1]
    kw: dict[str, Any] = {}
    if case.engine_threads is not None:
        kw["engine_threads"] = case.engine_threads
    if case.custom_threads is not None:
        kw["custom_threads"] = case.custom_threads
    prediction = what_if(recorded, case.speedup, **kw)
    SLEEP.clear()
    SLEEP.update(case.changed_sleep)
    set_engine(case.engine, case.engine_threads or case.workers, case.custom_threads or case.custom)
    measured = int(statistics.median(end_to_end(t) for t in profiles(case.run, 3)))
    return Outcome(prediction, measured)


@pytest.mark.e2e  # real sleeping runs, ~4 s
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_prediction_matches_the_changed_run(case: Case) -> None:
    outcome = attempt(case)
    for k in range(2):  # more tries: see the module docstring
        if outcome.ok:
            break
        print(f"{case.id} (attempt {k + 1}): {outcome}")
        outcome = attempt(case)
    print(f"{case.id}: {outcome}")
    w = outcome.prediction
    assert abs(w.baseline_ns - w.recorded_ns) <= 0.10 * w.recorded_ns, f"model without change is off: {outcome}"
    assert abs(outcome.error) <= 0.10, f"prediction is off: {outcome}"
    assert Trace.of(w.trace).validate() == []


# ---------------------------------------------------------------------------- the predicted trace
@pytest.fixture(scope="module")
def training_trace() -> Iterator[Trace]:
    """A short threaded profile with forward and backward custom ops, waits and sub-ops."""
    SLEEP.update(fwd=0.004, bwd=0.002)
    try:
        mx.set_engine("threaded", workers=2, custom_workers=1)
        (trace,) = profiles(training_step, 1)
        yield trace
    finally:
        SLEEP.clear()
        mx.set_engine("threaded")


def test_predicted_trace_is_a_profile(training_trace: Trace) -> None:
    w = what_if(training_trace, {"WhatIfSleep": 2.0}, engine_threads=3, custom_threads=2)
    predicted = Trace.of(w.trace)
    assert predicted.validate() == []
    assert len(predicted.custom_ops()) == len(training_trace.custom_ops()) == 4
    assert {r.backward for r in predicted.custom_ops()} == {False, True}
    names = {th.name for th in predicted.threads}
    assert "MainThread" in names
    assert {f"opprof-engine-{i}" for i in range(3)} <= names
    assert any(n.startswith("opprof-custom-") for n in names)
    # Every recorded op ran once in the model, on an engine worker; Pythons on custom-op threads.
    t, rec = predicted.table, training_trace.table
    engine_tids = {th.tid for th in predicted.threads if th.name.startswith("opprof-engine-")}
    custom_tids = {th.tid for th in predicted.threads if th.name.startswith("opprof-custom-")}
    is_op = (t.op >= 0) & (t.op < WAIT_ID_BASE)
    ran = t.op[is_op].tolist()
    assert sorted(ran) == sorted(rec.op[(rec.op >= 0) & (rec.op < WAIT_ID_BASE)].tolist())
    assert len(ran) == len(set(ran))
    assert set(t.tid[is_op & (t.role != ROLE_CODE[Role.PARENT])].tolist()) <= engine_tids
    assert set(t.tid[t.role == ROLE_CODE[Role.PYTHON]].tolist()) <= custom_tids
    # The predicted run is a trace what_if reads in turn: replayed unchanged, it is itself, within
    # 1 µs on a live recording (seen 1 ns off in about 1 of 60: a program's gap before its
    # WaitForAll waited 36,302 ns for the GIL in the replay of the prediction, 36,301 in the
    # prediction; the recording of a 37 µs drift is checked to the ns below).
    again = what_if(w.trace)
    ns = (again.recorded_ns, again.baseline_ns, w.predicted_ns)
    assert max(ns) - min(ns) <= 1_000, ns
    assert w.trace.metadata["engine_workers"] == 3 and w.trace.metadata["custom_workers"] == 2


def test_prediction_of_a_trace_without_gil_samples_replays_as_itself() -> None:
    """A recording without thread states (the pure-Python recorder's) gives a prediction whose
    states are the model's own: its replay must still model hand-offs as the prediction did, not
    as taking the GIL. Without that, 40 small custom ops (``small_loop``, below) replayed their
    prediction up to 368 µs off in 4 of 6 recordings; the demo's training step 1.9-10.6 µs off in
    4 of 150, which CI's pure path caught."""
    set_engine("threaded", 2, 1)
    for trace in profiles(small_loop, 3):
        trace.thread_states = None
        trace.metadata.pop("gil", None)
        w = what_if(trace, engine_threads=3, custom_threads=2)
        assert w.trace.metadata["gil"]["hand_offs_hold_gil"] is False
        again = what_if(w.trace)
        assert again.recorded_ns == w.predicted_ns
        assert abs(again.baseline_ns - w.predicted_ns) <= 1_000, (again.baseline_ns, w.predicted_ns)


def test_selections_scale_what_they_name(training_trace: Trace) -> None:
    t = training_trace.table
    # Without the GIL (gil=False): its model re-times each Python's waits for it, and this test is
    # about what a selection scales, to the µs.
    w = what_if(training_trace, {"_backward_WhatIfSleep": 2.0}, gil=False)
    p = w.trace.table

    def python_durations(table: Any, backward: bool) -> list[int]:
        m = (table.strs(table.name) == "WhatIfSleep::pure_python") & (table.backward == int(backward))
        return sorted((table.end - table.start)[m].tolist())

    # Only the backward Python got faster: by the factor, to the µs, against the same model without
    # the change (a Python whose recording shows a wait for the GIL inside, a busy machine's, is that
    # much shorter there: 764 µs once in CI, 2026-12-05).
    base = what_if(training_trace, gil=False).trace.table
    for got, rec in zip(python_durations(p, False), python_durations(base, False), strict=True):
        assert abs(got - rec) <= 1_000
    for got, rec in zip(python_durations(p, True), python_durations(base, True), strict=True):
        assert abs(got - rec / 2) <= 1_000
    # A type selects its whole family; an exact name beats it where both apply.
    whole = what_if(training_trace, {"WhatIfSleep": 2.0}, gil=False)
    sub = "WhatIfSleep::_plus_scalar"
    rec_sub = sorted((t.end - t.start)[t.strs(t.name) == sub].tolist())
    q = whole.trace.table
    got_sub = sorted((q.end - q.start)[q.strs(q.name) == sub].tolist())
    assert got_sub == [round(d / 2) for d in rec_sub]
    only_python = what_if(training_trace, {"WhatIfSleep::pure_python": 2.0}, gil=False)
    both = what_if(training_trace, {"WhatIfSleep": 1.0, "WhatIfSleep::pure_python": 2.0}, gil=False)
    assert both.predicted_ns == only_python.predicted_ns
    assert whole.predicted_ns < w.predicted_ns < w.baseline_ns


def test_result_in_words(training_trace: Trace) -> None:
    w = what_if(training_trace, {"WhatIfSleep::pure_python": 2.0}, custom_threads=2)
    text = str(w)
    assert "WhatIfSleep::pure_python 2x faster" in text and "2 custom threads (recorded 1)" in text
    assert "predicted" in text and "recorded" in text and "model without change" in text and text.endswith("x")
    assert w.change == pytest.approx(w.predicted_ns / w.recorded_ns)
    assert f"{w.change:.2f}x" in text
    assert any("GIL" in n for n in w.notes)
    assert set(w.calibration or {}) >= {"engine_wake", "custom_wake"}
    unchanged = what_if(training_trace)
    assert unchanged.predicted_ns == unchanged.baseline_ns and str(unchanged).startswith("no change: ")
    assert what_if(training_trace, {"WhatIfSleep": 0.5}).describe_change() == "WhatIfSleep 2x slower"


def _handoff_note(w: WhatIf) -> str:
    (note,) = [n for n in w.notes if n.startswith("Hand-offs, read off this trace: ")]
    return note


def test_the_handoffs_note_gives_each_latency_and_what_it_was_measured_on(training_trace: Trace) -> None:
    """Each kind of hand-off, with the latency the model used, says what it came from: the mean of
    this trace's samples of its kind (as ``_mean`` computes it: it said "median" before), another
    kind's where the trace has none of its own, or the default."""
    note = _handoff_note(what_if(training_trace))
    lat = what_if(training_trace).calibration or {}
    for kind, words in LATENCY_WORDS.items():
        m = re.search(re.escape(words) + r" ([\d.,]+ [µm]?s) \(([^)]*)\)", note)
        assert m is not None, (kind, note)
        assert (
            m.group(2) == "none seen: default"
            or re.fullmatch(r"mean of [1-9]\d*", m.group(2))
            or (m.group(2) == f"none seen: as {LATENCY_WORDS[BORROWED[kind]]}" and lat[kind] == lat[BORROWED[kind]])
        ), (kind, m.group(2))
    assert "median" not in note
    assert re.search(re.escape(LATENCY_WORDS["engine_wake"]) + r" [^(]*\(mean of [1-9]", note)


def test_a_python_that_never_waited_wakes_as_the_program_does() -> None:
    """Plain ops only: the program waited (blocked) for its chain, no custom-op Python did. Its
    wait's latency stands for a Python's, and the note says so rather than "mean of" the
    program's samples (what it said before, as if Pythons had been measured)."""
    SLEEP.update(nap_a=0.002, nap_b=0.002, nap_c=0.002)
    try:
        set_engine("threaded", 2, 1)
        (trace,) = profiles(plain_chain, 1)
    finally:
        SLEEP.clear()
        mx.set_engine("threaded")
    w = what_if(trace)
    lat = w.calibration or {}
    assert lat["wake_python"] == lat["wake_program"]
    note = _handoff_note(w)
    assert f"{LATENCY_WORDS['wake_python']} " in note
    assert re.search(re.escape(LATENCY_WORDS["wake_program"]) + r" [^(]*\(mean of 1\)", note), note
    assert re.search(
        re.escape(LATENCY_WORDS["wake_python"]) + r" [^(]*\(none seen: as " + re.escape(LATENCY_WORDS["wake_program"]), note
    ), note


def test_saved_as_opprof_replays_the_same(training_trace: Trace, tmp_path: Path) -> None:
    path = tmp_path / "step.opprof"
    training_trace.save(path)
    a = what_if(training_trace, {"WhatIfSleep": 2.0}, engine_threads=1)
    b = what_if(load(path), {"WhatIfSleep": 2.0}, engine_threads=1)
    assert (a.recorded_ns, a.baseline_ns, a.predicted_ns) == (b.recorded_ns, b.baseline_ns, b.predicted_ns)


# ---------------------------------------------------------------------------- errors
def test_unknown_name_names_the_closest(training_trace: Trace) -> None:
    with pytest.raises(ValueError, match="WhatIfSleep::pure_python") as e:
        what_if(training_trace, {"WhatIfSleep::pure_pyton": 2.0})
    assert "'WhatIfSleep::pure_pyton'" in str(e.value) and "closest" in str(e.value)
    with pytest.raises(ValueError, match="known"):
        what_if(training_trace, {"NoSuchOp": 2.0})
    with pytest.raises(ValueError):  # waits are not work: no factor applies to them
        what_if(training_trace, {"WaitForVar": 2.0})


@pytest.mark.parametrize("factor", [0, -1.0, math.nan, math.inf, -math.inf])
def test_bad_factor(training_trace: Trace, factor: float) -> None:
    with pytest.raises(ValueError, match="finite number > 0"):
        what_if(training_trace, {"WhatIfSleep": factor})


@pytest.mark.parametrize("factor", ["2", True, None])
def test_factor_not_a_number(training_trace: Trace, factor: Any) -> None:
    with pytest.raises(TypeError, match="must be a number"):
        what_if(training_trace, {"WhatIfSleep": factor})


@pytest.mark.parametrize("kw", [{"engine_threads": 0}, {"custom_threads": -1}, {"engine_threads": 1.5}])
def test_bad_pool_size(training_trace: Trace, kw: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=">= 1"):
        what_if(training_trace, **kw)


def test_trace_without_edges(training_trace: Trace) -> None:
    with pytest.raises(ValueError, match=r"\.opprof"):
        what_if(synthetic_trace(300))
    chrome = from_chrome(training_trace.to_chrome())
    assert chrome.n_spans == training_trace.n_spans  # the spans survive, the edges do not
    with pytest.raises(ValueError, match="Chrome trace JSON keeps no edges"):
        what_if(chrome, {"WhatIfSleep": 2.0})


def test_naive_engine_has_no_pools() -> None:
    SLEEP.update(fwd=0.002)
    mx.set_engine("naive")
    (trace,) = profiles(custom_chain, 1)
    assert trace.metadata["engine"] == "naive"
    with pytest.raises(ValueError, match="naive engine"):
        what_if(trace, engine_threads=2)
    with pytest.raises(ValueError, match="naive engine"):
        what_if(trace, custom_threads=2)
    w = what_if(trace, {"WhatIfSleep::pure_python": 2.0})
    assert w.engine_threads is None and w.custom_threads is None
    assert w.baseline_ns == w.recorded_ns and w.predicted_ns < w.recorded_ns
    assert Trace.of(w.trace).validate() == []
    assert len(Trace.of(w.trace).custom_ops()) == 3
    python = np.array([r.python_ns for r in Trace.of(w.trace).custom_ops()])
    recorded = np.array([r.python_ns for r in trace.custom_ops()])
    assert np.all(python < recorded)


# ---------------------------------------------------------------------------- the GIL, known answers
# Pure-Python ops that hold the GIL (a spin on the thread's CPU clock), against real runs: the
# replay without change on small ops, a pool change on GIL-bound Pythons, another switch interval,
# and an op that spins said to release the GIL against the same op written to sleep.
GIL = {"spin": 0.012, "sleep": 0.0}


def spin(seconds: float) -> None:
    """Pure Python for ``seconds`` of this thread's CPU time: it holds the GIL all along."""
    stop = time.thread_time() + seconds
    while time.thread_time() < stop:
        pass


class SpinOp(mx.operator.CustomOp):
    """Python that spins ``GIL["spin"]`` s (or sleeps as long, when ``GIL["sleep"]``), then one sub-op."""

    def forward(self, is_train, req, in_data, out_data, aux):
        if GIL["sleep"]:
            time.sleep(GIL["spin"])
        else:
            spin(GIL["spin"])
        self.assign(out_data[0], req[0], in_data[0] + 1)


@mx.operator.register("WhatIfSpin")
class SpinProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return SpinOp()


class SmallOp(mx.operator.CustomOp):
    """A small custom op: its Python reads its input, computes on 64 numbers and assigns."""

    def forward(self, is_train, req, in_data, out_data, aux):
        x = in_data[0].asnumpy()
        self.assign(out_data[0], req[0], nd.array(x * 0.5 + 1))


@mx.operator.register("WhatIfSmall")
class SmallProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return SmallOp()


def small_loop() -> None:
    y = nd.ones((8, 8))
    for _ in range(40):
        y = nd.Custom(y, op_type="WhatIfSmall") * 1.0
    y.asnumpy()


class QuickstartOp(mx.operator.CustomOp):
    """The quickstart notebook's MyAddOne: tanh(x) * 2 in NumPy, then (y + 1) * 3 as sub-ops."""

    def forward(self, is_train, req, in_data, out_data, aux):
        y = np.tanh(in_data[0].asnumpy()) * 2
        z = (nd.array(y) + 1) * 3
        self.assign(out_data[0], req[0], z)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], out_grad[0] * 3)


@mx.operator.register("WhatIfQuickstart")
class QuickstartProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return QuickstartOp()


def quickstart_loop() -> None:
    """The quickstart notebook's profiled cell."""
    a = nd.ones((100, 100))
    a.attach_grad()
    for _ in range(3):
        with mx.autograd.record():
            b = nd.Custom(a, op_type="WhatIfQuickstart")
            c = b * 2
        c.backward()
    a.grad.asnumpy()


def two_spinners() -> None:
    x = nd.ones((4, 4))
    nd.Custom(x, op_type="WhatIfSpin")
    nd.Custom(x, op_type="WhatIfSpin")
    nd.waitall()


def convoy() -> None:
    """A long spin on a custom-op thread while the program reads 30 small results, one at a time:
    each read waits for the GIL twice (the worker's op, then the program), up to an interval each."""
    x = nd.ones((4, 4))
    nd.Custom(x, op_type="WhatIfSpin")
    y = nd.ones((4, 4))
    for _ in range(30):
        y = y + 1
        y.asnumpy()
    nd.waitall()


def demo_steps() -> None:
    from opprof.demo import train

    train(steps=10)


@pytest.fixture
def gil_reset() -> Iterator[None]:
    interval = __import__("sys").getswitchinterval()
    try:
        yield
    finally:
        __import__("sys").setswitchinterval(interval)
        GIL.update(spin=0.012, sleep=0.0)


#: Without GIL samples (the pure path) a Python's time off its CPU may have been a wait for the GIL,
#: and the model replays it as the Python's own (its notes say so): two Pythons that took turns
#: spinning were predicted 40-44 ms on one thread against 25 ms measured.
needs_gil_samples = pytest.mark.skipif(not gil.AVAILABLE, reason=f"no GIL evidence here: {gil.WHY_NOT}")


def recorded(run: Callable[[], None]) -> Trace:
    """The median of three profiles, by end-to-end time."""
    return sorted(profiles(run, 3), key=end_to_end)[1]


def measured(run: Callable[[], None]) -> int:
    return int(statistics.median(end_to_end(t) for t in profiles(run, 3)))


def tries(check: Callable[[], tuple[bool, str]], n: int = 3) -> tuple[bool, str]:
    """``check`` up to ``n`` times until it holds (see the module docstring: a loaded machine)."""
    ok, said = False, ""
    for k in range(n):
        ok, said = check()
        print(f"attempt {k + 1}: {said}")
        if ok:
            break
    return ok, said


def _baseline(run: Callable[[], None], workers: int | None, custom: int | None) -> tuple[bool, str]:
    if workers is None:
        mx.set_engine("threaded")
    else:
        mx.set_engine("threaded", workers=workers, custom_workers=custom)
    w = what_if(recorded(run))
    said = f"recorded {w.recorded_ns / 1e6:.2f} ms, model without change {w.baseline_ns / 1e6:.2f} ms ({w.model_error:+.1%})"
    return abs(w.model_error) <= 0.10, said


@pytest.mark.e2e
@pytest.mark.xfail(
    strict=False,
    reason="measured on the loaded 2-core VM (2026-12-03), since the engine's threads poll before they park: alone, "
    "median -6.8 % and -5.8 % (20 of 30, 14 of 24 within 10 %; parking at once -10.8 %, 11 of 30), but inside the "
    "full suite, after its browser and notebook tests, five tries in a row -10.8 % to -14.0 %: the model's mean "
    "hand-off misses the mix of polled (sub-µs) and woken (tens of µs) hand-offs a loaded minute gives",
)
def test_gil_baseline_small_custom_ops(gil_reset: None) -> None:
    """40 small custom ops in a chain: the model without change within 10 % of the recording
    (36 recordings on the loaded 2-core VM, 2026-12-03: median -7 %, 30 within 10 %; a later set
    -1 %, 27 within; it was -15 % before woken threads took the GIL back in the model and
    hand-offs were averaged, not medians). With the engine's threads polling before they park, 30
    recordings: median -6.8 %, 20 within 10 % (parking at once, same minutes: -10.8 %, 11 within):
    the median is nearer, the spread wider (a run's hand-offs are caught by a poll or wake a parked
    thread, by the minute), so up to five recordings are tried (three missed in one full run)."""
    ok, said = tries(lambda: _baseline(small_loop, 2, 1), 5)
    assert ok, said


@pytest.mark.e2e
def test_gil_baseline_demo(gil_reset: None) -> None:
    """The demo's 10 training steps: the model without change within 10 % of the recording (36
    recordings, 2026-12-03: median 0 %, 32 within 10 %; a later set -5.5 %, 33 within, with
    overlapping pieces sharing the GIL; it was -10 % before)."""
    ok, said = tries(lambda: _baseline(demo_steps, None, None))
    assert ok, said


@pytest.mark.e2e
def test_gil_baseline_quickstart(gil_reset: None) -> None:
    """The quickstart's 3-step cell (~2 ms): the model without change within 10 % of the recording.
    72 recordings (2026-12-05): median -3.3 %, 51 within 10 %, since a trace showing too few GIL
    handovers to time them hands the GIL over at once (+10.4 %, 31 within, charged the OS's wake
    of a parked thread). A recording holds a GIL sample or two and wakes of 20-300 µs, so up to
    five recordings are tried."""
    ok, said = tries(lambda: _baseline(quickstart_loop, None, None), 5)
    assert ok, said


def _against(w: WhatIf, m: int, bound: float) -> tuple[bool, str]:
    err = (w.predicted_ns - m) / m
    said = (
        f"predicted {w.predicted_ns / 1e6:.2f} ms, measured {m / 1e6:.2f} ms ({err:+.1%}); recorded "
        f"{w.recorded_ns / 1e6:.2f} ms, model without change {w.baseline_ns / 1e6:.2f} ms ({w.model_error:+.1%})"
    )
    return abs(err) <= bound, said


@pytest.mark.e2e
@needs_gil_samples
def test_gil_bound_pool_2_to_1(gil_reset: None) -> None:
    """Two Pythons that each spin 12 ms ran one at a time anyway: one custom-op thread costs ~nothing."""

    def check() -> tuple[bool, str]:
        mx.set_engine("threaded", workers=2, custom_workers=2)
        w = what_if(recorded(two_spinners), custom_threads=1)
        mx.set_engine("threaded", workers=2, custom_workers=1)
        return _against(w, measured(two_spinners), 0.15)

    ok, said = tries(check)
    assert ok, said


@pytest.mark.e2e
def test_gil_switch_interval(gil_reset: None) -> None:
    """A 60 ms spin beside a program reading small results: a shorter interval hands the GIL over sooner."""
    import sys

    def check() -> tuple[bool, str]:
        GIL.update(spin=0.060)
        mx.set_engine("threaded", workers=2, custom_workers=1)
        sys.setswitchinterval(0.005)
        trace = recorded(convoy)
        assert trace.metadata["switch_interval"] == pytest.approx(0.005)
        w = what_if(trace, switch_interval=0.0005)
        sys.setswitchinterval(0.0005)
        try:
            m = measured(convoy)
        finally:
            sys.setswitchinterval(0.005)
        return _against(w, m, 0.20)

    ok, said = tries(check)
    assert ok, said


@pytest.mark.e2e
@needs_gil_samples
def test_gil_releases(gil_reset: None) -> None:
    """Two spinning Pythons said to release the GIL run as the same op written to sleep."""

    def check() -> tuple[bool, str]:
        mx.set_engine("threaded", workers=2, custom_workers=2)
        w = what_if(recorded(two_spinners), releases_gil={"WhatIfSpin": True})
        GIL.update(sleep=1.0)
        try:
            m = measured(two_spinners)
        finally:
            GIL.update(sleep=0.0)
        return _against(w, m, 0.15)

    ok, said = tries(check)
    assert ok, said


def test_gil_knobs(training_trace: Trace) -> None:
    w = what_if(training_trace)
    assert w.gil and w.switch_interval == w.recorded_switch_interval == training_trace.metadata["switch_interval"]
    assert any("switch interval" in n for n in w.notes) and any("Left out of the GIL model" in n for n in w.notes)
    fast = what_if(training_trace, switch_interval=0.0005)
    assert "switch interval 0.5 ms" in fast.describe_change()
    free = what_if(training_trace, gil=False)
    assert "no GIL" in free.describe_change() and any("free-threaded" in n for n in free.notes)
    assert free.predicted_ns <= w.baseline_ns * 1.05
    rel = what_if(training_trace, releases_gil={"WhatIfSleep": True})
    assert "WhatIfSleep releases the GIL" in str(rel)
    assert Trace.of(rel.trace).validate() == []
    with pytest.raises(ValueError, match="releases_gil name 'NoSuch'"):
        what_if(training_trace, releases_gil={"NoSuch": True})
    with pytest.raises(TypeError, match="releases_gil"):
        what_if(training_trace, releases_gil={"WhatIfSleep": 1})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="switch_interval"):
        what_if(training_trace, switch_interval=0)
    with pytest.raises(TypeError, match="gil"):
        what_if(training_trace, gil=0)  # type: ignore[arg-type]
    assert what_if(training_trace, gil=None).gil is True  # as the recording ran
    assert Trace.of(training_trace).what_if(switch_interval=0.001, gil=True).switch_interval == 0.001


def test_a_predictions_replay_is_itself_on_a_recording_where_the_gil_model_drifts() -> None:
    """A recording (the training step under load, GIL sampled) on which the replay of the GIL model's
    own prediction once ended 37 us late (8.270 ms against 8.233 ms): the model logged a waiter's GIL
    wait from the last switch rather than from its ask, so the replay counted the rest as work."""
    trace = load(Path(__file__).parent.parent / "data" / "whatif-gil-replay-drift.opprof")
    w = what_if(trace, {"WhatIfSleep": 2.0}, engine_threads=3, custom_threads=2)
    again = what_if(w.trace)
    assert again.recorded_ns == again.baseline_ns == w.predicted_ns


@pytest.mark.skipif(not gil.AVAILABLE, reason=f"no GIL evidence here: {gil.WHY_NOT}")
def test_a_thread_outside_the_engine_that_held_the_gil_competes_for_it_in_the_replay(training_trace: Trace) -> None:
    """Known answers for a thread of no engine work (a user's data loader) that held the GIL for the
    whole recording: the replay gives it the same GIL work (its held time in the prediction is the
    recorded one, to the ns: the model conserves work), the engine cannot go faster beside it and
    goes slower (its Python waits for switch intervals), without a GIL it changes nothing, and the
    notes name it. Before, such a thread was not in the model: a recording of four small custom ops
    beside a spinning loader replayed in 1 ms of its 21 ms (12 recordings: median -92 %, none within
    20 %; with it, -15 %, 6 within 20 %)."""
    from opprof.trace.records import ThreadInfo
    from opprof.trace.threadstates import HOLDING, ThreadState, ThreadStates

    states = training_trace.thread_states
    assert states is not None
    t = training_trace.table
    ops = training_trace.ops
    assert ops is not None
    lo = min(int(t.start.min()), int(ops.push[ops.push >= 0].min()))
    hi = int(t.end.max())
    loader = 1 + max(th.tid for th in training_trace.threads)
    trace = Trace(
        [*training_trace.threads, ThreadInfo(loader, "Loader")], t, training_trace.instants, training_trace.counters,
        training_trace.flow_table, training_trace.metadata, ops,
    )  # fmt: skip
    trace.thread_states = ThreadStates(
        np.append(states.tid, loader), np.append(states.state, ThreadState.HELD), np.append(states.start, lo - 1_000_000),
        np.append(states.end, hi), np.append(states.holder, -1), period_ns=states.period_ns,
    )  # fmt: skip
    alone, beside = what_if(training_trace), what_if(trace)
    assert beside.baseline_ns > alone.baseline_ns, (alone, beside)
    predicted = Trace.of(beside.trace)
    assert predicted.validate() == []
    p_states = predicted.thread_states
    assert p_states is not None
    (p_loader,) = [th.tid for th in predicted.threads if th.name == "Loader"]
    mine = (p_states.tid == p_loader) & np.isin(p_states.state, HOLDING)
    assert int((p_states.end[mine] - p_states.start[mine]).sum()) == hi - lo  # its hold, clipped to the recording
    assert any("outside the engine (Loader)" in n for n in beside.notes)
    assert not any("outside the engine" in n for n in alone.notes)
    assert what_if(trace, gil=False).predicted_ns == what_if(training_trace, gil=False).predicted_ns
    # A thread that took the GIL for a moment (an idle kernel thread's turn) is replayed, not noted.
    blip = max(1, (hi - lo) // 500)
    trace.thread_states = ThreadStates(
        np.append(states.tid, loader), np.append(states.state, ThreadState.HELD), np.append(states.start, lo),
        np.append(states.end, lo + blip), np.append(states.holder, -1), period_ns=states.period_ns,
    )  # fmt: skip
    assert not any("outside the engine" in n for n in what_if(trace).notes)


# ---------------------------------------------------------------------------- a prediction is a fixed point
FIXED_POINT_RUNS = {"small_loop": small_loop, "training_step": training_step, "two_spinners": two_spinners}


@pytest.mark.parametrize("samples", ["sampled", "without samples"])
@pytest.mark.parametrize("run", list(FIXED_POINT_RUNS))
def test_every_prediction_replays_as_itself(run: str, samples: str, gil_reset: None) -> None:
    """What a prediction says is a run what_if reads in turn: replayed unchanged, it lands where it
    was predicted to, whatever the change, with or without the GIL's samples in the recording.
    Found broken twice (2026-12-05): a recording without samples made hand-offs take the GIL in the
    replay only (up to 368 µs off), and a prediction without the GIL (``gil=False``) was replayed with
    one, its overlapping Pythons made to share it (two 4 ms spins: 1.9 ms off)."""
    GIL.update(spin=0.004)
    SLEEP.update(fwd=0.002, bwd=0.001)
    set_engine("threaded", 2, 2)
    (trace,) = profiles(FIXED_POINT_RUNS[run], 1)
    if samples == "without samples":
        trace.thread_states = None
        trace.metadata.pop("gil", None)
    op_type = trace.custom_ops()[0].op_type
    changes: list[dict[str, Any]] = [
        {"engine_threads": 3, "custom_threads": 1},
        {"speedup": {op_type: 2.0}},
        {"switch_interval": 0.0005},
        {"releases_gil": {op_type: True}},
        {"gil": False},
        {"gil": False, "speedup": {op_type: 0.5}, "custom_threads": 3},
    ]
    for change in changes:
        kw = dict(change)
        w = what_if(trace, kw.pop("speedup", None), **kw)
        again = what_if(w.trace)
        assert again.gil is w.gil, change  # as the prediction ran
        assert abs(again.baseline_ns - again.recorded_ns) <= 1_000, (change, again.baseline_ns, again.recorded_ns)


def test_a_smaller_pool_says_the_recordings_waits_for_a_cpu_are_in_its_prediction() -> None:
    """Known answer: a profile on a pool of two custom-op threads, its record of the threads' waits
    for a CPU set to a fifth of the recording in all. A prediction with fewer custom-op threads says
    those waits are in it (the run is likely faster); one with more, or the same, or a recording
    whose threads hardly waited, does not."""
    from opprof.trace.records import CUSTOM_THREAD_PREFIX
    from opprof.trace.threadstates import CPU_WAIT_METADATA

    SLEEP.update(fwd=0.002, bwd=0.001)
    try:
        mx.set_engine("threaded", workers=2, custom_workers=2)
        (trace,) = profiles(training_step, 1)
    finally:
        SLEEP.clear()
        mx.set_engine("threaded")
    length = int(trace.table.end.max() - trace.table.start.min())
    custom = [t.tid for t in trace.threads if t.name.startswith(CUSTOM_THREAD_PREFIX)]
    assert custom
    # A fifth of the recording in all, however many of the pool's threads ran (in a full-suite run
    # one ran every call once, and a tenth each was a tenth in all: the note's bound, missed).
    trace.metadata[CPU_WAIT_METADATA] = {"ns": {str(tid): length // 5 // len(custom) for tid in custom}}

    def noted(**change: int) -> bool:  # "The recording's threads waited ... for a CPU in all"
        return any(n.startswith("The recording's threads") and "waited" in n for n in trace.what_if(**change).notes)

    assert noted(custom_threads=1)
    # The cores it names are the recording's (its metadata), not those of the machine reading it.
    from opprof.trace.records import CPUS_KEY

    trace.metadata[CPUS_KEY] = 7
    assert any("the recording had 7 CPUs" in n for n in trace.what_if(custom_threads=1).notes)
    assert not noted(custom_threads=2) and not noted(custom_threads=3)
    trace.metadata[CPU_WAIT_METADATA] = {"ns": {str(tid): length // 50 // len(custom) for tid in custom}}  # read per question
    assert not noted(custom_threads=1)
