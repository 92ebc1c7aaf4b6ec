"""Why a custom op waits: every nanosecond of an invocation's *waiting* given one cause.

The split (:mod:`.split`) says how much of a parent's wall time is waiting; this module says why,
from the engine's edges (:mod:`.ops`). At each waiting instant of an invocation the cause is the
first that holds of:

``custom_pool``
    its Python has not started yet: the invocation is queued for, or waking, a custom-op worker;
``subop_queue``
    one of its sub-ops is ready (every dependency cleared) but not started: no engine worker was
    free, or the hand-off to one is under way;
``dependency``
    one of its sub-ops was pushed but is not ready, or its Python is blocked in a wait: an earlier
    op holds a var it needs (that op, its invocation if it is a custom op, and the var are named in
    :attr:`Causes.blockers`);
``completion``
    nothing of its own is pending: after its last sub-op, until its ``Dummy_Wait`` has run.

A ready sub-op comes before a blocked one: when both are pending, the engine could have been
running the ready one. The causes of an invocation sum exactly to its waiting, because they are
read off the same sweep, with the same rule for python and sub-ops, as the split.

A trace without edges (another tool's, or one whose span list was rebuilt) still has
``custom_pool`` (that needs spans only); the rest of its waiting is ``unattributed``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..columns import ROLE_CODE, SpanTable
from ..ops import OpTable
from ..records import Blocker, Role
from ..threadstates import PoolCondition
from .split import by_family_time, family_members, family_splits, inline_subops

__all__ = [
    "CAUSES", "QUEUE_PARTS", "UNATTRIBUTED", "Causes", "has_edges", "op_names", "pool_busy_with", "waiting_causes",
    "workers_busy_with",
]  # fmt: skip

#: The causes of waiting, in the order a waiting instant is given the first that holds.
CAUSES = ("custom_pool", "subop_queue", "dependency", "completion")
#: Waiting a trace without edges cannot tell apart.
UNATTRIBUTED = "unattributed"

_BITS = 20
_MASK = (1 << _BITS) - 1


@dataclass(eq=False)
class Causes:
    """Every invocation's waiting by cause: row ``k`` is the parent at span ``parents[k]``.

    ``ns[k]`` holds the ns of each of ``keys`` (:data:`CAUSES`, or for a trace without edges
    ``custom_pool`` and ``unattributed``); each row sums to that invocation's waiting. ``cpu`` is
    its Python's thread CPU time (-1: not measured). ``blocked_*`` list the ``dependency`` time by
    blocking op: ``blocked_fam`` the row, ``blocked_op`` / ``blocked_var`` the edge, ``blocked_ns``.
    """

    parents: np.ndarray
    keys: tuple[str, ...]
    ns: np.ndarray  # (k, len(keys)) int64
    cpu: np.ndarray  # (k,) int64
    blocked_fam: np.ndarray
    blocked_op: np.ndarray
    blocked_var: np.ndarray
    blocked_ns: np.ndarray
    has_edges: bool
    #: The pieces of time counted as ``subop_queue``, as (row, start, end) arrays, before the GIL's
    #: evidence split them (None: not computed); :func:`workers_busy_with` reads them. (A call
    #: queued for a custom-op thread has one window, which :func:`pool_busy_with` derives.)
    subop_queued: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def of(self, k: int) -> dict[str, int]:
        return dict(zip(self.keys, self.ns[k].tolist(), strict=True))

    def top_blockers(self, top: int = 3) -> np.ndarray:
        """Indices into ``blocked_*`` of the ops that held each invocation up longest: per row at
        most ``top``, most ns first (ties in recorded order), rows ascending."""
        f = self.blocked_fam
        if not len(f):
            return np.zeros(0, dtype=np.int64)
        order = np.lexsort((np.arange(len(f)), -self.blocked_ns, f))  # by row, most ns first
        fam = f[order]
        rank = np.arange(len(fam)) - np.searchsorted(fam, fam)
        return order[rank < top]

    def all_blockers(self, table: SpanTable, top: int = 3) -> list[list[Blocker]]:
        """Per invocation row, the ops that held it up longest (:meth:`top_blockers`), as records:
        the names of all of them looked up at once."""
        out: list[list[Blocker]] = [[] for _ in range(len(self.parents))]
        pick = self.top_blockers(top)
        if not len(pick):
            return out
        f = self.blocked_fam
        names, invs = op_names(table, self.blocked_op[pick])
        for j, name, inv in zip(pick.tolist(), names, invs.tolist(), strict=True):
            var = int(self.blocked_var[j])
            blocker = Blocker(
                int(self.blocked_op[j]), name, inv if inv >= 0 else None, var if var >= 0 else None, int(self.blocked_ns[j])
            )
            out[int(f[j])].append(blocker)
        return out


#: Where the GIL was sampled, the queued causes split by what the pool's threads did meanwhile:
#: ``<cause>_gil`` one of them waited for the GIL (held by another thread running Python),
#: ``<cause>_wake`` one was parked with nothing to run (the hand-off: waking it), and the cause's
#: own key keeps the rest: every thread busy.
QUEUE_PARTS = {"custom_pool": ("custom_pool_wake", "custom_pool_gil"), "subop_queue": ("subop_queue_wake", "subop_queue_gil")}


def _split_queues(
    out: np.ndarray,
    keys: tuple[str, ...],
    pools: tuple[PoolCondition | None, PoolCondition | None],
    t: np.ndarray,
    length: np.ndarray,
    ff: np.ndarray,
    cause: np.ndarray,
    counted: np.ndarray,
    k: int,
) -> tuple[np.ndarray, tuple[str, ...]]:
    """The queued time of each invocation (``custom_pool``, ``subop_queue``) split by its pool's
    condition (:data:`QUEUE_PARTS`); the parts of a cause sum to what it had."""
    cols = [out]
    new_keys = list(keys)
    for base, cond in zip(("custom_pool", "subop_queue"), pools, strict=True):
        if cond is None or base not in keys:
            continue
        j = keys.index(base)
        sel = np.flatnonzero(counted & (cause == j) & (length > 0))
        a, b = t[sel], t[sel] + length[sel]
        for key, code in zip(QUEUE_PARTS[base], (PoolCondition.IDLE, PoolCondition.GIL), strict=True):
            got = np.bincount(ff[sel], weights=cond.time_in(code, a, b), minlength=k)[:k]
            col = np.rint(got).astype(np.int64)
            out[:, j] -= col
            cols.append(col[:, None])
            new_keys.append(key)
    return np.concatenate(cols, axis=1), tuple(new_keys)


def op_names(table: SpanTable, op_ids: np.ndarray) -> tuple[list[str], np.ndarray]:
    """(span name, invocation or -1) of each op id: a custom op's is its parent's."""
    span_of = np.flatnonzero(table.op >= 0)
    ids = table.op[span_of]
    # A custom op's id is on its parent; prefer that span over any other carrying it.
    pref = np.where(table.role[span_of] == ROLE_CODE[Role.PARENT], 0, 1)
    order = np.lexsort((pref, ids))
    ids, span_of = ids[order], span_of[order]
    first = np.ones(len(ids), dtype=bool)
    first[1:] = ids[1:] != ids[:-1]
    ids, span_of = ids[first], span_of[first]
    op_ids = np.asarray(op_ids, dtype=np.int64)
    if not len(ids):
        return [f"op {op} (not recorded)" for op in op_ids.tolist()], np.full(len(op_ids), -1, dtype=np.int64)
    pos = np.minimum(np.searchsorted(ids, op_ids), len(ids) - 1)
    hit = ids[pos] == op_ids
    s = span_of[pos]
    names = [
        table.strings[c] if h else f"op {op} (not recorded)"
        for c, h, op in zip(table.name[s].tolist(), hit.tolist(), op_ids.tolist(), strict=True)
    ]
    return names, np.where(hit, table.inv[s], -1)


def has_edges(table: SpanTable, ops: OpTable | None) -> bool:
    """Whether the spans are linked to an engine table (a profile's, kept as columns)."""
    return ops is not None and len(ops) > 0 and bool(np.any(table.op >= 0))


def waiting_causes(
    table: SpanTable,
    ops: OpTable | None,
    *,
    families: tuple[np.ndarray, np.ndarray] | None = None,
    family_index: tuple[np.ndarray, np.ndarray] | None = None,
    span_rows: np.ndarray | None = None,
    pools: tuple[PoolCondition | None, PoolCondition | None] | None = None,
) -> Causes:
    """The causes of every invocation's waiting (see the module docstring). What the caller has
    already (:class:`~.per_trace.Analysis` does): ``families``, the table's
    :func:`~.split.family_splits`; ``family_index``, :func:`~.split.family_members` of those parents;
    ``span_rows``, each span's row in ``ops`` (-1 none). ``pools``: the custom-op pool's and the
    engine workers' condition over time (:meth:`~opprof.trace.threadstates.ThreadStates.pool_condition`),
    where the trace holds the GIL's evidence: then the queued time splits further (:data:`QUEUE_PARTS`)."""
    parents, split = families if families is not None else family_splits(table)
    k = len(parents)
    edges = has_edges(table, ops)
    keys: tuple[str, ...] = CAUSES if edges else ("custom_pool", UNATTRIBUTED)
    empty = np.zeros(0, dtype=np.int64)
    if not k:
        return Causes(parents, keys, np.zeros((0, len(keys)), np.int64), empty, empty, empty, empty, empty, edges)
    lo, hi = table.start[parents], table.end[parents]
    p_inv = table.inv[parents]
    members, fam = family_index if family_index is not None else family_members(table, parents)
    start, end, tid, role = table.start[members], table.end[members], table.tid[members], table.role[members]

    is_py = role == ROLE_CODE[Role.PYTHON]
    is_sub = (role == ROLE_CODE[Role.SUBOP]) | (role == ROLE_CODE[Role.DUMMY_WAIT])
    is_wait = role == ROLE_CODE[Role.WAIT]
    is_blocked = is_wait | inline_subops(fam, tid, is_py, is_sub, k)
    # Python's CPU time and its first start, per invocation.
    cpu_all = table.cpu[members]
    cpu = np.full(k, -1, dtype=np.int64)
    py_rows = np.flatnonzero(is_py & (cpu_all >= 0))
    if len(py_rows):
        np.maximum.at(cpu, fam[py_rows], 0)
        np.add.at(cpu, fam[py_rows], cpu_all[py_rows])
    py_first = hi.copy()
    if np.any(is_py):
        np.minimum.at(py_first, fam[is_py], start[is_py])
    if not edges:
        # Without edges only custom_pool can be told: the waiting before the Python's start (the
        # sweep below would count the same there, as nothing of an invocation runs before its
        # Python) and the rest unattributed, with no sweep at all (10M spans: seconds saved).
        pool = np.clip(np.minimum(py_first, hi) - lo, 0, np.maximum(split[:, 2], 0))
        ns = np.stack([pool, split[:, 2] - pool], axis=1).astype(np.int64)
        return Causes(parents, keys, ns, cpu, empty, empty, empty, empty, False)

    # The intervals the sweep counts: the spans (python, blocked, sub-op running) and, with edges,
    # each sub-op's time queued (ready..start) and blocked (push..ready), and each wait's.
    # The parent itself too (counting nothing): its pieces then cover its whole interval.
    iv_fam = [fam, np.arange(k)]
    iv_a, iv_b = [start, lo], [end, hi]
    pack1 = [
        is_py.astype(np.int64) + (is_blocked.astype(np.int64) << _BITS) + (is_sub.astype(np.int64) << (2 * _BITS)),
        np.zeros(k, dtype=np.int64),
    ]
    pack2 = [np.zeros(len(fam) + k, dtype=np.int64)]
    assert ops is not None  # with edges (a trace without them returned above)
    span_rows = span_rows if span_rows is not None else ops.rows_of(table.op)
    row = span_rows[members]
    sub_only = (role == ROLE_CODE[Role.SUBOP]) & (row >= 0)
    s = np.flatnonzero(sub_only)
    r = row[s]
    push, ready = ops.push[r], ops.ready[r]
    ok = (push >= 0) & (ready >= push)
    s, r, push, ready = s[ok], r[ok], push[ok], ready[ok]
    sub_start = start[s]
    ready = np.minimum(ready, sub_start)
    # queued: ready..start (count in bits 0..19); blocked: push..ready (bits 20..39)
    iv_fam += [fam[s], fam[s]]
    iv_a += [ready, np.minimum(push, ready)]
    iv_b += [sub_start, ready]
    pack1 += [np.zeros(2 * len(s), dtype=np.int64)]
    pack2 += [np.ones(len(s), dtype=np.int64), np.full(len(s), 1 << _BITS, dtype=np.int64)]
    w = np.flatnonzero(is_wait)
    wrow = row[w]
    w_by = np.where(wrow >= 0, ops.by[np.maximum(wrow, 0)], -1)
    w_var = np.where(wrow >= 0, ops.var[np.maximum(wrow, 0)], -1)
    iv_fam.append(fam[w])
    iv_a.append(start[w])
    iv_b.append(end[w])
    pack1.append(np.zeros(len(w), dtype=np.int64))
    pack2.append(np.full(len(w), 1 << _BITS, dtype=np.int64))
    n_dep_before = len(fam) + k + len(s)
    dep_src = np.concatenate([ops.by[r], w_by])
    dep_var = np.concatenate([ops.var[r], w_var])
    # A blocker of the invocation's own (a sub-op waiting for its sibling) only passes on
    # what holds the sibling up: an outside blocker pending at the same time takes the time.
    row_inv = np.full(len(ops) + 1, -1, dtype=np.int64)  # the last entry: "no row"
    linked = span_rows >= 0
    row_inv[span_rows[linked]] = table.inv[linked]
    own = row_inv[ops.rows_of(dep_src)] == p_inv[np.concatenate([fam[s], fam[w]])]
    outside = np.where(own, 0, 1 << (2 * _BITS)).astype(np.int64)
    pack2[-2] = pack2[-2] + outside[: len(s)]
    pack2[-1] = pack2[-1] + outside[len(s) :]
    dep_own = own
    f = np.concatenate(iv_fam)
    a = np.clip(np.concatenate(iv_a), lo[f], hi[f])
    b = np.maximum(a, np.clip(np.concatenate(iv_b), lo[f], hi[f]))
    k1, k2 = np.concatenate(pack1), np.concatenate(pack2)
    # An empty interval (a sub-op ready when pushed, or started when ready) counts nothing: left
    # out of the sort (a third to half of a profile's queue and dependency intervals).
    used = np.ones(len(f), dtype=bool)
    used[len(fam) + k :] = b[len(fam) + k :] > a[len(fam) + k :]
    dep_kept = used[n_dep_before:]
    f, a, b, k1, k2 = f[used], a[used], b[used], k1[used], k2[used]
    dep_src, dep_var, dep_own = dep_src[dep_kept], dep_var[dep_kept], dep_own[dep_kept]
    n_dep_before = int(used[:n_dep_before].sum())
    m = len(f)

    # One sort of every boundary by (invocation, time), starts before ends at one time.
    t = np.concatenate([a, b])
    ff = np.concatenate([f, f])
    order = by_family_time(ff, t, k)
    t, ff = t[order], ff[order]
    c1 = np.cumsum(np.concatenate([k1, -k1])[order])
    c2 = np.cumsum(np.concatenate([k2, -k2])[order])
    length = np.zeros(len(t), dtype=np.int64)
    length[:-1] = np.where(ff[1:] == ff[:-1], t[1:] - t[:-1], 0)
    python = ((c1 & _MASK) > 0) & (((c1 >> _BITS) & _MASK) == 0)
    busy = ((c1 >> (2 * _BITS)) & _MASK) > 0
    waiting = ~python & ~busy
    pre = t < py_first[ff]
    queued = (c2 & _MASK) > 0
    blocked_n = (c2 >> _BITS) & _MASK
    cause = np.full(len(t), -1, dtype=np.int64)
    cause[waiting] = 3
    cause[waiting & (blocked_n > 0)] = 2
    cause[waiting & queued] = 1
    cause[waiting & pre] = 0
    nk = len(keys)
    counted = cause >= 0
    out = (
        np.bincount(ff[counted] * nk + cause[counted], weights=length[counted], minlength=k * nk)[: k * nk]
        .astype(np.int64)
        .reshape(k, nk)
    )
    sel = np.flatnonzero(counted & (cause == keys.index("subop_queue")) & (length > 0))
    subop_queued = (ff[sel], t[sel], t[sel] + length[sel])
    if pools is not None:
        out, keys = _split_queues(out, keys, pools, t, length, ff, cause, counted, k)
    # No adjustment to the split's waiting: the rule is the split's and integer sums in float64
    # are exact below 2**53 ns, so validate() can check that each row sums to it.
    # Blockers: each dependency interval gets the dependency time it covers, shared equally with
    # the other dependency intervals pending at the same instant.
    bf = bo = bv = bn = np.zeros(0, dtype=np.int64)
    if len(dep_src):
        outside_n = (c2 >> (2 * _BITS)) & _MASK
        dep = cause == 2
        share_out = np.where(dep & (outside_n > 0), length / np.maximum(outside_n, 1), 0.0)
        share_own = np.where(dep & (outside_n == 0), length / np.maximum(blocked_n, 1), 0.0)
        q_out = np.concatenate([[0.0], np.cumsum(share_out)])
        q_own = np.concatenate([[0.0], np.cumsum(share_own)])
        where = np.empty(2 * m, dtype=np.int64)
        where[order] = np.arange(2 * m)
        j = np.arange(n_dep_before, m)
        q = np.where(dep_own[:, None], q_own[where[np.stack([j, m + j], axis=1)]], q_out[where[np.stack([j, m + j], axis=1)]])
        got = np.rint(q[:, 1] - q[:, 0]).astype(np.int64)
        keep = (got > 0) & (dep_src >= 0)
        jf, src, var, got = f[j][keep], dep_src[keep], dep_var[keep], got[keep]
        if len(jf):
            key = np.lexsort((var, src, jf))
            jf, src, var, got = jf[key], src[key], var[key], got[key]
            new = np.ones(len(jf), dtype=bool)
            new[1:] = (jf[1:] != jf[:-1]) | (src[1:] != src[:-1]) | (var[1:] != var[:-1])
            grp = np.cumsum(new) - 1
            bn = np.bincount(grp, weights=got).astype(np.int64)
            bf, bo, bv = jf[new], src[new], var[new]
    return Causes(parents, keys, out, cpu, bf, bo, bv, bn, edges, subop_queued)


def pool_busy_with(table: SpanTable, causes: Causes, limit: int = 5000) -> dict[str, dict[str, int]]:
    """For each op type (parent name), what the custom-op threads ran while its invocations were
    queued for one (``custom_pool``): ns of other invocations' Python by their name, most first.

    Reads the ``limit`` longest queue windows (all of them in any profile this size or smaller):
    one search per window and custom-op thread, over each thread's Pythons, which never overlap.
    """
    t = table
    py = np.flatnonzero(t.role == ROLE_CODE[Role.PYTHON])
    k = len(causes.parents)
    if not k or not len(py) or "custom_pool" not in causes.keys:
        return {}
    parents = causes.parents
    # The window of each invocation: the parent's start to its Python's first start.
    py_first = t.end[parents].copy()
    pos = np.searchsorted(np.sort(t.inv[parents]), t.inv[py])
    order_inv = np.argsort(t.inv[parents], kind="stable")
    pos = np.minimum(pos, k - 1)
    mine = t.inv[parents][order_inv][pos] == t.inv[py]
    np.minimum.at(py_first, order_inv[pos[mine]], t.start[py[mine]])
    lo = t.start[parents]
    wait = py_first - lo
    pick = np.argsort(-wait, kind="stable")[:limit]
    pick = pick[wait[pick] > 0]
    names = t.str_list(t.name[parents])
    py_names = t.str_list(t.name[py])
    labels = [n.removesuffix("::pure_python") for n in py_names]
    threads = _by_thread(t, py, outermost=False)
    py_inv = t.inv[py]
    out: dict[str, dict[str, int]] = {}
    for j in pick.tolist():
        acc = out.setdefault(names[j], {})
        for starts, ends, at in threads:  # its own Python (a call's later pieces) is not "busy"
            _add_overlaps(acc, starts, ends, at, labels, int(lo[j]), int(py_first[j]), py_inv, int(t.inv[parents[j]]))
    return {n: dict(sorted(v.items(), key=lambda kv: -kv[1])) for n, v in out.items()}


def workers_busy_with(table: SpanTable, causes: Causes, workers: np.ndarray, limit: int = 5000) -> dict[str, dict[str, int]]:
    """For each op type (parent name), what the engine workers (``workers``: tids) ran while its
    invocations' sub-ops were ready and queued for one (``subop_queue``): ns of the workers' spans
    by name, most first. So "every engine worker busy" can say with what (a user's large dots, a
    custom op's own sub-ops, another op type's). A worker's nested spans count once, as its outermost.

    Reads the ``limit`` longest queued pieces (all of them in any profile this size or smaller).
    """
    t = table
    pieces = causes.subop_queued
    if pieces is None or not len(pieces[0]) or not len(workers):
        return {}
    on = np.flatnonzero(np.isin(t.tid, workers) & (t.role != ROLE_CODE[Role.PARENT]))
    if not len(on):
        return {}
    row, a, b = pieces
    pick = np.argsort(-(b - a), kind="stable")[:limit]
    names = t.str_list(t.name[causes.parents[row[pick]]])
    labels = t.str_list(t.name[on])
    threads = _by_thread(t, on, outermost=True)
    out: dict[str, dict[str, int]] = {}
    for name, lo, hi in zip(names, a[pick].tolist(), b[pick].tolist(), strict=True):
        acc = out.setdefault(name, {})
        for starts, ends, at in threads:
            _add_overlaps(acc, starts, ends, at, labels, lo, hi)
    return {n: dict(sorted(v.items(), key=lambda kv: -kv[1])) for n, v in out.items() if v}


def _by_thread(t: SpanTable, rows: np.ndarray, *, outermost: bool) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per thread of the spans at ``rows`` (ascending span indices): their starts and ends, sorted
    by start, and their places in ``rows`` (what :func:`_add_overlaps` reads). ``outermost``: a
    span that starts before the latest end so far lies inside an earlier one, and is left out."""
    out = []
    for tid in np.unique(t.tid[rows]).tolist():
        mine = rows[t.tid[rows] == tid]
        mine = mine[np.lexsort((-t.end[mine], t.start[mine])) if outermost else np.argsort(t.start[mine], kind="stable")]
        starts, ends = t.start[mine], t.end[mine]
        if outermost and len(mine):
            reach = np.maximum.accumulate(ends)
            top = np.ones(len(mine), dtype=bool)
            top[1:] = starts[1:] >= reach[:-1]
            mine, starts, ends = mine[top], starts[top], ends[top]
        out.append((starts, ends, np.searchsorted(rows, mine)))
    return out


def _add_overlaps(
    acc: dict[str, int],
    starts: np.ndarray,
    ends: np.ndarray,
    at: np.ndarray,
    labels: list[str],
    lo: int,
    hi: int,
    inv: np.ndarray | None = None,
    skip_inv: int = -1,
) -> None:
    """Add to ``acc``, by label, how much of ``[lo, hi)`` each of one thread's spans (disjoint,
    sorted by start; ``at`` their rows in ``labels``) covers, leaving out those of invocation
    ``skip_inv`` (``inv``: each row's)."""
    i0 = int(np.searchsorted(ends, lo, side="right"))
    i1 = int(np.searchsorted(starts, hi, side="left"))
    for i in range(i0, i1):
        if inv is not None and int(inv[at[i]]) == skip_inv:
            continue
        ov = min(hi, int(ends[i])) - max(lo, int(starts[i]))
        if ov > 0:
            label = labels[int(at[i])]
            acc[label] = acc.get(label, 0) + ov
