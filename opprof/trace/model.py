"""The trace model every layer shares: :class:`Trace`, its records plus the analyses users call.

The profiler fills a :class:`Trace`; Chrome export and import, stats, the timeline widget and the
command line read only this. The records themselves and their meaning are in :mod:`.records`; the
analyses each have a module of their own (:mod:`.split`, :mod:`.stats`, :mod:`.validate`), and
the formats theirs (:mod:`.chrome` for opprof's own Chrome JSON, :mod:`.importer` for other
tools'). They work on :class:`~.records.TraceData`, so this class can call them without a circle.
"""

from __future__ import annotations

import os
from typing import Any

from . import chrome
from .records import CustomOpRow, Role, TraceData
from .split import parent_split
from .stats import StatRow, span_stats
from .validate import validate

__all__ = ["Trace", "from_chrome", "load"]


class Trace(TraceData):
    """Threads, spans, instants, counters, flows and metadata, with the analyses as methods."""

    @classmethod
    def of(cls, data: TraceData) -> Trace:
        """``data`` as a :class:`Trace` (the same lists, not copies)."""
        if isinstance(data, Trace):
            return data
        return cls(data.threads, data.spans, data.instants, data.counters, data.flows, data.metadata)

    def stats(self) -> list[StatRow]:
        """Count, total, min and max duration per (category, name), largest total first."""
        return span_stats(self.spans)

    def custom_ops(self) -> list[CustomOpRow]:
        """One row per custom-op invocation, in start order."""
        rows = []
        role = Role.PARENT
        for inv, spans in self.families().items():
            parent = next((s for s in spans if s.role == role), None)
            if parent is None:
                continue
            py, sub, wait = parent_split(parent, spans)
            a = parent.args or {}
            rows.append(
                CustomOpRow(
                    op_type=str(a.get("op_type", parent.name)),
                    backward=bool(a.get("backward", False)),
                    invocation=inv,
                    start_ns=parent.start,
                    wall_ns=parent.dur,
                    python_ns=py,
                    subops_ns=sub,
                    waiting_ns=wait,
                    error=a.get("error"),
                )
            )
        rows.sort(key=lambda r: (r.start_ns, r.invocation))
        return rows

    def validate(self) -> list[str]:
        """Every broken invariant (see :func:`opprof.trace.validate`); empty when the trace is valid."""
        return validate(self)

    def to_chrome(self) -> dict[str, Any]:
        """The Chrome Trace Event JSON object (what Perfetto and chrome://tracing open)."""
        return chrome.to_chrome(self)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write Chrome trace JSON (gzipped when the name ends in ``.gz``)."""
        chrome.save(self, path)


def load(path: str | os.PathLike[str]) -> Trace:
    """Read a Chrome trace JSON file (``.json`` or ``.json.gz``, opprof's own or any tool's)."""
    return Trace.of(chrome.load(path))


def from_chrome(obj: Any) -> Trace:
    """A :class:`Trace` from a Chrome trace object already in memory (a dict or a list of events)."""
    return Trace.of(chrome.from_chrome(obj))


