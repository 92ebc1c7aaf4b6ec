"""What the engine knows about the current thread, and the custom-op invocation it is running.

One ``threading.local`` for the whole engine layer, read on every push: its class attributes are
the defaults, so reading a field on a thread that never set it is a plain lookup (``getattr`` with
a default on a missing name raises and swallows an AttributeError, ~0.4 µs on every push).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol

__all__ = ["BlockingPool", "Invocation", "ThreadState", "current_invocation", "thread_state"]


@dataclass(frozen=True, slots=True)
class Invocation:
    """One run of a custom operator's ``forward`` or ``backward``: what pushes made inside it belong to."""

    op_type: str
    id: int
    backward: bool

    @property
    def name(self) -> str:
        return f"_backward_{self.op_type}" if self.backward else self.op_type


class BlockingPool(Protocol):
    """A worker pool that must hear when one of its workers blocks, so that it can grow."""

    def blocked(self, delta: int) -> None: ...


class ThreadState(threading.local):
    engine_worker: object | None = None  # the engine whose op this thread is running
    custom_pool: BlockingPool | None = None  # the custom-op pool this thread works for
    async_body: bool = False  # running an async op's body inline (naive engine)
    invocation: Invocation | None = None  # the custom-op invocation whose Python this thread runs


thread_state = ThreadState()


def current_invocation() -> Invocation | None:
    """The custom-op invocation whose Python is running on this thread, if any."""
    return thread_state.invocation
