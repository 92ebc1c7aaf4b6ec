"""The trace model every layer shares: :class:`Trace`, its records plus the analyses users call.

The profiler fills a :class:`Trace`; Chrome export and import, stats, the timeline widget and the
command line read only this. The records themselves and their meaning are in :mod:`.records`; the
analyses each have a module of their own (:mod:`.split`, :mod:`.stats`, :mod:`.validate`), and
the formats theirs (:mod:`.chrome` for opprof's own Chrome JSON, :mod:`.importer` for other
tools'). They work on :class:`~.records.TraceData`, so this class can call them without a circle.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from . import chrome, native
from .causes import Causes, waiting_causes
from .critical import CriticalPath, critical_path
from .data import TraceData
from .records import CustomOpRow
from .replay import WhatIf, what_if
from .split import family_splits
from .stats import StatRow, span_stats
from .validate import validate

__all__ = ["Trace", "from_chrome", "load"]


class Trace(TraceData):
    """Threads, spans, instants, counters, flows and metadata, with the analyses as methods."""

    @classmethod
    def of(cls, data: TraceData) -> Trace:
        """``data`` as a :class:`Trace` holding the same records (not copies)."""
        if isinstance(data, Trace):
            return data
        t = cls(data.threads, None, data.instants, data.counters, None, data.metadata, data.ops, data.processes)
        t._span_store, t._flow_store = data._span_store, data._flow_store
        return t

    def stats(self) -> list[StatRow]:
        """Count, total, min and max duration per (category, name), largest total first."""
        return span_stats(self.table)

    def custom_ops(self, causes: Causes | None = None) -> list[CustomOpRow]:
        """One row per custom-op invocation, in start order, with its waiting by cause (``causes``:
        this trace's :meth:`waiting_causes`, when the caller has them already)."""
        t = self.table
        parents, split = family_splits(t)
        if not len(parents):
            return []
        causes = causes if causes is not None else self.waiting_causes()
        op_codes = t.op_type[parents]
        names = t.str_list(t.name[parents])
        ops = [names[k] if c < 0 else t.strings[c] for k, c in enumerate(op_codes.tolist())]
        starts = t.start[parents].tolist()
        walls = (t.end[parents] - t.start[parents]).tolist()
        errors = [t.error_of(i) for i in parents.tolist()] if len(t.args_at) else [None] * len(parents)
        by_cause = [dict(zip(causes.keys, row, strict=True)) for row in causes.ns.tolist()]
        cpu = [None if c < 0 else c for c in causes.cpu.tolist()]
        blockers = causes.all_blockers(t)
        rows = [
            CustomOpRow(op, bw == 1, inv, st, wall, py, sub, wait, err, bc, c, blk)
            for op, bw, inv, st, wall, (py, sub, wait), err, bc, c, blk in zip(
                ops,
                t.backward[parents].tolist(),
                t.inv[parents].tolist(),
                starts,
                walls,
                split.tolist(),
                errors,
                by_cause,
                cpu,
                blockers,
                strict=True,
            )
        ]
        rows.sort(key=lambda r: (r.start_ns, r.invocation))
        return rows

    def waiting_causes(self) -> Causes:
        """Every invocation's waiting by cause, and what blocked it (see :mod:`opprof.trace.causes`)."""
        return waiting_causes(self.table, self.ops)

    def what_if(
        self,
        speedup: Mapping[str, float] | None = None,
        *,
        engine_threads: int | None = None,
        custom_threads: int | None = None,
    ) -> WhatIf:
        """Predict the run after a change: ``speedup`` maps a span name or custom-op type to a factor
        (2: twice as fast), or other pool sizes; replays the recorded graph (:mod:`opprof.trace.replay`)."""
        return what_if(self, speedup, engine_threads=engine_threads, custom_threads=custom_threads)

    def critical_path(self) -> CriticalPath:
        """The chain of work and waiting that set the end-to-end time, with every op's slack
        (see :mod:`opprof.trace.critical`); approximate, and saying so, for traces without edges."""
        return critical_path(self)

    def validate(self) -> list[str]:
        """Every broken invariant (see :func:`opprof.trace.validate`); empty when the trace is valid."""
        return validate(self)

    def to_chrome(self) -> dict[str, Any]:
        """The Chrome Trace Event JSON object (what Perfetto and chrome://tracing open)."""
        return chrome.to_chrome(self)

    def save(self, path: str | os.PathLike[str], *, compress: bool = False) -> None:
        """Write the trace: opprof's own format when the name ends in ``.opprof`` (lossless, loads
        without parsing; ``compress`` makes it ~5x smaller), else Chrome trace JSON (gzipped when
        the name ends in ``.gz``), the format Perfetto and chrome://tracing open."""
        if os.fspath(path).endswith(NATIVE_SUFFIX):
            native.save(self, path, compress=compress)
        else:
            chrome.save(self, path)


#: The file name ending that :meth:`Trace.save` writes opprof's own format for.
NATIVE_SUFFIX = ".opprof"


def load(path: str | os.PathLike[str]) -> Trace:
    """Read a trace file, telling the formats apart by content, not name: opprof's own (``.opprof``),
    or Chrome trace JSON (``.json`` or ``.json.gz``, opprof's own losslessly or any tool's)."""
    if native.is_native(path):
        return Trace.of(native.load(path))
    return Trace.of(chrome.load(path))


def from_chrome(obj: Any) -> Trace:
    """A :class:`Trace` from a Chrome trace object already in memory (a dict or a list of events)."""
    return Trace.of(chrome.from_chrome(obj))
