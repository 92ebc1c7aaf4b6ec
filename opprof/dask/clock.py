"""Each worker's clock mapped onto the client's, the way NTP does it, and how far to trust it.

The client reads its clock (``t0``), asks the worker for its own (``w``, a comm handler of its own)
and reads its clock again (``t1``). If the request and the reply took equally long, the worker
read its clock at the client's ``(t0 + t1) / 2``, so ``w - (t0 + t1) / 2`` is the offset. The
error is at most half the round trip, and is the round trip's asymmetry in practice; of several
exchanges the one with the shortest round trip is kept (the least queued). Exchanges at the start
and at the end of the profile give the drift between them, which the residual skew includes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["ClockEstimate", "Exchange", "estimate"]


@dataclass(frozen=True)
class Exchange:
    """One round trip: client before (``t0``), the worker's reading (``w``), client after (``t1``), ns."""

    t0: int
    w: int
    t1: int

    @property
    def rtt(self) -> int:
        return self.t1 - self.t0

    @property
    def offset(self) -> float:
        return self.w - (self.t0 + self.t1) / 2


@dataclass(frozen=True)
class ClockEstimate:
    """Worker clock minus client clock (ns): ``to_client(t) = t - offset_ns``."""

    offset_ns: int
    rtt_ns: int  # the shortest round trip: the offset's error is at most half of it
    drift_ns: int  # the offset at the end minus the one at the start (0 with one batch)
    exchanges: int

    @property
    def skew_bound_ns(self) -> int:
        """How far a mapped time may be off, at most: half the round trip, plus half the drift."""
        return self.rtt_ns // 2 + abs(self.drift_ns) // 2

    def as_metadata(self) -> dict[str, int]:
        return {
            "clock_offset_ns": self.offset_ns,
            "clock_rtt_ns": self.rtt_ns,
            "clock_drift_ns": self.drift_ns,
            "clock_skew_bound_ns": self.skew_bound_ns,
        }


def _best(batch: Iterable[Exchange]) -> Exchange | None:
    return min(batch, key=lambda e: e.rtt, default=None)


def estimate(start: Iterable[Exchange], end: Iterable[Exchange] = ()) -> ClockEstimate | None:
    """The offset from batches of exchanges at the start and the end (either may be empty), or None."""
    start, end = list(start), list(end)
    a, b = _best(start), _best(end)
    if a is None and b is None:
        return None
    if a is not None and b is not None:
        offset = (a.offset + b.offset) / 2  # the middle of the run, where half its times are
        return ClockEstimate(round(offset), max(a.rtt, b.rtt), round(b.offset - a.offset), len(start) + len(end))
    e = a if a is not None else b
    assert e is not None
    return ClockEstimate(round(e.offset), e.rtt, 0, len(start) + len(end))
