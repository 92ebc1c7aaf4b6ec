"""What the ``%%opprof`` live view costs the cell: profiler on/off with the live view polling and streaming.

Run: ``python benchmarks/live.py`` (``python -m benchmarks --only profiler`` runs it with the rest
of the profiler section). A chain of ``--ops`` small ops (about 1.5 s without the profiler, so
the live thread polls several times and streams full polls: past 2,000 new spans a poll it
samples) runs without the profiler, with it, and with it plus the live view exactly as the magic
runs it: :class:`opprof.jupyter.live.LiveView` polling every 250 ms into a real
:class:`opprof.view.live.LiveTimeline`, whose BokehModel serialises every stream as it would
for the page (``PATCH-DOC`` messages with binary buffers). Without a kernel the widgets' comms
are ipywidgets' dummies, so only the last hop is missing: ipykernel's message framing and the
socket send, which its IOPub thread does. Figures are medians of interleaved rounds; each run
counts until the engine is idle, as the profiler section's on/off rows do.

Goals: profiler on/off with the live view <= 1.2x (the notebook issue); the live view <= 1.05x the
profiler alone (the recorder-at-its-floor issue). Also one poll's own time (the GIL time the live
thread takes from the cell), for 5,000 new plain ops, for a million strided down to the cap, and for
none: each at most 2 % of the period between polls (opprof/profiler/live.py's figures).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import opprof as mx

try:
    from benchmarks.common import Row, print_rows, progress
except ImportError:  # run as a script: python benchmarks/live.py
    from common import Row, print_rows, progress  # type: ignore[no-redef]

SECTION = "Profiler"
LIVE_GOAL = 1.2
#: The recorder-at-its-floor issue: the live view costs at most 5 % over the profiler alone.
LIVE_OVER_PROFILER_GOAL = 1.05


class _Handle:
    """Where the live view is "displayed": nowhere (its BokehModel still serialises every change)."""

    def update(self, obj: Any) -> None:
        pass


def _chain(ops: int, mode: str) -> tuple[float, int, int]:
    """(seconds until the engine is idle, polls, spans streamed) for ``ops`` small ops.

    ``mode``: "off", "on" (the profiler) or "live" (the profiler and the live view).
    """
    from opprof.jupyter.live import LiveView

    mx.nd.waitall()
    a = mx.nd.ones((10, 10))
    prof = mx.Profiler() if mode != "off" else None
    live = None
    t = time.perf_counter()
    if prof is not None:
        prof.start()
        if mode == "live":
            live = LiveView(prof.live_feed(), show=lambda widget: _Handle()).start()
    try:
        for _ in range(ops):
            a = a + 1
        mx.nd.waitall()
        elapsed = time.perf_counter() - t
    finally:
        if live is not None:
            live.stop()
        if prof is not None:
            prof.stop()
    if live is None:
        return elapsed, 0, 0
    view = live.view
    polls, sent = len(live.polls), view.sent if view is not None else 0
    if live.error is not None:
        raise live.error
    live.close()
    return elapsed, polls, sent


def rows(quick: bool = False, repeats: int | None = None) -> list[Row]:
    n = repeats or (1 if quick else 5)
    return measure(10_000 if quick else 100_000, n) + poll_rows(n)


def poll_rows(repeats: int) -> list[Row]:
    """One poll's time: records appended to a thread's log (copies of a real op's), then polled."""
    from opprof.jupyter.live import PERIOD_S

    progress(f"profiler: live polls of 5,000 / 1,000,000 / no new spans, {repeats} rounds")
    what = {"5,000": "5,000 new plain ops", "1,000,000": "1,000,000 new plain ops, strided to the cap", "none": "no new spans"}
    took: dict[str, list[float]] = {label: [] for label in what}
    for _ in range(repeats):
        prof = mx.Profiler().start()
        try:
            feed = prof.live_feed()
            mx.nd.ones((2, 2)).wait_to_read()
            log = feed.recorder.thread_records()[-1].plain
            template = log[0]
            for label, count in (("5,000", 5_000), ("1,000,000", 1_000_000), ("none", 0)):
                log.extend([template] * count)
                t = time.perf_counter()
                feed.poll()
                took[label].append(time.perf_counter() - t)
        finally:
            prof.stop()
    goal_s = 0.02 * PERIOD_S
    out = []
    for label, seconds in took.items():
        ms = statistics.median(seconds) * 1e3
        out.append(
            Row(
                SECTION,
                f"live view: one poll, {what[label]}",
                ms,
                "ms",
                f"worst {max(seconds) * 1e3:.2f} ms; every {PERIOD_S * 1e3:.0f} ms while a cell runs",
                f"≤ {goal_s * 1e3:.0f} ms (2 % of the period)",
                ms <= goal_s * 1e3,
            )
        )
    return out


def measure(ops: int, repeats: int) -> list[Row]:
    import opprof.view.live  # noqa: F401  (imported before the cell by the magic, too)

    mx.set_engine("threaded")
    progress(f"profiler: {ops:,} small ops off / on / on with the live view, {repeats} rounds")
    runs: dict[str, list[tuple[float, int, int]]] = {"off": [], "on": [], "live": []}
    for _ in range(repeats):
        for mode in runs:
            runs[mode].append(_chain(ops, mode))
    off = statistics.median(r[0] for r in runs["off"])
    on = statistics.median(r[0] for r in runs["on"])
    live = statistics.median(r[0] for r in runs["live"])
    polls = statistics.median(r[1] for r in runs["live"])
    sent = statistics.median(r[2] for r in runs["live"])
    ratio = live / off
    detail = (
        f"off {off:.2f} s, on {on:.2f} s ({on / off:.2f}x), with the live view {live:.2f} s "
        f"({live / on:.2f}x the profiler alone); {polls:.0f} polls streamed {sent:,.0f} spans (threaded engine)"
    )
    goal = f"≤ {LIVE_GOAL}x"
    over = live / on
    return [
        Row(SECTION, f"profiler on/off with the live view, {ops:,} small ops", ratio, "x", detail, goal, ratio <= LIVE_GOAL),
        Row(
            SECTION,
            f"live view over the profiler alone, {ops:,} small ops",
            over,
            "x",
            f"with the live view {live:.2f} s, the profiler alone {on:.2f} s (same rounds)",
            f"≤ {LIVE_OVER_PROFILER_GOAL}x",
            over <= LIVE_OVER_PROFILER_GOAL,
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print_rows(
        f"opprof live view benchmark, medians of {args.repeats} rounds", measure(args.ops, args.repeats) + poll_rows(args.repeats)
    )


if __name__ == "__main__":
    main()
