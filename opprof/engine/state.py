"""What the engine knows about the current thread, and the custom-op invocation it is running.

One ``threading.local`` for the whole engine layer, read on every push: its class attributes are
the defaults, so reading a field on a thread that never set it is a plain lookup (``getattr`` with
a default on a missing name raises and swallows an AttributeError, ~0.4 µs on every push).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

__all__ = ["BlockingPool", "CustomOpInfo", "CustomPart", "Invocation", "ThreadState", "current_invocation", "thread_state"]


@dataclass(frozen=True, slots=True)
class Invocation:
    """One run of a custom operator's ``forward`` or ``backward``: what pushes made inside it belong to."""

    op_type: str
    id: int
    backward: bool

    @property
    def name(self) -> str:
        return f"_backward_{self.op_type}" if self.backward else self.op_type


class CustomPart(Enum):
    """Which of its invocation's two engine ops a custom op's own op is (see :class:`CustomOpInfo`)."""

    INVOCATION = "invocation"  # the async op that hands the Python to the custom-op pool; its start starts the call
    COMPLETION = "completion"  # the ``Dummy_Wait`` the Python's thread pushes after it: releases the outputs


@dataclass(slots=True)
class CustomOpInfo:
    """``Opr.info`` of the two engine ops the custom-op machinery pushes per invocation: whose, and which.

    Observers tell the parts apart by ``part``, never by the op's name. Read-only by convention: not
    frozen, as a frozen dataclass costs 0.2 µs more to make (two a call).
    """

    invocation: Invocation
    part: CustomPart


class BlockingPool(Protocol):
    """A worker pool that must hear when one of its workers blocks, so that it can grow."""

    def blocked(self, delta: int) -> None: ...


class ThreadState(threading.local):
    engine_worker: object | None = None  # the engine whose op this thread is running
    custom_pool: BlockingPool | None = None  # the custom-op pool this thread works for
    #: On an engine worker: custom ops' Python to hand to the custom-op pool when the running op
    #: returns (:meth:`opprof.engine.threaded.ThreadedEngine.run_custom`).
    custom_handoffs: list[Any] | None = None
    async_body: bool = False  # running an async op's body inline (naive engine)
    invocation: Invocation | None = None  # the custom-op invocation whose Python this thread runs
    #: What left a NumPy data-memory handler installed on this thread for its next custom op (a
    #: profiler's counter: opprof.profiler._npmem, whose ``unstick()`` takes it back), None if none.
    kept_handler: Any = None


thread_state = ThreadState()


def current_invocation() -> Invocation | None:
    """The custom-op invocation whose Python is running on this thread, if any."""
    return thread_state.invocation
