"""Custom operators written in Python, with MXNet's API and MXNet's execution model.

An invocation of ``nd.Custom(x, op_type="MyAddOne")`` goes through these steps:

1. One **async** engine op, named by the op type, reads the inputs and writes the outputs.
2. When it runs, it hands the Python body to the engine's custom-op worker pool and returns, so an
   engine worker never waits on user Python.
3. The custom-op worker calls ``forward()`` with NDArrays that share memory with the real inputs and
   outputs but carry **fresh vars**: sub-operators pushed by ``forward()`` depend only on each
   other, not on the outputs that the still-running custom op holds (that would deadlock).
4. While the Python runs, :func:`opprof.engine.current_invocation` tells who is pushing (the profiler names
   sub-ops ``MyAddOne::_plus_scalar`` from it).
5. After ``forward()`` returns (or raises), the worker pushes ``Dummy_Wait``: it writes every fresh
   var, so it runs after every sub-operator, and completes the custom op, releasing the outputs to
   the ops waiting for them. An error from ``forward()`` or from a sub-operator becomes the error
   of the outputs.

The two engine ops of steps 1 and 5 carry a :class:`~opprof.engine.CustomOpInfo` as their ``info``:
the invocation and which part of it the op is (``CustomPart.INVOCATION``, ``CustomPart.COMPLETION``),
which is how an observer (the profiler) tells them apart.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import typing
from collections.abc import Callable, Sequence
from time import thread_time_ns
from typing import Any, NamedTuple

import numpy as np

from ..engine import CustomOpInfo, CustomPart, Engine, Invocation, Var, bind_thread, current_invocation, get_engine
from ..engine.interrupts import call_user, shielded
from ..engine.state import thread_state
from . import ndarray as _nd
from . import tape as _tape
from .context import Context, cpu
from .ndarray import NDArray, OperatorError
from .ops import OPS

__all__ = [
    "Custom",
    "CustomOp",
    "CustomOpProp",
    "OperatorArguments",
    "current_invocation",
    "get_all_registered_operators",
    "get_operator_arguments",
    "register",
]

_REGISTRY: dict[str, type[CustomOpProp]] = {}
_invocation_ids = itertools.count(1)


class CustomOp:
    """Base class for the Python body of a custom operator."""

    def forward(
        self, is_train: bool, req: Sequence[str], in_data: Sequence[NDArray], out_data: Sequence[NDArray], aux: Sequence[NDArray]
    ) -> None:
        raise NotImplementedError(f"{type(self).__name__}.forward is not implemented")

    def backward(
        self,
        req: Sequence[str],
        out_grad: Sequence[NDArray],
        in_data: Sequence[NDArray],
        out_data: Sequence[NDArray],
        in_grad: Sequence[NDArray],
        aux: Sequence[NDArray],
    ) -> None:
        raise NotImplementedError(f"{type(self).__name__}.backward is not implemented")

    def assign(self, dst: NDArray, req: str, src: NDArray | np.ndarray | float) -> None:
        """Store ``src`` into ``dst`` as the request says: overwrite, accumulate, or nothing."""
        if req == "null":
            return
        if req in ("write", "inplace"):
            dst[:] = src
        elif req == "add":
            dst[:] += src
        else:
            raise ValueError(f"assign: req must be 'write', 'inplace', 'add' or 'null', got {req!r}")


class CustomOpProp:
    """Describes a custom operator: its inputs, outputs, shapes, types and how to create it."""

    def __init__(self, need_top_grad: bool = True) -> None:
        self.need_top_grad_ = need_top_grad

    def list_arguments(self) -> list[str]:
        return ["data"]

    def list_outputs(self) -> list[str]:
        return ["output"]

    def list_auxiliary_states(self) -> list[str]:
        return []

    def infer_shape(self, in_shape: list[tuple[int, ...]]) -> tuple[Any, ...]:
        return in_shape, [in_shape[0]] * len(self.list_outputs()), [in_shape[0]] * len(self.list_auxiliary_states())

    def infer_type(self, in_type: list[Any]) -> tuple[Any, ...]:
        return in_type, [in_type[0]] * len(self.list_outputs()), [in_type[0]] * len(self.list_auxiliary_states())

    def declare_backward_dependency(self, out_grad: list[int], in_data: list[int], out_data: list[int]) -> list[int]:
        deps: list[int] = []
        if self.need_top_grad_:
            deps.extend(out_grad)
        deps.extend(in_data)
        deps.extend(out_data)
        return deps

    def create_operator(self, ctx: Context, in_shapes: list[tuple[int, ...]], in_dtypes: list[Any]) -> CustomOp:
        raise NotImplementedError(f"{type(self).__name__}.create_operator is not implemented")


def register(reg_name: str) -> Callable[[type[CustomOpProp]], type[CustomOpProp]]:
    """Class decorator: make a :class:`CustomOpProp` subclass available as ``op_type=reg_name``."""
    if not isinstance(reg_name, str) or not reg_name or "::" in reg_name:
        raise ValueError(f"custom operator name must be a non-empty string without '::', got {reg_name!r}")

    def deco(prop_cls: type[CustomOpProp]) -> type[CustomOpProp]:
        if not (isinstance(prop_cls, type) and issubclass(prop_cls, CustomOpProp)):
            raise TypeError(f"@register({reg_name!r}) must decorate a CustomOpProp subclass, got {prop_cls!r}")
        _REGISTRY[reg_name] = prop_cls
        return prop_cls

    return deco


class OperatorArguments(NamedTuple):
    """An operator's arguments as MXNet describes them (``mx.operator.get_operator_arguments``)."""

    narg: int
    names: list[str]
    types: list[str]


def get_operator_arguments(op_name: str) -> OperatorArguments:
    """The arguments of the ``mx.nd`` function named ``op_name``, read off its signature and type hints.

    Types are written MXNet's way: ``NDArray-or-Symbol`` for arrays, ``{'a', 'b'}`` for a choice
    (a ``Literal``), then ``required`` or ``optional, default=...``.
    """
    fn = getattr(_nd, op_name, None)
    if not callable(fn) or op_name not in _nd.__all__:
        raise OperatorError(f"get_operator_arguments: no operator function {op_name!r} in mx.nd")
    hints = typing.get_type_hints(fn)
    names, types = [], []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name in ("out", "ctx", "name"):
            continue
        names.append(p.name)
        presence = "required" if p.default is p.empty else f"optional, default={p.default!r}"
        types.append(f"{_type_word(hints.get(p.name))}, {presence}" if hints.get(p.name) is not NDArray else "NDArray-or-Symbol")
    return OperatorArguments(len(names), names, types)


def _type_word(hint: Any) -> str:
    if typing.get_origin(hint) is typing.Literal:
        return "{" + ", ".join(repr(v) for v in typing.get_args(hint)) + "}"
    return {bool: "boolean", int: "int", float: "float", str: "string"}.get(hint, "Shape(tuple)" if hint else "any")


def get_all_registered_operators() -> list[str]:
    """Every operator name the engine runs (MXNet's names, ``Custom`` among them), as MXNet lists them."""
    return sorted({*OPS, "Custom", *_REGISTRY})  # and the custom op types registered here


# ---------------------------------------------------------------------------- invocation
def _shapes(what: str, op_type: str, got: Any, n: int) -> list[tuple[int, ...]]:
    try:
        shapes = [tuple(int(d) for d in s) for s in got]
    except (TypeError, ValueError):
        raise OperatorError(f"Custom op {op_type!r}: infer_shape must return lists of shapes for {what}, got {got!r}") from None
    if len(shapes) != n:
        raise OperatorError(f"Custom op {op_type!r}: infer_shape returned {len(shapes)} {what} shapes, expected {n}")
    if any(d < 0 for s in shapes for d in s):
        raise OperatorError(f"Custom op {op_type!r}: infer_shape returned a negative dimension for {what}: {got!r}")
    return shapes


def _names(op_type: str, method: str, got: Any) -> list[str]:
    if not isinstance(got, (list, tuple)) or not all(isinstance(n, str) for n in got):
        raise OperatorError(f"Custom op {op_type!r}: {method} must return a list of names, got {got!r}")
    return list(got)


def _dtypes(op_type: str, got: Any, n: int) -> list[np.dtype]:
    if not isinstance(got, (tuple, list)) or len(got) not in (2, 3):
        raise OperatorError(f"Custom op {op_type!r}: infer_type must return (in_types, out_types[, aux_types]), got {got!r}")
    try:
        dtypes = [np.dtype(t) for t in got[1]]
    except TypeError as e:
        raise OperatorError(f"Custom op {op_type!r}: infer_type returned an output type that is not a dtype: {e}") from None
    if len(dtypes) != n:
        raise OperatorError(f"Custom op {op_type!r}: infer_type returned {len(dtypes)} output types, expected {n}")
    return dtypes


def _prop(op_type: str, kwargs: dict[str, Any]) -> CustomOpProp:
    try:
        prop_cls = _REGISTRY[op_type]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise OperatorError(
            f"Custom op {op_type!r} is not registered (registered: {known}); "
            "decorate its CustomOpProp with @opprof.operator.register"
        ) from None
    # MXNet hands every keyword argument to the prop as a string; ported props expect that.
    make: Callable[..., CustomOpProp] = prop_cls  # a subclass: its own keyword arguments
    return make(**{k: str(v) for k, v in kwargs.items()})


def invoke_custom(inputs: Sequence[NDArray], op_type: str, kwargs: dict[str, Any]) -> NDArray | list[NDArray]:
    """Push one invocation of a registered custom operator (``nd.Custom``)."""
    for x in inputs:
        if not isinstance(x, NDArray):
            raise TypeError(f"Custom op {op_type!r}: inputs must be NDArrays, got {type(x).__name__}")
    kwargs = dict(kwargs)
    kwargs.pop("name", None)  # MXNet's symbol name; not a property of the op
    out = kwargs.pop("out", None)
    prop = _prop(op_type, kwargs)
    args = _names(op_type, "list_arguments", prop.list_arguments())
    outs = _names(op_type, "list_outputs", prop.list_outputs())
    aux_names = _names(op_type, "list_auxiliary_states", prop.list_auxiliary_states())
    if len(inputs) != len(args) + len(aux_names):
        raise OperatorError(
            f"Custom op {op_type!r} takes {len(args)} input(s) {args}"
            + (f" and {len(aux_names)} auxiliary state(s) {aux_names}" if aux_names else "")
            + f", got {len(inputs)}"
        )
    data, aux = list(inputs[: len(args)]), list(inputs[len(args) :])
    inferred = prop.infer_shape([x.shape for x in data])
    if not isinstance(inferred, (tuple, list)) or len(inferred) not in (2, 3):
        raise OperatorError(
            f"Custom op {op_type!r}: infer_shape must return (in_shapes, out_shapes[, aux_shapes]), got {inferred!r}"
        )
    in_shapes = _shapes("input", op_type, inferred[0], len(args))
    out_shapes = _shapes("output", op_type, inferred[1], len(outs))
    for name, x, s in zip(args, data, in_shapes, strict=True):
        if x.shape != s:
            raise OperatorError(f"Custom op {op_type!r}: input {name!r} has shape {x.shape} but infer_shape expects {s}")
    out_dtypes = _dtypes(op_type, prop.infer_type([x._data.dtype for x in data]), len(outs))

    op = prop.create_operator(cpu(), in_shapes, [x._data.dtype for x in data])
    if not isinstance(op, CustomOp):
        raise OperatorError(f"Custom op {op_type!r}: create_operator must return a CustomOp, got {type(op).__name__}")
    if out is None:
        outputs = [NDArray(np.zeros(s, t)) for s, t in zip(out_shapes, out_dtypes, strict=True)]
    else:
        outputs = _check_out(op_type, out, out_shapes)
    is_train = _tape.is_training()

    def body(fresh_in: list[NDArray], fresh_out: list[NDArray], fresh_aux: list[NDArray]) -> None:
        op.forward(is_train, ["write"] * len(outputs), fresh_in, fresh_out, fresh_aux)

    _push_invocation(op_type, False, data, outputs, aux, body)

    if _tape.is_recording():
        _tape.record_node(op_type, data, outputs, _backward_pusher(op_type, op, data, outputs, aux))
    return outputs[0] if len(outputs) == 1 else outputs


def _check_out(op_type: str, out: Any, shapes: list[tuple[int, ...]]) -> list[NDArray]:
    outs = [out] if isinstance(out, NDArray) else list(out) if isinstance(out, (list, tuple)) else []
    if len(outs) != len(shapes) or not all(isinstance(o, NDArray) for o in outs):
        raise OperatorError(f"Custom op {op_type!r}: out= must be {len(shapes)} NDArray(s)")
    for o, s in zip(outs, shapes, strict=True):
        if o.shape != s:
            raise OperatorError(f"Custom op {op_type!r}: out= has shape {o.shape}, the op produces {s}")
    return outs


def _backward_pusher(
    op_type: str, op: CustomOp, data: list[NDArray], outputs: list[NDArray], aux: list[NDArray]
) -> Callable[[list[NDArray]], list[NDArray | None]]:
    def push_backward(ograds: list[NDArray]) -> list[NDArray | None]:
        in_grads = [NDArray(np.zeros(x.shape, x._data.dtype)) for x in data]
        n_og, n_in, n_out = len(ograds), len(data), len(outputs)

        def body(fresh_in: list[NDArray], fresh_out: list[NDArray], fresh_aux: list[NDArray]) -> None:
            og = fresh_in[:n_og]
            ins = fresh_in[n_og : n_og + n_in]
            outs = fresh_in[n_og + n_in : n_og + n_in + n_out]
            op.backward(["write"] * n_in, og, ins, outs, fresh_out, fresh_aux)

        _push_invocation(op_type, True, [*ograds, *data, *outputs], in_grads, aux, body)
        return list(in_grads)

    return push_backward


def _fresh(xs: Sequence[NDArray]) -> list[NDArray]:
    # Same memory, new var: the custom op's Python sees its arrays without their dependencies.
    return [NDArray(x._data, Var()) for x in xs]


# An enum member looked up on its class costs ~0.14 µs; a module global a tenth of that.
_INVOCATION, _COMPLETION = CustomPart.INVOCATION, CustomPart.COMPLETION


def _push_invocation(
    op_type: str,
    backward: bool,
    reads: list[NDArray],
    writes: list[NDArray],
    aux: list[NDArray],
    body: Callable[[list[NDArray], list[NDArray], list[NDArray]], None],
) -> None:
    engine = get_engine()
    inv = Invocation(op_type, next(_invocation_ids), backward)
    # Distinct, in order, none in both (push_op's contract): an array may be passed twice.
    write_vars = tuple(dict.fromkeys([x._var for x in writes] + [x._var for x in aux]))
    read_vars = tuple(dict.fromkeys(x._var for x in reads if x._var not in write_vars))

    run_python = functools.partial(_run_python, engine, inv, reads, writes, aux, body)
    start = functools.partial(_start, engine, run_python)
    engine.push_op(start, read_vars, write_vars, inv.name, is_async=True, info=CustomOpInfo(inv, _INVOCATION))


# The machinery around the user's forward/backward is shielded: a Ctrl-C landing in it (possible
# on the naive engine, which runs it inline on the main thread) waits until the invocation is done.
@shielded
def _start(engine: Engine, run_python: Callable[[Callable[..., None]], None], on_complete: Callable[..., None]) -> None:
    """The async op: hand the Python to the custom-op pool (the naive engine runs it right here)."""
    engine.run_custom(functools.partial(run_python, on_complete))


@shielded
def _run_python(
    engine: Engine,
    inv: Invocation,
    reads: list[NDArray],
    writes: list[NDArray],
    aux: list[NDArray],
    body: Callable[[list[NDArray], list[NDArray], list[NDArray]], None],
    on_complete: Callable[..., None],
) -> None:
    """The custom-op worker's part: run the Python, then push Dummy_Wait to finish the invocation."""
    fresh_in, fresh_out, fresh_aux = _fresh(reads), _fresh(writes), _fresh(aux)
    error: BaseException | None = None
    prev_inv = thread_state.invocation
    thread_state.invocation = inv
    prev_engine = bind_thread(engine)
    # Nothing inside a custom op's Python is recorded for autograd (as in MXNet).
    prev_rec = _tape.set_recording(False)
    obs = engine.observer
    # The thread's CPU time beside the wall clock: Python that is not on a CPU (the GIL held by
    # another thread, a sleep, I/O) shows as the difference.
    cpu0 = thread_time_ns() if obs is not None else 0
    # A recorder that records memory also counts the NumPy data the Python allocates itself (its
    # temporaries): a data-memory handler in this thread's context around the Python only.
    npm = getattr(obs, "numpy_memory", None) if obs is not None else None
    if npm is None and thread_state.kept_handler is not None:  # a memory recording is over: its handler goes
        thread_state.kept_handler.unstick()
        thread_state.kept_handler = None
    t0 = obs.clock() if obs is not None else 0
    try:
        # Sticky on a custom-op pool thread (opprof's own): the handler stays for its next call
        # (setting it is most of the cost), until a call outside a memory recording takes it back.
        sticky = npm is not None and thread_state.custom_pool is not None
        token = npm.enter(sticky) if npm is not None else None
        if sticky:
            thread_state.kept_handler = npm
        try:
            call_user(body, fresh_in, fresh_out, fresh_aux)
        except BaseException as e:  # becomes the error of the op's outputs
            error = e
        try:
            numpy_peak = npm.leave(token) if npm is not None else -1
            if obs is not None:
                t1 = obs.clock()
                cpu = thread_time_ns() - cpu0
                if numpy_peak < 0:  # as an observer written before memory was recorded takes it
                    obs.on_python(inv, t0, t1, cpu)
                else:  # the peak in the same call: on the path of the hand-off to the sub-ops' worker
                    obs.on_python(inv, t0, t1, cpu, numpy_peak)
        except BaseException as e:
            # An observer that fails (a bug in it, out of memory) fails the op, as on the naive
            # engine, where it raises in the pusher: escaping here, it left the invocation never
            # completed, its outputs' readers waiting forever, and a pool thread gone.
            error = error or e
        fresh_vars = tuple(x._var for x in itertools.chain(fresh_in, fresh_out, fresh_aux))  # each a new Var
        dummy_wait = functools.partial(_dummy_wait, engine, inv, error, fresh_vars, on_complete)
        try:
            done = CustomOpInfo(inv, _COMPLETION)
            engine.push_op(dummy_wait, (), fresh_vars, "Dummy_Wait", no_skip=True, info=done)
        except BaseException as e:
            on_complete(error or e)
    finally:
        _tape.set_recording(prev_rec)
        thread_state.invocation = prev_inv
        bind_thread(prev_engine)


@shielded
def _dummy_wait(
    engine: Engine, inv: Invocation, error: BaseException | None, fresh_vars: tuple[Var, ...], on_complete: Callable[..., None]
) -> None:
    """The op that ends an invocation once every sub-op on its arrays is done: complete it."""
    err = error
    if err is None:
        err = next((v.exception for v in fresh_vars if v.exception is not None), None)
    obs = engine.observer
    if err is not None and obs is not None:
        obs.on_error(inv, err)
    on_complete(err)


def Custom(*inputs: NDArray, op_type: str, **kwargs: Any) -> NDArray | list[NDArray]:
    """Invoke the custom operator registered as ``op_type`` (``mx.nd.Custom``)."""
    return invoke_custom(inputs, op_type, kwargs)
