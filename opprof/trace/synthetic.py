"""Synthetic traces of any size, shaped like the profiler's, for benchmarks and tests.

Profiling a real workload long enough to record ten million spans takes an hour; the timeline's
and the formats' speed goals (1M and 10M spans) and the level-of-detail tests need such traces in
seconds. The shape copies what the profiler records: a main thread with one ``step`` span per
iteration, regular ops on engine threads, and custom-op invocations whose ``parent`` holds a python
span (sometimes with a wait inside) on a custom-op thread, sub-ops on an engine thread and a
``Dummy_Wait`` ending with the parent, linked by flows from the push to each sub-op. Every trace
passes :func:`opprof.trace.validate`.

With ``processes=N`` it is the trace of N processes merged into one (a Dask client and its
workers): each a trace of this shape on threads of its own, tids unique across the whole.

Built as columns (no :class:`~.records.Span` objects): 10M spans take a few seconds and ~500 MB.
Each iteration has a window of its own, so every time is a sum of the draws before it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .analysis.split import split_columns
from .columns import ROLE_CODE, FlowTable, SpanTable, StringTable
from .data import TraceData
from .ops import WAIT_ID_BASE, OpTable
from .records import CUSTOM_OP, CUSTOM_THREAD_PREFIX, ENGINE_THREAD_PREFIX, OPERATOR, Role, ThreadInfo
from .threadstates import ThreadStates
from .trace import Trace

__all__ = ["many_threads_trace", "repeated_trace", "synthetic_trace"]

_OPS = ("dot", "elemwise_add", "_plus_scalar", "relu", "sum", "broadcast_mul", "_copyto")
_CUSTOM = ("ScaledTanh", "RowSquaredError", "_backward_ScaledTanh")
_SUBOPS = ("_mul_scalar", "_plus_scalar", "elemwise_mul", "_copyto")
_I = np.int64


def synthetic_trace(
    n_spans: int, *, engine_threads: int = 4, custom_threads: int = 2, seed: int = 0, processes: int = 1
) -> Trace:
    """A valid trace with about ``n_spans`` spans (11.3 per iteration: 1 step, 4 ops, 6.3 custom-op spans).

    ``processes`` > 1 splits them among that many processes (pid 0 "client", then "worker-1", ...),
    each with threads of its own: the merged trace of several processes, for tests of the formats
    and the timeline that need one.
    """
    if processes > 1:
        return _several_processes(n_spans, engine_threads, custom_threads, seed, processes)
    rng = np.random.default_rng(seed)
    iters = max(1, round(n_spans / 11.3))
    E, C = engine_threads, custom_threads
    threads = [ThreadInfo(1, "MainThread")]
    threads += [ThreadInfo(2 + i, f"{ENGINE_THREAD_PREFIX}{i}") for i in range(E)]
    threads += [ThreadInfo(2 + E + i, f"{CUSTOM_THREAD_PREFIX}{i}") for i in range(C)]
    it = np.arange(iters, dtype=_I)
    op_dur = rng.integers(2_000, 30_000, size=(iters, 4))
    py_dur = rng.integers(10_000, 60_000, size=iters)
    sub_dur = rng.integers(2_000, 12_000, size=(iters, 3))
    with_wait = rng.random(iters) < 0.3
    # Within an iteration's window (from its start t): ops first, then the custom op.
    py_s = 32_000 + np.zeros(iters, dtype=_I)
    py_e = py_s + py_dur
    push = py_s[:, None] + (np.arange(1, 4) * py_dur[:, None]) // 4
    sub_s = push + 1_000 + np.arange(3) * 12_000
    sub_e = sub_s + sub_dur
    d_s = np.maximum(py_e, sub_e[:, 2]) + 500
    d_e = d_s + 1_500
    length = d_e + 1_000
    t = 1_000_000 + np.concatenate(([0], np.cumsum(length)[:-1]))

    st = StringTable()
    op_type = it % len(_CUSTOM)
    custom_codes = np.array([st.code(c) for c in _CUSTOM], dtype=np.int32)
    op_codes = np.array([st.code(o) for o in _OPS], dtype=np.int32)
    # ``Type::sub`` and the other child names, one code per (type, sub-op) pair.
    sub_codes = np.array([[st.code(f"{c}::{s}") for s in _SUBOPS] for c in _CUSTOM], dtype=np.int32)
    py_codes = np.array([st.code(f"{c}::pure_python") for c in _CUSTOM], dtype=np.int32)
    wait_codes = np.array([st.code(f"{c}::WaitForVar") for c in _CUSTOM], dtype=np.int32)
    dummy_codes = np.array([st.code(f"{c}::Dummy_Wait") for c in _CUSTOM], dtype=np.int32)
    base_op = np.array([st.code(c.removeprefix("_backward_")) for c in _CUSTOM], dtype=np.int32)
    bw_of = np.array([c.startswith("_backward") for c in _CUSTOM], dtype=np.int8)
    c_op, c_custom, c_python = st.code(OPERATOR), st.code(CUSTOM_OP), st.code("python")
    step_names = np.array([st.code(f"step {i}") for i in range(iters)], dtype=np.int32)

    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("start", "end", "tid", "name", "cat", "role", "inv", "op", "bw")}

    def add(
        start: np.ndarray, end: np.ndarray, tid: np.ndarray, name: np.ndarray, cat: int, role: int, fam: np.ndarray | None
    ) -> None:
        k = len(start)
        cols["start"].append(start)
        cols["end"].append(end)
        cols["tid"].append(np.broadcast_to(tid, k))
        cols["name"].append(np.broadcast_to(name, k))
        cols["cat"].append(np.full(k, cat, dtype=np.int32))
        cols["role"].append(np.full(k, role, dtype=np.int8))
        if fam is None:
            cols["inv"].append(np.full(k, -1, dtype=_I))
            cols["op"].append(np.full(k, -1, dtype=np.int32))
            cols["bw"].append(np.full(k, -1, dtype=np.int8))
        else:
            cols["inv"].append(fam + 1)
            cols["op"].append(base_op[op_type[fam]])
            cols["bw"].append(bw_of[op_type[fam]])

    for k in range(4):
        tid = 2 + (it + k) % E
        add(t + 500, t + 500 + op_dur[:, k], tid, op_codes[(it + k) % len(_OPS)], c_op, 0, None)
    ctid = 2 + E + it % C
    etid = 2 + (it + 1) % E
    ptid = 2 + it % E
    n_before = sum(len(a) for a in cols["start"])
    add(t + 1_000, t + d_e, ptid, custom_codes[op_type], c_custom, ROLE_CODE[Role.PARENT], it)
    add(t + py_s, t + py_e, ctid, py_codes[op_type], c_custom, ROLE_CODE[Role.PYTHON], it)
    w = np.flatnonzero(with_wait)
    add(t[w] + py_s[w] + 3_000, t[w] + py_s[w] + 6_000, ctid[w], wait_codes[op_type[w]], c_custom, ROLE_CODE[Role.WAIT], w)
    for j in range(3):
        add(
            t + sub_s[:, j],
            t + sub_e[:, j],
            etid,
            sub_codes[op_type, (it + j) % len(_SUBOPS)],
            c_custom,
            ROLE_CODE[Role.SUBOP],
            it,
        )
    add(t + d_s, t + d_e, etid, dummy_codes[op_type], c_custom, ROLE_CODE[Role.DUMMY_WAIT], it)
    add(t, t + length, np.array(1), step_names, c_python, 0, None)
    cat = {k: np.concatenate(v) for k, v in cols.items()}
    parents = np.arange(n_before, n_before + iters, dtype=_I)
    kids = np.flatnonzero(cat["inv"] >= 0)
    kids = kids[cat["role"][kids] != ROLE_CODE[Role.PARENT]]
    split = split_columns(
        cat["start"][parents],
        cat["end"][parents],
        cat["inv"][kids] - 1,
        cat["start"][kids],
        cat["end"][kids],
        cat["tid"][kids],
        cat["role"][kids],
    )
    table = SpanTable(
        strings=st.strings,
        start=cat["start"],
        end=cat["end"],
        tid=cat["tid"].astype(_I),
        name=cat["name"].astype(np.int32),
        cat=cat["cat"],
        role=cat["role"],
        inv=cat["inv"],
        op_type=cat["op"].astype(np.int32),
        backward=cat["bw"].astype(np.int8),
        split_at=parents,
        split_ns=split,  # stored on the parent, as the profiler does
    )
    # Flows: from each push (on the custom thread) to its sub-op, in iteration order.
    push_abs = (t[:, None] + push).ravel()
    dst = (t[:, None] + sub_s).ravel()
    flow_names = sub_codes[op_type[:, None], (it[:, None] + np.arange(3)) % len(_SUBOPS)].ravel()
    nf = len(dst)
    flows = FlowTable(
        st.strings,
        np.arange(1, nf + 1, dtype=_I),
        flow_names,
        np.full(nf, st.code("push"), dtype=np.int32),
        np.repeat(ctid, 3),
        push_abs,
        np.repeat(etid, 3),
        dst,
    )
    return Trace(threads=threads, spans=table.sorted_by_start(), flows=flows, metadata={"producer": "opprof.synthetic"})


def _several_processes(n_spans: int, engine_threads: int, custom_threads: int, seed: int, processes: int) -> Trace:
    """:func:`synthetic_trace` of each process (seeds ``seed``, ``seed + 1``...), merged: tids,
    invocations and flow ids shifted past the previous process's, each thread given its pid."""
    per = max(1, n_spans // processes)
    parts = [
        synthetic_trace(per, engine_threads=engine_threads, custom_threads=custom_threads, seed=seed + p)
        for p in range(processes)
    ]
    tid_step = 1 + engine_threads + custom_threads  # a part's tids run 1 .. 1 + E + C
    inv_step = int(parts[0].table.inv.max()) + 1
    tables, flows, threads = [], [], []
    for p, part in enumerate(parts):
        t, f = part.table, part.flow_table
        c = t.take(np.arange(len(t)))
        c.tid = t.tid + p * tid_step
        c.inv = np.where(t.inv >= 0, t.inv + p * inv_step, -1)
        tables.append(c)
        g = f.take(np.arange(len(f)))
        g.src_tid, g.dst_tid, g.id = f.src_tid + p * tid_step, f.dst_tid + p * tid_step, f.id + p * len(f)
        flows.append(g)
        threads += [ThreadInfo(th.tid + p * tid_step, th.name, p) for th in part.threads]
    # Every part has the same iterations, so the same string table: the flows' codes agree.
    assert all(part.flow_table.strings == parts[0].flow_table.strings for part in parts)
    names = {p: "client" if p == 0 else f"worker-{p}" for p in range(processes)}
    return Trace(
        threads=threads,
        spans=SpanTable.concat(tables).sorted_by_start(),
        flows=_concat_flows(flows),
        metadata={"producer": "opprof.synthetic"},
        processes=names,
    )


def many_threads_trace(n_threads: int, spans_per_thread: int = 4, *, seed: int = 0) -> Trace:
    """A valid trace of ``n_threads`` threads (a thread pool server's shape), each with a request
    span holding ``spans_per_thread - 1`` calls one after another: for the lanes' scaling goals."""
    rng = np.random.default_rng(seed)
    k = max(1, spans_per_thread - 1)
    tid = np.arange(1, n_threads + 1, dtype=_I)
    begin = rng.integers(0, 1_000_000, size=n_threads)
    call = rng.integers(1_000, 20_000, size=(n_threads, k))
    gap = 200
    c_start = begin[:, None] + gap + np.concatenate([np.zeros((n_threads, 1), _I), np.cumsum(call + gap, axis=1)[:, :-1]], axis=1)
    c_end = c_start + call
    r_end = c_end[:, -1] + gap
    st = StringTable()
    names = np.array([st.code(n) for n in ("handle_request", "db.query", "render", "json.dumps")], dtype=np.int32)
    start = np.concatenate([begin, c_start.ravel()])
    end = np.concatenate([r_end, c_end.ravel()])
    n = len(start)
    table = SpanTable(
        strings=st.strings,
        start=start.astype(_I),
        end=end.astype(_I),
        tid=np.concatenate([tid, np.repeat(tid, k)]),
        name=np.concatenate([np.full(n_threads, names[0]), names[1 + np.arange(n_threads * k) % 3]]).astype(np.int32),
        cat=np.full(n, st.code("python"), dtype=np.int32),
        role=np.zeros(n, dtype=np.int8),
        inv=np.full(n, -1, dtype=_I),
        op_type=np.full(n, -1, dtype=np.int32),
        backward=np.full(n, -1, dtype=np.int8),
    )
    threads = [ThreadInfo(int(t), f"worker-{int(t)}") for t in tid]
    return Trace(threads=threads, spans=table.sorted_by_start(), metadata={"producer": "opprof.synthetic"})


def repeated_trace(trace: TraceData, times: int) -> Trace:
    """``trace`` run ``times`` times back to back: a profile of any size with real engine edges.

    Each copy is shifted in time past the one before, and its op, var and invocation ids past the
    previous copy's, so the copies do not depend on each other: the analyses of the whole are the
    analyses of each copy (a test checks it), and the critical path runs through every copy.
    """
    if times < 1:
        raise ValueError(f"times must be at least 1, got {times}")
    t, ops = trace.table, trace.ops
    if not len(t):
        return Trace.of(trace)
    span = int(t.end.max()) - int(t.start.min()) + 1
    if ops is not None and len(ops):
        span = max(span, int(t.end.max()) - int(ops.push[ops.push >= 0].min()) + 1)
    inv_step = int(t.inv.max()) + 1 if np.any(t.inv >= 0) else 0
    is_wait = ops.op >= WAIT_ID_BASE if ops is not None else np.zeros(0, bool)
    op_step = int(ops.op[~is_wait].max()) + 1 if ops is not None and np.any(~is_wait) else 0
    wait_step = int(ops.op[is_wait].max()) - WAIT_ID_BASE + 1 if ops is not None and np.any(is_wait) else 0
    var_step = int(ops.acc_var.max()) + 1 if ops is not None and len(ops.acc_var) else 0
    var_step = max(var_step, int(ops.var.max()) + 1) if ops is not None and len(ops) else var_step

    def shift_ops(ids: np.ndarray, k: int) -> np.ndarray:
        return np.where(ids < 0, ids, np.where(ids >= WAIT_ID_BASE, ids + k * wait_step, ids + k * op_step))

    tables, flows, op_tables = [], [], []
    f = trace.flow_table
    for k in range(times):
        c = t.take(np.arange(len(t)))
        c.start, c.end = t.start + k * span, t.end + k * span
        c.inv = np.where(t.inv >= 0, t.inv + k * inv_step, -1)
        c.op = shift_ops(t.op, k)
        tables.append(c)
        g = f.take(np.arange(len(f)))
        g.src_ts, g.dst_ts, g.id = f.src_ts + k * span, f.dst_ts + k * span, f.id + k * (int(f.id.max()) + 1 if len(f) else 0)
        flows.append(g)
        if ops is not None:
            op_tables.append(
                dataclasses.replace(
                    ops,
                    op=shift_ops(ops.op, k),
                    by=shift_ops(ops.by, k),
                    push=np.where(ops.push >= 0, ops.push + k * span, -1),
                    ready=np.where(ops.ready >= 0, ops.ready + k * span, -1),
                    var=np.where(ops.var >= 0, ops.var + k * var_step, -1),
                    acc_var=ops.acc_var + k * var_step,
                )
            )
    out = Trace(
        trace.threads,
        SpanTable.concat(tables),
        trace.instants,
        trace.counters,
        _concat_flows(flows),
        dict(trace.metadata),
        processes=dict(trace.processes),
    )
    if op_tables:
        out.ops = OpTable.concat(op_tables)
    ts = trace.thread_states
    if ts is not None:  # each copy's, clipped to its own stretch of time
        lo = int(t.start.min())
        if ops is not None and np.any(ops.push >= 0):
            lo = min(lo, int(ops.push[ops.push >= 0].min()))
        a, b = np.maximum(ts.start, lo), np.minimum(ts.end, lo + span)
        keep = b > a
        out.thread_states = ThreadStates(
            np.tile(ts.tid[keep], times),
            np.tile(ts.state[keep], times),
            np.concatenate([a[keep] + k * span for k in range(times)]),
            np.concatenate([b[keep] + k * span for k in range(times)]),
            np.tile(ts.holder[keep], times),
            ts.period_ns,
        )
    return out


def _concat_flows(tables: list[FlowTable]) -> FlowTable:
    cols = [
        np.concatenate([getattr(g, k) for g in tables]) for k in ("id", "name", "cat", "src_tid", "src_ts", "dst_tid", "dst_ts")
    ]
    return FlowTable(tables[0].strings, *cols)
