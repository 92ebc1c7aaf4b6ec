"""The trace model every layer shares: threads, spans, instants, counters, flows, metadata.

The profiler fills a :class:`Trace`; Chrome export/import, stats, the timeline widget and the
command line read only this. Times are integer nanoseconds on one clock; thread ids are small
integers (JavaScript-safe) with names.

Custom-operator work is marked in ``Span.args``: ``op_type``, ``invocation`` (a small int, unique
per invocation) and ``role``, one of :data:`ROLES`. A ``parent`` span covers one invocation from
the moment its engine op starts to the end of its ``Dummy_Wait``; it crosses threads, so it is not
part of any thread's nesting (Chrome export draws it on an async track instead).
"""

from __future__ import annotations

import gzip
import json
import os
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ROLES",
    "Span",
    "ThreadInfo",
    "Instant",
    "CounterSample",
    "Flow",
    "Trace",
    "CustomOpRow",
    "StatRow",
    "split_invocation",
    "validate",
    "load",
]

ROLES = ("parent", "python", "subop", "wait", "dummy_wait")
CHILD_ROLES = ("python", "subop", "wait", "dummy_wait")


class Span:
    """One timed piece of work on one thread (or, for a custom-op ``parent``, on no single thread)."""

    __slots__ = ("args", "cat", "end", "name", "start", "tid")

    def __init__(self, name: str, cat: str, tid: int, start: int, end: int, args: dict[str, Any] | None = None) -> None:
        self.name = name
        self.cat = cat
        self.tid = tid
        self.start = start
        self.end = end
        self.args = args

    @property
    def dur(self) -> int:
        return self.end - self.start

    @property
    def role(self) -> str | None:
        return self.args.get("role") if self.args else None

    @property
    def invocation(self) -> int | None:
        return self.args.get("invocation") if self.args else None

    def _key(self) -> tuple[Any, ...]:
        return (self.name, self.cat, self.tid, self.start, self.end, self.args or {})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Span) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((self.name, self.tid, self.start, self.end))

    def __repr__(self) -> str:
        return f"Span({self.name!r}, {self.cat!r}, tid={self.tid}, start={self.start}, end={self.end}, args={self.args!r})"


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    tid: int
    name: str
    pid: int = 0


@dataclass(frozen=True, slots=True)
class Instant:
    name: str
    cat: str
    tid: int
    ts: int
    args: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class CounterSample:
    name: str
    ts: int
    values: dict[str, float]


@dataclass(frozen=True, slots=True)
class Flow:
    """An arrow from where work was pushed (``src``) to the span that ran it (``dst``)."""

    id: int
    name: str
    cat: str
    src_tid: int
    src_ts: int
    dst_tid: int
    dst_ts: int


@dataclass(frozen=True, slots=True)
class StatRow:
    name: str
    cat: str
    count: int
    total_ns: int
    min_ns: int
    max_ns: int

    @property
    def avg_ns(self) -> float:
        return self.total_ns / self.count if self.count else 0.0


@dataclass(frozen=True, slots=True)
class CustomOpRow:
    """One custom-op invocation and where its wall time went (the three parts sum to ``wall_ns``)."""

    op_type: str
    backward: bool
    invocation: int
    start_ns: int
    wall_ns: int
    python_ns: int
    subops_ns: int
    waiting_ns: int
    error: str | None = None


@dataclass
class Trace:
    threads: list[ThreadInfo] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    instants: list[Instant] = field(default_factory=list)
    counters: list[CounterSample] = field(default_factory=list)
    flows: list[Flow] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------ queries
    def thread_name(self, tid: int) -> str:
        for t in self.threads:
            if t.tid == tid:
                return t.name
        return f"thread {tid}"

    def families(self) -> dict[int, list[Span]]:
        """Spans of each custom-op invocation, keyed by invocation id (parent included)."""
        fam: dict[int, list[Span]] = defaultdict(list)
        for s in self.spans:
            inv = s.invocation
            if inv is not None:
                fam[inv].append(s)
        return dict(fam)

    def stats(self) -> list[StatRow]:
        """Count, total, min and max duration per (category, name), largest total first."""
        acc: dict[tuple[str, str], list[int]] = {}
        for s in self.spans:
            d = s.end - s.start
            row = acc.get((s.cat, s.name))
            if row is None:
                acc[(s.cat, s.name)] = [1, d, d, d]
            else:
                row[0] += 1
                row[1] += d
                if d < row[2]:
                    row[2] = d
                if d > row[3]:
                    row[3] = d
        rows = [StatRow(name, cat, *v) for (cat, name), v in acc.items()]
        rows.sort(key=lambda r: (-r.total_ns, r.cat, r.name))
        return rows

    def custom_ops(self) -> list[CustomOpRow]:
        """One row per custom-op invocation, in start order."""
        rows = []
        for inv, spans in self.families().items():
            parent = next((s for s in spans if s.role == "parent"), None)
            if parent is None:
                continue
            py, sub, wait = split_invocation(parent, spans)
            a = parent.args or {}
            rows.append(
                CustomOpRow(
                    op_type=str(a.get("op_type", parent.name)),
                    backward=bool(a.get("backward", False)),
                    invocation=inv,
                    start_ns=parent.start,
                    wall_ns=parent.dur,
                    python_ns=py,
                    subops_ns=sub,
                    waiting_ns=wait,
                    error=a.get("error"),
                )
            )
        rows.sort(key=lambda r: (r.start_ns, r.invocation))
        return rows

    def validate(self) -> list[str]:
        return validate(self)

    # ------------------------------------------------------------------ files
    def to_chrome(self) -> dict[str, Any]:
        from .chrome import to_chrome

        return to_chrome(self)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write Chrome trace JSON (gzipped when the name ends in ``.gz``)."""
        from .chrome import save

        save(self, path)


def load(path: str | os.PathLike[str]) -> Trace:
    """Read a Chrome trace JSON file (``.json`` or ``.json.gz``) into a :class:`Trace`."""
    from .chrome import load as _load

    return _load(path)


# ---------------------------------------------------------------------------- attribution
def _union(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _subtract(xs: list[tuple[int, int]], ys: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``xs`` minus ``ys``; both sorted and disjoint."""
    out: list[tuple[int, int]] = []
    j = 0
    for a, b in xs:
        cur = a
        while j < len(ys) and ys[j][1] <= cur:
            j += 1
        k = j
        while k < len(ys) and ys[k][0] < b:
            ya, yb = ys[k]
            if ya > cur:
                out.append((cur, ya))
            cur = max(cur, yb)
            k += 1
        if cur < b:
            out.append((cur, b))
    return out


def _clip_len(xs: Iterable[tuple[int, int]], lo: int, hi: int) -> int:
    return sum(max(0, min(b, hi) - max(a, lo)) for a, b in xs)


def split_invocation(parent: Span, family: Iterable[Span]) -> tuple[int, int, int]:
    """Split the parent's wall time into (python, sub-ops, waiting) nanoseconds.

    At each instant the invocation is *python* if its Python runs and is neither blocked in a wait
    nor running a sub-operator inline, else *sub-ops* if one of its sub-operators executes, else
    *waiting* (queued behind other work, or the engine handing over). The three add up to the parent's duration exactly.
    """
    python, blocked, subops = [], [], []
    python_tids = set()
    for s in family:
        if s.role == "python":
            python.append((s.start, s.end))
            python_tids.add(s.tid)
    for s in family:
        r = s.role
        if r == "wait":
            blocked.append((s.start, s.end))
        elif r in ("subop", "dummy_wait"):
            subops.append((s.start, s.end))
            if s.tid in python_tids:
                # Run inline on the Python's own thread (the naive engine): not Python's own time.
                blocked.append((s.start, s.end))
    running = _subtract(_union(python), _union(blocked))
    busy = _subtract(_union(subops), running)
    lo, hi = parent.start, parent.end
    py = _clip_len(running, lo, hi)
    sub = _clip_len(busy, lo, hi)
    return py, sub, (hi - lo) - py - sub


# ---------------------------------------------------------------------------- validation
def _iter_thread_nesting(trace: Trace) -> Iterator[str]:
    by_tid: dict[int, list[Span]] = defaultdict(list)
    for s in trace.spans:
        if s.role != "parent":
            by_tid[s.tid].append(s)
    for tid, spans in by_tid.items():
        spans.sort(key=lambda s: (s.start, -s.end))
        stack: list[Span] = []
        for s in spans:
            while stack and stack[-1].end <= s.start:
                stack.pop()
            if stack and s.end > stack[-1].end:
                top = stack[-1]
                yield (
                    f"thread {tid} ({trace.thread_name(tid)}): {s.name!r} [{s.start}, {s.end}] overlaps "
                    f"{top.name!r} [{top.start}, {top.end}] without nesting"
                )
                continue
            stack.append(s)


def _iter_families(trace: Trace) -> Iterator[str]:
    for inv, spans in trace.families().items():
        parents = [s for s in spans if s.role == "parent"]
        if len(parents) != 1:
            yield f"invocation {inv}: {len(parents)} parent spans, expected 1"
            continue
        parent = parents[0]
        dummies = [s for s in spans if s.role == "dummy_wait"]
        if len(dummies) != 1:
            yield f"invocation {inv} ({parent.name}): {len(dummies)} Dummy_Wait spans, expected 1"
        elif dummies[0].end != parent.end:
            yield f"invocation {inv} ({parent.name}): parent ends at {parent.end}, its Dummy_Wait at {dummies[0].end}"
        if not any(s.role == "python" for s in spans):
            yield f"invocation {inv} ({parent.name}): no python span"
        prefix = parent.name + "::"
        for s in spans:
            if s is parent:
                continue
            if s.role not in CHILD_ROLES:
                yield f"invocation {inv}: span {s.name!r} has unknown role {s.role!r}"
            if not s.name.startswith(prefix):
                yield f"invocation {inv}: child {s.name!r} is not named {prefix}<op>"
            if s.start < parent.start or s.end > parent.end:
                yield (
                    f"invocation {inv}: {s.name!r} [{s.start}, {s.end}] is outside its parent "
                    f"{parent.name!r} [{parent.start}, {parent.end}]"
                )
        a = parent.args or {}
        if all(k in a for k in ("python_us", "subops_us", "waiting_us")):
            total = a["python_us"] + a["subops_us"] + a["waiting_us"]
            if abs(total - parent.dur / 1e3) > 0.01:
                yield f"invocation {inv}: split {total:.3f} us does not sum to the parent's {parent.dur / 1e3:.3f} us"


def validate(trace: Trace) -> list[str]:
    """Every broken invariant of ``trace``, as readable messages (empty: the trace is valid).

    Checks: spans end after they start, on known threads; spans nest on each thread; each custom-op
    invocation has one parent, one ``Dummy_Wait`` ending with it, a python span, children named
    ``Type::op`` inside it, and a split summing to its duration; flows go forward in time.
    """
    problems: list[str] = []
    tids = {t.tid for t in trace.threads}
    for i, s in enumerate(trace.spans):
        if s.end < s.start:
            problems.append(f"span {i} {s.name!r}: ends at {s.end} before it starts at {s.start}")
        if s.tid not in tids:
            problems.append(f"span {i} {s.name!r}: thread {s.tid} is not in trace.threads")
    problems.extend(_iter_thread_nesting(trace))
    problems.extend(_iter_families(trace))
    for f in trace.flows:
        if f.dst_ts < f.src_ts:
            problems.append(f"flow {f.id} {f.name!r}: arrives at {f.dst_ts} before it leaves at {f.src_ts}")
    return problems


def dumps_json(obj: Any) -> bytes:
    """Serialise with orjson when installed (10x faster on big traces), else the standard library."""
    try:
        import orjson
    except ImportError:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    return orjson.dumps(obj)


def loads_json(data: bytes) -> Any:
    try:
        import orjson
    except ImportError:
        return json.loads(data)
    return orjson.loads(data)


def open_maybe_gzip(path: str | os.PathLike[str], mode: str) -> Any:
    return gzip.open(path, mode) if str(path).endswith(".gz") else open(path, mode)
