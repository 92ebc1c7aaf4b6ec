"""Timeline cost: build time and saved HTML size at 10k, 100k and 1M spans.

Run: ``python benchmarks/timeline.py``. Traces come from :func:`opprof.synthetic.synthetic_trace`
(the profiler's shape: thread lanes, custom-op families, flows). Figures are medians of
``--repeats`` runs of each stage:

* layout: :func:`opprof.layout.build_layout` (lanes, rows, custom-op bands);
* build: :func:`opprof.timeline.build_timeline` (layout + level of detail + Bokeh models);
* save: :func:`opprof.timeline.save_html`, everything up to a standalone HTML file with BokehJS
  inline; its size is the file's. This is the number the goal is about: 1M spans in < 3 s, < 15 MB.
* refine: one widget level-of-detail refinement after zooming to 1/100 of the trace.

Reference (from the issue): dask's Bokeh task plot takes ~0.75 s and writes 10.6 MB for 100k tasks,
with no level of detail.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable

from opprof.layout import build_layout
from opprof.synthetic import synthetic_trace
from opprof.timeline import build_timeline, save_html

GOAL_S = 3.0
GOAL_MB = 15.0


def _median(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs; medians of {args.repeats}")
    print(f"{'spans':>10} {'layout s':>9} {'build s':>8} {'save s':>7} {'refine s':>9} {'HTML MB':>8} {'drawn':>7}  vs goal")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "timeline.html")
        for n in args.sizes:
            trace = synthetic_trace(n)
            t_layout = _median(lambda trace=trace: build_layout(trace), args.repeats)
            t_build = _median(lambda trace=trace: build_timeline(trace), args.repeats)
            t_save = _median(lambda trace=trace: save_html(trace, path), args.repeats)
            mb = os.path.getsize(path) / 1e6
            tl = build_timeline(trace)
            x0, x1 = tl.layout.extent
            w = (x1 - x0) / 100
            t_refine = _median(lambda tl=tl, x0=x0, w=w: tl.refresh(x0 + 50 * w, x0 + 51 * w), args.repeats)
            drawn = len(build_timeline(trace).source.data["left"])  # as first shown (tl was refined)
            ratio = f"time {t_save / GOAL_S:.2f}x, size {mb / GOAL_MB:.2f}x of goal"
            times = f"{t_layout:>9.2f} {t_build:>8.2f} {t_save:>7.2f} {t_refine:>9.3f}"
            print(f"{len(trace.spans):>10,} {times} {mb:>8.2f} {drawn:>7,}  {ratio}")


if __name__ == "__main__":
    main()
