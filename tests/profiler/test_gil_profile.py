"""The GIL's evidence in a real profile: known answers (a spinning Python holds the GIL, a sleeping
one is blocked, two spinners take turns), the holder named, and the pure path saying why not."""

from __future__ import annotations

import time

import numpy as np
import pytest

import opprof
from opprof import nd
from opprof.engine import gil
from opprof.trace.analysis.gil import PYTHON_GIL_PARTS
from opprof.trace.text import why_text
from tests.helpers import retried

needs_gil = pytest.mark.skipif(not gil.AVAILABLE, reason=f"no GIL evidence here: {gil.WHY_NOT}")


class _Spin(opprof.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        end = time.perf_counter() + 0.04
        while time.perf_counter() < end:  # pure Python: holds the GIL but at the switch interval
            pass
        self.assign(out_data[0], req[0], in_data[0] + 1)


class _Nap(opprof.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        time.sleep(0.04)  # releases the GIL
        self.assign(out_data[0], req[0], in_data[0] + 1)


@opprof.operator.register("GilProfileSpin")
class _SpinProp(opprof.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):  # type: ignore[no-untyped-def]
        return _Spin()


@opprof.operator.register("GilProfileNap")
class _NapProp(opprof.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):  # type: ignore[no-untyped-def]
        return _Nap()


def _profile(*op_types: str) -> opprof.trace.Trace:
    opprof.set_engine("threaded", workers=2, custom_workers=2)
    try:
        x = nd.ones((4, 4))
        nd.Custom(x, op_type="GilProfileNap").wait_to_read()  # the pool's threads exist
        with opprof.profile() as prof:
            for op in op_types:
                nd.Custom(x, op_type=op)
            nd.waitall()
    finally:
        opprof.set_engine("threaded")
    assert prof.trace is not None and prof.trace.validate() == []
    return prof.trace


def _parts(trace: opprof.trace.Trace, name: str) -> dict[str, int]:
    parts, _ = trace.analysis().python_gil_by_type[name]
    return dict(zip(PYTHON_GIL_PARTS, parts.tolist(), strict=True))


@needs_gil
def test_two_spinning_pythons_wait_for_the_gil_held_by_each_other() -> None:
    def check() -> None:
        trace = _profile("GilProfileSpin", "GilProfileSpin")
        meta = trace.metadata["gil"]
        assert meta["period_ns"] > 0 and meta["samples"] > 0
        p = _parts(trace, "GilProfileSpin")
        python = sum(p.values())
        sampled = python - p["not sampled"] - p["CPU wait"]
        assert p["GIL wait"] >= 0.3 * sampled, p  # they take turns at the switch interval
        assert p["on CPU"] >= 0.3 * sampled, p
        _, holders = trace.analysis().python_gil_by_type["GilProfileSpin"]
        assert holders and "GilProfileSpin::pure_python" in holders[0].running
        assert holders[0].thread.startswith("opprof-custom-")
        line = next(x for x in why_text(trace).splitlines() if "GilProfileSpin (" in x)
        assert "waiting for the GIL" in line and "held by GilProfileSpin::pure_python on opprof-custom-" in line

    retried(check)


@needs_gil
def test_a_sleeping_python_is_blocked_not_waiting_for_the_gil() -> None:
    def check() -> None:
        trace = _profile("GilProfileNap", "GilProfileSpin")
        nap, spin = _parts(trace, "GilProfileNap"), _parts(trace, "GilProfileSpin")
        assert nap["blocked"] >= 0.7 * sum(nap.values()), nap
        # Waking from its nap, the sleeper may wait up to one switch interval for the spinner.
        assert nap["GIL wait"] <= 0.25 * sum(nap.values()), nap
        assert spin["on CPU"] >= 0.6 * (sum(spin.values()) - spin["not sampled"] - spin["CPU wait"]), spin
        states = trace.thread_states
        assert states is not None and set(np.unique(states.tid).tolist()) <= {t.tid for t in trace.threads}

    retried(check)


def test_without_the_sampler_the_trace_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gil, "AVAILABLE", False)
    monkeypatch.setattr(gil, "WHY_NOT", "forced off for this test")
    trace = _profile("GilProfileNap")
    assert trace.thread_states is None
    assert trace.metadata["gil"] == {"why_not": "forced off for this test"}
    assert trace.analysis().python_gil is None
