"""Custom-op families of an MXNet 1.9.1 trace, rebuilt from its ``Type::op`` names.

MXNet records ``Type::pure_python`` (the Python of one invocation), sub-ops ``Type::op`` and the
completion op ``Type::`` but nothing that ties a sub-op to an invocation, so families are rebuilt
by time, as far as the data allows, and what could not be is reported (see :func:`recover_mxnet`).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from ..data import TraceData
from ..records import CUSTOM_OP, Role, Span

__all__ = ["MXNET_MISATTRIBUTED", "MXNET_PROCESSES", "recover_mxnet"]

#: Process names by which an MXNet profiler's trace is recognised.
MXNET_PROCESSES = frozenset({"MXNET_C_API", "Custom Operator", "Device Storage"})
_FAMILY = re.compile(r"^(_backward_)?([A-Za-z_][\w.]*)::(.*)$")
#: Engine housekeeping MXNet 1.9.1 names after whichever custom op is running.
MXNET_MISATTRIBUTED = frozenset({"ResourceParallelRandomSetSeed"})


def _role(suffix: str) -> Role:
    if suffix == "pure_python":
        return Role.PYTHON
    if suffix in ("", "Dummy_Wait"):
        return Role.DUMMY_WAIT
    if suffix == "WaitForVar":
        return Role.WAIT
    return Role.SUBOP


@dataclass(eq=False)
class _Inv:
    number: int
    python: Span | None
    tid: int
    members: list[Span] = field(default_factory=list)
    closed: Span | None = None


@dataclass
class _Unattributed:
    """Events of one op type that no invocation could claim, and why."""

    names: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)


def recover_mxnet(trace: TraceData) -> dict[str, Any]:
    """Rebuild custom-op families of an MXNet 1.9.1 trace from its ``Type::op`` names, in place.

    Rules, per op type and direction (``_backward_Type``), in time order:

    * each ``pure_python`` span opens one invocation;
    * a completion closes the one open invocation whose Python had returned before it started; with
      none or several such invocations it is left unattributed;
    * a sub-op or wait belongs to an invocation only if exactly one is open when it starts;
    * with no ``pure_python`` spans at all, each completion closes the group of the type's events since
      the previous one (this assumes one invocation in flight at a time);
    * ``Type::ResourceParallelRandomSetSeed`` is engine housekeeping MXNet misnames: never attributed.

    Each invocation gets a synthesized ``parent`` span from its first known part to its completion (or
    its last known part, ``args["complete"] = False``), and every part gets ``op_type``, ``role`` and
    ``invocation`` args, so :meth:`Trace.custom_ops` and the timeline work. What could not be
    attributed, and why, goes to ``trace.metadata["custom_op_recovery"]`` (also returned).
    """
    by_family, misattributed = _tag_members(trace.spans)
    report: dict[str, Any] = {"recovered": 0, "complete": 0, "attributed": 0, "unattributed": 0, "unrecoverable": []}
    notes: list[str] = report["unrecoverable"]
    parents: list[Span] = []
    number = max((inv for inv in (s.invocation for s in trace.spans) if isinstance(inv, int)), default=0)
    for (backward, op_type), members in sorted(by_family.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        label = f"_backward_{op_type}" if backward else op_type
        members.sort(key=lambda s: (s.start, -s.end))
        left = _Unattributed()
        if any(s.role == Role.PYTHON for s in members):
            invs = _open_at_python(members, number, left)
        else:
            invs = _cut_at_completions(members, number, left)
            if invs:
                notes.append(
                    f"{label}: no pure_python spans; invocations were cut at each completion, assuming one in flight at a time"
                )
        number += len(invs)
        for inv in invs:
            parents.append(_parent(inv, label, op_type, backward))
            report["recovered"] += 1
            report["complete"] += inv.closed is not None
            report["attributed"] += len(inv.members)
        n_un = sum(left.names.values())
        report["unattributed"] += n_un
        if n_un:
            what = ", ".join(f"{name} x{n}" for name, n in left.names.most_common())
            why = "; ".join(f"{r} ({n})" for r, n in left.reasons.most_common())
            notes.append(f"{label}: {n_un} events not tied to an invocation ({what}): {why}")
        incomplete = sum(1 for inv in invs if inv.closed is None)
        if incomplete:
            notes.append(f"{label}: {incomplete} of {len(invs)} invocations have no completion op; their end is a lower bound")
    for name, n in misattributed.most_common():
        notes.append(f"{name} x{n}: engine housekeeping MXNet names after the running custom op; not attributed")
    if by_family:
        notes.append("MXNet 1.9.1 records no link from a sub-op to the invocation that pushed it; attribution is by time only")
    trace.spans.extend(parents)
    trace.spans.sort(key=attrgetter("start"))
    trace.metadata["custom_op_recovery"] = report
    return report


def _tag_members(spans: list[Span]) -> tuple[dict[tuple[bool, str], list[Span]], Counter[str]]:
    """Give every ``Type::op`` span its op type and role; group them by (backward, op type)."""
    by_family: dict[tuple[bool, str], list[Span]] = defaultdict(list)
    misattributed: Counter[str] = Counter()
    for s in spans:
        m = _FAMILY.match(s.name)
        if m is None or s.role == Role.PARENT:
            continue
        backward, op_type, suffix = bool(m.group(1)), m.group(2), m.group(3)
        if suffix in MXNET_MISATTRIBUTED:
            misattributed[s.name] += 1
            s.args = {**(s.args or {}), "op_type": op_type, "misattributed": True}
            continue
        s.args = {**(s.args or {}), "op_type": op_type, "role": _role(suffix)}
        by_family[(backward, op_type)].append(s)
    return by_family, misattributed


def _open_at_python(members: list[Span], number: int, left: _Unattributed) -> list[_Inv]:
    """Invocations of one op type opened by its ``pure_python`` spans (numbered after ``number``)."""
    invs: list[_Inv] = []
    open_: list[_Inv] = []
    for s in sorted(members, key=lambda s: (s.start, s.role != Role.PYTHON)):
        if s.role == Role.PYTHON:
            inv = _Inv(number + len(invs) + 1, s, s.tid, [s])
            invs.append(inv)
            open_.append(inv)
            continue
        if s.role == Role.DUMMY_WAIT:
            ready = [v for v in open_ if v.python is not None and v.python.end <= s.start]
            if len(ready) == 1:
                ready[0].members.append(s)
                ready[0].closed = s
                open_.remove(ready[0])
                continue
            why = "several invocations were ready to complete" if ready else "a completion ran before its Python returned"
            left.reasons[why] += 1
        else:
            live = [v for v in open_ if v.python is not None and v.python.start <= s.start]
            if len(live) == 1:
                live[0].members.append(s)
                continue
            left.reasons["several invocations were open" if live else "no invocation was open"] += 1
        left.names[s.name] += 1
    return invs


def _cut_at_completions(members: list[Span], number: int, left: _Unattributed) -> list[_Inv]:
    """Invocations of an op type with no ``pure_python`` spans: each completion ends a group."""
    invs: list[_Inv] = []
    group: list[Span] = []
    for s in members:
        group.append(s)
        if s.role == Role.DUMMY_WAIT:
            invs.append(_Inv(number + len(invs) + 1, None, s.tid, group, s))
            group = []
    for s in group:
        left.names[s.name] += 1
    if group:
        left.reasons["no completion followed them"] += len(group)
    return invs


def _parent(inv: _Inv, label: str, op_type: str, backward: bool) -> Span:
    """The synthesized parent of ``inv``; its members get its invocation number."""
    start = min(s.start for s in inv.members)
    end = inv.closed.end if inv.closed is not None else max(s.end for s in inv.members)
    for s in inv.members:
        assert s.args is not None
        s.args["invocation"] = inv.number
    args: dict[str, Any] = {
        "op_type": op_type,
        "role": Role.PARENT,
        "invocation": inv.number,
        "backward": backward,
        "complete": inv.closed is not None,
        "recovered": True,
    }
    return Span(label, CUSTOM_OP, inv.tid, start, end, args)
