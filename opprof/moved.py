"""Import paths that moved when opprof became layered subpackages, and MXNet's own module names.

MXNet code imports ``mxnet.ndarray``, ``mxnet.autograd``, ``mxnet.operator``...: those names keep
working as aliases of the modules that now hold them. opprof's own flat modules of 0.1
(``opprof.chrome``, ``opprof.widget``, ...) fail with a message naming their new home, rather than
with a bare "No module named" or a half-compatible copy.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from types import ModuleType

__all__ = ["MOVED", "alias", "install"]

#: Old module -> what to use instead.
MOVED = {
    "opprof.chrome": "opprof.trace (load, from_chrome, Trace.save, Trace.to_chrome, TraceFormatError)",
    "opprof.importer": "opprof.trace (load, from_chrome); MXNet recovery: opprof.trace.mxnet.recover_mxnet",
    "opprof.report": "opprof.trace.text (stats_table, stats_json, summary_line, split_table) and opprof.trace.stats",
    "opprof.synthetic": "opprof.trace.synthetic",
    "opprof.recorder": "opprof.profiler.recorder (or opprof.profiler.Recorder)",
    "opprof.layout": "opprof.view.layout",
    "opprof.widget": "opprof.view.widget (TimelineWidget); opprof.timeline(trace) for the widget in a notebook",
    "opprof.timeline": "opprof.timeline(trace) is a function; the figure is opprof.view (build_timeline, save_html)",
    "opprof.magics": "opprof.jupyter.magics (load it with %load_ext opprof)",
    "opprof.interrupts": "opprof.engine.interrupts",
    "opprof.ops": "opprof.nd.ops",
}


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Last on ``sys.meta_path``: asked only for a module no file provides."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> None:
        new = MOVED.get(fullname)
        if new is not None:
            raise ModuleNotFoundError(f"{fullname} has moved: use {new}", name=fullname)


def install() -> None:
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())


def alias(name: str, module: ModuleType) -> None:
    """Make ``import name`` give ``module`` (as ``os`` does for ``os.path``)."""
    sys.modules.setdefault(name, module)
