"""Shared fixtures: both engines, the IPython shell, Chrome trace checks, Chromium, a Jupyter server;
and the ``e2e`` marker, put on every test under tests/e2e/ and every browser test."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import opprof as mx

E2E = Path(__file__).parent / "e2e"


# ---------------------------------------------------------------------------- the e2e marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``e2e`` on every test under tests/e2e/ and every ``browser`` or ``slow`` test, so ``-m "not e2e"``
    is the inner loop; another test that takes seconds carries ``@pytest.mark.e2e`` itself."""
    for item in items:
        if item.path.is_relative_to(E2E) or any(item.get_closest_marker(m) is not None for m in ("browser", "slow")):
            item.add_marker(pytest.mark.e2e)


# ---------------------------------------------------------------------------- both engines
@pytest.fixture(params=["naive", "threaded"])
def engine(request: pytest.FixtureRequest) -> Iterator[mx.engine.Engine]:
    """The test twice: on the naive engine and on a threaded one with 2 workers and 2 custom-op
    workers. Afterwards no observer is left on it and a fresh default engine is current (which
    raises the errors it held that nobody waited for). A module runs all its tests on both with
    ``pytestmark = pytest.mark.usefixtures("engine")``; one that needs more (a leak check) overrides
    ``engine`` with a fixture that takes this one."""
    eng = mx.set_engine("naive") if request.param == "naive" else mx.set_engine("threaded", workers=2, custom_workers=2)
    try:
        yield eng
    finally:
        eng.observer = None
        mx.set_engine("threaded")


@pytest.fixture
def restore_engine() -> Iterator[None]:
    """For a test that makes its own engines (other pools, another ``max_pending``): a fresh default
    engine is current afterwards."""
    try:
        yield
    finally:
        mx.set_engine("threaded")


# ---------------------------------------------------------------------------- an IPython shell
@pytest.fixture(scope="session")
def ipython_shell() -> Any:
    """IPython's test shell (``globalipapp``: one a process, no kernel), as a notebook's cells see it."""
    from IPython.testing import globalipapp

    globalipapp.start_ipython()  # once per process: after it, get_ipython() is this shell
    return globalipapp.get_ipython()


@pytest.fixture(scope="session")
def ip(ipython_shell: Any) -> Any:
    """The shell after ``%load_ext opprof`` and ``import opprof as mx, time``: what the magic's tests start from."""
    ipython_shell.run_line_magic("load_ext", "opprof")
    ipython_shell.run_cell("import opprof as mx, time")
    return ipython_shell


# ---------------------------------------------------------------------------- Chrome trace checks
def _ns(us: float) -> int:
    """A Chrome timestamp (microseconds, fractional) back to integer nanoseconds."""
    return round(us * 1000)


def _laminar(intervals: list[tuple[int, int, str]]) -> list[str]:
    """Intervals that cross without nesting (neither disjoint nor one inside the other)."""
    out = []
    stack: list[tuple[int, int, str]] = []
    for a, b, name in sorted(intervals, key=lambda x: (x[0], -x[1])):
        while stack and stack[-1][1] <= a:
            stack.pop()
        if stack and b > stack[-1][1]:
            out.append(f"{name!r} [{a}, {b}] crosses {stack[-1][2]!r} [{stack[-1][0]}, {stack[-1][1]}]")
            continue
        stack.append((a, b, name))
    return out


def chrome_problems(obj: dict[str, Any]) -> list[str]:
    """What is broken in a Chrome Trace Event object, checked with integer-ns arithmetic.

    * no ``B``/``E`` events; every tid a small non-negative int;
    * ``X`` slices nest properly on each tid, and every tid with a slice or flow has ``thread_name``;
    * async ``b``/``e`` per track (category and ``id``, or ``id2``: a ``local`` one within its
      pid), read in time order: every ``e`` closes the most recent open ``b`` of
      the same name (as Perfetto matches them; ends at one timestamp may come in any order), every
      ``b`` is closed, and the resulting intervals nest;
    * every flow ``s`` has exactly one ``f`` with its id, not earlier in time;
    * every event on a thread carries the pid its ``thread_name`` gives that thread (a tid is in one
      process), and every pid used has a ``process_name``.
    """
    problems: list[str] = []
    events = obj["traceEvents"]
    named: set[int] = set()
    x_by_tid: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    async_by_id: dict[Any, list[tuple[int, int, dict[str, Any]]]] = defaultdict(list)
    starts: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    finishes: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    used_tids: set[int] = set()
    thread_pid = {ev.get("tid"): ev.get("pid") for ev in events if ev.get("ph") == "M" and ev.get("name") == "thread_name"}
    process_named = {ev.get("pid") for ev in events if ev.get("ph") == "M" and ev.get("name") == "process_name"}
    for i, ev in enumerate(events):
        if ev.get("pid") not in process_named:
            problems.append(f"event {i} ({ev.get('ph')} {ev.get('name')!r}): pid {ev.get('pid')!r} has no process_name")
        own = thread_pid.get(ev.get("tid"), ev.get("pid"))
        if ev.get("ph") in ("X", "b", "e", "s", "f", "i") and ev.get("pid") != own:
            problems.append(f"event {i} ({ev['ph']} {ev.get('name')!r}): pid {ev.get('pid')!r}, its thread's is {own!r}")

        ph = ev.get("ph")
        tid = ev.get("tid")
        if isinstance(tid, bool) or not isinstance(tid, int) or not 0 <= tid < 1_000_000:
            problems.append(f"event {i} ({ph} {ev.get('name')!r}): tid {tid!r} is not a small int")
            continue
        if ph in ("B", "E"):
            problems.append(f"event {i}: {ph} event {ev.get('name')!r} (expected X slices)")
        elif ph == "M" and ev.get("name") == "thread_name":
            if (ev.get("args") or {}).get("name"):
                named.add(tid)
        elif ph == "X":
            a = _ns(ev["ts"])
            b = a + _ns(ev["dur"])
            if b < a:
                problems.append(f"event {i}: X {ev['name']!r} has negative duration")
            x_by_tid[tid].append((a, b, ev["name"]))
            used_tids.add(tid)
        elif ph in ("b", "e"):
            track = ev.get("id")
            id2 = ev.get("id2")
            if track is None and isinstance(id2, dict):  # the GIL's tracks: id2.local, one per thread of a process
                track = ("local", ev.get("pid"), id2["local"]) if "local" in id2 else ("global", id2.get("global"))
            async_by_id[(ev.get("cat"), track)].append((_ns(ev["ts"]), i, ev))
        elif ph == "s":
            starts[ev.get("id")].append(ev)
            used_tids.add(tid)
        elif ph == "f":
            finishes[ev.get("id")].append(ev)
            used_tids.add(tid)

    for tid, spans in x_by_tid.items():
        problems.extend(f"tid {tid}: {p}" for p in _laminar(spans))
    for tid in sorted(used_tids - named):
        problems.append(f"tid {tid} has events but no thread_name metadata")

    for key, evs in async_by_id.items():
        evs.sort(key=lambda x: (x[0], x[1]))  # time, then file order
        stack: list[tuple[int, dict[str, Any]]] = []
        intervals: list[tuple[int, int, str]] = []
        for ts, i, ev in evs:
            if ev["ph"] == "b":
                stack.append((ts, ev))
                continue
            idx = next((k for k in range(len(stack) - 1, -1, -1) if stack[k][1].get("name") == ev.get("name")), None)
            if idx is None:
                problems.append(f"async {key}: event {i} 'e' {ev.get('name')!r} at {ts} has no open 'b'")
                continue
            t_b, b = stack.pop(idx)
            intervals.append((t_b, ts, str(b.get("name"))))
        for t_b, b in stack:
            problems.append(f"async {key}: 'b' {b.get('name')!r} at {t_b} is never closed")
        problems.extend(f"async {key}: {p}" for p in _laminar(intervals))

    for fid, ss in starts.items():
        fs = finishes.get(fid, [])
        if len(ss) != 1 or len(fs) != 1:
            problems.append(f"flow {fid}: {len(ss)} 's' and {len(fs)} 'f' events, expected one each")
            continue
        if _ns(fs[0]["ts"]) < _ns(ss[0]["ts"]):
            problems.append(f"flow {fid}: 'f' at {fs[0]['ts']} is before its 's' at {ss[0]['ts']}")
    for fid in finishes.keys() - starts.keys():
        problems.append(f"flow {fid}: 'f' without 's'")
    return problems


@pytest.fixture(scope="session")
def check_chrome() -> Callable[..., list[str]]:
    """``check_chrome(obj)``: the problems :func:`chrome_problems` finds (empty: well formed)."""
    return chrome_problems


# ---------------------------------------------------------------------------- headless Chromium
# Debian's chromium through Python playwright (never `playwright install`), started the way the
# notebook benchmarks start it (benchmarks/jupyter.py), shared by the browser tests.
from benchmarks.jupyter import CHROMIUM, chromium  # noqa: E402


def require_chromium(*modules: str) -> None:
    """Skip without Chromium or playwright (and ``modules``); fail instead when ``CI`` is set."""
    import importlib.util
    import os

    missing = []
    if not os.access(CHROMIUM, os.X_OK):
        missing.append(f"{CHROMIUM} (apt-get install chromium)")
    for module in ("playwright", *modules):
        if importlib.util.find_spec(module) is None:
            missing.append(f"the Python package {module!r} (pip install -e '.[test]')")
    if missing:
        msg = "this browser test needs " + " and ".join(missing) + "; never run `playwright install`"
        if os.environ.get("CI"):
            pytest.fail(msg + " [CI is set, so this is a failure, not a skip]")
        pytest.skip(msg)


@pytest.fixture
def chromium_page(tmp_path: Any) -> Any:
    """``(page, console, page_errors)``: a fresh headless Chromium page; console entries are ``(type, text)``."""
    from pathlib import Path

    require_chromium()
    with chromium(Path(tmp_path)) as browser:
        page = browser.new_page(viewport={"width": 1300, "height": 1000})
        page.set_default_timeout(60_000)
        console: list[tuple[str, str]] = []
        page_errors: list[str] = []
        page.on("console", lambda m: console.append((m.type, m.text)))
        page.on("pageerror", lambda e: page_errors.append(str(e)))
        yield page, console, page_errors


# ---------------------------------------------------------------------------- a Jupyter server
@pytest.fixture(scope="session")
def lab_server(tmp_path_factory: Any) -> Any:
    """One JupyterLab 4 (+ Notebook 7 pages) for the session's browser tests (see tests/e2e/jupyter_e2e.py)."""
    from tests.e2e.jupyter_e2e import start_server

    server = start_server(tmp_path_factory.mktemp("jupyter"))
    try:
        yield server
    finally:
        server.stop()
