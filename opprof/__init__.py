"""opprof: see where the time goes inside custom operators of an asynchronous operator engine.

``import opprof as mx`` gives MXNet's imperative API (``mx.nd``, ``mx.autograd``,
``mx.operator``, ``mx.random``, ``mx.profiler``) on a Python dependency engine, so MXNet
custom-operator code runs unchanged.

The package is layered; imports point down only (``make lint`` checks it)::

    cli               the command line
    jupyter, demo     the notebook magics and page; the built-in workload
    dask              profiling a Dask cluster into one trace (optional: loaded on first use)
    view, profiler    the timeline figure and widget; the recorder and mx.profiler
    nd                NDArray, operators, autograd, custom operators
    engine            vars and ops, naive and threaded engines, the Ctrl-C shield
    trace             the model, its analyses, file formats and text (reads no other layer)
"""

from __future__ import annotations

from typing import Any

from . import engine, moved, nd, profiler, trace
from .engine import MXNetError, get_engine, set_engine
from .nd import NDArray, autograd, base, context, operator, random, runtime, test_utils, util
from .nd.context import Context, cpu, current_context, gpu
from .nd.util import use_np_shape
from .profiler import Profiler, profile
from .profiler.ab import compare_functions
from .trace.compare import compare

ndarray = nd

# MXNet's module names (``import mxnet.ndarray as nd``) are these modules.
_MXNET_MODULES = {
    "ndarray": nd,
    "autograd": autograd,
    "operator": operator,
    "random": random,
    "context": context,
    "base": base,
    "test_utils": test_utils,
    "runtime": runtime,
    "util": util,
}
for _name, _module in _MXNET_MODULES.items():
    moved.alias(f"{__name__}.{_name}", _module)
moved.install()

#: Public names whose modules import Bokeh/ipywidgets: loaded on first use, so `import opprof`
#: stays light (and works without a display stack) for code that only profiles.
_LAZY = {"timeline": ("opprof.jupyter", "timeline"), "save_html": ("opprof.view", "save_html")}
#: Subpackages loaded on first use: ``opprof.dask`` needs the optional ``distributed``.
_LAZY_MODULES = {"dask": "opprof.dask"}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    if name in _LAZY_MODULES:
        import importlib

        try:
            return importlib.import_module(_LAZY_MODULES[name])
        except ModuleNotFoundError as e:
            if e.name not in ("distributed", "dask"):
                raise
            raise AttributeError(f"opprof.{name} needs Dask's distributed: pip install 'opprof[dask]' ({e})") from None
    raise AttributeError(f"module 'opprof' has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "Context",
    "MXNetError",
    "NDArray",
    "Profiler",
    "__version__",
    "autograd",
    "compare",
    "compare_functions",
    "base",
    "context",
    "cpu",
    "current_context",
    "engine",
    "get_engine",
    "gpu",
    "nd",
    "ndarray",
    "operator",
    "profile",
    "profiler",
    "random",
    "runtime",
    "save_html",
    "set_engine",
    "test_utils",
    "timeline",
    "trace",
    "use_np_shape",
    "util",
]


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext opprof``: register ``%%opprof``, ``%opprof_view``, ``%opprof_init``; load BokehJS."""
    from .jupyter import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .jupyter import unload_ipython_extension as unload

    unload(ipython)
