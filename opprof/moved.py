"""Import paths that moved when opprof became layered subpackages, and MXNet's own module names.

MXNet code imports ``mxnet.ndarray``, ``mxnet.autograd``, ``mxnet.operator``...: those names keep
working as aliases of the modules that now hold them. opprof's own flat modules of 0.1
(``opprof.chrome``, ``opprof.widget``, ...) fail with a message naming their new home, rather than
with a bare "No module named" or a half-compatible copy.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

__all__ = ["MOVED", "alias", "install"]

#: Old module -> what to use instead.
MOVED = {
    "opprof.chrome": "opprof.trace (load, from_chrome, Trace.save, Trace.to_chrome, TraceFormatError)",
    "opprof.importer": "opprof.trace (load, from_chrome); MXNet recovery: opprof.trace.formats.mxnet.recover_mxnet",
    "opprof.report": "opprof.trace.text (stats_table, stats_json, summary_line, split_table) and opprof.trace.analysis.stats",
    "opprof.synthetic": "opprof.trace.synthetic",
    "opprof.recorder": "opprof.profiler.recorder (or opprof.profiler.Recorder)",
    "opprof.layout": "opprof.view.layout",
    "opprof.widget": "opprof.view.widget (TimelineWidget); opprof.timeline(trace) for the widget in a notebook",
    "opprof.timeline": "opprof.timeline(trace) is a function; the figure is opprof.view (build_timeline, save_html)",
    "opprof.magics": "opprof.jupyter.magics (load it with %load_ext opprof)",
    "opprof.interrupts": "opprof.engine.interrupts",
    "opprof.ops": "opprof.nd.ops",
    # The trace layer's analyses and formats moved into folders of their own (opprof 0.1's flat trace/).
    "opprof.trace.model": "opprof.trace (Trace, load, from_chrome); the class is in opprof.trace.trace",
    "opprof.trace.replay": "opprof.trace.analysis.whatif (or Trace.what_if)",
    **{f"opprof.trace.{m}": f"opprof.trace.analysis.{m}" for m in ("split", "stats", "causes", "critical", "validate")},
    **{
        f"opprof.trace.{m}": f"opprof.trace.formats.{m}"
        for m in ("jsonio", "chrome", "chrome_fast", "native", "importer", "mxnet")
    },
}


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Last on ``sys.meta_path``: asked only for a module no file provides."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> None:
        new = MOVED.get(fullname)
        if new is not None:
            raise ModuleNotFoundError(f"{fullname} has moved: use {new}", name=fullname)


#: Alias -> the module's real name; names below an alias (``opprof.ndarray.ndarray``) map too.
_ALIASES: dict[str, str] = {}


class _AliasLoader(importlib.abc.Loader):
    """Puts the real module where the alias was asked for (the import system takes what it finds there)."""

    def __init__(self, real: str) -> None:
        self.real = real

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        sys.modules[module.__name__] = importlib.import_module(self.real)


class _AliasFinder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``, for names below an alias: otherwise the path finder would find
    ``opprof/nd/ndarray.py`` again through the alias's ``__path__`` and run it a second time (a
    second NDArray class)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        head = fullname.rpartition(".")[0]
        while head:
            real = _ALIASES.get(head)
            if real is not None:
                return importlib.machinery.ModuleSpec(fullname, _AliasLoader(f"{real}{fullname[len(head) :]}"))
            head = head.rpartition(".")[0]
        return None


def install() -> None:
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())


def alias(name: str, module: ModuleType) -> None:
    """Make ``import name`` (and ``import name.sub``) give ``module`` (as ``os`` does for ``os.path``)."""
    sys.modules.setdefault(name, module)
    _ALIASES[name] = module.__name__
