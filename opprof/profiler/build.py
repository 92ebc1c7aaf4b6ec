"""The recorder's raw records -> a :class:`~opprof.trace.Trace`, with array operations.

Each thread records into lists of one shape each (:class:`ThreadRecords`): plain ops as
``(t0, t1, name, seq, push, pusher, ready, by, by_var, reads, writes)`` (the op and its engine
edges in one record), sub-ops pushed inside a custom op's Python as ``(t0, t1, name, seq, note)``
(``note``: its push's, ``(ts, records, invocation, site)``), a family's own records (its engine
op, ``Dummy_Wait``, Python) as ``(kind, t0, t1, invocation, seq or CPU ns)``, the rest (waits,
errors, user spans, instants, counters) as ``(kind, t0, t1, name, info, pushed_in, extra)``, and
the edges of every op that is not plain in ``deps`` as ``(seq, push, pusher, ready, by, by_var,
reads, writes, site)``. The pure-Python recorder appends plain tuples; the compiled one keeps the
same records fixed-size in C (a ``Log`` of each shape, :data:`PLAIN_SCHEMA` ...), which give them
back as tuples when indexed. Their fields are named once, here, by index constants (``T0``,
``PUSH``, ``FAM_INV``...) that every reader uses. :func:`record_columns` makes int64 columns of
either: a compiled log writes its records into the columns itself (its names, invocations and sites
coded in its recorder's tables, mapped to the build's in one lookup a field); a list's fields are taken with
``map(itemgetter(k), records)`` in C (~20-60 ns a field; ``zip(*records)`` costs ~400 ns a
record, an iterator each). Measured on 2,000 trivial custom-op calls (10,002 spans, 2026-12-04):
this build took 8-10 ms from logs where it took 14-15 from tuples.

From there nothing runs per span in Python: the kind of each span, its custom-op family (through
the ``id()`` of its :class:`~opprof.engine.Invocation`), its ``Type::op`` name (formatted once per
distinct pair), which families are complete, their numbers, their parents and their python /
sub-ops / waiting split (:func:`~opprof.trace.analysis.split.split_columns`), and the flow arrows are all
NumPy. Python runs once per failed invocation and per instant or counter sample only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, compress, repeat
from operator import attrgetter, is_, itemgetter
from typing import Any

import numpy as np

# NumPy >= 2.3's plain np.unique(x) reads np.ma.is_masked, which imports numpy.ma on first use
# (6.6-7.4 ms here): a process's first stop() paid it inside the build, 10.4 ms against 1.9 for the
# same profile stopped again. Imported with the recorder instead, where `import opprof` (~290 ms)
# hides it; the analyses' own np.unique calls then cost what they measure.
import numpy.ma

from ..engine import Invocation
from ..trace import CUSTOM_OP, CounterSample, FlowTable, Instant, Role, SpanTable
from ..trace.analysis.split import callers, split_columns
from ..trace.columns import ROLE_CODE, StringTable
from ..trace.ops import WAIT_ID_BASE, OpKind, OpTable, op_order
from ..trace.records import OPERATOR, WAIT
from .sites import resolve, site_text

__all__ = [
    "BUF_FIELDS",
    "BUF_INFO",
    "BUF_KIND",
    "BUF_NAME",
    "BUF_PUSHED",
    "BUF_T0",
    "BUF_T1",
    "BUF_X",
    "BY",
    "BY_VAR",
    "COUNTER",
    "DEP_BY",
    "DEP_BY_VAR",
    "DEP_FIELDS",
    "DEP_PUSH",
    "DEP_PUSHER",
    "DEP_READS",
    "DEP_READY",
    "DEP_SEQ",
    "DEP_SITE",
    "DEP_WRITES",
    "DEPS_SCHEMA",
    "FAM_SCHEMA",
    "PLAIN_SCHEMA",
    "SUB_SCHEMA",
    "DUMMY",
    "ERROR",
    "FAM_FIELDS",
    "FAM_INV",
    "FAM_KIND",
    "FAM_T0",
    "FAM_T1",
    "FAM_X",
    "INSTANT",
    "NAME",
    "NOTE_INV",
    "NOTE_RECORDS",
    "NOTE_SITE",
    "NOTE_TS",
    "OP",
    "PLAIN_FIELDS",
    "PUSH",
    "PUSHER",
    "PYTHON",
    "READS",
    "READY",
    "SEQ",
    "START",
    "SUB_FIELDS",
    "SUB_NOTE",
    "T0",
    "T1",
    "USER",
    "WAIT_BY",
    "WAIT_REC",
    "WAIT_SITE",
    "WAIT_VAR",
    "WRITES",
    "Built",
    "Tables",
    "ThreadRecords",
    "build_columns",
    "encode_vars",
    "record_columns",
    "schema_slots",
]

# Kinds of record: in a thread's ``fam`` list (a custom op's engine op, its Dummy_Wait, its Python)
# and its ``buf`` list (everything rare); the first field of each record.
START, DUMMY, PYTHON = 0, 1, 2
OP, WAIT_REC, ERROR, USER, INSTANT, COUNTER = 3, 4, 5, 6, 7, 8
# Kinds of the other two lists, for the combined columns only.
_PLAIN_K, _SUB_K = 9, 10

# The records' fields: where each sits in its tuple. The recorder appends plain tuples in this
# order (a NamedTuple costs ~0.3 µs more to make); readers index, unpack and take columns by these.
#
# An op's record, plain (``plain``) or pushed inside a custom op's Python (``sub``), starts with:
# when it ran, its name, its push order (``Opr.seq``).
T0, T1, NAME, SEQ = 0, 1, 2, 3
# A plain op's record goes on with its engine edges: when it was pushed, by whose records
# (``ThreadRecords.index``), when it became ready, the op and the var that made it ready, and the
# ids of the vars it read and wrote (one int, or a tuple of none or several).
PUSH, PUSHER, READY, BY, BY_VAR, READS, WRITES = 4, 5, 6, 7, 8, 9, 10
PLAIN_FIELDS = 11
# A sub-op's goes on with its push's note (``Opr.prof``: see NOTE_*); its edges are in ``deps``.
SUB_NOTE = 4
SUB_FIELDS = 5
# A push's note, which the recorder keeps on the op (``Opr.prof``) from its push to its run: when,
# the pusher's records (their ``ThreadRecords.index``: a number, not the object, so that no record
# refers back to the lists that hold it and the compiled recorder can keep its records out of the
# garbage collector's sight), the invocation whose Python pushed (None outside one) and the user's
# line that pushed (``(file, line)``, or ``(code, offset)`` from the compiled recorder: see
# :func:`.sites.resolve`; None for a plain op or a custom op's own).
NOTE_TS, NOTE_RECORDS, NOTE_INV, NOTE_SITE = 0, 1, 2, 3
# ``deps``: the edges of an op that is not plain (the plain record's, then the push's site).
DEP_SEQ, DEP_PUSH, DEP_PUSHER, DEP_READY, DEP_BY, DEP_BY_VAR, DEP_READS, DEP_WRITES, DEP_SITE = range(9)
DEP_FIELDS = 9
# ``fam``: a family's own record: its kind (START, DUMMY, PYTHON), when, its Invocation, and the
# op's seq (START, DUMMY) or the Python's CPU ns (PYTHON).
FAM_KIND, FAM_T0, FAM_T1, FAM_INV, FAM_X = range(5)
FAM_FIELDS = 5
# ``buf``: the rest: its kind, when, its name (an error's message), its info (the Invocation of a
# wait or error inside a family, a user span's category, an instant's, a counter's value), the
# invocation that pushed an op with some other info, and an extra (an op's seq, a wait's
# ``(by, var, site)``: see WAIT_*).
BUF_KIND, BUF_T0, BUF_T1, BUF_NAME, BUF_INFO, BUF_PUSHED, BUF_X = range(7)
BUF_FIELDS = 7
# A wait's extra: the op whose completion released it, the var it waited on (0: none), its site.
WAIT_BY, WAIT_VAR, WAIT_SITE = 0, 1, 2


# The same records' shapes in the compiled recorder's logs (opprof/profiler/_spanlog.c's ``Log``), a
# letter a field of the tuple form: ``i`` an int, ``n`` a name, ``v`` an op's vars (one id, or a tuple
# of ids), ``o`` an object (an Invocation) or None, ``s`` a site or None, ``N`` a push's note. Each
# is one int64 slot of a record, a note four (NOTE_* in order: ts, records, invocation, site); the
# recorder uses the compiled logs only where the module's schemas are these.
PLAIN_SCHEMA = "iiniiiiiivv"
SUB_SCHEMA = "iiniN"
FAM_SCHEMA = "iiioi"
DEPS_SCHEMA = "iiiiiivvs"
# A sub-op's record as slots: its push's note flattened from SUB_NOTE on.
SUB_PUSH_TS, SUB_PUSHER, SUB_INV = SUB_NOTE + NOTE_TS, SUB_NOTE + NOTE_RECORDS, SUB_NOTE + NOTE_INV


class ThreadRecords:
    """One thread's records: its name and its lists (see the module docstring)."""

    __slots__ = ("buf", "deps", "fam", "index", "name", "native_id", "plain", "sub")

    def __init__(self, name: str, native_id: int = 0) -> None:
        self.name = name
        self.native_id = native_id  # the OS's id of the thread: how the GIL sampler names it
        self.index = -1  # its place among the recorder's threads: what an op's record names its pusher by
        # Lists of tuples (PLAIN_FIELDS fields: T0 ... WRITES; SUB_FIELDS; FAM_FIELDS; DEP_FIELDS); the
        # compiled recorder puts a Log of the same records in each of the four (fixed-size, in C: the
        # build reads either, :func:`record_columns`). ``buf`` is always a list.
        self.plain: Any = []
        self.sub: Any = []
        self.fam: Any = []
        self.buf: list[tuple[Any, ...]] = []
        self.deps: Any = []

    def __len__(self) -> int:
        return len(self.plain) + len(self.sub) + len(self.fam) + len(self.buf)

    def release(self) -> None:
        """Empty the lists once the trace is built: a compiled Log gives its chunks to the next
        recording's logs (``Log.release``), which would otherwise wait for the collector to free the
        recorder's cycle, while the next recording mapped fresh chunks (a page fault a 4 KB page)."""
        for part in (self.plain, self.sub, self.fam, self.deps, self.buf):
            if isinstance(part, list):
                part.clear()
            else:
                part.release()

    def copy(self) -> ThreadRecords:
        """The lists as they are now (other threads append while a live build reads)."""
        c = ThreadRecords(self.name, self.native_id)
        c.index = self.index  # what pushes name their pusher by (a copy is the same thread's)
        # A list, or the compiled recorder's Log (opprof.profiler._spanlog): each copies itself.
        c.plain, c.sub, c.fam, c.deps = self.plain.copy(), self.sub.copy(), self.fam.copy(), self.deps.copy()
        c.buf = list(self.buf)
        return c


def schema_slots(schema: str) -> list[tuple[int, int, str, int]]:
    """(field, slot, kind, part) of each int64 slot of a record of ``schema``: a note's four slots
    are its parts 0-3 (ts, records, invocation, site: kinds i, i, o, s); -1 for a whole field."""
    out: list[tuple[int, int, str, int]] = []
    for k, kind in enumerate(schema):
        out += [(k, len(out) + j, c, j) for j, c in enumerate("iios")] if kind == "N" else [(k, len(out), kind, -1)]
    return out


def _site_key(site: Any) -> Any:
    """What tells two sites apart, as the compiled log does: a pair by the identity of its first item
    (a code object, or a file name) and its second (an offset, or a line); anything else by identity."""
    return (id(site[0]), site[1]) if type(site) is tuple and len(site) == 2 else id(site)


class Tables:
    """What the records' non-numeric fields become while :func:`record_columns` makes their columns:
    names a code in one :class:`StringTable`, vars an id or ``-(k + 1)`` for the k-th extra (the ops with
    none or several vars), an object its ``id()`` (0 for None; ``objects`` finds it back: the records
    keep it alive) and a site a code into ``sites`` (-1 for None; each distinct one once)."""

    def __init__(self) -> None:
        self.names = StringTable()
        # The extras' var ids (flat, in parts) and where each extra starts among them.
        self._extra_ids: list[np.ndarray] = []
        self._extra_start: list[np.ndarray] = []
        self.n_extras = 0
        self._n_extra_ids = 0
        self.objects: dict[int, Any] = {}
        self.sites: list[Any] = []
        self._site_codes: dict[Any, int] = {}
        # A compiled recorder's tables (one a recorder, shared by its logs, only ever growing) as maps
        # from their codes, made once per (kind, length): every log of a finished recording has the same.
        self._maps: dict[tuple[str, int], np.ndarray] = {}

    def add_extras(self, ids: np.ndarray, start: np.ndarray) -> int:
        """Add extras given as their var ids, flat, and where each starts among them; how many came before."""
        before = self.n_extras
        self._extra_ids.append(ids)
        self._extra_start.append(start + self._n_extra_ids)
        self.n_extras += len(start)
        self._n_extra_ids += len(ids)
        return before

    def extras(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every extra: (the var ids, flat; where each extra starts among them; how many it has)."""
        ids = np.concatenate(self._extra_ids) if self._extra_ids else np.zeros(0, np.int64)
        start = np.concatenate(self._extra_start) if self._extra_start else np.zeros(0, np.int64)
        return ids, start, np.diff(np.append(start, len(ids)))

    def vars_of(self, code: int) -> tuple[int, ...]:
        """The var ids a vars code names (one at a time: for readers that check, not for the build)."""
        if code > 0:
            return (code,)
        ids, start, n = self.extras()
        k = -1 - code
        return tuple(ids[start[k] : start[k] + n[k]].tolist())

    def site_code(self, site: Any) -> int:
        if site is None:
            return -1
        key = _site_key(site)
        code = self._site_codes.get(key)
        if code is None:
            code = self._site_codes[key] = len(self.sites)
            self.sites.append(site)
        return code

    def column(self, kind: str, values: list[Any]) -> np.ndarray:
        """One field of records given as Python values, coded (see the class docstring)."""
        if kind == "n":
            return self.names.codes(values).astype(np.int64)
        if kind == "v":
            return encode_vars(values, self)
        if kind == "o":
            ids = _ids(values)
            ids[ids == id(None)] = 0
            self.objects.update(zip(ids.tolist(), values, strict=True))
            return ids
        if kind == "s":
            # Each distinct site coded once (a pure recorder's sites are (file, line) pairs, hashed
            # in C), then looked up: a call per record cost ~0.6 µs (2,000 custom-op calls: 5 ms).
            codes = {x: self.site_code(x) for x in dict.fromkeys(values)}
            return np.fromiter(map(codes.__getitem__, values), dtype=np.int64, count=len(values))
        return _arr(values)

    def code_map(self, kind: str, table: list[Any]) -> np.ndarray:
        """A compiled recorder's table of ``kind`` as the codes here, -1 (a None) reading the last item."""
        key = (kind, len(table))
        m = self._maps.get(key)
        if m is None:
            if kind == "n":
                m = self.names.codes(table).astype(np.int64)
            elif kind == "o":
                m = _ids(table)
                self.objects.update(zip(m.tolist(), table, strict=True))
            else:
                m = np.fromiter(map(self.site_code, table), dtype=np.int64, count=len(table))
            m = self._maps[key] = np.append(m, 0 if kind == "o" else -1)
        return m


def record_columns(logs: Sequence[Any], schema: str, tables: Tables) -> np.ndarray:
    """The records of ``logs`` (lists of tuples, or compiled logs of ``schema``), one after another,
    as an int64 array of one row per slot (:func:`schema_slots`), their other fields coded into ``tables``.
    A compiled log writes its records into the array itself (no record becomes a Python object);
    only its codes are mapped to ``tables``' (a table lookup a slot)."""
    slots = schema_slots(schema)
    # One array for all the logs, each filled in its place: concatenating per-log arrays copied every
    # record once more, 1.1 ms of a 7.5 ms build of 20,000 plain spans here.
    out = np.empty((len(slots), sum(map(len, logs))), dtype=np.int64)
    at = 0
    for log in logs:
        if not len(log):
            continue
        lo, at = at, at + len(log)
        f = out[:, lo:at]
        if isinstance(log, list):
            # Each field taken once (a note's four parts share theirs).
            fields = [list(map(itemgetter(k), log)) for k in range(len(schema))]
            for k, slot, kind, part in slots:
                values = fields[k]
                f[slot] = tables.column(kind, values if part < 0 else list(map(itemgetter(part), values)))
        else:
            # The log writes its records into its columns of ``out`` itself, field by field.
            names, objects, sites, x_ids, x_start = log.columns(out, lo)
            before = tables.add_extras(np.frombuffer(x_ids, dtype=np.int64), np.frombuffer(x_start, dtype=np.int64))
            for _, slot, kind, _ in slots:
                if kind == "v":
                    several = f[slot] < 1
                    f[slot, several] -= before  # its log's k-th extra is the (before + k)-th here
                elif kind != "i":
                    f[slot] = tables.code_map(kind, {"n": names, "o": objects, "s": sites}[kind])[f[slot]]
    return out


def _vars_per_code(codes: np.ndarray, extras_len: np.ndarray) -> np.ndarray:
    """How many vars each code names: 1 for an id, the length of its extra for the rest."""
    n = np.ones(len(codes), dtype=np.int64)
    other = np.flatnonzero(codes < 1)
    n[other] = extras_len[-1 - codes[other]]
    return n


def encode_vars(values: list[Any], tables: Tables) -> np.ndarray:
    """``values`` (a var id, or a tuple of ids) as codes: the id, or ``-(k + 1)`` for the tuple
    added to ``tables``' extras as its k-th (the few ops with none or several vars)."""
    one = np.fromiter(map(is_, map(type, values), repeat(int)), dtype=bool, count=len(values))
    codes = np.zeros(len(values), dtype=np.int64)
    codes[one] = np.fromiter(compress(values, one.tolist()), dtype=np.int64, count=int(one.sum()))
    several = np.flatnonzero(~one)
    tuples = list(map(values.__getitem__, several.tolist()))
    lens = np.fromiter(map(len, tuples), dtype=np.int64, count=len(tuples))
    ids = np.fromiter(chain.from_iterable(tuples), dtype=np.int64, count=int(lens.sum()))
    before = tables.add_extras(ids, np.cumsum(lens) - lens)
    codes[several] = -1 - (before + np.arange(len(several), dtype=np.int64))
    return codes


@dataclass(frozen=True, slots=True)
class Built:
    """What :func:`build_columns` makes: spans, flows, instants, counters and the dropped families."""

    spans: SpanTable
    flows: FlowTable
    instants: list[Instant]
    counters: list[CounterSample]
    incomplete: int
    ops: OpTable


def _cols(lists: Sequence[list[Any]], fields: int) -> list[list[Any]]:
    """One list per field of the records of ``lists``, in turn."""
    recs = list(chain.from_iterable(lists))
    return [list(map(itemgetter(k), recs)) for k in range(fields)]


def _arr(values: list[Any], dtype: Any = np.int64) -> np.ndarray:
    return np.fromiter(values, dtype=dtype, count=len(values))


def _ids(values: Sequence[Any]) -> np.ndarray:
    return np.fromiter(map(id, values), dtype=np.int64, count=len(values))


def _factorize_ids(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a code per id, where each code is first seen). ``np.unique`` (a sort, 1.4 ms at 80k ids):
    a dict of ``id()`` values is ten times slower (every id becomes a Python int)."""
    _, first, codes = np.unique(ids, return_index=True, return_inverse=True)
    return codes.ravel(), first


def build_columns(threads: Sequence[ThreadRecords]) -> Built:
    """Columns of every thread's records (thread ``i + 1`` made ``threads[i]``)."""
    tid_of = np.arange(1, len(threads) + 1, dtype=np.int64)
    # The four lists, one after another in the combined columns: plain ops, sub-ops, families' own
    # records, the rest. The first three and the edges are int64 columns, their names and vars
    # coded in one set of tables; the rest (rare) stay Python values.
    tables = Tables()
    st = tables.names
    plain = record_columns([r.plain for r in threads], PLAIN_SCHEMA, tables)
    sub = record_columns([r.sub for r in threads], SUB_SCHEMA, tables)
    fam = record_columns([r.fam for r in threads], FAM_SCHEMA, tables)
    deps = record_columns([r.deps for r in threads], DEPS_SCHEMA, tables)
    buf = _cols([r.buf for r in threads], BUF_FIELDS)
    b_kind, b_t0, b_t1, b_name = buf[BUF_KIND], buf[BUF_T0], buf[BUF_T1], buf[BUF_NAME]
    b_info, b_pushed, b_x = buf[BUF_INFO], buf[BUF_PUSHED], buf[BUF_X]
    q, ns, nf, nb = plain.shape[1], sub.shape[1], fam.shape[1], len(b_t0)
    o_f, o_b = q + ns, q + ns + nf  # where the family and other records start
    push_ts, push_index = sub[SUB_PUSH_TS], sub[SUB_PUSHER]
    n = o_b + nb
    kind = np.concatenate(
        [np.full(q, _PLAIN_K, np.int8), np.full(ns, _SUB_K, np.int8), fam[FAM_KIND].astype(np.int8), _arr(b_kind, np.int8)]
    )
    t0 = np.concatenate([plain[T0], sub[T0], fam[FAM_T0], _arr(b_t0)])
    t1 = np.concatenate([plain[T1], sub[T1], fam[FAM_T1], _arr(b_t1)])
    tid = np.concatenate([np.repeat(tid_of, [len(getattr(r, k)) for r in threads]) for k in ("plain", "sub", "fam", "buf")])
    name_code = np.empty(n, dtype=np.int32)
    name_code[:q] = plain[NAME]
    name_code[q:o_f] = sub[NAME]
    fk = kind[o_f:o_b]
    name_code[o_f:o_b] = np.where(fk == PYTHON, st.code("pure_python"), st.code("Dummy_Wait"))  # a start's is its label
    name_code[o_b:] = st.codes(b_name)  # (the message, for an error)

    # The rest: waits and errors inside a family carry its Invocation; so may an engine user's
    # own op (some other info), a sub-op when pushed inside a custom op (without a flow: its push
    # time is not kept), else a plain op. Rare: looked at one by one.
    b_is_inv = np.fromiter(map(isinstance, b_info, repeat(Invocation)), dtype=bool, count=nb)
    bk = kind[o_b:]
    b_op = (bk == OP) | (bk == START)
    b_sub = np.zeros(nb, dtype=bool)
    for j in np.flatnonzero(b_op).tolist():
        b_sub[j] = b_pushed[j] is not None
    b_own = b_is_inv & ((bk == WAIT_REC) | (bk == ERROR))
    # Every family record's invocation, by its id() (the records keep each alive): codes in C.
    b_objs = [b_pushed[j] if b_sub[j] else b_info[j] for j in range(nb)]
    b_ids = tables.column("o", b_objs)
    in_family = np.concatenate([np.zeros(q, bool), np.ones(ns + nf, bool), b_own | b_sub])
    fam_rec = np.flatnonzero(in_family)
    inv_ids = np.concatenate([sub[SUB_INV], fam[FAM_INV], b_ids])[fam_rec - q]  # plain ops belong to none
    code, first_at = _factorize_ids(inv_ids)
    inv = np.full(n, -1, dtype=np.int64)
    inv[fam_rec] = code
    invocations: list[Invocation] = list(map(tables.objects.__getitem__, inv_ids[first_at].tolist()))
    m = len(invocations)

    def at(lo: int, mask: np.ndarray) -> np.ndarray:
        out = np.zeros(n, dtype=bool)
        out[lo : lo + len(mask)] = mask
        return out

    start_rec = at(o_f, fk == START)
    dummy = at(o_f, fk == DUMMY)
    python = at(o_f, fk == PYTHON)
    subop = at(q, np.ones(ns, bool)) | at(o_b, b_sub)
    plain_op = at(0, np.ones(q, bool)) | at(o_b, b_op & ~b_sub)
    fam_wait = at(o_b, b_own & (bk == WAIT_REC))
    plain_wait = at(o_b, ~b_own & (bk == WAIT_REC))
    error = at(o_b, b_own & (bk == ERROR))
    user = at(o_b, bk == USER)

    # Families: complete when they have a start, a Dummy_Wait and a Python (the cap or a pause can
    # cut any of them off); numbered 1..n by start time.
    f_start = np.full(m, -1, dtype=np.int64)
    f_start_tid = np.zeros(m, dtype=np.int64)
    f_end = np.full(m, -1, dtype=np.int64)
    s_rec, d_rec = np.flatnonzero(start_rec), np.flatnonzero(dummy)
    f_start[inv[s_rec]] = t0[s_rec]  # the last one wins, as a dict assignment did
    f_start_tid[inv[s_rec]] = tid[s_rec]
    f_end[inv[d_rec]] = t1[d_rec]
    has = np.zeros((3, m), dtype=bool)
    has[0, inv[s_rec]] = True
    has[1, inv[d_rec]] = True
    has[2, inv[python]] = True
    complete = has.all(axis=0)
    done = np.flatnonzero(complete)
    done = done[np.argsort(f_start[done], kind="stable")]
    number = np.full(m + 1, -1, dtype=np.int64)  # indexed by inv; inv -1 reads the -1 at the end
    number[done] = np.arange(1, len(done) + 1)
    child = (dummy | subop | fam_wait | python) & (inv >= 0)
    incomplete = int(np.count_nonzero(np.bincount(inv[child], minlength=m)[~complete] > 0)) if m else 0

    # Spans: the records that are spans and survive, in record order; the parents after them.
    keep_child = child & (number[inv] > 0)
    idx = np.flatnonzero(plain_op | plain_wait | user | keep_child)
    s_inv = inv[idx]
    s_child = keep_child[idx]
    role = np.zeros(len(idx), dtype=np.int8)
    role[dummy[idx]] = ROLE_CODE[Role.DUMMY_WAIT]
    role[subop[idx] & s_child] = ROLE_CODE[Role.SUBOP]
    role[fam_wait[idx]] = ROLE_CODE[Role.WAIT]
    role[python[idx]] = ROLE_CODE[Role.PYTHON]
    # Per invocation: its op type, direction and label, from attributes read in C.
    op_code = np.append(st.codes(list(map(attrgetter("op_type"), invocations))), -1).astype(np.int32)
    backward = np.append(np.fromiter(map(attrgetter("backward"), invocations), dtype=np.int8, count=m), -1).astype(np.int8)
    label_code = _labels(st, op_code[:m], backward[:m])
    names = name_code[idx].astype(np.int64)
    c = np.flatnonzero(s_child)
    if len(c):
        # ``Type::op``: one string per distinct (label, op name) pair.
        width = len(st.strings) + 1
        upair, back = np.unique(label_code[s_inv[c]] * width + names[c], return_inverse=True)
        joined = np.array([st.code(f"{st.strings[p // width]}::{st.strings[p % width]}") for p in upair.tolist()], dtype=np.int64)
        names[c] = joined[back.ravel()]
    cats = np.full(len(idx), st.code(OPERATOR), dtype=np.int32)
    cats[s_child] = st.code(CUSTOM_OP)
    cats[plain_wait[idx]] = st.code(WAIT)
    u = np.flatnonzero(user[idx])
    if len(u):
        cats[u] = st.codes([b_info[i - o_b] for i in idx[u].tolist()])

    # The engine's side: each span's op id (a parent's is its custom op's own engine op), the
    # CPU time of each Python, and the table of ops and waits.
    x_op = np.full(n, -1, dtype=np.int64)
    x_op[:q] = plain[SEQ]
    x_op[q:o_f] = sub[SEQ]
    f_x_arr = fam[FAM_X]
    x_op[o_f:o_b] = np.where(fk == PYTHON, -1, f_x_arr)
    x_cpu = np.full(n, -1, dtype=np.int64)
    x_cpu[o_f:o_b] = np.where(fk == PYTHON, f_x_arr, -1)
    b_op_at = np.flatnonzero(bk == OP)
    x_op[o_b + b_op_at] = [b_x[j] for j in b_op_at.tolist()]
    w_at = np.flatnonzero(bk == WAIT_REC)
    wait_ids = WAIT_ID_BASE + np.arange(len(w_at), dtype=np.int64)
    x_op[o_b + w_at] = wait_ids
    parent_op = np.full(m, -1, dtype=np.int64)
    parent_op[inv[s_rec]] = x_op[s_rec]
    ops = _op_table(threads, plain, deps, tables, tid, o_b, w_at, wait_ids, b_t0, b_t1, b_x, x_op[s_rec], x_op[d_rec])

    # Parents, with their split.
    k = len(done)
    p_start, p_end = f_start[done], f_end[done]
    fam_of = np.full(m + 1, -1, dtype=np.int64)
    fam_of[done] = np.arange(k)
    split = split_columns(p_start, p_end, fam_of[s_inv[c]], t0[idx[c]], t1[idx[c]], tid[idx[c]], role[c])
    failed = np.flatnonzero(error)
    message = dict(zip(inv[failed].tolist(), (b_name[i - o_b] for i in failed.tolist()), strict=True))
    has_error = np.isin(done, np.array(list(message), dtype=np.int64))
    n_sp = len(idx)
    spans = SpanTable(
        strings=st.strings,
        start=np.concatenate([t0[idx], p_start]),
        end=np.concatenate([t1[idx], p_end]),
        tid=np.concatenate([tid[idx], f_start_tid[done]]),
        name=np.concatenate([names, label_code[done]]).astype(np.int32),
        cat=np.concatenate([cats, np.full(k, st.code(CUSTOM_OP), dtype=np.int32)]),
        role=np.concatenate([role, np.full(k, ROLE_CODE[Role.PARENT], dtype=np.int8)]),
        inv=np.concatenate([np.where(s_child, number[s_inv], -1), number[done]]),
        op_type=np.concatenate([np.where(s_child, op_code[s_inv], -1), op_code[done]]).astype(np.int32),
        backward=np.concatenate([np.where(s_child, backward[s_inv], -1), backward[done]]).astype(np.int8),
        op=np.concatenate([x_op[idx], parent_op[done]]),
        cpu=np.concatenate([x_cpu[idx], np.full(k, -1, dtype=np.int64)]),
        split_at=np.arange(n_sp, n_sp + k, dtype=np.int64),
        split_ns=split,
        args_at=n_sp + np.flatnonzero(has_error),
        args=[{"error": message[f]} for f in done[has_error].tolist()],
    )
    # Flows: every kept sub-op from the sub-op lists (the only ones whose push is known).
    flow_pos = np.flatnonzero(s_child & (kind[idx] == _SUB_K))
    flows = _flows(threads, spans, flow_pos, idx[flow_pos] - q, push_ts, push_index, st.code("push"))
    flows = _with_call_flows(flows, spans, ops, st.code("push"))
    instants = [Instant(b_name[i], b_info[i], int(tid[o_b + i]), int(b_t0[i])) for i in np.flatnonzero(bk == INSTANT).tolist()]
    counters = [CounterSample(b_name[i], int(b_t0[i]), {"value": b_info[i]}) for i in np.flatnonzero(bk == COUNTER).tolist()]
    instants.sort(key=attrgetter("ts"))
    counters.sort(key=attrgetter("ts"))
    return Built(spans.sorted_by_start(), flows, instants, counters, incomplete, ops)


def _site_codes(codes: np.ndarray, sites: list[Any], st: StringTable) -> np.ndarray:
    """Each push's or wait's site (a code into ``sites``, -1 for none) as a code of its text in ``st``
    (:func:`.sites.site_text`; -1 for none): each distinct site formatted once, then looked up in C."""
    text = np.array([st.code(site_text(*resolve(x))) for x in sites] + [-1], dtype=np.int32)
    return text[codes]


def _op_table(
    threads: Sequence[ThreadRecords],
    plain: np.ndarray,
    deps: np.ndarray,
    tables: Tables,
    tid: np.ndarray,
    o_b: int,
    w_at: np.ndarray,
    wait_ids: np.ndarray,
    b_t0: list[int],
    b_t1: list[int],
    b_x: list[Any],
    custom_ops: np.ndarray,
    dummies: np.ndarray,
) -> OpTable:
    """The engine's table (:class:`~opprof.trace.ops.OpTable`): one row per recorded op, then the
    waits; ``plain`` is the plain ops' columns (their edges in their own record; no site: only pushes
    inside a custom op have one), ``deps`` the edges of the rest (:data:`DEPS_SCHEMA`), both coded
    in ``tables``."""
    x_ids, x_start, x_len = tables.extras()

    def both(k: int, dep: int) -> np.ndarray:
        return np.concatenate([plain[k], deps[dep]])

    # The table is ascending by op: the ops' columns are put in that order first, so that their
    # accesses are laid out in it as they are made (sorting the finished table moved every access
    # once more: 1.0 of a 2.4 ms table of 20,000 small ops, whose two workers' records interleave).
    # Waits come after every op, in record order, which is theirs (WAIT_ID_BASE + k).
    d_seq = both(SEQ, DEP_SEQ)
    by_op = op_order(d_seq)

    def ordered(c: np.ndarray) -> np.ndarray:
        return c if by_op is None else c[by_op]

    def column(k: int, dep: int) -> np.ndarray:
        return ordered(both(k, dep))

    d_seq = ordered(d_seq)
    # Sites: none for a plain op (pushed outside any custom op's Python).
    d_site = ordered(np.concatenate([np.full(plain.shape[1], -1, np.int64), deps[DEP_SITE]]))
    push, d_rec = column(PUSH, DEP_PUSH), column(PUSHER, DEP_PUSHER)
    ready, by, var = column(READY, DEP_READY), column(BY, DEP_BY), column(BY_VAR, DEP_BY_VAR)
    d_reads, d_writes = column(READS, DEP_READS), column(WRITES, DEP_WRITES)
    tid_of_index = np.zeros(max([r.index for r in threads], default=-1) + 2, dtype=np.int64)  # [-1]: unknown, 0
    for i, r in enumerate(threads):
        tid_of_index[r.index] = i + 1
    st = StringTable()
    w_list = w_at.tolist()
    w_extra = [b_x[j] for j in w_list]  # (by, var, site) of each wait: WAIT_*
    ready = np.where(ready > 0, ready, push)  # 0: ready when pushed
    # Each op's vars: one id (most ops), or a code of a tuple of them (none, or several).
    n_reads, n_writes = _vars_per_code(d_reads, x_len), _vars_per_code(d_writes, x_len)
    w_var = np.array([e[WAIT_VAR] for e in w_extra], dtype=np.int64)
    # Accesses: each op's reads then writes; a wait reads the var it waited on (none for all).
    counts = np.concatenate([n_reads + n_writes, (w_var > 0).astype(np.int64)])
    op_at = np.concatenate([[0], np.cumsum(n_reads + n_writes)]).astype(np.int64)
    op_vars = np.empty(int(op_at[-1]), dtype=np.int64)
    for codes, counts_of, at in ((d_reads, n_reads, op_at[:-1]), (d_writes, n_writes, op_at[:-1] + n_reads)):
        one = codes > 0
        op_vars[at[one]] = codes[one]
        # The ops with none or several: their extras flattened, each run placed at its op's slot.
        several = np.flatnonzero(~one)
        lens = counts_of[several]
        total = int(lens.sum())
        within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens)  # each id's place in its run
        flat = x_ids[np.repeat(x_start[-1 - codes[several]], lens) + within]
        op_vars[np.repeat(at[several], lens) + within] = flat
    acc_var = np.concatenate([op_vars, w_var[w_var > 0]])
    per_op = np.stack([n_reads, n_writes], axis=1).ravel()  # reads, writes, reads, writes, ...
    is_write = np.concatenate(
        [np.repeat(np.tile(np.array([False, True]), len(d_reads)), per_op), np.zeros(int((w_var > 0).sum()), bool)]
    )
    kind = np.concatenate([np.full(len(d_seq), OpKind.OP, np.int8), np.full(len(w_list), OpKind.WAIT, np.int8)])
    op = np.concatenate([d_seq, wait_ids])
    kind[: len(d_seq)][np.isin(op[: len(d_seq)], custom_ops)] = OpKind.CUSTOM
    kind[: len(d_seq)][np.isin(op[: len(d_seq)], dummies)] = OpKind.DUMMY
    table_push = np.concatenate([push, np.array([b_t0[j] for j in w_list], dtype=np.int64)])
    w_end = np.array([b_t1[j] for j in w_list], dtype=np.int64)
    w_by = np.array([e[WAIT_BY] for e in w_extra], dtype=np.int64)
    acc_at = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    all_by, all_var = np.concatenate([by, w_by]), np.concatenate([var, w_var])
    w_sites = np.fromiter((tables.site_code(e[WAIT_SITE]) for e in w_extra), dtype=np.int64, count=len(w_extra))
    sites = _site_codes(np.concatenate([d_site, w_sites]), tables.sites, st)  # each distinct one formatted once
    t = OpTable(
        op=op,
        kind=kind,
        push=table_push,
        pusher=np.concatenate([tid_of_index[d_rec], tid[o_b + w_at]]),
        ready=np.concatenate([ready, w_end]),
        by=np.where(all_by > 0, all_by, -1),  # 0: none, in the engine's fields
        var=np.where(all_var > 0, all_var, -1),
        site=sites,
        acc_at=acc_at,
        acc_var=acc_var,
        acc_write=is_write,
        strings=st.strings,
    )
    return t


def _labels(st: StringTable, op_code: np.ndarray, backward: np.ndarray) -> np.ndarray:
    """Each invocation's label (``MyOp``, ``_backward_MyOp``), formatted once per op type and direction."""
    width = 2
    key = op_code.astype(np.int64) * width + (backward > 0)
    ukey, back = np.unique(key, return_inverse=True)
    text = [("_backward_" if kk % width else "") + st.strings[kk // width] for kk in ukey.tolist()]
    return np.append(np.array([st.code(t) for t in text], dtype=np.int64)[back.ravel()], -1)


def _with_call_flows(flows: FlowTable, spans: SpanTable, ops: OpTable, push_cat: int) -> FlowTable:
    """``flows`` and an arrow for each custom op called inside another's Python: from the push, on
    the caller's Python thread, to the start of the callee's own engine op (where its parent span
    starts). Its caller is the Python span running on the pushing thread at the push, of another
    invocation (:func:`opprof.trace.analysis.split.callers` reads the same back)."""
    caller, parents = callers(spans, ops)
    hit = np.flatnonzero(caller >= 0)
    if not len(hit):
        return flows
    p = parents[hit]
    rows = ops.rows_of(spans.op[p])
    dst_ts = spans.start[p]
    n0, nf = len(flows), len(hit)
    return FlowTable(
        flows.strings,
        np.concatenate([flows.id, np.arange(n0 + 1, n0 + nf + 1, dtype=np.int64)]),
        np.concatenate([flows.name, spans.name[p]]).astype(np.int32),
        np.concatenate([flows.cat, np.full(nf, push_cat, dtype=np.int32)]),
        np.concatenate([flows.src_tid, ops.pusher[rows]]),
        np.concatenate([flows.src_ts, np.minimum(ops.push[rows], dst_ts)]),
        np.concatenate([flows.dst_tid, spans.tid[p]]),
        np.concatenate([flows.dst_ts, dst_ts]),
    )


def _flows(
    threads: Sequence[ThreadRecords],
    spans: SpanTable,
    pos: np.ndarray,
    sub_rec: np.ndarray,
    push_ts: np.ndarray,
    push_index: np.ndarray,
    push_cat: int,
) -> FlowTable:
    """An arrow from each kept sub-op's push to its start; ``pos`` are the sub-ops among the spans
    (before sorting), ``sub_rec`` their records in the sub-op lists.

    The pushing thread is named by its records' index (``ThreadRecords.index``), not its thread
    ident: Linux reuses the ident of a finished thread. Flows share the spans' string table (their
    names are the sub-ops').
    """
    indexes = np.array([r.index for r in threads], dtype=np.int64)
    order = np.argsort(indexes)
    sorted_ids = indexes[order]
    pushed_by = push_index[sub_rec]
    where = np.minimum(np.searchsorted(sorted_ids, pushed_by), max(len(indexes) - 1, 0))
    known = sorted_ids[where] == pushed_by if len(indexes) else np.zeros(len(pos), dtype=bool)
    pos, sub_rec, where = pos[known], sub_rec[known], where[known]
    dst_ts = spans.start[pos]
    nf = len(pos)
    return FlowTable(
        spans.strings,
        np.arange(1, nf + 1, dtype=np.int64),
        spans.name[pos],
        np.full(nf, push_cat, dtype=np.int32),
        (order[where] + 1).astype(np.int64),
        np.minimum(push_ts[sub_rec], dst_ts),
        spans.tid[pos],
        dst_ts,
    )
