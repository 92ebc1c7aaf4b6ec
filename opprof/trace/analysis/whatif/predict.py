"""The model's run as a trace like a profile's (see :mod:`opprof.trace.analysis.whatif`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...columns import ROLE_CODE, FlowTable, SpanTable
from ...data import TraceData
from ...ops import OpKind, OpTable
from ...records import BACKPRESSURE, CUSTOM_POOL, ENGINE_CATEGORY, ENGINE_POOL, Role, Span, ThreadInfo
from ...threadstates import GIL_METADATA, ThreadStates
from .gil import EXACT_PERIOD_NS
from .model import CUSTOM_THREAD_KEY, EXTERNAL, OUTSIDE_KEY, Replay
from .prepare import POOL_PREFIXES, Recording

__all__ = ["model_trace"]

_SUBOP = ROLE_CODE[Role.SUBOP]
_WAIT = int(OpKind.WAIT)
_I64 = np.int64


def model_trace(trace: TraceData, rec: Recording, sim: Replay, engine_threads: int) -> tuple[TraceData, int]:
    """The model's run as a trace like a profile's (and how many recorded spans it has no place for;
    the engine's holds it re-derives are not among them).

    Spans keep their recorded names and family fields; program threads keep their tids and names,
    engine workers and custom-op threads get new ones after them. Stored splits are dropped (the
    times changed): the split is computed from the family's spans.
    """
    t = trace.table
    o = trace.ops
    assert o is not None
    t0 = rec.t0
    base = max([0, *(p.tid for p in rec.programs), *(o[0] for o in rec.outside)]) + 1  # new tids after every kept one
    c_base = base + engine_threads

    def tid_of(code: int) -> int:
        """The predicted trace's tid of a pusher: a program's own, or a custom-op thread's new one."""
        return code if code >= 0 else c_base + (-1 - code)

    idx: list[int] = []  # the recorded span each predicted one copies
    row: list[int] = []  # and its row in the engine table
    start: list[int] = []
    end: list[int] = []
    tid: list[int] = []
    for r, s in enumerate(rec.span):
        if s < 0 or sim.end[r] < 0:
            continue
        row.append(r)
        if rec.kind[r] == _WAIT:
            idx.append(s)
            start.append(sim.pushed[r])
            tid.append(tid_of(sim.pusher[r]))
        else:
            idx.append(s)
            start.append(sim.start[r])
            tid.append(base + sim.worker[r])
        end.append(sim.end[r])
    py_cpu: list[int] = []
    n_ops = len(idx)
    for f, fam in enumerate(rec.families):
        if sim.py_start[f] >= 0 and sim.py_end[f] >= 0:
            idx.append(fam.python)
            start.append(sim.py_start[f])
            end.append(sim.py_end[f])
            tid.append(c_base + sim.py_thread[f])
            c = int(t.cpu[fam.python])
            py_cpu.append(round(c / sim.py_factor[f]) if c >= 0 else -1)
    take = np.array(idx, dtype=_I64)
    sub = t.take(take)
    cpu = np.full(len(idx), -1, dtype=_I64)
    cpu[n_ops:] = py_cpu
    spans = replace(
        sub,
        strings=list(t.strings),
        start=np.array(start, dtype=_I64) + t0,
        end=np.array(end, dtype=_I64) + t0,
        tid=np.array(tid, dtype=_I64),
        split_at=np.zeros(0, dtype=_I64),
        split_ns=np.zeros((0, 3), dtype=_I64),
        cpu=cpu,
    )
    if sim.holds:
        # The pushes the model's engine held back, as the profiler records them: a replay of the
        # prediction takes them out of the program's own time again, and its critical path names them.
        held = [Span(BACKPRESSURE, ENGINE_CATEGORY, p_tid, a + t0, b + t0) for p_tid, a, b in sim.holds]
        spans = SpanTable.concat([spans, SpanTable.from_spans(held)])
    # Flows: from each sub-op's push in its Python to its start, as the profiler draws them.
    f_names: list[str] = []
    f_ids: list[int] = []
    f_src_tid: list[int] = []
    f_src: list[int] = []
    f_dst_tid: list[int] = []
    f_dst: list[int] = []
    roles = t.role.tolist()
    for k, (s, r) in enumerate(zip(idx[:n_ops], row, strict=True)):
        if roles[s] != _SUBOP or sim.pusher[r] >= 0:
            continue
        f_ids.append(len(f_ids) + 1)
        f_names.append(t.strings[t.name[s]])
        f_src_tid.append(tid_of(sim.pusher[r]))
        f_src.append(min(sim.pushed[r], start[k]) + t0)
        f_dst_tid.append(tid[k])
        f_dst.append(start[k] + t0)
    flows = FlowTable.from_rows(f_ids, f_names, ["push"] * len(f_ids), f_src_tid, f_src, f_dst_tid, f_dst)
    ran = [p >= 0 for p in sim.pushed]
    ids = o.op.tolist()
    table = OpTable(
        op=o.op.copy(),
        kind=o.kind.copy(),
        push=np.array([p + t0 if k else -1 for p, k in zip(sim.pushed, ran, strict=True)], dtype=_I64),
        pusher=np.array([tid_of(p) if k else 0 for p, k in zip(sim.pusher, ran, strict=True)], dtype=_I64),
        ready=np.array([x + t0 if x >= 0 else -1 for x in sim.ready], dtype=_I64),
        by=np.array(
            [-1 if b == -1 else e if b == EXTERNAL else ids[b] for b, e in zip(sim.by, o.by.tolist(), strict=True)], dtype=_I64
        ),
        var=np.array([e if b == EXTERNAL else v for b, v, e in zip(sim.by, sim.by_var, o.var.tolist(), strict=True)], dtype=_I64),
        site=o.site.copy(),
        acc_at=o.acc_at.copy(),
        acc_var=o.acc_var.copy(),
        acc_write=o.acc_write.copy(),
        strings=list(o.strings),
    )
    # Program threads; a pool thread's leftover pushes (a custom op from before the profile) only
    # when they own a span, so its name is not shown twice beside the model's own pool threads.
    with_spans = set(tid)
    pool = POOL_PREFIXES
    tids = sorted({p.tid for p in rec.programs if p.tid in with_spans or not trace.thread_name(p.tid).startswith(pool)})
    # Each program thread stays in its process; the model's pools join the recorded threads' one
    # process (pid 0 when they came from several: the model replays one engine).
    pid_of = {th.tid: th.pid for th in trace.threads}
    home = {pid_of.get(p, 0) for p in tids}
    pool_pid = home.pop() if len(home) == 1 else 0
    threads = [ThreadInfo(p, trace.thread_name(p), pid_of.get(p, 0)) for p in tids]
    threads += [ThreadInfo(base + w, f"{ENGINE_POOL.thread_prefix}{w}", pool_pid) for w in range(engine_threads)]
    threads += [ThreadInfo(c_base + th, f"{CUSTOM_POOL.thread_prefix}{th}", pool_pid) for th in range(sim.threads)]
    # Threads outside the engine keep their tids and names: their GIL stretches are in the states below.
    threads += [ThreadInfo(o_tid, trace.thread_name(o_tid), pid_of.get(o_tid, pool_pid)) for o_tid, *_ in rec.outside]
    states = None
    if sim.gil is not None and sim.gil_log:
        # The model's own GIL states, exact: a replay of the predicted trace reads them as recorded.
        def tid_of_key(key: int) -> int:
            if key <= OUTSIDE_KEY:
                return rec.outside[OUTSIDE_KEY - key][0]
            if key <= CUSTOM_THREAD_KEY:
                return c_base + (CUSTOM_THREAD_KEY - key)
            if key < 0:
                return base + (-1 - key)
            a = sim.actors[key]
            return a.thread if a.fam < 0 else c_base + a.thread

        log = sim.gil_log
        states = ThreadStates(
            np.array([tid_of_key(k) for k, _, _, _ in log], dtype=_I64),
            np.array([s for _, s, _, _ in log], dtype=np.int8),
            np.array([a for _, _, a, _ in log], dtype=_I64) + t0,
            np.array([b for _, _, _, b in log], dtype=_I64) + t0,
            np.full(len(log), -1, dtype=_I64),
            EXACT_PERIOD_NS,
        )
    metadata = dict(trace.metadata)
    if sim.gil is not None:
        metadata[GIL_METADATA] = {
            "source": "opprof what_if (the model's GIL)",
            "period_ns": EXACT_PERIOD_NS,
            "transfer_ns": rec.gil_transfer_ns,  # so that the prediction replays as itself
            "asleep_transfer_ns": rec.gil_asleep_transfer_ns,
            "hop_held_ns": dict(rec.hop_held),
            "tail_held_ns": rec.tail_held,
            "hand_offs_hold_gil": sim.hop_gil,
        }
    else:
        metadata[GIL_METADATA] = {"why_not": "a what-if prediction without the GIL (gil=False)"}
    out = TraceData(
        threads=threads,
        spans=spans.sorted_by_start(),
        flows=flows,
        metadata=metadata,
        ops=table,
        processes=dict(trace.processes),
        thread_states=states,
    )
    # The recorded holds are not copied: the prediction has its own (above).
    return out, len(t) - len(idx) - len(t.held_back()[0])
