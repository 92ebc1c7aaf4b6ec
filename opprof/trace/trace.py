""":class:`Trace`: a trace's records (:class:`~.data.TraceData`) with its analyses and formats as methods.

The profiler fills a :class:`Trace`; Chrome export and import, stats, the timeline widget and the
command line read only this. It sits above both floors it calls: the analyses
(:mod:`.analysis`, each computed once per trace through :meth:`Trace.analysis`) and the file
formats (:mod:`.formats`), which work on :class:`~.data.TraceData` and never import this class.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .analysis import Analysis, analysis_of
from .analysis.causes import Causes
from .analysis.critical import CriticalPath
from .analysis.stats import StatRow
from .analysis.validate import validate
from .analysis.whatif import WhatIf, what_if
from .data import TraceData
from .formats import chrome, native
from .formats.atomic import not_a_regular_file, written
from .records import CustomOpRow

__all__ = ["Trace", "from_chrome", "load"]


class Trace(TraceData):
    """Threads, spans, instants, counters, flows and metadata, with the analyses as methods."""

    @classmethod
    def of(cls, data: TraceData) -> Trace:
        """``data`` as a :class:`Trace` holding the same records (not copies)."""
        if isinstance(data, Trace):
            return data
        t = cls(
            data.threads, None, data.instants, data.counters, None, data.metadata, data.ops, data.processes, data.thread_states,
            data.memory,
        )  # fmt: skip
        t._span_store, t._flow_store = data._span_store, data._flow_store
        t._analysis = data._analysis
        return t

    def analysis(self) -> Analysis:
        """Every analysis of this trace, computed on first use and kept until its records change
        (see :mod:`opprof.trace.analysis.per_trace`): the object every reader shares."""
        return analysis_of(self)

    def stats(self) -> list[StatRow]:
        """Count, total, min and max duration per (category, name), largest total first."""
        return list(self.analysis().stats)

    def custom_ops(self, causes: Causes | None = None) -> list[CustomOpRow]:
        """One row per custom-op invocation, in start order, with its waiting by cause.

        ``causes`` is accepted for older callers and ignored: the trace's analysis holds them."""
        del causes
        return list(self.analysis().custom_ops)

    def waiting_causes(self) -> Causes:
        """Every invocation's waiting by cause, and what blocked it (see :mod:`opprof.trace.analysis.causes`)."""
        return self.analysis().causes

    def what_if(
        self,
        speedup: Mapping[str, float] | None = None,
        *,
        engine_threads: int | None = None,
        custom_threads: int | None = None,
        switch_interval: float | None = None,
        releases_gil: Mapping[str, bool] | None = None,
        gil: bool | None = None,
    ) -> WhatIf:
        """Predict the run after a change: ``speedup`` maps a span name or custom-op type to a factor
        (2: twice as fast), other pool sizes, another GIL switch interval (s), names that release the GIL
        (``releases_gil={"T": True}``) or no GIL (``gil=False``); replays the recorded graph with the GIL
        where the run had one (:mod:`opprof.trace.analysis.whatif`)."""
        return what_if(
            self,
            speedup,
            engine_threads=engine_threads,
            custom_threads=custom_threads,
            switch_interval=switch_interval,
            releases_gil=releases_gil,
            gil=gil,
        )

    def critical_path(self) -> CriticalPath:
        """The chain of work and waiting that set the end-to-end time, with every op's slack
        (see :mod:`opprof.trace.analysis.critical`); approximate, and saying so, for traces without edges."""
        return self.analysis().critical_path

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
        problem = not_a_regular_file(path)  # a FIFO would block the save, a device take it whole
        if problem:
            raise OSError(problem)
        if os.fspath(path).endswith(NATIVE_SUFFIX):
            native.save(self, path, compress=compress)
        else:
            # Written aside and renamed: a save that fails leaves the file that was there as it was.
            with written(path) as tmp:
                chrome.save(self, tmp)


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
