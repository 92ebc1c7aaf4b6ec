"""MXNet's ``mx.nd``: NDArrays on NumPy whose every operator is one push to the engine.

Layers inside, from the bottom: :mod:`.ops` (what each named operator computes, plain NumPy),
:mod:`.tape` (autograd's recording), :mod:`.ndarray` (the array and its operators),
:mod:`.operator` (custom operators in Python), and the MXNet faces :mod:`.autograd` and
:mod:`.random`.
"""

from . import base, context, contrib, random, runtime, util
from .ndarray import *  # noqa: F403 - the mx.nd namespace is ndarray's public names
from .ndarray import __all__ as _ndarray_all
from .operator import Custom
from .random import normal, uniform
from .serialize import load, load_frombuffer, save

# MXNet's older names of the random samplers, still common in 1.x code.
random_uniform = uniform
random_normal = normal

__all__ = [
    *_ndarray_all,
    "Custom",
    "base",
    "context",
    "contrib",
    "load",
    "load_frombuffer",
    "normal",
    "random",
    "random_normal",
    "random_uniform",
    "runtime",
    "save",
    "uniform",
    "util",
]
