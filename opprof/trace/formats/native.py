"""opprof's own trace file (``.opprof``): the trace's columns as NumPy arrays in a ZIP, lossless.

Why this format: a trace *is* columns (:mod:`.columns`), and NumPy's ``.npy`` inside a ZIP
(``np.savez``) stores them as they are in memory, so loading is a copy per column with no
parsing at all, and opening one is plain data: ``np.load(..., allow_pickle=False)`` refuses object
arrays, so nothing in a file is ever executed. Arrow IPC would do as well, at the price of a
~100 MB dependency for what NumPy, already required, does here.

Layout of the ZIP:

* ``opprof.json``: ``{"format": "opprof", "version": 2, ...}``, then the threads (``[tid, name,
  pid]``), the processes' names (``[pid, name]`` pairs, so pids stay ints; a file without them
  reads as a trace of one unnamed process), instants, counters, metadata, both string tables and
  the sparse span args (JSON, through orjson);
* ``spans.<column>.npy``, ``flows.<column>.npy`` and (a profile's) ``ops.<column>.npy``: one array
  per column, with the dtype of :class:`~.columns.SpanTable` / :class:`~.columns.FlowTable` /
  :class:`~.ops.OpTable` (the engine's edges, which Chrome JSON has no place for).

Members are stored without compression by default (``np.savez``): a 1M-span profile is 64 MB and
loads in ~0.1 s; ``compress=True`` (``np.savez_compressed``) makes it 12 MB, at ~2 s to write and
~0.2 s to read (measured on the shared 2-core machine). A reader refuses a version newer than its own, saying so.
"""

from __future__ import annotations

import os
import zipfile
from typing import Any

import numpy as np

from ..columns import FlowTable, SpanTable
from ..data import TraceData
from ..ops import OpTable
from ..records import CounterSample, Instant, ThreadInfo
from ..threadstates import ThreadStates
from .jsonio import TraceFormatError, dumps, loads

__all__ = ["FORMAT", "VERSION", "is_native", "load", "save"]

FORMAT = "opprof"
#: 2 added the engine's side: ``spans.op``, ``spans.cpu`` and the ``ops.*`` columns (:mod:`.ops`);
#: a version 1 file reads as a trace without edges.
VERSION = 2
HEADER = "opprof.json"
_ZIP_MAGIC = b"PK\x03\x04"

#: Each column and its dtype; a file's columns must match these exactly.
SPAN_COLUMNS: dict[str, Any] = {
    "start": np.int64,
    "end": np.int64,
    "tid": np.int64,
    "name": np.int32,
    "cat": np.int32,
    "role": np.int8,
    "inv": np.int64,
    "op_type": np.int32,
    "backward": np.int8,
    "split_at": np.int64,
    "split_ns": np.int64,
    "args_at": np.int64,
}
#: Columns a version 1 file does not have (then every span's is -1).
SPAN_COLUMNS_V2: dict[str, Any] = {"op": np.int64, "cpu": np.int64}
OP_COLUMNS: dict[str, Any] = {
    "op": np.int64,
    "kind": np.int8,
    "push": np.int64,
    "pusher": np.int64,
    "ready": np.int64,
    "by": np.int64,
    "var": np.int64,
    "site": np.int32,
    "acc_at": np.int64,
    "acc_var": np.int64,
    "acc_write": np.bool_,
}
#: Each thread's state over time (:mod:`..threadstates`): present only where the GIL was sampled,
#: an extra member older readers skip (so the version stays).
STATE_COLUMNS: dict[str, Any] = {"tid": np.int64, "state": np.int8, "start": np.int64, "end": np.int64, "holder": np.int64}
FLOW_COLUMNS: dict[str, Any] = {
    "id": np.int64,
    "name": np.int32,
    "cat": np.int32,
    "src_tid": np.int64,
    "src_ts": np.int64,
    "dst_tid": np.int64,
    "dst_ts": np.int64,
}
_PER_SPAN = ("start", "end", "tid", "name", "cat", "role", "inv", "op_type", "backward")


def is_native(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds an opprof trace file (by content: a ZIP with ``opprof.json``)."""
    try:
        with open(path, "rb") as f:
            if f.read(4) != _ZIP_MAGIC:
                return False
        with zipfile.ZipFile(path) as z:
            return HEADER in z.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def save(trace: TraceData, path: str | os.PathLike[str], *, compress: bool = False) -> None:
    """Write ``trace`` to ``path`` in the native format (see the module docstring)."""
    t, f = trace.table, trace.flow_table
    header = {
        "format": FORMAT,
        "version": VERSION,
        "spans": len(t),
        "flows": len(f),
        "span_strings": t.strings,
        "flow_strings": f.strings,
        "span_args": t.args,
        "threads": [[th.tid, th.name, th.pid] for th in trace.threads],
        # An extra key today's readers skip, so the version stays: a file of several processes
        # opens in an older opprof as a trace whose processes have no names.
        "processes": [[pid, name] for pid, name in sorted(trace.processes.items())],
        "instants": [[i.name, i.cat, i.tid, i.ts, i.args] for i in trace.instants],
        "counters": [[c.name, c.ts, c.values] for c in trace.counters],
        "metadata": trace.metadata,
        "op_strings": trace.ops.strings if trace.ops is not None else None,
        "state_period_ns": trace.thread_states.period_ns if trace.thread_states is not None else None,
    }
    arrays: dict[str, np.ndarray] = {
        f"spans.{k}": np.ascontiguousarray(getattr(t, k), dtype=dt) for k, dt in SPAN_COLUMNS.items()
    }
    # The engine's columns only where some span has them (a trace from another tool has none).
    arrays.update(
        {
            f"spans.{k}": np.ascontiguousarray(getattr(t, k), dtype=dt)
            for k, dt in SPAN_COLUMNS_V2.items()
            if np.any(getattr(t, k) >= 0)
        }
    )
    if trace.ops is not None:
        arrays.update({f"ops.{k}": np.ascontiguousarray(getattr(trace.ops, k), dtype=dt) for k, dt in OP_COLUMNS.items()})
    arrays.update({f"flows.{k}": np.ascontiguousarray(getattr(f, k), dtype=dt) for k, dt in FLOW_COLUMNS.items()})
    if trace.thread_states is not None:
        ts = trace.thread_states
        arrays.update({f"states.{k}": np.ascontiguousarray(getattr(ts, k), dtype=dt) for k, dt in STATE_COLUMNS.items()})
    try:
        head = dumps(header)
    except TypeError as e:
        raise TypeError(f"cannot save {path}: the trace holds a value JSON cannot store ({e})") from None
    # Written to a temporary name, then renamed: an interrupted save never leaves half a file.
    tmp = f"{os.fspath(path)}.partial"
    try:
        with open(tmp, "wb") as out:
            # Every array has a numeric dtype (forced above), so nothing here can need pickle.
            write: Any = np.savez_compressed if compress else np.savez
            write(out, **arrays)
        with zipfile.ZipFile(tmp, "a") as z:
            z.writestr(HEADER, head)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def load(path: str | os.PathLike[str]) -> TraceData:
    """Read a native trace file; :class:`TraceFormatError` says what is wrong and where."""
    try:
        z = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise TraceFormatError(f"{path}: not a readable opprof trace file ({e})") from None
    with z:
        names = set(z.files)
        try:
            with zipfile.ZipFile(path) as zf:
                raw = zf.read(HEADER)
        except KeyError:
            raise TraceFormatError(f"{path}: no {HEADER} inside: not an opprof trace file") from None
        except (OSError, zipfile.BadZipFile) as e:
            raise TraceFormatError(f"{path}: cannot read {HEADER}: {e}") from None
        try:
            header = loads(raw)
        except ValueError as e:
            raise TraceFormatError(f"{path}: {HEADER} is not valid JSON ({e})") from None
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise TraceFormatError(f"{path}: {HEADER} does not say format {FORMAT!r}")
        version = header.get("version")
        if not isinstance(version, int) or version < 1:
            raise TraceFormatError(f"{path}: {HEADER} has no valid version (got {version!r})")
        if version > VERSION:
            raise TraceFormatError(
                f"{path}: format version {version} is newer than this opprof reads ({VERSION}); upgrade opprof"
            )
        try:
            spans = _columns(z, names, "spans", SPAN_COLUMNS)
            if version >= 2:
                present = {k: dt for k, dt in SPAN_COLUMNS_V2.items() if f"spans.{k}" in names}
                spans.update(_columns(z, names, "spans", present))
            flows = _columns(z, names, "flows", FLOW_COLUMNS)
            ops = _ops(header, _columns(z, names, "ops", OP_COLUMNS)) if header.get("op_strings") is not None else None
            trace = _trace(header, spans, flows)
            trace.ops = ops
            trace.thread_states = (
                _states(header, _columns(z, names, "states", STATE_COLUMNS))
                if header.get("state_period_ns") is not None
                else None
            )
            return trace
        except TraceFormatError as e:
            raise TraceFormatError(f"{path}: {e}") from None
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise TraceFormatError(f"{path}: {HEADER}: malformed field: {type(e).__name__}: {e}") from None


def _columns(z: Any, names: set[str], part: str, spec: dict[str, Any]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for k, dtype in spec.items():
        member = f"{part}.{k}"
        if member not in names:
            raise TraceFormatError(f"column {member} is missing")
        a = z[member]
        if a.dtype != np.dtype(dtype):
            raise TraceFormatError(f"column {member} has dtype {a.dtype}, expected {np.dtype(dtype)}")
        out[k] = a
    return out


def _trace(header: dict[str, Any], c: dict[str, np.ndarray], fc: dict[str, np.ndarray]) -> TraceData:
    n, nf = int(header["spans"]), int(header["flows"])
    for k in _PER_SPAN:
        if c[k].shape != (n,):
            raise TraceFormatError(f"column spans.{k} has shape {c[k].shape}, expected ({n},)")
    for k in FLOW_COLUMNS:
        if fc[k].shape != (nf,):
            raise TraceFormatError(f"column flows.{k} has shape {fc[k].shape}, expected ({nf},)")
    strings, flow_strings = list(header["span_strings"]), list(header["flow_strings"])
    if not all(type(s) is str for s in strings) or not all(type(s) is str for s in flow_strings):
        raise TraceFormatError("a string table holds something other than strings")
    args = list(header["span_args"])
    k_split, k_args = len(c["split_at"]), len(c["args_at"])
    if c["split_ns"].shape != (k_split, 3):
        raise TraceFormatError(f"column spans.split_ns has shape {c['split_ns'].shape}, expected ({k_split}, 3)")
    if len(args) != k_args or not all(isinstance(a, dict) for a in args):
        raise TraceFormatError(f"span_args holds {len(args)} entries for {k_args} spans with args (each must be an object)")
    _check_codes("spans.name", c["name"], len(strings))
    _check_codes("spans.cat", c["cat"], len(strings))
    _check_codes("spans.op_type", c["op_type"], len(strings), allow_none=True)
    _check_codes("flows.name", fc["name"], len(flow_strings))
    _check_codes("flows.cat", fc["cat"], len(flow_strings))
    for member in ("split_at", "args_at"):
        at = c[member]
        if len(at) and (at.min() < 0 or at.max() >= n or np.any(at[1:] <= at[:-1])):
            raise TraceFormatError(f"column spans.{member} must hold ascending span indices below {n}")
    if n and (c["role"].min() < 0 or c["role"].max() > 6):
        raise TraceFormatError("column spans.role holds an unknown role code")
    for k in SPAN_COLUMNS_V2:
        if k in c and c[k].shape != (n,):
            raise TraceFormatError(f"column spans.{k} has shape {c[k].shape}, expected ({n},)")
    table = SpanTable(strings=strings, args=args, **{k: c[k] for k in (*SPAN_COLUMNS, *SPAN_COLUMNS_V2) if k in c})
    flows = FlowTable(flow_strings, **{k: fc[k] for k in FLOW_COLUMNS})
    threads = [ThreadInfo(int(tid), str(name), int(pid)) for tid, name, pid in header["threads"]]
    instants = [Instant(str(a), str(b), int(tid), int(ts), args_ or None) for a, b, tid, ts, args_ in header["instants"]]
    counters = [CounterSample(str(name), int(ts), dict(values)) for name, ts, values in header["counters"]]
    meta = header.get("metadata") or {}
    if not isinstance(meta, dict):
        raise TraceFormatError("metadata is not an object")
    processes = _processes(header.get("processes", []))
    return TraceData(
        threads=threads, spans=table, instants=instants, counters=counters, flows=flows, metadata=meta, processes=processes
    )


def _processes(rows: Any) -> dict[int, str]:
    """The header's ``processes``: ``[pid, name]`` pairs (absent before multi-process traces: none)."""
    if not isinstance(rows, list):
        raise TraceFormatError(f"processes is not a list of [pid, name] pairs (got {type(rows).__name__})")
    out: dict[int, str] = {}
    for k, row in enumerate(rows):
        if not (isinstance(row, list) and len(row) == 2 and type(row[0]) is int and type(row[1]) is str and row[0] not in out):
            raise TraceFormatError(f"processes entry {k} is not a [pid, name] pair of a new int pid and a string: {row!r}")
        out[row[0]] = row[1]
    return out


def _states(header: dict[str, Any], c: dict[str, np.ndarray]) -> ThreadStates:
    period = header["state_period_ns"]
    if type(period) is not int or period < 0:
        raise TraceFormatError(f"{HEADER}: state_period_ns must be a non-negative int, got {period!r}")
    n = len(c["tid"])
    for k in STATE_COLUMNS:
        if c[k].shape != (n,):
            raise TraceFormatError(f"column states.{k} has shape {c[k].shape}, expected ({n},)")
    states = ThreadStates(c["tid"], c["state"], c["start"], c["end"], c["holder"], period)
    problems = states.check()
    if problems:
        raise TraceFormatError(f"the thread states are inconsistent: {problems[0]}")
    return states


def _ops(header: dict[str, Any], c: dict[str, np.ndarray]) -> OpTable:
    strings = list(header["op_strings"])
    if not all(type(s) is str for s in strings):
        raise TraceFormatError("op_strings holds something other than strings")
    for k in ("kind", "push", "pusher", "ready", "by", "var", "site"):
        if c[k].shape != c["op"].shape:
            raise TraceFormatError(f"column ops.{k} has shape {c[k].shape}, expected {c['op'].shape}")
    ops = OpTable(strings=strings, **c)
    problems = ops.check()
    if problems:
        raise TraceFormatError(problems[0])
    return ops


def _check_codes(member: str, codes: np.ndarray, n_strings: int, *, allow_none: bool = False) -> None:
    if not len(codes):
        return
    lo = -1 if allow_none else 0
    if int(codes.min()) < lo or int(codes.max()) >= n_strings:
        raise TraceFormatError(f"column {member} refers to strings outside its table of {n_strings}")
