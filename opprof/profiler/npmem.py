"""The NumPy data a custom op's Python allocates itself: its temporaries (``y = np.tanh(x) * 2``),
which NDArray memory recording (:mod:`.memory`) cannot see.

:mod:`._npmem` (C) installs a NumPy data-memory handler (NumPy >= 1.22, NEP 49) in the calling
thread's context between :func:`enter` and :func:`leave`; it forwards to NumPy's default handler and
counts bytes allocated and freed on that thread. ``leave`` returns the most bytes allocated between
the two above what was live at ``enter``. The recorder calls them around each custom op's Python when
it records memory (``opprof.profile(memory=True)``); without memory recording nothing is installed.
On a custom-op pool thread the handler stays installed from one call to the next while the recording
lasts (``enter(sticky=True)``: setting it twice a call was ~1 µs of a trivial custom op's ~37 µs), and
that thread's first custom op after the recording puts back the handler it replaced (``unstick``).

Where the sub-ops a custom op's Python pushes run on that same thread (the naive engine), their
outputs' storage is NumPy data made there too, and is counted with the temporaries.

The same module has a second handler, the watching one (``watch_enter``/``watch_leave``), which
only forwards and tells the compiled memory log (``_memlog.c``) of each block freed or moved: a
memory recording installs it in its own thread, so that the frees of the arrays made there need no
weak reference (:mod:`.memory`). Both handlers tell the log through the ``_hooks`` capsule.

A third, the recycling one (:func:`recycling`), is for opprof's own work: the trace build makes and
drops megabytes of temporaries whose fresh pages each cost a page fault (~1.8 µs here: ~3 ms of a
20,000-span stop()'s 9 ms); it keeps large blocks freed through it (up to 32 MB) for the next
request of their size class.

Not available (``AVAILABLE`` False, ``WHY_NOT`` says why) with ``OPPROF_PURE=1``, where the module
was not built, where NumPy lacks the handler API, where another data handler than NumPy's default is
in use when this module is imported, or where the installed handler does not answer to its name.
"""

from __future__ import annotations

import ctypes
import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..engine.gil import load_compiled

__all__ = ["AVAILABLE", "WHY_NOT", "enter", "leave", "recycling"]

#: What :mod:`._npmem` was built with: ``PyDataMem_Handler`` (char name[127], uint8 version, five pointers).
HANDLER_SIZE = 128 + 5 * ctypes.sizeof(ctypes.c_void_p)


def _multiarray() -> tuple[Any, Any]:
    """NumPy's C-API capsule (``_ARRAY_API``) and the module with ``get_handler_name``: in
    ``numpy._core`` (NumPy 2), else ``numpy.core`` (NumPy 1.x)."""
    for package in ("numpy._core", "numpy.core"):
        try:
            umath = importlib.import_module(f"{package}._multiarray_umath")
            multiarray = importlib.import_module(f"{package}.multiarray")
        except ImportError:
            continue
        api = getattr(umath, "_ARRAY_API", None) or getattr(multiarray, "_ARRAY_API", None)
        if api is None:
            raise AttributeError(f"{package} has no _ARRAY_API")
        return api, multiarray
    raise ImportError("neither numpy._core nor numpy.core has _multiarray_umath")


def _load() -> tuple[Any, str]:
    module, why = load_compiled("_npmem", HANDLER_SIZE, package="opprof.profiler")
    if module is None:
        return None, why
    try:
        api, multiarray = _multiarray()
    except (ImportError, AttributeError) as error:
        return None, f"NumPy {np.__version__} has no C-API capsule where expected: {error}"
    get_name = getattr(multiarray, "get_handler_name", None)
    if get_name is None:
        return None, f"NumPy {np.__version__} has no data memory handler API (NumPy >= 1.22)"
    try:
        module.bind(api)
    except RuntimeError as error:
        return None, str(error)
    # Install once, and check NumPy names ours, counts a known allocation, and takes the old one back.
    before = get_name()
    token = module.enter()
    if token is None:
        return None, f"another NumPy data memory handler ({before}) is in use"
    try:
        inside = get_name()
        probe = np.empty(1 << 20, dtype=np.uint8)
        del probe
    finally:
        peak = module.leave(token)
    after = get_name()
    if inside != module.HANDLER_NAME:
        return None, f"NumPy's handler while installed is {inside!r}, not {module.HANDLER_NAME!r}"
    if after != before:
        return None, f"NumPy's handler after leaving is {after!r}, not {before!r} as before"
    if peak != 1 << 20:
        return None, f"a 1 MiB probe array counted {peak} bytes"
    return module, ""


_npmem, _why_not = _load()
#: Whether NumPy temporaries are measured here.
AVAILABLE: bool = _npmem is not None
#: Why not ("" where they are).
WHY_NOT: str = _why_not


def enter(sticky: bool = False) -> Any:
    """Install the counting handler in this thread's context; a token for :func:`leave` (None where
    nothing is measured: not available, or another handler than NumPy's default is in use).
    ``sticky``: leave it installed after :func:`leave` (a thread of opprof's own, where setting it
    at every call is most of its cost: see ``_npmem.c``)."""
    return _npmem.enter(sticky) if _npmem is not None else None


def leave(token: Any) -> int:
    """Put the previous handler back; the peak bytes of NumPy data this thread allocated since
    :func:`enter` above what was live then (-1 for a None token)."""
    if token is None or _npmem is None:
        return -1
    return int(_npmem.leave(token))


@contextmanager
def recycling() -> Iterator[bool]:
    """NumPy's data in this thread through the recycling handler while the block runs (see the
    module docstring); yields whether it is in use (not where :mod:`._npmem` is not available or
    another handler than NumPy's default is installed here). Arrays made inside keep it: freed
    later, on any thread, their blocks go to the spares (up to 32 MB, ``_npmem.recycle_spares()``)."""
    token = _npmem.recycle_enter() if _npmem is not None else None
    try:
        yield token is not None
    finally:
        if token is not None:
            _npmem.recycle_leave(token)
