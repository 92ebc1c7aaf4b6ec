"""What every benchmark module shares: the :class:`Row` it returns, medians, progress and the table.

Each module (``engine``, ``profiler``, ``load``, ``timeline``, ``peers``) has a ``rows(...)``
function returning ``list[Row]`` and a ``main()`` that prints them; ``python -m benchmarks`` runs
them all in one process and prints one table. Figures are medians of interleaved runs on a shared,
noisy machine: read the ratios, not the absolute times.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

__all__ = ["Row", "fmt", "format_table", "interleaved", "machine", "print_rows", "progress", "status_kb", "summary"]


@dataclass
class Row:
    """One line of the table.

    ``value`` is the median in ``unit`` (``None`` for a note, such as a skipped peer); ``ratio`` is
    free text (ratios to NumPy or a peer, sizes, memory); ``goal`` the issue's goal for this figure
    and ``met`` whether this run met it (``None``: no goal, or not applicable to this run).
    ``key`` lets a later section compare with this figure (``peers`` reads opprof's own rows).
    """

    section: str
    case: str
    value: float | None
    unit: str = ""
    ratio: str = ""
    goal: str = ""
    met: bool | None = None
    key: str = ""


_T0 = time.perf_counter()


def progress(msg: str) -> None:
    """A progress line on stderr (the table goes to stdout)."""
    print(f"[{time.perf_counter() - _T0:6.1f} s] {msg}", file=sys.stderr, flush=True)


def interleaved(cases: dict[str, Callable[[], float]], repeats: int) -> dict[str, float]:
    """Median of each case's returned figure over ``repeats`` rounds that run every case in turn,
    so a noisy neighbour slows all cases alike."""
    runs: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            runs[name].append(fn())
    return {name: statistics.median(v) for name, v in runs.items()}


def status_kb(field: str) -> int:
    """A ``/proc/self/status`` field in kB (``VmRSS``, ``VmHWM``); 0 where there is none."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))
    except (OSError, StopIteration):
        return 0


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def machine() -> str:
    return (
        f"Python {platform.python_version()}, NumPy {np.__version__}, {os.cpu_count()} CPUs ({_cpu_model()}, "
        f"{platform.machine()}), {platform.system()} {platform.release()}, {time.strftime('%Y-%m-%d')}"
    )


def fmt(value: float | None) -> str:
    if value is None:
        return ""
    a = abs(value)
    if a >= 100:
        return f"{value:,.0f}"
    if a >= 10:
        return f"{value:.1f}"
    if a >= 0.1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def format_table(rows: Iterable[Row]) -> str:
    """One Markdown table: the section is named on its first row only; missed goals say MISSED."""
    lines = ["| section | case | median | unit | ratio / detail | goal | met |", "|---|---|--:|---|---|---|---|"]
    last = None
    for r in rows:
        section = r.section if r.section != last else ""
        last = r.section
        met = {True: "met", False: "**MISSED**", None: ""}[r.met]
        lines.append(f"| {section} | {r.case} | {fmt(r.value)} | {r.unit} | {r.ratio} | {r.goal} | {met} |")
    return "\n".join(lines)


def summary(rows: Iterable[Row]) -> str:
    rows = list(rows)
    met = [r for r in rows if r.met is True]
    missed = [r for r in rows if r.met is False]
    text = f"goals: {len(met)} met, {len(missed)} missed"
    if missed:
        text += "; missed: " + "; ".join(f"{r.section}: {r.case} ({fmt(r.value)} {r.unit}, goal {r.goal})" for r in missed)
    return text


def print_rows(title: str, rows: list[Row]) -> None:
    """What each module's ``main()`` prints."""
    print(f"# {title}: {machine()}\n")
    print(format_table(rows))
    print(f"\n{summary(rows)}")
