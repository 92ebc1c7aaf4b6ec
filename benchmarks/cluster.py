"""opprof on a Dask cluster (issue 18): what profiling adds per task, and the client's merge at 1M tasks.

Run: ``python benchmarks/cluster.py [--tasks N] [--repeats R] [--million N]`` (or the "dask" section of
``python -m benchmarks``). Needs ``distributed`` (``pip install opprof[dask]``).

* **Per task**: a real ``LocalCluster(processes=True, n_workers=2, threads_per_worker=1)``; rounds of
  ``client.map(inc, range(N))`` + ``gather``, interleaved: without any profiler, inside
  ``opprof.dask.profile(client)``, and inside Dask's own ``get_task_stream`` for reference. The
  ratio to "without" is the added cost per task (Dask's own cost per task is ~0.3-3 ms here, most
  of it the scheduler's, so the ratio is what to read).
* **Nothing lost**: several maps under one profile, every task's span counted against the tasks run.
* **1M tasks on the client**: running a million real tasks through Dask takes ~10-50 minutes on this
  machine (the scheduler's 0.3-3 ms a task), so the million are made by the worker plugin's own
  code (its ``transition`` hook and ``drain``, on stand-in worker objects holding Dask's task
  state: the same tuples, chunks and clock mapping), pickled as Dask sends them, then read and
  merged in a fresh process whose peak RSS (``VmHWM``) is the client's memory.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

try:
    from benchmarks.common import Row, interleaved, print_rows, progress
except ImportError:  # run as a script: python benchmarks/cluster.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.common import Row, interleaved, print_rows, progress

SECTION = "Dask"
__all__ = ["measure", "rows"]


def inc(x: int) -> int:
    return x + 1


# ---------------------------------------------------------------------------- a real cluster
def _per_task(client: Any, n: int, repeats: int) -> list[Row]:
    import distributed

    import opprof.dask

    def run() -> None:
        client.gather(client.map(inc, range(n), pure=False))

    def off() -> float:
        t = time.perf_counter()
        run()
        return (time.perf_counter() - t) / n

    def ours() -> float:
        t = time.perf_counter()
        with opprof.dask.profile(client):
            run()
        return (time.perf_counter() - t) / n

    def stream() -> float:
        t = time.perf_counter()
        with distributed.get_task_stream(client):
            run()
        return (time.perf_counter() - t) / n

    off()  # warm-up: the workers' imports, the scheduler's first graph
    ours()
    med = interleaved({"off": off, "opprof": ours, "stream": stream}, repeats)
    ratio, ref = med["opprof"] / med["off"], med["stream"] / med["off"]
    return [
        Row(SECTION, f"trivial tasks, per task: no profiler ({n:,} tasks a round, 2 worker processes)", 1e6 * med["off"], "µs"),
        Row(
            SECTION,
            "trivial tasks, per task: inside opprof.dask.profile (start, pulls, stop and merge included)",
            1e6 * med["opprof"],
            "µs",
            f"{ratio:.3f}x without; Dask's task stream {ref:.3f}x",
            "≤ 1.10x",
            ratio <= 1.10,
        ),
    ]


def _nothing_lost(client: Any, maps: int, n: int) -> Row:
    import numpy as np

    import opprof.dask
    from opprof.dask import DASK_CATEGORY
    from opprof.dask.worker import PHASES

    t0 = time.perf_counter()
    with opprof.dask.profile(client) as prof:
        for k in range(maps):
            client.gather(client.map(inc, range(k * n, (k + 1) * n)))
    wall = time.perf_counter() - t0
    trace = prof.trace
    assert trace is not None
    t = trace.table
    # Task spans only: a task's phases (a transfer, a spill, a deserialize over 10 ms, which Dask
    # times on a loaded machine) are spans of the category too, named by the phase. Counted with
    # them, a run of 2026-12-05 gave 20,002 "tasks" for 20,000.
    dask = t.cat == t.strings.index(DASK_CATEGORY)
    phase = np.isin(t.name, [t.strings.index(p) for p in PHASES if p in t.strings])
    spans, n_phases = int((dask & ~phase).sum()), int((dask & phase).sum())
    lost = trace.metadata["dask"]["lost"]
    # A task Dask ran on two workers (a steal racing its start: ~1 in 30,000 here) has two spans,
    # both real; the tasks are the spans less the extra runs the merge counted.
    again = trace.metadata["dask"].get("ran_again") or {"extra_runs": 0}
    got = spans - int(again["extra_runs"])
    return Row(
        SECTION,
        f"{maps * n:,} tasks over {maps} maps, real cluster: tasks in the trace",
        got,
        "tasks",
        f"{wall:.1f} s in all; {spans:,} task spans ({again['extra_runs']} task(s) Dask ran twice), "
        f"{n_phases} phase span(s); lost: {lost or 'none'}",
        f"= {maps * n:,}",
        got == maps * n and not lost,
    )


# ---------------------------------------------------------------------------- 1M tasks, the client's side
class _TaskState:
    __slots__ = ("dependencies", "exception_text", "startstops")

    def __init__(self, t0: float, t1: float) -> None:
        self.startstops = [{"action": "compute", "start": t0, "stop": t1}]
        self.exception_text = ""
        self.dependencies: set[Any] = set()


class _State:
    def __init__(self) -> None:
        self.tasks: dict[str, _TaskState] = {}
        self.executing: tuple[()] = ()


class _Worker:
    """What the plugin reads of a Dask worker, without one."""

    def __init__(self, address: str, name: str) -> None:
        self.address, self.name = address, name
        self.state = _State()
        self.threads: dict[str, int] = {}
        self.scheduler_delay = 0.0
        self.handlers: dict[str, Any] = {}


def _make_replies(path: Path, tasks: int, workers: int = 2, chunk: int = 100_000) -> int:
    """The replies ``workers`` stand-in workers would send for ``tasks`` tasks, pickled into ``path``."""
    import threading

    from opprof.dask.worker import OpprofWorkerPlugin

    ident = threading.get_ident()
    plugins = []
    for w in range(workers):
        p = OpprofWorkerPlugin(engine=False)
        p.setup(_Worker(f"tcp://127.0.0.1:{40000 + w}", str(w)))
        plugins.append(p)
    n_replies = 0
    now = time.time()
    with open(path, "wb") as out:
        for i in range(tasks):
            p = plugins[i % workers]
            worker = p.worker
            key = f"inc-{i:032x}"
            t0 = now + i * 1e-5
            worker.state.tasks[key] = _TaskState(t0, t0 + 5e-6)
            worker.threads[key] = ident
            p.transition(key, "ready", "executing")
            p.transition(key, "executing", "memory")
            del worker.state.tasks[key], worker.threads[key]
            if len(p.tasks) >= chunk:
                pickle.dump(p.drain(chunk, final=False), out, protocol=5)
                n_replies += 1
        for p in plugins:
            while p.tasks:
                pickle.dump(p.drain(chunk, final=True), out, protocol=5)
                n_replies += 1
    return n_replies


def _client_child(path: str) -> None:
    """In a fresh process: read the replies, merge, and print the times and peak RSS as JSON."""
    from opprof.dask import DASK_CATEGORY, WorkerRecords, merge

    t0 = time.perf_counter()
    workers: dict[str, WorkerRecords] = {}
    with open(path, "rb") as f:
        while True:
            try:
                reply = pickle.load(f)  # this benchmark's own file, written just before (Dask's transport pickles too)
            except EOFError:
                break
            workers.setdefault(reply.address, WorkerRecords(reply.address)).add(reply)
    t1 = time.perf_counter()
    trace = merge(None, list(workers.values()), {})
    t2 = time.perf_counter()
    t = trace.table
    spans = int((t.cat == t.strings.index(DASK_CATEGORY)).sum())
    with open("/proc/self/status") as s:
        hwm = next(int(line.split()[1]) for line in s if line.startswith("VmHWM:"))
    print(json.dumps({"read_s": t1 - t0, "merge_s": t2 - t1, "spans": spans, "peak_mb": hwm / 1024}))


def _million(tasks: int, repeats: int) -> list[Row]:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "replies.pickle"
        t = time.perf_counter()
        replies = _make_replies(path, tasks)
        progress(f"dask: {tasks:,} tasks' replies made by the plugin's code in {time.perf_counter() - t:.1f} s")
        results = []
        for _ in range(repeats):
            out = subprocess.run(
                [sys.executable, __file__, "--client-child", str(path)], capture_output=True, text=True, check=True
            )
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    med = sorted(results, key=lambda r: r["merge_s"])[len(results) // 2]
    return [
        Row(
            SECTION,
            f"{tasks:,} tasks, the client: merge into one trace ({replies} chunks of ≤ 100,000 from 2 workers)",
            med["merge_s"],
            "s",
            f"reading the chunks {med['read_s']:.2f} s beside; {med['spans']:,} task spans",
            "≤ 3 s at 1,000,000",
            (med["merge_s"] <= 3 and med["spans"] == tasks) if tasks >= 1_000_000 else None,
        ),
        Row(
            SECTION,
            f"{tasks:,} tasks, the client: peak memory (read + merge, a fresh process)",
            med["peak_mb"],
            "MB",
            "VmHWM",
            "≤ 1,024 MB at 1,000,000",
            med["peak_mb"] <= 1024 if tasks >= 1_000_000 else None,
        ),
    ]


def measure(tasks: int = 2_000, repeats: int = 5, maps: int = 4, per_map: int = 5_000, million: int = 1_000_000) -> list[Row]:
    import distributed

    out: list[Row] = []
    cluster = distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1, dashboard_address=None, silence_logs=50)
    client = distributed.Client(cluster)
    try:
        progress(f"dask: per-task cost, {repeats} interleaved rounds of {tasks:,} trivial tasks")
        out += _per_task(client, tasks, repeats)
        progress(f"dask: {maps} maps of {per_map:,} tasks under one profile")
        out.append(_nothing_lost(client, maps, per_map))
    finally:
        client.close()
        cluster.close()
    progress(f"dask: {million:,} tasks merged on the client")
    out += _million(million, 3 if repeats > 1 else 1)
    return out


def rows(quick: bool = False, repeats: int | None = None) -> list[Row]:
    try:
        import distributed  # noqa: F401
    except ImportError:
        return [Row(SECTION, "skipped: distributed is not installed (pip install 'opprof[dask]')", None)]
    if quick:
        return measure(tasks=100, repeats=1, maps=2, per_map=100, million=20_000)
    return measure(repeats=repeats or 5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=2_000, help="tasks a round for the per-task cost")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--million", type=int, default=1_000_000, help="tasks for the client's merge")
    ap.add_argument("--client-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client_child:
        _client_child(args.client_child)
        return
    print_rows(SECTION, measure(args.tasks, args.repeats, million=args.million))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())
