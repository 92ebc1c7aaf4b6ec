"""The custom-op invocations summed per op type: the one home of the per-op-type sums.

The split table, the why-text, ``mx.profiler.dumps()``, the widget's split bars and compare all
read :class:`OpTypeSummary`: calls, errors, wall, python (on and off a CPU), sub-ops, waiting by
cause and the ops that held each type up. Forward and backward are apart (``MyOp`` and
``_backward_MyOp``); types come largest wall time first, ties in the order they first ran.

The on/off-CPU rule has its home here too (:func:`python_cpu_parts`): an invocation's Python was on
a CPU for its thread's CPU time, at most its Python wall time (the two clocks tick apart by a few
µs), and off a CPU for the rest; where the trace has no CPU time for it, it is "not measured".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..columns import SpanTable
from ..records import CustomOpRow
from .causes import Causes, op_names

__all__ = ["OpTypeSplit", "OpTypeSummary", "custom_op_summary", "op_type_summary", "python_cpu_parts"]


@dataclass(frozen=True, slots=True)
class OpTypeSplit:
    """Where the wall time of one custom-op type (forward or backward) went, over all its calls."""

    name: str
    calls: int
    wall_ns: int
    python_ns: int
    subops_ns: int
    waiting_ns: int
    errors: int
    #: The waiting by cause, summed (ns), summing to ``waiting_ns``.
    waiting_by_cause: dict[str, int] = field(default_factory=dict)
    #: The Pythons' time on a CPU summed (ns; :func:`python_cpu_parts`), None when not measured.
    python_cpu_ns: int | None = None
    #: (blocking op's name, ns of dependency waiting) summed by name, most first.
    blockers: list[tuple[str, int]] = field(default_factory=list)

    @property
    def python_off_cpu_ns(self) -> int | None:
        """Python wall time not on a CPU (GIL, sleep or I/O), None when not measured."""
        return None if self.python_cpu_ns is None else self.python_ns - self.python_cpu_ns


def python_cpu_parts(python_ns: np.ndarray, cpu_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(on CPU, off CPU, CPU not measured) ns of each invocation's Python; ``cpu_ns`` < 0 is not
    measured. The three sum to ``python_ns``."""
    py = np.asarray(python_ns, dtype=np.int64)
    cpu = np.asarray(cpu_ns, dtype=np.int64)
    known = cpu >= 0
    on = np.where(known, np.minimum(cpu, py), 0)
    return on, np.where(known, py - on, 0), np.where(known, 0, py)


@dataclass(eq=False)
class OpTypeSummary:
    """Per op type (see the module docstring), as columns: entry ``k`` is ``names[k]``."""

    names: list[str]
    calls: np.ndarray
    errors: np.ndarray
    wall: np.ndarray  # ns: python + sub-ops + waiting
    python: np.ndarray
    subops: np.ndarray
    waiting: np.ndarray
    py_on_cpu: np.ndarray
    py_off_cpu: np.ndarray
    py_cpu_unknown: np.ndarray
    causes: tuple[str, ...]  # the keys of ``by_cause``'s columns
    by_cause: np.ndarray  # (types, len(causes)) ns
    blockers: list[list[tuple[str, int]]]  # per type: (blocking op's name, ns) summed by name, most first
    cpu_measured: np.ndarray  # per type: whether every call's CPU time was measured

    def __len__(self) -> int:
        return len(self.names)

    def index(self, name: str) -> int:
        return self.names.index(name)

    def parts(self) -> dict[str, np.ndarray]:
        """Every type's wall time in parts that sum to it (ns): Python on and off a CPU and not
        measured, ``"sub-ops"`` and each cause of waiting, in stacking order."""
        return {
            "py_on_cpu": self.py_on_cpu,
            "py_off_cpu": self.py_off_cpu,
            "py_cpu_unknown": self.py_cpu_unknown,
            "sub-ops": self.subops,
            **{key: self.by_cause[:, c] for c, key in enumerate(self.causes)},
        }

    def of(self, name: str) -> dict[str, int]:
        """One type's :meth:`parts` (ns) and its ``calls``."""
        k = self.index(name)
        return {"calls": int(self.calls[k]), **{p: int(v[k]) for p, v in self.parts().items()}}

    def rows(self) -> list[OpTypeSplit]:
        """The summary as :class:`OpTypeSplit` rows (the records the text renderers read)."""
        out = []
        for k, name in enumerate(self.names):
            out.append(
                OpTypeSplit(
                    name,
                    int(self.calls[k]),
                    int(self.wall[k]),
                    int(self.python[k]),
                    int(self.subops[k]),
                    int(self.waiting[k]),
                    int(self.errors[k]),
                    {key: int(v) for key, v in zip(self.causes, self.by_cause[k].tolist(), strict=True)},
                    int(self.py_on_cpu[k]) if self.cpu_measured[k] else None,
                    list(self.blockers[k]),
                )
            )
        return out


def _summarize(
    names: Sequence[str],
    order_key: np.ndarray,
    wall: np.ndarray,
    split: np.ndarray,
    errors: np.ndarray,
    cpu: np.ndarray,
    causes: tuple[str, ...],
    by_cause: np.ndarray,
    blockers: Iterable[tuple[int, str, int]],
) -> OpTypeSummary:
    """Sum invocation rows per name. ``order_key``: each row's position in run order (ties of
    wall time keep the type that ran first); ``blockers``: (row, blocking op's name, ns)."""
    n = len(names)
    if not n:
        z = np.zeros(0, dtype=np.int64)
        return OpTypeSummary([], z, z, z, z, z, z, z, z, z, causes, np.zeros((0, len(causes)), np.int64), [], z.astype(bool))
    used, group = np.unique(np.asarray(names, dtype=object), return_inverse=True)
    group = group.ravel()
    m = len(used)

    def total(values: np.ndarray) -> np.ndarray:
        # Exact: float64 holds integers below 2**53 (104 days in ns).
        return np.rint(np.bincount(group, weights=values, minlength=m)[:m]).astype(np.int64)

    py, sub, wait = split[:, 0], split[:, 1], split[:, 2]
    on, off, unknown = python_cpu_parts(py, cpu)
    calls = np.bincount(group, minlength=m)[:m]
    all_known = np.bincount(group, weights=(cpu >= 0), minlength=m)[:m] == calls
    cols = {
        "errors": np.bincount(group, weights=errors, minlength=m)[:m].astype(np.int64),
        "python": total(py),
        "subops": total(sub),
        "waiting": total(wait),
        "py_on_cpu": total(on),
        "py_off_cpu": total(off),
        "py_cpu_unknown": total(unknown),
    }
    bc = np.stack([total(by_cause[:, c]) for c in range(len(causes))], axis=1) if causes else np.zeros((m, 0), np.int64)
    wall = total(wall)
    acc: list[dict[str, int]] = [{} for _ in range(m)]
    for row, name, ns in blockers:
        d = acc[group[row]]
        d[name] = d.get(name, 0) + ns
    ran_first = np.full(m, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(ran_first, group, order_key)
    order = np.lexsort((ran_first, -wall))
    return OpTypeSummary(
        [str(used[k]) for k in order.tolist()],
        calls[order],
        cols["errors"][order],
        wall[order],
        cols["python"][order],
        cols["subops"][order],
        cols["waiting"][order],
        cols["py_on_cpu"][order],
        cols["py_off_cpu"][order],
        cols["py_cpu_unknown"][order],
        causes,
        bc[order],
        [sorted(acc[k].items(), key=lambda kv: -kv[1]) for k in order.tolist()],
        all_known[order],
    )


def op_type_summary(t: SpanTable, parents: np.ndarray, split: np.ndarray, c: Causes) -> OpTypeSummary:
    """The summary of one trace's invocations (``parents`` and their ``split``, :func:`~.split.family_splits`;
    their causes ``c``), from columns (no loop per call)."""
    if not len(parents):
        z = np.zeros(0, np.int64)
        return _summarize([], z, z, np.zeros((0, 3), np.int64), np.zeros(0), np.zeros(0), c.keys, c.ns, ())
    names = t.str_list(t.name[parents])
    errors = np.zeros(len(parents))
    if len(t.args_at):
        errors = np.array([t.error_of(i) is not None for i in parents.tolist()], dtype=float)
    # Run order: start time, then invocation id (as custom_ops() orders its rows).
    run_order = np.lexsort((t.inv[parents], t.start[parents]))
    order_key = np.empty(len(parents), dtype=np.int64)
    order_key[run_order] = np.arange(len(parents))
    wall = t.end[parents] - t.start[parents]
    return _summarize(names, order_key, wall, split, errors, c.cpu, c.keys, c.ns, _blockers(t, c))


def _blockers(t: SpanTable, c: Causes) -> Iterable[tuple[int, str, int]]:
    """(invocation row, blocking op's name, ns) of the three longest blockers of each invocation,
    as :meth:`~.causes.Causes.all_blockers` picks them; summed per (row, name) first, in NumPy
    (one Python tuple per distinct pair, not per blocker: 2.8 s -> 0.1 s at 1M spans)."""
    pick = c.top_blockers()
    if not len(pick):
        return []
    names, _ = op_names(t, c.blocked_op[pick])
    name_codes, code = np.unique(np.asarray(names, dtype=object), return_inverse=True)
    pair = c.blocked_fam[pick].astype(np.int64) * len(name_codes) + code.ravel()
    used, group = np.unique(pair, return_inverse=True)
    ns = np.bincount(group.ravel(), weights=c.blocked_ns[pick], minlength=len(used))
    rows, codes = np.divmod(used, len(name_codes))
    return [(r, str(name_codes[k]), round(v)) for r, k, v in zip(rows.tolist(), codes.tolist(), ns.tolist(), strict=True)]


def custom_op_summary(rows: Iterable[CustomOpRow]) -> list[OpTypeSplit]:
    """Any invocation rows summed per op type, largest wall first (several runs' rows at once, or
    rows a user picked); a trace's own summary is :attr:`~.per_trace.Analysis.op_types`."""
    rows = list(rows)
    if not rows:
        return []
    keys = tuple(dict.fromkeys(k for r in rows for k in r.waiting_by_cause))
    split = np.array([(r.python_ns, r.subops_ns, r.waiting_ns) for r in rows], dtype=np.int64).reshape(-1, 3)
    by_cause = np.array([[r.waiting_by_cause.get(k, 0) for k in keys] for r in rows], dtype=np.int64).reshape(
        len(rows), len(keys)
    )
    cpu = np.array([-1 if r.python_cpu_ns is None else r.python_cpu_ns for r in rows], dtype=np.int64)
    errors = np.array([r.error is not None for r in rows], dtype=float)
    blockers = [(k, b.name, b.ns) for k, r in enumerate(rows) for b in r.blockers]
    wall = np.array([r.wall_ns for r in rows], dtype=np.int64)
    return _summarize([r.name for r in rows], np.arange(len(rows)), wall, split, errors, cpu, keys, by_cause, blockers).rows()
