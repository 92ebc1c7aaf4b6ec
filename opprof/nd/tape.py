"""The autograd tape: per-thread recording state, the recorded nodes and the order to replay them.

While recording, each operator that has an input needing a gradient adds a :class:`Node` to a
tape held by its outputs (``x._node``). Nothing here knows what an array is beyond the three
fields of :class:`Taped`, so the array type sits above the tape and the tape below it.

Recording state is per thread, as in MXNet: a custom operator's Python runs on its own worker
thread, where nothing is recorded.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

__all__ = [
    "Node",
    "Taped",
    "check_req",
    "is_recording",
    "is_training",
    "mark_variables",
    "pause",
    "predict_mode",
    "record",
    "record_node",
    "requires_grad",
    "scope",
    "set_recording",
    "set_training",
    "state",
    "topo_order",
    "train_mode",
]


class Taped(Protocol):
    """What the tape reads and writes on an array."""

    _node: tuple[Node, int] | None  # the node that produced it, and which of its outputs it is
    _grad: Any  # the array its gradient goes to (a leaf), or None
    _grad_req: str  # "write", "add" or "null"


class _State(threading.local):
    """Per-thread flags; read directly (``state.recording``) on every operator push."""

    recording = False
    training = False


state = _State()


def is_recording() -> bool:
    return state.recording


def is_training() -> bool:
    return state.training


def set_recording(flag: bool) -> bool:
    """Set recording on this thread; return the previous value."""
    prev, state.recording = state.recording, bool(flag)
    return prev


def set_training(flag: bool) -> bool:
    """Set training mode on this thread; return the previous value."""
    prev, state.training = state.training, bool(flag)
    return prev


@contextmanager
def scope(recording: bool | None, training: bool | None) -> Iterator[None]:
    prev_r, prev_t = state.recording, state.training
    if recording is not None:
        state.recording = recording
    if training is not None:
        state.training = training
    try:
        yield
    finally:
        state.recording, state.training = prev_r, prev_t


def record(train_mode: bool = True) -> AbstractContextManager[None]:
    """Record operators for ``backward`` inside this block."""
    return scope(True, train_mode)


def pause(train_mode: bool = False) -> AbstractContextManager[None]:
    """Stop recording inside this block (e.g. for a metric computed during training)."""
    return scope(False, train_mode)


def train_mode() -> AbstractContextManager[None]:
    return scope(None, True)


def predict_mode() -> AbstractContextManager[None]:
    return scope(None, False)


class Node:
    """One recorded operator: its inputs, outputs and how to push its backward."""

    __slots__ = ("backward", "inputs", "name", "outputs")

    def __init__(
        self,
        name: str,
        inputs: Sequence[Taped],
        outputs: Sequence[Taped],
        backward: Callable[[list[Any]], list[Any]],
    ) -> None:
        self.name = name
        # The arrays themselves (the layer above's type): the backward pass hands them back to it.
        self.inputs: list[Any] = list(inputs)
        self.outputs: list[Any] = list(outputs)
        self.backward = backward


def requires_grad(x: Taped) -> bool:
    return x._node is not None or x._grad is not None


def record_node(
    name: str,
    inputs: Sequence[Taped],
    outputs: Sequence[Taped],
    backward: Callable[[list[Any]], list[Any]],
) -> None:
    """Attach a node to ``outputs`` if any input needs a gradient (called only while recording)."""
    if not any(requires_grad(x) for x in inputs):
        return
    node = Node(name, inputs, outputs, backward)
    for i, y in enumerate(outputs):
        y._node = (node, i)


def mark_variables(variables: Sequence[Taped], gradients: Sequence[Taped], grad_reqs: str | Sequence[str] = "write") -> None:
    """Make ``variables`` leaves whose gradients land in ``gradients`` (MXNet's API)."""
    reqs = [grad_reqs] * len(variables) if isinstance(grad_reqs, str) else list(grad_reqs)
    for v, g, r in zip(variables, gradients, reqs, strict=True):
        check_req(r)
        v._grad, v._grad_req, v._node = g, r, None


def check_req(req: str) -> None:
    if req not in ("write", "add", "null"):
        raise ValueError(f"grad_req must be 'write', 'add' or 'null', got {req!r}")


def topo_order(heads: Sequence[Taped]) -> list[Node]:
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
