"""Timeline cost: build time and saved HTML size at 10k, 100k and 1M spans.

Run: ``python benchmarks/timeline.py`` (or ``make bench`` for the whole suite). Traces come from
:func:`opprof.trace.synthetic.synthetic_trace` (the profiler's shape: thread lanes, custom-op families,
flows). Figures are medians of ``--repeats`` interleaved runs of each stage:

* layout: :func:`opprof.view.layout.build_layout` (lanes, rows, custom-op bands);
* build: :func:`opprof.view.build_timeline` (layout + level of detail + Bokeh models);
* save: :func:`opprof.view.save_html`, everything up to a standalone HTML file with BokehJS
  inline; its size is the file's. This is the number the goal is about: 1M spans in <= 3 s, <= 15 MB.
* refine: one widget level-of-detail refinement after zooming to 1/100 of the trace.

Dask's Bokeh task plot at 100k tasks is measured beside it by ``benchmarks/peers.py``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import tempfile
import time
from collections.abc import Callable

from opprof.trace.synthetic import synthetic_trace
from opprof.view.figure import build_timeline, save_html
from opprof.view.layout import build_layout

try:
    from benchmarks.common import Row, interleaved, print_rows, progress
except ImportError:  # run as a script: python benchmarks/timeline.py
    from common import Row, interleaved, print_rows, progress  # type: ignore[no-redef]

SECTION = "Timeline"
GOAL_S = 3.0
GOAL_MB = 15.0
SIZES = (10_000, 100_000, 1_000_000)


def _timed(fn: Callable[[], object]) -> Callable[[], float]:
    def run() -> float:
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t

    return run


def _window(x0: float, w: float, k: int) -> tuple[float, float]:
    start = x0 + (20 + 30 * (k % 3)) * w
    return start, start + w


def rows(quick: bool = False, repeats: int | None = None) -> list[Row]:
    return measure((1_000, 5_000) if quick else SIZES, repeats or (1 if quick else 3))


def measure(sizes: tuple[int, ...] | list[int], repeats: int) -> list[Row]:
    out: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "timeline.html")
        for n in sizes:
            progress(f"timeline: {n:,} spans, layout / build / save / refine, {repeats} rounds")
            trace = synthetic_trace(n)
            tl = build_timeline(trace)
            drawn = len(tl.source.data["left"])  # as first shown, before any refinement
            x0, x1 = tl.layout.extent
            w = (x1 - x0) / 100
            rounds = itertools.count()
            t = interleaved(
                {
                    "layout": _timed(lambda trace=trace: build_layout(trace)),
                    "build": _timed(lambda trace=trace: build_timeline(trace)),
                    "save": _timed(lambda trace=trace: save_html(trace, path)),
                    # a different 1/100 window each round, so no refinement is a no-op re-request
                    "refine": _timed(lambda tl=tl, x0=x0, w=w, k=rounds: tl.refresh(*_window(x0, w, next(k)))),
                },
                repeats,
            )
            mb = os.path.getsize(path) / 1e6
            spans = len(trace.spans)
            full = spans >= 1_000_000
            detail = f"layout {t['layout']:.2f} s, Bokeh models {t['build']:.2f} s, refine after a zoom {t['refine']:.3f} s"
            out.append(
                Row(
                    SECTION,
                    f"{spans:,} spans: build and save HTML",
                    t["save"],
                    "s",
                    detail,
                    f"≤ {GOAL_S:.0f} s at 1M",
                    t["save"] <= GOAL_S if full else None,
                    f"timeline_s_{n}",
                )
            )
            out.append(
                Row(
                    SECTION,
                    f"{spans:,} spans: HTML size",
                    mb,
                    "MB",
                    f"{drawn:,} glyphs drawn at first",
                    f"≤ {GOAL_MB:.0f} MB at 1M",
                    mb <= GOAL_MB if full else None,
                    f"timeline_mb_{n}",
                )
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print_rows(f"opprof timeline benchmark, medians of {args.repeats}", measure(args.sizes, args.repeats))


if __name__ == "__main__":
    main()
