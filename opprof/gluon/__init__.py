"""``mx.gluon``: opprof has no Gluon. The names import, so code that only imports Gluon runs; any
use says so (``NotImplementedError``) rather than failing far away.

opprof models MXNet's imperative engine, NDArrays, autograd and custom operators; Gluon's
layers, trainers and data loaders are not part of it.
"""

from __future__ import annotations

from . import nn
from .refused import Refused

__all__ = ["nn"]


def __getattr__(name: str) -> Refused:
    if name.startswith("__"):
        raise AttributeError(name)
    return Refused(f"mx.gluon.{name}")
