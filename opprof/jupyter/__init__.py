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
    from ..profiler.sites import name_sites_with
    from .cells import cell_site
    from .magics import OpprofMagics

    ipython.register_magics(OpprofMagics)
    name_sites_with(cell_site)  # the traces' lines name notebook cells as In [3], line 12
    if getattr(ipython, "kernel", None) is not None:  # a notebook, not terminal IPython
        load_bokehjs(once=True)


def unload_ipython_extension(ipython: Any) -> None:
    from ..profiler.sites import name_sites_with

    name_sites_with(None)
    magics = ipython.magics_manager.magics
    magics["cell"].pop("opprof", None)
    magics["line"].pop("opprof_view", None)
    magics["line"].pop("opprof_init", None)
