"""The python / sub-ops / waiting split of one custom-op invocation: a sweep over its parent.

At each instant of the parent's interval the invocation is *python* if its Python runs and is
neither blocked in a wait nor running a sub-operator inline, else *sub-ops* if one of its
sub-operators executes, else *waiting*. The three add up to the parent's duration exactly.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .columns import ROLE_CODE, ROLES, SpanTable
from .records import Role, Span

__all__ = ["family_splits", "parent_split", "split_invocation", "stored_split", "sweep_split"]


def _union(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _subtract(xs: list[tuple[int, int]], ys: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``xs`` minus ``ys``; both sorted and disjoint."""
    out: list[tuple[int, int]] = []
    j = 0
    for a, b in xs:
        cur = a
        while j < len(ys) and ys[j][1] <= cur:
            j += 1
        k = j
        while k < len(ys) and ys[k][0] < b:
            ya, yb = ys[k]
            if ya > cur:
                out.append((cur, ya))
            cur = max(cur, yb)
            k += 1
        if cur < b:
            out.append((cur, b))
    return out


def _clip_len(xs: Iterable[tuple[int, int]], lo: int, hi: int) -> int:
    return sum(max(0, min(b, hi) - max(a, lo)) for a, b in xs)


def split_invocation(parent: Span, family: Iterable[Span]) -> tuple[int, int, int]:
    """Split the parent's wall time into (python, sub-ops, waiting) nanoseconds.

    At each instant the invocation is *python* if its Python runs and is neither blocked in a wait
    nor running a sub-operator inline, else *sub-ops* if one of its sub-operators executes, else
    *waiting* (queued behind other work, or the engine handing over). The three add up to the parent's duration exactly.
    """
    members = [(s.start, s.end, s.tid, s.role) for s in family]
    return sweep_split(parent.start, parent.end, members)


def sweep_split(lo: int, hi: int, members: Iterable[tuple[int, int, int, Role | None]]) -> tuple[int, int, int]:
    """:func:`split_invocation` of a parent over ``[lo, hi]`` whose family is ``(start, end, tid, role)``."""
    python, blocked, subops = [], [], []
    members = list(members)
    python_tids = set()
    for a, b, tid, r in members:
        if r == Role.PYTHON:
            python.append((a, b))
            python_tids.add(tid)
    for a, b, tid, r in members:
        if r == Role.WAIT:
            blocked.append((a, b))
        elif r == Role.SUBOP or r == Role.DUMMY_WAIT:
            subops.append((a, b))
            if tid in python_tids:
                # Run inline on the Python's own thread (the naive engine): not Python's own time.
                blocked.append((a, b))
    running = _subtract(_union(python), _union(blocked))
    busy = _subtract(_union(subops), running)
    py = _clip_len(running, lo, hi)
    sub = _clip_len(busy, lo, hi)
    return py, sub, (hi - lo) - py - sub


def family_splits(table: SpanTable) -> tuple[np.ndarray, np.ndarray]:
    """Each custom-op parent (its first span per invocation) and its (python, sub-ops, waiting) ns.

    As the profiler stored them where it did (every profile: no sweep at all), else swept here
    from the family's columns, one invocation at a time.
    """
    is_parent = (table.role == ROLE_CODE[Role.PARENT]) & (table.inv >= 0)
    cand = np.flatnonzero(is_parent)
    _, first = np.unique(table.inv[cand], return_index=True)
    parents = np.sort(cand[first])
    split = np.zeros((len(parents), 3), dtype=np.int64)
    have = np.zeros(len(parents), dtype=bool)
    if len(table.split_at):
        pos = np.searchsorted(table.split_at, parents)
        pos_ok = pos < len(table.split_at)
        hit = np.zeros(len(parents), dtype=bool)
        hit[pos_ok] = table.split_at[pos[pos_ok]] == parents[pos_ok]
        split[hit] = table.split_ns[pos[hit]]
        have = hit
    missing = np.flatnonzero(~have)
    if len(missing):
        members = np.flatnonzero((table.inv >= 0) & ~is_parent)
        order = members[np.argsort(table.inv[members], kind="stable")]
        sorted_inv = table.inv[order]
        roles = [ROLES[c] for c in range(len(ROLES))]
        for k in missing.tolist():
            p = int(parents[k])
            inv = table.inv[p]
            lo_i, hi_i = np.searchsorted(sorted_inv, [inv, inv + 1])
            idx = order[lo_i:hi_i]
            fam = zip(
                table.start[idx].tolist(),
                table.end[idx].tolist(),
                table.tid[idx].tolist(),
                [roles[c] for c in table.role[idx].tolist()],
                strict=True,
            )
            split[k] = sweep_split(int(table.start[p]), int(table.end[p]), fam)
    return parents, split


def stored_split(parent: Span) -> tuple[int, int, int] | None:
    """The split the profiler stored on ``parent`` (ns), or None for a trace that has none.

    Called once per parent by every view (90k parents in a 1M-span trace): plain lookups, no
    generators (those made it 6.7 µs a call).
    """
    a = parent.args
    if not a:
        return None
    try:
        py, sub, wait = a["python_us"], a["subops_us"], a["waiting_us"]
    except KeyError:
        return None
    return round(float(py) * 1e3), round(float(sub) * 1e3), round(float(wait) * 1e3)


def parent_split(parent: Span, family: Iterable[Span]) -> tuple[int, int, int]:
    """The one accessor of an invocation's split: as stored by the profiler, else swept here."""
    return stored_split(parent) or split_invocation(parent, family)
