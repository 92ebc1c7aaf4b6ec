"""The python / sub-ops / waiting split of one custom-op invocation: a sweep over its parent.

At each instant of the parent's interval the invocation is *python* if its Python runs and is
neither blocked in a wait nor running a sub-operator inline, else *sub-ops* if one of its
sub-operators executes, else *waiting*. The three add up to the parent's duration exactly.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..columns import ROLE_CODE, SpanTable
from ..ops import OpTable
from ..records import Role, Span

__all__ = [
    "by_family_time",
    "family_members",
    "family_splits",
    "inline_subops",
    "split_columns",
    "split_in_args",
    "split_invocation",
    "stored_split",
    "sweep_split",
]


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


def split_columns(
    lo: np.ndarray,
    hi: np.ndarray,
    fam: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    tid: np.ndarray,
    role: np.ndarray,
) -> np.ndarray:
    """:func:`sweep_split` of many invocations at once: ``(k, 3)`` ns, one row per parent ``[lo, hi]``.

    Members are columns: ``fam`` the parent's row (0..k-1), then each member's times, thread and
    role code. One sort of every member's start and end, a running count per kind (python,
    blocked, sub-op) and the length of each piece between two boundaries give every split with no
    loop in Python: the same rule, per invocation, as the sweep.
    """
    k = len(lo)
    out = np.zeros((k, 3), dtype=np.int64)
    if not k:
        return out
    is_py = role == ROLE_CODE[Role.PYTHON]
    is_sub = (role == ROLE_CODE[Role.SUBOP]) | (role == ROLE_CODE[Role.DUMMY_WAIT])
    inline = inline_subops(fam, tid, is_py, is_sub, k)
    is_blocked = (role == ROLE_CODE[Role.WAIT]) | inline
    # The three running counts packed in one int64, 20 bits each (a million overlapping spans of one
    # kind in one invocation before they would carry): one cumsum instead of three.
    kinds = is_py.astype(np.int64) + (is_blocked.astype(np.int64) << 20) + (is_sub.astype(np.int64) << 40)
    used = kinds != 0
    f = fam
    if not used.all():
        f, kinds, start, end = fam[used], kinds[used], start[used], end[used]
    a = np.clip(start, lo[f], hi[f])
    b = np.maximum(a, np.clip(end, lo[f], hi[f]))
    # Boundaries: +kind at each start, -kind at each end, ordered by (invocation, time), a start
    # before an end at one time (a stable sort of starts then ends), so no count dips below zero.
    t = np.concatenate([a, b])
    ff = np.concatenate([f, f])
    delta = np.concatenate([kinds, -kinds])
    order = by_family_time(ff, t, k)
    t, ff = t[order], ff[order]
    counts = np.cumsum(delta[order])  # each invocation's boundaries net to zero: no reset needed
    mask = (1 << 20) - 1
    running = (counts & mask) > 0
    blocked = ((counts >> 20) & mask) > 0
    busy = ((counts >> 40) & mask) > 0
    length = np.zeros(len(t), dtype=np.int64)
    length[:-1] = np.where(ff[1:] == ff[:-1], t[1:] - t[:-1], 0)
    python = running & ~blocked
    subop = ~python & busy
    out[:, 0] = np.bincount(ff, weights=np.where(python, length, 0), minlength=k)[:k].astype(np.int64)
    out[:, 1] = np.bincount(ff, weights=np.where(subop, length, 0), minlength=k)[:k].astype(np.int64)
    out[:, 2] = (hi - lo) - out[:, 0] - out[:, 1]
    return out


def by_family_time(ff: np.ndarray, t: np.ndarray, k: int) -> np.ndarray:
    """The stable order of boundaries by (invocation row, time): one argsort of a combined key where
    it fits in int64 (about twice as fast as lexsort)."""
    t_min = int(t.min()) if len(t) else 0
    t_span = int(t.max()) - t_min + 1 if len(t) else 1
    if k * t_span < 2**62:
        return np.argsort(ff * t_span + (t - t_min), kind="stable")
    return np.lexsort((t, ff))


def inline_subops(fam: np.ndarray, tid: np.ndarray, is_py: np.ndarray, is_sub: np.ndarray, k: int) -> np.ndarray:
    """Sub-ops run inline on their Python's own thread (the naive engine): they block the Python."""
    py_fam = fam[is_py]
    if not len(py_fam) or np.bincount(py_fam, minlength=k).max() <= 1:  # one Python each: a lookup
        py_tid = np.full(k + 1, -1, dtype=np.int64)
        py_tid[py_fam] = tid[is_py]
        return is_sub & (py_tid[fam] == tid)
    # (family, thread) pairs as one key: the tids compacted first (a tid is a label; a huge one made
    # the key overflow int64 and match the wrong pairs).
    threads, code = np.unique(tid, return_inverse=True)
    code = code.ravel().astype(np.int64)
    key = fam.astype(np.int64) * len(threads) + code
    return is_sub & np.isin(key, np.unique(key[is_py]))


def family_members(table: SpanTable, parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The spans (not parents) of the invocations of ``parents``, and each one's row in ``parents``."""
    members = np.flatnonzero((table.inv >= 0) & (table.role != ROLE_CODE[Role.PARENT]))
    if not len(parents):
        return members[:0], members[:0]
    p_inv = table.inv[parents]
    by_inv = np.argsort(p_inv, kind="stable")
    m_inv = table.inv[members]
    pos = np.minimum(np.searchsorted(p_inv[by_inv], m_inv), len(p_inv) - 1)
    mine = p_inv[by_inv][pos] == m_inv
    return members[mine], by_inv[pos[mine]]


def family_splits(table: SpanTable) -> tuple[np.ndarray, np.ndarray]:
    """Each custom-op parent (its first span per invocation) and its (python, sub-ops, waiting) ns.

    As the profiler stored them where it did (every profile: nothing to compute), else from the
    family's columns (:func:`split_columns`).
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
    if len(table.args_at) and not have.all():
        # A file's split in µs that are not whole ns stays among the sparse args: read it there.
        for k in np.flatnonzero(~have).tolist():
            stored = split_in_args(table, int(parents[k]))
            if stored is not None:
                split[k], have[k] = stored, True
    missing = parents[~have]
    if len(missing):
        members, fam = family_members(table, missing)
        split[~have] = split_columns(
            table.start[missing],
            table.end[missing],
            fam,
            table.start[members],
            table.end[members],
            table.tid[members],
            table.role[members],
        )
    return parents, split


def split_in_args(table: SpanTable, i: int) -> tuple[int, int, int] | None:
    """A split of span ``i`` kept among its sparse args (µs that are not whole ns), in ns, or None
    (also when a file's values there are not numbers)."""
    try:
        return _split_of(table.extra(i))
    except (TypeError, ValueError):
        return None


def stored_split(parent: Span) -> tuple[int, int, int] | None:
    """The split the profiler stored on ``parent`` (ns), or None for a trace that has none."""
    return _split_of(parent.args)


def _split_of(args: dict[str, Any] | None) -> tuple[int, int, int] | None:
    """The (python, sub-ops, waiting) ns that ``args`` hold in µs, or None when they hold none."""
    if not args:
        return None
    try:
        py, sub, wait = args["python_us"], args["subops_us"], args["waiting_us"]
    except KeyError:
        return None
    return round(float(py) * 1e3), round(float(sub) * 1e3), round(float(wait) * 1e3)


def callers(table: SpanTable, ops: OpTable | None) -> tuple[np.ndarray, np.ndarray]:
    """(per custom-op parent: the invocation id whose Python called it, -1 none; the parents' rows).

    A custom op called inside another's ``forward`` is pushed by that Python: the caller is the
    Python span (of another invocation) running on the pushing thread at the push, the latest
    started if several are open (the naive engine nests them). Needs the engine's edges (the
    push's time and thread); without them every parent has none."""
    parents = np.flatnonzero((table.role == ROLE_CODE[Role.PARENT]) & (table.op >= 0))
    out = np.full(len(parents), -1, dtype=np.int64)
    if ops is None or not len(ops) or not len(parents):
        return out, parents
    rows = ops.rows_of(table.op[parents])
    known = rows >= 0
    push = np.where(known, ops.push[np.maximum(rows, 0)], -1)
    pusher = np.where(known, ops.pusher[np.maximum(rows, 0)], -1)
    py = np.flatnonzero(table.role == ROLE_CODE[Role.PYTHON])
    for tid in np.unique(pusher[known & (push >= 0)]).tolist():
        mine = py[table.tid[py] == tid]
        if not len(mine):
            continue
        mine = mine[np.argsort(table.start[mine], kind="stable")]
        ask = np.flatnonzero(known & (pusher == tid) & (push >= 0))
        # The latest-started Python at or before the push, then back while it ended before it or
        # is the callee's own (a few steps: Pythons on one thread nest only inline).
        j = np.searchsorted(table.start[mine], push[ask], side="right") - 1
        todo = j >= 0
        for _ in range(8):
            if not todo.any():
                break
            cand = mine[np.maximum(j, 0)]
            good = todo & (table.end[cand] >= push[ask]) & (table.inv[cand] != table.inv[parents[ask]])
            out[ask[good]] = table.inv[cand[good]]
            todo &= ~good
            j = np.where(todo, j - 1, j)
            todo &= j >= 0
    return out, parents
