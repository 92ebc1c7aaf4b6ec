"""``mx.gluon.nn``: not available in opprof (see :mod:`opprof.gluon`)."""

from __future__ import annotations

from .refused import Refused

__all__: list[str] = []


def __getattr__(name: str) -> Refused:
    if name.startswith("__"):
        raise AttributeError(name)
    return Refused(f"mx.gluon.nn.{name}")
