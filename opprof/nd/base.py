"""MXNet's ``mx.base``: the error every failed operation raises, and the type tuples code tests with."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..engine import MXNetError

__all__ = ["MXNetError", "integer_types", "numeric_types", "py_str", "string_types"]

string_types = (str,)
numeric_types = (float, int, np.generic)
integer_types = (int, np.integer)


def py_str(x: bytes) -> str:
    """A C string from the library as text (MXNet's helper; opprof's strings are text already)."""
    return x.decode("utf-8") if isinstance(x, bytes) else str(x)


def _as_list(obj: Any) -> list[Any]:
    """``obj`` if it is a list, else ``[obj]``: MXNet's helper that its test modules import."""
    return obj if isinstance(obj, list) else [obj]
