"""opprof on a real Dask cluster: ``distributed.LocalCluster(processes=True, n_workers=2,
threads_per_worker=1)``, one per module (~1 s to start), and its own for the faults.

Known answers: the tasks Dask's own task stream saw, the task graph's edges, custom-op calls of
a known count inside tasks, clock offsets injected on purpose, a worker killed at a known point.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

import opprof  # noqa: E402
import opprof.dask  # noqa: E402
from opprof.dask import DASK_CATEGORY, DaskProfileError  # noqa: E402
from opprof.trace import Trace  # noqa: E402
from opprof.trace.analysis.validate import validate  # noqa: E402
from tests.helpers import engine_spans  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    cluster = distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1, dashboard_address=None, silence_logs=50)
    c = distributed.Client(cluster)
    try:
        yield c
    finally:
        from opprof.dask.session import _CLIENTS

        for made in _CLIENTS.values():  # the magic's, for --dask ADDRESS
            made.close()
        _CLIENTS.clear()
        c.close()
        cluster.close()


# ---------------------------------------------------------------------------- workloads (importable by workers)
def inc(x: int) -> int:
    return x + 1


def add(x: int, y: int) -> int:
    return x + y


def nap(seconds: float, *inputs: Any) -> float:
    time.sleep(seconds)
    return seconds


def fails(x: int) -> int:
    raise ValueError(f"shard {x} is bad")


def train_shard(seed: int) -> float:
    """Two steps of the built-in model: 4 custom-op calls a step (2 ops, forward and backward)."""
    import opprof as mx
    from opprof.demo import train

    loss = train(steps=2, seed=seed)[-1]
    mx.nd.waitall()  # the last step's update is still running: a task's work should end with it
    return loss


def _tasks(trace: Trace) -> list[dict[str, Any]]:
    t = trace.table
    cat = t.strings.index(DASK_CATEGORY)
    out = []
    names = trace.thread_names()
    pid_of = {th.tid: th.pid for th in trace.threads}
    for i in np.flatnonzero(t.cat == cat).tolist():
        args = t.args_of(i) or {}
        out.append(
            {
                "name": t.strings[t.name[i]],
                "key": args.get("key"),
                "error": args.get("error"),
                "tid": int(t.tid[i]),
                "thread": names[int(t.tid[i])],
                "pid": pid_of[int(t.tid[i])],
                "start": int(t.start[i]),
                "end": int(t.end[i]),
            }
        )
    return out


def _plugins_gone(client: Any) -> bool:
    on_workers = client.run(lambda dask_worker: "opprof" in dask_worker.plugins)
    on_scheduler = client.run_on_scheduler(lambda dask_scheduler: "opprof-task-counter" in dask_scheduler.plugins)
    return not any(on_workers.values()) and not on_scheduler


# ---------------------------------------------------------------------------- tasks, lanes, processes
def test_every_task_dask_reports_is_a_span_on_the_thread_and_worker_that_ran_it(client: Any) -> None:
    with distributed.get_task_stream(client) as stream, opprof.dask.profile(client) as prof:
        xs = client.map(inc, range(40))
        assert sum(client.gather(client.map(add, xs[:-1], xs[1:]))) == sum(2 * i + 3 for i in range(39))
    trace = prof.trace
    assert trace is not None
    ours = [t for t in _tasks(trace) if t["name"] in ("inc", "add")]
    theirs = [d for d in stream.data if d["key"].split("-")[0] in ("inc", "add")]
    assert len(ours) == len(theirs) == 79
    assert Counter(t["key"] for t in ours) == Counter(d["key"] for d in theirs)
    # Each on its worker's process and a Dask worker thread; workers are processes 1 and 2.
    info = {w["address"]: w for w in trace.metadata["dask"]["workers"]}
    by_key = {d["key"]: info[d["worker"]]["pid"] for d in theirs}
    assert all(t["pid"] == by_key[t["key"]] for t in ours)
    assert all("Dask" in t["thread"] for t in ours), {t["thread"] for t in ours}
    assert sorted(trace.processes) == [0, 1, 2] and trace.processes[0] == "client"
    assert {len({t["tid"] for t in ours if t["pid"] == p}) for p in (1, 2)} == {1}  # one thread a worker
    # Dask's own durations agree with ours to a µs (the same stamps, mapped onto our clock).
    dur = {d["key"]: sum(s["stop"] - s["start"] for s in d["startstops"] if s["action"] == "compute") for d in theirs}
    assert max(abs((t["end"] - t["start"]) / 1e9 - dur[t["key"]]) for t in ours) < 2e-6
    assert validate(trace) == []
    assert _plugins_gone(client)


def test_custom_ops_inside_tasks_are_recorded_by_each_worker_and_validate(client: Any) -> None:
    with opprof.dask.profile(client) as prof:
        losses = client.gather(client.map(train_shard, range(4)))
    assert len(losses) == 4
    trace = prof.trace
    assert trace is not None and validate(trace) == []
    calls = trace.custom_ops()
    assert len(calls) == 4 * 2 * 4, len(calls)  # 4 shards x 2 steps x (2 ops, forward and backward)
    pid_of = {th.tid: th.pid for th in trace.threads}
    t = trace.table
    parents = np.flatnonzero(t.role == 1 + list(opprof.trace.Role).index(opprof.trace.Role.PARENT))
    assert {pid_of[int(x)] for x in t.tid[parents].tolist()} <= {1, 2}
    assert all(c.wall_ns >= c.python_ns for c in calls)
    # Every worker's engine spans fall inside the task that pushed them (clock mapping is consistent).
    tasks = _tasks(trace)
    for c in calls:
        assert any(task["start"] <= c.start_ns <= task["end"] for task in tasks), c


def test_flows_are_the_task_graphs_edges_across_workers(client: Any) -> None:
    leaves = client.map(inc, range(16), pure=False)
    with opprof.dask.profile(client) as prof:
        level = client.map(inc, range(16))
        edges = 0
        while len(level) > 1:
            level = [client.submit(add, level[i], level[i + 1]) for i in range(0, len(level), 2)]
            edges += 2 * len(level)
        assert level[0].result() == sum(range(1, 17))
    del leaves
    trace = prof.trace
    assert trace is not None
    f = trace.flow_table
    dep = [i for i in range(len(f)) if f.strings[f.name[i]] == "dask dependency"]
    assert len(dep) == edges == 30
    tasks = {(t["tid"], t["start"]): t for t in _tasks(trace)}
    ends = {(t["tid"], t["end"]): t for t in _tasks(trace)}
    for i in dep:  # from the end of the input's task to the start of the task that used it
        src, dst = ends[int(f.src_tid[i]), int(f.src_ts[i])], tasks[int(f.dst_tid[i]), int(f.dst_ts[i])]
        assert dst["name"] == "add" and src["end"] <= dst["start"] + 200_000, (src, dst)  # 0.2 ms: clock skew
    pid_of = {th.tid: th.pid for th in trace.threads}
    assert any(pid_of[int(f.src_tid[i])] != pid_of[int(f.dst_tid[i])] for i in dep), "no edge crossed workers"


def test_the_critical_path_crosses_workers_along_the_task_graph(client: Any) -> None:
    """A 60 ms nap on one worker, then a 60 ms nap on the other that needs its result, and a 20 ms
    one beside them: the path is the two chained naps, on both workers, about 120 ms."""
    a, b = sorted(client.scheduler_info()["workers"])
    with opprof.dask.profile(client) as prof:
        first = client.submit(nap, 0.06, workers=[a], pure=False)
        second = client.submit(nap, 0.06, first, workers=[b], pure=False)
        beside = client.submit(nap, 0.02, workers=[a], pure=False)
        client.gather([second, beside])
    trace = prof.trace
    assert trace is not None
    path = trace.critical_path()
    assert path.approximate and "task graph" in path.note
    t = trace.table
    on_path = [int(s) for s in path.seg_span.tolist() if s >= 0]
    naps = {int(s) for s in on_path if t.strings[t.name[s]] == "nap" and t.end[s] - t.start[s] > 50_000_000}
    pid_of = {th.tid: th.pid for th in trace.threads}
    assert len(naps) == 2 and len({pid_of[int(t.tid[s])] for s in naps}) == 2, [t.strings[t.name[s]] for s in on_path]
    # From the first nap's start to the second's end: Dask's hand-over between them is on the path too.
    # (The path tiles the whole recording: a collection of the client's heap just before or after
    # them, a span of its own, lengthens it; the work is timed without them.)
    first_s, second_s = sorted(naps, key=lambda s: int(t.start[s]))
    work = engine_spans(trace)
    first_work, last_work = min(s.start for s in work), max(s.end for s in work)
    assert abs(first_work - int(t.start[first_s])) < 1_000_000 and abs(last_work - int(t.end[second_s])) < 1_000_000
    assert path.start <= first_work and path.end >= last_work
    assert (path.end - path.start) / 1e9 > 0.118


def test_the_merged_trace_saves_opens_and_exports_one_pid_per_worker(client: Any, tmp_path: Any, check_chrome: Any) -> None:
    import json

    from opprof.cli import main as cli
    from opprof.trace import load

    with opprof.dask.profile(client) as prof:
        client.gather(client.map(train_shard, range(2)))
    trace = prof.trace
    assert trace is not None
    trace.save(str(tmp_path / "cluster.opprof"))
    again = load(str(tmp_path / "cluster.opprof"))
    assert again.processes == trace.processes and again.n_spans == trace.n_spans
    assert len(again.custom_ops()) == len(trace.custom_ops()) and again.ops is not None
    trace.save(str(tmp_path / "cluster.json"))
    events = json.loads((tmp_path / "cluster.json").read_text())
    assert check_chrome(events) == []
    named = {e["pid"]: e["args"]["name"] for e in events["traceEvents"] if e.get("ph") == "M" and e["name"] == "process_name"}
    assert named == trace.processes
    pid_of = {th.tid: th.pid for th in trace.threads}
    assert all(e["pid"] == pid_of[e["tid"]] for e in events["traceEvents"] if e.get("ph") == "X")
    assert cli(["view", str(tmp_path / "cluster.opprof"), "-o", str(tmp_path / "cluster.html")]) == 0
    assert "worker 0" in (tmp_path / "cluster.html").read_text()


def test_an_injected_clock_offset_is_recovered_within_100_us(client: Any) -> None:
    offsets = {"0": 5_000_000, "1": -3_000_000}  # worker names: LocalCluster names them 0 and 1
    t0 = time.perf_counter_ns()
    with opprof.dask.profile(client, _clock_offsets_ns=offsets) as prof:
        client.gather(client.map(inc, range(20)))
    t1 = time.perf_counter_ns()
    trace = prof.trace
    assert trace is not None
    for w in trace.metadata["dask"]["workers"]:
        error = w["clock_offset_ns"] - offsets[w["name"]]
        assert abs(error) < 100_000, (w["name"], error)
        assert 0 < w["clock_skew_bound_ns"] < 5_000_000
    # Mapped back, every task lies inside the client's own window.
    assert all(t0 <= t["start"] <= t["end"] <= t1 for t in _tasks(trace))


def test_the_live_feed_streams_the_workers_tasks_as_the_pulls_bring_them(client: Any) -> None:
    with opprof.dask.profile(client, interval=0.1) as prof:
        feed = prof.live_feed()
        client.gather(client.map(nap, [0.01] * 6, pure=False))
        deadline = time.monotonic() + 10
        got: list[Any] = []
        while sum(len(p) for p in got) < 6 and time.monotonic() < deadline:
            time.sleep(0.15)
            got.append(feed.poll())
    last = got[-1]
    names = [n for p in got for n in p.name]
    assert names.count("nap") == 6
    lanes = {last.threads[i] for p in got for i, n in zip(p.thread.tolist(), p.name, strict=True) if n == "nap"}
    assert lanes <= {"worker 0 · Dask-Default-0", "worker 1 · Dask-Default-0"} and lanes, lanes
    spans = [(a, b) for p in got for a, b, n in zip(p.start.tolist(), p.end.tolist(), p.name, strict=True) if n == "nap"]
    assert all(9_000 < b - a < 60_000 and 0 <= a <= last.now_us for a, b in spans), spans  # µs on the client's clock


def test_a_task_that_raises_shows_its_error_in_its_span(client: Any) -> None:
    with opprof.dask.profile(client) as prof:
        fut = client.submit(fails, 7)
        with pytest.raises(ValueError, match="shard 7"):
            fut.result()
    assert prof.trace is not None
    (task,) = [t for t in _tasks(prof.trace) if t["name"] == "fails"]
    assert "shard 7 is bad" in task["error"]


def test_records_travel_in_chunks_and_none_are_lost(client: Any) -> None:
    with opprof.dask.profile(client, chunk=7, interval=0.05) as prof:
        for _ in range(3):
            client.gather(client.map(inc, range(50), pure=False))
            time.sleep(0.1)
    assert prof.trace is not None
    assert sum(t["name"] == "inc" for t in _tasks(prof.trace)) == 150
    assert prof.trace.metadata["dask"]["lost"] == []
    assert sum(len(w.chunks) for w in prof.workers.values()) >= 150 // 7


def test_leaving_the_block_removes_the_plugins_also_after_an_error(client: Any) -> None:
    with pytest.raises(KeyError), opprof.dask.profile(client) as prof:
        client.gather(client.map(inc, range(5)))
        raise KeyError("the user's own error")
    assert prof.trace is not None and sum(t["name"] == "inc" for t in _tasks(prof.trace)) == 5
    assert _plugins_gone(client)


def test_bad_arguments_say_what_is_wrong(client: Any) -> None:
    with pytest.raises(DaskProfileError, match=r"takes a distributed\.Client"):
        opprof.dask.profile("tcp://nowhere:1").__enter__()
    with pytest.raises(ValueError, match="interval"):
        opprof.dask.DaskProfile(client, interval=0)


# ---------------------------------------------------------------------------- faults
def test_a_worker_killed_mid_run_leaves_a_valid_trace_that_says_what_is_missing() -> None:
    cluster = distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1, dashboard_address=None, silence_logs=50)
    client = distributed.Client(cluster)
    try:
        with distributed.get_task_stream(client) as stream, pytest.warns(RuntimeWarning, match="records missing"):
            with opprof.dask.profile(client, interval=3600) as prof:  # no pull before the end
                client.gather(client.map(inc, range(20)))
                victim = sorted(client.scheduler_info()["workers"])[0]
                pid = client.run(os.getpid, workers=[victim])[victim]
                os.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + 30
                while victim in client.scheduler_info()["workers"] and time.monotonic() < deadline:
                    time.sleep(0.05)
                client.gather(client.map(inc, range(100, 110)))
        trace = prof.trace
        assert trace is not None and validate(trace) == []
        (lost,) = [x for x in trace.metadata["dask"]["lost"] if x["worker"] == victim]
        died_with = sum(1 for d in stream.data if d["worker"] == victim and d["key"].startswith("inc"))
        assert died_with > 0 and lost["tasks_missing"] == died_with, (lost, died_with)
        # By (key, worker): the victim's lost results are computed again on the survivor.
        address = {w["pid"]: w["address"] for w in trace.metadata["dask"]["workers"]}
        kept = {(t["key"], address[t["pid"]]) for t in _tasks(trace)}
        ran = {(d["key"], d["worker"]) for d in stream.data}
        assert {r for r in ran if r[1] != victim} <= kept and not any(k[1] == victim for k in kept)
        assert _plugins_gone(client)
    finally:
        client.close()
        cluster.close()


def test_an_in_process_cluster_records_the_shared_engine_once() -> None:
    cluster = distributed.LocalCluster(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None)
    client = distributed.Client(cluster)
    try:
        with opprof.dask.profile(client) as prof:
            client.gather(client.map(train_shard, range(2)))
        assert prof.trace is not None and validate(prof.trace) == []
        assert len(prof.trace.custom_ops()) == 2 * 2 * 4  # not twice that: the client records its engine
    finally:
        client.close()
        cluster.close()


# ---------------------------------------------------------------------------- %%opprof --dask
# ``ip``: the IPython shell with opprof loaded (tests/conftest.py).
def _cell(ip: Any, line: str, cell: str) -> tuple[Any, str]:
    from IPython.utils.capture import capture_output

    with capture_output() as out:
        result = ip.run_cell(f"%%opprof {line}\n{cell}")
    return result, out.stdout + out.stderr


@pytest.mark.parametrize("how", ["variable", "address"])
def test_the_magic_profiles_a_cell_on_the_cluster(ip: Any, client: Any, how: str) -> None:
    ip.user_ns["dask_client"] = client
    ip.user_ns["train_shard"] = train_shard
    target = "dask_client" if how == "variable" else client.scheduler.address
    cell = "from distributed import get_client\nget_client().gather(get_client().map(train_shard, range(2)))"
    result, out = _cell(ip, f"--dask {target} --no-widget", cell)
    assert result.error_in_exec is None, out
    trace = ip.user_ns["_opprof"].trace
    assert sorted(trace.processes) == [0, 1, 2] and validate(trace) == []
    assert len(trace.custom_ops()) == 2 * 2 * 4
    assert sum(t["name"] == "train_shard" for t in _tasks(trace)) == 2
    assert "ScaledTanh" in out  # the split table, as for a local cell
    assert _plugins_gone(client)


def test_the_magics_live_view_shows_the_workers_tasks_then_the_full_timeline(ip: Any, client: Any) -> None:
    from unittest import mock

    from opprof.view.widget import TimelineWidget

    ip.user_ns["dask_client"] = client
    ip.user_ns["nap"] = nap
    shown: list[Any] = []
    views: list[Any] = []

    class Handle:
        def update(self, widget: Any) -> None:
            shown.append(widget)

    def show(widget: Any, display_id: bool = False) -> Handle:
        views.append(widget)
        return Handle()

    def live_has_workers() -> bool:
        return bool(views) and any("worker" in lane for lane in views[0].lanes)

    # The cell waits (10 s at most) for the live view to show a worker's lane, instead of hoping a
    # pull lands inside a fixed nap: on a loaded machine the 0.8 s of naps once ended first.
    ip.user_ns["live_has_workers"] = live_has_workers
    cell = (
        "import time\nfrom distributed import get_client\n"
        "get_client().gather(get_client().map(nap, [0.2] * 4, pure=False))\n"
        "t = time.monotonic()\n"
        "while not live_has_workers() and time.monotonic() - t < 10:\n    time.sleep(0.05)"
    )
    with (
        mock.patch("opprof.jupyter.live.display", side_effect=show),
        mock.patch("opprof.jupyter.magics.display", side_effect=shown.append),
    ):
        result, out = _cell(ip, "--dask dask_client --live", cell)
    assert result.error_in_exec is None, out
    assert live_has_workers(), views  # the live view showed the workers' lanes while the cell ran
    assert any(isinstance(w, TimelineWidget) and sorted(w.trace.processes) == [0, 1, 2] for w in shown)


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("nothing_here", "no such variable"),
        ("not_a_client", "expected a distributed.Client"),
        ("tcp://127.0.0.1:1", "cannot reach"),
    ],
)
def test_the_magic_says_what_is_wrong_with_dask(ip: Any, target: str, message: str) -> None:
    ip.user_ns["not_a_client"] = 42
    ran = []
    ip.user_ns["ran"] = ran
    result, out = _cell(ip, f"--dask {target} --no-widget", "ran.append(1)")
    assert result.error_in_exec is not None or result.error_before_exec is not None
    assert re.search(message, out + str(result.error_in_exec)), out
    assert ran == []  # the cell did not run


def test_a_worker_of_another_opprof_release_is_said_not_refused() -> None:
    from types import SimpleNamespace

    from opprof.dask.worker import VERSION, OpprofWorkerPlugin

    worker = SimpleNamespace(name="w", address="tcp://w:1", handlers={}, state=SimpleNamespace(tasks={}, executing=()))
    plugin = OpprofWorkerPlugin(engine=False, client_version=VERSION + ".other")
    plugin.setup(worker)
    reply = plugin.drain(10, final=True)
    assert reply.problems == [f"worker w runs opprof {VERSION}, the client {VERSION}.other"]
    plugin.teardown(worker)
    assert worker.handlers == {}  # the clock handler goes with the plugin


def test_a_restarted_worker_is_a_process_of_its_own_and_a_closed_client_says_so() -> None:
    cluster = distributed.LocalCluster(processes=True, n_workers=1, threads_per_worker=1, dashboard_address=None, silence_logs=50)
    client = distributed.Client(cluster)
    try:
        with pytest.warns(RuntimeWarning, match="records missing"), opprof.dask.profile(client, interval=0.1) as prof:
            client.gather(client.map(inc, range(10)))
            time.sleep(0.5)  # a pull brings the first process's tasks
            client.restart()
            client.gather(client.map(inc, range(100, 110)))
        trace = prof.trace
        assert trace is not None and validate(trace) == []
        workers = trace.metadata["dask"]["workers"]
        assert len({w["os_pid"] for w in workers}) == 2, workers
        names = [trace.processes[w["pid"]] for w in workers]
        assert len(set(names)) == 2 and all(f"(process {w['os_pid']})" in n for n, w in zip(names, workers, strict=True))
        by_pid = Counter(t["pid"] for t in _tasks(trace))
        assert sorted(by_pid.values()) == [10, 10], by_pid  # each process's own tasks on its own lane
    finally:
        client.close()
        cluster.close()
    with pytest.raises(DaskProfileError, match="client is closed"):
        opprof.dask.profile(client).__enter__()


def keeps_arrays(rows: int) -> int:
    """Makes a chain of arrays on the worker, dropping each, and keeps the last one until the
    task ends: a peak of two ``rows`` x 1000 float32 arrays at a time."""
    import opprof as mx

    a = mx.nd.ones((rows, 1000))
    for k in range(3):
        a = a + k
    a.wait_to_read()
    return rows


def test_each_worker_keeps_its_memory_lane(client: Any) -> None:
    """memory=True: each worker's live bytes in its own process, pairs of allocation and free
    kept across the segments a worker ships its recording in."""
    with opprof.dask.profile(client, memory=True, interval=0.2) as prof:
        done = client.gather([client.submit(keeps_arrays, rows, pure=False) for rows in (1000, 500, 1000, 500)])
    assert sorted(done) == [500, 500, 1000, 1000]
    trace = prof.trace
    assert trace is not None and validate(trace) == []
    m = trace.analysis().memory
    assert m is not None
    workers = [p for p in m.processes if p != 0]
    assert workers, m.processes
    for p in workers:
        _, live = m.of_process(p)
        assert int(live.max()) <= 8_000_000 and int(live[-1]) == 0, (p, (live // 1000).tolist())
    assert m.peak == 8_000_000
