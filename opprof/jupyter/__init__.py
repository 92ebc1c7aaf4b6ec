"""The notebook side: ``%load_ext opprof``, the ``%%opprof`` magic, and the widget's page needs.

The only layer (with the command line) that imports IPython: everything below it also runs in a
plain script.
"""

from __future__ import annotations

from typing import Any

from .bokehjs import load_bokehjs
from .widgets import timeline

__all__ = ["load_bokehjs", "load_ipython_extension", "timeline", "unload_ipython_extension"]


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext opprof``: register ``%%opprof``, ``%opprof_view``, ``%opprof_init``; load BokehJS."""
    from ..profiler.sites import add_not_user_code, name_sites_with
    from .cells import cell_site
    from .magics import OpprofMagics

    ipython.register_magics(OpprofMagics)
    name_sites_with(cell_site)  # the traces' lines name notebook cells as In [3], line 12
    add_not_user_code(*_front_end_code())  # a cell's final wait is the cell's line, not the magic's
    if getattr(ipython, "kernel", None) is not None:  # a notebook, not terminal IPython
        load_bokehjs(once=True)


def _front_end_code() -> list[str]:
    """Path prefixes of the code between a notebook cell and opprof: this layer, IPython, ipykernel."""
    import importlib.util
    import os

    prefixes = [os.path.dirname(os.path.abspath(__file__)) + os.sep]
    for name in ("IPython", "ipykernel"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            prefixes.append(os.path.dirname(os.path.abspath(spec.origin)) + os.sep)
    return prefixes


def unload_ipython_extension(ipython: Any) -> None:
    from ..profiler.sites import name_sites_with

    name_sites_with(None)
    magics = ipython.magics_manager.magics
    magics["cell"].pop("opprof", None)
    magics["line"].pop("opprof_view", None)
    magics["line"].pop("opprof_init", None)
