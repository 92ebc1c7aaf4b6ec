"""The live feed of a Dask profile: the client's own spans and, as the pulls bring them, every
worker's tasks, for ``%%opprof --dask``'s live view.

The workers' tasks arrive with the pulls (every ``interval`` seconds), so they show up to that
late; their times are mapped onto the client's clock with the offset measured at the start (the
end's exchanges come only when the profile stops). A worker's lanes are named by the worker, as
the final timeline names them. Engine spans inside the workers come with the final trace only:
they travel as segments built when a worker is idle (see :mod:`.worker`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from ..profiler.live import POLL_CAP, LiveFeed, LiveSpans
from .clock import ClockEstimate
from .merge import WorkerRecords

__all__ = ["DaskLiveFeed"]


class DaskLiveFeed:
    """``poll()`` as :class:`~opprof.profiler.live.LiveFeed`'s, with the workers' new tasks added."""

    def __init__(
        self,
        workers: Mapping[str, WorkerRecords],
        start_clock: Callable[[str], ClockEstimate | None],
        client: LiveFeed,
        cap: int = POLL_CAP,
    ) -> None:
        """``workers``: the profile's records by address, which its puller grows; ``start_clock``:
        a worker's clock estimate from the start of the profile."""
        self.workers = workers
        self.start_clock = start_clock
        self.client = client
        self.cap = cap
        self._seen: dict[str, int] = {}  # worker address -> chunks read
        self._lanes: dict[str, int] = {}  # lane name -> index after the client's threads
        self._offsets: dict[str, int] = {}
        self._total = 0

    def _offset(self, address: str) -> int:
        got = self._offsets.get(address)
        if got is None:
            est = self.start_clock(address)
            got = self._offsets[address] = est.offset_ns if est is not None else 0
        return got

    def poll(self) -> LiveSpans:
        base = self.client.poll()
        n_client = len(base.threads)
        threads: list[int] = []
        starts: list[np.ndarray] = []
        ends: list[np.ndarray] = []
        names: list[str] = []
        for address, w in list(self.workers.items()):
            chunks = w.chunks[self._seen.get(address, 0) :]  # the puller only appends
            self._seen[address] = self._seen.get(address, 0) + len(chunks)
            shift = self._offset(address)
            for c in chunks:
                lanes = [self._lanes.setdefault(f"{w.label} · {t}", len(self._lanes)) for t in c.threads]
                threads.extend(lanes)
                starts.append((c.start - shift - base.t_start_ns) / 1e3)
                ends.append((c.stop - shift - base.t_start_ns) / 1e3)
                names.extend(c.prefixes)
        n = len(threads)
        thread = np.array(threads, dtype=np.int32) + n_client
        start = np.concatenate(starts) if starts else np.zeros(0)
        end = np.concatenate(ends) if ends else np.zeros(0)
        skipped = 0
        if n > self.cap:  # as the client's feed does: an even stride, the rest counted
            keep = np.linspace(0, n - 1, self.cap).astype(np.int64)
            skipped = n - self.cap
            thread, start, end, names = thread[keep], start[keep], end[keep], [names[i] for i in keep.tolist()]
        self._total += n
        return LiveSpans(
            threads=base.threads + list(self._lanes),
            thread=np.concatenate([base.thread, thread]).astype(np.int32),
            start=np.concatenate([base.start, start]),
            end=np.concatenate([base.end, end]),
            name=list(base.name) + names,
            role=np.concatenate([base.role, np.zeros(len(thread), np.int8)]),
            outer=np.concatenate([base.outer, np.zeros(len(thread), bool)]),
            skipped=base.skipped + skipped,
            total=base.total + self._total,
            now_us=base.now_us,
            stopped=base.stopped,
            t_start_ns=base.t_start_ns,
        )
