"""The operator registry: what each named operator computes, its gradient and its output shape.

Everything here is plain NumPy on plain ``np.ndarray`` values; the engine, NDArray and autograd
layers only look operators up by name. Adding an operator is one entry: a ``forward`` that writes
its result into a preallocated ``out`` buffer (so small ops allocate nothing), a ``backward`` that
returns one gradient per input (``None`` where an input has none), and a shape rule.

Names follow MXNet's, because they are what users see in traces (``_plus_scalar``,
``elemwise_add``, ``broadcast_mul``, ``dot``...).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..engine import MXNetError

Shape = tuple[int, ...]
Attrs = dict[str, Any]
Forward = Callable[[Sequence[np.ndarray], np.ndarray, Attrs], None]
Backward = Callable[[Sequence[np.ndarray], np.ndarray, np.ndarray, Attrs], list[np.ndarray | None]]
Infer = Callable[[str, Sequence[Shape], Sequence[np.dtype], Attrs], tuple[Shape, np.dtype]]


class OperatorError(MXNetError, ValueError):
    """An operator was given inputs it cannot work on; the message names the op and the shapes."""


@dataclass(frozen=True, slots=True)
class OpDef:
    name: str
    forward: Forward
    backward: Backward | None
    infer: Infer


OPS: dict[str, OpDef] = {}


def register(name: str, forward: Forward, backward: Backward | None, infer: Infer) -> OpDef:
    """Add an operator to the registry (replacing one of the same name)."""
    op = OpDef(name, forward, backward, infer)
    OPS[name] = op
    return op


# ----------------------------------------------------------------------------- shape rules
def same_shape(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], attrs: Attrs) -> tuple[Shape, np.dtype]:
    return shapes[0], dtypes[0]


def elemwise_shape(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], attrs: Attrs) -> tuple[Shape, np.dtype]:
    if any(s != shapes[0] for s in shapes):
        raise OperatorError(f"{name}: inputs must have the same shape, got {' and '.join(map(str, shapes))}")
    return shapes[0], np.result_type(*dtypes)


def broadcast_shape(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], attrs: Attrs) -> tuple[Shape, np.dtype]:
    try:
        shape = np.broadcast_shapes(*shapes)
    except ValueError:
        raise OperatorError(f"{name}: shapes {' and '.join(map(str, shapes))} cannot be broadcast together") from None
    return shape, np.result_type(*dtypes)


def unbroadcast(g: np.ndarray, shape: Shape) -> np.ndarray:
    """Sum a broadcast gradient back down to ``shape``."""
    if g.shape == shape:
        return g
    extra = g.ndim - len(shape)
    if extra:
        g = g.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g


# ----------------------------------------------------------------------------- scalar ops
def _scalar(
    name: str,
    fn: Callable[..., Any],
    grad: Callable[[np.ndarray, np.ndarray, np.ndarray, Any], np.ndarray],
    reverse: bool = False,
) -> None:
    if reverse:

        def forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
            fn(a["scalar"], ins[0], out=out, casting="unsafe")
    else:

        def forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
            fn(ins[0], a["scalar"], out=out, casting="unsafe")

    def backward(ins: Sequence[np.ndarray], out: np.ndarray, g: np.ndarray, a: Attrs) -> list[np.ndarray | None]:
        return [grad(ins[0], out, g, a["scalar"])]

    register(name, forward, backward, same_shape)


_scalar("_plus_scalar", np.add, lambda x, y, g, s: g)
_scalar("_minus_scalar", np.subtract, lambda x, y, g, s: g)
_scalar("_rminus_scalar", np.subtract, lambda x, y, g, s: -g, reverse=True)
_scalar("_mul_scalar", np.multiply, lambda x, y, g, s: g * s)
_scalar("_div_scalar", np.true_divide, lambda x, y, g, s: g / s)
_scalar("_rdiv_scalar", np.true_divide, lambda x, y, g, s: -g * y / x, reverse=True)
_scalar("_power_scalar", np.power, lambda x, y, g, s: g * s * np.power(x, s - 1))
_scalar("_rpower_scalar", np.power, lambda x, y, g, s: g * y * np.log(s), reverse=True)
_scalar("_maximum_scalar", np.maximum, lambda x, y, g, s: g * (x >= s))
_scalar("_minimum_scalar", np.minimum, lambda x, y, g, s: g * (x <= s))


# ----------------------------------------------------------------------------- binary ops
def _binary(
    suffix: str,
    fn: Callable[..., Any],
    grad: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
    elemwise_name: str,
) -> None:
    def forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
        fn(ins[0], ins[1], out=out, casting="unsafe")

    def backward(ins: Sequence[np.ndarray], out: np.ndarray, g: np.ndarray, a: Attrs) -> list[np.ndarray | None]:
        ga, gb = grad(ins[0], ins[1], out, g)
        return [unbroadcast(ga, ins[0].shape), unbroadcast(gb, ins[1].shape)]

    register(elemwise_name, forward, backward, elemwise_shape)
    register("broadcast_" + suffix, forward, backward, broadcast_shape)


def _safe_log(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(x)


_binary("add", np.add, lambda a, b, y, g: (g, g), "elemwise_add")
_binary("sub", np.subtract, lambda a, b, y, g: (g, -g), "elemwise_sub")
_binary("mul", np.multiply, lambda a, b, y, g: (g * b, g * a), "elemwise_mul")
_binary("div", np.true_divide, lambda a, b, y, g: (g / b, -g * a / (b * b)), "elemwise_div")
_binary("power", np.power, lambda a, b, y, g: (g * b * np.power(a, b - 1), g * y * _safe_log(a)), "_power")
_binary("maximum", np.maximum, lambda a, b, y, g: (g * (a >= b), g * (a < b)), "_maximum")
_binary("minimum", np.minimum, lambda a, b, y, g: (g * (a <= b), g * (a > b)), "_minimum")


# ----------------------------------------------------------------------------- comparisons
def _compare(suffix: str, fn: Callable[..., Any]) -> None:
    """``_<suffix>`` (equal shapes), ``broadcast_<suffix>`` and ``_<suffix>_scalar``: 1 where true, else 0.

    The result has the input's dtype, as in MXNet; comparisons have no gradient (none is recorded).
    """

    def forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
        np.copyto(out, fn(ins[0], ins[1]), casting="unsafe")

    def forward_scalar(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
        np.copyto(out, fn(ins[0], a["scalar"]), casting="unsafe")

    def same_dtype(rule: Infer) -> Infer:
        return lambda name, shapes, dtypes, a: (rule(name, shapes, dtypes, a)[0], dtypes[0])

    register(f"_{suffix}", forward, None, same_dtype(elemwise_shape))
    register(f"broadcast_{suffix}", forward, None, same_dtype(broadcast_shape))
    register(f"_{suffix}_scalar", forward_scalar, None, same_shape)


#: MXNet's comparison names (``lesser`` rather than ``less``) and what each computes.
COMPARISONS = {
    "equal": np.equal,
    "not_equal": np.not_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "lesser": np.less,
    "lesser_equal": np.less_equal,
}
for _suffix, _fn in COMPARISONS.items():
    _compare(_suffix, _fn)


# ----------------------------------------------------------------------------- unary ops
def _unary(name: str, fn: Callable[..., Any], grad: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]) -> None:
    def forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
        fn(ins[0], out=out, casting="unsafe")

    def backward(ins: Sequence[np.ndarray], out: np.ndarray, g: np.ndarray, a: Attrs) -> list[np.ndarray | None]:
        return [grad(ins[0], out, g)]

    register(name, forward, backward, same_shape)


def _sigmoid(x: np.ndarray, out: np.ndarray, casting: str = "unsafe") -> None:
    # Written as 0.5 * (1 + tanh(x / 2)): equal to 1 / (1 + e^-x) and never overflows.
    np.multiply(x, 0.5, out=out, casting=casting)
    np.tanh(out, out=out)
    out += 1
    out *= 0.5


def _relu(x: np.ndarray, out: np.ndarray, casting: str = "unsafe") -> None:
    np.maximum(x, 0, out=out, casting=casting)


_unary("abs", np.abs, lambda x, y, g: g * np.sign(x))
_unary("exp", np.exp, lambda x, y, g: g * y)
_unary("log", np.log, lambda x, y, g: g / x)
_unary("sqrt", np.sqrt, lambda x, y, g: g / (2 * y))
_unary("tanh", np.tanh, lambda x, y, g: g * (1 - y * y))
_unary("sigmoid", _sigmoid, lambda x, y, g: g * y * (1 - y))
def _relu_grad(x: np.ndarray, y: np.ndarray, g: np.ndarray) -> np.ndarray:
    # MXNet's relu_grad passes a NaN input on (x > 0 alone would make its gradient 0, silently).
    return g * np.where(np.isnan(x), x, x > 0)


_unary("relu", _relu, _relu_grad)
_unary("negative", np.negative, lambda x, y, g: -g)


def _softrelu(x: np.ndarray, out: np.ndarray) -> None:
    np.logaddexp(0, x, out=out, casting="unsafe")  # log(1 + e^x), without overflow


def _softsign(x: np.ndarray, out: np.ndarray) -> None:
    np.divide(x, 1 + np.abs(x), out=out, casting="unsafe")


#: MXNet's ``Activation(data, act_type)``: the activation, its gradient from (x, y, g).
ACTIVATIONS: dict[str, tuple[Callable[[np.ndarray, np.ndarray], None], Callable[..., np.ndarray]]] = {
    "relu": (lambda x, out: _relu(x, out), _relu_grad),
    "sigmoid": (lambda x, out: _sigmoid(x, out), lambda x, y, g: g * y * (1 - y)),
    "tanh": (lambda x, out: np.tanh(x, out=out, casting="unsafe"), lambda x, y, g: g * (1 - y * y)),
    "softrelu": (_softrelu, lambda x, y, g: g * (1 - np.exp(-y))),
    "softsign": (_softsign, lambda x, y, g: g / np.square(1 + np.abs(x))),
}


def _activation_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    if a.get("act_type") not in ACTIVATIONS:
        raise OperatorError(f"Activation: act_type must be one of {', '.join(sorted(ACTIVATIONS))}, got {a.get('act_type')!r}")
    return shapes[0], dtypes[0]


register(
    "Activation",
    lambda ins, out, a: ACTIVATIONS[a["act_type"]][0](ins[0], out),
    lambda ins, out, g, a: [ACTIVATIONS[a["act_type"]][1](ins[0], out, g)],
    _activation_infer,
)
_unary("_copy", np.positive, lambda x, y, g: g)
_unary("_copyto", np.positive, lambda x, y, g: g)


# ----------------------------------------------------------------------------- n-ary
def _add_n_forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
    np.copyto(out, ins[0], casting="unsafe")
    for x in ins[1:]:
        np.add(out, x, out=out, casting="unsafe")


register("add_n", _add_n_forward, lambda ins, out, g, a: [g] * len(ins), elemwise_shape)


# ----------------------------------------------------------------------------- dot
def _dot_operands(ins: Sequence[np.ndarray], a: Attrs) -> tuple[np.ndarray, np.ndarray]:
    x, y = ins
    if a.get("transpose_a"):
        x = x.T
    if a.get("transpose_b"):
        y = y.T
    return x, y


def _dot_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    sa, sb = shapes
    if a.get("transpose_a"):
        sa = sa[::-1]
    if a.get("transpose_b"):
        sb = sb[::-1]
    if not (1 <= len(sa) <= 2 and 1 <= len(sb) <= 2):
        raise OperatorError(f"dot: only 1-D and 2-D inputs are supported, got shapes {shapes[0]} and {shapes[1]}")
    if sa[-1] != sb[0]:
        raise OperatorError(
            f"dot: shapes {shapes[0]} and {shapes[1]} are not aligned ({sa[-1]} columns on the left, {sb[0]} rows on the right)"
        )
    return sa[:-1] + sb[1:], np.result_type(*dtypes)


def _dot_forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
    x, y = _dot_operands(ins, a)
    np.copyto(out, np.dot(x, y), casting="unsafe")


def _dot_backward(ins: Sequence[np.ndarray], out: np.ndarray, g: np.ndarray, a: Attrs) -> list[np.ndarray | None]:
    x, y = _dot_operands(ins, a)
    x2 = x.reshape(1, -1) if x.ndim == 1 else x
    y2 = y.reshape(-1, 1) if y.ndim == 1 else y
    g2 = g.reshape(x2.shape[0], y2.shape[1])
    gx = (g2 @ y2.T).reshape(x.shape)
    gy = (x2.T @ g2).reshape(y.shape)
    if a.get("transpose_a"):
        gx = gx.T
    if a.get("transpose_b"):
        gy = gy.T
    return [gx, gy]


register("dot", _dot_forward, _dot_backward, _dot_infer)


# ----------------------------------------------------------------------------- shape ops
def _axes(a: Attrs, ndim: int) -> tuple[int, ...]:
    axes = a.get("axes")
    return tuple(reversed(range(ndim))) if axes is None else tuple(ax % ndim for ax in axes)


def _transpose_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    (shape,) = shapes
    given = a.get("axes")
    if given is not None and (
        any(not -len(shape) <= ax < len(shape) for ax in given) or sorted(_axes(a, len(shape))) != list(range(len(shape)))
    ):
        raise OperatorError(f"transpose: axes {tuple(given)} are not a permutation of the {len(shape)} axes of shape {shape}")
    axes = _axes(a, len(shape))
    return tuple(shape[ax] for ax in axes), dtypes[0]


register(
    "transpose",
    lambda ins, out, a: np.copyto(out, ins[0].transpose(_axes(a, ins[0].ndim))),
    lambda ins, out, g, a: [g.transpose(np.argsort(_axes(a, ins[0].ndim)))],
    _transpose_infer,
)


def reshape_target(shape: Shape, target: Sequence[int], reverse: bool = False) -> Shape:
    """MXNet's reshape codes, checked against the size.

    0 keeps the input's dimension, -1 infers one dimension, -2 copies the remaining input
    dimensions, -3 merges two consecutive input dimensions, -4 splits one input dimension into the
    two values that follow it (one may be -1). ``reverse`` matches the codes from the right.
    """
    bad = OperatorError(f"Reshape: cannot reshape {shape} (size {int(np.prod(shape, dtype=np.int64))}) to {tuple(target)}")
    src_shape, codes = (shape[::-1], list(target)[::-1]) if reverse else (shape, list(target))
    if reverse:  # the two values after a -4 were reversed with everything else: put them back
        for i in range(len(codes) - 2):
            if codes[i + 2] == -4:
                codes[i], codes[i + 1], codes[i + 2] = -4, codes[i], codes[i + 1]
    out: list[int] = []
    src = 0
    infer = -1
    i = 0
    try:
        while i < len(codes):
            c = codes[i]
            if c == 0:
                out.append(src_shape[src])
                src += 1
            elif c == -1:
                if infer >= 0:
                    raise OperatorError(f"Reshape: at most one -1 allowed in the target shape {tuple(target)}")
                infer = len(out)
                out.append(1)
                src += 1
            elif c == -2:
                out.extend(src_shape[src:])
                src = len(src_shape)
            elif c == -3:
                out.append(src_shape[src] * src_shape[src + 1])
                src += 2
            elif c == -4:
                d, d1, d2 = src_shape[src], codes[i + 1], codes[i + 2]
                d1, d2 = (d // d2 if d1 == -1 and d2 else d1), (d // d1 if d2 == -1 and d1 else d2)
                if d1 * d2 != d or d1 < 0 or d2 < 0:
                    raise bad
                out += [d1, d2]
                src += 1
                i += 2
            elif c > 0:
                out.append(c)
                src += 1
            else:
                raise OperatorError(f"Reshape: {c} is not a shape code (0, -1, -2, -3, -4 or a size)")
            i += 1
    except IndexError:  # a code that reads past the input's dimensions
        raise bad from None
    size = int(np.prod(shape, dtype=np.int64))
    if infer >= 0:
        known = int(np.prod(out, dtype=np.int64))
        if known == 0 or size % known:
            raise bad
        out[infer] = size // known
    if int(np.prod(out, dtype=np.int64)) != size:
        raise bad
    return tuple(out[::-1]) if reverse else tuple(out)


register(
    "Reshape",
    lambda ins, out, a: np.copyto(out, ins[0].reshape(out.shape)),
    lambda ins, out, g, a: [g.reshape(ins[0].shape)],
    lambda name, shapes, dtypes, a: (reshape_target(shapes[0], a["shape"], bool(a.get("reverse"))), dtypes[0]),
)


# ----------------------------------------------------------------------------- reductions
def _reduce_axes(a: Attrs, ndim: int) -> tuple[int, ...] | None:
    axis = a.get("axis")
    if axis is None or axis == ():
        return None
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(ax % ndim for ax in axes)


def _reduce_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    (shape,) = shapes
    axis = a.get("axis")
    if axis is not None and axis != ():
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        bad = [ax for ax in axes if not -len(shape) <= ax < len(shape)]
        if bad:
            raise OperatorError(f"{name}: axis {bad[0]} is out of range for shape {shape}")
        if len({ax % len(shape) for ax in axes}) != len(axes):
            raise OperatorError(f"{name}: axis {tuple(axes)} repeats an axis of shape {shape}")
    probe = np.empty(shape, dtype=np.bool_)  # shape arithmetic only; no data is read
    out = np.sum(probe, axis=_reduce_axes(a, len(shape)), keepdims=bool(a.get("keepdims"))).shape
    return out or (1,), dtypes[0]  # MXNet: a reduction to a scalar is an array of shape (1,)


def _reduce_backward(scale_by_count: bool) -> Backward:
    def backward(ins: Sequence[np.ndarray], out: np.ndarray, g: np.ndarray, a: Attrs) -> list[np.ndarray | None]:
        x = ins[0]
        axes = _reduce_axes(a, x.ndim)
        if axes is None:
            axes = tuple(range(x.ndim))
        # The gradient with the reduced axes put back as 1s (its shape may be (1,) for a scalar).
        g = g.reshape([1 if i in axes else n for i, n in enumerate(x.shape)])
        grad = np.broadcast_to(g, x.shape)
        if scale_by_count:
            count = int(np.prod([x.shape[ax] for ax in axes], dtype=np.int64)) or 1
            grad = grad / count
        return [np.array(grad)]

    return backward


register(
    "sum",
    lambda ins, out, a: np.copyto(
        out, np.sum(ins[0], axis=_reduce_axes(a, ins[0].ndim), keepdims=bool(a.get("keepdims"))), casting="unsafe"
    ),
    _reduce_backward(False),
    _reduce_infer,
)
register(
    "mean",
    lambda ins, out, a: np.copyto(
        out, np.mean(ins[0], axis=_reduce_axes(a, ins[0].ndim), keepdims=bool(a.get("keepdims"))), casting="unsafe"
    ),
    _reduce_backward(True),
    _reduce_infer,
)


# ----------------------------------------------------------------------------- slicing and copies
def _slice_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    probe = np.empty(shapes[0], dtype=np.bool_)
    try:
        return probe[a["key"]].shape, dtypes[0]
    except IndexError as e:
        raise OperatorError(f"slice: index {a['key']!r} is invalid for shape {shapes[0]}: {e}") from None


def _slice_backward(ins: Sequence[np.ndarray], out: np.ndarray, g: np.ndarray, a: Attrs) -> list[np.ndarray | None]:
    grad = np.zeros_like(ins[0])
    grad[a["key"]] = g
    return [grad]


register("slice", lambda ins, out, a: np.copyto(out, ins[0][a["key"]]), _slice_backward, _slice_infer)

# Creation ops read nothing; they fill their output.
register("_zeros", lambda ins, out, a: out.fill(0), None, lambda n, s, d, a: (a["shape"], a["dtype"]))
register("_ones", lambda ins, out, a: out.fill(1), None, lambda n, s, d, a: (a["shape"], a["dtype"]))
register("_full", lambda ins, out, a: out.fill(a["value"]), None, lambda n, s, d, a: (a["shape"], a["dtype"]))
register(
    "_arange",
    lambda ins, out, a: np.copyto(out, np.arange(a["start"], a["stop"], a["step"]), casting="unsafe"),
    None,
    lambda n, s, d, a: ((len(range(0, int(np.ceil((a["stop"] - a["start"]) / a["step"])))),), a["dtype"]),
)
register(
    "_random_uniform",
    lambda ins, out, a: np.copyto(
        out, np.random.default_rng(a["seed"]).uniform(a["low"], a["high"], out.shape), casting="unsafe"
    ),
    None,
    lambda n, s, d, a: (a["shape"], a["dtype"]),
)
register(
    "_random_normal",
    lambda ins, out, a: np.copyto(
        out, np.random.default_rng(a["seed"]).normal(a["loc"], a["scale"], out.shape), casting="unsafe"
    ),
    None,
    lambda n, s, d, a: (a["shape"], a["dtype"]),
)
