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
    #: A scalar op's ufunc, and whether the scalar is its first operand: the front end calls it
    #: straight from the engine (``partial(ufunc, x, s, out)``, or with ``casting="unsafe"`` for
    #: arrays that are not floats; no Python frame between the engine and NumPy), which is what
    #: ``forward`` does with one frame more.
    scalar_ufunc: Callable[..., Any] | None = None
    scalar_first: bool = False


OPS: dict[str, OpDef] = {}


def register(
    name: str,
    forward: Forward,
    backward: Backward | None,
    infer: Infer,
    scalar_ufunc: Callable[..., Any] | None = None,
    scalar_first: bool = False,
) -> OpDef:
    """Add an operator to the registry (replacing one of the same name)."""
    op = OpDef(name, forward, backward, infer, scalar_ufunc, scalar_first)
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

    register(name, forward, backward, same_shape, scalar_ufunc=fn, scalar_first=reverse)


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


def _sampler(name: str, draw: Callable[[np.random.Generator, Attrs, Shape], np.ndarray]) -> None:
    """A random op: its own generator from the seed drawn at push time, so the engine's order does not matter."""

    def forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
        np.copyto(out, draw(np.random.default_rng(a["seed"]), a, out.shape), casting="unsafe")

    register(name, forward, None, lambda n, s, d, a: (a["shape"], a["dtype"]))


_sampler("_random_uniform", lambda rng, a, shape: rng.uniform(a["low"], a["high"], shape))
_sampler("_random_randint", lambda rng, a, shape: rng.integers(a["low"], a["high"], shape))
_sampler("_random_normal", lambda rng, a, shape: rng.normal(a["loc"], a["scale"], shape))


# ----------------------------------------------------------------------------- multi-output ops
MultiForward = Callable[[Sequence[np.ndarray], Sequence[np.ndarray], Attrs], None]
MultiBackward = Callable[[Sequence[np.ndarray], Sequence[np.ndarray], Sequence[np.ndarray], Attrs], list[np.ndarray | None]]
MultiInfer = Callable[[str, Sequence[Shape], Sequence[np.dtype], Attrs], list[tuple[Shape, np.dtype]]]


@dataclass(frozen=True, slots=True)
class MultiOpDef:
    """An operator with several outputs, all written by one engine push (MXNet's ``SliceChannel``...).

    ``forward(ins, outs, attrs)`` fills every output; ``backward(ins, outs, grads, attrs)`` gets one
    gradient per output (zeros where an output got none) and returns one per input.
    """

    name: str
    forward: MultiForward
    backward: MultiBackward | None
    infer: MultiInfer


MULTI_OPS: dict[str, MultiOpDef] = {}


def register_multi(name: str, forward: MultiForward, backward: MultiBackward | None, infer: MultiInfer) -> MultiOpDef:
    op = MultiOpDef(name, forward, backward, infer)
    MULTI_OPS[name] = op
    return op


# ----------------------------------------------------------------------------- more unary ops
def _zero_grad(x: np.ndarray, y: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Rounding is flat almost everywhere: MXNet gives it a zero gradient (and still records it)."""
    return np.zeros_like(g)


def _round_half_away(x: np.ndarray, out: np.ndarray, casting: str = "unsafe") -> None:
    # MXNet's round is C's round(): halves go away from zero (NumPy's np.round goes to even; that is rint).
    np.copyto(out, np.sign(x) * np.floor(np.abs(x) + 0.5), casting="unsafe")


_unary("floor", np.floor, _zero_grad)
_unary("ceil", np.ceil, _zero_grad)
_unary("round", _round_half_away, _zero_grad)
_unary("rint", np.rint, _zero_grad)
_unary("trunc", np.trunc, _zero_grad)
_unary("fix", np.trunc, _zero_grad)  # MXNet's fix rounds toward zero, which is trunc
_unary("square", np.square, lambda x, y, g: 2 * x * g)


def _clip_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    if a["a_min"] > a["a_max"]:
        raise OperatorError(f"clip: a_min ({a['a_min']}) must not be greater than a_max ({a['a_max']}), shape {shapes[0]}")
    return shapes[0], dtypes[0]


register(
    "clip",
    lambda ins, out, a: np.copyto(out, np.clip(ins[0], a["a_min"], a["a_max"]), casting="unsafe"),
    lambda ins, out, g, a: [g * ((ins[0] >= a["a_min"]) & (ins[0] <= a["a_max"]))],
    _clip_infer,
)


# ----------------------------------------------------------------------------- max, min, norm, arg-reductions
def _extreme_backward(ins: Sequence[np.ndarray], out: np.ndarray, g: np.ndarray, a: Attrs) -> list[np.ndarray | None]:
    """The gradient goes to every element equal to the extreme (ties share it, as in MXNet)."""
    x = ins[0]
    axes = _reduce_axes(a, x.ndim)
    axes = tuple(range(x.ndim)) if axes is None else axes
    kept = [1 if i in axes else n for i, n in enumerate(x.shape)]
    return [np.broadcast_to(g.reshape(kept), x.shape) * (x == out.reshape(kept))]


def _extreme_forward(fn: Callable[..., Any]) -> Forward:
    def forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
        np.copyto(out, fn(ins[0], axis=_reduce_axes(a, ins[0].ndim), keepdims=bool(a.get("keepdims"))), casting="unsafe")

    return forward


register("max", _extreme_forward(np.max), _extreme_backward, _reduce_infer)
register("min", _extreme_forward(np.min), _extreme_backward, _reduce_infer)


def _norm_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    if a.get("ord") not in (1, 2):
        raise OperatorError(f"norm: ord must be 1 or 2, got {a.get('ord')!r} (shape {shapes[0]})")
    shape, dtype = _reduce_infer(name, shapes, dtypes, a)
    return shape, np.dtype(a["out_dtype"]) if a.get("out_dtype") is not None else dtype


def _norm_value(x: np.ndarray, a: Attrs, keepdims: bool) -> np.ndarray:
    axes = _reduce_axes(a, x.ndim)
    x = x.astype(np.float64)  # accumulate wide, as MXNET_SAFE_ACCUMULATION does
    if a["ord"] == 1:
        return np.sum(np.abs(x), axis=axes, keepdims=keepdims)
    return np.sqrt(np.sum(x * x, axis=axes, keepdims=keepdims))


def _norm_backward(ins: Sequence[np.ndarray], out: np.ndarray, g: np.ndarray, a: Attrs) -> list[np.ndarray | None]:
    x = ins[0]
    axes = _reduce_axes(a, x.ndim)
    axes = tuple(range(x.ndim)) if axes is None else axes
    g = g.reshape([1 if i in axes else n for i, n in enumerate(x.shape)])
    if a["ord"] == 1:
        return [g * np.sign(x)]
    n = _norm_value(x, a, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        return [np.where(n == 0, 0.0, g * x / n)]


register(
    "norm",
    lambda ins, out, a: np.copyto(out, _norm_value(ins[0], a, bool(a.get("keepdims"))).reshape(out.shape), casting="unsafe"),
    _norm_backward,
    _norm_infer,
)


def _one_axis(name: str, shape: Shape, axis: Any, extra: int = 0) -> int:
    """``axis`` checked against ``shape`` (``extra`` allows that many positions past the end) and made non-negative."""
    n = len(shape) + extra
    if not isinstance(axis, (int, np.integer)) or not -n <= axis < n:
        raise OperatorError(f"{name}: axis {axis!r} is out of range for shape {shape}")
    return int(axis) % n


def _argreduce_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    (shape,) = shapes
    if a.get("axis") is None:
        return ((1,) * len(shape) if a.get("keepdims") else (1,)), dtypes[0]
    ax = _one_axis(name, shape, a["axis"])
    if shape[ax] == 0:
        raise OperatorError(f"{name}: cannot reduce the empty axis {ax} of shape {shape}")
    out = list(shape)
    if a.get("keepdims"):
        out[ax] = 1
    else:
        del out[ax]
    return tuple(out) or (1,), dtypes[0]  # MXNet: the index has the input's dtype


def _argreduce_forward(fn: Callable[..., Any]) -> Forward:
    def forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
        axis = a.get("axis")
        np.copyto(out, np.reshape(fn(ins[0], axis=axis), out.shape), casting="unsafe")

    return forward


register("argmax", _argreduce_forward(np.argmax), None, _argreduce_infer)
register("argmin", _argreduce_forward(np.argmin), None, _argreduce_infer)


# ----------------------------------------------------------------------------- reshaping ops (copies)
def _reshaping(name: str, rule: Callable[[str, Shape, Attrs], Shape], n_inputs: int = 1) -> None:
    """An op whose output is its first input's data under another shape; only that input gets a gradient."""

    def infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
        shape = rule(name, shapes[0], {**a, "_shapes": shapes})
        size = int(np.prod(shape, dtype=np.int64))
        if size != int(np.prod(shapes[0], dtype=np.int64)):
            raise OperatorError(f"{name}: cannot reshape {shapes[0]} to {shape} (the sizes differ)")
        return shape, dtypes[0]

    register(
        name,
        lambda ins, out, a: np.copyto(out, ins[0].reshape(out.shape), casting="unsafe"),
        lambda ins, out, g, a: [g.reshape(ins[0].shape), *([None] * (len(ins) - 1))],
        infer,
    )


def expand_dims_shape(name: str, shape: Shape, a: Attrs) -> Shape:
    ax = _one_axis(name, shape, a["axis"], extra=1)
    return (*shape[:ax], 1, *shape[ax:])


def flatten_shape(name: str, shape: Shape, a: Attrs) -> Shape:
    if not shape:
        return (1, 1)
    return (shape[0], int(np.prod(shape[1:], dtype=np.int64)))


def squeeze_shape(name: str, shape: Shape, a: Attrs) -> Shape:
    axis = a.get("axis")
    if axis is None:
        drop = {i for i, n in enumerate(shape) if n == 1}
    else:
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        drop = {_one_axis(name, shape, ax) for ax in axes}
        if len(drop) != len(axes):
            raise OperatorError(f"{name}: axis {tuple(axes)} repeats an axis of shape {shape}")
        bad = [ax for ax in sorted(drop) if shape[ax] != 1]
        if bad:
            raise OperatorError(f"{name}: cannot squeeze axis {bad[0]} of shape {shape}: its size is {shape[bad[0]]}, not 1")
    return tuple(n for i, n in enumerate(shape) if i not in drop) or (1,)  # MXNet keeps (1,) for all-ones


_reshaping("expand_dims", expand_dims_shape)
_reshaping("Flatten", flatten_shape)
_reshaping("squeeze", squeeze_shape)
_reshaping("reshape_like", lambda name, shape, a: a["_shapes"][1], n_inputs=2)


# ----------------------------------------------------------------------------- broadcasting to a shape
def _broadcast_to_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    src, target = shapes[0], tuple(a["shape"])
    if len(target) != len(src):
        raise OperatorError(f"{name}: cannot broadcast shape {src} to {target}: they have different numbers of dimensions")
    out = tuple(s if t == 0 else t for s, t in zip(src, target, strict=True))  # 0 keeps the input's dimension
    for s, t in zip(src, out, strict=True):
        if s != t and s != 1:
            raise OperatorError(f"{name}: cannot broadcast shape {src} to {target}: only size-1 dimensions can grow")
    return out, dtypes[0]


def _broadcast_like_shape(name: str, shapes: Sequence[Shape], a: Attrs) -> Shape:
    lhs, rhs = shapes[0], shapes[1]
    la, ra = a.get("lhs_axes"), a.get("rhs_axes")
    if la is None and ra is None:
        return rhs
    if la is None or ra is None or len(la) != len(ra) or not la:
        raise OperatorError(
            f"{name}: lhs_axes {la} and rhs_axes {ra} must be non-empty and of equal length (shapes {lhs}, {rhs})"
        )
    out = list(lhs)
    for lx, rx in zip(la, ra, strict=True):
        out[_one_axis(name, lhs, lx)] = rhs[_one_axis(name, rhs, rx)]
    return tuple(out)


def _broadcast_like_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    target = _broadcast_like_shape(name, shapes, a)
    return _broadcast_to_infer(name, shapes[:1], dtypes[:1], {"shape": target})


register(
    "broadcast_to",
    lambda ins, out, a: np.copyto(out, np.broadcast_to(ins[0], out.shape), casting="unsafe"),
    lambda ins, out, g, a: [unbroadcast(g, ins[0].shape)],
    _broadcast_to_infer,
)
register(
    "broadcast_like",
    lambda ins, out, a: np.copyto(out, np.broadcast_to(ins[0], out.shape), casting="unsafe"),
    lambda ins, out, g, a: [unbroadcast(g, ins[0].shape), None],
    _broadcast_like_infer,
)


# ----------------------------------------------------------------------------- axis permutations
def _axes_attr(name: str, shape: Shape, axis: Any) -> tuple[int, ...]:
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = tuple(_one_axis(name, shape, ax) for ax in axes)
    if len(set(out)) != len(out):
        raise OperatorError(f"{name}: axis {axes} repeats an axis of shape {shape}")
    return out


def _reverse_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    _axes_attr(name, shapes[0], a["axis"])
    return shapes[0], dtypes[0]


register(
    "reverse",
    lambda ins, out, a: np.copyto(out, np.flip(ins[0], _axes_attr("reverse", ins[0].shape, a["axis"]))),
    lambda ins, out, g, a: [np.flip(g, _axes_attr("reverse", g.shape, a["axis"]))],
    _reverse_infer,
)


def _swapaxis_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    shape = list(shapes[0])
    d1, d2 = _one_axis(name, shapes[0], a["dim1"]), _one_axis(name, shapes[0], a["dim2"])
    shape[d1], shape[d2] = shape[d2], shape[d1]
    return tuple(shape), dtypes[0]


register(
    "SwapAxis",
    lambda ins, out, a: np.copyto(out, np.swapaxes(ins[0], a["dim1"], a["dim2"])),
    lambda ins, out, g, a: [np.swapaxes(g, a["dim1"], a["dim2"])],
    _swapaxis_infer,
)


# ----------------------------------------------------------------------------- take, one_hot
def _take_indices(idx: np.ndarray, n: int, mode: str) -> np.ndarray:
    i = np.asarray(idx).astype(np.int64)  # MXNet casts (float) indices to integers
    if mode == "wrap":
        return np.mod(i, n)
    if mode == "raise" and i.size and (i.min() < 0 or i.max() >= n):
        raise OperatorError(f"take: an index is out of range for an axis of size {n} (mode='raise')")
    return np.clip(i, 0, n - 1)


def _take_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    data, idx = shapes
    ax = _one_axis(name, data, a["axis"])
    if a["mode"] not in ("clip", "wrap", "raise"):
        raise OperatorError(f"take: mode must be 'clip', 'wrap' or 'raise', got {a['mode']!r}")
    if data[ax] == 0:
        raise OperatorError(f"take: cannot take from the empty axis {ax} of shape {data}")
    return (*data[:ax], *idx, *data[ax + 1 :]), dtypes[0]


def _take_backward(ins: Sequence[np.ndarray], out: np.ndarray, g: np.ndarray, a: Attrs) -> list[np.ndarray | None]:
    data, idx = ins
    ax = a["axis"] % data.ndim
    i = _take_indices(idx, data.shape[ax], a["mode"])
    grad = np.zeros(data.shape, dtype=g.dtype)
    moved = np.moveaxis(grad, ax, 0)  # a view; add.at sums the gradients of repeated indices
    np.add.at(moved, i, np.moveaxis(g, list(range(ax, ax + i.ndim)), list(range(i.ndim))))
    return [grad, None]


register(
    "take",
    lambda ins, out, a: np.copyto(
        out,
        np.take(ins[0], _take_indices(ins[1], ins[0].shape[a["axis"] % ins[0].ndim], a["mode"]), axis=a["axis"]),
        casting="unsafe",
    ),
    _take_backward,
    _take_infer,
)


def _one_hot_forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
    idx = ins[0].astype(np.int64)
    out.fill(a["off_value"])
    hit = (idx >= 0) & (idx < a["depth"])  # MXNet: an index outside [0, depth) gives a row of off_value
    flat = out.reshape(-1, a["depth"])
    rows = np.nonzero(hit.reshape(-1))[0]
    flat[rows, idx.reshape(-1)[rows]] = a["on_value"]
    if not np.shares_memory(flat, out):
        out[...] = flat.reshape(out.shape)


def _one_hot_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    if int(a["depth"]) <= 0:
        raise OperatorError(f"one_hot: depth must be positive, got {a['depth']} (indices of shape {shapes[0]})")
    return (*shapes[0], int(a["depth"])), np.dtype(a["dtype"])


register("one_hot", _one_hot_forward, None, _one_hot_infer)


# ----------------------------------------------------------------------------- joining
def _concat_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    if not shapes:
        raise OperatorError("Concat: needs at least one array")
    first = shapes[0]
    ax = _one_axis(name, first, a["dim"])
    for s in shapes[1:]:
        if len(s) != len(first) or any(m != n for i, (m, n) in enumerate(zip(s, first, strict=True)) if i != ax):
            raise OperatorError(
                f"Concat: shapes {' and '.join(map(str, shapes))} differ outside the concatenation axis {a['dim']}"
            )
    out = list(first)
    out[ax] = int(np.sum([s[ax] for s in shapes]))
    return tuple(out), np.result_type(*dtypes)


def _concat_backward(ins: Sequence[np.ndarray], out: np.ndarray, g: np.ndarray, a: Attrs) -> list[np.ndarray | None]:
    ax = a["dim"] % g.ndim
    cuts = np.cumsum([x.shape[ax] for x in ins])[:-1]
    return list(np.split(g, cuts, axis=ax))


def _concat_forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
    np.concatenate(ins, axis=a["dim"], out=out, casting="unsafe")


register(
    "Concat",
    _concat_forward,
    _concat_backward,
    _concat_infer,
)


def _stack_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    if not shapes:
        raise OperatorError("stack: needs at least one array")
    if any(s != shapes[0] for s in shapes):
        raise OperatorError(f"stack: inputs must have the same shape, got {' and '.join(map(str, shapes))}")
    ax = _one_axis(name, shapes[0], a["axis"], extra=1)
    return (*shapes[0][:ax], len(shapes), *shapes[0][ax:]), np.result_type(*dtypes)


def _stack_forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
    np.stack(ins, axis=a["axis"], out=out, casting="unsafe")


register(
    "stack",
    _stack_forward,
    lambda ins, out, g, a: list(np.moveaxis(g, a["axis"], 0)),
    _stack_infer,
)


def _split_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> list[tuple[Shape, np.dtype]]:
    (shape,) = shapes
    n = int(a["num_outputs"])
    ax = _one_axis(name, shape, a["axis"])
    if n < 1 or shape[ax] % n:
        raise OperatorError(f"{name}: cannot split axis {a['axis']} of shape {shape} (size {shape[ax]}) into {n} equal parts")
    piece = list(shape)
    piece[ax] //= n
    if a.get("squeeze_axis"):
        if piece[ax] != 1:
            raise OperatorError(f"{name}: squeeze_axis needs parts of size 1, splitting shape {shape} gives {piece[ax]}")
        del piece[ax]
    return [(tuple(piece), dtypes[0])] * n


def _split_forward(ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], a: Attrs) -> None:
    for out, part in zip(outs, np.split(ins[0], len(outs), axis=a["axis"]), strict=True):
        np.copyto(out, part.reshape(out.shape))


def _split_backward(
    ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], gs: Sequence[np.ndarray], a: Attrs
) -> list[np.ndarray | None]:
    ax = a["axis"] % ins[0].ndim
    parts = [np.expand_dims(g, ax) if a.get("squeeze_axis") else g for g in gs]
    return [np.concatenate(parts, axis=ax)]


register_multi("SliceChannel", _split_forward, _split_backward, _split_infer)


# ----------------------------------------------------------------------------- sorting
def _sort_axis(name: str, shape: Shape, a: Attrs) -> int | None:
    return None if a.get("axis") is None else _one_axis(name, shape, a["axis"])


def _order(x: np.ndarray, a: Attrs, k: int | None = None) -> tuple[np.ndarray, int]:
    """Indices that sort ``x`` along the axis (all of it flattened if the axis is None), and that axis.

    Descending order is the ascending (stable) order reversed, as MXNet's is; for a few of many
    elements a partition picks them first.
    """
    if a.get("axis") is None:
        x, ax = x.reshape(-1), 0
    else:
        ax = a["axis"] % x.ndim
    n = x.shape[ax]
    asc = bool(a.get("is_ascend"))
    if k is not None and 0 < k < n // 8:
        part = np.argpartition(x, k - 1 if asc else n - k, axis=ax)
        part = np.take(part, np.arange(k) if asc else np.arange(n - k, n), axis=ax)
        sub = np.argsort(np.take_along_axis(x, part, axis=ax), axis=ax, kind="stable")
        idx = np.take_along_axis(part, sub, axis=ax)
        return (idx if asc else np.flip(idx, ax)), ax
    idx = np.argsort(x, axis=ax, kind="stable")
    if not asc:
        idx = np.flip(idx, ax)
    return (idx if k is None else np.take(idx, np.arange(k), axis=ax)), ax


def _topk_k(shape: Shape, a: Attrs) -> int:
    n = int(np.prod(shape, dtype=np.int64)) if a.get("axis") is None else shape[a["axis"] % len(shape)]
    k = int(a["k"])
    return n if k < 1 else k


def _topk_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    (shape,) = shapes
    ax = _sort_axis(name, shape, a)
    if a["ret_typ"] not in ("value", "indices", "mask"):
        raise OperatorError(f"topk: ret_typ must be 'value', 'indices', 'mask' or 'both', got {a['ret_typ']!r}")
    k = _topk_k(shape, a)
    n = int(np.prod(shape, dtype=np.int64)) if ax is None else shape[ax]
    if k > n:
        raise OperatorError(f"topk: k={k} is more than the {n} elements along axis {a.get('axis')} of shape {shape}")
    if a["ret_typ"] == "mask":
        return shape, dtypes[0]
    out: Shape = (k,) if ax is None else (*shape[:ax], k, *shape[ax + 1 :])
    return out, dtypes[0] if a["ret_typ"] == "value" else np.dtype(a["dtype"])


def _topk_forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
    x = ins[0]
    idx, ax = _order(x, a, _topk_k(x.shape, a))
    flat = x.reshape(-1) if a.get("axis") is None else x
    if a["ret_typ"] == "indices":
        np.copyto(out, idx, casting="unsafe")
    elif a["ret_typ"] == "value":
        np.copyto(out, np.take_along_axis(flat, idx, axis=ax), casting="unsafe")
    else:
        mask = np.zeros(flat.shape, dtype=out.dtype)
        np.put_along_axis(mask, idx, 1, axis=ax)
        np.copyto(out, mask.reshape(out.shape))


def _topk_backward(ins: Sequence[np.ndarray], out: np.ndarray, g: np.ndarray, a: Attrs) -> list[np.ndarray | None]:
    """The value's gradient goes back to where each value came from; indices and masks have none (zeros)."""
    x = ins[0]
    grad = np.zeros(x.size if a.get("axis") is None else x.shape, dtype=g.dtype)
    if a["ret_typ"] == "value":
        idx, ax = _order(x, a, _topk_k(x.shape, a))
        np.put_along_axis(grad, idx, g, axis=ax)
    return [grad.reshape(x.shape)]


register("topk", _topk_forward, _topk_backward, _topk_infer)


def _sort_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    ax = _sort_axis(name, shapes[0], a)
    shape = (int(np.prod(shapes[0], dtype=np.int64)),) if ax is None else shapes[0]
    return shape, dtypes[0] if name == "sort" else np.dtype(a["dtype"])


def _sort_forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
    idx, ax = _order(ins[0], a)
    flat = ins[0].reshape(-1) if a.get("axis") is None else ins[0]
    np.copyto(out, np.take_along_axis(flat, idx, axis=ax), casting="unsafe")


def _sort_backward(ins: Sequence[np.ndarray], out: np.ndarray, g: np.ndarray, a: Attrs) -> list[np.ndarray | None]:
    x = ins[0]
    idx, ax = _order(x, a)
    grad = np.zeros(idx.shape, dtype=g.dtype)
    np.put_along_axis(grad, idx, g, axis=ax)
    return [grad.reshape(x.shape)]


register("sort", _sort_forward, _sort_backward, _sort_infer)
register("argsort", lambda ins, out, a: np.copyto(out, _order(ins[0], a)[0], casting="unsafe"), None, _sort_infer)


# ----------------------------------------------------------------------------- softmax family
def _softmax_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    _one_axis(name, shapes[0], a["axis"])
    t = a.get("temperature")
    if t is not None and t == 0:
        raise OperatorError(f"{name}: temperature must not be 0 (shape {shapes[0]})")
    return shapes[0], np.dtype(a["dtype"]) if a.get("dtype") is not None else dtypes[0]


def _scaled(x: np.ndarray, a: Attrs, name: str) -> np.ndarray:
    """The logits in float64 (MXNet accumulates softmax wide), divided by the temperature, negated for softmin."""
    z = x.astype(np.float64) / (a.get("temperature") or 1.0)
    return -z if name == "softmin" else z


def _log_softmax_value(z: np.ndarray, ax: int) -> np.ndarray:
    z = z - np.max(z, axis=ax, keepdims=True)
    return z - np.log(np.sum(np.exp(z), axis=ax, keepdims=True))


def _softmax_op(name: str) -> None:
    log = name == "log_softmax"

    def forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
        ls = _log_softmax_value(_scaled(ins[0], a, name), a["axis"])
        np.copyto(out, ls if log else np.exp(ls), casting="unsafe")

    def backward(ins: Sequence[np.ndarray], out: np.ndarray, g: np.ndarray, a: Attrs) -> list[np.ndarray | None]:
        ax = a["axis"]
        ls = _log_softmax_value(_scaled(ins[0], a, name), ax)
        p, g = np.exp(ls), g.astype(np.float64)
        dz = g - p * np.sum(g, axis=ax, keepdims=True) if log else p * (g - np.sum(g * p, axis=ax, keepdims=True))
        dz = dz / (a.get("temperature") or 1.0)
        return [-dz if name == "softmin" else dz]

    register(name, forward, backward, _softmax_infer)


for _name in ("softmax", "log_softmax", "softmin"):
    _softmax_op(_name)


# ----------------------------------------------------------------------------- dropout
def _dropout_scale(shape: Shape, a: Attrs) -> np.ndarray | None:
    """The factor each element is multiplied by (0 or 1/(1-p)), or None when dropout is off.

    The mask comes from the seed drawn at push time, so forward and backward agree, on any engine.
    """
    p = a["p"]
    if not a["active"] or p == 0:
        return None
    mask_shape = tuple(1 if i in a["axes"] else n for i, n in enumerate(shape))
    keep = np.random.default_rng(a["seed"]).random(mask_shape) >= p
    return np.zeros(mask_shape) if p >= 1 else keep / (1.0 - p)


def _dropout_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    if not 0 <= a["p"] <= 1:
        raise OperatorError(f"Dropout: p must be in [0, 1], got {a['p']} (shape {shapes[0]})")
    for ax in a["axes"]:
        _one_axis(name, shapes[0], ax)
    return shapes[0], dtypes[0]


def _dropout_forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
    scale = _dropout_scale(ins[0].shape, a)
    np.copyto(out, ins[0] if scale is None else ins[0] * scale, casting="unsafe")


def _dropout_backward(ins: Sequence[np.ndarray], out: np.ndarray, g: np.ndarray, a: Attrs) -> list[np.ndarray | None]:
    scale = _dropout_scale(ins[0].shape, a)
    return [g if scale is None else g * scale]


register("Dropout", _dropout_forward, _dropout_backward, _dropout_infer)


# ----------------------------------------------------------------------------- more creation ops
def _eye_forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
    np.copyto(out, np.eye(out.shape[0], out.shape[1], a["k"]), casting="unsafe")


def _linspace_forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
    np.copyto(out, np.linspace(a["start"], a["stop"], out.shape[0], endpoint=a["endpoint"], dtype=out.dtype), casting="unsafe")


register(
    "_eye",
    _eye_forward,
    None,
    lambda n, s, d, a: (a["shape"], a["dtype"]),
)
register(
    "_linspace",
    _linspace_forward,
    None,
    lambda n, s, d, a: (a["shape"], a["dtype"]),
)


# ----------------------------------------------------------------------------- slice_like, pick, batch_take, gather_nd
def _slice_like_key(name: str, data: Shape, like: Shape, axes: Sequence[int]) -> tuple[slice, ...]:
    if not axes:
        if len(data) != len(like):
            raise OperatorError(f"{name}: with no axes, shapes {data} and {like} must have the same number of dimensions")
        axes = range(len(data))
    key = [slice(None)] * len(data)
    for ax in axes:
        i = _one_axis(name, data, ax)
        if i >= len(like):
            raise OperatorError(f"{name}: axis {ax} is out of range for the shape {like} to slice like")
        if like[i] > data[i]:
            raise OperatorError(f"{name}: cannot slice axis {ax} of shape {data} to {like[i]} (from shape {like})")
        key[i] = slice(0, like[i])
    return tuple(key)


def _slice_like_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    key = _slice_like_key(name, shapes[0], shapes[1], a["axes"])
    return np.empty(shapes[0], dtype=np.bool_)[key].shape, dtypes[0]


def _slice_like_backward(ins: Sequence[np.ndarray], out: np.ndarray, g: np.ndarray, a: Attrs) -> list[np.ndarray | None]:
    grad = np.zeros(ins[0].shape, dtype=g.dtype)
    grad[_slice_like_key("slice_like", ins[0].shape, ins[1].shape, a["axes"])] = g
    return [grad, None]


register(
    "slice_like",
    lambda ins, out, a: np.copyto(out, ins[0][_slice_like_key("slice_like", ins[0].shape, ins[1].shape, a["axes"])]),
    _slice_like_backward,
    _slice_like_infer,
)


def _pick_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    data, idx = shapes
    ax = _one_axis(name, data, a["axis"])
    if a["mode"] not in ("clip", "wrap"):
        raise OperatorError(f"{name}: mode must be 'clip' or 'wrap', got {a['mode']!r}")
    kept = (*data[:ax], 1, *data[ax + 1 :])
    dropped = (*data[:ax], *data[ax + 1 :])
    if idx not in (kept, dropped) and int(np.prod(idx, dtype=np.int64)) != int(np.prod(dropped, dtype=np.int64)):
        raise OperatorError(f"{name}: index of shape {idx} does not fit data of shape {data} along axis {a['axis']}")
    return (kept if a.get("keepdims") else dropped) or (1,), dtypes[0]


def _pick_index(ins: Sequence[np.ndarray], a: Attrs) -> tuple[np.ndarray, int]:
    data, idx = ins
    ax = a["axis"] % data.ndim
    i = _take_indices(idx, data.shape[ax], "wrap" if a["mode"] == "wrap" else "clip")
    return i.reshape((*data.shape[:ax], 1, *data.shape[ax + 1 :])), ax


def _pick_forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
    i, ax = _pick_index(ins, a)
    np.copyto(out, np.take_along_axis(ins[0], i, axis=ax).reshape(out.shape), casting="unsafe")


def _pick_backward(ins: Sequence[np.ndarray], out: np.ndarray, g: np.ndarray, a: Attrs) -> list[np.ndarray | None]:
    i, ax = _pick_index(ins, a)
    grad = np.zeros(ins[0].shape, dtype=g.dtype)
    np.put_along_axis(grad, i, g.reshape(i.shape), axis=ax)
    return [grad, None]


register("pick", _pick_forward, _pick_backward, _pick_infer)


def _batch_take_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    data, idx = shapes
    if len(data) != 2 or int(np.prod(idx, dtype=np.int64)) != data[0]:
        raise OperatorError(f"{name}: needs 2-D data (n, m) and n indices, got shapes {data} and {idx}")
    return tuple(idx), dtypes[0]


def _batch_take_forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
    data = ins[0]
    i = np.clip(ins[1].reshape(-1).astype(np.int64), 0, data.shape[1] - 1)
    np.copyto(out, data[np.arange(data.shape[0]), i].reshape(out.shape), casting="unsafe")


register("batch_take", _batch_take_forward, None, _batch_take_infer)


def _fill_element_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    data, value, idx = shapes
    if len(data) != 2 or value != (data[0],) or idx != (data[0],):
        raise OperatorError(f"{name}: needs 2-D data (n, m), n values and n indices, got shapes {data}, {value} and {idx}")
    return data, dtypes[0]


def _fill_element_forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
    data, value, idx = ins
    result = data.copy()
    i = np.clip(idx.astype(np.int64), 0, data.shape[1] - 1)
    result[np.arange(data.shape[0]), i] = value
    np.copyto(out, result, casting="unsafe")


register("fill_element_0index", _fill_element_forward, None, _fill_element_infer)


class GatherIndexError(OperatorError, IndexError):
    """An index of ``gather_nd`` is out of range (raised when the op runs, as in MXNet)."""


def _gather_nd_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    data, idx = shapes
    if len(idx) < 1 or idx[0] > len(data) or idx[0] < 1:
        raise OperatorError(f"{name}: indices of shape {idx} cannot index data of shape {data}")
    return (*idx[1:], *data[idx[0] :]) or (1,), dtypes[0]


def _gather_nd_index(ins: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
    data, idx = ins
    i = idx.astype(np.int64)
    for k in range(i.shape[0]):
        n = data.shape[k]
        bad = (i[k] < -n) | (i[k] >= n)
        if bad.any():
            raise GatherIndexError(f"gather_nd: index {int(i[k][bad].flat[0])} is out of bounds for axis {k} with size {n}")
    return tuple(np.mod(i[k], data.shape[k]) for k in range(i.shape[0]))


def _gather_nd_backward(ins: Sequence[np.ndarray], out: np.ndarray, g: np.ndarray, a: Attrs) -> list[np.ndarray | None]:
    key = _gather_nd_index(ins)
    grad = np.zeros(ins[0].shape, dtype=g.dtype)
    np.add.at(grad, key, g.reshape(key[0].shape + ins[0].shape[len(key) :]))
    return [grad, None]


register(
    "gather_nd",
    lambda ins, out, a: np.copyto(out, ins[0][_gather_nd_index(ins)].reshape(out.shape), casting="unsafe"),
    _gather_nd_backward,
    _gather_nd_infer,
)


def _sample_normal_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    mu, sigma = shapes
    if mu != sigma:
        raise OperatorError(f"{name}: mu and sigma must have the same shape, got {mu} and {sigma}")
    return (*mu, *a["shape"]), np.dtype(a["dtype"]) if a.get("dtype") is not None else dtypes[0]


def _sample_normal_forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
    mu, sigma = ins
    extra = (1,) * len(a["shape"])
    loc, scale = mu.reshape(mu.shape + extra), sigma.reshape(sigma.shape + extra)
    np.copyto(out, np.random.default_rng(a["seed"]).normal(loc, scale, out.shape), casting="unsafe")


register("_sample_normal", _sample_normal_forward, None, _sample_normal_infer)


# ----------------------------------------------------------------------------- Pooling
POOL_TYPES = ("max", "avg", "sum")
POOL_CONVENTIONS = ("valid", "full", "same")


def _pool_params(name: str, shape: Shape, a: Attrs) -> tuple[Shape, Shape, Shape]:
    """Kernel, stride and pad, one per spatial axis (the global pool's kernel is the whole input)."""
    nd = len(shape) - 2
    if a.get("global_pool"):
        return tuple(shape[2:]), (1,) * nd, (0,) * nd
    kernel = tuple(a["kernel"])
    if len(kernel) != nd:
        raise OperatorError(f"{name}: a {len(kernel)}-D kernel {kernel} does not fit input of shape {shape} ({nd} spatial axes)")
    stride = tuple(a["stride"]) or (1,) * nd
    pad = tuple(a["pad"]) or (0,) * nd
    if len(stride) != nd or len(pad) < nd:
        raise OperatorError(f"{name}: stride {stride} and pad {pad} must have one value per kernel axis (kernel {kernel})")
    return kernel, stride, pad[:nd]


def _pool_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    (shape,) = shapes
    if a["pool_type"] not in POOL_TYPES:
        raise OperatorError(f"{name}: pool_type must be one of {', '.join(POOL_TYPES)}, got {a['pool_type']!r}")
    if a["pooling_convention"] not in POOL_CONVENTIONS:
        raise OperatorError(f"{name}: pooling_convention must be 'valid', 'full' or 'same', got {a['pooling_convention']!r}")
    if a.get("layout") not in (None, "NCW", "NCHW", "NCDHW"):
        raise OperatorError(f"{name}: only the NCW, NCHW and NCDHW layouts are supported, got {a['layout']!r}")
    if not 3 <= len(shape) <= 5:
        raise OperatorError(f"{name}: input must be 3-D (N, C, W), 4-D (N, C, H, W) or 5-D (N, C, D, H, W), got shape {shape}")
    conv = a["pooling_convention"]
    if conv == "same" and not a.get("global_pool"):
        if len(shape) != 3:
            raise OperatorError(f"{name}: pooling_convention='same' supports 1-D pooling of 3-D input only, got shape {shape}")
        if any(p != 0 for p in a["pad"]):
            raise OperatorError(f"{name}: pooling_convention='same' does not allow a pad, got pad {tuple(a['pad'])}")
    kernel, stride, pad = _pool_params(name, shape, a)
    if any(s < 1 for s in stride) or any(k < 1 for k in kernel) or any(p < 0 for p in pad):
        raise OperatorError(f"{name}: kernel {kernel} and stride {stride} must be positive, pad {pad} non-negative")
    out = list(shape[:2])
    for n, k, s, p in zip(shape[2:], kernel, stride, pad, strict=True):
        if k > n + 2 * p:
            raise OperatorError(f"{name}: kernel {kernel} exceeds input of shape {shape} padded by {pad}")
        if a.get("global_pool"):
            out.append(1)
        elif conv == "valid":
            out.append(1 + (n + 2 * p - k) // s)
        elif conv == "full":
            out.append(1 + -(-(n + 2 * p - k) // s))
        else:
            out.append(-(-(n + 2 * p) // s))
    return tuple(out), dtypes[0]


def _pool_windows(shape: Shape, out_shape: Shape, a: Attrs) -> Any:
    """Each output position with its window (a tuple of slices over the spatial axes) and its divisor for avg."""
    kernel, stride, pad = _pool_params("Pooling", shape, a)
    include_pad = a.get("count_include_pad")
    include_pad = True if include_pad is None else include_pad
    for pos in np.ndindex(*out_shape[2:]):
        window, size, clipped = [], 1, 1
        for o, n, k, s, p in zip(pos, shape[2:], kernel, stride, pad, strict=True):
            start = o * s - p
            end = min(start + k, n + p)
            lo, hi = max(start, 0), min(end, n)
            size *= end - start
            clipped *= max(hi - lo, 0)
            window.append(slice(lo, max(hi, lo)))
        yield pos, tuple(window), (size if include_pad else clipped)


def _pool_forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
    x = ins[0]
    axes = tuple(range(2, x.ndim))
    kind = a["pool_type"]
    for pos, window, size in _pool_windows(x.shape, out.shape, a):
        key = (Ellipsis, *window)
        w = x[key]
        at = (Ellipsis, *pos)
        if kind == "max":
            if w.size == 0:  # a window past the end ("full" with stride > kernel): MXNet gives the lowest value
                out[at] = np.finfo(out.dtype).min if out.dtype.kind == "f" else np.iinfo(out.dtype).min
                continue
            v = np.max(w, axis=axes)
        else:
            v = np.sum(w, axis=axes, dtype=np.float64)
            if kind == "avg":
                with np.errstate(invalid="ignore", divide="ignore"):
                    v = v / size
        out[at] = v


def _pool_backward(ins: Sequence[np.ndarray], out: np.ndarray, g: np.ndarray, a: Attrs) -> list[np.ndarray | None]:
    x = ins[0]
    grad = np.zeros(x.shape, dtype=g.dtype)
    n, c = x.shape[:2]
    kind = a["pool_type"]
    for pos, window, size in _pool_windows(x.shape, out.shape, a):
        at, key = (Ellipsis, *pos), (Ellipsis, *window)
        gp = g[at]
        w = x[key]
        if w.size == 0:
            continue
        if kind == "max":
            # The gradient goes to the first maximum of the window, as in MXNet.
            flat = np.argmax(w.reshape(n, c, -1), axis=2)
            where = np.unravel_index(flat, w.shape[2:])
            idx = tuple(np.asarray(i) + sl.start for i, sl in zip(where, window, strict=True))
            np.add.at(grad, (np.arange(n)[:, None], np.arange(c)[None, :], *idx), gp)
        else:
            share = gp / size if kind == "avg" else gp
            grad[key] += share.reshape(n, c, *([1] * len(window)))
    return [grad]


register("Pooling", _pool_forward, _pool_backward, _pool_infer)


# ----------------------------------------------------------------------------- FullyConnected
def _fc_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    data, weight = shapes[0], shapes[1]
    nh = int(a["num_hidden"])
    if not data:
        raise OperatorError(f"{name}: data must have at least one dimension, got shape {data}")
    k = int(np.prod(data[1:], dtype=np.int64)) if a["flatten"] else data[-1]
    if weight != (nh, k):
        raise OperatorError(f"{name}: weight of shape {weight} does not fit data of shape {data}: expected {(nh, k)}")
    if not a["no_bias"]:
        if len(shapes) != 3 or shapes[2] not in ((nh,), (nh, 1), (1, nh)):
            raise OperatorError(f"{name}: bias must have shape ({nh},), got {shapes[2] if len(shapes) > 2 else 'none'}")
    elif len(shapes) != 2:
        raise OperatorError(f"{name}: no_bias=True takes no bias (got {len(shapes)} inputs)")
    out = (data[0], nh) if a["flatten"] else (*data[:-1], nh)
    return out, np.result_type(*dtypes)


def _fc_data(x: np.ndarray, a: Attrs) -> np.ndarray:
    return x.reshape(x.shape[0], -1) if a["flatten"] else x.reshape(-1, x.shape[-1])


def _fc_forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
    y = _fc_data(ins[0], a) @ ins[1].T
    if not a["no_bias"]:
        y = y + ins[2].reshape(-1)
    np.copyto(out, y.reshape(out.shape), casting="unsafe")


def _fc_backward(ins: Sequence[np.ndarray], out: np.ndarray, g: np.ndarray, a: Attrs) -> list[np.ndarray | None]:
    x2, w = _fc_data(ins[0], a), ins[1]
    g2 = g.reshape(-1, w.shape[0])
    grads: list[np.ndarray | None] = [(g2 @ w).reshape(ins[0].shape), g2.T @ x2]
    if not a["no_bias"]:
        grads.append(g2.sum(axis=0).reshape(ins[2].shape))
    return grads


register("FullyConnected", _fc_forward, _fc_backward, _fc_infer)


# ----------------------------------------------------------------------------- optimizer updates
#: Update ops: the inputs are ``weight, grad, *states``; ``out`` gets the new weight and the
#: states are updated in place (the NDArray layer pushes them as writes). No gradients.
UpdateRule = Callable[[np.ndarray, np.ndarray, list[np.ndarray], Attrs], np.ndarray]

#: Each update op's number of state inputs (after weight and grad).
UPDATE_STATES: dict[str, int] = {}


def _clip_grad(g: np.ndarray, bound: float) -> np.ndarray:
    """``clip(g, -bound, bound)``; a negative bound (MXNet's default -1) means no clipping."""
    return np.clip(g, -bound, bound) if bound >= 0 else g


def _update_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    expected = 2 + UPDATE_STATES[name]
    if len(shapes) != expected:
        raise OperatorError(f"{name}: takes {expected} arrays (weight, grad and {expected - 2} states), got {len(shapes)}")
    if any(s != shapes[0] for s in shapes):
        raise OperatorError(f"{name}: weight, grad and states must have the same shape, got {' and '.join(map(str, shapes))}")
    return shapes[0], dtypes[0]


def _update_op(name: str, n_states: int, rule: UpdateRule) -> None:
    def forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
        states = [s.astype(np.float64) for s in ins[2:]]
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            w = rule(ins[0].astype(np.float64), ins[1].astype(np.float64), states, a)
        for buf, new in zip(ins[2:], states, strict=True):
            np.copyto(buf, new, casting="unsafe")
        np.copyto(out, w, casting="unsafe")

    UPDATE_STATES[name] = n_states
    register(name, forward, None, _update_infer)


def _sgd(w: np.ndarray, g: np.ndarray, s: list[np.ndarray], a: Attrs) -> np.ndarray:
    return (1 - a["lr"] * a["wd"]) * w - a["lr"] * _clip_grad(a["rescale_grad"] * g, a["clip_gradient"])


def _sgd_mom(w: np.ndarray, g: np.ndarray, s: list[np.ndarray], a: Attrs) -> np.ndarray:
    lr = a["lr"]
    s[0][...] = a["momentum"] * s[0] - lr * a["wd"] * w - lr * _clip_grad(a["rescale_grad"] * g, a["clip_gradient"])
    return w + s[0]


def _nag_mom(w: np.ndarray, g: np.ndarray, s: list[np.ndarray], a: Attrs) -> np.ndarray:
    lr, m = a["lr"], a["momentum"]
    step = lr * (_clip_grad(a["rescale_grad"] * g, a["clip_gradient"]) + a["wd"] * w)
    mom = m * s[0]
    s[0][...] = mom - step
    return w - mom + (m + 1) * (mom - step)


def _signsgd(w: np.ndarray, g: np.ndarray, s: list[np.ndarray], a: Attrs) -> np.ndarray:
    return (1 - a["lr"] * a["wd"]) * w - a["lr"] * np.sign(g)  # clipping and rescaling cannot change a sign


def _signum(w: np.ndarray, g: np.ndarray, s: list[np.ndarray], a: Attrs) -> np.ndarray:
    m = a["momentum"]
    s[0][...] = m * s[0] - (1 - m) * a["wd"] * w - (1 - m) * _clip_grad(a["rescale_grad"] * g, a["clip_gradient"])
    return (1 - a["lr"] * a["wd_lh"]) * w + a["lr"] * np.sign(s[0])


def _adam(w: np.ndarray, g: np.ndarray, s: list[np.ndarray], a: Attrs) -> np.ndarray:
    mean, var = s
    g = _clip_grad(a["rescale_grad"] * g + a["wd"] * w, a["clip_gradient"])
    mean[...] = a["beta1"] * mean + (1 - a["beta1"]) * g
    var[...] = a["beta2"] * var + (1 - a["beta2"]) * g * g
    return w - a["lr"] * mean / (np.sqrt(var) + a["epsilon"])


def _rmsprop(w: np.ndarray, g: np.ndarray, s: list[np.ndarray], a: Attrs) -> np.ndarray:
    (n,) = s
    g = _clip_grad(a["rescale_grad"] * g + a["wd"] * w, a["clip_gradient"])
    n[...] = (1 - a["gamma1"]) * g * g + a["gamma1"] * n
    return _clip_grad(w - a["lr"] * g / np.sqrt(n + a["epsilon"]), a["clip_weights"])


def _rmspropalex(w: np.ndarray, g: np.ndarray, s: list[np.ndarray], a: Attrs) -> np.ndarray:
    n, mean, delta = s
    g = _clip_grad(a["rescale_grad"] * g + a["wd"] * w, a["clip_gradient"])
    gamma1 = a["gamma1"]
    n[...] = (1 - gamma1) * g * g + gamma1 * n
    mean[...] = (1 - gamma1) * g + gamma1 * mean
    delta[...] = a["gamma2"] * delta - a["lr"] * g / np.sqrt(n - mean * mean + a["epsilon"])
    return _clip_grad(w + delta, a["clip_weights"])


def _ftrl(w: np.ndarray, g: np.ndarray, s: list[np.ndarray], a: Attrs) -> np.ndarray:
    z, n = s
    lr, l1 = a["lr"], a["lamda1"]
    g = _clip_grad(a["rescale_grad"] * g, a["clip_gradient"])
    z += g - (np.sqrt(n + g * g) - np.sqrt(n)) * w / lr
    n += g * g
    return (np.sign(z) * l1 - z) / ((a["beta"] + np.sqrt(n)) / lr + a["wd"]) * (np.abs(z) > l1)


def _ftml(w: np.ndarray, g: np.ndarray, s: list[np.ndarray], a: Attrs) -> np.ndarray:
    d, v, z = s
    b1, b2, t = a["beta1"], a["beta2"], a["t"]
    g = _clip_grad(a["rescale_grad"] * g + a["wd"] * w, a["clip_grad"])
    v[...] = b2 * v + (1 - b2) * g * g
    d_t = (1 - b1**t) / a["lr"] * (np.sqrt(v / (1 - b2**t)) + a["epsilon"])
    z[...] = b1 * z + (1 - b1) * g - (d_t - b1 * d) * w
    d[...] = d_t
    return -z / d_t


_update_op("sgd_update", 0, _sgd)
_update_op("sgd_mom_update", 1, _sgd_mom)
_update_op("nag_mom_update", 1, _nag_mom)
_update_op("signsgd_update", 0, _signsgd)
_update_op("signum_update", 1, _signum)
_update_op("adam_update", 2, _adam)
_update_op("rmsprop_update", 1, _rmsprop)
_update_op("rmspropalex_update", 3, _rmspropalex)
_update_op("ftrl_update", 2, _ftrl)
_update_op("ftml_update", 3, _ftml)


# ----------------------------------------------------------------------------- SoftmaxOutput
def _softmax_output_layout(shape: Shape, a: Attrs) -> tuple[Shape, int]:
    """The shape SoftmaxOutput works on and its class axis: axis 1 for ``multi_output``, the last
    axis for ``preserve_shape``, else the data flattened to (batch, classes)."""
    if a["multi_output"]:
        return shape, 1
    if a["preserve_shape"]:
        return shape, len(shape) - 1
    return (shape[0], int(np.prod(shape[1:]))), 1


def _softmax_output_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    data, label = shapes
    if (len(data) < 2 and not a["preserve_shape"]) or len(data) < 1:
        raise OperatorError(f"SoftmaxOutput: data must have at least 2 dimensions, got shape {data}")
    work, ax = _softmax_output_layout(data, a)
    classes = work[ax]
    if int(np.prod(label)) * classes != int(np.prod(data)):
        raise OperatorError(
            f"SoftmaxOutput: label of shape {label} does not fit data of shape {data}: it needs one label per "
            f"position of the data without its class axis ({classes} classes)"
        )
    return data, dtypes[0]


def _softmax_output_forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
    work, ax = _softmax_output_layout(ins[0].shape, a)
    z = ins[0].reshape(work).astype(np.float64)
    np.copyto(out, np.exp(_log_softmax_value(z, ax)).reshape(out.shape), casting="unsafe")


def _softmax_output_backward(ins: Sequence[np.ndarray], out: np.ndarray, g: np.ndarray, a: Attrs) -> list[np.ndarray | None]:
    """MXNet's special gradient, of the cross-entropy loss rather than of the output:
    ``(softmax - one_hot(label)) * grad_scale / normalizer``, zero where the label is ignored."""
    work, ax = _softmax_output_layout(ins[0].shape, a)
    p = np.exp(_log_softmax_value(ins[0].reshape(work).astype(np.float64), ax))
    k = work[ax]
    label_shape = work[:ax] + work[ax + 1 :]
    label = ins[1].reshape(label_shape).astype(np.int64)
    classes = np.arange(k).reshape((1,) * ax + (k,) + (1,) * (len(work) - ax - 1))
    onehot = (np.expand_dims(label, ax) == classes).astype(np.float64)
    alpha = a["smooth_alpha"]
    if alpha:
        onehot = onehot * (1 - alpha) + (1 - onehot) * (alpha / (k - 1))
    grad = p - onehot
    if a["out_grad"]:
        grad = grad * g.reshape(work)
    if a["use_ignore"]:
        keep = ins[1].reshape(label_shape) != a["ignore_label"]
        grad = grad * np.expand_dims(keep, ax)
        valid = int(keep.sum())
    else:
        valid = label.size
    norm = a["normalization"]
    if norm == "valid":
        scale = a["grad_scale"] / max(1, valid)
    else:
        scale = a["grad_scale"] / (work[0] if norm == "batch" else 1)
        if a["multi_output"]:
            scale /= max(1, int(np.prod(work[2:])))
    return [(grad * scale).reshape(ins[0].shape), None]


register("SoftmaxOutput", _softmax_output_forward, _softmax_output_backward, _softmax_output_infer)


# ----------------------------------------------------------------------------- Correlation
def _correlation_geometry(shape: Shape, a: Attrs) -> tuple[int, int, int, int]:
    """(grid radius, grid width, top height, top width), as MXNet's correlation-inl.h computes them."""
    radius = (a["kernel_size"] - 1) // 2
    border = a["max_displacement"] + radius
    hp, wp = shape[2] + 2 * a["pad_size"], shape[3] + 2 * a["pad_size"]
    top_h = -(-(hp - 2 * border) // a["stride1"])
    top_w = -(-(wp - 2 * border) // a["stride1"])
    grid_r = a["max_displacement"] // a["stride2"]
    return grid_r, 2 * grid_r + 1, top_h, top_w


def _correlation_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> tuple[Shape, np.dtype]:
    s1, s2 = shapes
    if len(s1) != 4 or len(s2) != 4:
        raise OperatorError(f"Correlation: data1 and data2 must be 4-D (batch, channel, height, width), got {s1} and {s2}")
    if s1 != s2:
        raise OperatorError(f"Correlation: data1 and data2 must have the same shape, got {s1} and {s2}")
    k = a["kernel_size"]
    if k < 1 or k % 2 == 0:
        raise OperatorError(f"Correlation: kernel size should be an odd number, got kernel_size={k} (data shape {s1})")
    if a["stride1"] < 1 or a["stride2"] < 1 or a["max_displacement"] < 0 or a["pad_size"] < 0:
        raise OperatorError(
            f"Correlation: strides must be positive and max_displacement, pad_size non-negative, got {a} (data shape {s1})"
        )
    _, gw, th, tw = _correlation_geometry(s1, a)
    if th < 1 or tw < 1:
        raise OperatorError(
            f"Correlation cannot be done with these settings: the neighborhood (max_displacement="
            f"{a['max_displacement']}) and kernel (kernel_size={k}) do not fit in data of shape {s1} (pad_size={a['pad_size']})"
        )
    return (s1[0], gw * gw, th, tw), np.result_type(*dtypes)


def _correlation_forward(ins: Sequence[np.ndarray], out: np.ndarray, a: Attrs) -> None:
    """out[n, c, i, j]: the mean over a kernel window at (i*stride1 + max_displacement, ...) and the
    channels of data1 times (or minus, in absolute value) data2 displaced by channel c's offset."""
    k, md, s1, s2, pad = a["kernel_size"], a["max_displacement"], a["stride1"], a["stride2"], a["pad_size"]
    grid_r, gw, th, tw = _correlation_geometry(ins[0].shape, a)
    spatial = ((0, 0), (0, 0), (pad, pad + k + s1), (pad, pad + k + s1))  # extra zeros past the end: never read by MXNet
    x1 = np.pad(ins[0].astype(np.float64), spatial)
    x2 = np.pad(ins[1].astype(np.float64), ((0, 0), (0, 0), (pad + md, pad + md + k + s1), (pad + md, pad + md + k + s1)))
    hp, wp = x1.shape[2], x1.shape[3]
    n_elems = k * k * ins[0].shape[1]
    for tc in range(gw * gw):
        dy, dx = (tc // gw - grid_r) * s2, (tc % gw - grid_r) * s2
        shifted = x2[:, :, md + dy : md + dy + hp, md + dx : md + dx + wp]
        pair = x1 * shifted if a["is_multiply"] else np.abs(x1 - shifted)
        m = pair.sum(axis=1)
        acc = np.zeros((ins[0].shape[0], th, tw))
        for h in range(k):
            for w in range(k):
                acc += m[:, md + h : md + h + s1 * (th - 1) + 1 : s1, md + w : md + w + s1 * (tw - 1) + 1 : s1]
        out[:, tc] = acc / n_elems


register("Correlation", _correlation_forward, None, _correlation_infer)


# ----------------------------------------------------------------------------- BatchNorm
def _bn_axes(x: np.ndarray, axis: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The axes reduced over (all but ``axis``) and the shape a per-channel vector broadcasts as."""
    reduce = tuple(i for i in range(x.ndim) if i != axis)
    expand = tuple(n if i == axis else 1 for i, n in enumerate(x.shape))
    return reduce, expand


def _bn_infer(name: str, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], a: Attrs) -> list[tuple[Shape, np.dtype]]:
    if len(shapes) != 5:
        raise OperatorError(f"{name}: takes data, gamma, beta, moving_mean and moving_var, got {len(shapes)} arrays")
    data = shapes[0]
    if len(data) < 1:
        raise OperatorError(f"{name}: data must have at least 1 dimension, got shape {data}")
    axis = _one_axis(name, data, a["axis"])
    channels = (data[axis],)
    if any(s != channels for s in shapes[1:]):
        raise OperatorError(
            f"{name}: gamma, beta, moving_mean and moving_var must have shape {channels} (data {data}, axis {axis}), "
            f"got {' and '.join(map(str, shapes[1:]))}"
        )
    return [(data, dtypes[0]), (channels, dtypes[0]), (channels, dtypes[0])]


def _bn_stats(ins: Sequence[np.ndarray], a: Attrs) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, tuple[int, ...]]:
    """(x in float64, mean, inverse std, axis, broadcast shape): batch statistics when training, else the moving ones."""
    x = ins[0].astype(np.float64)
    axis = a["axis"] % x.ndim
    reduce, expand = _bn_axes(x, axis)
    if a["training"]:
        mean = x.mean(axis=reduce)
        var = np.square(x - mean.reshape(expand)).mean(axis=reduce)
    else:
        mean, var = ins[3].astype(np.float64), ins[4].astype(np.float64)
    return x, mean, 1.0 / np.sqrt(var + a["eps"]), axis, expand


def _bn_forward(ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], a: Attrs) -> None:
    x, mean, invstd, _, expand = _bn_stats(ins, a)
    gamma = np.ones_like(mean) if a["fix_gamma"] else ins[1].astype(np.float64)
    y = (x - mean.reshape(expand)) * (invstd * gamma).reshape(expand) + ins[2].astype(np.float64).reshape(expand)
    np.copyto(outs[0], y, casting="unsafe")
    np.copyto(outs[1], mean, casting="unsafe")
    # BatchNorm's third output is the inverse std; SyncBatchNorm's is the variance.
    np.copyto(outs[2], 1.0 / np.square(invstd) - a["eps"] if a.get("output_var") else invstd, casting="unsafe")
    if a["training"]:  # the moving statistics (inputs 3 and 4) are updated in place, as MXNet's aux states
        m = a["momentum"]
        var = 1.0 / np.square(invstd) - a["eps"]
        np.copyto(ins[3], ins[3] * m + mean * (1 - m), casting="unsafe")
        np.copyto(ins[4], ins[4] * m + var * (1 - m), casting="unsafe")


def _bn_backward(
    ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], grads: Sequence[np.ndarray], a: Attrs
) -> list[np.ndarray | None]:
    """Gradients of data, gamma (zero with ``fix_gamma``) and beta; the mean and std outputs pass none back, as in MXNet."""
    x, mean, invstd, axis, expand = _bn_stats(ins, a)  # recomputed from data: the same batch as the forward
    reduce = tuple(i for i in range(x.ndim) if i != axis)
    g = grads[0].astype(np.float64)
    gamma = np.ones_like(mean) if a["fix_gamma"] else ins[1].astype(np.float64)
    xhat = (x - mean.reshape(expand)) * invstd.reshape(expand)
    dgamma = np.zeros_like(mean) if a["fix_gamma"] else (g * xhat).sum(axis=reduce)
    dbeta = g.sum(axis=reduce)
    dxhat = g * gamma.reshape(expand)
    if a["training"]:
        m = x.size // x.shape[axis]
        dx = (invstd.reshape(expand) / m) * (
            m * dxhat - dxhat.sum(axis=reduce).reshape(expand) - xhat * (dxhat * xhat).sum(axis=reduce).reshape(expand)
        )
    else:
        dx = dxhat * invstd.reshape(expand)
    return [dx, dgamma, dbeta, None, None]


register_multi("BatchNorm", _bn_forward, _bn_backward, _bn_infer)
register_multi("_contrib_SyncBatchNorm", _bn_forward, _bn_backward, _bn_infer)
