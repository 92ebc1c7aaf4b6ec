"""GIL evidence: which registered thread held the GIL, and which waited for it, sampled at kHz rates.

Why: a span that took long on an engine worker may have been computing, blocked on I/O, or simply
waiting for the GIL while another thread held it; timestamps taken from Python cannot tell these
apart (the thread that takes them always holds the GIL). The compiled part,
``opprof.engine._gil`` (``_gil.c``), runs a sampler pthread that never takes the GIL and reads the
interpreter's GIL struct, each registered thread's CPU clock and, for a thread that is neither the
holder nor clearly running, what it is blocked in (``/proc/self/task/<tid>/syscall``: a futex on
the GIL's own mutex or condition variable is a wait for the GIL).

The compiled part is optional. This module always imports: :data:`AVAILABLE` says whether the
evidence exists here and :data:`WHY_NOT` why not (no C compiler when opprof was installed, a
free-threaded Python that has no GIL, not Linux, or ``OPPROF_PURE=1`` forcing the pure path that
CI also tests). On the pure path :class:`GilSampler` still works and drains empty
:class:`GilSamples` that carry the reason.

Times are ``CLOCK_MONOTONIC`` nanoseconds: ``time.monotonic_ns()`` and ``time.perf_counter_ns()``
on Linux, the clock the profiler's spans use. There is one sampler per process (the C state is
global); every :class:`GilSampler` drives it.
"""

from __future__ import annotations

import atexit
import enum
import importlib
import os
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass, field
from types import ModuleType, TracebackType
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "AVAILABLE",
    "DEFAULT_PERIOD_NS",
    "MAX_THREADS",
    "PURE_ENV",
    "RECORD_DTYPE",
    "SAMPLER_THREAD_NAME",
    "WHY_NOT",
    "GilIntervals",
    "GilSampler",
    "GilSamples",
    "GilState",
    "GilThread",
    "load_compiled",
    "register_engine_thread",
    "register_thread",
    "sampler_cpu_share",
    "unregister_thread",
]

#: Set to 1 to force the pure-Python path (no GIL evidence) even where the extension is built.
PURE_ENV = "OPPROF_PURE"
#: 200 µs: 5 kHz, fine enough to see the 5 ms switch interval's hand-offs.
DEFAULT_PERIOD_NS = 200_000
#: The masks are 64 bits wide: at most 64 threads are registered at once.
MAX_THREADS = 64

#: One sample as the C sampler writes it (``record_t`` in ``_gil.c``, native byte order, 56 bytes).
RECORD_DTYPE = np.dtype(
    [
        ("t", "=i8"),  # CLOCK_MONOTONIC ns
        ("on_cpu", "=u8"),  # bit i: slot i's CPU clock advanced since the previous sample
        ("gil_wait", "=u8"),  # bit i: slot i parked in futex() on the GIL's mutex or condition
        ("blocked", "=u8"),  # bit i: slot i in another system call (or blocked outside one)
        ("runnable", "=u8"),  # bit i: slot i in no system call, its CPU clock still: waiting for a CPU
        ("alive", "=u8"),  # bit i: slot i held a live registered thread
        ("switches", "=u4"),  # the GIL's switch_number, low 32 bits
        ("holder", "i1"),  # the holder's slot, -1: GIL free or held by an unregistered thread
        ("flags", "u1"),  # bit 0: the GIL was locked
        ("pad", "V2"),
    ]
)


def _free_threaded() -> bool:
    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def load_compiled(name: str, record_size: int, package: str = "opprof.engine") -> tuple[ModuleType | None, str]:
    """One of opprof's optional compiled modules (``<package>.<name>``), or None and the reason
    a reader of a profile should see: ``OPPROF_PURE``, a free-threaded Python without its GIL, a
    module not built (no compiler at install), one that does not load, or one whose records
    (``RECORD_SIZE`` bytes) differ from what its Python face reads."""
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return None, f"forced off by {PURE_ENV}={os.environ[PURE_ENV]}"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    if _free_threaded() and not getattr(sys, "_is_gil_enabled", lambda: True)():
        return None, f"Python {version}t is a free-threaded build: it has no GIL"
    qualified = f"{package}.{name}"
    try:
        module = importlib.import_module(qualified)
    except ImportError as error:
        why = (
            f"the compiled part ({qualified}) is not installed for Python {version} "
            "(no C compiler or Python headers when opprof was installed?)"
        )
        missing = isinstance(error, ModuleNotFoundError) or "cannot import name" in str(error)
        return None, why if missing else f"the compiled part ({qualified}) does not load: {error}"
    if module.RECORD_SIZE != record_size:
        return None, f"{qualified} writes {module.RECORD_SIZE}-byte records, this module reads {record_size}"
    return module, ""


def _load() -> tuple[ModuleType | None, str]:
    """The compiled sampler, or None and the reason a reader of a profile should see."""
    module, why = load_compiled("_gil", RECORD_DTYPE.itemsize)
    if module is not None and not module.available():
        return None, module.reason()
    return module, why


_native, WHY_NOT = _load()
#: Whether GIL evidence can be recorded in this process; :data:`WHY_NOT` says why not.
AVAILABLE: bool = _native is not None
#: The sampler thread's name as the OS shows it (``/proc/.../comm``): not Python's, and not the
#: program's either ("" where there is no sampler).
SAMPLER_THREAD_NAME: str = getattr(_native, "SAMPLER_THREAD_NAME", "")

if _native is not None:
    # The sampler reads the interpreter's GIL struct: stop it before the interpreter goes away.
    atexit.register(_native.stop)

#: native thread id -> thread name at registration (the C side knows no names).
_names: dict[int, str] = {}
_names_lock = threading.Lock()


def register_thread(name: str | None = None) -> int | None:
    """Sample the calling thread from now on (idempotent): its slot, or None on the pure path.

    Called on the thread itself because the sampler needs its native id, CPU clock and Python
    thread state (how it recognises the thread as the GIL's holder). A thread that exits without
    :func:`unregister_thread` is noticed by the sampler (its CPU clock vanishes)."""
    if _native is None:
        return None
    slot: int = _native.register_thread()
    with _names_lock:
        _names[threading.get_native_id()] = name if name is not None else threading.current_thread().name
    return slot


def register_engine_thread() -> int | None:
    """:func:`register_thread` for the engine's own workers, at their start: never raises (a
    thread past the 64 slots goes unsampled, and the profile's thread states simply lack it)."""
    try:
        return register_thread()
    except (RuntimeError, OSError):
        return None


def register_others() -> list[int]:
    """Sample every other thread of the program that runs Python (``threading.enumerate()``: a
    data loader, a progress bar's monitor, a kernel's own threads) until :func:`unregister_foreign`:
    a GIL held by one of them is then named, not "held by a thread opprof does not know". Threads
    started later stay unknown unless they register themselves. Returns their slots."""
    if _native is None:
        return []
    me = threading.get_ident()
    others = [(t.ident, t.native_id, t.name) for t in threading.enumerate() if t.ident is not None and t.ident != me]
    with _names_lock:
        for _, native_id, name in others:
            if native_id is not None:
                _names.setdefault(native_id, name)
    return list(_native.register_others([(ident, native_id) for ident, native_id, _ in others if native_id is not None]))


def unregister_foreign() -> None:
    """Stop sampling the threads :func:`register_others` and :func:`follow_new_threads` added
    (their slots are reused after the next drain, so samples already taken keep naming them)."""
    if _native is not None:
        _native.unregister_foreign()


class _NewThreadHook:
    """``threading``'s profile hook while :func:`follow_new_threads` is on: a ``threading.Thread``
    started meanwhile runs it once, at its first call, registers itself for the profile and hands
    its profile function back to what ``threading`` would have given it (a hook set before ours).
    Nothing runs on any later call: the cost is one registration per new thread."""

    def __init__(self, previous: Any) -> None:
        self.previous = previous

    def __call__(self, frame: Any, event: str, arg: Any) -> Any:
        sys.setprofile(self.previous)
        try:
            if _native is not None:
                _native.register_thread(foreign=True)
                with _names_lock:
                    _names[threading.get_native_id()] = threading.current_thread().name
        except (RuntimeError, OSError):  # no slot left: the thread goes unsampled
            pass
        if self.previous is not None:
            return self.previous(frame, event, arg)
        return None


def follow_new_threads(on: bool) -> None:
    """While on, every ``threading.Thread`` started registers itself for the profile (a data
    loader made inside a profiled cell), so a GIL it holds is named too; off restores the hook
    ``threading`` had (unless someone replaced ours meanwhile, whose hook then stays)."""
    if _native is None:
        return
    hook = threading.getprofile()
    if on and not isinstance(hook, _NewThreadHook):
        threading.setprofile(_NewThreadHook(hook))
    elif not on and isinstance(hook, _NewThreadHook):
        threading.setprofile(hook.previous)


def unregister_thread() -> None:
    """Stop sampling the calling thread. Its slot is reused only after the next drain, so samples
    already taken keep naming it."""
    if _native is not None:
        _native.unregister_thread()


class GilState(enum.IntEnum):
    """What a registered thread was doing at a sample, in the order the evidence is trusted."""

    NONE = 0  # not registered (or already gone) at that sample
    HELD = 1  # it held the GIL
    WAIT = 2  # parked on the GIL's mutex or condition variable: waiting for the GIL
    BLOCKED = 3  # in another system call (sleep, I/O, a lock, a queue)
    RUNNING_WITHOUT_GIL = 4  # its CPU clock advanced while another held the GIL (NumPy, I/O-free C code)
    RUNNABLE = 5  # in no system call and its CPU clock stood still: the OS gave it no CPU (a busy machine)
    #: It held the GIL and its CPU clock stood still since the previous sample: the OS had taken its
    #: CPU (a busy machine), or it was blocked in C code that kept the GIL. Its waiters waited on it.
    HELD_OFF_CPU = 6


@dataclass(frozen=True)
class GilThread:
    """One slot's thread: ``native_id`` is ``threading.get_native_id()``, ``ident`` ``threading.get_ident()``."""

    slot: int
    native_id: int
    ident: int
    name: str
    registered: bool  # still registered when the samples were drained
    #: Its PyThreadState's address (0: not known): what a timed hand-off names the GIL's holder by
    #: (:data:`opprof.engine.handoff.HANDOFF_DTYPE`'s ``holder``).
    tstate: int = 0


@dataclass(frozen=True)
class GilIntervals:
    """Runs of one state per thread, as columns (one row per interval, sorted by start).

    ``end`` is the time of the first sample in another state (the last interval of a thread ends
    one period after its last sample): edges are known to within one sampling period. ``holder``
    is, for a WAIT interval, the slot that held the GIL meanwhile (-1: free or an unregistered
    thread; a change of holder starts a new interval), and -1 for the other states."""

    slot: npt.NDArray[np.int8]
    state: npt.NDArray[np.int8]
    start: npt.NDArray[np.int64]
    end: npt.NDArray[np.int64]
    holder: npt.NDArray[np.int8]

    def __len__(self) -> int:
        return len(self.slot)

    def of(self, slot: int, state: GilState | None = None) -> GilIntervals:
        """The intervals of one thread (and one state)."""
        keep = self.slot == slot
        if state is not None:
            keep &= self.state == state
        return GilIntervals(self.slot[keep], self.state[keep], self.start[keep], self.end[keep], self.holder[keep])

    def total_ns(self) -> int:
        return int((self.end - self.start).sum())


def _empty_intervals() -> GilIntervals:
    return GilIntervals(
        np.zeros(0, np.int8), np.zeros(0, np.int8), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int8)
    )


@dataclass(frozen=True)
class GilSamples:
    """The samples one drain returned, as NumPy columns, and the threads their slots name.

    ``t`` int64 ns; ``holder`` int8 slot or -1; ``locked`` bool; ``on_cpu``, ``gil_wait``,
    ``blocked``, ``runnable``, ``alive`` uint64 masks (bit i: slot i); ``switches`` uint32 (GIL hand-offs between
    two samples are the difference, modulo 2**32). ``available`` False: the pure path, empty, and
    ``why_not`` says why."""

    t: npt.NDArray[np.int64]
    holder: npt.NDArray[np.int8]
    locked: npt.NDArray[np.bool_]
    on_cpu: npt.NDArray[np.uint64]
    gil_wait: npt.NDArray[np.uint64]
    blocked: npt.NDArray[np.uint64]
    runnable: npt.NDArray[np.uint64]
    alive: npt.NDArray[np.uint64]
    switches: npt.NDArray[np.uint32]
    threads: dict[int, GilThread] = field(default_factory=dict)
    period_ns: int = DEFAULT_PERIOD_NS
    available: bool = True
    why_not: str = ""
    stats: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_records(
        cls, data: bytes, table: list[tuple[int, int, int, bool, int]], period_ns: int, stats: dict[str, Any]
    ) -> GilSamples:
        """Columns from the C sampler's drain (records of :data:`RECORD_DTYPE`)."""
        rec = np.frombuffer(data, dtype=RECORD_DTYPE)
        with _names_lock:
            names = dict(_names)
        by_ident = {th.ident: th.name for th in threading.enumerate()}
        threads = {
            slot: GilThread(slot, native_id, ident, names.get(native_id) or by_ident.get(ident, ""), registered, tstate)
            for slot, native_id, ident, registered, tstate in table
        }
        return cls(
            t=rec["t"].copy(),
            holder=rec["holder"].copy(),
            locked=(rec["flags"] & 1).astype(bool),
            on_cpu=rec["on_cpu"].copy(),
            gil_wait=rec["gil_wait"].copy(),
            blocked=rec["blocked"].copy(),
            runnable=rec["runnable"].copy(),
            alive=rec["alive"].copy(),
            switches=rec["switches"].copy(),
            threads=threads,
            period_ns=period_ns,
            stats=stats,
        )

    @classmethod
    def empty(cls, why_not: str, period_ns: int = DEFAULT_PERIOD_NS) -> GilSamples:
        """No samples: the pure path (``why_not`` says why)."""
        z = np.zeros(0, np.uint64)
        return cls(
            np.zeros(0, np.int64), np.zeros(0, np.int8), np.zeros(0, bool), z, z.copy(), z.copy(), z.copy(), z.copy(),
            np.zeros(0, np.uint32), period_ns=period_ns, available=False, why_not=why_not,
        )  # fmt: skip

    def __len__(self) -> int:
        return len(self.t)

    def slot_of(self, native_id: int) -> int | None:
        """The slot a native thread id had in these samples (the latest if it had several)."""
        slots = [th.slot for th in self.threads.values() if th.native_id == native_id]
        return slots[-1] if slots else None

    def window(self, start_ns: int, end_ns: int) -> GilSamples:
        """The samples taken in [start_ns, end_ns)."""
        keep = (self.t >= start_ns) & (self.t < end_ns)
        return GilSamples(
            self.t[keep], self.holder[keep], self.locked[keep], self.on_cpu[keep], self.gil_wait[keep], self.blocked[keep],
            self.runnable[keep], self.alive[keep], self.switches[keep], self.threads, self.period_ns, self.available,
            self.why_not, self.stats,
        )  # fmt: skip

    def state(self, slot: int) -> npt.NDArray[np.int8]:
        """Slot's :class:`GilState` at every sample. Evidence order: holding beats waiting beats a
        syscall beats an advancing CPU clock beats waiting for a CPU. A holder whose CPU clock did
        not move at all since the previous sample held the GIL off a CPU (``HELD_OFF_CPU``): one
        that ran for any part of that window is ``HELD``, so only a whole window without a CPU says so."""
        return self._states(np.array([slot], dtype=np.int64))[0]

    def _states(self, slots: npt.NDArray[np.int64]) -> npt.NDArray[np.int8]:
        """:meth:`state` of each of ``slots`` at once, one row each: each step one NumPy operation
        for all of them (one pass per slot cost ~0.2 ms of a profile's build, at 8 threads)."""
        bit = (np.uint64(1) << slots.astype(np.uint64))[:, None]
        st = np.full((len(slots), len(self.t)), GilState.BLOCKED, dtype=np.int8)
        st[(self.runnable & bit) != 0] = GilState.RUNNABLE
        on_cpu = (self.on_cpu & bit) != 0
        st[on_cpu] = GilState.RUNNING_WITHOUT_GIL
        st[(self.blocked & bit) != 0] = GilState.BLOCKED
        st[(self.gil_wait & bit) != 0] = GilState.WAIT
        holds = self.holder.astype(np.int64)[None, :] == slots[:, None]
        st[holds] = GilState.HELD
        st[holds & ~on_cpu] = GilState.HELD_OFF_CPU
        st[(self.alive & bit) == 0] = GilState.NONE
        return st

    def share(self, slot: int, state: GilState) -> float:
        """The fraction of the samples (those where the slot was alive) in which it was in ``state``."""
        st = self.state(slot)
        alive = st != GilState.NONE
        return float((st[alive] == state).mean()) if alive.any() else 0.0

    def intervals(self) -> GilIntervals:
        """Every registered thread's runs of one state (NONE left out), ordered by start (then by
        slot), from the samples with NumPy only: no pass per slot or per sample."""
        n = len(self.t)
        if n == 0 or not self.threads:
            return _empty_intervals()
        slots = np.array(sorted(self.threads), dtype=np.int64)
        st = self._states(slots)
        # A WAIT under another holder is another interval: the key carries the holder.
        holder = self.holder.astype(np.int32)
        key = st.astype(np.int32) * 256 + np.where(st == GilState.WAIT, holder[None, :] + 2, 0)
        change = np.ones(st.shape, dtype=bool)
        change[:, 1:] = key[:, 1:] != key[:, :-1]
        at = np.flatnonzero(change)  # row-major: slot by slot, each in time
        row, col = at // n, at % n
        # Each run ends where its slot's next one starts, the last a period after the last sample.
        ends_t = np.full(len(at), self.t[-1] + self.period_ns, dtype=np.int64)
        same = row[1:] == row[:-1]
        ends_t[:-1][same] = self.t[col[1:][same]]
        state = st[row, col]
        keep = state != GilState.NONE
        row, col, state, ends_t = row[keep], col[keep], state[keep], ends_t[keep]
        order = np.argsort(self.t[col], kind="stable")
        row, col, state = row[order], col[order], state[order]
        return GilIntervals(
            slots[row].astype(np.int8), state.astype(np.int8), self.t[col].astype(np.int64), ends_t[order],
            np.where(state == GilState.WAIT, self.holder[col], -1).astype(np.int8),
        )  # fmt: skip


class GilSampler:
    """Start, stop and drain the process's GIL sampler; a context manager (``with GilSampler() as s:``
    registers the calling thread and samples the block; ``s.drain()`` afterwards).

    On the pure path every method works and records nothing: :attr:`available` is False and
    :meth:`drain` returns empty :class:`GilSamples` whose ``why_not`` says why.

    ``nice`` is asked for the sampler thread (-10 by default; 0 leaves it): under load a sampler at
    the default weight waits behind busy threads and skips most ticks. Without the privilege to
    lower it (not root, no CAP_SYS_NICE) the sampler runs at the default weight."""

    def __init__(
        self,
        period_ns: int = DEFAULT_PERIOD_NS,
        *,
        max_samples: int = 1 << 20,
        nice: int = -10,
        quiet_period_ns: int = 0,
        sustained_period_ns: int = 0,
        sustained_after_ns: int = 0,
        short_slice: bool = True,
    ) -> None:
        # Checked here, on either path, as the C part checks them again at start(): a bad setting
        # is an error also where there is nothing to sample (OPPROF_PURE=1, no compiler).
        if not 10_000 <= period_ns <= 1_000_000_000:
            raise ValueError(f"period_ns must be between 10_000 (100 kHz) and 1_000_000_000 (1 Hz), got {period_ns}")
        if max_samples < 1:
            raise ValueError(f"max_samples must be positive, got {max_samples}")
        if not 0 <= quiet_period_ns <= 1_000_000_000:
            raise ValueError(f"quiet_period_ns must be between 0 (off) and 1_000_000_000, got {quiet_period_ns}")
        if not 0 <= sustained_period_ns <= 1_000_000_000 or sustained_after_ns < 0:
            raise ValueError(
                "sustained_period_ns must be between 0 (off) and 1_000_000_000, sustained_after_ns >= 0, "
                f"got {sustained_period_ns} and {sustained_after_ns}"
            )
        self.period_ns = period_ns
        self.max_samples = max_samples
        self.nice = nice
        #: While nothing contends (no thread waits for the GIL or a CPU, one at most runs, the GIL
        #: keeps its holder), sample this far apart instead (0: always ``period_ns``): a timer wake
        #: costs ~20 µs of CPU on this VM, and contention brings the fine rate back at once.
        self.quiet_period_ns = quiet_period_ns
        #: Once threads have contended for ``sustained_after_ns`` without a break, sample every
        #: ``sustained_period_ns`` instead (0: never): the fine rate's timer wakes alone cost more
        #: than 2 % of a core here when held for seconds; contention's onset keeps the fine rate.
        self.sustained_period_ns = sustained_period_ns
        self.sustained_after_ns = sustained_after_ns
        #: Ask the scheduler for a 0.1 ms time slice (Linux 6.12+; no privilege needed): with the
        #: default one a woken sampler waits for a busy thread's slice to end, and missed ~4 ms at
        #: most of the GIL's switches here. ``stats()["slice_applied"]`` says whether it was kept.
        self.short_slice = short_slice

    @property
    def available(self) -> bool:
        return AVAILABLE

    @property
    def why_not(self) -> str:
        return WHY_NOT

    @property
    def running(self) -> bool:
        return _native is not None and bool(_native.running())

    def register_thread(self, name: str | None = None) -> int | None:
        """:func:`register_thread`: sample the calling thread; its slot, or None on the pure path."""
        return register_thread(name)

    def unregister_thread(self) -> None:
        unregister_thread()

    def register_others(self) -> list[int]:
        """:func:`register_others`: sample the program's other Python threads for a while."""
        return register_others()

    def unregister_foreign(self) -> None:
        unregister_foreign()

    def follow_new_threads(self, on: bool) -> None:
        """:func:`follow_new_threads`: threads started from now on register for the profile."""
        follow_new_threads(on)

    def start(self) -> bool:
        """Start sampling; False if the sampler already runs (or on the pure path)."""
        if _native is None:
            return False
        return bool(
            _native.start(
                self.period_ns,
                self.max_samples,
                self.nice,
                self.quiet_period_ns,
                self.sustained_period_ns,
                self.sustained_after_ns,
                self.short_slice,
            )
        )

    def stop(self) -> bool:
        """Stop sampling and join the sampler thread; False if it was not running."""
        if _native is None:
            return False
        return bool(_native.stop())

    def threads(self) -> list[GilThread]:
        """The threads registered now, by slot (those that exited without unregistering drop out
        once the sampler notices)."""
        if _native is None:
            return []
        with _names_lock:
            names = dict(_names)
        return [
            GilThread(slot, native_id, ident, names.get(native_id, ""), True) for slot, native_id, ident in _native.thread_slots()
        ]

    def stats(self) -> dict[str, Any]:
        """The counters of the last (or running) sampler run, from its start(): samples, dropped
        (buffer full), missed (ticks skipped while the sampler was descheduled), proc_reads (of
        /proc/<tid>/syscall), sampler_cpu_ns (its own CPU time), nice_applied..."""
        return dict(_native.stats()) if _native is not None else {}

    def drain(self) -> GilSamples:
        """The samples taken since the last drain (the buffer is emptied), with the threads they name."""
        if _native is None:
            return GilSamples.empty(WHY_NOT, self.period_ns)
        data, table = _native.drain()
        return GilSamples.from_records(data, table, self.period_ns, self.stats())

    def __enter__(self) -> GilSampler:
        self.register_thread()
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def sampler_cpu_share(
    periods_ns: tuple[int, ...],
    seconds: float,
    idle_threads: int = 3,
    *,
    quiet_period_ns: int = 0,
    spinners: int = 0,
    sustained_period_ns: int = 0,
    sustained_after_ns: int = 0,
) -> dict[int, float]:
    """The sampler's own CPU time as a share of one core at each period, with the calling thread
    and ``idle_threads`` parked threads registered (as an engine's are between ops), and
    ``spinners`` threads running pure Python (contending for the GIL): what the benchmark rows and
    the cost test report. Empty on the pure path."""
    if _native is None:
        return {}
    stop = threading.Event()

    def idle() -> None:
        register_thread()
        stop.wait()
        unregister_thread()

    def spin() -> None:
        register_thread()
        while not stop.is_set():
            pass
        unregister_thread()

    threads = [threading.Thread(target=idle) for _ in range(idle_threads)]
    threads += [threading.Thread(target=spin) for _ in range(spinners)]
    for t in threads:
        t.start()
    register_thread()
    share: dict[int, float] = {}
    try:
        for period in periods_ns:
            sampler = GilSampler(
                period,
                quiet_period_ns=quiet_period_ns,
                sustained_period_ns=sustained_period_ns,
                sustained_after_ns=sustained_after_ns,
            )
            sampler.start()
            time.sleep(seconds)
            sampler.stop()
            share[period] = sampler.stats()["sampler_cpu_ns"] / (seconds * 1e9)
            sampler.drain()
    finally:
        stop.set()
        for t in threads:
            t.join()
    return share
