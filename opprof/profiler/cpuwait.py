"""How long the OS kept each thread waiting for a CPU while a profile recorded, and how much CPU
the process's threads outside Python took meanwhile.

A thread handed work is first woken by the OS, and on a machine whose cores are busy (other
processes, BLAS threads, more runnable threads than cores) it then waits in the OS's run queue
before it runs: the hand-off's "waking" grows from ~10 µs to 100-150 µs here with three spinning
processes on the 2 cores. Neither the spans nor the GIL's samples tell that apart from a slow
wake; the kernel counts it exactly, per thread: the second field of
``/proc/self/task/<tid>/schedstat`` is the time the thread spent runnable in a run queue (ns), the
first the time it ran.

The recording reads both for every thread of the process when the profile starts and when it
stops (two small file reads a thread, none on the hot path); a thread started meanwhile counts
from its birth. The Python threads' waits go to their lanes. The threads that are not Python's
(a BLAS or OpenMP pool NumPy started, a library's native workers; not opprof's own GIL sampler)
have no lane, but the cores they took are what Python's threads may have waited for: their CPU
time is kept as one sum (``metadata["cpu_wait"]["outside_python"]``), for the why-text to name.
Pure Python, so the pure path has it too; where the files do not exist (not Linux, a kernel
without scheduler statistics) the trace's ``metadata["cpu_wait"]["why_not"]`` says so.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from ..engine.gil import SAMPLER_THREAD_NAME
from ..trace.threadstates import CPU_WAIT_METADATA

__all__ = ["CpuWaitRecording", "run_queue_ns"]


def _schedstat(native_id: int) -> tuple[int, int] | None:
    """(ns on a CPU, ns waiting for one) of thread ``native_id`` of this process so far; None: not readable."""
    try:
        with open(f"/proc/self/task/{native_id}/schedstat", "rb") as f:
            ran, waited = f.read().split()[:2]
            return int(ran), int(waited)
    except (OSError, ValueError):
        return None


def run_queue_ns(native_id: int) -> int | None:
    """ns thread ``native_id`` of this process has waited for a CPU so far (None: not readable)."""
    got = _schedstat(native_id)
    return None if got is None else got[1]


def _comm(native_id: int) -> str:
    try:
        with open(f"/proc/self/task/{native_id}/comm", "rb") as f:
            return f.read().decode(errors="replace").strip()
    except OSError:
        return ""


class _Snapshot:
    """Every thread of the process at one moment: its schedstat, and which are Python's."""

    def __init__(self) -> None:
        self.python = {t.native_id for t in threading.enumerate() if t.native_id is not None}
        try:
            tasks = [int(name) for name in os.listdir("/proc/self/task")]
        except (OSError, ValueError):
            tasks = sorted(self.python)
        self.stat = {n: got for n in tasks if (got := _schedstat(n)) is not None}


class CpuWaitRecording:
    """Each Python thread's run-queue time at :meth:`start` and at :meth:`stop`; their difference
    per thread of the trace as :meth:`metadata`, with the CPU time the threads outside Python ran."""

    def __init__(self) -> None:
        self.why_not = (
            ""
            if run_queue_ns(threading.get_native_id()) is not None
            else ("the OS's scheduler statistics (/proc/self/task/<tid>/schedstat) are not readable here")
        )
        self._start: _Snapshot | None = None
        self._waited: dict[int, int] | None = None
        self._outside: tuple[int, int] = (0, 0)  # (ns on a CPU, threads that ran)

    def start(self) -> None:
        if not self.why_not:
            self._start = _Snapshot()

    def stop(self) -> None:
        """Idempotent: the first stop's counts stand."""
        if self.why_not or self._waited is not None or self._start is None:
            return
        a, b = self._start, _Snapshot()
        python = a.python | b.python
        self._waited = {n: w - a.stat.get(n, (0, 0))[1] for n, (_, w) in b.stat.items() if n in python}
        ran, threads = 0, 0
        for n, (r, _) in b.stat.items():
            if n in python:
                continue
            d = r - a.stat.get(n, (0, 0))[0]
            if d > 0 and (not SAMPLER_THREAD_NAME or _comm(n) != SAMPLER_THREAD_NAME):
                ran, threads = ran + d, threads + 1
        self._outside = (ran, threads)

    def metadata(self, native_ids: dict[int, int]) -> dict[str, Any]:
        """``metadata["cpu_wait"]``: ns each trace thread (``native_ids``: native id -> tid) waited
        for a CPU while recording, and the CPU time of the threads outside Python, or why that is
        not known."""
        if self.why_not or self._waited is None:
            return {CPU_WAIT_METADATA: {"why_not": self.why_not or "the recording has not stopped"}}
        ns = {str(tid): max(0, self._waited[n]) for n, tid in native_ids.items() if n in self._waited}
        ran, threads = self._outside
        return {
            CPU_WAIT_METADATA: {
                "source": "the OS's run-queue time per thread (/proc/self/task/<tid>/schedstat)",
                "ns": ns,
                "outside_python": {"ns": ran, "threads": threads},
            }
        }
