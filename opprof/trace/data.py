""":class:`TraceData`: a trace's records, held as columns, with lists of records as a view.

Readers, writers and analyses read :attr:`TraceData.table` and :attr:`TraceData.flow_table` (NumPy
columns, :mod:`.columns`). :attr:`TraceData.spans` and :attr:`TraceData.flows` are the same records
as :class:`~.records.Span` and :class:`~.records.Flow` objects, for users who iterate or edit: the
first access builds the list (about 1 µs and 400 bytes per span) and from then on *the list* is the
trace (edits to it, or to its spans, are what every analysis sees; the columns are rebuilt from it
at each analysis). A trace that is never asked for its list never builds one: the profiler, the
file readers and the timeline do not.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from .columns import FlowTable, SpanTable
from .records import CounterSample, Flow, Instant, Span, ThreadInfo

__all__ = ["TraceData"]


class TraceData:
    """Threads, spans, instants, counters, flows and metadata (see the module docstring)."""

    def __init__(
        self,
        threads: list[ThreadInfo] | None = None,
        spans: Sequence[Span] | SpanTable | None = None,
        instants: list[Instant] | None = None,
        counters: list[CounterSample] | None = None,
        flows: Sequence[Flow] | FlowTable | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.threads: list[ThreadInfo] = threads if threads is not None else []
        self.instants: list[Instant] = instants if instants is not None else []
        self.counters: list[CounterSample] = counters if counters is not None else []
        self.metadata: dict[str, Any] = metadata if metadata is not None else {}
        self._table: SpanTable | None = None
        self._spans: list[Span] | None = None
        self._flow_table: FlowTable | None = None
        self._flows: list[Flow] | None = None
        self._names: tuple[int, int, dict[int, str]] | None = None
        self.spans = spans
        self.flows = flows

    # ------------------------------------------------------------------ spans
    @property
    def table(self) -> SpanTable:
        """The spans as columns (rebuilt from :attr:`spans` once that list has been asked for)."""
        if self._spans is not None:
            return SpanTable.from_spans(self._spans)
        assert self._table is not None
        return self._table

    @property
    def spans(self) -> list[Span]:
        """The spans as :class:`~.records.Span` objects; from now on this list is the trace."""
        if self._spans is None:
            assert self._table is not None
            self._spans = self._table.to_spans()
            self._table = None
        return self._spans

    @spans.setter
    def spans(self, value: Sequence[Span] | SpanTable | None) -> None:
        if isinstance(value, SpanTable):
            self._table, self._spans = value, None
        elif value is None:
            self._table, self._spans = SpanTable.empty(), None
        else:
            # Kept as given while it is a list the caller may still edit (tests and users do).
            self._table, self._spans = None, value if isinstance(value, list) else list(value)

    def set_table(self, table: SpanTable) -> None:
        """Make ``table`` the trace's spans (drops any list view)."""
        self._table, self._spans = table, None

    @property
    def n_spans(self) -> int:
        """How many spans, without building the list view."""
        return len(self._spans) if self._spans is not None else len(self._table or ())

    # ------------------------------------------------------------------ flows
    @property
    def flow_table(self) -> FlowTable:
        if self._flows is not None:
            return FlowTable.from_flows(self._flows)
        assert self._flow_table is not None
        return self._flow_table

    @property
    def flows(self) -> list[Flow]:
        if self._flows is None:
            assert self._flow_table is not None
            self._flows = self._flow_table.to_flows()
            self._flow_table = None
        return self._flows

    @flows.setter
    def flows(self, value: Sequence[Flow] | FlowTable | None) -> None:
        if isinstance(value, FlowTable):
            self._flow_table, self._flows = value, None
        elif value is None:
            self._flow_table, self._flows = FlowTable.empty(), None
        else:
            self._flow_table, self._flows = None, value if isinstance(value, list) else list(value)

    @property
    def n_flows(self) -> int:
        return len(self._flows) if self._flows is not None else len(self._flow_table or ())

    # ------------------------------------------------------------------ threads
    def thread_names(self) -> dict[int, str]:
        """tid -> name, built once per thread list (a linear search per lookup was quadratic at 10k threads)."""
        key = (id(self.threads), len(self.threads))
        if self._names is None or self._names[:2] != key:
            self._names = (*key, {t.tid: t.name for t in self.threads})
        return self._names[2]

    def thread_name(self, tid: int) -> str:
        return self.thread_names().get(tid, f"thread {tid}")

    def families(self) -> dict[int, list[Span]]:
        """Spans of each custom-op invocation, keyed by invocation id (parent included).

        The spans of the list view when there is one (so edits to them are edits to the trace).
        """
        if self._spans is not None:
            groups: dict[int, list[Span]] = defaultdict(list)
            for s in self._spans:
                inv = s.invocation
                if inv is not None:
                    groups[inv].append(s)
            return dict(groups)
        t = self.table
        idx = np.flatnonzero(t.inv >= 0)
        fam: dict[int, list[Span]] = defaultdict(list)
        for inv, s in zip(t.inv[idx].tolist(), t.take(idx).to_spans(), strict=True):
            fam[inv].append(s)
        return dict(fam)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TraceData):
            return NotImplemented
        return (
            self.threads == other.threads
            and self.spans_equal(other)
            and self.instants == other.instants
            and self.counters == other.counters
            and self.flows_equal(other)
            and self.metadata == other.metadata
        )

    __hash__ = None  # type: ignore[assignment]

    def spans_equal(self, other: TraceData) -> bool:
        """The same spans in the same order (compared as columns, then by their args)."""
        a, b = self.table, other.table
        if len(a) != len(b):
            return False
        for col in ("start", "end", "tid", "role", "inv", "backward"):
            if not np.array_equal(getattr(a, col), getattr(b, col)):
                return False
        for col in ("name", "cat", "op_type"):
            if a.strs(getattr(a, col)).tolist() != b.strs(getattr(b, col)).tolist():
                return False
        return a.all_args() == b.all_args()

    def flows_equal(self, other: TraceData) -> bool:
        return self.flow_table.to_flows() == other.flow_table.to_flows()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.n_spans} spans on {len(self.threads)} threads, {self.n_flows} flows)"
