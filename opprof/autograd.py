"""Imperative autograd with MXNet's API: ``record()``, ``pause()``, ``backward()``.

While recording, each operator that has an input needing a gradient adds a :class:`Node` to a
tape held by its outputs. ``backward`` walks the tape in reverse and pushes one engine op per node,
named ``_backward_<op>`` (custom ops push their own Python ``backward`` the same way), so the
backward pass is as asynchronous as the forward one.

Recording state is per thread, as in MXNet: a custom operator's Python runs on its own worker
thread, where nothing is recorded.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .ndarray import NDArray

__all__ = [
    "record",
    "pause",
    "train_mode",
    "predict_mode",
    "is_recording",
    "is_training",
    "set_recording",
    "set_training",
    "backward",
    "mark_variables",
]


class _State(threading.local):
    recording = False
    training = False


_state = _State()


def is_recording() -> bool:
    return _state.recording


def is_training() -> bool:
    return _state.training


def set_recording(flag: bool) -> bool:
    """Set recording on this thread; return the previous value."""
    prev, _state.recording = _state.recording, bool(flag)
    return prev


def set_training(flag: bool) -> bool:
    """Set training mode on this thread; return the previous value."""
    prev, _state.training = _state.training, bool(flag)
    return prev


@contextmanager
def _scope(recording: bool | None, training: bool | None) -> Iterator[None]:
    prev_r, prev_t = _state.recording, _state.training
    if recording is not None:
        _state.recording = recording
    if training is not None:
        _state.training = training
    try:
        yield
    finally:
        _state.recording, _state.training = prev_r, prev_t


def record(train_mode: bool = True) -> contextmanager:  # type: ignore[valid-type]
    """Record operators for ``backward`` inside this block."""
    return _scope(True, train_mode)


def pause(train_mode: bool = False) -> contextmanager:  # type: ignore[valid-type]
    """Stop recording inside this block (e.g. for a metric computed during training)."""
    return _scope(False, train_mode)


def train_mode() -> contextmanager:  # type: ignore[valid-type]
    return _scope(None, True)


def predict_mode() -> contextmanager:  # type: ignore[valid-type]
    return _scope(None, False)


class Node:
    """One recorded operator: its inputs, outputs and how to push its backward."""

    __slots__ = ("backward", "inputs", "name", "outputs")

    def __init__(
        self,
        name: str,
        inputs: Sequence[NDArray],
        outputs: Sequence[NDArray],
        backward: Callable[[list[NDArray]], list[NDArray | None]],
    ) -> None:
        self.name = name
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.backward = backward


def requires_grad(x: NDArray) -> bool:
    return x._node is not None or x._grad is not None


def record_node(
    name: str,
    inputs: Sequence[NDArray],
    outputs: Sequence[NDArray],
    backward: Callable[[list[NDArray]], list[NDArray | None]],
) -> None:
    """Attach a node to ``outputs`` if any input needs a gradient (called only while recording)."""
    if not any(requires_grad(x) for x in inputs):
        return
    node = Node(name, inputs, outputs, backward)
    for i, y in enumerate(outputs):
        y._node = (node, i)


def mark_variables(variables: Sequence[NDArray], gradients: Sequence[NDArray], grad_reqs: str | Sequence[str] = "write") -> None:
    """Make ``variables`` leaves whose gradients land in ``gradients`` (MXNet's API)."""
    reqs = [grad_reqs] * len(variables) if isinstance(grad_reqs, str) else list(grad_reqs)
    for v, g, r in zip(variables, gradients, reqs, strict=True):
        _check_req(r)
        v._grad, v._grad_req, v._node = g, r, None


def _check_req(req: str) -> None:
    if req not in ("write", "add", "null"):
        raise ValueError(f"grad_req must be 'write', 'add' or 'null', got {req!r}")


def _topo_order(heads: Sequence[NDArray]) -> list[Node]:
    """Nodes reachable from ``heads``, each after every node that consumes its outputs."""
    order: list[Node] = []
    seen: set[int] = set()
    stack: list[tuple[Node, bool]] = [(h._node[0], False) for h in heads if h._node is not None]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for x in node.inputs:
            if x._node is not None and id(x._node[0]) not in seen:
                stack.append((x._node[0], False))
    order.reverse()
    return order


def backward(
    heads: NDArray | Sequence[NDArray],
    head_grads: NDArray | Sequence[NDArray | None] | None = None,
    retain_graph: bool = False,
    train_mode: bool = True,
) -> None:
    """Push the backward pass from ``heads``; gradients land in each leaf's ``.grad``."""
    from .ndarray import NDArray, _sum_grads, ones_like

    heads = [heads] if isinstance(heads, NDArray) else list(heads)
    if head_grads is None or isinstance(head_grads, NDArray):
        head_grads = [head_grads] * len(heads) if head_grads is None else [head_grads]
    if len(head_grads) != len(heads):
        raise ValueError(f"backward: {len(heads)} heads but {len(head_grads)} head gradients")
    for h in heads:
        if not requires_grad(h):
            raise ValueError(
                "backward: this array is not part of a recorded graph; compute it inside "
                "autograd.record() from arrays that called attach_grad()"
            )

    # Gradients collected per array object (the tape holds every array it refers to).
    pending: dict[int, list[NDArray]] = {}
    arrays: dict[int, NDArray] = {}

    def add(x: NDArray, g: NDArray) -> None:
        pending.setdefault(id(x), []).append(g)
        arrays[id(x)] = x

    with _scope(False, train_mode):
        for h, g in zip(heads, head_grads, strict=True):
            if g is None:
                g = ones_like(h)
            elif g.shape != h.shape:
                raise ValueError(f"backward: head gradient shape {g.shape} does not match head shape {h.shape}")
            add(h, g)

        for node in _topo_order(heads):
            ograds: list[NDArray | None] = [_sum_grads(pending.pop(id(y), [])) for y in node.outputs]
            if all(g is None for g in ograds):
                continue
            full = [g if g is not None else ones_like(y) * 0 for g, y in zip(ograds, node.outputs, strict=True)]
            in_grads = node.backward(full)
            for x, g in zip(node.inputs, in_grads, strict=True):
                if g is not None and requires_grad(x):
                    add(x, g)

        for key, grads in pending.items():
            leaf = arrays[key]
            if leaf._grad is None or leaf._grad_req == "null" or not grads:
                continue
            total = _sum_grads(grads)
            assert total is not None
            leaf._accumulate_grad(total)
        if not retain_graph:
            for h in heads:
                if h._node is not None:
                    h._node = None
