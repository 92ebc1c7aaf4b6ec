"""MXNet's ``mx.autograd``: ``record()``, ``pause()``, ``backward()``, ``grad()``, ``Function``.

The tape itself is :mod:`.tape`; ``backward`` is :func:`.ndarray.backward`. This module is the
name MXNet code imports (often with ``from mxnet.autograd import *``, which also gives ``NDArray``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import tape as _tape
from .ndarray import NDArray, backward, zeros_like
from .ops import OperatorError
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
    "Function",
    "NDArray",
    "backward",
    "grad",
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


def grad(
    heads: NDArray | Sequence[NDArray],
    variables: NDArray | Sequence[NDArray],
    head_grads: NDArray | Sequence[NDArray | None] | None = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    train_mode: bool = True,
) -> list[NDArray]:
    """The gradients of ``heads`` with respect to ``variables``, returned, not stored in ``.grad``.

    ``variables`` are arrays that called ``attach_grad()`` (or ``mark_variables``); their own
    ``.grad`` is left as it was. Second-order gradients (``create_graph=True``) are refused: the
    backward pass here pushes NumPy kernels, which are not themselves recorded.
    """
    if create_graph:
        raise NotImplementedError("autograd.grad(create_graph=True): opprof computes first-order gradients only")
    variables = [variables] if isinstance(variables, NDArray) else list(variables)
    if any(v._grad is None for v in variables):
        raise OperatorError("autograd.grad: every variable must have called attach_grad() (or mark_variables)")
    kept = [(v._grad, v._grad_req) for v in variables]
    fresh = [zeros_like(v) for v in variables]
    try:
        for v, g in zip(variables, fresh, strict=True):
            v._grad, v._grad_req = g, "write"
        backward(heads, head_grads, retain_graph=bool(retain_graph), train_mode=train_mode)
    finally:
        for v, (kept_grad, req) in zip(variables, kept, strict=True):
            v._grad, v._grad_req = kept_grad, req
    return fresh


class Function:
    """A differentiable function with a hand-written gradient (MXNet's ``autograd.Function``).

    Subclass it with ``forward(*inputs)`` and ``backward(*output_grads)`` (one gradient per
    input); call an instance once. ``forward`` runs without recording; inside ``record()`` its
    outputs enter the graph, and ``backward`` is called with their gradients when the graph is
    walked back.
    """

    def __init__(self) -> None:
        self._used = False
        self.saved_tensors: tuple[Any, ...] = ()

    def save_for_backward(self, *args: Any) -> None:
        self.saved_tensors = args

    def forward(self, *inputs: NDArray) -> NDArray | Sequence[NDArray]:
        raise NotImplementedError(f"{type(self).__name__}.forward is not implemented")

    def backward(self, *output_grads: NDArray) -> NDArray | Sequence[NDArray]:
        raise NotImplementedError(f"{type(self).__name__}.backward is not implemented")

    def __call__(self, *inputs: NDArray) -> NDArray | Sequence[NDArray]:
        if self._used:
            raise OperatorError(f"each {type(self).__name__} instance can be called only once; make a new one")
        self._used = True
        with _tape.scope(False, None):
            outputs = self.forward(*inputs)
        outs = [outputs] if isinstance(outputs, NDArray) else list(outputs)
        if _tape.is_recording():
            n_inputs = len(inputs)

            def push_backward(ograds: list[NDArray]) -> list[NDArray | None]:
                got = self.backward(*ograds)
                grads: list[NDArray | None] = [got] if isinstance(got, NDArray) else list(got)
                if len(grads) != n_inputs:
                    raise OperatorError(f"{type(self).__name__}.backward returned {len(grads)} gradients for {n_inputs} inputs")
                return grads

            _tape.record_node(type(self).__name__, list(inputs), outs, push_backward)
        return outputs
