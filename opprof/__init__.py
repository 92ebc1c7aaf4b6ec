"""opprof: see where the time goes inside custom operators of an asynchronous operator engine.

``import opprof as mx`` gives MXNet's imperative API (``mx.nd``, ``mx.autograd``,
``mx.operator``) on a Python dependency engine, so MXNet custom-operator code runs unchanged.
"""

from __future__ import annotations

from . import autograd, engine, operator, profiler, random, trace
from . import ndarray as nd
from .context import Context, cpu, current_context, gpu
from .engine import get_engine, set_engine
from .ndarray import NDArray
from .profiler import Profiler, profile

ndarray = nd

#: Public names whose modules import Bokeh/ipywidgets: loaded on first use, so `import opprof`
#: stays light (and works without a display stack) for code that only profiles.
_LAZY = {"timeline": ("opprof.widget", "timeline"), "save_html": ("opprof.timeline", "save_html")}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'opprof' has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "Context",
    "NDArray",
    "autograd",
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
    "Profiler",
    "trace",
    "random",
    "save_html",
    "set_engine",
    "timeline",
    "__version__",
]


def load_ipython_extension(ipython: object) -> None:
    """``%load_ext opprof``: register ``%%opprof``, ``%opprof_view``, ``%opprof_init``; load BokehJS."""
    from .magics import OpprofMagics, _load_bokehjs

    ipython.register_magics(OpprofMagics)  # type: ignore[attr-defined]
    if getattr(ipython, "kernel", None) is not None:  # a notebook, not terminal IPython
        _load_bokehjs()


def unload_ipython_extension(ipython: object) -> None:
    magics = ipython.magics_manager.magics  # type: ignore[attr-defined]
    magics["cell"].pop("opprof", None)
    magics["line"].pop("opprof_view", None)
    magics["line"].pop("opprof_init", None)
