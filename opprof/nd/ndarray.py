"""NDArray: a NumPy buffer plus an engine var; every operator on it is one engine push.

Shapes and dtypes are worked out when an operator is *pushed*, so a bad shape raises at the line
that caused it, naming the operator; the arithmetic itself runs later on an engine thread, and
``asnumpy()``/``wait_to_read()`` wait for it. This is MXNet's imperative model, with MXNet's
operator names (``_plus_scalar``, ``elemwise_add``, ``broadcast_mul``...), so traces read alike.
"""

from __future__ import annotations

import builtins
import numbers
from collections.abc import Callable, Sequence
from functools import partial
from types import SimpleNamespace
from typing import Any, Literal

import numpy as np

from ..engine import Var, get_engine
from . import ops as _ops
from . import seeds
from . import tape as _tape
from .context import Context, cpu
from .ops import OperatorError

#: The operator-named binary functions (``elemwise_add``...), made below from the registry.
_BINARY_NAMES_PUBLIC = [
    *(f"elemwise_{s}" for s in ("add", "sub", "mul", "div")),
    *(f"broadcast_{s}" for s in ("add", "sub", "mul", "div", "power", "maximum", "minimum")),
    *(f"broadcast_{s}" for s in ("equal", "not_equal", "greater", "greater_equal", "lesser", "lesser_equal")),
]

__all__ = [
    "NDArray",
    "OperatorError",
    "array",
    "empty",
    "zeros",
    "ones",
    "full",
    "arange",
    "zeros_like",
    "ones_like",
    "waitall",
    "dot",
    "transpose",
    "reshape",
    "Reshape",
    "Activation",
    "equal",
    "not_equal",
    "greater",
    "greater_equal",
    "lesser",
    "lesser_equal",
    *_BINARY_NAMES_PUBLIC,
    "sum",
    "mean",
    "add_n",
    "ElementWiseSum",
    "maximum",
    "power",
    "minimum",
    "abs",
    "exp",
    "log",
    "sqrt",
    "tanh",
    "sigmoid",
    "relu",
    "negative",
    "floor",
    "ceil",
    "round",
    "rint",
    "trunc",
    "fix",
    "square",
    "clip",
    "max",
    "min",
    "norm",
    "argmax",
    "argmin",
    "expand_dims",
    "flatten",
    "Flatten",
    "squeeze",
    "broadcast_to",
    "broadcast_like",
    "reshape_like",
    "flip",
    "reverse",
    "moveaxis",
    "swapaxes",
    "SwapAxis",
    "take",
    "split",
    "SliceChannel",
    "concat",
    "Concat",
    "concatenate",
    "stack",
    "one_hot",
    "onehot_encode",
    "eye",
    "linspace",
    "from_numpy",
    "topk",
    "sort",
    "argsort",
    "softmax",
    "log_softmax",
    "softmin",
    "Dropout",
    "slice_like",
    "pick",
    "choose_element_0index",
    "batch_take",
    "fill_element_0index",
    "crop",
    "gather_nd",
    "sample_normal",
    "_internal",
    "Pooling",
    "SoftmaxOutput",
    "Correlation",
    "BatchNorm",
    "FullyConnected",
    "sgd_update",
    "sgd_mom_update",
    "nag_mom_update",
    "signsgd_update",
    "signum_update",
    "adam_update",
    "rmsprop_update",
    "rmspropalex_update",
    "ftrl_update",
    "ftml_update",
]

#: The builtin ``slice``, under the name MXNet's ndarray module keeps it by (its tests import it).
py_slice = slice

_DEFAULT_DTYPE = np.dtype(np.float32)
_SCALAR_TYPES = (numbers.Number, np.generic)
# Python's own scalars, told apart by one set lookup: ``isinstance(x, numbers.Number)`` goes
# through the ABC machinery (0.4 µs a call on the project's machine, on every ``a + 1``).
_PLAIN_SCALARS = frozenset({int, float})


#: Called with (storage, var) for every NDArray made, while a profile records memory; None else
#: (one global read per array: nothing when off).
_on_array: Callable[[np.ndarray, Var], None] | None = None


def set_array_hook(hook: Callable[[np.ndarray, Var], None] | None) -> Callable[[np.ndarray, Var], None] | None:
    """Make ``hook`` see every NDArray made from now on (None: none); returns the one it replaces."""
    global _on_array
    previous, _on_array = _on_array, hook
    return previous


class NDArray:
    """An n-dimensional array whose operators run asynchronously on the engine."""

    __slots__ = ("__weakref__", "_data", "_fresh_grad", "_grad", "_grad_req", "_node", "_var")
    # Make NumPy defer to our reflected operators (np.float32(2) * x -> x.__rmul__).
    __array_priority__ = 1000.0

    def __init__(self, data: np.ndarray, var: Var | None = None) -> None:
        self._data = data
        self._var = var if var is not None else Var()
        self._grad: NDArray | None = None
        self._grad_req = "null"
        self._node: tuple[Any, int] | None = None
        # Whether a backward pass wrote this leaf's gradient since it was last cleared (MXNet's
        # flag: a trainer reads it to skip parameters the last pass did not reach).
        self._fresh_grad = False
        if _on_array is not None:  # a profile records memory (opprof.profiler.memory)
            _on_array(data, self._var)

    # ------------------------------------------------------------------ metadata (no waiting)
    @property
    def shape(self) -> tuple[int, ...]:
        return self._data.shape

    @property
    def dtype(self) -> type:
        return self._data.dtype.type

    @property
    def size(self) -> int:
        return self._data.size

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def context(self) -> Context:
        return cpu()

    ctx = context

    @property
    def var(self) -> Var:
        """The engine var that orders every op touching this array's data."""
        return self._var

    @property
    def grad(self) -> NDArray | None:
        return self._grad

    @property
    def T(self) -> NDArray:
        return transpose(self)

    def __len__(self) -> int:
        if not self._data.ndim:
            raise TypeError("len() of a 0-d NDArray")
        return self._data.shape[0]

    # ------------------------------------------------------------------ synchronisation
    def wait_to_read(self) -> None:
        """Block until every pending write to this array is done; raise its error if one failed."""
        get_engine().wait_for_var(self._var)

    def asnumpy(self) -> np.ndarray:
        """A NumPy copy of the value, after the ops that write it have run."""
        self.wait_to_read()
        return self._data.copy()

    def asscalar(self) -> Any:
        if self._data.size != 1:
            raise ValueError(f"asscalar needs an array of size 1, this one has shape {self.shape}")
        return self.asnumpy().reshape(())[()]

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        a = self.asnumpy()
        return a if dtype is None else a.astype(dtype)

    def __repr__(self) -> str:
        try:
            body = str(self.asnumpy())
        except Exception as e:
            body = f"<failed: {type(e).__name__}: {e}>"
        return f"\n{body}\n<NDArray {'x'.join(map(str, self.shape))} @cpu(0)>"

    def __bool__(self) -> bool:
        if self._data.size == 0:
            return False  # as MXNet (and Python's empty containers)
        if self._data.size != 1:
            raise ValueError("the truth value of an NDArray with more than one element is ambiguous")
        return bool(self.asnumpy())

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # The value, once its pending writes are done (an error among them is raised here), and
        # a fresh var: the engine state of this process means nothing in another, and a copied
        # var that is mid-write would block every reader (and every waitall) forever.
        return (array, (self.asnumpy(), None, self._data.dtype))

    def __float__(self) -> float:
        return float(self.asscalar())

    def __int__(self) -> int:
        return int(self.asscalar())

    # ------------------------------------------------------------------ copies, views, grads
    def copy(self) -> NDArray:
        return invoke(_COPY, (self,), {})

    def copyto(self, other: NDArray | Context) -> NDArray:
        if isinstance(other, Context):
            return self.copy()
        if other.shape != self.shape:
            raise OperatorError(f"copyto: shape {self.shape} does not match target shape {other.shape}")
        return invoke(_COPYTO, (self,), {}, out=other)

    def as_in_context(self, ctx: Context) -> NDArray:
        return self

    def astype(self, dtype: Any, copy: bool = True) -> NDArray:
        dt = _numeric(dtype)
        if dt == self._data.dtype and not copy:
            return self
        out = NDArray(np.empty(self.shape, dt))
        return invoke(_COPY, (self,), {}, out=out, allow_new_dtype=True)

    def detach(self) -> NDArray:
        """The same data and var, cut out of the autograd graph."""
        return NDArray(self._data, self._var)

    def attach_grad(self, grad_req: str = "write", stype: Any = None) -> None:
        """Make this array a leaf whose gradient ``backward`` writes into ``self.grad``."""
        _tape.check_req(grad_req)
        self._grad = zeros(self.shape, dtype=self._data.dtype)
        self._grad_req = grad_req
        self._node = None

    def backward(self, out_grad: NDArray | None = None, retain_graph: bool = False, train_mode: bool = True) -> None:
        backward([self], [out_grad], retain_graph=retain_graph, train_mode=train_mode)

    def _accumulate_grad(self, g: NDArray) -> None:
        assert self._grad is not None
        self._fresh_grad = True
        if self._grad_req == "add":
            invoke(_ELEMWISE_ADD, (self._grad, g), {}, out=self._grad)
        else:
            invoke(_COPYTO, (g,), {}, out=self._grad)

    # ------------------------------------------------------------------ indexing
    def __getitem__(self, key: Any) -> NDArray:
        key = _basic_key(key)
        if key == (slice(None),) or key == ():
            return self
        if _tape.is_recording() and _tape.requires_grad(self):
            return invoke(_SLICE, (self,), {"key": key})
        view = self._view(key)
        # MXNet shares memory only where the result is contiguous (``a[1:3]``, ``a[2]``); a slice
        # that is not (``a[:, 1:3]``, ``a[2, :, 1]``, a step) is its ``slice`` op's copy: a write to it leaves
        # the array alone, and it is memory of its own. (NumPy's C-contiguity is MXNet's rule:
        # ``_basic_indexing_slice_is_contiguous``, tested against it.)
        if view._data.flags.c_contiguous:
            return view
        return invoke(_SLICE, (self,), {"key": key})

    @staticmethod
    def _basic_indexing_slice_is_contiguous(slc_key: Sequence[slice], shape: Sequence[int]) -> bool:
        """Whether basic indexing with ``slc_key`` (one slice per axis of ``shape``) gives a contiguous array.

        MXNet's rule: from the last axis back, once an axis is sliced to a proper subset, every
        earlier axis must keep at most one element; a step other than 1 over several elements is
        never contiguous. Selecting 0 or 1 element in all is always contiguous.
        """
        assert len(slc_key) == len(shape)
        lengths = [len(range(*slc.indices(n))) for slc, n in zip(slc_key, shape, strict=True)]
        if int(np.prod(lengths)) in (0, 1):
            return True
        is_subset = False
        for slc, n, count in zip(reversed(slc_key), reversed(shape), reversed(lengths), strict=True):
            step = slc.indices(n)[2]
            if count == 0:
                return True
            if count > 1 and step != 1:
                return False
            if is_subset:
                if count > 1:
                    return False
            elif count < n:
                is_subset = True
        return True

    def _view(self, key: tuple[Any, ...]) -> NDArray:
        try:
            view = self._data[key if Ellipsis in key else (*key, Ellipsis)]  # never a NumPy scalar
        except IndexError as e:
            raise IndexError(f"index {key!r} is invalid for an NDArray of shape {self.shape}: {e}") from None
        # A basic slice is a view on the same buffer, so it shares the var (as in MXNet).
        return NDArray(view, self._var)

    def __setitem__(self, key: Any, value: Any) -> None:
        key = _basic_key(key)
        recording = _tape.state.recording
        if recording and _tape.requires_grad(self):
            raise OperatorError(
                "in-place operations (+=, -=, x[:]=, x[i]=, ...) on an array in the autograd graph "
                "are not supported while recording"
            )
        full = key == (slice(None),) or key == ()
        target = self if full else self._view(key)
        if isinstance(value, NDArray) and recording and _tape.requires_grad(value):
            # ``x[0:2] = y`` with y in the graph: x becomes the output of the assignment, and y's
            # gradient is x's gradient at the slice (before, y silently got none).
            self._assign(target, value, full)
            _tape.record_node("_slice_assign", [value], [self], partial(_push_assign_backward, key, value))
            return
        if isinstance(value, NDArray):
            if value._var is target._var and value._data is target._data:
                return  # x[:] = x (what `dst[:] += src` ends with): nothing to copy
            self._assign(target, value, full)
        elif isinstance(value, _SCALAR_TYPES):
            invoke(_SET_VALUE if full else _SLICE_ASSIGN_SCALAR, (), {"value": value}, out=target, check_shape=False)
        else:
            self.__setitem__(key, array(np.asarray(value), dtype=self._data.dtype))

    @staticmethod
    def _assign(target: NDArray, value: NDArray, full: bool) -> None:
        if value.shape != target.shape:
            try:
                np.broadcast_shapes(value.shape, target.shape)
            except ValueError:
                raise OperatorError(f"cannot assign an array of shape {value.shape} to a slice of shape {target.shape}") from None
        invoke(_COPYTO if full else _SLICE_ASSIGN, (value,), {}, out=target, check_shape=False)

    # ------------------------------------------------------------------ arithmetic
    def __add__(self, other: Any) -> NDArray:
        if type(other) in _PLAIN_SCALARS:  # the common case: no _arith frame, no ABC isinstance
            return _scalar_op("_plus_scalar", self, other)
        return _arith(self, other, "add", "_plus_scalar", "_plus_scalar")

    def __radd__(self, other: Any) -> NDArray:
        return _arith(self, other, "add", "_plus_scalar", "_plus_scalar", reflected=True)

    def __sub__(self, other: Any) -> NDArray:
        if type(other) in _PLAIN_SCALARS:  # the common case: no _arith frame, no ABC isinstance
            return _scalar_op("_minus_scalar", self, other)
        return _arith(self, other, "sub", "_minus_scalar", "_rminus_scalar")

    def __rsub__(self, other: Any) -> NDArray:
        return _arith(self, other, "sub", "_minus_scalar", "_rminus_scalar", reflected=True)

    def __mul__(self, other: Any) -> NDArray:
        if type(other) in _PLAIN_SCALARS:  # the common case: no _arith frame, no ABC isinstance
            return _scalar_op("_mul_scalar", self, other)
        return _arith(self, other, "mul", "_mul_scalar", "_mul_scalar")

    def __rmul__(self, other: Any) -> NDArray:
        return _arith(self, other, "mul", "_mul_scalar", "_mul_scalar", reflected=True)

    def __truediv__(self, other: Any) -> NDArray:
        if type(other) in _PLAIN_SCALARS:  # the common case: no _arith frame, no ABC isinstance
            return _scalar_op("_div_scalar", self, other)
        return _arith(self, other, "div", "_div_scalar", "_rdiv_scalar")

    def __rtruediv__(self, other: Any) -> NDArray:
        return _arith(self, other, "div", "_div_scalar", "_rdiv_scalar", reflected=True)

    def __pow__(self, other: Any) -> NDArray:
        return _arith(self, other, "power", "_power_scalar", "_rpower_scalar")

    def __rpow__(self, other: Any) -> NDArray:
        return _arith(self, other, "power", "_power_scalar", "_rpower_scalar", reflected=True)

    def __iadd__(self, other: Any) -> NDArray:
        return _arith(self, other, "add", "_plus_scalar", "_plus_scalar", out=self)

    def __isub__(self, other: Any) -> NDArray:
        return _arith(self, other, "sub", "_minus_scalar", "_rminus_scalar", out=self)

    def __imul__(self, other: Any) -> NDArray:
        return _arith(self, other, "mul", "_mul_scalar", "_mul_scalar", out=self)

    def __itruediv__(self, other: Any) -> NDArray:
        return _arith(self, other, "div", "_div_scalar", "_rdiv_scalar", out=self)

    def __neg__(self) -> NDArray:
        return invoke(_ops.OPS["negative"], (self,), {})

    def __pos__(self) -> NDArray:
        return self

    def __abs__(self) -> NDArray:
        return invoke(_ops.OPS["abs"], (self,), {})

    # Comparisons are element-wise operators, as in MXNet (``x == y`` is an array of 0s and 1s):
    # an NDArray is hashed by identity, so it still works as a dict key or in a set.
    def __eq__(self, other: Any) -> NDArray:  # type: ignore[override]
        return _compare(self, other, "equal", "equal")

    def __ne__(self, other: Any) -> NDArray:  # type: ignore[override]
        return _compare(self, other, "not_equal", "not_equal")

    def __gt__(self, other: Any) -> NDArray:
        return _compare(self, other, "greater", "lesser")

    def __ge__(self, other: Any) -> NDArray:
        return _compare(self, other, "greater_equal", "lesser_equal")

    def __lt__(self, other: Any) -> NDArray:
        return _compare(self, other, "lesser", "greater")

    def __le__(self, other: Any) -> NDArray:
        return _compare(self, other, "lesser_equal", "greater_equal")

    __hash__ = object.__hash__

    # ------------------------------------------------------------------ methods mirroring nd.*
    def reshape(self, *shape: Any, **kwargs: Any) -> NDArray:
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        if "shape" in kwargs:
            shape = tuple(kwargs.pop("shape"))
        reverse = bool(kwargs.pop("reverse", False))
        if kwargs:
            raise TypeError(f"reshape got unexpected arguments {sorted(kwargs)}")
        # MXNet's method is a view (NDArray::Reshape shares the chunk and its var): writes to either
        # show in the other, and no op runs nor memory is allocated; ``nd.reshape`` is the copying op.
        # While recording it is that op, so gradients flow (as ``_reshaped`` does).
        if _tape.is_recording() and _tape.requires_grad(self):
            return reshape(self, shape, reverse=reverse)
        view = self._view_as(_ops.reshape_target(self.shape, [int(n) for n in shape], reverse))
        return view if view is not None else reshape(self, shape, reverse=reverse)  # a strided array: the op copies

    def transpose(self, axes: Sequence[int] | None = None) -> NDArray:
        return transpose(self, axes)

    def sum(self, axis: int | Sequence[int] | None = None, keepdims: bool = False, exclude: bool = False) -> NDArray:
        return sum(self, axis=axis, keepdims=keepdims, exclude=exclude)

    def mean(self, axis: int | Sequence[int] | None = None, keepdims: bool = False, exclude: bool = False) -> NDArray:
        return mean(self, axis=axis, keepdims=keepdims, exclude=exclude)

    def dot(self, other: NDArray, transpose_a: bool = False, transpose_b: bool = False) -> NDArray:
        return dot(self, other, transpose_a, transpose_b)

    def abs(self) -> NDArray:
        return abs(self)

    def exp(self) -> NDArray:
        return exp(self)

    def log(self) -> NDArray:
        return log(self)

    def sqrt(self) -> NDArray:
        return sqrt(self)

    def tanh(self) -> NDArray:
        return tanh(self)

    def sigmoid(self) -> NDArray:
        return sigmoid(self)

    def relu(self) -> NDArray:
        return relu(self)

    def floor(self) -> NDArray:
        return floor(self)

    def ceil(self) -> NDArray:
        return ceil(self)

    def round(self) -> NDArray:
        return round(self)

    def rint(self) -> NDArray:
        return rint(self)

    def trunc(self) -> NDArray:
        return trunc(self)

    def fix(self) -> NDArray:
        return fix(self)

    def square(self) -> NDArray:
        return square(self)

    def clip(self, a_min: float, a_max: float) -> NDArray:
        return clip(self, a_min, a_max)

    def max(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> NDArray:
        return max(self, axis=axis, keepdims=keepdims)

    def min(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> NDArray:
        return min(self, axis=axis, keepdims=keepdims)

    def norm(self, ord: int = 2, axis: int | Sequence[int] | None = None, keepdims: bool = False, **kwargs: Any) -> NDArray:
        return norm(self, ord=ord, axis=axis, keepdims=keepdims, **kwargs)

    def argmax(self, axis: int | None = None, keepdims: bool = False) -> NDArray:
        return argmax(self, axis=axis, keepdims=keepdims)

    def argmin(self, axis: int | None = None, keepdims: bool = False) -> NDArray:
        return argmin(self, axis=axis, keepdims=keepdims)

    # Shape changes. ``inplace=True`` gives a view on the same buffer and var (MXNet's reshape view):
    # writes to either show in the other. While recording it is the copying op, so gradients flow.
    def _reshaped(self, name: str, rule: Any, attrs: dict[str, Any], inplace: bool) -> NDArray:
        if inplace and not (_tape.is_recording() and _tape.requires_grad(self)):
            view = self._view_as(rule(name, self.shape, attrs))
            if view is None:
                raise OperatorError(f"{name}: inplace=True needs a contiguous array, this {self.shape} view is not")
            return view
        return invoke(_ops.OPS[name], (self,), attrs)

    def _view_as(self, shape: tuple[int, ...]) -> NDArray | None:
        """This array's data in ``shape``, on the same buffer and var; None where NumPy would have
        to copy (a strided array). ``data.reshape``, not setting ``.shape`` (deprecated in NumPy
        2.5): a copy it made shares no memory with the data (an empty array shares none, and stays a view)."""
        view = self._data.reshape(shape)
        if view.size and not np.may_share_memory(view, self._data):
            return None
        return NDArray(view, self._var)

    def expand_dims(self, axis: int, inplace: bool = False) -> NDArray:
        return self._reshaped("expand_dims", _ops.expand_dims_shape, {"axis": int(axis)}, inplace)

    def flatten(self, inplace: bool = False) -> NDArray:
        return self._reshaped("Flatten", _ops.flatten_shape, {}, inplace)

    def squeeze(self, axis: int | Sequence[int] | None = None, inplace: bool = False) -> NDArray:
        return self._reshaped("squeeze", _ops.squeeze_shape, {"axis": _axis(axis)}, inplace)

    def broadcast_to(self, shape: Any) -> NDArray:
        return broadcast_to(self, shape)

    def broadcast_like(self, other: NDArray, lhs_axes: Any = None, rhs_axes: Any = None) -> NDArray:
        return broadcast_like(self, other, lhs_axes, rhs_axes)

    def reshape_like(self, other: NDArray) -> NDArray:
        return reshape_like(self, other)

    def flip(self, axis: int | Sequence[int]) -> NDArray:
        return flip(self, axis)

    def swapaxes(self, dim1: int = 0, dim2: int = 0) -> NDArray:
        return swapaxes(self, dim1, dim2)

    def take(self, indices: Any, axis: int = 0, mode: str = "clip") -> NDArray:
        return take(self, indices, axis, mode)

    def split(self, num_outputs: int, axis: int = 1, squeeze_axis: bool = False) -> Any:
        return split(self, num_outputs, axis, squeeze_axis)

    def one_hot(self, depth: int, on_value: float = 1.0, off_value: float = 0.0, dtype: Any = "float32") -> NDArray:
        return one_hot(self, depth, on_value, off_value, dtype)

    def topk(
        self, axis: int | None = -1, k: int = 1, ret_typ: str = "indices", is_ascend: bool = False, dtype: Any = "float32"
    ) -> Any:
        return topk(self, axis, k, ret_typ, is_ascend, dtype)

    def sort(self, axis: int | None = -1, is_ascend: bool = True) -> NDArray:
        return sort(self, axis, is_ascend)

    def argsort(self, axis: int | None = -1, is_ascend: bool = True, dtype: Any = "float32") -> NDArray:
        return argsort(self, axis, is_ascend, dtype)

    def softmax(self, axis: int = -1, temperature: float | None = None, dtype: Any = None) -> NDArray:
        return softmax(self, axis, temperature, dtype)

    def log_softmax(self, axis: int = -1, temperature: float | None = None, dtype: Any = None) -> NDArray:
        return log_softmax(self, axis, temperature, dtype)


# ---------------------------------------------------------------------------- op invocation
def invoke(
    op: _ops.OpDef,
    inputs: Sequence[NDArray],
    attrs: dict[str, Any],
    out: NDArray | None = None,
    *,
    check_shape: bool = True,
    allow_new_dtype: bool = False,
) -> NDArray:
    """Infer the output, allocate it, push ``op`` to the engine and record it for autograd."""
    if len(inputs) == 1:  # most ops: no lists to build, and shape rule "same as the input" read off it
        data = inputs[0]._data
        datas = [data]
        if op.infer is _same_shape:
            shape, dtype = data.shape, data.dtype
        else:
            shape, dtype = op.infer(op.name, [data.shape], [data.dtype], attrs)
    else:
        datas = [x._data for x in inputs]
        shape, dtype = op.infer(op.name, [d.shape for d in datas], [d.dtype for d in datas], attrs)
    if out is None:
        out = NDArray(np.empty(shape, dtype))
    else:
        if check_shape and out._data.shape != shape:
            raise OperatorError(f"{op.name}: result shape {shape} does not fit the output of shape {out.shape}")
        if _tape.state.recording and _tape.requires_grad(out):
            raise OperatorError(
                f"{op.name}: in-place operations (+=, -=, x[:]=, ...) on an array in the autograd "
                "graph are not supported while recording"
            )
    ovar = out._var
    if len(inputs) == 1:
        var = inputs[0]._var
        reads: tuple[Var, ...] = () if var is ovar else (var,)
    else:  # distinct, in order, without the output's (push_op's contract)
        reads = tuple(dict.fromkeys(x._var for x in inputs if x._var is not ovar))
    get_engine().push_op(partial(op.forward, datas, out._data, attrs), reads, (ovar,), op.name)
    if _tape_state.recording and op.backward is not None and inputs:
        _tape.record_node(op.name, inputs, (out,), partial(_push_backward, op, tuple(inputs), out, attrs))
    return out


def _scalar_op(name: str, x: NDArray, scalar: Any) -> NDArray:
    """``x <op> scalar`` (``_plus_scalar``...): :func:`invoke` without its general cases.

    A scalar op's result has its input's shape and dtype (``same_shape``), and writes a fresh
    array, so nothing is inferred or checked: ``a + 1`` costs 0.4 µs less (of 4.8).
    """
    op = _OPS[name]
    if op.infer is not _same_shape:  # re-registered with another rule
        return invoke(op, (x,), {"scalar": scalar})
    data = x._data
    dtype = data.dtype
    buf = np.empty(data.shape, dtype)
    out = NDArray(buf)
    attrs = {"scalar": scalar}
    ufunc = op.scalar_ufunc
    if ufunc is None:
        fn = partial(op.forward, [data], buf, attrs)
    elif dtype.kind == "f":
        # A float array with a Python int or float: NumPy's result has the array's dtype, so there
        # is no cast to allow, and ``out`` passed by position costs 0.2 µs less than by keyword
        # with ``casting`` (0.69 against 0.89 µs at 10x10).
        fn = partial(ufunc, scalar, data, buf) if op.scalar_first else partial(ufunc, data, scalar, buf)
    elif op.scalar_first:
        fn = partial(ufunc, scalar, data, out=buf, casting="unsafe")
    else:
        fn = partial(ufunc, data, scalar, out=buf, casting="unsafe")
    get_engine().push_op(fn, (x._var,), (out._var,), name, ufunc is not None)
    if _tape_state.recording and op.backward is not None:
        _tape.record_node(name, (x,), (out,), partial(_push_backward, op, (x,), out, attrs))
    return out


def _push_backward(
    op: _ops.OpDef, inputs: tuple[NDArray, ...], out: NDArray, attrs: dict[str, Any], ograds: list[NDArray]
) -> list[NDArray | None]:
    """Push ``_backward_<op>``: one engine op computing the gradient of every input that needs it."""
    backward = op.backward
    assert backward is not None
    g = ograds[0]
    in_datas, out_data, g_data = [x._data for x in inputs], out._data, g._data
    return _push_gradients(op.name, inputs, [out._var, g._var], lambda: backward(in_datas, out_data, g_data, attrs))


def _push_gradients(
    name: str, inputs: Sequence[NDArray], also_reads: list[Var], compute: Callable[[], Sequence[Any]]
) -> list[NDArray | None]:
    """One engine op, ``_backward_<name>``: ``compute()`` gives one gradient per input (or None),
    written into a fresh array for each input that needs one; inputs that get none get zeros."""
    grads = [NDArray(np.empty(x.shape, x._data.dtype)) if _tape.requires_grad(x) else None for x in inputs]
    bufs = [gr._data if gr is not None else None for gr in grads]

    def run() -> None:
        for buf, res in zip(bufs, compute(), strict=True):
            if buf is not None:  # an input the op gives no gradient (a label, an index) gets zeros
                np.copyto(buf, 0 if res is None else res, casting="unsafe")

    reads = [x._var for x in inputs] + also_reads
    get_engine().push(run, reads, [gr._var for gr in grads if gr is not None], "_backward_" + name.lstrip("_"))
    return grads


def invoke_multi(op: _ops.MultiOpDef, inputs: Sequence[NDArray], attrs: dict[str, Any]) -> list[NDArray]:
    """Push ``op`` once, writing every one of its outputs (and record one node with all of them)."""
    return invoke_multi_mutating(op, inputs, attrs, mutated=())


def _push_multi_backward(
    op: _ops.MultiOpDef, inputs: tuple[NDArray, ...], outs: tuple[NDArray, ...], attrs: dict[str, Any], ograds: list[NDArray]
) -> list[NDArray | None]:
    """Push ``_backward_<op>`` of a multi-output op: one engine op reading every output's gradient."""
    backward = op.backward
    assert backward is not None
    in_datas, out_datas, g_datas = [x._data for x in inputs], [o._data for o in outs], [g._data for g in ograds]
    also_reads = [o._var for o in outs] + [g._var for g in ograds]
    return _push_gradients(op.name, inputs, also_reads, lambda: backward(in_datas, out_datas, g_datas, attrs))


def _push_assign_backward(key: tuple[Any, ...], value: NDArray, ograds: list[NDArray]) -> list[NDArray | None]:
    """The gradient of ``x[key] = value`` for ``value``: x's gradient at the slice, summed to value's shape."""
    g = ograds[0]
    grad = NDArray(np.empty(value.shape, value._data.dtype))
    index = key if Ellipsis in key else (*key, Ellipsis)
    g_data, out = g._data, grad._data

    def run() -> None:
        np.copyto(out, _ops.unbroadcast(g_data[index], out.shape), casting="unsafe")

    get_engine().push(run, [g._var], [grad._var], "_backward__slice_assign")
    return [grad]


def _sum_grads(grads: list[NDArray]) -> NDArray | None:
    if not grads:
        return None
    if len(grads) == 1:
        return grads[0]
    return add_n(*grads)


def _basic_key(key: Any) -> tuple[Any, ...]:
    if not isinstance(key, tuple):
        key = (key,)
    for k in key:
        if not (k is Ellipsis or k is None or isinstance(k, (slice, numbers.Integral))):
            raise TypeError(f"only basic indexing (ints, slices, ..., None) is supported, got {type(k).__name__}")
    return key


def _as_scalar(x: Any) -> bool:
    if type(x) in _PLAIN_SCALARS:
        return True
    return isinstance(x, _SCALAR_TYPES) and not isinstance(x, (complex, np.complexfloating))


def _arith(
    x: NDArray,
    other: Any,
    stem: str,
    scalar_op: str,
    rscalar_op: str,
    *,
    reflected: bool = False,
    out: NDArray | None = None,
) -> NDArray:
    if _as_scalar(other):
        name = rscalar_op if reflected else scalar_op
        if out is None:
            return _scalar_op(name, x, other)
        return invoke(_ops.OPS[name], (x,), {"scalar": other}, out=out)
    if isinstance(other, np.ndarray):
        other = array(other, dtype=other.dtype)
    if not isinstance(other, NDArray):
        return NotImplemented
    a, b = (other, x) if reflected else (x, other)
    name = _ELEMWISE_NAMES[stem] if a.shape == b.shape else "broadcast_" + stem
    return invoke(_ops.OPS[name], (a, b), {}, out=out)


def _compare(x: NDArray, other: Any, op: str, swapped: str) -> Any:
    """``x <op> other`` as an operator push; ``swapped`` is the same test with the sides exchanged."""
    if _as_scalar(other):
        return invoke(_ops.OPS[f"_{op}_scalar"], (x,), {"scalar": other})
    if isinstance(other, np.ndarray):
        other = array(other, dtype=other.dtype)
    if not isinstance(other, NDArray):
        return NotImplemented
    name = f"_{op}" if x.shape == other.shape else f"broadcast_{op}"
    return invoke(_ops.OPS[name], (x, other), {})


def _comparison_fn(op: str, swapped: str) -> Any:
    def fn(lhs: Any, rhs: Any) -> NDArray:
        if isinstance(lhs, NDArray):
            result = _compare(lhs, rhs, op, swapped)
        elif isinstance(rhs, NDArray):
            result = _compare(rhs, lhs, swapped, op)
        else:
            result = NotImplemented
        if result is NotImplemented:
            raise TypeError(f"{op}: expected NDArrays or scalars, got {type(lhs).__name__} and {type(rhs).__name__}")
        return result

    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = f"Element-wise ``{op}``: 1 where it holds, else 0, in the input's dtype (MXNet's ``{op}``)."
    return fn


equal = _comparison_fn("equal", "equal")
not_equal = _comparison_fn("not_equal", "not_equal")
greater = _comparison_fn("greater", "lesser")
greater_equal = _comparison_fn("greater_equal", "lesser_equal")
lesser = _comparison_fn("lesser", "greater")
lesser_equal = _comparison_fn("lesser_equal", "greater_equal")


_ELEMWISE_NAMES = {
    "add": "elemwise_add",
    "sub": "elemwise_sub",
    "mul": "elemwise_mul",
    "div": "elemwise_div",
    "power": "_power",
    "maximum": "_maximum",
    "minimum": "_minimum",
}


def _assign_forward(ins: Sequence[np.ndarray], out: np.ndarray, a: dict[str, Any]) -> None:
    np.copyto(out, ins[0] if ins else a["value"], casting="unsafe")


_same_shape = _ops.same_shape
_OPS = _ops.OPS
_tape_state = _tape.state  # one threading.local for every thread: its fields are per thread
_COPY = _ops.OPS["_copy"]
_COPYTO = _ops.OPS["_copyto"]
_SLICE = _ops.OPS["slice"]
_ELEMWISE_ADD = _ops.OPS["elemwise_add"]
_SET_VALUE = _ops.register("_set_value", _assign_forward, None, lambda n, s, d, a: ((), np.dtype(np.float64)))
_SLICE_ASSIGN = _ops.register("_slice_assign", _assign_forward, None, lambda n, s, d, a: (s[0], d[0]))
_SLICE_ASSIGN_SCALAR = _ops.register("_slice_assign_scalar", _assign_forward, None, lambda n, s, d, a: ((), np.dtype(np.float64)))


# ---------------------------------------------------------------------------- creation
def _shape(shape: Any) -> tuple[int, ...]:
    """A shape from an int or any iterable of ints (a tuple, a list, a NumPy array)."""
    dims = (int(shape),) if isinstance(shape, numbers.Integral) else tuple(int(n) for n in shape)
    if any(n < 0 for n in dims):
        raise ValueError(f"shape {dims} has a negative dimension")
    return dims


def _dtype(dtype: Any) -> np.dtype:
    return _DEFAULT_DTYPE if dtype is None else _numeric(dtype)


_KIND_NAMES = {
    "c": "complex numbers",
    "U": "strings",
    "S": "bytes",
    "O": "Python objects",
    "M": "datetimes",
    "m": "timedeltas",
    "V": "records",
}


def _numeric(dtype: Any) -> np.dtype:
    """The dtype, if an NDArray can hold it: numbers and bools, as in MXNet.

    Checked where arrays are made, so that a string or object array fails here, with its dtype
    named, rather than at the first operator with NumPy's words.
    """
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"{dtype!r} is not a dtype: {e}") from None
    if dt.kind not in "biuf":
        what = _KIND_NAMES.get(dt.kind, "non-numeric data")
        raise TypeError(f"NDArrays hold numbers (bool, int, uint, float), not {what} (dtype {dt})")
    return dt


def create(name: str, shape: Any, dtype: Any, out: NDArray | None = None, **attrs: Any) -> NDArray:
    """Push the creation op ``name`` (no inputs) for a new array of ``shape``/``dtype``, or into ``out``."""
    op = _ops.OPS[name]
    if out is not None:
        if not isinstance(out, NDArray):
            raise TypeError(f"{name}: out= must be an NDArray, got {type(out).__name__}")
        if dtype is None:
            dtype = out._data.dtype
    attrs.update(shape=_shape(shape), dtype=_dtype(dtype))
    return invoke(op, (), attrs, out=out, allow_new_dtype=True)


def array(source: Any, ctx: Context | None = None, dtype: Any = None) -> NDArray:
    """A new array holding a copy of ``source`` (float32 unless ``source`` is a NumPy array)."""
    if isinstance(source, NDArray):
        return source.astype(dtype if dtype is not None else source._data.dtype)
    if dtype is None:
        dtype = source.dtype if isinstance(source, np.ndarray) else _DEFAULT_DTYPE
    dtype = _numeric(dtype)
    try:
        data = np.array(source, dtype=dtype)
    except (TypeError, ValueError) as e:
        raise TypeError(f"cannot make an NDArray from {type(source).__name__}: {e}") from None
    return NDArray(data)


def empty(shape: Any, ctx: Context | None = None, dtype: Any = None) -> NDArray:
    return NDArray(np.empty(_shape(shape), _dtype(dtype)))


def zeros(shape: Any, ctx: Context | None = None, dtype: Any = None, out: NDArray | None = None, **kwargs: Any) -> NDArray:
    return create("_zeros", shape, dtype, out)


def ones(shape: Any, ctx: Context | None = None, dtype: Any = None, out: NDArray | None = None, **kwargs: Any) -> NDArray:
    return create("_ones", shape, dtype, out)


def full(
    shape: Any, val: Any, ctx: Context | None = None, dtype: Any = None, out: NDArray | None = None, **kwargs: Any
) -> NDArray:
    return create("_full", shape, dtype, out, value=val)


def arange(
    start: float, stop: float | None = None, step: float = 1.0, repeat: int = 1, ctx: Context | None = None, dtype: Any = None
) -> NDArray:
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError("arange: step must not be 0")
    if repeat != 1:
        base = arange(start, stop, step, dtype=dtype).asnumpy()
        return array(np.repeat(base, repeat), dtype=_dtype(dtype))
    n = builtins.max(0, int(np.ceil((stop - start) / step)))
    return create("_arange", n, dtype, start=start, stop=stop, step=step)


def zeros_like(x: NDArray) -> NDArray:
    return zeros(x.shape, dtype=x._data.dtype)


def ones_like(x: NDArray) -> NDArray:
    return ones(x.shape, dtype=x._data.dtype)


def waitall() -> None:
    """Wait for every pushed op; raise the first error that no other wait has raised yet."""
    get_engine().wait_for_all()


# ---------------------------------------------------------------------------- functions
def _unary_fn(name: str) -> Any:
    op = _ops.OPS[name]

    def fn(data: NDArray, out: NDArray | None = None) -> NDArray:
        return invoke(op, (check_nd(name, data),), {}, out=out)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise ``{name}``: one engine push named ``{name}``."
    return fn


def check_nd(name: str, x: Any) -> NDArray:
    if not isinstance(x, NDArray):
        raise TypeError(f"{name}: expected an NDArray, got {type(x).__name__}")
    return x


abs = _unary_fn("abs")
exp = _unary_fn("exp")
log = _unary_fn("log")
sqrt = _unary_fn("sqrt")
tanh = _unary_fn("tanh")
sigmoid = _unary_fn("sigmoid")
relu = _unary_fn("relu")
negative = _unary_fn("negative")


def dot(lhs: NDArray, rhs: NDArray, transpose_a: bool = False, transpose_b: bool = False, out: NDArray | None = None) -> NDArray:
    attrs = {"transpose_a": bool(transpose_a), "transpose_b": bool(transpose_b)}
    return invoke(_ops.OPS["dot"], (check_nd("dot", lhs), check_nd("dot", rhs)), attrs, out=out)


def transpose(data: NDArray, axes: Sequence[int] | None = None) -> NDArray:
    attrs = {"axes": None if axes is None or len(axes) == 0 else tuple(int(a) for a in axes)}
    return invoke(_ops.OPS["transpose"], (check_nd("transpose", data),), attrs)


def reshape(data: NDArray, shape: Sequence[int], reverse: bool = False, out: NDArray | None = None) -> NDArray:
    """MXNet's ``Reshape``, with its codes (0, -1, -2, -3, -4) and ``reverse``; copies the data."""
    attrs = {"shape": tuple(int(n) for n in shape), "reverse": bool(reverse)}
    return invoke(_ops.OPS["Reshape"], (check_nd("Reshape", data),), attrs, out=out)


def Reshape(
    data: NDArray, shape: Sequence[int] = (), reverse: bool = False, out: NDArray | None = None, **kwargs: Any
) -> NDArray:
    """``mx.nd.Reshape(data, shape=..., reverse=...)``, MXNet's operator-style name of :func:`reshape`."""
    return reshape(data, shape, reverse=reverse, out=out)


ActType = Literal["relu", "sigmoid", "softrelu", "softsign", "tanh"]


def Activation(data: NDArray, act_type: ActType, out: NDArray | None = None, **kwargs: Any) -> NDArray:
    """``relu``, ``sigmoid``, ``tanh``, ``softrelu`` or ``softsign`` (MXNet's ``Activation`` operator)."""
    return invoke(_ops.OPS["Activation"], (check_nd("Activation", data),), {"act_type": act_type}, out=out)


def _reduce(name: str, data: NDArray, axis: Any, keepdims: bool, exclude: bool) -> NDArray:
    data = check_nd(name, data)
    ax = _axis(axis)
    if exclude:  # MXNet's exclude=True: reduce over every axis *not* listed
        listed = () if ax is None else (ax,) if isinstance(ax, int) else ax
        for a in listed:
            if not -data.ndim <= a < data.ndim:
                raise OperatorError(f"{name}: axis {a} is out of range for shape {data.shape}")
        kept = {a % data.ndim for a in listed}
        ax = tuple(i for i in range(data.ndim) if i not in kept)
        if not ax:
            return data.copy()
    return invoke(_ops.OPS[name], (data,), {"axis": ax, "keepdims": bool(keepdims)})


def sum(data: NDArray, axis: int | Sequence[int] | None = None, keepdims: bool = False, exclude: bool = False) -> NDArray:
    return _reduce("sum", data, axis, keepdims, exclude)


def mean(data: NDArray, axis: int | Sequence[int] | None = None, keepdims: bool = False, exclude: bool = False) -> NDArray:
    return _reduce("mean", data, axis, keepdims, exclude)


def _axis(axis: Any) -> int | tuple[int, ...] | None:
    """An axis argument: None, an int, or any iterable of ints."""
    if axis is None:
        return None
    if isinstance(axis, numbers.Integral):
        return int(axis)
    return tuple(int(a) for a in axis)


def add_n(*args: NDArray, out: NDArray | None = None) -> NDArray:
    if not args:
        raise OperatorError("add_n: needs at least one array")
    return invoke(_ops.OPS["add_n"], tuple(check_nd("add_n", a) for a in args), {}, out=out)


def ElementWiseSum(*args: NDArray, out: NDArray | None = None, **kwargs: Any) -> NDArray:
    """MXNet's other name of :func:`add_n` (pushed as ``add_n``)."""
    return add_n(*args, out=out)


def _binary_fn(stem: str) -> Any:
    def fn(lhs: Any, rhs: Any) -> NDArray:
        if isinstance(lhs, NDArray) and isinstance(rhs, NDArray):
            name = _ELEMWISE_NAMES[stem] if lhs.shape == rhs.shape else "broadcast_" + stem
            return invoke(_ops.OPS[name], (lhs, rhs), {})
        if isinstance(lhs, NDArray) and _as_scalar(rhs):
            return invoke(_ops.OPS[f"_{stem}_scalar"], (lhs,), {"scalar": rhs})
        if isinstance(rhs, NDArray) and _as_scalar(lhs):
            return invoke(_ops.OPS[f"_{stem}_scalar"], (rhs,), {"scalar": lhs})
        raise TypeError(f"{stem}: expected NDArrays or scalars, got {type(lhs).__name__} and {type(rhs).__name__}")

    fn.__name__ = fn.__qualname__ = stem
    return fn


maximum = _binary_fn("maximum")
minimum = _binary_fn("minimum")


def power(base: Any, exp: Any) -> NDArray:
    """``base ** exp`` element-wise, broadcasting; either side may be a scalar (``_power_scalar``, ``_rpower_scalar``)."""
    if isinstance(base, NDArray):
        return _arith(base, exp, "power", "_power_scalar", "_rpower_scalar")
    if isinstance(exp, NDArray) and _as_scalar(base):
        return _arith(exp, base, "power", "_power_scalar", "_rpower_scalar", reflected=True)
    raise TypeError(f"power: expected NDArrays or scalars, got {type(base).__name__} and {type(exp).__name__}")


def _named_binary(name: str) -> Any:
    """MXNet's operator-named binary function (``elemwise_add``, ``broadcast_mul``, ...): one push."""
    op = _ops.OPS[name]

    def fn(lhs: NDArray, rhs: NDArray, out: NDArray | None = None, **kwargs: Any) -> NDArray:
        return invoke(op, (check_nd(name, lhs), check_nd(name, rhs)), {}, out=out)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``{name}`` of two NDArrays: one engine push named ``{name}``."
    return fn


globals().update({name: _named_binary(name) for name in _BINARY_NAMES_PUBLIC})


# ---------------------------------------------------------------------------- rounding, clipping, reductions
floor = _unary_fn("floor")
ceil = _unary_fn("ceil")
round = _unary_fn("round")
round.__doc__ = "Elementwise rounding with halves away from zero (C's ``round``, MXNet's ``round``; ``rint`` rounds to even)."
rint = _unary_fn("rint")
trunc = _unary_fn("trunc")
fix = _unary_fn("fix")
square = _unary_fn("square")


def clip(data: NDArray, a_min: float, a_max: float, out: NDArray | None = None) -> NDArray:
    """Values limited to ``[a_min, a_max]``; the gradient passes only where the value was inside."""
    return invoke(_ops.OPS["clip"], (check_nd("clip", data),), {"a_min": a_min, "a_max": a_max}, out=out)


def max(data: NDArray, axis: int | Sequence[int] | None = None, keepdims: bool = False, out: NDArray | None = None) -> NDArray:
    """The largest value over ``axis`` (all axes by default; a scalar result has shape (1,), as in MXNet)."""
    return invoke(_ops.OPS["max"], (check_nd("max", data),), {"axis": _axis(axis), "keepdims": bool(keepdims)}, out=out)


def min(data: NDArray, axis: int | Sequence[int] | None = None, keepdims: bool = False, out: NDArray | None = None) -> NDArray:
    """The smallest value over ``axis`` (all axes by default; a scalar result has shape (1,), as in MXNet)."""
    return invoke(_ops.OPS["min"], (check_nd("min", data),), {"axis": _axis(axis), "keepdims": bool(keepdims)}, out=out)


def norm(
    data: NDArray,
    ord: int = 2,
    axis: int | Sequence[int] | None = None,
    out_dtype: Any = None,
    keepdims: bool = False,
    out: NDArray | None = None,
) -> NDArray:
    """The L1 (``ord=1``) or L2 norm over ``axis`` (all elements by default), accumulated in float64."""
    dt = None if out_dtype is None else _numeric(out_dtype)
    attrs = {"ord": ord, "axis": _axis(axis), "keepdims": bool(keepdims), "out_dtype": dt}
    return invoke(_ops.OPS["norm"], (check_nd("norm", data),), attrs, out=out, allow_new_dtype=True)


def argmax(data: NDArray, axis: int | None = None, keepdims: bool = False, out: NDArray | None = None) -> NDArray:
    """Index of the largest value along ``axis`` (of the flattened array if None), in the input's dtype as in MXNet."""
    attrs = {"axis": None if axis is None else int(axis), "keepdims": bool(keepdims)}
    return invoke(_ops.OPS["argmax"], (check_nd("argmax", data),), attrs, out=out)


def argmin(data: NDArray, axis: int | None = None, keepdims: bool = False, out: NDArray | None = None) -> NDArray:
    """Index of the smallest value along ``axis`` (of the flattened array if None), in the input's dtype as in MXNet."""
    attrs = {"axis": None if axis is None else int(axis), "keepdims": bool(keepdims)}
    return invoke(_ops.OPS["argmin"], (check_nd("argmin", data),), attrs, out=out)


# ---------------------------------------------------------------------------- shapes and axes
def expand_dims(data: NDArray, axis: int, out: NDArray | None = None) -> NDArray:
    """A copy with a new axis of size 1 at ``axis`` (``-ndim-1 <= axis <= ndim``)."""
    return invoke(_ops.OPS["expand_dims"], (check_nd("expand_dims", data),), {"axis": int(axis)}, out=out)


def flatten(data: NDArray, out: NDArray | None = None) -> NDArray:
    """A 2-D copy of shape ``(d0, d1 * d2 * ...)`` (MXNet's ``Flatten``)."""
    return invoke(_ops.OPS["Flatten"], (check_nd("Flatten", data),), {}, out=out)


Flatten = flatten


def squeeze(data: NDArray, axis: int | Sequence[int] | None = None, out: NDArray | None = None) -> NDArray:
    """A copy without the size-1 axes (those of ``axis`` only, if given); all-ones shapes give (1,), as in MXNet."""
    return invoke(_ops.OPS["squeeze"], (check_nd("squeeze", data),), {"axis": _axis(axis)}, out=out)


def broadcast_to(data: NDArray, shape: Any, out: NDArray | None = None) -> NDArray:
    """Size-1 axes repeated to ``shape``; a 0 in ``shape`` keeps that axis as it is (MXNet's rule)."""
    attrs = {"shape": tuple(int(n) for n in shape)}
    return invoke(_ops.OPS["broadcast_to"], (check_nd("broadcast_to", data),), attrs, out=out)


def broadcast_like(lhs: NDArray, rhs: NDArray, lhs_axes: Any = None, rhs_axes: Any = None, out: NDArray | None = None) -> NDArray:
    """``lhs`` broadcast to ``rhs``'s shape (or only ``lhs_axes`` to the sizes of ``rhs_axes``); keeps lhs's dtype."""
    attrs = {"lhs_axes": _axis_tuple(lhs_axes), "rhs_axes": _axis_tuple(rhs_axes)}
    inputs = (check_nd("broadcast_like", lhs), check_nd("broadcast_like", rhs))
    return invoke(_ops.OPS["broadcast_like"], inputs, attrs, out=out)


def _axis_tuple(axes: Any) -> tuple[int, ...] | None:
    return None if axes is None else (int(axes),) if isinstance(axes, numbers.Integral) else tuple(int(a) for a in axes)


def reshape_like(lhs: NDArray, rhs: NDArray, out: NDArray | None = None) -> NDArray:
    """``lhs``'s data in ``rhs``'s shape (the sizes must match); keeps lhs's dtype."""
    inputs = (check_nd("reshape_like", lhs), check_nd("reshape_like", rhs))
    return invoke(_ops.OPS["reshape_like"], inputs, {}, out=out)


def flip(data: NDArray, axis: int | Sequence[int], out: NDArray | None = None) -> NDArray:
    """The elements in reverse order along ``axis`` (MXNet's ``reverse``; ``flip`` is its alias)."""
    attrs = {"axis": _axis_tuple(axis)}
    return invoke(_ops.OPS["reverse"], (check_nd("reverse", data),), attrs, out=out)


reverse = flip


def swapaxes(data: NDArray, dim1: int = 0, dim2: int = 0, out: NDArray | None = None) -> NDArray:
    """A copy with axes ``dim1`` and ``dim2`` exchanged (MXNet's ``SwapAxis``)."""
    attrs = {"dim1": int(dim1), "dim2": int(dim2)}
    return invoke(_ops.OPS["SwapAxis"], (check_nd("SwapAxis", data),), attrs, out=out)


SwapAxis = swapaxes


def moveaxis(tensor: NDArray, source: int | Sequence[int], destination: int | Sequence[int]) -> NDArray:
    """Axes ``source`` moved to ``destination``, the others kept in order; one ``transpose`` push, as in MXNet."""
    check_nd("moveaxis", tensor)
    ndim = tensor.ndim

    def norm_axes(axes: int | Sequence[int], what: str) -> list[int]:
        given = [int(axes)] if isinstance(axes, (int, numbers.Integral)) else [int(a) for a in axes]
        bad = [a for a in given if not -ndim <= a < ndim]
        if bad:
            raise OperatorError(f"moveaxis: {what} axis {bad[0]} is out of range for shape {tensor.shape}")
        out = [a % ndim for a in given]
        if len(set(out)) != len(out):
            raise OperatorError(f"moveaxis: repeated axis in {what} {given}")
        return out

    src, dst = norm_axes(source, "source"), norm_axes(destination, "destination")
    if len(src) != len(dst):
        raise OperatorError(f"moveaxis: source {source} and destination {destination} must have the same number of axes")
    order = [a for a in range(ndim) if a not in src]
    for d, s in sorted(zip(dst, src, strict=True)):
        order.insert(d, s)
    return transpose(tensor, order)


def take(a: NDArray, indices: Any, axis: int = 0, mode: str = "clip", out: NDArray | None = None) -> NDArray:
    """Slices of ``a`` along ``axis`` at ``indices`` (cast to integers; out of range ones are clipped or wrapped)."""
    if not isinstance(indices, NDArray):
        indices = array(np.asarray(indices), dtype=np.asarray(indices).dtype)
    attrs = {"axis": int(axis), "mode": mode}
    return invoke(_ops.OPS["take"], (check_nd("take", a), indices), attrs, out=out)


def split(data: NDArray, num_outputs: int, axis: int = 1, squeeze_axis: bool = False) -> Any:
    """``num_outputs`` equal parts along ``axis``, all written by one ``SliceChannel`` push (a list, or one array if 1)."""
    attrs = {"num_outputs": int(num_outputs), "axis": int(axis), "squeeze_axis": bool(squeeze_axis)}
    outs = invoke_multi(_ops.MULTI_OPS["SliceChannel"], (check_nd("split", data),), attrs)
    return outs[0] if len(outs) == 1 else outs


SliceChannel = split


def concat(*data: NDArray, dim: int = 1, out: NDArray | None = None, **kwargs: Any) -> NDArray:
    """The arrays joined along ``dim`` (MXNet's ``Concat``; note its default axis is 1)."""
    if not data:
        raise OperatorError("Concat: needs at least one array")
    inputs = tuple(check_nd("Concat", x) for x in data)
    return invoke(_ops.OPS["Concat"], inputs, {"dim": int(dim)}, out=out)


Concat = concat


def concatenate(arrays: Sequence[NDArray], axis: int = 0, always_copy: bool = True) -> NDArray:
    """MXNet's Python ``concatenate``: the arrays joined along ``axis`` (default 0), one ``Concat`` push."""
    arrays = list(arrays)
    if len(arrays) == 1 and not always_copy:
        return arrays[0]
    return concat(*arrays, dim=axis)


def stack(*data: NDArray, axis: int = 0, out: NDArray | None = None, **kwargs: Any) -> NDArray:
    """Arrays of one shape joined along a new axis ``axis``."""
    if not data:
        raise OperatorError("stack: needs at least one array")
    return invoke(_ops.OPS["stack"], tuple(check_nd("stack", x) for x in data), {"axis": int(axis)}, out=out)


def one_hot(
    indices: NDArray,
    depth: int,
    on_value: float = 1.0,
    off_value: float = 0.0,
    dtype: Any = "float32",
    out: NDArray | None = None,
) -> NDArray:
    """A new last axis of size ``depth``: ``on_value`` at each index, ``off_value`` elsewhere (and for indices out of range)."""
    attrs = {"depth": int(depth), "on_value": on_value, "off_value": off_value, "dtype": _numeric(dtype)}
    return invoke(_ops.OPS["one_hot"], (check_nd("one_hot", indices),), attrs, out=out, allow_new_dtype=True)


def onehot_encode(indices: NDArray, out: NDArray) -> NDArray:
    """MXNet's legacy one-hot: fills ``out`` of shape ``(n, depth)`` from ``n`` indices; returns ``out``."""
    check_nd("onehot_encode", out)
    if out.ndim != 2:
        raise OperatorError(f"onehot_encode: out must be 2-D (n, depth), got shape {out.shape}")
    return one_hot(indices, out.shape[1], dtype=out._data.dtype, out=out)


def eye(N: int, M: int = 0, k: int = 0, ctx: Context | None = None, dtype: Any = None, **kwargs: Any) -> NDArray:
    """An ``N x M`` array (``M=0`` means ``N``) of zeros with ones on diagonal ``k``."""
    return create("_eye", (int(N), int(M) or int(N)), dtype, k=int(k))


def linspace(
    start: float,
    stop: float,
    num: int,
    endpoint: bool = True,
    ctx: Context | None = None,
    dtype: Any = None,
    **kwargs: Any,
) -> NDArray:
    """``num`` evenly spaced values from ``start`` to ``stop`` (included unless ``endpoint=False``)."""
    return create("_linspace", int(num), dtype, start=float(start), stop=float(stop), endpoint=bool(endpoint))


def from_numpy(ndarray: np.ndarray, zero_copy: bool = True, **kwargs: Any) -> NDArray:
    """An NDArray on ``ndarray``'s own buffer (``zero_copy=True``, as MXNet), or on a copy.

    Zero-copy needs a C-contiguous array and, as in MXNet, makes the NumPy array read-only: the
    NDArray owns the buffer now (its writes show in the NumPy array, which must not be written).
    """
    if not isinstance(ndarray, np.ndarray):
        raise TypeError(f"from_numpy: expected a numpy.ndarray, got {type(ndarray).__name__}")
    _numeric(ndarray.dtype)
    if not zero_copy:
        return array(ndarray, dtype=ndarray.dtype)
    if not ndarray.flags["C_CONTIGUOUS"]:
        raise ValueError("from_numpy: zero_copy needs a C-contiguous array; pass zero_copy=False or np.ascontiguousarray(...)")
    if not ndarray.flags.writeable:
        # Already handed over by an earlier from_numpy (MXNet shares it again): a writable view
        # needs the flag back for a moment, which NumPy allows only if the memory is writable.
        try:
            ndarray.flags.writeable = True
        except ValueError:
            raise ValueError("from_numpy: zero_copy needs writable memory; pass zero_copy=False for a copy") from None
    view = ndarray.view()  # stays writable after the source is made read-only below
    ndarray.flags.writeable = False
    return NDArray(view)


# ---------------------------------------------------------------------------- sorting
def topk(
    data: NDArray,
    axis: int | None = -1,
    k: int = 1,
    ret_typ: str = "indices",
    is_ascend: bool = False,
    dtype: Any = "float32",
) -> Any:
    """The ``k`` largest (smallest with ``is_ascend``) along ``axis`` (of the flattened array if None).

    ``ret_typ`` is ``"indices"`` (in ``dtype``, float32 by default as in MXNet), ``"value"``,
    ``"mask"`` (1 where selected) or ``"both"``: ``[values, indices]``, pushed as two ``topk`` ops.
    """
    check_nd("topk", data)
    attrs = {"axis": None if axis is None else int(axis), "k": int(k), "is_ascend": bool(is_ascend), "dtype": _numeric(dtype)}
    if ret_typ == "both":
        return [
            invoke(_ops.OPS["topk"], (data,), {**attrs, "ret_typ": "value"}),
            invoke(_ops.OPS["topk"], (data,), {**attrs, "ret_typ": "indices"}),
        ]
    return invoke(_ops.OPS["topk"], (data,), {**attrs, "ret_typ": ret_typ})


def sort(data: NDArray, axis: int | None = -1, is_ascend: bool = True, out: NDArray | None = None) -> NDArray:
    """The values sorted along ``axis`` (the flattened array if None)."""
    attrs = {"axis": None if axis is None else int(axis), "is_ascend": bool(is_ascend)}
    return invoke(_ops.OPS["sort"], (check_nd("sort", data),), attrs, out=out)


def argsort(
    data: NDArray, axis: int | None = -1, is_ascend: bool = True, dtype: Any = "float32", out: NDArray | None = None
) -> NDArray:
    """The indices that sort ``data`` along ``axis``, in ``dtype`` (float32 by default, as in MXNet)."""
    attrs = {"axis": None if axis is None else int(axis), "is_ascend": bool(is_ascend), "dtype": _numeric(dtype)}
    return invoke(_ops.OPS["argsort"], (check_nd("argsort", data),), attrs, out=out, allow_new_dtype=True)


# ---------------------------------------------------------------------------- softmax, dropout
def _softmax_fn(name: str, what: str) -> Any:
    def fn(
        data: NDArray,
        axis: int = -1,
        temperature: float | None = None,
        dtype: Any = None,
        out: NDArray | None = None,
        **kwargs: Any,
    ) -> NDArray:
        if kwargs.get("use_length"):
            raise OperatorError(f"{name}: use_length is not supported")
        attrs = {"axis": int(axis), "temperature": temperature, "dtype": None if dtype is None else _numeric(dtype)}
        return invoke(_ops.OPS[name], (check_nd(name, data),), attrs, out=out, allow_new_dtype=True)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"{what} along ``axis`` of ``data / temperature``, computed in float64 and given in ``dtype``."
    return fn


softmax = _softmax_fn("softmax", "exp(x) / sum(exp(x))")
log_softmax = _softmax_fn("log_softmax", "log(softmax(x))")
softmin = _softmax_fn("softmin", "softmax(-x)")


def Dropout(
    data: NDArray,
    p: float = 0.5,
    mode: str = "training",
    axes: Sequence[int] = (),
    out: NDArray | None = None,
    **kwargs: Any,
) -> NDArray:
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)``; the identity outside training.

    It is active when ``autograd.is_training()`` (``mode="always"``: every time), decided at push
    time. Its mask comes from a seed drawn then from ``mx.random``'s sequence, so both engines
    drop the same elements; ``axes`` share one mask value along those axes.
    """

    if mode not in ("training", "always"):
        raise OperatorError(f"Dropout: mode must be 'training' or 'always', got {mode!r}")
    active = mode == "always" or _tape.is_training()
    attrs = {"p": float(p), "active": active, "axes": tuple(int(a) for a in axes), "seed": seeds.next_seed() if active else None}
    return invoke(_ops.OPS["Dropout"], (check_nd("Dropout", data),), attrs, out=out)


# ---------------------------------------------------------------------------- backward
def backward(
    heads: NDArray | Sequence[NDArray],
    head_grads: NDArray | Sequence[NDArray | None] | None = None,
    retain_graph: bool = False,
    train_mode: bool = True,
) -> None:
    """Push the backward pass from ``heads``; gradients land in each leaf's ``.grad`` (``mx.autograd.backward``).

    It walks the tape in reverse and pushes one engine op per node, named ``_backward_<op>``
    (custom ops push their own Python ``backward`` the same way), so the backward pass is as
    asynchronous as the forward one. It lives beside NDArray because it makes arrays (head
    gradients of ones, sums of gradients) while the tape below knows no array type.
    """
    heads = [heads] if isinstance(heads, NDArray) else list(heads)
    if head_grads is None or isinstance(head_grads, NDArray):
        head_grads = [head_grads] * len(heads) if head_grads is None else [head_grads]
    if len(head_grads) != len(heads):
        raise ValueError(f"backward: {len(heads)} heads but {len(head_grads)} head gradients")
    for h in heads:
        if not _tape.requires_grad(h):
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

    with _tape.scope(False, train_mode):
        for h, g in zip(heads, head_grads, strict=True):
            if g is None:
                g = ones_like(h)
            elif g.shape != h.shape:
                raise ValueError(f"backward: head gradient shape {g.shape} does not match head shape {h.shape}")
            add(h, g)

        for node in _tape.topo_order(heads):
            ograds: list[Any] = [_sum_grads(pending.pop(id(y), [])) for y in node.outputs]
            if all(g is None for g in ograds):
                continue
            full = [g if g is not None else ones_like(y) * 0 for g, y in zip(ograds, node.outputs, strict=True)]
            in_grads = node.backward(full)
            for x, g in zip(node.inputs, in_grads, strict=True):
                if g is not None and _tape.requires_grad(x):
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


# ---------------------------------------------------------------------------- indexing: slice_like, pick, crop, gather_nd
def _index_array(x: Any) -> NDArray:
    if isinstance(x, NDArray):
        return x
    a = np.asarray(x)
    return array(a, dtype=a.dtype)


def slice_like(data: NDArray, shape_like: NDArray, axes: Sequence[int] = (), out: NDArray | None = None) -> NDArray:
    """``data`` sliced from the start to ``shape_like``'s size along ``axes`` (all axes if empty)."""
    inputs = (check_nd("slice_like", data), check_nd("slice_like", shape_like))
    return invoke(_ops.OPS["slice_like"], inputs, {"axes": tuple(int(a) for a in axes)}, out=out)


def pick(
    data: NDArray, index: Any, axis: int = -1, keepdims: bool = False, mode: str = "clip", out: NDArray | None = None
) -> NDArray:
    """``data[..., index[...], ...]`` along ``axis``: one element per index (clipped, or wrapped with ``mode='wrap'``)."""
    attrs = {"axis": int(axis), "keepdims": bool(keepdims), "mode": mode}
    return invoke(_ops.OPS["pick"], (check_nd("pick", data), _index_array(index)), attrs, out=out)


def choose_element_0index(data: NDArray, index: Any, out: NDArray | None = None) -> NDArray:
    """MXNet's legacy name of ``pick`` along the last axis: ``data[i, index[i]]``."""
    return pick(data, index, axis=-1, out=out)


def batch_take(a: NDArray, indices: Any, out: NDArray | None = None) -> NDArray:
    """``a[i, indices[i]]`` of a 2-D ``a`` (indices clipped to range); MXNet's deprecated ``pick``."""
    return invoke(_ops.OPS["batch_take"], (check_nd("batch_take", a), _index_array(indices)), {}, out=out)


def fill_element_0index(lhs: NDArray, mhs: NDArray, rhs: NDArray, out: NDArray | None = None) -> NDArray:
    """A copy of the 2-D ``lhs`` with ``lhs[i, rhs[i]] = mhs[i]`` for every row ``i``."""
    inputs = (check_nd("fill_element_0index", lhs), check_nd("fill_element_0index", mhs), _index_array(rhs))
    return invoke(_ops.OPS["fill_element_0index"], inputs, {}, out=out)


def _crop_key(shape: tuple[int, ...], begin: Sequence[Any], end: Sequence[Any], step: Sequence[Any] | None) -> tuple[Any, ...]:
    if len(begin) != len(end) or len(begin) > len(shape) or (step is not None and len(step) and len(step) != len(begin)):
        raise OperatorError(f"slice: begin {tuple(begin)}, end {tuple(end)} and step do not fit shape {shape}")
    steps = list(step) if step else [None] * len(begin)
    return tuple(py_slice(b, e, s) for b, e, s in zip(begin, end, steps, strict=True))


def crop(
    data: NDArray, begin: Sequence[Any], end: Sequence[Any], step: Sequence[Any] | None = None, out: NDArray | None = None
) -> NDArray:
    """MXNet's legacy ``crop``, which is ``slice``: ``data[begin[0]:end[0], begin[1]:end[1], ...]`` (a copy)."""
    check_nd("slice", data)
    return invoke(_SLICE, (data,), {"key": _crop_key(data.shape, begin, end, step)}, out=out)


def _crop_assign_into(lhs: NDArray, out: NDArray | None) -> NDArray:
    if out is None:
        return lhs.copy()
    if out is not lhs:
        lhs.copyto(out)
    return out


def _crop_assign(
    lhs: NDArray,
    rhs: NDArray,
    begin: Sequence[Any],
    end: Sequence[Any],
    step: Sequence[Any] | None = None,
    out: NDArray | None = None,
) -> NDArray:
    """``lhs`` with ``lhs[begin:end] = rhs`` (MXNet's ``_slice_assign``, alias ``_crop_assign``), into ``out``."""
    check_nd("_slice_assign", lhs)
    target = _crop_assign_into(lhs, out)
    view = target._view(_crop_key(lhs.shape, begin, end, step))
    if tuple(rhs.shape) != view.shape:
        raise OperatorError(f"_slice_assign: cannot assign shape {rhs.shape} to a slice of shape {view.shape}")
    invoke(_SLICE_ASSIGN, (check_nd("_slice_assign", rhs),), {}, out=view, check_shape=False)
    return target


def _crop_assign_scalar(
    lhs: NDArray,
    scalar: float = 0.0,
    begin: Sequence[Any] = (),
    end: Sequence[Any] = (),
    step: Sequence[Any] | None = None,
    out: NDArray | None = None,
) -> NDArray:
    """``lhs`` with ``lhs[begin:end] = scalar`` (MXNet's ``_slice_assign_scalar``), into ``out``."""
    check_nd("_slice_assign_scalar", lhs)
    target = _crop_assign_into(lhs, out)
    view = target._view(_crop_key(lhs.shape, begin, end, step))
    invoke(_SLICE_ASSIGN_SCALAR, (), {"value": scalar}, out=view, check_shape=False)
    return target


#: ``mx.nd._internal``: the few internal operators MXNet's own tests call by name.
_internal = SimpleNamespace(
    _crop_assign=_crop_assign,
    _slice_assign=_crop_assign,
    _crop_assign_scalar=_crop_assign_scalar,
    _slice_assign_scalar=_crop_assign_scalar,
)


def gather_nd(data: NDArray, indices: Any, out: NDArray | None = None) -> NDArray:
    """``data[indices[0], indices[1], ...]``: the first axis of ``indices`` indexes the leading axes of ``data``.

    Negative indices count from the end; one out of range raises IndexError when the op runs.
    """
    return invoke(_ops.OPS["gather_nd"], (check_nd("gather_nd", data), _index_array(indices)), {}, out=out)


def sample_normal(
    mu: NDArray, sigma: NDArray, shape: Any = (), dtype: Any = None, out: NDArray | None = None, **kwargs: Any
) -> NDArray:
    """Samples of N(mu[i], sigma[i]²) for each element: shape ``mu.shape + shape`` (``_sample_normal``)."""
    extra = () if shape is None else _shape(shape)
    attrs = {"shape": extra, "dtype": None if dtype is None else _numeric(dtype), "seed": seeds.next_seed()}
    inputs = (check_nd("_sample_normal", mu), check_nd("_sample_normal", sigma))
    return invoke(_ops.OPS["_sample_normal"], inputs, attrs, out=out, allow_new_dtype=True)


# ---------------------------------------------------------------------------- SoftmaxOutput
def SoftmaxOutput(
    data: NDArray,
    label: NDArray,
    grad_scale: float = 1.0,
    ignore_label: float = -1.0,
    multi_output: bool = False,
    use_ignore: bool = False,
    preserve_shape: bool = False,
    normalization: str = "null",
    out_grad: bool = False,
    smooth_alpha: float = 0.0,
    out: NDArray | None = None,
    **kwargs: Any,
) -> NDArray:
    """Softmax of ``data`` over its classes; its backward is the cross-entropy gradient against ``label``.

    As in MXNet, the gradient ignores the head gradient (unless ``out_grad``): it is
    ``(softmax - one_hot(label)) * grad_scale``, divided by the batch size (``normalization="batch"``)
    or the count of labels not ignored (``"valid"``), and for ``multi_output`` (classes on axis 1)
    by the spatial size too unless ``"valid"``. The label gets no gradient.
    """
    if normalization not in ("null", "batch", "valid"):
        raise OperatorError(f"SoftmaxOutput: normalization must be null, batch or valid, got {normalization!r}")
    attrs = {
        "grad_scale": float(grad_scale),
        "ignore_label": float(ignore_label),
        "multi_output": bool(multi_output),
        "use_ignore": bool(use_ignore),
        "preserve_shape": bool(preserve_shape),
        "normalization": normalization,
        "out_grad": bool(out_grad),
        "smooth_alpha": float(smooth_alpha),
    }
    inputs = (check_nd("SoftmaxOutput", data), check_nd("SoftmaxOutput", label))
    return invoke(_ops.OPS["SoftmaxOutput"], inputs, attrs, out=out)


def invoke_multi_mutating(
    op: _ops.MultiOpDef, inputs: Sequence[NDArray], attrs: dict[str, Any], mutated: Sequence[int]
) -> list[NDArray]:
    """:func:`invoke_multi` for an op that also writes some of its inputs in place (MXNet's aux states:
    BatchNorm's moving statistics): those are pushed as writes, so later reads wait for the update."""
    if _tape.state.recording and any(_tape.requires_grad(inputs[i]) for i in mutated):
        raise OperatorError(f"{op.name}: its state inputs are updated in place and cannot be in the autograd graph")
    datas = [x._data for x in inputs]
    specs = op.infer(op.name, [d.shape for d in datas], [d.dtype for d in datas], attrs)
    outs = [NDArray(np.empty(shape, dtype)) for shape, dtype in specs]
    writes: list[Var] = [o._var for o in outs]
    for i in mutated:
        if inputs[i]._var not in writes:
            writes.append(inputs[i]._var)
    reads = [x._var for x in inputs if x._var not in writes]
    get_engine().push(partial(op.forward, datas, [o._data for o in outs], attrs), reads, writes, op.name)
    if _tape.state.recording and op.backward is not None and inputs:
        _tape.record_node(op.name, inputs, outs, partial(_push_multi_backward, op, tuple(inputs), tuple(outs), attrs))
    return outs


def BatchNorm(
    data: NDArray,
    gamma: NDArray,
    beta: NDArray,
    moving_mean: NDArray,
    moving_var: NDArray,
    eps: float = 1e-3,
    momentum: float = 0.9,
    fix_gamma: bool = True,
    use_global_stats: bool = False,
    output_mean_var: bool = False,
    axis: int = 1,
    cudnn_off: bool = False,
    **kwargs: Any,
) -> Any:
    """Batch normalization over every axis but ``axis``.

    In training mode (``autograd.record()``/``train_mode``) without ``use_global_stats`` it uses the
    batch's mean and (biased) variance and updates ``moving_mean``/``moving_var`` in place
    (``moving = moving * momentum + batch * (1 - momentum)``); otherwise it uses the moving
    statistics. ``fix_gamma`` treats gamma as 1 (and gives it a zero gradient). With
    ``output_mean_var`` it returns ``[out, mean, 1 / sqrt(var + eps)]``.
    """
    inputs = tuple(check_nd("BatchNorm", x) for x in (data, gamma, beta, moving_mean, moving_var))
    attrs = {
        "eps": float(eps),
        "momentum": float(momentum),
        "fix_gamma": bool(fix_gamma),
        "axis": int(axis),
        "training": _tape.state.training and not use_global_stats,
    }
    outs = invoke_multi_mutating(_ops.MULTI_OPS["BatchNorm"], inputs, attrs, mutated=(3, 4))
    return outs if output_mean_var else outs[0]


def _sync_batch_norm(
    data: NDArray,
    gamma: NDArray,
    beta: NDArray,
    moving_mean: NDArray,
    moving_var: NDArray,
    eps: float = 1e-3,
    momentum: float = 0.9,
    fix_gamma: bool = True,
    use_global_stats: bool = False,
    output_mean_var: bool = False,
    ndev: int = 1,
    key: str = "",
    **kwargs: Any,
) -> Any:
    """``mx.nd.contrib.SyncBatchNorm`` on one device: BatchNorm over axis 1, whose outputs with
    ``output_mean_var`` are ``[out, mean, var]`` (the variance, not its inverse root)."""
    inputs = tuple(check_nd("SyncBatchNorm", x) for x in (data, gamma, beta, moving_mean, moving_var))
    attrs = {
        "eps": float(eps),
        "momentum": float(momentum),
        "fix_gamma": bool(fix_gamma),
        "axis": 1,
        "training": _tape.state.training and not use_global_stats,
        "output_var": True,
    }
    outs = invoke_multi_mutating(_ops.MULTI_OPS["_contrib_SyncBatchNorm"], inputs, attrs, mutated=(3, 4))
    return outs if output_mean_var else outs[0]


def Correlation(
    data1: NDArray,
    data2: NDArray,
    kernel_size: int = 1,
    max_displacement: int = 1,
    stride1: int = 1,
    stride2: int = 1,
    pad_size: int = 0,
    is_multiply: bool = True,
    out: NDArray | None = None,
    **kwargs: Any,
) -> NDArray:
    """MXNet's ``Correlation`` (FlowNet): for each displacement of ``data2`` within ``max_displacement``
    (in steps of ``stride2``), the mean over a ``kernel_size`` window and the channels of
    ``data1 * data2`` (``|data1 - data2|`` unless ``is_multiply``). ``kernel_size`` must be odd.

    Forward only here: recording it gives no gradient to ``data1`` or ``data2``.
    """
    attrs = {
        "kernel_size": int(kernel_size),
        "max_displacement": int(max_displacement),
        "stride1": int(stride1),
        "stride2": int(stride2),
        "pad_size": int(pad_size),
        "is_multiply": bool(is_multiply),
    }
    inputs = (check_nd("Correlation", data1), check_nd("Correlation", data2))
    return invoke(_ops.OPS["Correlation"], inputs, attrs, out=out)


# ---------------------------------------------------------------------------- Pooling, FullyConnected
def _tuple_attr(v: Any) -> tuple[int, ...]:
    if v is None:
        return ()
    return (int(v),) if isinstance(v, numbers.Integral) else tuple(int(n) for n in v)


def Pooling(
    data: NDArray,
    kernel: Any = (),
    pool_type: str = "max",
    global_pool: bool = False,
    cudnn_off: bool = False,
    pooling_convention: str = "valid",
    stride: Any = (),
    pad: Any = (),
    p_value: Any = None,
    count_include_pad: bool | None = None,
    layout: str | None = None,
    out: NDArray | None = None,
    **kwargs: Any,
) -> NDArray:
    """Max, average or sum pooling over the spatial axes of NCW, NCHW or NCDHW data (MXNet's ``Pooling``).

    ``pooling_convention`` sizes the output: ``valid`` (floor), ``full`` (ceil) or ``same``
    (``ceil(n / stride)``, 1-D only, no pad); ``global_pool`` pools each whole channel.
    """
    attrs = {
        "kernel": _tuple_attr(kernel),
        "pool_type": pool_type,
        "global_pool": bool(global_pool),
        "pooling_convention": pooling_convention,
        "stride": _tuple_attr(stride),
        "pad": _tuple_attr(pad),
        "count_include_pad": count_include_pad,
        "layout": layout,
    }
    if p_value is not None or pool_type == "lp":
        raise OperatorError("Pooling: pool_type='lp' is not supported")
    return invoke(_ops.OPS["Pooling"], (check_nd("Pooling", data),), attrs, out=out)


def FullyConnected(
    data: NDArray,
    weight: NDArray,
    bias: NDArray | None = None,
    num_hidden: int = 0,
    no_bias: bool = False,
    flatten: bool = True,
    out: NDArray | None = None,
    **kwargs: Any,
) -> NDArray:
    """``data @ weight.T + bias``: data flattened to 2-D (``flatten``) or over its last axis."""
    inputs = [check_nd("FullyConnected", data), check_nd("FullyConnected", weight)]
    if not no_bias:
        if bias is None:
            raise OperatorError("FullyConnected: bias is required unless no_bias=True")
        inputs.append(check_nd("FullyConnected", bias))
    attrs = {"num_hidden": int(num_hidden), "no_bias": bool(no_bias), "flatten": bool(flatten)}
    return invoke(_ops.OPS["FullyConnected"], inputs, attrs, out=out)


# ---------------------------------------------------------------------------- optimizer updates
def invoke_update(op: _ops.OpDef, inputs: Sequence[NDArray], attrs: dict[str, Any], out: NDArray | None = None) -> NDArray:
    """Push an update op: the new weight goes to ``out``; the state inputs (after weight, grad) are written in place.

    The states are pushed as writes, so later reads of them wait for the update, on any engine.
    """
    datas = [x._data for x in inputs]
    shape, dtype = op.infer(op.name, [d.shape for d in datas], [d.dtype for d in datas], attrs)
    if out is None:
        out = NDArray(np.empty(shape, dtype))
    elif out._data.shape != shape:
        raise OperatorError(f"{op.name}: result shape {shape} does not fit the output of shape {out.shape}")
    states = inputs[2:]
    if _tape.state.recording and any(_tape.requires_grad(x) for x in (out, *states)):
        raise OperatorError(f"{op.name}: updates of arrays in the autograd graph are not supported while recording")
    writes: list[Var] = []
    for v in (out._var, *(x._var for x in states)):
        if v not in writes:
            writes.append(v)
    reads = [x._var for x in inputs[:2] if x._var not in writes]
    get_engine().push(partial(op.forward, datas, out._data, attrs), reads, writes, op.name)
    return out


#: Each update op's state names (its inputs after weight and grad) and its parameters' defaults
#: (``None``: required), as in MXNet's optimizer_op.
_UPDATE_DEFAULTS: dict[str, tuple[tuple[str, ...], dict[str, float | None]]] = {
    "sgd_update": ((), {"lr": None, "wd": 0.0, "rescale_grad": 1.0, "clip_gradient": -1.0}),
    "sgd_mom_update": (("mom",), {"lr": None, "momentum": 0.0, "wd": 0.0, "rescale_grad": 1.0, "clip_gradient": -1.0}),
    "nag_mom_update": (("mom",), {"lr": None, "momentum": 0.0, "wd": 0.0, "rescale_grad": 1.0, "clip_gradient": -1.0}),
    "signsgd_update": ((), {"lr": None, "wd": 0.0, "rescale_grad": 1.0, "clip_gradient": -1.0}),
    "signum_update": (
        ("mom",),
        {"lr": None, "momentum": 0.0, "wd": 0.0, "rescale_grad": 1.0, "clip_gradient": -1.0, "wd_lh": 0.0},
    ),
    "adam_update": (
        ("mean", "var"),
        {"lr": None, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "wd": 0.0, "rescale_grad": 1.0, "clip_gradient": -1.0},
    ),
    "rmsprop_update": (
        ("n",),
        {
            "lr": None,
            "gamma1": 0.95,
            "epsilon": 1e-8,
            "wd": 0.0,
            "rescale_grad": 1.0,
            "clip_gradient": -1.0,
            "clip_weights": -1.0,
        },
    ),
    "rmspropalex_update": (
        ("n", "g", "delta"),
        {
            "lr": None,
            "gamma1": 0.95,
            "gamma2": 0.9,
            "epsilon": 1e-8,
            "wd": 0.0,
            "rescale_grad": 1.0,
            "clip_gradient": -1.0,
            "clip_weights": -1.0,
        },
    ),
    "ftrl_update": (
        ("z", "n"),
        {"lr": None, "lamda1": 0.01, "beta": 1.0, "wd": 0.0, "rescale_grad": 1.0, "clip_gradient": -1.0},
    ),
    "ftml_update": (
        ("d", "v", "z"),
        {"lr": None, "beta1": 0.6, "beta2": 0.999, "epsilon": 1e-8, "t": None, "wd": 0.0, "rescale_grad": 1.0, "clip_grad": -1.0},
    ),
}


def _update_fn(name: str) -> Any:
    op = _ops.OPS[name]
    state_names, defaults = _UPDATE_DEFAULTS[name]

    def fn(weight: NDArray, grad: NDArray, *states: NDArray, out: NDArray | None = None, **kwargs: Any) -> NDArray:
        kwargs.pop("name", None)
        kwargs.pop("lazy_update", None)
        given = list(states) + [kwargs.pop(s) for s in state_names[len(states) :] if s in kwargs]
        if len(given) != len(state_names):
            raise TypeError(f"{name}: needs weight, grad and the states {', '.join(state_names) or '(none)'}")
        unknown = sorted(set(kwargs) - set(defaults))
        if unknown:
            raise TypeError(f"{name}: unknown parameter {unknown[0]!r} (parameters: {', '.join(defaults)})")
        attrs: dict[str, Any] = {}
        for key, default in defaults.items():
            value = kwargs.get(key, default)
            if value is None:
                raise TypeError(f"{name}: the parameter {key!r} is required")
            attrs[key] = float(value)
        inputs = [check_nd(name, x) for x in (weight, grad, *given)]
        return invoke_update(op, inputs, attrs, out=out)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (
        f"MXNet's ``{name}``: the new weight into ``out`` (usually ``weight`` itself); "
        f"the states ({', '.join(state_names) or 'none'}) are updated in place."
    )
    return fn


sgd_update = _update_fn("sgd_update")
sgd_mom_update = _update_fn("sgd_mom_update")
nag_mom_update = _update_fn("nag_mom_update")
signsgd_update = _update_fn("signsgd_update")
signum_update = _update_fn("signum_update")
adam_update = _update_fn("adam_update")
rmsprop_update = _update_fn("rmsprop_update")
rmspropalex_update = _update_fn("rmspropalex_update")
ftrl_update = _update_fn("ftrl_update")
ftml_update = _update_fn("ftml_update")
