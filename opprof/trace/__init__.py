"""The trace model and everything that reads or writes it; it imports no other opprof layer.

Inside, from the bottom: :mod:`.records` (the record types and what roles mean), :mod:`.columns`
and :mod:`.ops` (spans, flows and the engine's edges as columns), :mod:`.jsonio` (files and JSON),
the analyses :mod:`.split`, :mod:`.stats`, :mod:`.causes` (why custom ops wait),
:mod:`.critical` (the critical path and slack), :mod:`.whatif` (what-if) and :mod:`.validate`,
the formats :mod:`.native` (opprof's own file, lossless), :mod:`.chrome` (Chrome JSON: everything
but the engine's edges) and :mod:`.importer` / :mod:`.mxnet` (other tools' traces), then
:mod:`.model` (:class:`Trace`, with the analyses as methods) and :mod:`.text` (every text
rendering of a trace).
"""

from .analysis import Analysis
from .analysis.split import split_invocation
from .analysis.stats import StatRow
from .analysis.summary import OpTypeSplit
from .analysis.validate import validate
from .columns import FlowTable, SpanTable
from .data import TraceData
from .formats.jsonio import TraceFormatError
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
    "from_chrome",
    "load",
    "split_invocation",
    "validate",
]
