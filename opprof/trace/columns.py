"""Spans and flows as NumPy columns: how a trace is held, whatever made it.

A span costs 46 bytes here (start, end, thread, name, category, role, invocation, op type,
backward) against ~450 as a :class:`~.records.Span` with its own ``args`` dict, so ten million
spans fit in half a gigabyte, and every analysis is a handful of array operations instead of a
Python loop per span.

What a span's ``args`` say about its custom-op family (``role``, ``invocation``, ``op_type``,
``backward`` and the parent's stored split) are columns; whatever else a span carries (an error, an
imported trace's own args) is kept *sparse*: ``args_at`` lists the spans that have any, ``args``
holds them, so a profile of a million spans keeps a handful of dicts. :meth:`SpanTable.args_of`
puts both back together as the dict a :class:`~.records.Span` shows.

Strings (names, categories, op types) are codes into one table per :class:`SpanTable`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter, is_, is_not
from typing import Any

import numpy as np

from .records import BACKPRESSURE, GC_CATEGORY, SPLIT_ARGS, Flow, Role, Span

__all__ = [
    "NO_ROLE",
    "OTHER_ROLE",
    "ROLE_CODE",
    "ROLES",
    "FlowTable",
    "SpanTable",
    "StringTable",
]

#: Role of each code in the ``role`` column: 0 is no role (a span outside any custom op), then each
#: :class:`Role` in its declared order, then "some other value" (kept verbatim in the sparse args).
ROLES: tuple[Role | None, ...] = (None, *Role, None)
ROLE_CODE: dict[Role, int] = {r: i for i, r in enumerate(Role, start=1)}
NO_ROLE = 0
OTHER_ROLE = len(ROLES) - 1
#: What the views colour a garbage collection's span by (category :data:`~.records.GC_CATEGORY`):
#: a code past the roles' (not a :class:`Role`: a collection belongs to no invocation). A span
#: outside the engine's ops is no "regular op", and a 30 ms collection drawn as one read as an op.
#: Not stored in the ``role`` column (where this number means some other role, kept verbatim).
COLLECTION_ROLE = len(Role) + 1
_ROLE_OF_VALUE: dict[Any, int] = {**ROLE_CODE, **{r.value: c for r, c in ROLE_CODE.items()}}
_I64 = np.int64
_EMPTY_I64 = np.zeros(0, dtype=_I64)


class StringTable:
    """Distinct strings in first-seen order, and each one's code (a dict lookup beats sorting strings)."""

    __slots__ = ("index", "strings")

    def __init__(self, strings: Iterable[str] = ()) -> None:
        self.strings: list[str] = list(strings)
        self.index: dict[str, int] = {s: i for i, s in enumerate(self.strings)}

    def code(self, s: str) -> int:
        c = self.index.get(s)
        if c is None:
            c = self.index[s] = len(self.strings)
            self.strings.append(s)
        return c

    def codes(self, values: Sequence[str]) -> np.ndarray:
        """Codes of ``values`` (added as needed), as int32: the loop runs in C (``map`` over dict methods)."""
        index = self.index
        for s in dict.fromkeys(values):
            if s not in index:
                index[s] = len(self.strings)
                self.strings.append(s)
        return np.fromiter(map(index.__getitem__, values), dtype=np.int32, count=len(values))


def _family_fields(args: dict[str, Any]) -> tuple[int, int, str | None, int, tuple[int, int, int] | None, dict[str, Any] | None]:
    """A span's args as (role code, invocation, op type, backward, stored split in ns, the rest).

    Only values the columns hold exactly leave the dict: an unknown role word, an invocation
    that is not an int, a split in µs that is not a whole number of ns stay among the rest, so
    :meth:`SpanTable.args_of` gives back an equal dict.
    """
    rest = dict(args)
    code = NO_ROLE
    if "role" in rest:
        role = rest["role"]
        known = _ROLE_OF_VALUE.get(role) if isinstance(role, str) else None  # a Role is a str
        if known is None:
            code = OTHER_ROLE  # the value stays among the rest, as it was
        else:
            code = known
            del rest["role"]
    inv = rest.get("invocation")
    if type(inv) is int and 0 <= inv < 2**62:
        del rest["invocation"]
    else:
        inv = -1
    op_type = rest.get("op_type")
    if type(op_type) is str:
        del rest["op_type"]
    else:
        op_type = None
    backward = rest.get("backward")
    if type(backward) is bool:
        del rest["backward"]
        bw = int(backward)
    else:
        bw = -1
    split = None
    if code == ROLE_CODE[Role.PARENT] and all(k in rest for k in SPLIT_ARGS):
        values = [rest[k] for k in SPLIT_ARGS]
        if all(type(v) in (int, float) for v in values):
            ns = tuple(round(v * 1e3) for v in values)
            if all(n / 1e3 == v for n, v in zip(ns, values, strict=True)):
                split = (ns[0], ns[1], ns[2])
                for k in SPLIT_ARGS:
                    del rest[k]
    return code, inv, op_type, bw, split, rest or None


def start_order(start: np.ndarray, end: np.ndarray) -> np.ndarray | None:
    """The order by (start, -end), stable; None when the columns are in that order already.

    A stable argsort of the starts alone (timsort: a trace's records come in long sorted runs, one
    per thread, so this is a few merges, ~5x faster than a two-key lexsort), then the few runs of
    equal starts put longer-first.
    """
    n = len(start)
    if n < 2:
        return None
    if bool(np.all(start[1:] >= start[:-1])):
        order = np.arange(n)
    else:
        order = np.argsort(start, kind="stable")
    s = start[order]
    tie = np.flatnonzero(s[1:] == s[:-1])
    if len(tie):
        e = end[order]
        bad = tie[e[tie + 1] > e[tie]]  # a longer span after a shorter one at the same start
        if len(bad):
            # Reorder only the spans sharing a start with some other span.
            shared = np.zeros(n, dtype=bool)
            shared[tie] = shared[tie + 1] = True
            pos = np.flatnonzero(shared)
            sub = pos[np.lexsort((-e[pos], s[pos]))]
            order[pos] = order[sub]
    if bool(np.all(order[1:] > order[:-1])):
        return None
    return order


class _Fast:
    """What :func:`_family_fast_path` read: which args it took, and their fields."""

    def __init__(self, ok: np.ndarray, role: np.ndarray, inv: np.ndarray, op: list[str], bw: np.ndarray) -> None:
        self.ok, self.role, self.inv, self.op, self.bw = ok, role, inv, op, bw
        self.split_at = _EMPTY_I64  # positions (among the args) of parents whose split was taken
        self.split_ns = np.zeros((0, 3), dtype=_I64)


def _merge_sparse(a_at: np.ndarray, a_val: np.ndarray, b_at: np.ndarray, b_val: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two sets of (span index, row) as one, by ascending span index."""
    at = np.concatenate([a_at, b_at])
    val = np.concatenate([a_val, b_val])
    order = np.argsort(at, kind="stable")
    return at[order], val[order]


def _is(values: list[Any], t: type) -> np.ndarray:
    return np.fromiter(map(is_, map(type, values), repeat(t)), dtype=bool, count=len(values))


def _family_fast_path(args: list[dict[str, Any]]) -> _Fast | None:
    """The args dicts that hold exactly a child's four family fields, or a parent's seven (with its
    split in µs of whole ns), with the right types, read with ``map`` in C (a profile's spans all
    are). None when the values cannot even be looked up (an unhashable role): the slow path decides.
    """
    k = len(args)
    if not k:
        return None
    try:
        roles = list(map(_ROLE_OF_VALUE.get, map(dict.get, args, repeat("role"))))
    except TypeError:
        return None
    invs = list(map(dict.get, args, repeat("invocation")))
    ops = list(map(dict.get, args, repeat("op_type")))
    bws = list(map(dict.get, args, repeat("backward")))
    size = np.fromiter(map(len, args), dtype=np.int64, count=k)
    ok = np.fromiter(map(is_not, roles, repeat(None)), dtype=bool, count=k)
    ok &= _is(invs, int) & _is(ops, str) & _is(bws, bool)
    # A parent: its split must be three numbers that are whole ns in µs, or it takes the slow path.
    parent = ok & (size == 7) & (np.array(roles, dtype=object) == ROLE_CODE[Role.PARENT])
    p_at = np.flatnonzero(parent)
    split = np.zeros((len(p_at), 3), dtype=_I64)
    if len(p_at):
        sub = [args[i] for i in p_at.tolist()]
        good = np.ones(len(p_at), dtype=bool)
        cols = []
        for key in SPLIT_ARGS:
            v = list(map(dict.get, sub, repeat(key)))
            good &= _is(v, float) | _is(v, int)
            cols.append(np.array([x if g else 0.0 for x, g in zip(v, good.tolist(), strict=True)], dtype=np.float64))
            if not good.any():
                break
        if good.any():
            us = np.stack(cols, axis=1)
            ns = np.rint(us * 1e3)
            good &= (ns / 1e3 == us).all(axis=1) & (np.abs(ns) < 2**62).all(axis=1)
            split = ns.astype(_I64)
        parent[p_at[~good]] = False
        split = split[good]
        p_at = p_at[good]
    ok &= (size == 4) | parent
    pick = np.flatnonzero(ok).tolist()
    inv = [invs[i] for i in pick]
    if inv and not (min(inv) >= 0 and max(inv) < 2**62):  # an invocation column holds int64 >= 0
        bad = [i for i in pick if not 0 <= invs[i] < 2**62]
        ok[bad] = False
        pick = np.flatnonzero(ok).tolist()
        keep = ~np.isin(p_at, bad)
        p_at, split = p_at[keep], split[keep]
        inv = [invs[i] for i in pick]
    fast = _Fast(
        ok,
        np.array([roles[i] for i in pick], dtype=np.int8),
        np.array(inv, dtype=_I64),
        [ops[i] for i in pick],
        np.array([bws[i] for i in pick], dtype=np.int8),
    )
    fast.split_at, fast.split_ns = p_at, split.reshape(-1, 3)
    return fast


@dataclass(eq=False)
class SpanTable:
    """Every span of a trace, one entry per span in each column (see the module docstring)."""

    strings: list[str]
    start: np.ndarray  # ns, int64
    end: np.ndarray
    tid: np.ndarray  # int64
    name: np.ndarray  # int32 code into strings
    cat: np.ndarray
    role: np.ndarray  # int8 code into ROLES
    inv: np.ndarray  # int64 invocation id, -1 outside custom ops
    op_type: np.ndarray  # int32 code into strings, -1 for none
    backward: np.ndarray  # int8: 1 backward, 0 forward, -1 not said
    split_at: np.ndarray = field(default_factory=lambda: _EMPTY_I64)  # spans (parents) with a stored split
    split_ns: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), dtype=_I64))  # python, sub-ops, waiting
    args_at: np.ndarray = field(default_factory=lambda: _EMPTY_I64)  # spans with other args, ascending
    args: list[dict[str, Any]] = field(default_factory=list)
    # The engine's side (see :mod:`.ops`): the op a span ran (its id in ``TraceData.ops``; a
    # parent's is its custom op's own engine op), a custom op's Python's CPU time, and the most
    # bytes of NumPy data that Python held at once of what it allocated itself; -1 for none.
    op: np.ndarray = None  # type: ignore[assignment]  # int64, made -1 when not given
    cpu: np.ndarray = None  # type: ignore[assignment]  # int64 ns
    numpy_peak: np.ndarray = None  # type: ignore[assignment]  # int64 bytes

    def __post_init__(self) -> None:
        # Not given (a trace from another tool, a synthetic one): a read-only view of one -1, which
        # costs no memory (16 bytes a span otherwise; a 1M-span trace is held in ~70 MB).
        n = len(self.start)
        if self.op is None:
            self.op = np.broadcast_to(_I64(-1), (n,))
        if self.cpu is None:
            self.cpu = np.broadcast_to(_I64(-1), (n,))
        if self.numpy_peak is None:
            self.numpy_peak = np.broadcast_to(_I64(-1), (n,))

    def __len__(self) -> int:
        return len(self.start)

    @property
    def dur(self) -> np.ndarray:
        return self.end - self.start

    # ------------------------------------------------------------------ building
    @classmethod
    def empty(cls) -> SpanTable:
        return cls.from_rows([], [], [], [], [], [])

    @classmethod
    def from_rows(
        cls,
        names: Sequence[str],
        cats: Sequence[str],
        tids: Sequence[int],
        starts: Sequence[int] | np.ndarray,
        ends: Sequence[int] | np.ndarray,
        args: Sequence[dict[str, Any] | None],
        strings: StringTable | None = None,
    ) -> SpanTable:
        """Columns from one list per field (what readers gather); family args leave the dicts."""
        n = len(names)
        st = strings or StringTable()
        role = np.zeros(n, dtype=np.int8)
        inv = np.full(n, -1, dtype=_I64)
        op_type = np.full(n, -1, dtype=np.int32)
        backward = np.full(n, -1, dtype=np.int8)
        split_at: list[int] = []
        split_ns: list[tuple[int, int, int]] = []
        args_at: list[int] = []
        rest_args: list[dict[str, Any]] = []
        code = st.code
        with_args = np.flatnonzero(np.fromiter(map(bool, args), dtype=bool, count=n)) if n else _EMPTY_I64
        sub = [args[i] for i in with_args.tolist()]
        fast = _family_fast_path(sub)
        slow = with_args.tolist()
        fast_split_at, fast_split_ns = _EMPTY_I64, np.zeros((0, 3), dtype=_I64)
        if fast is not None:
            # The bulk of a profile: children's and parents' args are their family fields only.
            at = with_args[fast.ok]
            role[at], inv[at], backward[at] = fast.role, fast.inv, fast.bw
            op_type[at] = st.codes(fast.op)
            fast_split_at, fast_split_ns = with_args[fast.split_at], fast.split_ns
            slow = with_args[~fast.ok].tolist()
        # The rest one by one (parents with their split, imported args): per field, Python lists
        # then one array write each, which beats item assignment into arrays by ~3x.
        roles, invs, ops, bws = [], [], [], []
        for i in slow:
            r, v, o, b, split, rest = _family_fields(args[i])
            roles.append(r)
            invs.append(v)
            ops.append(-1 if o is None else code(o))
            bws.append(b)
            if split is not None:
                split_at.append(i)
                split_ns.append(split)
            if rest is not None:
                args_at.append(i)
                rest_args.append(rest)
        if slow:
            idx = np.array(slow, dtype=_I64)
            role[idx] = roles
            inv[idx] = invs
            op_type[idx] = ops
            backward[idx] = bws
        slow_split = np.array(split_ns, dtype=_I64).reshape(-1, 3)
        split_order = _merge_sparse(fast_split_at, fast_split_ns, np.array(split_at, dtype=_I64), slow_split)
        return cls(
            strings=st.strings,
            start=np.array(starts, dtype=_I64).reshape(n),
            end=np.array(ends, dtype=_I64).reshape(n),
            tid=np.array(tids, dtype=_I64).reshape(n),
            name=st.codes(names),
            cat=st.codes(cats),
            role=role,
            inv=inv,
            op_type=op_type,
            backward=backward,
            split_at=split_order[0],
            split_ns=split_order[1],
            args_at=np.array(args_at, dtype=_I64),
            args=rest_args,
        )

    @classmethod
    def from_spans(cls, spans: Sequence[Span]) -> SpanTable:
        """Columns of a list of :class:`~.records.Span` (what users and older code build)."""
        g = attrgetter
        table = cls.from_rows(
            list(map(g("name"), spans)),
            list(map(g("cat"), spans)),
            list(map(g("tid"), spans)),
            list(map(g("start"), spans)),
            list(map(g("end"), spans)),
            list(map(g("args"), spans)),
        )
        # The engine's side, where the spans carry it (a list built from a profile: its edges stay).
        n = len(spans)
        op = np.fromiter(map(g("op"), spans), dtype=_I64, count=n)
        cpu = np.fromiter(map(g("cpu"), spans), dtype=_I64, count=n)
        numpy_peak = np.fromiter(map(g("numpy_peak"), spans), dtype=_I64, count=n)
        if (op >= 0).any():
            table.op = op
        if (cpu >= 0).any():
            table.cpu = cpu
        if (numpy_peak >= 0).any():
            table.numpy_peak = numpy_peak
        return table

    # ------------------------------------------------------------------ reading
    def args_of(self, i: int) -> dict[str, Any] | None:
        """Span ``i``'s args as one dict (family fields first, as the profiler writes them), or None."""
        return self.take(np.array([i])).all_args()[0]

    def extra(self, i: int) -> dict[str, Any] | None:
        """Span ``i``'s sparse args: those that are not family columns (None when it has none)."""
        k = int(np.searchsorted(self.args_at, i))
        if k < len(self.args_at) and self.args_at[k] == i:
            return self.args[k]
        return None

    def all_args(self) -> list[dict[str, Any] | None]:
        """Every span's args (None where it has none), built in one pass: for writers and the view."""
        n = len(self)
        out: list[dict[str, Any] | None] = [None] * n
        strings = self.strings
        full = (self.op_type >= 0) & (self.role != NO_ROLE) & (self.role != OTHER_ROLE) & (self.inv >= 0) & (self.backward >= 0)
        at = np.flatnonzero(full)
        if len(at):
            # The bulk (a profile's family spans): all four fields, each dict made in C by ``map``.
            op_s = [strings[c] for c in self.op_type[at].tolist()]
            role_s = list(map(ROLES.__getitem__, self.role[at].tolist()))
            bw_s = (self.backward[at] == 1).tolist()
            # A dict display in a comprehension: 0.3 µs a dict, half of ``map(dict, zip(...))``.
            made = [
                {"op_type": o, "role": r, "invocation": v, "backward": b}
                for o, r, v, b in zip(op_s, role_s, self.inv[at].tolist(), bw_s, strict=True)
            ]
            for i, one in zip(at.tolist(), made, strict=True):
                out[i] = one
        has = np.flatnonzero(~full & ((self.op_type >= 0) | (self.role != NO_ROLE) | (self.inv >= 0) | (self.backward >= 0)))
        ops, roles = self.op_type[has].tolist(), self.role[has].tolist()
        invs, bws = self.inv[has].tolist(), self.backward[has].tolist()
        for i, o, r, v, b in zip(has.tolist(), ops, roles, invs, bws, strict=True):
            d: dict[str, Any] = {}
            if o >= 0:
                d["op_type"] = strings[o]
            if r:
                role = ROLES[r]
                if role is not None:
                    d["role"] = role
            if v >= 0:
                d["invocation"] = v
            if b >= 0:
                d["backward"] = b == 1
            out[i] = d
        for i, (py, sub, wait) in zip(self.split_at.tolist(), self.split_ns.tolist(), strict=True):
            d = out[i]
            assert d is not None
            d["python_us"], d["subops_us"], d["waiting_us"] = py / 1e3, sub / 1e3, wait / 1e3
        for i, extra in zip(self.args_at.tolist(), self.args, strict=True):
            d = out[i]
            if d is None:
                out[i] = dict(extra)
            else:
                d.update(extra)
        return out

    def to_spans(self) -> list[Span]:
        """The spans as :class:`~.records.Span` objects (the compatible view; ~1 µs and ~400 bytes each)."""
        names = self.str_list(self.name)
        cats = self.str_list(self.cat)
        return list(
            map(
                Span,
                names,
                cats,
                self.tid.tolist(),
                self.start.tolist(),
                self.end.tolist(),
                self.all_args(),
                self.op.tolist(),
                self.cpu.tolist(),
                self.numpy_peak.tolist(),
            )
        )

    def str_list(self, codes: np.ndarray) -> list[str]:
        """The strings of ``codes`` as a list (through the distinct codes: cheap for repeated names)."""
        strings = self.strings
        return [strings[c] for c in codes.tolist()]

    def strs(self, codes: np.ndarray) -> np.ndarray:
        """The strings of ``codes`` as an object array (for the few vectorised string operations)."""
        table = np.array([*self.strings, ""], dtype=object)
        return table[np.where(codes < 0, len(self.strings), codes)]

    def role_is(self, role: Role) -> np.ndarray:
        return self.role == ROLE_CODE[role]

    def held_back(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The pushes the engine held by back-pressure (the ``Backpressure`` spans): their thread,
        start and end, sorted by thread then start (a thread's are disjoint, so by end too)."""
        code = self.strings.index(BACKPRESSURE) if BACKPRESSURE in self.strings else -1
        held = np.flatnonzero(self.name == code) if code >= 0 else np.zeros(0, dtype=np.int64)
        tid, start, end = self.tid[held], self.start[held], self.end[held]
        order = np.lexsort((start, tid))
        return tid[order], start[order], end[order]

    def collections(self) -> np.ndarray:
        """Rows of the garbage collector's spans (category :data:`~.records.GC_CATEGORY`), sorted by
        thread then start: a thread's collections never overlap (one collector), so by end too."""
        code = self.strings.index(GC_CATEGORY) if GC_CATEGORY in self.strings else -1
        rows = np.flatnonzero(self.cat == code) if code >= 0 else np.zeros(0, dtype=np.int64)
        return rows[np.lexsort((self.start[rows], self.tid[rows]))]

    @property
    def length_ns(self) -> int:
        """From the first span's start to the last one's end (0 for no spans): the run's end-to-end time."""
        return int(self.end.max()) - int(self.start.min()) if len(self) else 0

    def error_of(self, i: int) -> Any:
        """The ``error`` arg of span ``i`` (None when it has none)."""
        return (self.extra(i) or {}).get("error")

    # ------------------------------------------------------------------ reshaping
    def take(self, idx: np.ndarray) -> SpanTable:
        """The spans at ``idx`` (in that order), with their sparse args."""
        idx = np.asarray(idx, dtype=_I64)
        n = len(self)
        new_pos = np.full(n, -1, dtype=_I64)
        new_pos[idx] = np.arange(len(idx), dtype=_I64)

        def sparse(at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            pos = new_pos[at] if len(at) else _EMPTY_I64
            keep = np.flatnonzero(pos >= 0)
            order = keep[np.argsort(pos[keep], kind="stable")]
            return pos[order], order

        s_at, s_keep = sparse(self.split_at)
        a_at, a_keep = sparse(self.args_at)
        return SpanTable(
            strings=self.strings,
            start=self.start[idx],
            end=self.end[idx],
            tid=self.tid[idx],
            name=self.name[idx],
            cat=self.cat[idx],
            role=self.role[idx],
            inv=self.inv[idx],
            op_type=self.op_type[idx],
            backward=self.backward[idx],
            op=self.op[idx],
            cpu=self.cpu[idx],
            numpy_peak=self.numpy_peak[idx],
            split_at=s_at,
            split_ns=self.split_ns[s_keep],
            args_at=a_at,
            args=[self.args[k] for k in a_keep.tolist()],
        )

    def sorted_by_start(self) -> SpanTable:
        """Ordered by start, longer first at one start (so a parent precedes what it holds)."""
        order = start_order(self.start, self.end)
        if order is None:
            return self
        return self.take(order)

    @classmethod
    def concat(cls, tables: Sequence[SpanTable]) -> SpanTable:
        """One table holding every span of ``tables`` in turn (their strings merged)."""
        if not tables:
            return cls.empty()
        if all(t.strings is tables[0].strings for t in tables):  # one shared table: codes as they are
            return cls._concat_shared(tables)
        st = StringTable(tables[0].strings)
        parts: dict[str, list[np.ndarray]] = {
            k: [] for k in ("start", "end", "tid", "name", "cat", "role", "inv", "op_type", "backward", "op", "cpu", "numpy_peak")
        }
        split_at, split_ns, args_at, args = [], [], [], []
        offset = 0
        for t in tables:
            remap = np.array([st.code(s) for s in t.strings] + [-1], dtype=np.int32)
            for k in ("start", "end", "tid", "role", "inv", "backward", "op", "cpu", "numpy_peak"):
                parts[k].append(getattr(t, k))
            parts["name"].append(remap[t.name])
            parts["cat"].append(remap[t.cat])
            parts["op_type"].append(remap[t.op_type])  # -1 indexes the trailing -1
            split_at.append(t.split_at + offset)
            split_ns.append(t.split_ns)
            args_at.append(t.args_at + offset)
            args.extend(t.args)
            offset += len(t)
        cols = {k: np.concatenate(v) for k, v in parts.items()}
        return cls(
            strings=st.strings,
            split_at=np.concatenate(split_at),
            split_ns=np.concatenate(split_ns).reshape(-1, 3),
            args_at=np.concatenate(args_at),
            args=args,
            **cols,
        )

    @classmethod
    def _concat_shared(cls, tables: Sequence[SpanTable]) -> SpanTable:
        """:meth:`concat` of tables that share one string list (a reader's lines)."""
        offsets = np.cumsum([0] + [len(t) for t in tables])[:-1].tolist()
        cols = {
            k: np.concatenate([getattr(t, k) for t in tables])
            for k in ("start", "end", "tid", "name", "cat", "role", "inv", "op_type", "backward", "op", "cpu", "numpy_peak")
        }
        return cls(
            strings=tables[0].strings,
            split_at=np.concatenate([t.split_at + o for t, o in zip(tables, offsets, strict=True)]),
            split_ns=np.concatenate([t.split_ns for t in tables]).reshape(-1, 3),
            args_at=np.concatenate([t.args_at + o for t, o in zip(tables, offsets, strict=True)]),
            args=[a for t in tables for a in t.args],
            **cols,
        )


@dataclass(eq=False)
class FlowTable:
    """Flow arrows as columns: from where work was pushed (``src``) to the span that ran it (``dst``).

    Ids are int64; a file's flow whose id is not an integer gets its position (1, 2, ...) instead.
    """

    strings: list[str]
    id: np.ndarray
    name: np.ndarray  # int32 codes
    cat: np.ndarray
    src_tid: np.ndarray
    src_ts: np.ndarray
    dst_tid: np.ndarray
    dst_ts: np.ndarray

    def __len__(self) -> int:
        return len(self.id)

    @classmethod
    def from_rows(
        cls,
        ids: Sequence[Any],
        names: Sequence[str],
        cats: Sequence[str],
        src_tid: Sequence[int],
        src_ts: Sequence[int],
        dst_tid: Sequence[int],
        dst_ts: Sequence[int],
    ) -> FlowTable:
        st = StringTable()
        n = len(ids)
        try:
            id_col = np.array(ids, dtype=_I64).reshape(n)
            if n and any(type(v) is not int for v in ids):
                raise TypeError
        except (TypeError, ValueError, OverflowError):
            id_col = np.arange(1, n + 1, dtype=_I64)
        return cls(
            st.strings,
            id_col,
            st.codes(names),
            st.codes(cats),
            np.array(src_tid, dtype=_I64).reshape(n),
            np.array(src_ts, dtype=_I64).reshape(n),
            np.array(dst_tid, dtype=_I64).reshape(n),
            np.array(dst_ts, dtype=_I64).reshape(n),
        )

    @classmethod
    def empty(cls) -> FlowTable:
        return cls.from_rows([], [], [], [], [], [], [])

    @classmethod
    def from_flows(cls, flows: Sequence[Flow]) -> FlowTable:
        g = attrgetter
        cols = [list(map(g(k), flows)) for k in ("id", "name", "cat", "src_tid", "src_ts", "dst_tid", "dst_ts")]
        return cls.from_rows(*cols)

    def to_flows(self) -> list[Flow]:
        strings = self.strings
        names = [strings[c] for c in self.name.tolist()]
        cats = [strings[c] for c in self.cat.tolist()]
        cols = (self.src_tid, self.src_ts, self.dst_tid, self.dst_ts)
        return list(map(Flow, self.id.tolist(), names, cats, *(c.tolist() for c in cols)))

    def take(self, idx: np.ndarray) -> FlowTable:
        return FlowTable(
            self.strings,
            *(c[idx] for c in (self.id, self.name, self.cat, self.src_tid, self.src_ts, self.dst_tid, self.dst_ts)),
        )
