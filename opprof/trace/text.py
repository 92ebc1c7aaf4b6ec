"""Every text opprof prints about a trace: MXNet-style tables, the custom-op split, summary lines.

Renderers are pure functions of traces (``Trace -> str``), shared by ``mx.profiler.dumps()``, the
``opprof`` command, the ``%%opprof`` magic and the widget's text fallback. They live in the trace
layer, not the view layer, because the profiler's ``dumps()`` (below the views) prints them too.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from .analysis import Analysis
from .analysis.gil import (
    OFF_CPU_WORTH_SAYING,
    PYTHON_GIL_PARTS,
    GilHolder,
    HandoffCost,
    cpu_waits,
    handoff_costs,
    no_gil_evidence,
)
from .analysis.stats import StatRow, sort_rows, span_stats
from .analysis.summary import OpTypeSplit, custom_op_summary
from .columns import ROLE_CODE, SpanTable
from .compare import CONFIDENCE, CallResult, Comparison, Estimate, RowKind, Verdict
from .memory import MEMORY_CATEGORY, MEMORY_COUNTER
from .ops import short_site
from .records import CUSTOM_OP, CUSTOM_POOL, ENGINE_POOL, Role
from .threadstates import cpu_outside_python
from .trace import Trace

__all__ = [
    "CAUSE_WORDS",
    "fmt_us",
    "mxnet_stats_json",
    "split_table",
    "stats_json",
    "stats_table",
    "summary_line",
    "text_summary",
    "why_text",
]


def _aggregate(traces: Sequence[Trace]) -> list[StatRow]:
    """Stats per (category, name) over several traces (with the bytes allocated, where any
    recorded memory)."""
    rows = span_stats(SpanTable.concat([t.table for t in traces]))
    with_memory = [t for t in traces if t.memory is not None]
    if not with_memory:
        return rows
    alloc: dict[tuple[str, str], int] = defaultdict(int)
    for t in with_memory:
        for r in t.analysis().stats:
            alloc[r.name, r.cat] += r.allocated_bytes or 0
    return [replace(r, allocated_bytes=alloc.get((r.name, r.cat), 0)) for r in rows]


def _op_types(traces: Sequence[Trace]) -> list[OpTypeSplit]:
    """The custom ops summed per type over ``traces``: one trace's own summary, or all their calls."""
    if len(traces) == 1:
        return traces[0].analysis().op_types.rows()
    return custom_op_summary(row for t in traces for row in t.analysis().custom_ops)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.4f}"


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:5.1f}%" if whole else "    -"


def stats_table(traces: Sequence[Trace], sort_by: str = "total", ascending: bool = False, top: int | None = None) -> str:
    """MXNet's ``dumps()`` layout: one table per category, then the custom-op split.

    ``top`` keeps only the first ``top`` rows in the chosen order (over all categories).
    """
    rows = sort_rows(_aggregate(traces), sort_by, ascending)[:top]
    lines = ["Profile Statistics:", "\tNote that times are in milliseconds (ms).", ""]
    by_cat: dict[str, list[StatRow]] = defaultdict(list)
    for r in rows:
        by_cat[r.cat].append(r)
    width = max([len(r.name) for r in rows] + [30])
    cols = ("Total Count", "Time (ms)", "Min Time (ms)", "Max Time (ms)", "Avg Time (ms)")
    header = f"{'Name':<{width}}" + "".join(f"  {c:>13}" for c in cols)
    for cat, cat_rows in by_cat.items():
        lines += [cat, "=" * len(cat), header, "-" * len(header)]
        for r in cat_rows:
            values = (str(r.count), _ms(r.total_ns), _ms(r.min_ns), _ms(r.max_ns), _ms(r.avg_ns))
            lines.append(f"{r.name:<{width}}" + "".join(f"  {v:>13}" for v in values))
        lines.append("")
    split = _op_types(traces)
    if split:
        w = max([len(s.name) for s in split] + [20])
        head = f"{'Custom operator':<{w}}  {'Calls':>6}  {'Wall (ms)':>11}  {'Python':>16}  {'Sub-ops':>16}  {'Waiting':>16}"
        lines += ["Custom operators: where the wall time went", "=" * 42, head, "-" * len(head)]
        for s in split:
            lines.append(
                f"{s.name:<{w}}  {s.calls:>6}  {_ms(s.wall_ns):>11}  "
                f"{_ms(s.python_ns):>9} {_pct(s.python_ns, s.wall_ns)}  "
                f"{_ms(s.subops_ns):>9} {_pct(s.subops_ns, s.wall_ns)}  "
                f"{_ms(s.waiting_ns):>9} {_pct(s.waiting_ns, s.wall_ns)}" + (f"  ({s.errors} failed)" if s.errors else "")
            )
        lines.append("")
    memory = _memory_stats(traces)
    if memory is not None:
        count, low, high = memory
        head = f"{'Name':<30}{'Total Count':>11}{'Min Use  (kB)':>17}{'Max Use  (kB)':>17}{'Avg Use  (kB)':>17}"
        lines += [MEMORY_CATEGORY, "=" * 17, head, f"{'----':<30}{'-----------':>11}" + f"{'-------------':>17}" * 3]
        avg = (high - low) / 2  # MXNet's "Avg" of a counter: half its range, not a mean
        lines += [f"{MEMORY_COUNTER:<30}{count:>11}" + "".join(f"{v / 1e3:>17.4f}" for v in (low, high, avg)), ""]
    dropped = sum(int(t.metadata.get("dropped_events", 0) or 0) for t in traces)
    if dropped:
        lines.append(f"WARNING: {dropped} events were dropped at the event cap (max_events); totals are incomplete.")
    if not traces:
        lines.append("(no profiling run has finished: call set_state('run') then set_state('stop'))")
    return "\n".join(lines)


def stats_json(traces: Sequence[Trace], sort_by: str = "total", ascending: bool = False) -> str:
    rows = sort_rows(_aggregate(traces), sort_by, ascending)
    out: dict[str, Any] = {"Time": "ms", "categories": defaultdict(dict)}
    for r in rows:
        out["categories"][r.cat][r.name] = {
            "Total Count": r.count,
            "Total Time": r.total_ns / 1e6,
            "Min Time": r.min_ns / 1e6,
            "Max Time": r.max_ns / 1e6,
            "Avg Time": r.avg_ns / 1e6,
            **({"Allocated Bytes": r.allocated_bytes} if r.allocated_bytes is not None else {}),
        }
    out["custom_ops"] = [
        {
            "name": s.name,
            "calls": s.calls,
            "wall_ms": s.wall_ns / 1e6,
            "python_ms": s.python_ns / 1e6,
            "subops_ms": s.subops_ns / 1e6,
            "waiting_ms": s.waiting_ns / 1e6,
            "errors": s.errors,
        }
        for s in _op_types(traces)
    ]
    out["dropped_events"] = sum(int(t.metadata.get("dropped_events", 0) or 0) for t in traces)
    return json.dumps(out, indent=2)


#: MXNet's names for the categories it reports custom-op work under.
_MXNET_CATEGORY = {CUSTOM_OP: "Custom Operator"}


def mxnet_stats_json(traces: Sequence[Trace], sort_by: str = "total", ascending: bool = False) -> str:
    """MXNet's ``profiler.dumps(format='json')`` schema: times in ms per category and name, sorted.

    ``{"Time": {category: {name: {"Count", "Total", "Min", "Max", "Avg"}}}, "Memory": {...},
    "Unit": {"Time": "ms", "Memory": "kB"}}``; custom-op work is under ``"Custom Operator"``, as in
    MXNet. ``"Memory"`` is MXNet's ``{"Device Storage": {"Memory: cpu/0": {"Count", "Min", "Max",
    "Avg"}}}`` in kB where memory was recorded (``profile_memory=True``), with MXNet's "Avg": half
    the range of the live bytes, not their mean; empty where it was not.
    """
    by_cat: dict[str, list[StatRow]] = defaultdict(list)
    for r in _aggregate(traces):
        by_cat[_MXNET_CATEGORY.get(r.cat, r.cat)].append(r)
    time = {
        cat: {
            r.name: {
                "Count": r.count,
                "Total": r.total_ns / 1e6,
                "Min": r.min_ns / 1e6,
                "Max": r.max_ns / 1e6,
                "Avg": r.avg_ns / 1e6,
            }
            for r in sort_rows(rows, sort_by, ascending)
        }
        for cat, rows in by_cat.items()
    }
    memory: dict[str, Any] = {}
    stats = _memory_stats(traces)
    if stats is not None:
        count, low, high = stats
        kb = [_kb(v) for v in (low, high, (high - low) / 2)]
        memory = {MEMORY_CATEGORY: {MEMORY_COUNTER: {"Count": count, "Min": kb[0], "Max": kb[1], "Avg": kb[2]}}}
    return json.dumps({"Time": time, "Memory": memory, "Unit": {"Time": "ms", "Memory": "kB"}}, indent=4)


def _kb(n: float) -> float | int:
    """Bytes as kB, an int where whole (MXNet writes ``80``, not ``80.0``)."""
    v = n / 1e3
    return int(v) if v == int(v) else v


def _memory_stats(traces: Sequence[Trace]) -> tuple[int, int, int] | None:
    """(changes, least, most live bytes) of the traces' memory counter, as MXNet counts its
    ``Memory: cpu/0``: every change is one sample; None where no trace recorded memory."""
    count, low, high, seen = 0, 0, 0, False
    for t in traces:
        m = t.analysis().memory
        if m is None or not len(m.live):
            continue
        count += len(m.live)
        lo, hi = int(m.live.min()), int(m.live.max())
        low, high = (min(low, lo), max(high, hi)) if seen else (lo, hi)
        seen = True
    return (count, low, high) if seen else None


def fmt_us(us: float) -> str:
    """``1234.5`` -> ``"1.23 ms"``: three significant digits in the largest unit below the value."""
    a = abs(us)
    unit, scale = ("s", 1e6) if a >= 1e6 else ("ms", 1e3) if a >= 1e3 else ("µs", 1.0) if a >= 1 else ("ns", 1e-3)
    v = us / scale
    digits = 0 if v == 0 else max(0, min(6, 2 - math.floor(math.log10(abs(v)))))
    return f"{v:.{digits}f} {unit}"


def summary_line(trace: Trace, wall_s: float | None = None) -> str:
    """One line: wall time, spans, threads, custom-op calls and their overall split."""
    a = trace.analysis()
    parts = []
    if wall_s is not None:
        parts.append(f"{wall_s * 1e3:.1f} ms wall")
    parts.append(f"{trace.n_spans} spans on {len(trace.threads)} threads")
    if len(a.parents):
        ot = a.op_types
        wall = int(ot.wall.sum()) or 1
        py, sub, wait = (int(c.sum()) for c in (ot.python, ot.subops, ot.waiting))
        split = f"python {100 * py / wall:.0f}% / sub-ops {100 * sub / wall:.0f}% / waiting {100 * wait / wall:.0f}%"
        parts.append(f"{len(a.parents)} custom-op calls: {split}")
    m = a.memory
    if m is not None and len(m.ts):
        parts.append(f"memory: peak {fmt_bytes(m.peak)}, {fmt_bytes(m.allocated)} allocated")
    dropped = trace.metadata.get("dropped_events", 0)
    if dropped:
        parts.append(f"{dropped} events dropped at the cap")
    return "opprof: " + ", ".join(parts)


def fmt_bytes(n: float) -> str:
    """Bytes in words: ``512 B``, ``40.0 KB``, ``4.0 MB``, ``1.2 GB`` (powers of 1000, as MXNet's kB)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def alive_text(trace: Trace, top: int = 5) -> str:
    """The arrays made while profiling and still alive when it stopped, by the op and line that
    made them (a leak finder for a notebook cell); "" when memory was not recorded or none is."""
    m = trace.analysis().memory
    if m is None or not m.alive:
        return ""
    n = sum(g.count for g in m.alive)
    lines = [f"still alive after the profile: {n} array{'s' if n != 1 else ''}, {fmt_bytes(m.alive_bytes)}, made by"]
    for g in m.alive[:top]:
        where = f" at {short_site(g.site)}" if g.site else ""
        lines.append(f"  {g.count} x {g.op}{where}: {fmt_bytes(g.nbytes)}")
    if len(m.alive) > top:
        rest = m.alive[top:]
        lines.append(f"  ... {sum(g.count for g in rest)} more from {len(rest)} other ops")
    return "\n".join(lines)


#: A cause of waiting in plain words (for ``%%opprof --why``, ``opprof why`` and the tables).
CAUSE_WORDS = {
    "custom_pool": "queued for a custom-op thread",
    "subop_queue": "sub-ops ready, queued for an engine worker",
    "dependency": "blocked on other ops' results",
    "completion": "finishing (after its last sub-op, until Dummy_Wait ran)",
    "unattributed": "waiting (this trace has no engine edges to tell why)",
    # Where the GIL was sampled, the queued time splits by what the pool's threads did (causes.QUEUE_PARTS).
    "custom_pool_wake": "queued while a custom-op thread sat idle: handing over, waking it",
    "custom_pool_gil": "queued while a custom-op thread waited for the GIL",
    "subop_queue_wake": "sub-ops ready while an engine worker sat idle: handing over, waking it",
    "subop_queue_gil": "sub-ops ready while an engine worker waited for the GIL",
}
#: The queued causes' own words once the GIL's evidence has split off the rest: every thread busy.
BUSY_WORDS = {
    "custom_pool": "queued for a custom-op thread, all of them busy",
    "subop_queue": "sub-ops ready, every engine worker busy",
}
#: The queued causes' words on a trace of the naive engine (:attr:`TraceData.ran_inline`): no op
#: waits for a thread there; the time between a push and the run is the engine's own Python.
INLINE_WORDS = {
    "custom_pool": "from its start to its Python: the naive engine's own bookkeeping, inline",
    "subop_queue": "from a sub-op's push to its run: the naive engine's own bookkeeping, inline",
}
#: Short column heads of the causes in :func:`split_table`.
CAUSE_HEADS = {
    "custom_pool": "pool",
    "subop_queue": "queue",
    "dependency": "deps",
    "completion": "finish",
    "unattributed": "other",
    "custom_pool_wake": "p-wake",
    "custom_pool_gil": "p-GIL",
    "subop_queue_wake": "q-wake",
    "subop_queue_gil": "q-GIL",
}


def split_table(trace: Trace) -> str:
    """The per-custom-op-type split as a small text table: python (and how much of it was off a
    CPU), sub-ops, waiting, and the waiting by cause; each a share of the op's wall time."""
    split = trace.analysis().op_types.rows()
    if not split:
        return "(no custom operators ran in this cell)"
    w = max(len(s.name) for s in split)
    keys = list(dict.fromkeys(k for s in split for k in s.waiting_by_cause))
    heads = "".join(f"  {CAUSE_HEADS.get(k, k):>6}" for k in keys)
    # With memory recorded: each type's sub-op bytes (all its calls) and its highest peak, and
    # where NumPy's allocations were seen, the most NumPy data one call's Python held itself.
    memory: dict[str, tuple[int, int]] = {}
    numpy: dict[str, int] = {}
    for r in trace.analysis().custom_ops:
        if r.allocated_bytes is not None and r.peak_bytes is not None:
            a, p = memory.get(r.name, (0, 0))
            memory[r.name] = (a + r.allocated_bytes, max(p, r.peak_bytes))
        if r.python_numpy_peak_bytes is not None:
            numpy[r.name] = max(numpy.get(r.name, 0), r.python_numpy_peak_bytes)
    mem_heads = ("     alloc      peak" if memory else "") + ("  py-numpy" if numpy else "")
    lines = [f"{'custom op':<{w}}  calls   wall ms  python  off-CPU  sub-ops  waiting{heads}{mem_heads}"]
    for s in split:
        wall = s.wall_ns or 1
        off = "      -" if s.python_off_cpu_ns is None else f"{100 * s.python_off_cpu_ns / wall:6.1f}%"
        causes = "".join(f"  {100 * s.waiting_by_cause.get(k, 0) / wall:5.1f}%" for k in keys)
        mem = "".join(f"  {fmt_bytes(v):>8}" for v in memory[s.name]) if s.name in memory else " " * 20 * bool(memory)
        if numpy:
            mem += f"  {fmt_bytes(numpy[s.name]) if s.name in numpy else '-':>8}"
        lines.append(
            f"{s.name:<{w}}  {s.calls:5d}  {s.wall_ns / 1e6:8.3f}  {100 * s.python_ns / wall:5.1f}%  {off}  "
            f"{100 * s.subops_ns / wall:6.1f}%  {100 * s.waiting_ns / wall:6.1f}%{causes}{mem}"
        )
    if keys:
        words = {**CAUSE_WORDS, **INLINE_WORDS} if trace.ran_inline else CAUSE_WORDS
        lines.append("waiting: " + "; ".join(f"{CAUSE_HEADS.get(k, k)} = {words.get(k, k)}" for k in keys))
    if numpy:
        lines.append("py-numpy: the most NumPy data one call's Python held at once, of what it allocated itself")
    return "\n".join(lines)


def _dur(ns: float) -> str:
    return fmt_us(ns / 1e3)


def _shares(ns_by_name: dict[str, int], top: int = 3) -> str:
    """The ``top`` names of ``ns_by_name`` (most first) with their shares: "A 60%, B 40%"."""
    total = sum(ns_by_name.values()) or 1
    return ", ".join(f"{n} {100 * v / total:.0f}%" for n, v in list(ns_by_name.items())[:top])


#: A longest wake this long, and ten times the median, is said beside it: a woken thread the OS
#: left 651 µs in its run queue (the cores busy), beside a median of 385 ns, was 44 % of a custom
#: op's waiting, which "385 ns a wake" alone left unexplained.
LONG_WAKE_NS = 50_000


def _long_wake(cost: HandoffCost) -> bool:
    """Whether a pool's longest wake is worth saying beside its median (:data:`LONG_WAKE_NS`)."""
    return cost.wake_max_ns >= max(10 * cost.wake_ns, LONG_WAKE_NS)


def _wake_words(cost: HandoffCost) -> str:
    """A pool's wake in words: the median, and the longest where it alone may be the story."""
    words = f"{_dur(cost.wake_ns)} a wake"
    return words + (f", median; the longest {_dur(cost.wake_max_ns)}" if _long_wake(cost) else "")


def why_text(trace: Trace, top: int = 5) -> str:
    """Why each custom op waits and what bounds the run, in plain words (``%%opprof --why``)."""
    a = trace.analysis()
    split = a.op_types.rows()
    lines: list[str] = []
    gil_by_type = a.python_gil_by_type
    hops = handoff_costs(trace)
    unseen_gil = False
    if split:
        busy, workers_busy = a.pool_busy, a.workers_busy
        pool = trace.metadata.get(CUSTOM_POOL.size_key)
        n_workers = trace.metadata.get(ENGINE_POOL.size_key)
        lines.append("Why the custom ops wait (share of each op's wall time):")
        for s in split[:top]:
            wall = s.wall_ns or 1
            parts = []
            for key, ns in sorted(s.waiting_by_cause.items(), key=lambda kv: -kv[1]):
                if ns * 100 < wall:  # under 1 %
                    continue
                split_off = key in BUSY_WORDS and f"{key}_gil" in s.waiting_by_cause  # the GIL's evidence split it
                words = BUSY_WORDS[key] if split_off else CAUSE_WORDS.get(key, key)
                if trace.ran_inline and key in INLINE_WORDS:
                    parts.append(f"{100 * ns / wall:.0f}% {INLINE_WORDS[key]}")
                    continue
                text = f"{100 * ns / wall:.0f}% {words}"
                if key.endswith("_wake") and key.split("_")[0] in ("custom", "subop"):
                    cost = hops.get("custom" if key.startswith("custom") else "engine")
                    if cost is not None:  # the wake alone: waiting for the GIL after it is the _gil part
                        text += f" ({_wake_words(cost)})"
                if key.endswith("_gil"):
                    holders = a.queue_gil_holders.get(key.removesuffix("_gil"), {}).get(s.name, [])
                    if holders:  # the one that held it most (the rest: the timeline's hover)
                        text += f", held most by {_holder_words(holders[0])}"
                if key == "custom_pool":
                    size = f"the pool of {pool}" if pool else "the custom-op threads"
                    if busy.get(s.name):
                        text += f" — {size} was busy with {_shares(busy[s.name])}"
                    elif not split_off:  # with the GIL's evidence, the hand-off has a cause of its own
                        text += f" — {size} ran no other Python meanwhile: handing over and waking a thread"
                if key == "subop_queue" and workers_busy.get(s.name):
                    size = f"the {n_workers} engine workers" if n_workers else "the engine workers"
                    # Without the GIL's evidence the queued time still holds the hand-offs (a worker
                    # idle, being woken): what the workers ran then is said, not that all were busy.
                    verb = "were busy with" if split_off else "meanwhile ran"
                    text += f" — {size} {verb} {_shares(workers_busy[s.name])}"
                if key == "dependency" and s.blockers:
                    name, b_ns = s.blockers[0]
                    text += f" — most by {name} ({_dur(b_ns)})"
                parts.append(text)
            py = f"python {100 * s.python_ns / wall:.0f}%"
            gil = gil_by_type.get(s.name)
            off = s.python_off_cpu_ns
            if gil is not None:
                py += _python_gil_words(gil[0], gil[1], wall)
            elif off is not None and off * 100 >= wall:
                py += f" ({100 * off / wall:.0f}% off a CPU: the GIL, sleep or I/O)"
                unseen_gil = True
            what = "; ".join(parts) if parts else "hardly waits"
            lines.append(
                f"  {s.name} ({s.calls} calls, {_dur(s.wall_ns)}): {what}; {py}; sub-ops {100 * s.subops_ns / wall:.0f}%."
            )
    if unseen_gil:
        lines.append(f"  (The GIL is not told apart from sleep or I/O here: {no_gil_evidence(trace)}.)")
    cp = a.critical_path
    if cp.total > 0:
        unseen = cp.gil_holder_unseen()
        unseen_words = f" ({100 * unseen / cp.total:.0f} points of it with no holder seen)" if unseen * 100 >= cp.total else ""
        kinds = ", ".join(
            f"{100 * v / cp.total:.0f}% {k}" + (unseen_words if k == "gil" else "") for k, v in list(cp.by_kind().items())[:4]
        )
        lines.append(f"Critical path ({_dur(cp.total)}{', approximate' if cp.approximate else ''}): {kinds}.")
        biggest = [f"{n} ({k}) {_dur(v)}" for k, n, v in cp.by_name(top) if v * 50 >= cp.total]
        if biggest:
            lines.append("  Largest on it: " + "; ".join(biggest) + ".")
        if cp.approximate:
            lines.append(f"  ({cp.note})")
    if hops:
        hop_words = {
            "custom": "{n} to custom-op threads",
            "engine": "{n} to engine workers",
            "wait": "{n} back to waiting threads",
        }
        said = [
            f"{hop_words[p].format(n=c.count)}, {_dur(c.wake_ns)} to wake + {_dur(c.gil_ns)} for the GIL (medians)"
            + (f", the longest wake {_dur(c.wake_max_ns)}" if _long_wake(c) else "")
            for p, c in hops.items()
            if p in hop_words
        ]
        lines.append("Thread hand-offs (timed in the engine's queues and waits): " + "; ".join(said) + ".")
    lines += _cpu_wait_words(trace)
    sites = _top_sites(a, top)
    if sites:
        lines.append("Lines that pushed the most sub-op time: " + "; ".join(sites) + ".")
    lines += _memory_words(a, top)
    return "\n".join(lines) if lines else "(nothing recorded)"


#: The OS's run-queue time is worth a line once the threads waited for a CPU this share of the recording.
CPU_WAIT_WORTH_SAYING = 0.05


def _cpu_wait_words(trace: Trace) -> list[str]:
    """Where the OS kept the threads waiting for a CPU for a noticeable share of the recording (more
    runnable threads than free cores): how long, per pool and thread. Said as the OS counts it, not
    blamed on a cause it cannot tell apart: other processes, or the engine's threads polling for
    work (three spinning processes on this 2-core VM: 123 ms of the workers' 142 ms; none: 23 ms of
    45, the polling's)."""
    waits = cpu_waits(trace)
    t0, t1 = trace.metadata.get("t_start_ns"), trace.metadata.get("t_stop_ns")
    wall = t1 - t0 if isinstance(t0, int) and isinstance(t1, int) and t1 > t0 else 0
    if not waits or not wall or sum(waits.values()) < CPU_WAIT_WORTH_SAYING * wall:
        return []
    names = {"engine": "engine workers", "custom": "custom-op threads"}
    most_first = sorted(waits.items(), key=lambda kv: -kv[1])
    said = ", ".join(f"{names.get(k, k)} {_dur(ns)}" for k, ns in most_first if ns * 100 >= wall)
    outside = cpu_outside_python(trace.metadata)
    native = ""
    if outside is not None and outside[0] * 100 >= wall:  # what took the cores, where it was this process's own
        ran, threads = outside
        native = (
            f" Meanwhile {threads} thread{'s' if threads != 1 else ''} of this process that Python's threading does "
            f"not know ran {_dur(ran)} ({ran / wall:.1f} cores' worth): most likely a native pool's (NumPy's BLAS, "
            "OpenMP), whose threads may spin while they wait for work; limiting it (OMP_NUM_THREADS, "
            "OPENBLAS_NUM_THREADS, threadpoolctl) leaves the cores to Python's threads."
        )
    if trace.ran_inline:  # the naive engine: no engine threads, no hand-offs to speak of
        why = "other processes, or threads outside Python"
        then = "more threads of the program's own would not shorten it"
    else:
        why = "other processes, threads outside Python, or the engine's own threads, which poll a while before they sleep"
        then = "a hand-off's waking includes this wait, and more engine threads would not shorten it"
    return [
        f"Waiting for a CPU (the OS's run queue): {said}, of a {_dur(wall)} recording: more threads were runnable "
        f"than there were free cores ({why}); {then}.{native}"
    ]


def _memory_words(a: Analysis, top: int) -> list[str]:
    """Memory's part of the why-text: the peak, when and by what it was reached, the ops whose
    outputs allocated the most, and what was still alive; none where memory was not recorded."""
    m = a.memory
    if m is None or not len(m.ts):
        return []
    k = int(np.argmax(m.live))
    t0 = int(a.table.start.min()) if len(a.table) else int(m.ts[0])
    out = [
        f"Memory: peak {fmt_bytes(m.peak)} of live NDArrays at {fmt_us((int(m.ts[k]) - t0) / 1e3)}, "
        f"reached by {m.maker_name(k)}; {fmt_bytes(m.allocated)} allocated in all."
    ]
    biggest = sorted((r for r in a.stats if r.allocated_bytes), key=lambda r: -(r.allocated_bytes or 0))[:top]
    if biggest:
        words = "; ".join(f"{r.name} {fmt_bytes(r.allocated_bytes or 0)}" for r in biggest)
        out.append(f"  Ops whose outputs allocated the most: {words}.")
    if m.alive:
        out.append(
            f"  Still alive when the profile stopped: {fmt_bytes(m.alive_bytes)} in "
            + "; ".join(f"{g.count} x {g.op}" for g in m.alive[:top])
            + "."
        )
    return out


_GIL_PART_WORDS = {"GIL wait": "waiting for the GIL", "CPU wait": "waiting for a CPU"}


def _holder_words(h: GilHolder, held: str = "") -> str:
    """The holder in words (``held``: for how long, after its name), and where it held the GIL off
    a CPU for a tenth of that or more, which share: those waits were for a CPU (the OS ran other
    work on the holder's core) or for C code that kept the GIL while blocked, not for its Python."""
    said = f"{h.describe()}{held}"
    if h.off_cpu_ns > 0 and h.off_cpu_ns / h.ns >= OFF_CPU_WORTH_SAYING:
        share = 100 * h.off_cpu_ns / h.ns
        said += f" (off a CPU {share:.0f}% of that: other work had its core, or C code kept the GIL while blocked)"
    return said


def _python_gil_words(parts: np.ndarray, holders: list[GilHolder], wall: int) -> str:
    """`` (GIL wait 40% — held by Hog::pure_python on opprof-custom-0 38 ms; blocked 5%)``: the parts of
    a Python's time that are 1 % of the wall time or more, beyond being on a CPU."""
    words = []
    for part, ns in zip(PYTHON_GIL_PARTS, parts.tolist(), strict=True):
        # "not sampled" is the sampler's edges (a period at each end) unless it is large.
        if part == "on CPU" or ns * 100 < wall or (part == "not sampled" and ns * 10 < wall):
            continue
        text = f"{_GIL_PART_WORDS.get(part, part)} {100 * ns / wall:.0f}%"
        if part == "GIL wait" and holders:
            named = "; ".join(_holder_words(h, f" {_dur(h.ns)}") for h in holders[:2])
            text += f", held by {named}"
        words.append(text)
    return f" ({'; '.join(words)})" if words else ""


def _top_sites(a: Analysis, top: int) -> list[str]:
    """The user's lines (file:line) whose pushes ran longest, with the op names they pushed."""
    ops, t = a.ops, a.table
    if ops is None or not len(ops.strings):
        return []
    has = np.flatnonzero((t.op >= 0) & (t.role == ROLE_CODE[Role.SUBOP]))
    rows = a.span_op_rows[has]
    ok = rows >= 0
    has, rows = has[ok], rows[ok]
    site = ops.site[rows]
    keep = site >= 0
    has, site = has[keep], site[keep]
    if not len(has):
        return []
    dur = np.bincount(site, weights=t.dur[has], minlength=len(ops.strings))
    out = []
    for c in np.argsort(-dur)[:top].tolist():
        if dur[c] <= 0:
            break
        names = sorted(set(t.str_list(t.name[has[site == c]])))
        out.append(f"{short_site(ops.strings[c])} {', '.join(names[:3])} {_dur(float(dur[c]))}")
    return out


def text_summary(trace: Trace) -> str:
    """A few lines about ``trace`` for front ends that show only text (where no widget renders)."""
    t = trace.table
    n_inv = int(np.count_nonzero(t.role_is(Role.PARENT)))
    length = fmt_us(t.length_ns / 1e3) if len(t) else "0 s"
    return (
        f"opprof timeline: {len(t):,} spans on {len(trace.threads)} threads over {length}, "
        f"{n_inv:,} custom-op invocations.\n"
        "Display it in JupyterLab or Notebook 7 for the interactive widget, or .save('timeline.html')."
    )


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell: the first left-aligned, the others right-aligned."""
    cells = [list(headers), *[list(r) for r in rows]]
    widths = [max(len(row[k]) for row in cells) for k in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        padded = (c.ljust(w) if k == 0 else c.rjust(w) for k, (c, w) in enumerate(zip(row, widths, strict=True)))
        lines.append("  ".join(padded).rstrip())
        if n == 0:
            lines.append("-" * len(lines[0]))
    return "\n".join(lines)


def _ratio_cells(ratio: float, low: float, high: float) -> tuple[str, str]:
    """B/A and its interval as table cells (empty where there is none)."""
    return ("" if math.isnan(ratio) else f"{ratio:.3f}", "" if math.isnan(low) else f"[{low:.3f}, {high:.3f}]")


def _call_table(calls: list[CallResult]) -> str:
    return _table(
        ["call", "A", "B", "B/A", "95 % interval", "verdict"],
        [
            [
                c.label(),
                fmt_us(c.median_a / 1e3),
                fmt_us(c.median_b / 1e3),
                *_ratio_cells(c.ratio, c.low, c.high),
                c.verdict.value,
            ]
            for c in calls
        ],
    )


def calls_table(comparison: Comparison, name: str, part: str = "wall") -> str:
    """Every call of custom op ``name``, the k-th of A's runs beside the k-th of B's."""
    c = comparison
    head = f"{name}: each call, {c.label_a} ({c.runs_a} runs) against {c.label_b} ({c.runs_b} runs), {part}; medians over runs"
    return "\n".join([head, _call_table(c.calls(name, part))])


#: A memory row's verdict in words: its bytes grew or shrank, it did not run slower or faster.
_MEMORY_VERDICT = {Verdict.SLOWER: "more", Verdict.FASTER: "less"}


def _ratio_says(c: Comparison) -> str:
    """What the table's B/A and interval are, from the estimates its rows used."""
    pct = round(100 * CONFIDENCE)
    if c.paired_runs:
        return f"B/A of the pairs (runs taken alternately) with its {pct} % interval (t on the per-pair log ratios)"
    used = {r.estimate for r in c.rows}
    says = []
    if Estimate.FASTEST_HALF in used:
        says.append(
            f"B/A of the fastest half of the runs (its mean) with its {pct} % interval (bootstrap), "
            "widened by how much each side's halves "
            "differ; a verdict needs all runs to agree"
        )
    if Estimate.GEOMETRIC_MEAN in used:
        where = "rows with a zero in some run: " if says else ""
        says.append(f"{where}B/A of the geometric means with its {pct} % interval (Welch), widened alike")
    return "; ".join(says) or "B/A of the medians (no intervals)"


def compare_table(comparison: Comparison, top: int = 25) -> str:
    """A comparison (:func:`~opprof.trace.compare.compare`) as a table: end to end first, then the
    rows that explain the most of its change; added/removed rows and the notes below."""
    c = comparison
    head = (
        f"{c.label_a}: {c.runs_a} run{'s' if c.runs_a != 1 else ''}, {c.label_b}: {c.runs_b} run{'s' if c.runs_b != 1 else ''}; "
        f"medians; {_ratio_says(c)}"
    )
    changed = [r for r in c.rows if r.verdict not in (Verdict.ADDED, Verdict.REMOVED)]
    moved = [r for r in c.rows if r.verdict in (Verdict.ADDED, Verdict.REMOVED)]
    # The time rows first (the most moved within ``top``), then every memory row (a few per op type).
    shown = [r for r in changed if r.key.kind is not RowKind.MEMORY][:top] + [r for r in changed if r.key.kind is RowKind.MEMORY]
    body = []
    for r in shown:
        ratio, interval = _ratio_cells(r.ratio, r.low, r.high)
        share = "" if r.key.kind is RowKind.END_TO_END or not r.share else f"{100 * r.share:+.0f} %"
        if r.key.kind is RowKind.MEMORY:  # bytes, and more or less of them, not slower or faster
            cells = [fmt_bytes(r.median_a), fmt_bytes(r.median_b)]
            verdict = _MEMORY_VERDICT.get(r.verdict, r.verdict.value)
        else:
            cells = [fmt_us(r.median_a / 1e3), fmt_us(r.median_b / 1e3)]
            verdict = r.verdict.value
        body.append([r.key.label(), *cells, ratio, interval, verdict, share])
    out = [head, _table(["row", c.label_a, c.label_b, "B/A", "95 % interval", "verdict", "of the change"], body)]
    if len(changed) > len(shown):
        out.append(f"... {len(changed) - len(shown)} more rows")
    calls = c.most_changed_calls(top=5)
    if calls:
        out.append("calls that changed most (paired by their order within the op type):")
        out.append(_call_table(calls))
    unstable = [r for r in changed[:top] if r.verdict is Verdict.UNSTABLE and r.key.kind is not RowKind.END_TO_END]
    out.extend(f"unstable: {r.key.label()}: {r.why_unstable}" for r in unstable[:5])
    for r in moved:
        side = c.label_b if r.verdict is Verdict.ADDED else c.label_a
        value = r.median_b if r.verdict is Verdict.ADDED else r.median_a
        out.append(f"{r.verdict.value}: {r.key.label()} ({fmt_us(value / 1e3)} in {side} only)")
    out.extend(f"note: {n}" for n in c.notes)
    return "\n".join(out)
