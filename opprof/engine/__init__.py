"""The dependency engine: vars, ops, a naive and a threaded engine, and what observers hear.

It knows nothing of NDArrays or the profiler: the layers above push ops, say what an op is in
``Opr.info`` (an :data:`OprInfo`: a custom op's own ops carry a :class:`CustomOpInfo`) and listen
through :class:`EngineObserver`.
"""

from .core import Engine
from .current import bind_thread, bulk, get_engine, make_engine, set_bulk_size, set_engine, use
from .naive import NaiveEngine
from .observer import EngineObserver, Observers
from .opr import INTERNAL, EngineError, MXNetError, Opr, OprInfo, Var, as_mxnet_error
from .state import CustomOpInfo, CustomPart, Invocation, current_invocation
from .threaded import CUSTOM_THREAD_PREFIX, ENGINE_THREAD_PREFIX, MAX_POOL_THREADS, ThreadedEngine

__all__ = [
    "CUSTOM_THREAD_PREFIX",
    "ENGINE_THREAD_PREFIX",
    "INTERNAL",
    "MAX_POOL_THREADS",
    "CustomOpInfo",
    "CustomPart",
    "Engine",
    "EngineError",
    "EngineObserver",
    "Invocation",
    "MXNetError",
    "NaiveEngine",
    "Observers",
    "Opr",
    "OprInfo",
    "ThreadedEngine",
    "Var",
    "as_mxnet_error",
    "bind_thread",
    "bulk",
    "current_invocation",
    "get_engine",
    "make_engine",
    "set_bulk_size",
    "set_engine",
    "use",
]
