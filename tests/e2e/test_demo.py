"""The built-in workload behind `make demo`: it trains, profiles and writes a valid trace."""

from __future__ import annotations

from pathlib import Path

import pytest

import opprof as mx
from opprof import demo


@pytest.mark.parametrize("engine", ["threaded", "naive"])
def test_demo_trains_profiles_and_writes_a_valid_trace(engine: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        assert demo.main(["--steps", "4", "--engine", engine, "--out", str(tmp_path)]) == 0
    finally:
        mx.set_engine("threaded")
    out = capsys.readouterr().out
    assert "valid" in out
    assert "ScaledTanh" in out and "_backward_RowSquaredError" in out
    trace = mx.trace.load(tmp_path / "trace.json")
    assert trace.validate() == []
    kinds = {(r.op_type, r.backward) for r in trace.custom_ops()}
    assert kinds == {("ScaledTanh", False), ("ScaledTanh", True), ("RowSquaredError", False), ("RowSquaredError", True)}
    assert len(trace.custom_ops()) == 4 * 4


def test_demo_rejects_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        demo.main(["--steps", "0"])
    assert e.value.code == 2
    assert "--steps must be at least 1" in capsys.readouterr().err
