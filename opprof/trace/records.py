"""The records a trace is made of: threads, spans, instants, counters, flows, and what roles mean.

Times are integer nanoseconds on one clock; thread ids are small integers (JavaScript-safe) with
names. Custom-operator work is marked in ``Span.args``: ``op_type``, ``invocation`` (a small int,
unique per invocation) and ``role``, a :class:`Role`. A ``parent`` span covers one invocation from
the moment its engine op starts to the end of its ``Dummy_Wait``; it crosses threads, so it is not
part of any thread's nesting (Chrome export draws it on an async track instead).

Everything here is data: what one record means. How a trace holds millions of them is
:mod:`.columns` (and :class:`~.data.TraceData`); these classes are the rows users build and read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = [
    "BACKPRESSURE",
    "CPUS_KEY",
    "CUSTOM_OP",
    "CUSTOM_POOL",
    "CUSTOM_THREAD_PREFIX",
    "DEFAULT_MAX_PENDING",
    "ENGINE_CATEGORY",
    "ENGINE_POOL",
    "ENGINE_THREAD_PREFIX",
    "FAMILY_ARGS",
    "GC_CATEGORY",
    "GC_METADATA",
    "MAX_PENDING_KEY",
    "OPERATOR",
    "ROLE_OF",
    "SPLIT_ARGS",
    "USER",
    "WAIT",
    "Blocker",
    "CounterSample",
    "CustomOpRow",
    "EnginePool",
    "Flow",
    "Instant",
    "Role",
    "Span",
    "ThreadInfo",
    "gc_span_name",
    "recorded_cpus",
    "role_of",
]


class Role(str, Enum):
    """What a span is to its custom-op invocation (``None`` for a span outside any)."""

    PARENT = "parent"  # the invocation as a whole, from its engine op's start to its Dummy_Wait's end
    PYTHON = "python"  # its forward()/backward() on the custom-op thread
    SUBOP = "subop"  # an engine op its Python pushed
    WAIT = "wait"  # its Python blocked in a wait
    DUMMY_WAIT = "dummy_wait"  # the completion op that releases its outputs

    # Looking a member up (``Role.PARENT``) costs ~140 ns on Python 3.11, six times a local name:
    # loops over every span bind the members they compare with to locals first.

    # Shown and formatted as the plain word, as in the Chrome args it is written to.
    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


#: Parts of an invocation other than its parent, in the order the timeline stacks them.
CHILD_ROLES = (Role.PYTHON, Role.SUBOP, Role.WAIT, Role.DUMMY_WAIT)
#: A file's ``args["role"]`` word -> its Role: readers look it up inline (a million spans load).
ROLE_OF: dict[str, Role] = {r.value: r for r in Role}


def role_of(value: Any) -> Role | None:
    """The :class:`Role` a file's ``args["role"]`` names, or None."""
    return ROLE_OF.get(value) if isinstance(value, str) else None


# Span categories opprof writes. One name for custom-op work, on spans and on Chrome's async tracks.
OPERATOR = "operator"
CUSTOM_OP = "custom_op"
WAIT = "wait"
USER = "user"
#: The engine's own spans that are no op: a push held by back-pressure (:data:`BACKPRESSURE`).
ENGINE_CATEGORY = "engine"
#: The span of a push the threaded engine held while too many ops were pending (``max_pending``,
#: 128): it waits until half of them have run, so that a program pushing in a loop does not
#: allocate every output at once. The pushing thread is blocked meanwhile, its Python not running.
BACKPRESSURE = "Backpressure"
#: A collection of Python's cyclic garbage collector: a span on the thread whose allocation set it
#: off, named by its generation (:func:`gc_span_name`). The collector holds the GIL throughout, so
#: another thread's wait for the GIL meanwhile is named after it, not after the op it interrupted.
GC_CATEGORY = "gc"
#: Metadata: every collection while recording, on any thread (``collections``, ``ns``, and per
#: generation), including those of threads that recorded nothing else and so have no lane.
GC_METADATA = "gc"


def gc_span_name(generation: int) -> str:
    """The span name of a collection of ``generation`` (0-2: the youngest objects to all of them)."""
    return f"garbage collection (generation {generation})"


#: Metadata: the threaded engine's ``max_pending`` while recording (None for the naive engine;
#: absent in files made before it was recorded), which a what-if replay holds pushes at.
MAX_PENDING_KEY = "max_pending"
#: The threaded engine's ``max_pending`` unless told otherwise (and what a what-if takes for a file
#: made before the key was recorded that shows held pushes).
DEFAULT_MAX_PENDING = 128
#: Metadata: the CPUs the recording process could run on (its affinity), which bound how much of
#: its work a what-if can run at once.
CPUS_KEY = "cpus"


def recorded_cpus(metadata: Mapping[str, Any]) -> int | None:
    """``metadata[CPUS_KEY]`` read back: the CPUs the recording had; None where it is not a positive
    int (an older file, another tool's). The one reader: a trace read on another machine has that
    machine's ``os.cpu_count()``, not the recording's."""
    cpus = metadata.get(CPUS_KEY)
    return cpus if isinstance(cpus, int) and not isinstance(cpus, bool) and cpus >= 1 else None


#: Where the profiler stores an invocation's python / sub-ops / waiting split on its parent (µs).
SPLIT_ARGS = ("python_us", "subops_us", "waiting_us")
#: Args that carry a span's structure rather than the user's data: views show them as structure
#: (colour, family, split bars), not as text.
FAMILY_ARGS = frozenset({"op_type", "role", "invocation", "backward", *SPLIT_ARGS})


class Span:
    """One timed piece of work on one thread (or, for a custom-op ``parent``, on no single thread)."""

    __slots__ = ("args", "cat", "cpu", "end", "name", "numpy_peak", "op", "start", "tid")

    def __init__(
        self,
        name: str,
        cat: str,
        tid: int,
        start: int,
        end: int,
        args: dict[str, Any] | None = None,
        op: int = -1,
        cpu: int = -1,
        numpy_peak: int = -1,
    ) -> None:
        self.name = name
        self.cat = cat
        self.tid = tid
        self.start = start
        self.end = end
        self.args = args
        #: The engine op it ran (its id in ``trace.ops``; -1 for none): what links a span to the
        #: engine's edges, so a list read and written back keeps them (the analyses need it).
        self.op = op
        #: A custom op's Python's CPU time (ns; -1 where not measured).
        self.cpu = cpu
        #: A custom op's Python: the most bytes of NumPy data it held at once, of what it allocated
        #: itself (its temporaries; -1 where not measured: see :mod:`opprof.profiler.npmem`).
        self.numpy_peak = numpy_peak

    @property
    def dur(self) -> int:
        return self.end - self.start

    @property
    def role(self) -> Role | None:
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
    """A thread: its id (unique across the whole trace, whichever process it is in), its name, and
    its process (pid 0 in a trace of one; :attr:`~.data.TraceData.processes` names them)."""

    tid: int
    name: str
    pid: int = 0


@dataclass(frozen=True, slots=True)
class EnginePool:
    """One of the threaded engine's two thread pools, as a trace knows it.

    Its threads are named ``thread_prefix`` and a number (``opprof-engine-0``); the profiler records
    its size in the trace's metadata under ``size_key``. The engine names its threads from here, so
    the trace layer's readers and the engine agree on one spelling.
    """

    thread_prefix: str
    size_key: str

    def recorded_size(self, metadata: Mapping[str, Any], threads: Iterable[ThreadInfo]) -> int | None:
        """The pool's size when the trace was made: the recorded one, else (a file made before the
        profiler recorded it) how many of ``threads`` it named; None when neither says."""
        n = metadata.get(self.size_key)
        if isinstance(n, int) and not isinstance(n, bool) and n >= 1:
            return n
        prefix = self.thread_prefix
        return sum(1 for th in threads if th.name.startswith(prefix)) or None


#: The engine's workers, which run the ops.
ENGINE_POOL = EnginePool("opprof-engine-", "engine_workers")
#: The custom-op threads, which run the custom ops' Python.
CUSTOM_POOL = EnginePool("opprof-custom-", "custom_workers")
ENGINE_THREAD_PREFIX = ENGINE_POOL.thread_prefix
CUSTOM_THREAD_PREFIX = CUSTOM_POOL.thread_prefix


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
class Blocker:
    """An op that held up an invocation: ``ns`` of its ``dependency`` waiting, through ``var``."""

    op: int  # the blocking op's id in the trace's OpTable
    name: str  # its span's name (a custom op: its parent's, ``MyOp`` or ``_backward_MyOp``)
    invocation: int | None  # the blocking op's own invocation, when it is a custom op or one's sub-op
    var: int | None
    ns: int


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
    #: The waiting by cause (ns; :data:`~opprof.trace.analysis.causes.CAUSES`), summing to ``waiting_ns``.
    waiting_by_cause: dict[str, int] = field(default_factory=dict)
    #: Thread CPU time of its Python (ns); ``python_ns`` minus this was off-CPU (GIL, sleep or
    #: I/O). None when not measured (another tool's trace).
    python_cpu_ns: int | None = None
    #: The ops that held it up longest (``dependency`` waiting), most first.
    blockers: list[Blocker] = field(default_factory=list)
    #: The invocation whose Python called this one (a custom op used inside another's
    #: ``forward``), None for one the program called.
    caller: int | None = None
    #: Bytes its sub-ops' outputs allocated (NDArrays: its Python's NumPy temporaries are
    #: ``python_numpy_peak_bytes``), and the most live NDArray bytes while it ran; None where
    #: memory was not recorded.
    allocated_bytes: int | None = None
    peak_bytes: int | None = None
    #: The most bytes of NumPy data its Python allocated itself (temporaries, above what was live
    #: when it began: its Python span's ``numpy_peak``); None where not measured.
    python_numpy_peak_bytes: int | None = None

    @property
    def python_off_cpu_ns(self) -> int | None:
        """Python wall time not on a CPU: waiting for the GIL, sleeping or in I/O (not told apart)."""
        return None if self.python_cpu_ns is None else max(0, self.python_ns - self.python_cpu_ns)

    @property
    def name(self) -> str:
        """The parent's name: ``MyOp`` forward, ``_backward_MyOp`` backward."""
        return f"_backward_{self.op_type}" if self.backward else self.op_type
