"""The naive engine's replay: it runs every op inline on the pushing thread, so there is nothing
to schedule, and a what-if is a time warp of each thread, where every span's own time (without the
spans nested in it) is divided by its factor (see :mod:`opprof.trace.analysis.whatif`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...columns import SpanTable
from ...data import TraceData
from .prepare import extent

__all__ = ["naive"]

_I64 = np.int64


def _warp_of(t: SpanTable, at: np.ndarray, factor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One thread's time warp: (old, new) times of every boundary of its spans ``at``.

    Between two boundaries the thread is in its innermost open span (or in none); that piece of
    time is divided by that span's factor. Spans nest on a thread, so a sweep with a stack finds
    the innermost one; everything is inline on the naive engine, so this is the whole schedule.
    """
    s, e = t.start[at], t.end[at]
    bounds = np.unique(np.concatenate([s, e]))
    order = np.lexsort((-e, s))
    s_l, e_l, f_l = s[order].tolist(), e[order].tolist(), factor[at][order].tolist()
    piece = np.ones(max(len(bounds) - 1, 0), dtype=np.float64)
    stack: list[int] = []
    k = 0
    b_l = bounds.tolist()
    for j in range(len(b_l) - 1):
        x = b_l[j]
        while stack and e_l[stack[-1]] <= x:
            stack.pop()
        while k < len(s_l) and s_l[k] <= x:
            if e_l[k] > x:
                while stack and e_l[stack[-1]] <= x:
                    stack.pop()
                stack.append(k)
            k += 1
        if stack:
            piece[j] = f_l[stack[-1]]
    new = np.concatenate([[0.0], np.cumsum(np.diff(bounds) / piece)]) + bounds[0] if len(bounds) else bounds.astype(np.float64)
    return bounds, np.rint(new).astype(_I64)


def _apply(x: np.ndarray, warp: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """Times through a warp: identity before its first boundary, shifted by its change after the last."""
    if warp is None or not len(warp[0]):
        return x
    old, new = warp
    inside = np.rint(np.interp(x, old, new)).astype(_I64)
    return np.where(x > old[-1], x + (new[-1] - old[-1]), np.where(x < old[0], x, inside))


def naive(trace: TraceData, factor: np.ndarray) -> tuple[TraceData, int, int]:
    """The naive engine's replay: each thread's spans through its warp (see :func:`_warp_of`)."""
    t = trace.table
    o = trace.ops
    assert o is not None
    _, recorded = extent(trace)
    warps: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    start, end = t.start.copy(), t.end.copy()
    for tid in np.unique(t.tid).tolist():
        at = np.flatnonzero(t.tid == tid)
        warps[tid] = w = _warp_of(t, at, factor)
        start[at], end[at] = _apply(t.start[at], w), _apply(t.end[at], w)

    def by_thread(x: np.ndarray, tids: np.ndarray) -> np.ndarray:
        """Times (-1 unknown stays -1) through the warp of the thread each belongs to."""
        out = x.copy()
        for tid in np.unique(tids).tolist():
            m = (tids == tid) & (x >= 0)
            out[m] = _apply(x[m], warps.get(tid))
        return out

    spans = replace(
        t, strings=list(t.strings), start=start, end=end, split_at=np.zeros(0, dtype=_I64), split_ns=np.zeros((0, 3), dtype=_I64)
    )
    f = trace.flow_table
    flows = replace(f, src_ts=by_thread(f.src_ts, f.src_tid), dst_ts=by_thread(f.dst_ts, f.dst_tid))
    ops = replace(o, push=by_thread(o.push, o.pusher), ready=by_thread(o.ready, o.pusher))
    out = TraceData(
        threads=list(trace.threads),
        spans=spans.sorted_by_start(),
        flows=flows,
        instants=list(trace.instants),
        counters=list(trace.counters),
        metadata=dict(trace.metadata),
        ops=ops,
        processes=dict(trace.processes),
    )
    return out, recorded, extent(out)[1]
