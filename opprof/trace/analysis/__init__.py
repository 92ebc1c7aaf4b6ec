"""The analyses of a trace, each computed once per trace and shared (:mod:`.per_trace`).

By what they answer: :mod:`.split` (python / sub-ops / waiting of each custom-op call),
:mod:`.causes` (why it waited), :mod:`.summary` (the calls summed per op type), :mod:`.stats`
(count and durations per span name), :mod:`.critical` (the critical path and slack),
:mod:`.whatif` (what-if), :mod:`.compare` (runs against runs) and :mod:`.validate` (the invariants).
They read the model (:mod:`opprof.trace.columns`, :mod:`opprof.trace.data`) and never a file format.
"""

from .per_trace import Analysis, analysis_of

__all__ = ["Analysis", "analysis_of"]
