"""MXNet's ``mx.base``: the error every failed operation raises, and the type tuples code tests with."""

from __future__ import annotations

import numpy as np

from ..engine import MXNetError

__all__ = ["MXNetError", "integer_types", "numeric_types", "string_types"]

string_types = (str,)
numeric_types = (float, int, np.generic)
integer_types = (int, np.integer)
