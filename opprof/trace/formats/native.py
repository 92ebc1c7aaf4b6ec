"""opprof's own trace file (``.opprof``): the trace's columns as NumPy arrays in a ZIP, lossless.

Why this format: a trace *is* columns (:mod:`.columns`), and NumPy's ``.npy`` inside a ZIP
(``np.savez``) stores them as they are in memory, so loading is a copy per column with no
parsing at all, and opening one is plain data: each member's ``.npy`` header is read and checked
(the expected dtype, never an object array, a size that matches what the ZIP declares, within a
cap of the file's size) before its bytes are, so nothing in a file is ever executed and a small
hostile file cannot make a large allocation. Arrow IPC would do as well, at the price of a
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
import stat
import zipfile
import zlib
from typing import Any

import numpy as np

from ..columns import FlowTable, SpanTable
from ..data import TraceData
from ..memory import MemoryEvents
from ..ops import OpTable
from ..records import CounterSample, Instant, ThreadInfo
from ..threadstates import ThreadStates
from .jsonio import TraceFormatError, TraceSaveError, check_regular_file, dumps, loads

__all__ = ["FORMAT", "VERSION", "is_native", "load", "save"]

FORMAT = "opprof"
#: 2 added the engine's side: ``spans.op``, ``spans.cpu`` and the ``ops.*`` columns (:mod:`.ops`);
#: a version 1 file reads as a trace without edges.
VERSION = 2
HEADER = "opprof.json"
_ZIP_MAGIC = b"PK\x03\x04"

#: A file is refused when its members would inflate past ``max(INFLATION_FLOOR, MAX_INFLATION x
#: its size)`` (checked on the sizes the ZIP declares before anything is read, and each read bounded
#: by them): deflate makes 1,000x of zeros, so a 2 MB file could otherwise ask for 2 GB. Real files
#: are 1x (the default, uncompressed) to ~5x (``compress=True``, measured), 2x for a profile.
MAX_INFLATION = 50
INFLATION_FLOOR = 64 << 20
#: The JSON header: parsing builds Python objects of up to ~30x its bytes (4 MB of `[],`: ~130 MB), so it is held tighter.
MAX_HEADER_INFLATION = 50
HEADER_FLOOR = 4 << 20
_CHUNK = 1 << 20
#: What reading a damaged member raises (an encrypted one: RuntimeError; an unknown method: NotImplementedError).
_ZIP_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError)

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
SPAN_COLUMNS_V2: dict[str, Any] = {"op": np.int64, "cpu": np.int64, "numpy_peak": np.int64}
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
#: Every allocation and free of an array's storage (:mod:`..memory`), where memory was recorded.
MEMORY_COLUMNS: dict[str, Any] = {
    "ts": np.int64,
    "storage": np.int64,
    "var": np.int64,
    "nbytes": np.int64,
    "pid": np.int64,
    "site": np.int64,
}
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
    """Whether ``path`` holds an opprof trace file (by content: a ZIP with ``opprof.json``; a ZIP
    too broken to list counts, so that :func:`load` says what is wrong with it).

    Only a regular file is opened: a FIFO would block here, a device never end."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as f:
            if f.read(4) != _ZIP_MAGIC:
                return False
    except OSError:
        return False
    try:
        with zipfile.ZipFile(path) as z:
            return HEADER in z.namelist()
    except (OSError, ValueError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, NotImplementedError):
        return True


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
        # An extra key today's readers skip (the version stays): older ones open it without memory.
        "memory": trace.memory is not None,
        "memory_sites": list(trace.memory.sites) if trace.memory is not None else None,
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
    if trace.memory is not None:
        m = trace.memory
        arrays.update({f"memory.{k}": np.ascontiguousarray(getattr(m, k), dtype=dt) for k, dt in MEMORY_COLUMNS.items()})
    try:
        head = dumps(header)
    except TypeError as e:
        raise TraceSaveError(f"cannot save {path}: the trace holds a value JSON cannot store ({e})") from None
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
    """Read a native trace file; :class:`TraceFormatError` says what is wrong and where.

    Nothing is inflated before its declared size is checked against what the file can hold (see
    :data:`MAX_INFLATION`), and every read is bounded by that size: a small hostile file is refused
    in milliseconds, never read into gigabytes."""
    check_regular_file(path)
    try:
        zf = zipfile.ZipFile(path)
    except (OSError, ValueError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, NotImplementedError) as e:
        raise TraceFormatError(f"{path}: not a readable opprof trace file ({e})") from None
    with zf:
        try:
            z = _Members(zf, os.stat(path).st_size)
            raw = z.header()
            try:
                header = loads(raw)
            except (ValueError, RecursionError) as e:
                raise TraceFormatError(f"{HEADER} is not valid JSON ({_short(e)})") from None
            del raw
            return _from_members(z, header)
        except TraceFormatError as e:
            raise TraceFormatError(f"{path}: {e}") from None
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError, RecursionError) as e:
            raise TraceFormatError(f"{path}: {HEADER}: malformed field: {type(e).__name__}: {_short(e)}") from None
        except MemoryError:
            raise TraceFormatError(f"{path}: too large to load here (out of memory)") from None


def _short(e: BaseException) -> str:
    msg = str(e)
    return msg if len(msg) <= 200 else msg[:200] + "…"


def _from_members(z: _Members, header: Any) -> TraceData:
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise TraceFormatError(f"{HEADER} does not say format {FORMAT!r}")
    version = header.get("version")
    if not isinstance(version, int) or version < 1:
        raise TraceFormatError(f"{HEADER} has no valid version (got {version!r})")
    if version > VERSION:
        raise TraceFormatError(f"format version {version} is newer than this opprof reads ({VERSION}); upgrade opprof")
    names = z.columns
    spans = _columns(z, names, "spans", SPAN_COLUMNS)
    if version >= 2:
        present = {k: dt for k, dt in SPAN_COLUMNS_V2.items() if f"spans.{k}" in names}
        spans.update(_columns(z, names, "spans", present))
    flows = _columns(z, names, "flows", FLOW_COLUMNS)
    ops = _ops(header, _columns(z, names, "ops", OP_COLUMNS)) if header.get("op_strings") is not None else None
    trace = _trace(header, spans, flows)
    trace.ops = ops
    trace.thread_states = (
        _states(header, _columns(z, names, "states", STATE_COLUMNS)) if header.get("state_period_ns") is not None else None
    )
    if header.get("memory") is True:
        # Older files lack pid (before merged traces had memory: one process) and site (before
        # alive arrays named their line): the columns a file has, and defaults for the rest.
        spec = {k: dt for k, dt in MEMORY_COLUMNS.items() if k not in ("pid", "site") or f"memory.{k}" in names}
        trace.memory = _memory(_columns(z, names, "memory", spec), header.get("memory_sites") or [])
    return trace


class _Members:
    """The ZIP's members, each checked against the sizes it declares before a byte is inflated."""

    def __init__(self, zf: zipfile.ZipFile, file_size: int) -> None:
        self.zf = zf
        self.infos = {i.filename: i for i in zf.infolist()}
        #: The column members, by name without ``.npy`` (as ``np.load(...).files`` names them).
        self.columns = {n[:-4] for n in self.infos if n.endswith(".npy")}
        self.file_size = file_size
        self.limit = max(INFLATION_FLOOR, MAX_INFLATION * file_size)
        total = sum(i.file_size for n, i in self.infos.items() if n.endswith(".npy") or n == HEADER)
        if total > self.limit:
            raise TraceFormatError(
                f"its members declare {total:,} bytes inflated, more than the limit of {self.limit:,} for a file "
                f"of {file_size:,} bytes ({MAX_INFLATION}x its size, at least {INFLATION_FLOOR:,}): refused as a ZIP bomb"
            )

    def header(self) -> bytes:
        info = self.infos.get(HEADER)
        if info is None:
            raise TraceFormatError(f"no {HEADER} inside: not an opprof trace file")
        limit = max(HEADER_FLOOR, MAX_HEADER_INFLATION * self.file_size)
        if info.file_size > limit:
            raise TraceFormatError(
                f"{HEADER} declares {info.file_size:,} bytes inflated, more than the limit of {limit:,} for a file "
                f"of {self.file_size:,} bytes ({MAX_HEADER_INFLATION}x its size, at least {HEADER_FLOOR:,})"
            )
        try:
            with self.zf.open(info) as f:
                raw = f.read(limit + 1)  # bounded whatever the ZIP declared
        except _ZIP_ERRORS as e:
            raise TraceFormatError(f"cannot read {HEADER}: {_short(e)}") from None
        if len(raw) > limit:
            raise TraceFormatError(f"{HEADER} inflates past the limit of {limit:,} bytes")
        return raw

    def array(self, member: str, dtype: Any) -> np.ndarray:
        """Column ``member`` (``spans.start``), its dtype, shape and size checked before its data is read."""
        info = self.infos[f"{member}.npy"]
        want = np.dtype(dtype)
        try:
            with self.zf.open(info) as f:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, fortran, dt = np.lib.format.read_array_header_1_0(f)
                elif version == (2, 0):
                    shape, fortran, dt = np.lib.format.read_array_header_2_0(f)
                else:
                    raise TraceFormatError(f"column {member}: .npy format version {version} is not read")
                if dt.hasobject:  # what np.load(..., allow_pickle=False) refuses too
                    raise TraceFormatError(
                        f"column {member} holds Python objects (a NumPy object array): refused, never unpickled"
                    )
                if dt != want:
                    raise TraceFormatError(f"column {member} has dtype {dt}, expected {want}")
                if not all(type(d) is int and d >= 0 for d in shape):
                    raise TraceFormatError(f"column {member} declares an invalid shape {shape!r}")
                count = 1
                for d in shape:
                    count *= d
                nbytes = count * dt.itemsize
                data_size = info.file_size - f.tell()
                if nbytes != data_size:
                    raise TraceFormatError(
                        f"column {member} declares shape {shape} ({nbytes:,} bytes) but the member holds {data_size:,} bytes"
                    )
                out = np.empty(count, dtype=dt)
                buf = out.view(np.uint8)
                pos = 0
                while pos < nbytes:  # bounded by the declared size, checked above against the file
                    chunk = f.read(min(_CHUNK, nbytes - pos))
                    if not chunk:
                        raise TraceFormatError(f"column {member} is cut short at byte {pos:,} of {nbytes:,}")
                    buf[pos : pos + len(chunk)] = np.frombuffer(chunk, dtype=np.uint8)
                    pos += len(chunk)
        except TraceFormatError:
            raise
        except (*_ZIP_ERRORS, SyntaxError) as e:
            raise TraceFormatError(f"column {member} cannot be read: {type(e).__name__}: {_short(e)}") from None
        return out.reshape(shape, order="F" if fortran else "C")


def _columns(z: _Members, names: set[str], part: str, spec: dict[str, Any]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for k, dtype in spec.items():
        member = f"{part}.{k}"
        if member not in names:
            raise TraceFormatError(f"column {member} is missing")
        out[k] = z.array(member, dtype)
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


def _memory(c: dict[str, np.ndarray], sites: Any) -> MemoryEvents:
    n = len(c["ts"])
    for k in c:
        if c[k].shape != (n,):
            raise TraceFormatError(f"column memory.{k} has shape {c[k].shape}, expected ({n},)")
    if not isinstance(sites, list) or not all(type(s) is str for s in sites):
        raise TraceFormatError("memory_sites is not a list of strings")
    memory = MemoryEvents(c["ts"], c["storage"], c["var"], c["nbytes"], c.get("pid"), c.get("site"), tuple(sites))
    problems = memory.check()
    if problems:
        raise TraceFormatError(f"the memory events are inconsistent: {problems[0]}")
    return memory


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
