"""Load time and peak memory for 1,000,000-event traces: opprof's own format and a foreign B/E one.

Run: ``.venv/bin/python benchmarks/load.py [--events N] [--repeat R]``. Each case is loaded R times
in a fresh subprocess (so one run's garbage does not inflate the next one's peak); prints medians of
the wall time of ``opprof.trace.load`` and of the peak RSS growth during it (``VmHWM`` - ``VmRSS``),
and the peak traced Python memory (``tracemalloc``, a separate run: tracing slows Python, so its
time is not used).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import orjson

THREADS = 8


def own_trace(path: str, n: int) -> None:
    """n spans from the trace model, saved by opprof (X slices + otherData)."""
    from opprof.trace import Span, ThreadInfo, Trace

    per = n // THREADS
    spans = []
    for t in range(THREADS):
        base = t * 7
        for k in range(per):
            start = base + k * 2000
            spans.append(Span(f"op{k % 50}", "operator", t, start, start + 1500, None))
    Trace(threads=[ThreadInfo(t, f"engine-{t}") for t in range(THREADS)], spans=spans).save(path)


def foreign_be_trace(path: str, n: int) -> None:
    """n events, B/E pairs nested two deep, 64-bit hashed tids (MXNet-like), µs integer timestamps."""
    events = []
    tids = [(1 << 63) + 977 * t for t in range(THREADS)]
    per = n // THREADS // 4
    for t in tids:
        ts = 1_796_001_210_033_708
        for k in range(per):
            events.append({"name": f"outer{k % 50}", "cat": "operator", "ph": "B", "ts": ts, "pid": 0, "tid": t})
            events.append({"name": "inner", "cat": "operator", "ph": "B", "ts": ts + 1, "pid": 0, "tid": t})
            events.append({"name": "inner", "cat": "operator", "ph": "E", "ts": ts + 3, "pid": 0, "tid": t})
            events.append({"name": f"outer{k % 50}", "cat": "operator", "ph": "E", "ts": ts + 4, "pid": 0, "tid": t})
            ts += 5
    with open(path, "wb") as f:
        f.write(orjson.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))


CHILD = r"""
import json, resource, sys, time, tracemalloc, warnings
warnings.simplefilter("ignore")
from opprof.trace import load
path, mode = sys.argv[1], sys.argv[2]
if mode == "tracemalloc":
    tracemalloc.start()
    t = load(path)
    print(json.dumps({"traced_peak": tracemalloc.get_traced_memory()[1], "spans": len(t.spans)}))
else:
    def status(field):  # kB; VmHWM is this process's own peak (ru_maxrss keeps the parent's across exec)
        try:
            with open("/proc/self/status") as f:
                return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))
        except (OSError, StopIteration):
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    before = status("VmRSS")
    t0 = time.perf_counter()
    t = load(path)
    dt = time.perf_counter() - t0
    after = status("VmHWM")
    print(json.dumps({"seconds": dt, "rss_growth": (after - before) * 1024, "spans": len(t.spans)}))
"""


def measure(path: str, mode: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, path, mode], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cases = {"opprof X slices": os.path.join(tmp, "own.json"), "foreign B/E, 64-bit tids": os.path.join(tmp, "be.json")}
        own_trace(cases["opprof X slices"], args.events)
        foreign_be_trace(cases["foreign B/E, 64-bit tids"], args.events)
        head = f"{'case':28} {'events':>9} {'file MB':>8} {'spans':>9} {'load s':>7} {'RSS MB':>7} {'traced MB':>9}"
        print(f"{head}  (medians of {args.repeat})")
        for name, path in cases.items():
            with open(path, "rb") as f:
                n_events = len(orjson.loads(f.read())["traceEvents"])
            runs = [measure(path, "time") for _ in range(args.repeat)]
            traced = measure(path, "tracemalloc")
            secs = statistics.median(r["seconds"] for r in runs)
            rss = statistics.median(r["rss_growth"] for r in runs) / 2**20
            print(
                f"{name:28} {n_events:>9,} {os.path.getsize(path) / 2**20:>8.0f} {runs[0]['spans']:>9,} "
                f"{secs:>7.2f} {rss:>7.0f} {traced['traced_peak'] / 2**20:>9.0f}"
            )


if __name__ == "__main__":
    main()
