"""The change asked for: factors and pool sizes checked, and the factor of every span
(see :mod:`opprof.trace.analysis.whatif`)."""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping

import numpy as np

from ...columns import ROLE_CODE, SpanTable
from ...records import WAIT as WAIT_CATEGORY
from ...records import Role

__all__ = ["MAX_FACTOR", "MAX_POOL", "MIN_FACTOR", "check_factors", "check_pool", "span_factors"]

_WAIT_ROLE = ROLE_CODE[Role.WAIT]
_BACKWARD = "_backward_"


#: The factors a replay takes: slower than 1000x would make an hour of a run ~40 days of ns, past
#: what int64 sums of a whole run hold with room; faster than 10^9x makes every span 0 ns anyway.
MIN_FACTOR, MAX_FACTOR = 1e-3, 1e9
#: The largest pool a replay models (the engine's own bound is 1,024 threads).
MAX_POOL = 4096


def check_factors(speedup: Mapping[str, float] | None) -> dict[str, float]:
    """The factors as floats, each finite and > 0 (a factor is a ratio of durations)."""
    out: dict[str, float] = {}
    for name, f in (speedup or {}).items():
        if not isinstance(name, str):
            raise TypeError(f"speedup names must be strings (span names or custom-op types), got {name!r}")
        if isinstance(f, bool) or not isinstance(f, (int, float, np.integer, np.floating)):
            raise TypeError(f"speedup[{name!r}] must be a number (2.0: twice as fast), got {f!r}")
        x = float(f)
        if not math.isfinite(x) or x <= 0:
            raise ValueError(f"speedup[{name!r}] must be a finite number > 0 (2.0: twice as fast, 0.5: half as fast), got {f!r}")
        if not MIN_FACTOR <= x <= MAX_FACTOR:
            raise ValueError(
                f"speedup[{name!r}] = {f!r} is outside what the model replays ({MIN_FACTOR:g} to {MAX_FACTOR:g}: "
                "a span's ns must stay a whole number the model can add up)"
            )
        out[name] = x
    return out


def check_pool(what: str, n: int | None) -> int | None:
    """A pool size, a whole number >= 1 (an engine with no worker would never run an op)."""
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"{what} must be a whole number >= 1, got {n!r}")
    if n > MAX_POOL:
        raise ValueError(f"{what} must be at most {MAX_POOL:,} (the model keeps a list of the pool's threads), got {n!r}")
    return int(n)


def span_factors(t: SpanTable, factors: dict[str, float]) -> np.ndarray:
    """The factor of every span: by custom-op type, then by direction, then by exact name.

    A name selects an op type (``T``: its whole family, forward and backward, parents, Python,
    sub-ops, ``Dummy_Wait``), a backward family (``_backward_T``), or the spans of that exact name
    (``T::pure_python``, ``_plus_scalar``). The more specific selection wins where two apply, so
    ``{"T": 2, "T::pure_python": 4}`` makes T's Python 4x and the rest of T 2x faster. Waits are
    not work (their time follows from what they wait for), so no name selects them.
    """
    out = np.ones(len(t), dtype=np.float64)
    if not factors:
        return out
    names = t.strs(t.name)
    types = t.strs(t.op_type)
    family = (t.inv >= 0) & (t.op_type >= 0)
    backward = t.backward == 1
    known_types = set(types[family].tolist())
    known_backward = {_BACKWARD + x for x in set(types[family & backward].tolist())}
    is_wait = (t.role == _WAIT_ROLE) | (t.strs(t.cat) == WAIT_CATEGORY)
    known_names = set(names[~is_wait].tolist())
    by_type, by_direction, by_name = [], [], []
    for name, f in factors.items():
        if name in known_types:
            by_type.append((name, f))
        elif name in known_backward:
            by_direction.append((name, f))
        elif name in known_names:
            by_name.append((name, f))
        else:
            known = sorted(known_types | known_backward | known_names)
            close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
            hint = f"; closest: {', '.join(map(repr, close))}" if close else ""
            shown = ", ".join(map(repr, known[:12])) + (", ..." if len(known) > 12 else "")
            raise ValueError(
                f"speedup name {name!r} is neither a span name nor a custom-op type in this trace{hint} (known: {shown})"
            )
    for name, f in by_type:
        out[family & (types == name)] = f
    for name, f in by_direction:
        out[family & backward & (types == name[len(_BACKWARD) :])] = f
    for name, f in by_name:
        out[(names == name) & ~is_wait] = f
    return out
