"""Hostile and unlucky files: each is refused with a clear error, fast and in bounded memory.

Every file here is small and built in the test. Each load must end in well under a second with a
peak (``tracemalloc``: NumPy's buffers included) far below 200 MB, raising
:class:`~opprof.trace.TraceFormatError` (``MXNetError`` for ``.params``) that names the file, the
member and what is wrong: never MemoryError, RecursionError, OverflowError or AttributeError,
never a hang.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import struct
import time
import tracemalloc
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opprof.engine import MXNetError
from opprof.nd import serialize
from opprof.trace import TraceFormatError, load
from opprof.trace.synthetic import synthetic_trace

MB = 1 << 20
TIME_LIMIT = 2.0
MEMORY_LIMIT = 200 * MB


def _bounded(fn: Callable[[], Any], error: type[BaseException] = TraceFormatError) -> str:
    """Run ``fn``, which must raise ``error`` within the time and memory bounds; its message."""
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(error) as info:
            fn()
    finally:
        elapsed = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert elapsed < TIME_LIMIT, f"took {elapsed:.2f} s"
    assert peak < MEMORY_LIMIT, f"peak {peak / MB:.0f} MB"
    return str(info.value)


# ------------------------------------------------------------------------------ building files
def _valid_opprof(path: Path, n: int = 60, compress: bool = True) -> Path:
    synthetic_trace(n).save(path, compress=compress)
    return path


def _replace_member(path: Path, member: str, write: Callable[[zipfile.ZipFile, str], None]) -> None:
    with zipfile.ZipFile(path) as z:
        items = [(i, z.read(i.filename)) for i in z.infolist() if i.filename != member]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for info, data in items:
            z.writestr(info, data)
        write(z, member)


def _npy_header(dtype: Any, shape: tuple[int, ...]) -> bytes:
    buf = io.BytesIO()
    descr = np.lib.format.dtype_to_descr(np.dtype(dtype))
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def _deflated(z: zipfile.ZipFile, name: str, head: bytes, zeros: int, tail: bytes = b"") -> None:
    """Member ``name``: ``head``, ``zeros`` zero bytes (a megabyte at a time), ``tail``, deflated."""
    info = zipfile.ZipInfo(name)
    info.compress_type = zipfile.ZIP_DEFLATED
    with z.open(info, "w", force_zip64=True) as f:
        f.write(head)
        chunk = bytes(MB)
        for _ in range(zeros // MB):
            f.write(chunk)
        f.write(tail)


def _header(path: Path) -> dict[str, Any]:
    with zipfile.ZipFile(path) as z:
        return json.loads(z.read("opprof.json"))  # type: ignore[no-any-return]


def _with_header(path: Path, raw: bytes) -> None:
    def write(z: zipfile.ZipFile, name: str) -> None:
        info = zipfile.ZipInfo(name)
        info.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(info, raw, compresslevel=9)

    _replace_member(path, "opprof.json", write)


# ------------------------------------------------------------------------------ .opprof
def test_a_member_that_inflates_a_thousandfold_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = _valid_opprof(tmp_path / "bomb.opprof")
    nbytes = 128 * MB
    _replace_member(path, "spans.start.npy", lambda z, name: _deflated(z, name, _npy_header(np.int64, (nbytes // 8,)), nbytes))
    assert os.path.getsize(path) < nbytes / 500
    msg = _bounded(lambda: load(path))
    assert str(path) in msg and "ZIP bomb" in msg and "limit" in msg


def test_a_column_whose_header_claims_more_than_its_member_holds_is_refused(tmp_path: Path) -> None:
    path = _valid_opprof(tmp_path / "lie.opprof")
    # The .npy header says a billion int64s (8 GB); the member holds 80 bytes of them.
    _replace_member(path, "spans.end.npy", lambda z, name: z.writestr(name, _npy_header(np.int64, (10**9,)) + bytes(80)))
    msg = _bounded(lambda: load(path))
    assert str(path) in msg and "spans.end" in msg and "declares shape (1000000000,)" in msg


def test_a_column_with_another_dtype_is_refused_before_its_data_is_read(tmp_path: Path) -> None:
    path = _valid_opprof(tmp_path / "dtype.opprof")
    _replace_member(path, "spans.tid.npy", lambda z, name: z.writestr(name, _npy_header(np.float32, (4,)) + bytes(16)))
    msg = _bounded(lambda: load(path))
    assert "spans.tid" in msg and "dtype float32" in msg


def test_a_string_table_of_millions_of_entries_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    path = _valid_opprof(tmp_path / "strings.opprof")
    raw = json.dumps(_header(path), separators=(",", ":")).encode()
    key = b'"span_strings":['
    at = raw.index(key) + len(key)
    _with_header(path, raw[:at] + b'"",' * 8_000_000 + raw[at:])  # 24 MB of JSON in a ~25 KB file
    assert os.path.getsize(path) < 200_000
    msg = _bounded(lambda: load(path))
    assert str(path) in msg and "opprof.json" in msg and "limit" in msg


def test_json_nested_too_deep_in_the_header_is_a_format_error(tmp_path: Path) -> None:
    path = _valid_opprof(tmp_path / "deep.opprof")
    raw = json.dumps(_header(path), separators=(",", ":")).encode()
    _with_header(path, raw.replace(b'"metadata":{', b'"metadata":{"deep":' + b"[" * 100_000 + b"]" * 100_000 + b","))
    msg = _bounded(lambda: load(path))
    assert str(path) in msg and "opprof.json" in msg


def test_header_fields_of_the_wrong_shape_are_format_errors(tmp_path: Path) -> None:
    path = _valid_opprof(tmp_path / "shape.opprof")
    header = _header(path)
    header["threads"] = [[1, "a"]]  # a row too short
    header["counters"] = 5
    _with_header(path, json.dumps(header).encode())
    msg = _bounded(lambda: load(path))
    assert str(path) in msg and "opprof.json" in msg


def test_validate_of_a_trace_whose_invocation_id_is_a_billion_is_quick(tmp_path: Path) -> None:
    """Ids are labels: an invocation id of 10^9 costs what 0 does (a trace without the engine's
    edges; with them, see the next test)."""
    trace = synthetic_trace(200)
    inv = trace.table.inv
    inv[inv == inv.max()] = 10**9
    trace.save(tmp_path / "inv.opprof")
    loaded = load(tmp_path / "inv.opprof")
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        problems = loaded.validate()
    finally:
        elapsed = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert problems == []
    assert elapsed < TIME_LIMIT and peak < MEMORY_LIMIT


def test_validate_of_a_profile_whose_invocation_id_is_a_billion_is_quick(tmp_path: Path) -> None:
    import opprof
    from opprof.demo import train

    with opprof.profile() as prof:
        train(steps=1)
    inv = prof.trace.table.inv
    inv[inv == inv.max()] = 10**9  # ids are labels: the critical path once sized arrays by them (8 GB)
    trace = opprof.trace.Trace(prof.trace.threads, prof.trace.table, metadata=prof.trace.metadata, ops=prof.trace.ops)
    tracemalloc.start()
    start = time.perf_counter()
    try:
        trace.validate()
        trace.critical_path()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert time.perf_counter() - start < TIME_LIMIT and peak < MEMORY_LIMIT


# ------------------------------------------------------------------------------ Chrome JSON
def test_a_gzip_that_inflates_a_thousandfold_is_refused_at_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "bomb.json.gz"
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(b'{"traceEvents": [')
        chunk = b" " * MB
        for _ in range(128):
            f.write(chunk)
        f.write(b"]}")
    assert os.path.getsize(path) < MB
    msg = _bounded(lambda: load(path))
    assert str(path) in msg and "gzip bomb" in msg and "67,108,864" in msg


def test_json_args_nested_too_deep_are_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    deep = b"[" * 200_000 + b"]" * 200_000
    path.write_bytes(
        b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": 1, "pid": 0, "tid": 0, "args": {"a": ' + deep + b"}}]}"
    )
    msg = _bounded(lambda: load(path))
    assert str(path) in msg


@pytest.mark.parametrize("special", ["/dev/zero", "fifo", "directory"])
def test_what_is_not_a_regular_file_is_refused_without_reading_it(tmp_path: Path, special: str) -> None:
    if special == "fifo":
        path = str(tmp_path / "pipe")
        os.mkfifo(path)  # opening it would block until a writer came
    elif special == "directory":
        path = str(tmp_path)
    else:
        path = special
    msg = _bounded(lambda: load(path))
    assert path in msg and "regular file" in msg


# ------------------------------------------------------------------------------ .params
def _params(*parts: bytes) -> bytes:
    return struct.pack("<QQ", 0x112, 0) + b"".join(parts)


def _array_head(shape: tuple[int, ...], flag: int = 0) -> bytes:
    return struct.pack(f"<IiI{len(shape)}q", 0xF993FAC9, 0, len(shape), *shape) + struct.pack("<iii", 1, 0, flag)


@pytest.mark.parametrize("count", [1000, (1 << 64) - 1])
def test_a_params_file_with_a_negative_size_is_refused_not_looped(tmp_path: Path, count: int) -> None:
    path = tmp_path / "loop.params"
    # An array of -10 float32s steps the reader back over its own 40-byte record: before, with
    # this many arrays to read, nd.load read the same record forever.
    body = _array_head((-10, 1)) + bytes(MB)
    path.write_bytes(_params(struct.pack("<Q", count), body))
    msg = _bounded(lambda: serialize.load(path), MXNetError)
    assert str(path) in msg and "byte" in msg and ("negative dimension" in msg or "count" in msg)


def test_a_params_array_with_a_negative_dimension_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "neg.params"
    path.write_bytes(_params(struct.pack("<Q", 1), _array_head((-2, -3)) + bytes(24), struct.pack("<Q", 0)))
    msg = _bounded(lambda: serialize.load(path), MXNetError)
    assert (
        str(path) in msg and "negative dimension" in msg and "byte 36" in msg
    )  # the list header, the count, magic, storage type, ndim


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (struct.pack("<Q", 10**12), "array count"),
        (struct.pack("<Q", 1) + struct.pack("<IiI", 0xF993FAC9, 0, 10**9), "dimensions"),
        (struct.pack("<Q", 1) + _array_head((10**9, 10**9, 10**9)) + bytes(64), "cut short"),
        (struct.pack("<QQ", 0, 10**15), "name count"),
        (struct.pack("<QQQ", 0, 1, 10**15), "name at byte"),
    ],
)
def test_params_counts_and_sizes_past_the_file_are_refused(tmp_path: Path, body: bytes, words: str) -> None:
    path = tmp_path / "big.params"
    path.write_bytes(_params(body))
    msg = _bounded(lambda: serialize.load(path), MXNetError)
    assert str(path) in msg and words in msg


def test_params_load_refuses_what_is_not_a_regular_file() -> None:
    msg = _bounded(lambda: serialize.load("/dev/zero"), MXNetError)
    assert "/dev/zero" in msg and "regular file" in msg


# ------------------------------------------------------------------------------ mutated bytes
@pytest.fixture(scope="module")
def valid_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    d = tmp_path_factory.mktemp("valid")
    trace = synthetic_trace(40)
    out = {}
    for name in ("t.opprof", "t.json"):
        trace.save(d / name)
        out[name] = (d / name).read_bytes()
    return out


_MUTATIONS = st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=6)


@pytest.mark.parametrize("name", ["t.opprof", "t.json"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=_MUTATIONS, cut=st.one_of(st.none(), st.floats(0, 1)))
def test_mutated_files_load_or_raise_a_format_error(
    tmp_path: Path, valid_files: dict[str, bytes], name: str, mutations: list[tuple[float, int]], cut: float | None
) -> None:
    data = bytearray(valid_files[name])
    for where, byte in mutations:
        data[int(where * len(data))] = byte
    if cut is not None:
        data = data[: int(cut * len(data))]
    path = tmp_path / name
    path.write_bytes(bytes(data))
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            load(path)
    except TraceFormatError as e:
        assert str(path) in str(e)
    assert time.perf_counter() - t0 < TIME_LIMIT


def test_thread_ids_are_labels_even_huge_ones() -> None:
    """A sub-op is inline when it runs on one of its family's Python threads: with tids near 2^62
    (a file may hold any), the (family, thread) key must not overflow into a wrong match."""
    from opprof.trace.analysis.split import inline_subops

    big = 2**62 + 7
    fam = np.array([0, 0, 0, 1, 1])
    tid = np.array([big, 3, big, 5, big - 1])
    is_py = np.array([True, True, False, True, False])
    is_sub = ~is_py
    assert inline_subops(fam, tid, is_py, is_sub, 2).tolist() == [False, False, True, False, False]
