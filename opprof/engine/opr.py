"""The engine's two records: a var (a dependency token) and an op (one pushed operation)."""

from __future__ import annotations

import itertools
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Final, TypeAlias

from .state import CustomOpInfo

__all__ = ["INTERNAL", "EngineError", "MXNetError", "Opr", "OprInfo", "Var", "as_mxnet_error", "report_uncaught"]

_var_ids = itertools.count(1)


class _Internal:
    """The type of :data:`INTERNAL` (its one value, compared by identity)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "INTERNAL"


#: ``info`` of the engine's own bookkeeping ops (the token a wait pushes); observers skip them.
INTERNAL: Final = _Internal()

#: What an op's ``info`` is: ``None`` for most (an NDArray op, a sub-op, a user's), a
#: :class:`~.state.CustomOpInfo` for a custom op's own two ops, :data:`INTERNAL` for the engine's.
OprInfo: TypeAlias = CustomOpInfo | _Internal | None


class MXNetError(RuntimeError):
    """An operation failed (MXNet's ``mx.base.MXNetError``); what failed is its ``__cause__``."""


#: Op sequence numbers, one series for the whole process: every engine numbers its pushes from it,
#: so that an op's number names it across engines (a profile that follows ``set_engine`` keeps
#: every op apart). ``next()`` on it is atomic under the GIL.
OP_SEQ = itertools.count(1)


class EngineError(MXNetError):
    """Misuse of the engine that would otherwise deadlock or corrupt state."""


def report_uncaught() -> None:
    """Say the exception being handled as an uncaught exception in this thread is
    (``threading.excepthook``: printed, or a test's warning), where the engine must go on past it:
    an observer failing under the engine's lock, a pool task that raised."""
    threading.excepthook(threading.ExceptHookArgs((*sys.exc_info(), threading.current_thread())))


_AS_MXNET: dict[type[BaseException], type[MXNetError]] = {}


def as_mxnet_error(error: BaseException) -> BaseException:
    """What a wait raises for ``error``: an MXNetError that is also of ``error``'s own type.

    MXNet raises MXNetError at the wait for any failed op, so ported code catches that; code
    written for opprof catches the op's own exception type; both work. The error itself is the
    ``__cause__``; the wrapper has its message, attributes and traceback. KeyboardInterrupt and
    other BaseExceptions that are not errors pass as they are.
    """
    if isinstance(error, MXNetError) or not isinstance(error, Exception):
        return error
    cls = type(error)
    wrapper = _AS_MXNET.get(cls)
    if wrapper is None:
        try:
            wrapper = type(f"MXNetError[{cls.__name__}]", (MXNetError, cls), {"__module__": __name__})
        except TypeError:  # a type that cannot be combined with RuntimeError
            wrapper = MXNetError
        _AS_MXNET[cls] = wrapper
    # Made the way the original was (its type's __new__ and __init__ with its args: OSError's errno
    # fields, UnicodeError's ranges), then given its attributes and frames: it prints, reads and
    # traces back the same.
    try:
        wrapped = cls.__new__(wrapper, *error.args)
    except TypeError:
        wrapper = MXNetError
        wrapped = MXNetError()
    else:
        try:
            cls.__init__(wrapped, *error.args)
        except Exception:  # an __init__ that wants other arguments: the args below still hold
            pass
    wrapped.args = error.args
    if wrapper is not MXNetError:
        wrapped.__dict__.update(vars(error))
        if isinstance(error, OSError):  # fields its args leave out
            wrapped.filename, wrapped.filename2 = error.filename, error.filename2  # type: ignore[attr-defined]
    wrapped.__cause__ = error
    return wrapped.with_traceback(error.__traceback__)


class Var:
    """A dependency token: ops that read or write it are ordered through its version queue.

    The fields are engine-private state, mutated only under the engine's lock.
    """

    __slots__ = ("_cleared_at", "_queue", "_running_reads", "_writing", "deleted", "exception", "id", "name")

    def __init__(self, name: str | None = None) -> None:
        self.id = next(_var_ids)
        self.name = name
        # Waiting ops in push order: (opr, is_write). Made on first use: most vars never queue an
        # op, and an empty deque is 624 bytes against a Var's 80 (a profile keeps the vars its
        # ops touched, so this is most of its memory per op).
        self._queue: deque[tuple[Opr, bool]] | tuple[()] = ()
        self._running_reads = 0
        self._writing = False
        self.exception: BaseException | None = None
        # Set when a wait has raised ``exception``: ops pushed from then on no longer see it,
        # while ops pushed earlier (and still queued) are skipped as they would have been.
        self._cleared_at: int | None = None
        self.deleted = False

    def new_queue(self) -> deque[tuple[Opr, bool]]:
        """The var's version queue, made now (callers hold the engine lock and found it empty)."""
        q: deque[tuple[Opr, bool]] = deque()
        self._queue = q
        return q

    def __repr__(self) -> str:
        label = f" {self.name!r}" if self.name else ""
        return f"<Var {self.id}{label}>"


class Opr:
    """One pushed operation and the number of vars it still waits for.

    Observers read ``name``, ``info`` (an :data:`OprInfo`), ``is_async`` and ``prof``; everything
    else is the engine's.
    """

    __slots__ = (
        "by",
        "by_var",
        "dispatched",
        "done",
        "fn",
        "info",
        "is_async",
        "name",
        "no_skip",
        "prof",
        "reads",
        "ready_ns",
        "seq",
        "wait",
        "writes",
    )

    def __init__(
        self,
        fn: Callable[..., Any],
        reads: tuple[Var, ...],
        writes: tuple[Var, ...],
        name: str,
        is_async: bool,
        no_skip: bool,
        info: OprInfo,
    ) -> None:
        self.fn = fn
        self.reads = reads
        self.writes = writes
        self.name = name
        self.wait = 0
        self.is_async = is_async
        self.no_skip = no_skip
        self.done = False
        self.dispatched = False  # handed to _dispatch (set before anything can interrupt it)
        self.seq = 0  # push order, set under the engine lock
        self.prof: Any = None  # what an observer noted at push time
        # The enabling edge, for observers (see Engine._complete): the op whose completion made
        # this one ready (its seq; 0: ready when pushed), the var it released, and when (on the
        # observer's clock; only while an observer listens).
        self.by = 0
        self.by_var = 0
        self.ready_ns = 0
        # What the layers above say the op is (see OprInfo).
        self.info = info
