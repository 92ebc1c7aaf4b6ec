"""Recording memory while profiling: each NDArray's storage, from its making to its freeing.

Every NDArray made while recording passes through :func:`opprof.nd.ndarray.set_array_hook`'s hook:
one made with storage of its own (a NumPy array that owns its buffer, not a view of another, not
one already seen: ``detach()`` shares it) is an allocation of exactly ``storage.nbytes``. A weak
reference to that storage calls back when its last reference dies (the array, its views, and the
pushed ops that still hold it: the storage lives until the engine is done with it, as MXNet's
var does until its deletion runs), which is the free. Both are stamped on the profile's clock
and name the array's var; :mod:`opprof.trace.memory` says what is derived from them.

Cost: one hook call per array made and one weak-reference callback at its free; nothing when off
(one global read per array). Where the compiled parts are built, frees are mostly seen another way:
the recording thread allocates NumPy data through opprof's watching handler (``_npmem.c``'s
``watch_enter``, NumPy's own allocator API) while recording, and so does a custom op's Python
(the counting handler): an array whose data one of them allocated is kept in the compiled log's
pointer table and its free comes from the handler's free hook, with no weak reference (0.13 µs
an NDArray made and freed against 0.24 µs with one; arrays allocated elsewhere keep the weak
reference, see ``WATCH_WHY_NOT``). Where :mod:`._memlog` is built both are C (the default;
``OPPROF_PURE=1`` or ``MemoryRecording(compiled=False)`` for the pure-Python path, which is also
the reference the compiled one is tested against): ~0.2 µs per array made and freed (0.19-0.34 µs
on a loop of 20,000 ``x = x + 1`` on 4x4 arrays, naive engine, where NumPy's own ``empty(16)`` is
0.1 µs), against 1.0-1.4 µs in Python (a bound method call, a dict keyed by ``id``, a tuple per
event that the collector tracks, a Python frame per free). On that loop profiled (ops of 6-9 µs,
threaded engine, a dozen runs on a 2-core machine others were busy on), memory on over off was
0.93-1.26, median 1.07 (1.04-1.07 when quiet), compiled, and 1.15-1.39, median 1.27 (1.30-1.33
when quiet), in Python; on trivial custom ops (several arrays each) 0.92-1.10 against 1.01-1.19.
``benchmarks``' "Memory" rows measure it in the suite.

**Where each array was made.** Each allocation remembers the user's line that made it: the
innermost frame outside opprof's own code (:data:`.sites.NOT_USER`) and ``threading`` (an engine
worker's arrays have none). Only the arrays still alive when the profile stops keep it in the
trace (``MemoryEvents.site``): the leak report names the line a kept array came from, the cell's
own as well as a custom op's. The compiled path reads the interpreter's frame list in C (20-40 ns
an array; no frame object is made), the pure path walks ``sys._getframe`` (~1 µs more an array).

The pure-Python path sees NDArrays only: the NumPy temporaries inside a custom op's Python are not
counted (``metadata["memory"]["python"]`` says so).
"""

from __future__ import annotations

import gc
import itertools
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ..engine import Var
from ..engine.gil import load_compiled
from ..nd import ndarray as _nd
from ..trace.memory import MEMORY_METADATA, MemoryEvents
from . import npmem
from . import sites as _sites

__all__ = ["COMPILED_WHY_NOT", "MemoryRecording"]

#: What a profile says the memory it recorded leaves out.
PYTHON_UNSEEN = (
    "NDArrays only: NumPy temporaries inside a custom op's Python (and arrays made before the profile) are not counted"
)


class _Storage(weakref.ref):
    """A weak reference to an array's storage that remembers what a free needs to say."""

    __slots__ = ("key", "nbytes", "number", "site", "var")
    key: int
    nbytes: int
    number: int
    site: tuple[str, int] | None
    var: int


#: The most frames a walk from the NDArray hook towards the user's line looks at (the usual paths: 2-5).
MAX_WALK = 24


def _not_user() -> tuple[str, ...]:
    """Code whose lines are not the user's, for where an array was made: opprof's own and what a
    front end added (:data:`.sites.NOT_USER`, read when recording starts), and ``threading`` (an
    engine worker's frames below its loop)."""
    return (*_sites.NOT_USER, threading.__file__)


def _user_line(not_user: tuple[str, ...]) -> tuple[str, int] | None:
    """The pure path's walk: the innermost frame above the hook whose file is not under ``not_user``."""
    f: Any = sys._getframe(2)
    for _ in range(MAX_WALK):
        if f is None:
            return None
        if not f.f_code.co_filename.startswith(not_user):
            return (f.f_code.co_filename, f.f_lineno)
        f = f.f_back
    return None


def _sites_of(events: MemoryEvents, made_at: dict[int, tuple[str, int]]) -> MemoryEvents:
    """``events`` with each allocation in ``made_at`` (storage number -> file, line) naming its line."""
    if not made_at:
        return events
    texts: dict[tuple[str, int], int] = {}
    site = np.full(len(events), -1, dtype=np.int64)
    for k in np.flatnonzero(events.allocated).tolist():
        where = made_at.get(int(events.storage[k]))
        if where is not None:
            site[k] = texts.setdefault(where, len(texts))
    sites = tuple(_sites.site_text(file, line) for file, line in texts)
    return MemoryEvents(events.ts, events.storage, events.var, events.nbytes, events.pid, site, sites)


#: One event as :mod:`._memlog` writes it: four native int64s (ns, storage number, var id, ±bytes).
RECORD_SIZE = 4 * 8

_memlog, _why_not = load_compiled("_memlog", RECORD_SIZE, package="opprof.profiler")


def _numpy_samples() -> list[np.ndarray]:
    """Arrays the compiled log's struct reading is checked on: dtypes of several sizes, 0 to 3
    dimensions, empty ones, views, a structured dtype."""
    a = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    return [
        a,
        a[1],
        a[:, ::2],
        np.empty(0, dtype=np.int8),
        np.zeros((), dtype=np.complex128),
        np.ones((5, 7), dtype=np.float32),
        np.empty(3, dtype=np.dtype([("x", np.int16), ("y", np.float64)])),
        np.frombuffer(b"abcd", dtype=np.uint8),
    ]


#: Whether the compiled log reads an array's base and bytes off NumPy's struct (checked at import on
#: :func:`_numpy_samples`; where a NumPy's layout differs, it asks by getattr, ~55 ns more an array).
NUMPY_STRUCT = bool(_memlog is not None and _memlog.bind_numpy(np.ndarray, _numpy_samples()))


def _watch_through_npmem() -> str:
    """Let the compiled log see frees through :mod:`.npmem`'s data-memory handler: "" where it
    does, else why not. Checked on two arrays: one allocated with the handler installed must name
    it (NumPy's ``get_handler_name`` and the struct's ``mem_handler`` alike), one allocated
    without must not."""
    if _memlog is None:
        return _why_not
    if not NUMPY_STRUCT:
        return "NumPy's array struct is not the one the compiled log reads"
    if not npmem.AVAILABLE or npmem._npmem is None:
        return npmem.WHY_NOT
    _memlog.bind_npmem(npmem._npmem._hooks)
    names = []
    for enter, leave in ((npmem._npmem.watch_enter, npmem._npmem.watch_leave), (npmem.enter, npmem.leave)):
        token = enter()
        try:
            ours = np.empty(4096, dtype=np.uint8)
        finally:
            leave(token)
        theirs = np.empty(4096, dtype=np.uint8)
        name = npmem._multiarray()[1].get_handler_name(ours)
        mine, other = _memlog.handler_of(ours), _memlog.handler_of(theirs)
        if token is None or mine is None or mine is other:
            _memlog.bind_npmem(None)
            return f"an array allocated with opprof's NumPy handler does not say so ({name!r})"
        names.append(name)
    if names != [npmem._npmem.WATCH_NAME, npmem._npmem.HANDLER_NAME]:
        _memlog.bind_npmem(None)
        return f"arrays allocated with opprof's NumPy handlers name {names}"
    return ""


#: Why frees are not seen through NumPy's data-memory handler here ("" where they are: the
#: recording thread and custom ops' Pythons allocate through opprof's handler while recording, and
#: their arrays need no weak reference).
WATCH_WHY_NOT: str = _watch_through_npmem()
#: Why memory is recorded in Python here ("" where the compiled hot path is in use).
COMPILED_WHY_NOT: str = _why_not
_CLOCK_WHY_NOT = "the compiled memory log reads CLOCK_MONOTONIC: it takes clock=time.perf_counter_ns only"


def collect_young() -> None:
    """Free the reference cycles among young objects (generations 0 and 1: what a profiled cell
    made), not the whole heap: a full collection took 107 ms in a process of 2M objects, where
    generation 1 took 0.02 ms. Arrays in older cycles stay "alive" until Python collects them."""
    gc.collect(1)


class MemoryRecording:
    """Allocations and frees of NDArray storage while started (see the module docstring)."""

    #: Which path records: "compiled" (:mod:`._memlog`) or "python" (this class's own methods).
    path = "python"

    def __new__(cls, clock: Callable[[], int], *, compiled: bool | None = None) -> MemoryRecording:
        """``compiled``: None (default) takes the compiled hot path where it is built and the clock is
        the one it reads (CLOCK_MONOTONIC, what perf_counter_ns reads on Linux); False this
        pure-Python one (the reference the compiled one is tested against); True requires the
        compiled one (RuntimeError, saying why, where it is not)."""
        usable = _memlog is not None and clock is time.perf_counter_ns
        if compiled and not usable:
            raise RuntimeError(f"no compiled memory recording here: {COMPILED_WHY_NOT or _CLOCK_WHY_NOT}")
        if cls is MemoryRecording and usable and compiled is not False:
            cls = _CompiledMemoryRecording
        return super().__new__(cls)

    def __init__(self, clock: Callable[[], int], *, compiled: bool | None = None) -> None:
        self.clock = clock
        self.events: list[tuple[int, int, int, int]] = []  # (ns, storage number, var id, +bytes / -bytes)
        self._numbers = itertools.count()
        self._live: dict[int, _Storage] = {}  # id(storage) -> its weak reference
        self._previous: Any = None
        self._not_user: tuple[str, ...] = ()
        # Storage number -> the user's line that made it, for the arrays alive when recording stopped.
        self._made_at: dict[int, tuple[str, int]] = {}
        self.on = False

    def start(self) -> None:
        if self.on:
            return
        self.on = True
        self._not_user = _not_user()
        self._made_at = {}
        self._previous = _nd.set_array_hook(self._made)

    def stop(self) -> None:
        """Stop recording; arrays alive now stay allocations without a free (alive at the end), each
        with the line that made it. A collection first frees what only a reference cycle still
        held (an autograd graph)."""
        if not self.on:
            return
        collect_young()
        _nd.set_array_hook(self._previous)
        self.on = False
        self._made_at = {ref.number: ref.site for ref in list(self._live.values()) if ref.site is not None}
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
        ref.site = _user_line(self._not_user)
        # No lock: a dict store and a list append are each atomic (under the GIL, and per object
        # on a free-threaded build), and a free that a collection runs inside this call (it
        # allocates) only pops another storage's entry and appends.
        self._live[key] = ref
        self.events.append((self.clock(), ref.number, var.id, n))

    def _freed(self, ref: _Storage) -> None:
        if self._live.pop(ref.key, None) is ref:
            self.events.append((self.clock(), ref.number, ref.var, -ref.nbytes))

    def table(self, since: int = 0) -> MemoryEvents:
        """The events as columns: all of them, or those after the first ``since`` recorded (a Dask
        worker ships its memory a piece at a time, :meth:`recorded` counting what it shipped)."""
        rows = self.events[since:]  # a copy, taken at once
        if not rows:
            return MemoryEvents.empty()
        a = np.array(rows, dtype=np.int64)
        return _sites_of(MemoryEvents(a[:, 0], a[:, 1], a[:, 2], a[:, 3]), self._made_at)

    def recorded(self) -> int:
        """Events recorded so far."""
        return len(self.events)

    def release(self) -> None:
        """Drop the events once stopped and read into a trace (the compiled log keeps its buffer for
        the next recording's). Recording again after this records from nothing."""
        if self.on:
            raise RuntimeError("a memory recording is released once stopped")
        self.events = []

    def metadata(self) -> dict[str, Any]:
        """``metadata["memory"]``: what was recorded, by which path (and why not compiled), what is not seen."""
        why = {} if self.path == "compiled" else {"why_not": COMPILED_WHY_NOT or _CLOCK_WHY_NOT}
        return {
            MEMORY_METADATA: {
                "source": "opprof's NDArray storage (exact bytes, every array)",
                "path": self.path,
                **why,
                "python": PYTHON_UNSEEN,
            }
        }


class _CompiledMemoryRecording(MemoryRecording):
    """:class:`MemoryRecording` with its hook and frees in C (:mod:`._memlog`): the NDArray hook is
    the C ``Log.made`` itself; a storage NumPy allocated through opprof's handlers is kept in the
    log's pointer table and its free comes from the handler (see the module docstring), any other
    has a C ``weakref.ref`` subclass whose callback is C; each event is four int64s in a C buffer
    that :meth:`table` reads with NumPy. Same rules, same events (tests/profiler/test_memory.py
    holds them equal), stamped with the same clock."""

    path = "compiled"

    def __init__(self, clock: Callable[[], int], *, compiled: bool | None = None) -> None:
        assert _memlog is not None
        self.clock = clock
        self._log = _memlog.Log(Var)
        self._previous: Any = None
        self._made_at: dict[int, tuple[str, int]] = {}
        self._npmem_token: Any = None
        self._npmem_thread = 0
        self.on = False

    @property
    def events(self) -> list[tuple[int, int, int, int]]:  # type: ignore[override]
        """The events as the Python path keeps them (for reading, not on any hot path)."""
        return [(t, s, v, n) for t, s, v, n in self._rows().tolist()]

    def _rows(self) -> np.ndarray:
        return np.frombuffer(self._log.records(), dtype=np.int64).reshape(-1, 4)

    def recorded(self) -> int:
        return len(self._rows())

    def release(self) -> None:
        self._log.release()  # refused while recording, by the log itself (as the Python path's check)

    def start(self) -> None:
        if self.on:
            return
        self.on = True
        self._made_at = {}
        self._log.start(_not_user())
        self._previous = _nd.set_array_hook(self._log.made)
        # The recording thread allocates through opprof's NumPy handler while recording, so the
        # frees of what it makes are seen by the handler (see WATCH_WHY_NOT).
        self._npmem_token = npmem._npmem.watch_enter() if not WATCH_WHY_NOT else None
        self._npmem_thread = threading.get_ident()

    def stop(self) -> None:
        """As :meth:`MemoryRecording.stop`: a collection first, then the C log lets go of every weak
        reference (no callback after this)."""
        if not self.on:
            return
        collect_young()
        _nd.set_array_hook(self._previous)
        self.on = False
        if self._npmem_token is not None and threading.get_ident() == self._npmem_thread:
            npmem._npmem.watch_leave(self._npmem_token)  # (stopped on another thread: its context is left as it is)
        self._npmem_token = None
        self._made_at = {number: (file, line) for number, file, line in self._log.alive_sites()}
        self._log.stop()

    def table(self, since: int = 0) -> MemoryEvents:
        """The events as columns: one copy of the C records (a snapshot), no Python object per event."""
        ts, storage, var, nbytes = self._rows()[since:].T.copy()  # writeable, as the Python path's are
        if not len(ts):
            return MemoryEvents.empty()
        return _sites_of(MemoryEvents(ts, storage, var, nbytes), self._made_at)
