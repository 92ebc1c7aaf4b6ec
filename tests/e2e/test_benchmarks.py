"""Smoke test of the benchmark suite: ``python -m benchmarks --quick`` prints its one table with
every section, and each module still runs on its own. Timings are never asserted (the machine is
shared and noisy); RESULTS.md holds the real figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    # From the repository root, as `make bench` runs it (benchmarks/ is not an installed package).
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=240)


def _table(stdout: str) -> list[list[str]]:
    rows = [line for line in stdout.splitlines() if line.startswith("|")]
    assert rows, stdout
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in rows]


def test_quick_suite_prints_one_table_with_every_section() -> None:
    # Every section but the notebook's, which starts its own JupyterLab and Chromium (~40 s even
    # quick): its page code is what the browser tests drive (benchmarks/page_js.py), on their server.
    sections = ("engine", "profiler", "memory", "why", "compare", "trace", "timeline", "dask", "peers")
    out = _run("-m", "benchmarks", "--quick", "--only", *sections)
    assert out.returncode == 0, out.stderr
    table = _table(out.stdout)
    assert table[0] == ["section", "case", "median", "unit", "ratio / detail", "goal", "met"]
    body = table[2:]
    assert all(len(row) == 7 for row in body), body
    titles = ["Engine", "Profiler", "Memory", "Why it waits", "Compare runs", "Trace", "Timeline", "Dask", "Peers"]
    assert [row[0] for row in body if row[0]] == titles
    cases = "\n".join(row[1] for row in body)
    for needle in (
        "threaded engine `a = a + 1`, 10x10",
        "naive engine `a = a + 1`, 100x100",
        "trivial custom op, threaded, forward + backward",
        "thread hand-off between two Python threads, one way",
        "trivial custom op, threaded, forward, process on one CPU",
        "naming on the hot path, regular op",
        "naming on the hot path, sub-op",
        "recording one span",
        "profiler on/off",
        "profiler on/off with the live view",
        "memory recording on top of the profiler",
        "export",
        "load",
        "build and save HTML",
        "HTML size",
        "causes + critical path",
        "what-if error: custom pool 1 -> 2",
        "found (op wall time)",
        "recording the pushing line",
        "inside opprof.dask.profile",
        "the client: merge into one trace",
        "MXNet 1.9.1: skipped",  # only with --peers
    ):
        assert needle in cases, needle
    assert "Dask" in cases  # measured, or skipped with a note when dask is not installed
    # Every goal is judged as met or missed, or left blank where it does not apply to this run.
    assert {row[6] for row in body} <= {"met", "**MISSED**", ""}
    assert all(row[5] for row in body if row[6]), "a judged row names its goal"
    assert out.stdout.rstrip().splitlines()[-1].startswith("goals: ")
    assert "engine:" in out.stderr and "timeline:" in out.stderr  # progress lines go to stderr


@pytest.mark.parametrize(
    "script",
    [
        ["benchmarks/engine.py", "--ops", "200", "--calls", "20", "--repeats", "1"],
        ["benchmarks/profiler.py", "--calls-naming", "2000", "--ops", "200", "--calls", "20", "--repeats", "1"],
        ["benchmarks/live.py", "--ops", "2000", "--repeats", "1"],
        ["benchmarks/load.py", "--events", "2000", "--repeats", "1"],
        ["benchmarks/why.py", "--spans", "5000", "--repeats", "1"],
        ["benchmarks/compare.py", "--trials", "1", "--runs", "2"],
        ["benchmarks/timeline.py", "--sizes", "500", "--repeats", "1"],
        ["benchmarks/peers.py", "--tasks", "200", "--repeats", "1"],
    ],
    ids=lambda s: s[0],
)
def test_each_module_runs_on_its_own(script: list[str]) -> None:
    out = _run(*script)
    assert out.returncode == 0, out.stderr
    assert len(_table(out.stdout)) >= 3
