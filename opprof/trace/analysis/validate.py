"""``validate(trace)``: every broken invariant of a trace, as messages a person can act on.

Users and importers need it, not only tests: an imported trace says here where it breaks the
invariants the views rely on (nesting per thread, one complete family per invocation). It reads
the trace's columns: the family checks are array comparisons per invariant, and only the spans
that break one become text.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..columns import NO_ROLE, OTHER_ROLE, ROLE_CODE, ROLES, SpanTable
from ..data import TraceData
from ..records import Role
from .per_trace import analysis_of
from .split import split_in_args

__all__ = ["validate"]

_PARENT = ROLE_CODE[Role.PARENT]
_PYTHON = ROLE_CODE[Role.PYTHON]
_DUMMY = ROLE_CODE[Role.DUMMY_WAIT]


def _iter_thread_nesting(trace: TraceData, t: SpanTable) -> Iterator[str]:
    on_thread = np.flatnonzero(t.role != _PARENT)
    order = on_thread[np.lexsort((-t.end[on_thread], t.start[on_thread], t.tid[on_thread]))]
    tids, starts, ends = t.tid[order], t.start[order], t.end[order]
    # One stack walk per thread over plain ints (0.3 µs a span): nesting is a property of order.
    for tid in np.unique(tids).tolist():
        lo, hi = np.searchsorted(tids, [tid, tid + 1])
        s, e = starts[lo:hi].tolist(), ends[lo:hi].tolist()
        stack: list[int] = []  # positions (within this thread) of the open spans
        for k in range(len(s)):
            a = s[k]
            while stack and e[stack[-1]] <= a:
                stack.pop()
            if stack and e[k] > e[stack[-1]]:
                top = stack[-1]
                i, j = int(order[lo + k]), int(order[lo + top])
                name, top_name = t.strings[t.name[i]], t.strings[t.name[j]]
                yield (
                    f"thread {tid} ({trace.thread_name(tid)}): {name!r} [{a}, {e[k]}] overlaps "
                    f"{top_name!r} [{s[top]}, {e[top]}] without nesting"
                )
                continue
            stack.append(k)


def _raw_role(t: SpanTable, i: int) -> object:
    """What span ``i``'s args say its role is (None when they say nothing)."""
    code = int(t.role[i])
    if code == OTHER_ROLE:
        return (t.args_of(i) or {}).get("role")
    return ROLES[code]


def _iter_families(t: SpanTable) -> Iterator[str]:
    members = np.flatnonzero(t.inv >= 0)
    if not len(members):
        return
    invs, first, group = np.unique(t.inv[members], return_index=True, return_inverse=True)
    group = group.ravel()
    n = len(invs)
    role = t.role[members]
    n_parents = np.bincount(group, weights=role == _PARENT, minlength=n).astype(np.int64)
    n_dummies = np.bincount(group, weights=role == _DUMMY, minlength=n).astype(np.int64)
    has_python = np.bincount(group, weights=role == _PYTHON, minlength=n) > 0
    # The parent of each group with exactly one (its position in the table).
    parent_of = np.full(n, -1, dtype=np.int64)
    is_p = role == _PARENT
    parent_of[group[is_p]] = members[is_p]
    parent_of[n_parents != 1] = -1
    p_of_member = parent_of[group]
    msgs: list[tuple[int, int, int, str]] = []  # (group's first span, check, span, text), sorted at the end

    def pname(g: int) -> str:
        return t.strings[t.name[parent_of[g]]]

    for g in np.flatnonzero(n_parents != 1).tolist():
        msgs.append((int(first[g]), 0, 0, f"invocation {invs[g]}: {n_parents[g]} parent spans, expected 1"))
    ok = parent_of >= 0
    for g in np.flatnonzero(ok & (n_dummies != 1)).tolist():
        msgs.append((int(first[g]), 1, 0, f"invocation {invs[g]} ({pname(g)}): {n_dummies[g]} Dummy_Wait spans, expected 1"))
    dummy = members[(role == _DUMMY) & (p_of_member >= 0)]
    dummy_g = group[(role == _DUMMY) & (p_of_member >= 0)]
    one = n_dummies[dummy_g] == 1
    late = one & (t.end[dummy] != t.end[parent_of[dummy_g]])
    for d, g in zip(dummy[late].tolist(), dummy_g[late].tolist(), strict=True):
        p = int(parent_of[g])
        msgs.append(
            (int(first[g]), 1, 0, f"invocation {invs[g]} ({pname(g)}): parent ends at {t.end[p]}, its Dummy_Wait at {t.end[d]}")
        )
    for g in np.flatnonzero(ok & ~has_python).tolist():
        msgs.append((int(first[g]), 2, 0, f"invocation {invs[g]} ({pname(g)}): no python span"))
    kids = (p_of_member >= 0) & (members != p_of_member)
    kid, kid_g, kid_p = members[kids], group[kids], p_of_member[kids]
    kid_role = t.role[kid]
    unknown = (kid_role == NO_ROLE) | (kid_role == OTHER_ROLE) | (kid_role == _PARENT)
    kid_names = t.strs(t.name[kid])
    prefixes = t.strs(t.name[kid_p]) + "::"
    unnamed = np.array([n.startswith(p) for n, p in zip(kid_names.tolist(), prefixes.tolist(), strict=True)], dtype=bool)
    outside = (t.start[kid] < t.start[kid_p]) | (t.end[kid] > t.end[kid_p])
    for pos in np.flatnonzero(unknown | ~unnamed | outside).tolist():
        i, g, p = int(kid[pos]), int(kid_g[pos]), int(kid_p[pos])
        name = kid_names[pos]
        if unknown[pos]:
            msgs.append((int(first[g]), 3, i, f"invocation {invs[g]}: span {name!r} has unknown role {_raw_role(t, i)!r}"))
        if not unnamed[pos]:
            msgs.append((int(first[g]), 3, i, f"invocation {invs[g]}: child {name!r} is not named {prefixes[pos]}<op>"))
        if outside[pos]:
            msgs.append(
                (
                    int(first[g]),
                    3,
                    i,
                    f"invocation {invs[g]}: {name!r} [{t.start[i]}, {t.end[i]}] is outside its parent "
                    f"{pname(g)!r} [{t.start[p]}, {t.end[p]}]",
                )
            )
    # A stored split must sum to its parent's wall time (0.01 µs: the args are rounded µs).
    split_sum = np.zeros(len(t), dtype=np.int64)
    has_split = np.zeros(len(t), dtype=bool)
    split_sum[t.split_at] = t.split_ns.sum(axis=1)
    has_split[t.split_at] = True
    _split_from_args(t, split_sum, has_split)
    pg = np.flatnonzero(ok)
    pp = parent_of[pg]
    bad = has_split[pp] & (np.abs(split_sum[pp] - (t.end[pp] - t.start[pp])) > 10)
    for g, p in zip(pg[bad].tolist(), pp[bad].tolist(), strict=True):
        dur = int(t.end[p] - t.start[p])
        msgs.append(
            (
                int(first[g]),
                4,
                0,
                f"invocation {invs[g]}: split {split_sum[p] / 1e3:.3f} us does not sum to the parent's {dur / 1e3:.3f} us",
            )
        )
    msgs.sort(key=lambda m: m[:3])
    for m in msgs:
        yield m[3]


def _split_from_args(t: SpanTable, split_sum: np.ndarray, has_split: np.ndarray) -> None:
    """Splits a file stored in µs that are not whole ns (kept among the sparse args) count too."""
    for i in t.args_at.tolist():
        if t.role[i] == _PARENT and not has_split[i]:
            stored = split_in_args(t, i)
            if stored is not None:
                split_sum[i], has_split[i] = sum(stored), True


def validate(trace: TraceData) -> list[str]:
    """Every broken invariant of ``trace``, as readable messages (empty: the trace is valid).

    Checks: spans end after they start, on known threads; spans nest on each thread; each custom-op
    invocation has one parent, one ``Dummy_Wait`` ending with it, a python span, children named
    ``Type::op`` inside it, and a split summing to its duration; flows go forward in time; the
    engine's table (:mod:`.ops`) is consistent, each invocation's causes of waiting sum to its
    waiting, and the critical path tiles the run.
    """
    t = trace.table
    problems: list[str] = []
    tids = np.array(sorted({th.tid for th in trace.threads}), dtype=np.int64)
    backwards = t.end < t.start
    unknown = ~np.isin(t.tid, tids)
    for i in np.flatnonzero(backwards | unknown).tolist():
        name = t.strings[t.name[i]]
        if backwards[i]:
            problems.append(f"span {i} {name!r}: ends at {t.end[i]} before it starts at {t.start[i]}")
        if unknown[i]:
            problems.append(f"span {i} {name!r}: thread {t.tid[i]} is not in trace.threads")
    problems.extend(_iter_thread_nesting(trace, t))
    problems.extend(_iter_families(t))
    f = trace.flow_table
    for k in np.flatnonzero(f.dst_ts < f.src_ts).tolist():
        problems.append(f"flow {f.id[k]} {f.strings[f.name[k]]!r}: arrives at {f.dst_ts[k]} before it leaves at {f.src_ts[k]}")
    problems.extend(_iter_why(trace, t))
    return problems


def _iter_why(trace: TraceData, t: SpanTable) -> Iterator[str]:
    """The engine's table is consistent, each invocation's causes sum to its waiting, and the
    critical path tiles the run."""
    if trace.ops is not None:
        yield from trace.ops.check()
    if trace.thread_states is not None:
        yield from (f"thread states: {p}" for p in trace.thread_states.check())
    if trace.memory is not None:
        yield from (f"memory: {p}" for p in trace.memory.check())
    if not len(t):
        return
    a = analysis_of(trace)  # shared: a report that validates and then explains computes each once
    causes, split = a.causes, a.split
    off = np.flatnonzero(causes.ns.sum(axis=1) != split[:, 2])
    for k in off[:10].tolist():
        p = int(causes.parents[k])
        yield (
            f"span {p} {t.strings[t.name[p]]!r}: its causes of waiting sum to {int(causes.ns[k].sum())} ns, "
            f"its waiting is {int(split[k, 2])} ns"
        )
    yield from a.critical_path.check()
