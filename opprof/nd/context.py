"""Device contexts, for MXNet compatibility: opprof computes on the CPU only."""

from __future__ import annotations


class Context:
    """Where an array lives. Only ``cpu`` exists; ``gpu`` is refused with a clear message."""

    __slots__ = ("device_id", "device_type")

    def __init__(self, device_type: str = "cpu", device_id: int = 0) -> None:
        if device_type != "cpu":
            raise ValueError(f"opprof runs on the CPU only; context {device_type}({device_id}) is not available")
        self.device_type = device_type
        self.device_id = device_id

    def __repr__(self) -> str:
        return f"{self.device_type}({self.device_id})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Context) and (other.device_type, other.device_id) == (self.device_type, self.device_id)

    def __hash__(self) -> int:
        return hash((self.device_type, self.device_id))

    # ``with mx.cpu():`` makes it the default context inside the block, as in MXNet; with the CPU
    # the only context there is, that changes nothing else.
    def __enter__(self) -> Context:
        _stack.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _stack.pop()


_stack: list[Context] = []


def cpu(device_id: int = 0) -> Context:
    return Context("cpu", device_id)


def gpu(device_id: int = 0) -> Context:
    return Context("gpu", device_id)


def current_context() -> Context:
    """The innermost ``with ctx:`` context, else ``cpu(0)``."""
    return _stack[-1] if _stack else cpu()


def num_gpus() -> int:
    """GPUs opprof can use: none (``mx.context.num_gpus``)."""
    return 0
