"""Recording memory while profiling: each NDArray's storage, from its making to its freeing.

Every NDArray made while recording passes through :func:`opprof.nd.ndarray.set_array_hook`'s hook:
one made with storage of its own (a NumPy array that owns its buffer, not a view of another, not
one already seen: ``detach()`` shares it) is an allocation of exactly ``storage.nbytes``. A weak
reference to that storage calls back when its last reference dies (the array, its views, and the
pushed ops that still hold it: the storage lives until the engine is done with it, as MXNet's
var does until its deletion runs), which is the free. Both are stamped on the profile's clock
and name the array's var; :mod:`opprof.trace.memory` says what is derived from them.

Cost (``benchmarks``, "Memory" rows): one hook call per array made, ~0.5 µs with a weak
reference, on ops of 7-10 µs; nothing when off (one global read per array).

The pure-Python path sees NDArrays only: the NumPy temporaries inside a custom op's Python are not
counted (``metadata["memory"]["python"]`` says so).
"""

from __future__ import annotations

import gc
import itertools
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ..engine import Var
from ..nd import ndarray as _nd
from ..trace.memory import MEMORY_METADATA, MemoryEvents

__all__ = ["MemoryRecording"]

#: What a profile says the memory it recorded leaves out.
PYTHON_UNSEEN = (
    "NDArrays only: NumPy temporaries inside a custom op's Python (and arrays made before the profile) are not counted"
)


class _Storage(weakref.ref):
    """A weak reference to an array's storage that remembers what a free needs to say."""

    __slots__ = ("key", "nbytes", "number", "var")
    key: int
    nbytes: int
    number: int
    var: int


class MemoryRecording:
    """Allocations and frees of NDArray storage while started (see the module docstring)."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.events: list[tuple[int, int, int, int]] = []  # (ns, storage number, var id, +bytes / -bytes)
        self._numbers = itertools.count()
        self._live: dict[int, _Storage] = {}  # id(storage) -> its weak reference
        # Re-entrant: a collection can run inside ``_made`` (it allocates) and free an array whose
        # callback, ``_freed``, then takes the lock on the same thread.
        self._lock = threading.RLock()
        self._previous: Any = None
        self.on = False

    def start(self) -> None:
        if self.on:
            return
        self.on = True
        self._previous = _nd.set_array_hook(self._made)

    def stop(self) -> None:
        """Stop recording; arrays alive now stay allocations without a free (alive at the end). A
        collection first frees what only a reference cycle still held (an autograd graph)."""
        if not self.on:
            return
        gc.collect()
        _nd.set_array_hook(self._previous)
        self.on = False
        with self._lock:
            self._live.clear()  # the weak references die with it: no callback after this

    def _made(self, data: np.ndarray, var: Var) -> None:
        if data.base is not None or not self.on:  # a view: another array's storage
            return
        key = id(data)
        if key in self._live:  # the same storage again (detach(), an alias)
            return
        n = data.nbytes
        if not n:
            return
        ref = _Storage(data, self._freed)
        ref.key, ref.nbytes, ref.var, ref.number = key, n, var.id, next(self._numbers)
        # No lock: a dict store and a list append are each atomic under the GIL (a free-threaded
        # build records no memory: see start()).
        self._live[key] = ref
        self.events.append((self.clock(), ref.number, var.id, n))

    def _freed(self, ref: _Storage) -> None:
        if self._live.pop(ref.key, None) is ref:
            self.events.append((self.clock(), ref.number, ref.var, -ref.nbytes))

    def table(self) -> MemoryEvents | None:
        """The events as columns (None when not recording was ever started)."""
        with self._lock:
            rows = list(self.events)
        if not rows:
            return MemoryEvents.empty()
        a = np.array(rows, dtype=np.int64)
        return MemoryEvents(a[:, 0], a[:, 1], a[:, 2], a[:, 3])

    def metadata(self) -> dict[str, Any]:
        return {MEMORY_METADATA: {"source": "opprof's NDArray storage (exact bytes, every array)", "python": PYTHON_UNSEEN}}
