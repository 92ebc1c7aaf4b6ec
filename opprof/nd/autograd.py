"""MXNet's ``mx.autograd``: ``record()``, ``pause()``, ``backward()`` and the mode switches.

The tape itself is :mod:`.tape`; ``backward`` is :func:`.ndarray.backward`. This module is the
name MXNet code imports.
"""

from .ndarray import backward
from .tape import (
    is_recording,
    is_training,
    mark_variables,
    pause,
    predict_mode,
    record,
    set_recording,
    set_training,
    train_mode,
)

__all__ = [
    "backward",
    "is_recording",
    "is_training",
    "mark_variables",
    "pause",
    "predict_mode",
    "record",
    "set_recording",
    "set_training",
    "train_mode",
]
