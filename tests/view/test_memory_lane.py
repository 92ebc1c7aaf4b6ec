"""The timeline's memory lane and a parent's memory words (the page's side: tests/e2e/test_timeline_browser.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import opprof
import opprof as mx
from opprof.trace import from_chrome
from opprof.trace.memory import MemoryEvents
from opprof.trace.synthetic import synthetic_trace
from opprof.view import build_timeline
from opprof.view.figure import MEMORY_POINTS
from tests.profiler.test_memory import MB4  # registers MemDouble too

DATA = Path(__file__).resolve().parent.parent / "data"


def _lane(tl: object) -> dict[str, list[object]]:
    fig = tl.memory_figure  # type: ignore[attr-defined]
    return dict(next(r.data_source for r in fig.renderers if r.data_source.name == "memory").data)


def test_a_profile_with_memory_draws_the_lane_and_the_parent_says_its_bytes() -> None:
    with opprof.profile(memory=True) as prof:
        x = mx.nd.ones((1000, 1000))
        y = mx.nd.Custom(x, op_type="MemDouble")
        y.wait_to_read()
    tl = build_timeline(prof.trace)
    lane = _lane(tl)
    assert max(lane["mb"]) == 5 * MB4 / 1e6 and "20.0 MB" in lane["bytes"]
    assert set(lane["op"]) >= {"_ones", "MemDouble::_plus_scalar"}
    details = [tl.names.data["detail"][c] for c in tl.source.data["detail"]]
    assert any("memory: 12.0 MB allocated by its sub-ops, peak 20.0 MB" in d for d in details)
    del x, y


def test_no_memory_no_lane_and_mxnets_counter_draws_one() -> None:
    with opprof.profile() as prof:
        mx.nd.ones((3, 3)).wait_to_read()
    assert build_timeline(prof.trace).memory_figure is None
    mxnet = from_chrome(json.loads((DATA / "mxnet-1.9.1-memory.json").read_text()))
    lane = _lane(build_timeline(mxnet))
    assert max(lane["mb"]) == 8.0 and len(lane["mb"]) == 26


def test_a_long_series_keeps_each_pixels_peak_within_the_budget() -> None:
    trace = synthetic_trace(2_000)
    t0, t1 = int(trace.table.start.min()), int(trace.table.end.max())
    n = 50_000
    rng = np.random.default_rng(1)
    ts = np.sort(rng.integers(t0, t1, size=n))
    sizes = rng.integers(1, 10_000, size=n // 2)
    # Pairs: made, then freed later; one storage far larger than the rest, at a known moment.
    sizes[1234] = 10**9
    made, freed = ts[0::2], ts[1::2]
    k = np.arange(n // 2)
    trace.memory = MemoryEvents(
        np.concatenate([made, freed]), np.concatenate([k, k]), np.concatenate([k + 1, k + 1]), np.concatenate([sizes, -sizes])
    )
    assert trace.memory.check() == []
    lane = _lane(build_timeline(trace))
    assert len(lane["mb"]) <= MEMORY_POINTS + 2
    assert max(lane["mb"]) == trace.analysis().memory.peak / 1e6  # the spike survives the thinning
