"""Synthetic traces of any size, shaped like the profiler's, for benchmarks and tests.

Profiling a real workload long enough to record a million spans takes minutes; the timeline's
speed goals (1M spans) and its level-of-detail tests need such traces in a second or two. The
shape copies what the profiler records: a main thread with one ``step`` span per iteration, regular
ops on engine threads, and custom-op invocations whose ``parent`` holds a python span (sometimes
with a wait inside) on a custom-op thread, sub-ops on an engine thread and a ``Dummy_Wait`` ending
with the parent, linked by flows from the push to each sub-op. Every trace passes
:func:`opprof.trace.validate`.
"""

from __future__ import annotations

import numpy as np

from .model import Trace
from .records import CUSTOM_OP, OPERATOR, Flow, Role, Span, ThreadInfo
from .split import split_invocation

__all__ = ["synthetic_trace"]

_OPS = ("dot", "elemwise_add", "_plus_scalar", "relu", "sum", "broadcast_mul", "_copyto")
_CUSTOM = ("ScaledTanh", "RowSquaredError", "_backward_ScaledTanh")
_SUBOPS = ("_mul_scalar", "_plus_scalar", "elemwise_mul", "_copyto")


def synthetic_trace(n_spans: int, *, engine_threads: int = 4, custom_threads: int = 2, seed: int = 0) -> Trace:
    """A valid trace with about ``n_spans`` spans (11 per iteration: 1 step, 4 ops, 6 custom-op spans)."""
    rng = np.random.default_rng(seed)
    iters = max(1, n_spans // 11)
    threads = [ThreadInfo(1, "MainThread")]
    engine = list(range(2, 2 + engine_threads))
    custom = list(range(2 + engine_threads, 2 + engine_threads + custom_threads))
    threads += [ThreadInfo(t, f"opprof-engine-{i}") for i, t in enumerate(engine)]
    threads += [ThreadInfo(t, f"opprof-custom-{i}") for i, t in enumerate(custom)]
    # Durations in ns, drawn up front: one array call instead of millions of scalar draws.
    op_dur = rng.integers(2_000, 30_000, size=(iters, 4)).tolist()
    py_dur = rng.integers(10_000, 60_000, size=iters).tolist()
    sub_dur = rng.integers(2_000, 12_000, size=(iters, 3)).tolist()
    with_wait = (rng.random(iters) < 0.3).tolist()
    cursor = {t: 0 for t in engine + custom}
    spans: list[Span] = []
    flows: list[Flow] = []
    add = spans.append
    t = 1_000_000
    for i in range(iters):
        step_start = t
        for k in range(4):
            tid = engine[(i + k) % engine_threads]
            s = max(cursor[tid], t) + 500
            e = s + op_dur[i][k]
            add(Span(_OPS[(i + k) % len(_OPS)], OPERATOR, tid, s, e))
            cursor[tid] = e
        op_type = _CUSTOM[i % len(_CUSTOM)]
        inv = i + 1
        base = {"op_type": op_type, "invocation": inv, "backward": op_type.startswith("_backward")}
        ctid = custom[i % custom_threads]
        p_start = t + 1_000
        py_s = max(cursor[ctid], p_start + 2_000)
        py_e = py_s + py_dur[i]
        cursor[ctid] = py_e
        kids = [Span(f"{op_type}::pure_python", CUSTOM_OP, ctid, py_s, py_e, {**base, "role": Role.PYTHON})]
        if with_wait[i]:
            kids.append(Span(f"{op_type}::WaitForVar", CUSTOM_OP, ctid, py_s + 3_000, py_s + 6_000, {**base, "role": Role.WAIT}))
        etid = engine[(i + 1) % engine_threads]
        for j in range(3):
            push = py_s + (j + 1) * (py_e - py_s) // 4
            s = max(cursor[etid], push + 1_000)
            e = s + sub_dur[i][j]
            name = f"{op_type}::{_SUBOPS[(i + j) % len(_SUBOPS)]}"
            kids.append(Span(name, CUSTOM_OP, etid, s, e, {**base, "role": Role.SUBOP}))
            flows.append(Flow(len(flows) + 1, name, "push", ctid, push, etid, s))
            cursor[etid] = e
        d_s = max(cursor[etid], py_e) + 500
        d_e = d_s + 1_500
        cursor[etid] = d_e
        kids.append(Span(f"{op_type}::Dummy_Wait", CUSTOM_OP, etid, d_s, d_e, {**base, "role": Role.DUMMY_WAIT}))
        parent = Span(op_type, CUSTOM_OP, engine[i % engine_threads], p_start, d_e, base)
        py, sub, wait = split_invocation(parent, kids)  # stored on the parent, as the profiler does
        base.update(role=Role.PARENT, python_us=py / 1e3, subops_us=sub / 1e3, waiting_us=wait / 1e3)
        add(parent)
        spans.extend(kids)
        t = max(t + 40_000, min(cursor.values()))
        add(Span(f"step {i}", "python", 1, step_start, t))
    return Trace(threads=threads, spans=spans, flows=flows, metadata={"producer": "opprof.synthetic"})
