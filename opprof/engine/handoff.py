"""The engine's work queues, and the timing of every hand-off through them.

Why: a ready op that waits for an engine worker, or a custom op's Python that waits for a
custom-op thread, often waits for no thread at all but for the hand-off: the OS waking a parked
thread (35-49 µs here, where idle vCPUs halt) and that thread then taking the GIL. A sampler at
1 kHz cannot see µs; the compiled queue (``opprof.engine._handoff``, ``_handoff.c``) parks its
getters in C without the GIL and stamps, per hand-off, when the getter parked, when the item it
got was put, when the OS woke it and when it held the GIL again. A profile turns these into exact
thread states (:mod:`opprof.profiler.gil`).

The compiled part is optional: :func:`work_queue` is a :class:`queue.SimpleQueue` on the pure path
(``OPPROF_PURE=1``, no compiler at install, a free-threaded Python), and :data:`WHY_NOT` says why
hand-offs are not timed there.
"""

from __future__ import annotations

import enum
import os
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass
from queue import SimpleQueue
from types import ModuleType
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from .gil import load_compiled

__all__ = [
    "AVAILABLE",
    "HANDOFF_DTYPE",
    "WHY_NOT",
    "Handoffs",
    "QueueKind",
    "WorkQueue",
    "drain",
    "ping_pong_us",
    "start",
    "stop",
    "work_queue",
]


class QueueKind(enum.IntEnum):
    """Which queue a hand-off went through (stored in each record)."""

    ENGINE = 0  # ready ops -> an engine worker
    CUSTOM = 1  # custom ops' Python -> a custom-op thread


#: One hand-off as ``_handoff.c`` logs it (``handoff_t``, native byte order, 48 bytes).
HANDOFF_DTYPE = np.dtype(
    [
        ("park", "=i8"),  # CLOCK_MONOTONIC ns: the getter found the queue empty and parked
        ("put", "=i8"),  # the item it got was put (the signal)
        ("woke", "=i8"),  # the OS ran it again, still without the GIL
        ("gil", "=i8"),  # it held the GIL again
        ("native_id", "=i8"),  # the getter's threading.get_native_id()
        ("queue", "=i8"),  # QueueKind
    ]
)


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


def work_queue(kind: QueueKind) -> WorkQueue:
    """A FIFO for the engine's work: the compiled, timed one where it exists."""
    if _native is not None:
        q: WorkQueue = _native.Queue(int(kind))
        return q
    return SimpleQueue()


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


def ping_pong_us(trips: int, one_cpu: bool = False) -> float:
    """One way of a hand-off between two Python threads through the engine's queue (a ping-pong), in
    µs: the floor of every hand-off the engine makes on this machine, which a profile's measured
    hops are read against.

    With ``one_cpu`` both threads are pinned to one CPU, where a hand-off is a context switch rather
    than waking a CPU that went idle (35-49 µs here: the guest halts idle vCPUs)."""
    there, back = work_queue(QueueKind.ENGINE), work_queue(QueueKind.ENGINE)
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
