"""A stand-in for one Gluon name that refuses, saying which, when used."""

from __future__ import annotations

from typing import Any

__all__ = ["Refused"]


class Refused:
    """Stands for one Gluon name: calling it, or anything on it, raises saying which."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _refuse(self) -> NotImplementedError:
        return NotImplementedError(f"{self._name}: opprof has no Gluon (mx.gluon); use mx.nd, mx.autograd and mx.operator")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise self._refuse()

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise self._refuse()

    def __repr__(self) -> str:
        return f"<{self._name}: not available in opprof>"
