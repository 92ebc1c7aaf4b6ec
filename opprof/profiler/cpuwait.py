"""How long the OS kept each thread waiting for a CPU while a profile recorded.

A thread handed work is first woken by the OS, and on a machine whose cores are busy (other
processes, BLAS threads, more runnable threads than cores) it then waits in the OS's run queue
before it runs: the hand-off's "waking" grows from ~10 µs to 100-150 µs here with three spinning
processes on the 2 cores. Neither the spans nor the GIL's samples tell that apart from a slow
wake; the kernel counts it exactly, per thread: the second field of
``/proc/self/task/<tid>/schedstat`` is the time the thread spent runnable in a run queue (ns).

The recording reads it for every Python thread when the profile starts and when it stops (two
small file reads a thread, none on the hot path); a thread started meanwhile counts from its birth.
Pure Python, so the pure path has it too; where the file does not exist (not Linux, a kernel
without scheduler statistics) the trace's ``metadata["cpu_wait"]["why_not"]`` says so.
"""

from __future__ import annotations

import threading
from typing import Any

from ..trace.threadstates import CPU_WAIT_METADATA

__all__ = ["CpuWaitRecording", "run_queue_ns"]


def run_queue_ns(native_id: int) -> int | None:
    """ns thread ``native_id`` of this process has waited for a CPU so far (None: not readable)."""
    try:
        with open(f"/proc/self/task/{native_id}/schedstat", "rb") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


class CpuWaitRecording:
    """Each Python thread's run-queue time at :meth:`start` and at :meth:`stop`; their difference
    per thread of the trace as :meth:`metadata`."""

    def __init__(self) -> None:
        self.why_not = "" if run_queue_ns(threading.get_native_id()) is not None else (
            "the OS's scheduler statistics (/proc/self/task/<tid>/schedstat) are not readable here"
        )
        self._start: dict[int, int] = {}
        self._waited: dict[int, int] | None = None

    @staticmethod
    def _now() -> dict[int, int]:
        out = {}
        for t in threading.enumerate():
            if t.native_id is not None and (ns := run_queue_ns(t.native_id)) is not None:
                out[t.native_id] = ns
        return out

    def start(self) -> None:
        if not self.why_not:
            self._start = self._now()

    def stop(self) -> None:
        """Idempotent: the first stop's counts stand."""
        if not self.why_not and self._waited is None:
            self._waited = {n: ns - self._start.get(n, 0) for n, ns in self._now().items()}

    def metadata(self, native_ids: dict[int, int]) -> dict[str, Any]:
        """``metadata["cpu_wait"]``: ns each trace thread (``native_ids``: native id -> tid) waited
        for a CPU while recording, or why that is not known."""
        if self.why_not or self._waited is None:
            return {CPU_WAIT_METADATA: {"why_not": self.why_not or "the recording has not stopped"}}
        ns = {str(tid): max(0, self._waited[n]) for n, tid in native_ids.items() if n in self._waited}
        return {CPU_WAIT_METADATA: {"source": "the OS's run-queue time per thread (/proc/self/task/<tid>/schedstat)", "ns": ns}}
