"""The memory an NDArray holds, over time: every allocation and free of an array's storage.

opprof owns the NDArray front end, so it knows each array's bytes exactly (its shape times its
dtype's size) and the moment its storage is freed (the last reference to it dies), without
sampling. While profiling with memory on (:mod:`opprof.profiler.memory`), each array made with
storage of its own is one *allocation* event (``+bytes``) and, if it dies before the profile
stops, one *free* event (``-bytes``), both naming the array's var: the engine's edges then say
which op made it (the first op that wrote the var) and which line pushed that op. An array still
alive when the profile stopped also names the user's line that made it (``site``, where the
recording knew it): a leak is found by its line, not only by its op.

Everything else is derived (:mod:`.analysis.memory`): the bytes each op's outputs allocated, the
live bytes over time (what MXNet's ``profile_memory`` shows as the ``Memory: cpu/0`` counter of
category ``Device Storage``), each custom-op invocation's allocations and peak, and the arrays
still alive when the profile stopped (an allocation without a free).

Counted: arrays made while profiling. An array made before the profile started is not (nothing
records it when the profiler is off), so live bytes start at 0; nor are the NumPy temporaries a
custom op's Python makes without an NDArray (``metadata["memory"]["python"]`` says so).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["COLUMNS", "MEMORY_CATEGORY", "MEMORY_COUNTER", "MEMORY_METADATA", "MemoryEvents"]

#: The columns, in the order the constructor takes them.
COLUMNS = ("ts", "storage", "var", "nbytes", "pid", "site")

#: MXNet's names for the live-bytes counter (a Chrome ``C`` event per change) and its category.
MEMORY_COUNTER = "Memory: cpu/0"
MEMORY_CATEGORY = "Device Storage"
#: Metadata key: how memory was recorded (``{"source": ..., "python": ...}``), or ``{"why_not": ...}``.
MEMORY_METADATA = "memory"


@dataclass(eq=False)
class MemoryEvents:
    """Allocations (``nbytes > 0``) and frees (``nbytes < 0``) of arrays' storage, as columns sorted
    by time: ``ts`` (ns, the trace's clock), ``storage`` (a number per storage in its process,
    which its free repeats), ``var`` (the array's engine var id), ``nbytes``, ``pid`` (the
    process: a trace merged from several, a Dask cluster's, has each one's memory; 0 for one), and
    ``site`` (an allocation's user line, a code into ``sites``; -1 where not known: recorded for
    the arrays still alive at the end)."""

    ts: np.ndarray  # int64 ns
    storage: np.ndarray  # int64
    var: np.ndarray  # int64 var id
    nbytes: np.ndarray  # int64, signed
    pid: np.ndarray | None = None  # int64; None: all 0
    site: np.ndarray | None = None  # int64 code into ``sites``; None: all -1
    sites: tuple[str, ...] = ()  # the lines, as the trace writes them ("In [3], line 2", "file:line")

    def __post_init__(self) -> None:
        n = len(np.asarray(self.ts))
        if self.pid is None:
            self.pid = np.zeros(n, dtype=np.int64)
        if self.site is None:
            self.site = np.full(n, -1, dtype=np.int64)
        self.sites = tuple(self.sites)
        for name in COLUMNS:
            setattr(self, name, np.asarray(getattr(self, name), dtype=np.int64))
        order = np.argsort(self.ts, kind="stable")
        if len(order) and not np.array_equal(order, np.arange(len(order))):
            for name in COLUMNS:
                setattr(self, name, getattr(self, name)[order])

    def concat_with(self, other: MemoryEvents) -> MemoryEvents:
        """Both tables' events as one (a merge's parts: each part's storages and vars already its own)."""
        assert other.site is not None
        theirs = np.where(other.site >= 0, other.site + len(self.sites), -1)
        cols = {c: np.concatenate([getattr(self, c), theirs if c == "site" else getattr(other, c)]) for c in COLUMNS}
        return MemoryEvents(**cols, sites=self.sites + other.sites)

    def site_of(self, k: int) -> str | None:
        """Event ``k``'s user line, where known."""
        assert self.site is not None
        code = int(self.site[k])
        return self.sites[code] if code >= 0 else None

    def __len__(self) -> int:
        return len(self.ts)

    @classmethod
    def empty(cls) -> MemoryEvents:
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z, z, z, z, z)

    @property
    def allocated(self) -> np.ndarray:
        """Which events are allocations."""
        return self.nbytes > 0

    def check(self) -> list[str]:
        """What is wrong with the columns (empty when nothing): lengths, a zero size, a storage
        allocated twice, freed twice, or freed without an allocation of the same bytes before."""
        n = len(self.ts)
        cols = ("storage", "var", "nbytes", "pid", "site")
        problems = [f"column {c} has {len(getattr(self, c))} rows, ts has {n}" for c in cols if len(getattr(self, c)) != n]
        if problems:
            return problems
        assert self.site is not None
        if n and (int(self.site.min()) < -1 or int(self.site.max()) >= len(self.sites)):
            problems.append(f"memory.site refers to lines outside its {len(self.sites)} sites")
        if np.any(self.nbytes == 0):
            problems.append(f"{int(np.count_nonzero(self.nbytes == 0))} memory events of 0 bytes")
        alloc = self.allocated
        pid = self.pid if self.pid is not None else np.zeros(n, dtype=np.int64)
        for part, what in ((alloc, "allocated"), (~alloc, "freed")):
            keys = np.stack([pid[part], self.storage[part]])
            if keys.shape[1] and np.unique(keys, axis=1).shape[1] < int(np.count_nonzero(part)):
                problems.append(f"a storage is {what} twice")
        order = np.lexsort((~alloc, self.storage, pid))  # each storage: its allocation, then its free
        st, nb, pp = self.storage[order], self.nbytes[order], pid[order]
        free = nb < 0
        prev_ok = np.zeros(len(st), dtype=bool)
        prev_ok[1:] = (st[1:] == st[:-1]) & (pp[1:] == pp[:-1]) & (nb[:-1] == -nb[1:])
        if np.any(free & ~prev_ok):
            k = int(np.flatnonzero(free & ~prev_ok)[0])
            problems.append(f"storage {int(st[k])} is freed of {-int(nb[k])} bytes without an allocation of them")
        return problems
