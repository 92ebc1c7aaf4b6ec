"""MXNet's ``mx.util``: opprof has no NumPy-shape mode (``mx.np`` semantics), and says so when asked.

``use_np_shape`` still decorates at import time, so a module that marks one of its functions with
it imports; calling that function raises.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["is_np_shape", "np_shape", "set_np_shape", "use_np", "use_np_shape"]

F = TypeVar("F", bound=Callable[..., Any])
_REFUSAL = "opprof has no NumPy-shape mode (MXNet's mx.np semantics: zero-size and scalar shapes); use the classic NDArray API"


def is_np_shape() -> bool:
    return False


def set_np_shape(active: bool) -> bool:
    """Turning NumPy-shape mode on is refused; off is what opprof always is. Returns the previous state."""
    if active:
        raise NotImplementedError(_REFUSAL)
    return False


@contextmanager
def np_shape(active: bool = True) -> Iterator[None]:
    """A scope in NumPy-shape mode: refused; ``np_shape(False)`` is opprof's only mode."""
    if active:
        raise NotImplementedError(_REFUSAL)
    yield


def use_np_shape(func: F) -> F:
    @functools.wraps(func)
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{func.__qualname__}: {_REFUSAL}")

    return refused  # type: ignore[return-value]


def use_np(func: F) -> F:
    """MXNet's ``use_np`` (NumPy semantics for a function or a Gluon block): refused like :func:`use_np_shape`."""
    return use_np_shape(func)
