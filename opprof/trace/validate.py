"""``validate(trace)``: every broken invariant of a trace, as messages a person can act on.

Users and importers need it, not only tests: an imported trace says here where it breaks the
invariants the views rely on (nesting per thread, one complete family per invocation).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from .records import CHILD_ROLES, Role, Span, TraceData
from .split import stored_split

__all__ = ["validate"]


def _iter_thread_nesting(trace: TraceData) -> Iterator[str]:
    by_tid: dict[int, list[Span]] = defaultdict(list)
    parent = Role.PARENT
    for s in trace.spans:
        if s.role != parent:
            by_tid[s.tid].append(s)
    for tid, spans in by_tid.items():
        spans.sort(key=lambda s: (s.start, -s.end))
        stack: list[Span] = []
        for s in spans:
            while stack and stack[-1].end <= s.start:
                stack.pop()
            if stack and s.end > stack[-1].end:
                top = stack[-1]
                yield (
                    f"thread {tid} ({trace.thread_name(tid)}): {s.name!r} [{s.start}, {s.end}] overlaps "
                    f"{top.name!r} [{top.start}, {top.end}] without nesting"
                )
                continue
            stack.append(s)


def _iter_families(trace: TraceData) -> Iterator[str]:
    for inv, spans in trace.families().items():
        parents = [s for s in spans if s.role == Role.PARENT]
        if len(parents) != 1:
            yield f"invocation {inv}: {len(parents)} parent spans, expected 1"
            continue
        parent = parents[0]
        dummies = [s for s in spans if s.role == Role.DUMMY_WAIT]
        if len(dummies) != 1:
            yield f"invocation {inv} ({parent.name}): {len(dummies)} Dummy_Wait spans, expected 1"
        elif dummies[0].end != parent.end:
            yield f"invocation {inv} ({parent.name}): parent ends at {parent.end}, its Dummy_Wait at {dummies[0].end}"
        if not any(s.role == Role.PYTHON for s in spans):
            yield f"invocation {inv} ({parent.name}): no python span"
        prefix = parent.name + "::"
        for s in spans:
            if s is parent:
                continue
            if s.role not in CHILD_ROLES:
                yield f"invocation {inv}: span {s.name!r} has unknown role {s.role!r}"
            if not s.name.startswith(prefix):
                yield f"invocation {inv}: child {s.name!r} is not named {prefix}<op>"
            if s.start < parent.start or s.end > parent.end:
                yield (
                    f"invocation {inv}: {s.name!r} [{s.start}, {s.end}] is outside its parent "
                    f"{parent.name!r} [{parent.start}, {parent.end}]"
                )
        stored = stored_split(parent)
        if stored is not None and abs(sum(stored) - parent.dur) > 10:  # 0.01 us: the args are rounded us
            yield f"invocation {inv}: split {sum(stored) / 1e3:.3f} us does not sum to the parent's {parent.dur / 1e3:.3f} us"


def validate(trace: TraceData) -> list[str]:
    """Every broken invariant of ``trace``, as readable messages (empty: the trace is valid).

    Checks: spans end after they start, on known threads; spans nest on each thread; each custom-op
    invocation has one parent, one ``Dummy_Wait`` ending with it, a python span, children named
    ``Type::op`` inside it, and a split summing to its duration; flows go forward in time.
    """
    problems: list[str] = []
    tids = {t.tid for t in trace.threads}
    for i, s in enumerate(trace.spans):
        if s.end < s.start:
            problems.append(f"span {i} {s.name!r}: ends at {s.end} before it starts at {s.start}")
        if s.tid not in tids:
            problems.append(f"span {i} {s.name!r}: thread {s.tid} is not in trace.threads")
    problems.extend(_iter_thread_nesting(trace))
    problems.extend(_iter_families(trace))
    for f in trace.flows:
        if f.dst_ts < f.src_ts:
            problems.append(f"flow {f.id} {f.name!r}: arrives at {f.dst_ts} before it leaves at {f.src_ts}")
    return problems
