"""The one sequence of per-op seeds that random ops (and Dropout) draw from when they are *pushed*.

Seeds depend only on push order, so the threaded engine may run the ops in any order and still
match the naive one. ``mx.random.seed(n)`` restarts the sequence.
"""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["next_seed", "restart"]

_lock = threading.Lock()
_seeds = np.random.SeedSequence(0)
_counter = 0


def restart(seed_state: int) -> None:
    global _seeds, _counter
    with _lock:
        _seeds = np.random.SeedSequence(int(seed_state))
        _counter = 0


def next_seed() -> tuple[int, ...]:
    """The seed of the op being pushed now: (the sequence's entropy, the op's number in it)."""
    global _counter
    with _lock:
        _counter += 1
        entropy = _seeds.entropy
        assert isinstance(entropy, int)  # restart() always makes it from one int
        return (entropy, _counter)
