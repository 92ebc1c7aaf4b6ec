"""The trace model and everything that reads or writes it; it imports no other opprof layer.

Inside, in floors from the bottom (an import-linter contract keeps them): :mod:`.records` (the
record types and what roles mean) and :mod:`.live` (what a live view polls), :mod:`.columns` and
:mod:`.ops` (spans, flows and the engine's edges as columns), :mod:`.data` (:class:`TraceData`);
:mod:`.analysis` (the split, why custom ops wait, per-op-type sums, stats, the critical path,
what-if and the invariants, each computed once per trace); :mod:`.formats` (opprof's own
``.opprof`` file, Chrome JSON, other tools' traces, files and JSON); :mod:`.trace` (:class:`Trace`,
with the analyses and formats as methods, and :func:`load`); then what reads or combines Traces:
:mod:`.combine`, :mod:`.compare`, :mod:`.synthetic` and :mod:`.text` (every text rendering of a trace).
"""

from .analysis import Analysis
from .analysis.split import split_invocation
from .analysis.stats import StatRow
from .analysis.summary import OpTypeSplit
from .analysis.validate import validate
from .columns import FlowTable, SpanTable
from .data import TraceData
from .formats.jsonio import TraceFormatError, TraceSaveError
from .records import (
    CUSTOM_OP,
    CounterSample,
    CustomOpRow,
    Flow,
    Instant,
    Role,
    Span,
    ThreadInfo,
)
from .trace import Trace, from_chrome, load

__all__ = [
    "CUSTOM_OP",
    "Analysis",
    "CounterSample",
    "CustomOpRow",
    "Flow",
    "FlowTable",
    "Instant",
    "OpTypeSplit",
    "Role",
    "Span",
    "SpanTable",
    "StatRow",
    "ThreadInfo",
    "Trace",
    "TraceData",
    "TraceFormatError",
    "TraceSaveError",
    "from_chrome",
    "load",
    "split_invocation",
    "validate",
]
