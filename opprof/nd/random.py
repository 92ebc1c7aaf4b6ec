"""Random arrays whose values do not depend on which engine, or how many threads, ran them.

Each random op draws its seed when it is *pushed*, from one seeded sequence, so the values depend
only on push order; the threaded engine may run the ops in any order and still match the naive one.
"""

from __future__ import annotations

from typing import Any

from . import seeds
from .context import Context
from .ndarray import NDArray, create

__all__ = ["normal", "randint", "seed", "uniform"]


def seed(seed_state: int, ctx: Any = "all") -> None:
    """Restart the sequence of per-op seeds (``mx.random.seed``)."""
    seeds.restart(seed_state)


def uniform(
    low: float = 0.0,
    high: float = 1.0,
    shape: Any = (1,),
    dtype: Any = None,
    ctx: Context | None = None,
    out: NDArray | None = None,
    **kwargs: Any,
) -> NDArray:
    """Samples of U[low, high) (``mx.nd.random.uniform``; also ``mx.nd.uniform``, ``mx.nd.random_uniform``)."""
    if out is not None and shape == (1,):
        shape = out.shape
    return create("_random_uniform", shape, dtype, out, low=float(low), high=float(high), seed=seeds.next_seed())


def normal(
    loc: float = 0.0,
    scale: float = 1.0,
    shape: Any = (1,),
    dtype: Any = None,
    ctx: Context | None = None,
    out: NDArray | None = None,
    **kwargs: Any,
) -> NDArray:
    """Samples of N(loc, scale²) (``mx.nd.random.normal``; also ``mx.nd.normal``, ``mx.nd.random_normal``).

    A negative ``scale`` fails when the op runs, raised at the next wait, as in MXNet.
    """
    if out is not None and shape == (1,):
        shape = out.shape
    return create("_random_normal", shape, dtype, out, loc=float(loc), scale=float(scale), seed=seeds.next_seed())


def randint(
    low: int,
    high: int,
    shape: Any = (1,),
    dtype: Any = "int32",
    ctx: Context | None = None,
    out: NDArray | None = None,
    **kwargs: Any,
) -> NDArray:
    """Integers drawn uniformly from [low, high) (``mx.nd.random.randint``; int32 unless ``dtype``)."""
    if int(high) <= int(low):
        raise ValueError(f"randint: high ({high}) must be greater than low ({low})")
    if out is not None and shape == (1,):
        shape = out.shape
    return create("_random_randint", shape, dtype, out, low=int(low), high=int(high), seed=seeds.next_seed())
