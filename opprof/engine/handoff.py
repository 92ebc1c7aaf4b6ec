"""The engine's work queues, and the timing of every hand-off through them.

Why: a ready op that waits for an engine worker, or a custom op's Python that waits for a
custom-op thread, often waits for no thread at all but for the hand-off: the OS waking a parked
thread (35-49 µs here, where idle vCPUs halt) and that thread then taking the GIL. A sampler at
1 kHz cannot see µs; the compiled queue (``opprof.engine._handoff``, ``_handoff.c``) parks its
getters in C without the GIL and stamps, per hand-off, when the getter parked, when the item it
got was put, when the OS woke it and when it held the GIL again. A profile turns these into exact
thread states (:mod:`opprof.profiler.gil`).

The compiled queue also makes hand-offs cheaper: a getter that finds it empty polls it for a while
before parking (:data:`SPIN_US`), so that work handed back soon costs no wake at all.

The compiled part is optional: :func:`work_queue` is a :class:`queue.SimpleQueue` on the pure path
(``OPPROF_PURE=1``, no compiler at install, a free-threaded Python), and :data:`WHY_NOT` says why
hand-offs are not timed there (nor polled: every hand-off there wakes a parked thread).
"""

from __future__ import annotations

import enum
import functools
import os
import sys
import sysconfig
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from queue import SimpleQueue
from types import ModuleType
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from .gil import load_compiled

__all__ = [
    "AVAILABLE",
    "SPIN_US",
    "Gate",
    "HANDOFF_DTYPE",
    "OPEN_WAIT_DTYPE",
    "WHY_NOT",
    "Handoffs",
    "QueueKind",
    "WorkQueue",
    "closed_gate",
    "drain",
    "open_waits",
    "ping_pong_us",
    "start",
    "stop",
    "tells_sampler",
    "timed_ping_pong",
    "work_queue",
]


class QueueKind(enum.IntEnum):
    """Which queue a hand-off went through (stored in each record)."""

    ENGINE = 0  # ready ops -> an engine worker
    CUSTOM = 1  # custom ops' Python -> a custom-op thread
    WAIT = 2  # a finished op -> a thread waiting for it (wait_to_read, waitall: a closed gate opened)


#: One hand-off as ``_handoff.c`` logs it (``handoff_t``, native byte order, 56 bytes).
HANDOFF_DTYPE = np.dtype(
    [
        ("park", "=i8"),  # CLOCK_MONOTONIC ns: the getter found the queue empty and parked
        ("put", "=i8"),  # the item it got was put (the signal)
        ("woke", "=i8"),  # the OS ran it again, still without the GIL
        ("gil", "=i8"),  # it held the GIL again
        ("native_id", "=i8"),  # the getter's threading.get_native_id()
        ("queue", "=i8"),  # QueueKind
        # The GIL's holder when the getter woke (its PyThreadState's address; 0: the GIL was free):
        # named through the GIL sampler's threads (:attr:`opprof.engine.gil.GilThread.tstate`).
        ("holder", "=i8"),
    ]
)


class Gate(Protocol):
    """What the engine's waits need of a gate: closed when made, opened once by ``release()``."""

    def acquire(self) -> Any: ...
    def release(self) -> None: ...


class WorkQueue(Protocol):
    """What the engine needs of a queue (both :class:`queue.SimpleQueue` and the compiled one)."""

    def put(self, item: Any, /) -> None: ...
    def get(self) -> Any: ...
    def qsize(self) -> int: ...


def _load() -> tuple[ModuleType | None, str]:
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        return None, f"Python {version}t is a free-threaded build (the timed queue is not built for it)"
    return load_compiled("_handoff", HANDOFF_DTYPE.itemsize)


_native, WHY_NOT = _load()
#: Whether the engine's hand-offs are timed in this process; :data:`WHY_NOT` says why not.
AVAILABLE: bool = _native is not None


#: The most (µs) an engine thread that finds its queue empty polls it, without the GIL, before it
#: parks. A parked thread costs the next hand-off a wake: 35-49 µs on this project's VM, where an idle
#: vCPU halts, against ~1 µs for a thread still polling. Each thread adapts its own poll under this
#: bound, as KVM's halt polling does (``_handoff.c``): longer when its work came back soon after it
#: had parked, halved when the wait was longer than the bound anyway, so an engine left idle polls
#: ~2x this at most before its threads park for good. 200 µs is KVM's own default bound for the same
#: trade, and covers a trivial custom op's round trip (the worker waits 30-150 µs for its Python's
#: sub-ops). Measured in one run, 8 interleaved rounds against parking at once: a chain of trivial
#: custom ops' forward 0.53x the time a call (100 µs: 0.66x, 500 µs: 0.50x), the two-thread ping-pong
#: one way 39 -> 1-4 µs; forward + backward and chains of small ops unchanged (their queues are
#: seldom empty: the GIL, not the queue, passes their work). A thread polls only while another CPU is
#: left for the thread running Python (at most CPUs - 1 pollers in the process, none on one CPU).
SPIN_US = 200.0
#: The most a queue may spin: past this a spin costs more than any hand-off it could save.
MAX_SPIN_US = 1_000_000.0


def check_spin_us(spin_us: float) -> float:
    """``spin_us`` if it is a number of µs a queue may spin (0 to :data:`MAX_SPIN_US`), else ValueError."""
    if not isinstance(spin_us, (int, float)) or isinstance(spin_us, bool) or not 0 <= spin_us <= MAX_SPIN_US:
        raise ValueError(f"spin_us must be a number of µs from 0 to {MAX_SPIN_US:,.0f} (0: park at once), got {spin_us!r}")
    return float(spin_us)


def work_queue(kind: QueueKind, spin_us: float = 0.0) -> WorkQueue:
    """A FIFO for the engine's work: the compiled, timed one where it exists, whose getters poll it
    for ``spin_us`` before parking (:data:`SPIN_US`); the pure path's parks at once."""
    spin_us = check_spin_us(spin_us)
    if _native is not None:
        q: WorkQueue = _native.Queue(int(kind), round(spin_us * 1000))
        return q
    return SimpleQueue()


def _locked_lock() -> Gate:
    lock = threading.Lock()
    lock.acquire()
    return lock


#: A closed gate that a waiting thread blocks at until the engine opens it (``release()``): the
#: compiled one where it exists, whose wait is timed like a queue's hand-off (:data:`QueueKind.WAIT`:
#: when the thread parked, the gate opened, the OS ran it and it held the GIL again); else a locked
#: ``threading.Lock``. The type itself where compiled, not a function around it: made, opened and
#: passed, a gate costs 124 ns that way and 296 ns through a function (a Lock's 218 ns, 2026-12-04).
closed_gate: Callable[[], Gate] = functools.partial(_native.Gate, int(QueueKind.WAIT)) if _native is not None else _locked_lock


def tells_sampler() -> bool:
    """Whether a thread parked in these queues and gates says so to the GIL sampler (both compiled
    parts loaded): the sampler then knows it BLOCKED without reading its /proc/<tid>/syscall."""
    return _native is not None and bool(_native.TELLS_SAMPLER)


def spin_stats() -> dict[str, int]:
    """Since the process started, across all queues: spins that ``caught`` an item, ``timed_out``
    (the getter then parked), or were ``refused`` (no CPU to spare). Empty on the pure path."""
    return dict(_native.spin_stats()) if _native is not None else {}


@dataclass(frozen=True)
class Handoffs:
    """The hand-offs logged between :func:`start` and :func:`drain`, as records of
    :data:`HANDOFF_DTYPE`; ``dropped``: how many a full log lost."""

    records: npt.NDArray[np.void]
    dropped: int = 0

    def __len__(self) -> int:
        return len(self.records)

    @property
    def signal(self) -> np.ndarray:
        """Per hand-off, when its wait for the item ended: the put, or the park where the item was
        put before the getter parked (its wake then waited for nothing)."""
        r = self.records
        return np.clip(r["put"], r["park"], r["woke"])

    def medians(self, mask: npt.NDArray[np.bool_] | None = None) -> dict[str, int]:
        """The hand-offs' (those of ``mask``) count and median wake (signal to the OS running the
        getter), GIL wait (from then to holding the GIL) and hop (signal to GIL held), in ns: what
        a profile's metadata keeps per queue, and what a ping-pong is read with alike."""
        return self.medians_of({"": mask})[""]

    def medians_of(self, masks: dict[str, npt.NDArray[np.bool_] | None]) -> dict[str, dict[str, int]]:
        """:meth:`medians` of each named subset (None: all) at once: the delays are taken from the
        records once, and each subset's three medians in one call (a profile's metadata asks for
        four subsets of ~4,000 hand-offs: 0.65 ms one by one, 2026-12-06)."""
        r = self.records
        woke, signal = r["woke"], self.signal
        wake, gil = woke - signal, r["gil"] - woke
        delays = np.stack([wake, gil, wake + gil])  # wake, GIL wait, hop
        out: dict[str, dict[str, int]] = {}
        for name, mask in masks.items():
            d = delays if mask is None else delays[:, mask]
            if not d.shape[1]:
                out[name] = {"count": 0}
                continue
            w, g, h = (int(x) for x in np.median(d, axis=1))
            out[name] = {
                "count": int(d.shape[1]),
                "wake_ns_median": w,
                "gil_ns_median": g,
                "hop_ns_median": h,
                # One slow wake (a woken thread left in the run queue while the cores were busy) can
                # be most of a queue's waiting, where the median says sub-µs: the readers say both.
                "wake_ns_max": int(d[0].max()),
            }
        return out


def start(capacity: int = 1 << 18) -> bool:
    """Log hand-offs from now on (False: the pure path, or logging already)."""
    return bool(_native is not None and _native.start(capacity))


def stop() -> None:
    if _native is not None:
        _native.stop()


def drain() -> Handoffs:
    """Every hand-off logged since the last drain (empty on the pure path)."""
    if _native is None:
        return Handoffs(np.zeros(0, dtype=HANDOFF_DTYPE))
    raw, dropped = _native.drain()
    return Handoffs(np.frombuffer(raw, dtype=HANDOFF_DTYPE).copy(), int(dropped))


#: A wait in progress (:func:`open_waits`): its thread, since when it was parked, and where.
OPEN_WAIT_DTYPE = np.dtype([("native_id", "=i8"), ("park", "=i8"), ("queue", "=i8")])


def open_waits() -> np.ndarray:
    """The waits in progress that began while logging (:data:`OPEN_WAIT_DTYPE`): a thread parked
    when a profile stops has logged nothing of that park yet, and was parked from its ``park`` on
    (empty on the pure path)."""
    if _native is None:
        return np.zeros(0, dtype=OPEN_WAIT_DTYPE)
    return np.frombuffer(_native.open_waits(), dtype=OPEN_WAIT_DTYPE).copy()


def ping_pong_us(trips: int, one_cpu: bool = False, spin_us: float = SPIN_US) -> float:
    """One way of a hand-off between two Python threads through the engine's queue (a ping-pong), in
    µs: the floor of every hand-off the engine makes on this machine, which a profile's measured
    hops are read against.

    With ``one_cpu`` both threads are pinned to one CPU, where a hand-off is a context switch rather
    than waking a CPU that went idle (35-49 µs here: the guest halts idle vCPUs). ``spin_us`` is the
    queues' spin before parking, the engine's by default (0: every hand-off wakes a parked thread)."""
    there, back = work_queue(QueueKind.ENGINE, spin_us), work_queue(QueueKind.ENGINE, spin_us)
    cpu = {min(os.sched_getaffinity(0))} if one_cpu and hasattr(os, "sched_getaffinity") else None
    took = 0.0

    def echo() -> None:
        if cpu:
            os.sched_setaffinity(0, cpu)
        while (x := there.get()) is not None:
            back.put(x)

    def run() -> None:
        nonlocal took
        if cpu:
            os.sched_setaffinity(0, cpu)
        there.put(0)
        back.get()  # both threads up (and pinned)
        t = time.perf_counter()
        for i in range(trips):
            there.put(i)
            back.get()
        took = time.perf_counter() - t
        there.put(None)

    threads = [threading.Thread(target=echo, name="opprof-ping"), threading.Thread(target=run, name="opprof-pong")]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return took / max(1, trips) / 2 * 1e6


def timed_ping_pong(trips: int, spin_us: float = SPIN_US) -> tuple[float, dict[str, int]]:
    """:func:`ping_pong_us` with its hand-offs logged as a profile logs the engine's: (one way in
    µs, :meth:`Handoffs.medians` of its hand-offs). The medians are empty where hand-offs are not
    timed (the pure path) or another session is logging them."""
    if not start():
        return ping_pong_us(trips, spin_us=spin_us), {}
    try:
        drain()
        one_way = ping_pong_us(trips, spin_us=spin_us)
        logged = drain()
    finally:
        stop()
    return one_way, logged.medians()
