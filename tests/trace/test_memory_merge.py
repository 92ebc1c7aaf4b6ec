"""Memory in a trace merged from several processes (side by side runs, a merge of files): each
process keeps its own live bytes, in the analysis, the timeline's lane, Chrome JSON and .opprof."""

from __future__ import annotations

import json
from pathlib import Path

import opprof
import opprof as mx
from opprof.trace import Trace, load
from opprof.trace.compare import side_by_side
from opprof.trace.memory import MEMORY_COUNTER
from opprof.view import build_timeline

MB = 1_000_000


def chain(rows: int) -> Trace:
    with opprof.profile(memory=True) as prof:
        a = mx.nd.ones((rows, 1000))  # float32: rows x 4 KB
        for k in range(3):
            a = a + k
        a.wait_to_read()
    return prof.trace


def test_each_process_keeps_its_own_live_bytes(tmp_path: Path) -> None:
    both = side_by_side([chain(1000)], [chain(500)], label_a="A", label_b="B")
    assert both.validate() == []
    m = both.analysis().memory
    assert m is not None and len(m.processes) == 2
    peaks = sorted(int(m.of_process(p)[1].max()) for p in m.processes)
    assert peaks == [4 * MB, 8 * MB]  # two arrays at a time in each, never the two summed
    assert m.peak == 8 * MB
    # The lane draws one line per process; Chrome JSON has a counter in each process.
    fig = build_timeline(both).memory_figure
    lanes = {r.data_source.name for r in fig.renderers}
    assert {"memory", *(f"memory {p}" for p in m.processes[1:])} <= lanes
    both.save(tmp_path / "both.json")
    events = json.loads((tmp_path / "both.json").read_text())["traceEvents"]
    per_pid: dict[int, int] = {}
    for e in events:
        if e.get("ph") == "C" and e.get("name") == MEMORY_COUNTER:
            per_pid[e["pid"]] = max(per_pid.get(e["pid"], 0), e["args"][MEMORY_COUNTER])
    assert sorted(per_pid.values()) == [4 * MB, 8 * MB]
    both.save(tmp_path / "both.opprof")
    assert load(tmp_path / "both.opprof") == both
