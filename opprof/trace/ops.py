"""The engine's side of a trace: every op's push, ready time, enabling edge and vars, as columns.

A span says when an op ran; this table says why it ran *then*. The profiler records, for each
engine op, when it was pushed and by which thread, when its last dependency cleared (*ready*),
which earlier op's completion cleared it (the **enabling edge**: that op and the var it released)
and every var it read or wrote; for each wait, the op whose completion ended it. The analyses of
:mod:`.causes`, :mod:`.critical` and :mod:`.whatif` read nothing else about the engine.

Rows are keyed by ``op``, the engine's push order (``Opr.seq``), and a span names its op in
:attr:`~.columns.SpanTable.op`. A wait is no engine op: it gets an id from :data:`WAIT_ID_BASE`
up. A custom op's own engine op is the row of its *parent* span (kind :attr:`OpKind.CUSTOM`): it
completes when its ``Dummy_Wait`` runs, and ops reading its outputs name it as their enabler.

Traces from other tools have no such table (``TraceData.ops`` is None): the analyses then say that
what they report is an approximation.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

import numpy as np

__all__ = ["WAIT_ID_BASE", "OpKind", "OpTable", "op_order", "short_site"]

#: Ids of waits start here, far above any engine's push count, so both share the ``op`` column.
WAIT_ID_BASE = 1 << 48
_I64 = np.int64


def op_order(op: np.ndarray) -> np.ndarray | None:
    """The order that puts ``op`` ascending (stable); None where it is strictly ascending already."""
    if not len(op) or bool(np.all(op[1:] > op[:-1])):
        return None
    return np.argsort(op, kind="stable")


class OpKind(enum.IntEnum):
    """What a row is: a plain or sub-op, a custom op's own engine op, its ``Dummy_Wait``, a wait."""

    OP = 0
    CUSTOM = 1
    DUMMY = 2
    WAIT = 3


@dataclass(eq=False)
class OpTable:
    """One row per recorded engine op or wait, ascending by ``op`` (see the module docstring).

    Times are ns on the trace's clock; -1 is "not known" throughout (``by`` -1: ready when pushed,
    or a wait that did not have to block). The vars an op touched are ``acc_var[acc_at[i]:acc_at[i+1]]``
    (``acc_write`` says which it wrote), in the order the op declared them.
    """

    op: np.ndarray  # int64 id: the engine's push order, or WAIT_ID_BASE + k for a wait
    kind: np.ndarray  # int8 OpKind
    push: np.ndarray  # int64 ns
    pusher: np.ndarray  # int64 tid of the pushing (or waiting) thread, 0 unknown
    ready: np.ndarray  # int64 ns: its last dependency cleared (a wait: when it ended)
    by: np.ndarray  # int64 op id of the enabling op, -1 none
    var: np.ndarray  # int64 id of the var that edge released (a wait: the var waited on), -1 none
    site: np.ndarray  # int32 code into ``strings``: the user's "file:line" of the push, -1 none
    acc_at: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=_I64))  # n + 1 offsets
    acc_var: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=_I64))
    acc_write: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    strings: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.op)

    def rows_of(self, ids: np.ndarray) -> np.ndarray:
        """The row of each op id (-1 where the table has none)."""
        ids = np.asarray(ids, dtype=_I64)
        if not len(self.op):
            return np.full(len(ids), -1, dtype=_I64)
        at = np.minimum(np.searchsorted(self.op, ids), len(self.op) - 1)
        return np.where(self.op[at] == ids, at, -1)

    def take(self, order: np.ndarray) -> OpTable:
        """The rows at ``order`` (in that order), each with its accesses."""
        order = np.asarray(order, dtype=_I64)
        counts = np.diff(self.acc_at)[order]
        starts = self.acc_at[:-1][order]
        new_at = np.concatenate([[0], np.cumsum(counts)]).astype(_I64)
        pos = np.repeat(starts - new_at[:-1], counts) + np.arange(int(counts.sum()))
        return OpTable(
            op=self.op[order],
            kind=self.kind[order],
            push=self.push[order],
            pusher=self.pusher[order],
            ready=self.ready[order],
            by=self.by[order],
            var=self.var[order],
            site=self.site[order],
            acc_at=new_at,
            acc_var=self.acc_var[pos],
            acc_write=self.acc_write[pos],
            strings=self.strings,
        )

    @classmethod
    def concat(cls, tables: list[OpTable]) -> OpTable:
        """The rows of ``tables`` (sharing one string table) as one table, ascending by op."""
        n = np.cumsum([0] + [len(o.acc_var) for o in tables])
        cols = {
            k: np.concatenate([getattr(o, k) for o in tables])
            for k in ("op", "kind", "push", "pusher", "ready", "by", "var", "site")
        }
        merged = cls(
            **cols,
            acc_at=np.concatenate([[0]] + [o.acc_at[1:] + n[i] for i, o in enumerate(tables)]).astype(_I64),
            acc_var=np.concatenate([o.acc_var for o in tables]),
            acc_write=np.concatenate([o.acc_write for o in tables]),
            strings=tables[0].strings,
        )
        return merged.sorted_by_op()

    def sorted_by_op(self) -> OpTable:
        """The table ascending by ``op`` (itself when it is already)."""
        order = op_order(self.op)
        return self if order is None else self.take(order)

    def site_of(self, row: int) -> str | None:
        c = int(self.site[row])
        return None if c < 0 else self.strings[c]

    def check(self) -> list[str]:
        """What is inconsistent in the table itself (for readers of files and :func:`~.validate.validate`)."""
        n = len(self.op)
        problems: list[str] = []
        for name in ("kind", "push", "pusher", "ready", "by", "var", "site"):
            if len(getattr(self, name)) != n:
                problems.append(f"ops.{name} has {len(getattr(self, name))} entries for {n} ops")
        if problems:
            return problems
        if n and np.any(self.op[1:] <= self.op[:-1]):
            problems.append("ops.op is not strictly ascending")
        if len(self.acc_at) != n + 1 or (n + 1 and (self.acc_at[0] != 0 or np.any(np.diff(self.acc_at) < 0))):
            problems.append("ops.acc_at is not n + 1 ascending offsets from 0")
        elif int(self.acc_at[-1]) != len(self.acc_var) or len(self.acc_var) != len(self.acc_write):
            problems.append("ops.acc_var / acc_write do not match the offsets in ops.acc_at")
        if n and (self.kind.min() < 0 or self.kind.max() > max(OpKind)):
            problems.append("ops.kind holds an unknown kind")
        if n and (self.site.min() < -1 or self.site.max() >= len(self.strings)):
            problems.append("ops.site refers to strings outside its table")
        known = (self.push >= 0) & (self.ready >= 0) & (self.kind != OpKind.WAIT)
        if np.any(self.ready[known] < self.push[known]):
            k = int(np.flatnonzero(known & (self.ready < self.push))[0])
            problems.append(f"op {int(self.op[k])} is ready at {int(self.ready[k])} ns, before its push at {int(self.push[k])}")
        return problems


def short_site(site: str) -> str:
    """``model.py:42``: a user's line (a site of :attr:`OpTable.strings`) by its file's name, the
    path's last part, whichever separator the path was written with."""
    path, sep, line = site.rpartition(":")
    base = re.split(r"[\\/]", path if sep else site)[-1]
    return f"{base}{sep}{line if sep else ''}"
