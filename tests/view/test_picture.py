"""The still picture (the PNG a notebook keeps for where the widget cannot run): honest about how
busy each pixel is, small, and quick to draw from the layout the widget already has."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from opprof.trace import Span, ThreadInfo, Trace
from opprof.trace.synthetic import synthetic_trace
from opprof.view.layout import build_layout
from opprof.view.picture import busy_raster, timeline_png

WIDTH = 400


def _two_threads(period_ns: int = 1_000_000, n: int = 400) -> Trace:
    """Thread 1 busy 1 % of every period (10 us of 1 ms), thread 2 busy all of it: known answers."""
    quiet = [Span("blip", "op", 1, k * period_ns, k * period_ns + period_ns // 100) for k in range(n)]
    busy = [Span("work", "op", 2, k * period_ns, (k + 1) * period_ns) for k in range(n)]
    return Trace(threads=[ThreadInfo(1, "quiet"), ThreadInfo(2, "busy")], spans=quiet + busy)


def _rows_of(layout, tid: int) -> int:
    return int(layout.row[layout.tid == tid][0])


def test_a_one_percent_busy_row_is_one_percent_busy_and_a_full_one_is_full() -> None:
    lay = build_layout(_two_threads())
    busy, role = busy_raster(lay, WIDTH)
    quiet_row, busy_row = busy[_rows_of(lay, 1)], busy[_rows_of(lay, 2)]
    # 400 periods over 400 pixels: each pixel holds one 10 us blip of its 1 ms.
    assert np.allclose(quiet_row, 0.01, atol=0.002), quiet_row[:10]
    assert np.allclose(busy_row, 1.0)
    assert set(np.unique(role[_rows_of(lay, 2)])) == {0}  # regular ops


def test_the_picture_is_a_small_png_whose_quiet_lane_is_pale() -> None:
    lay = build_layout(_two_threads())
    png = timeline_png(lay, "opprof timeline: test", width=WIDTH + 150)
    assert png.startswith(b"\x89PNG") and len(png) < 20_000
    img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    assert img.shape[1] == WIDTH + 150
    darkness = 255 * 3 - img.sum(axis=2)  # 0 on white
    plot = darkness[:, 150:]
    rows = np.nonzero(plot.max(axis=1) > 0)[0]
    # Two painted bands; the busy thread's is far darker than the quiet one's.
    per_line = plot[rows].mean(axis=1)
    assert per_line.max() > 4 * per_line[per_line > 0].min()


def test_a_faint_line_parts_the_lanes_of_each_process() -> None:
    """Rows of the separator's grey across the whole picture: one per process after the first."""

    def lines(trace: Trace) -> int:
        img = np.asarray(Image.open(io.BytesIO(timeline_png(build_layout(trace), "t", width=WIDTH + 150))).convert("RGB"))
        return int(np.all(img == (200, 200, 200), axis=(1, 2)).sum())

    assert lines(synthetic_trace(2_000, processes=3)) == 2
    assert lines(synthetic_trace(2_000)) == 0


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 3), st.integers(0, 10_000), st.integers(0, 3_000)), min_size=1, max_size=60),
    st.integers(20, 300),
)
def test_busy_fraction_is_between_zero_and_one_and_covers_every_span(spans: list[tuple[int, int, int]], width: int) -> None:
    # Spans of one thread laid end to end (a row never overlaps itself), any lengths, any gaps.
    by_tid: dict[int, int] = {}
    made = []
    for tid, gap, dur in spans:
        start = by_tid.get(tid, 0) + gap
        made.append(Span("s", "op", tid, start, start + dur))
        by_tid[tid] = start + dur
    tr = Trace(threads=[ThreadInfo(t, f"t{t}") for t in sorted(by_tid)], spans=made)
    lay = build_layout(tr)
    busy, _ = busy_raster(lay, width)
    assert busy.min() >= 0 and busy.max() <= 1
    x0, x1 = lay.extent
    px = (x1 - x0) / width
    for i in np.nonzero(lay.right - lay.left > 0)[0]:
        c = min(int((lay.left[i] - x0) / px), width - 1)
        assert busy[lay.row[i], c] > 0, "a span left no trace in its first pixel"


@pytest.mark.parametrize("n", [10_000, 200_000])
def test_synthetic_traces_draw_in_tens_of_kb(n: int) -> None:
    png = timeline_png(build_layout(synthetic_trace(n)), f"{n} spans")
    assert len(png) < 60_000
