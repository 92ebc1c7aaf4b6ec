"""A notebook's code by the name its author knows it by: ``In [3], line 12``, not IPython's file.

IPython compiles each cell under a made-up file name (``/tmp/ipykernel_7/4035412252.py``) and
remembers which execution count it belongs to (``shell.compile.format_code_name``, the name its
own tracebacks print). :func:`cell_site` asks it; ``%load_ext opprof`` registers it with the
profiler (:func:`opprof.profiler.sites.name_sites_with`), so the why-text, the hover and the tables
of any profile built in the kernel name cells as the notebook shows them.
"""

from __future__ import annotations

import re
import sys
from types import FrameType
from typing import Any

__all__ = ["cell_number", "cell_site", "compiled_cell_name", "running_cell"]

_IN = re.compile(r"In ?\[(\d+)\]")


def _shell() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency
        return None
    return get_ipython()


def cell_number(file: str, shell: Any = None) -> int | None:
    """The execution count of the cell IPython compiled into ``file`` (3 for ``In [3]``); None for
    any other file. IPython says it only as its traceback label (``In[3]``), read here once."""
    shell = shell if shell is not None else _shell()
    compiler = getattr(shell, "compile", None)
    named = getattr(compiler, "format_code_name", lambda _: None)(file) if compiler is not None else None
    if not named:
        return None
    m = _IN.fullmatch(str(named[1]))
    return int(m.group(1)) if m else None


def cell_site(file: str, line: int) -> str | None:
    """``In [3], line 12`` for a line of a notebook cell; None for a file that is no cell."""
    number = cell_number(file)
    return None if number is None else f"In [{number}], line {line}"


def running_cell(shell: Any, depth: int = 40) -> int | None:
    """The execution count of the cell running now: the nearest caller whose file is a cell's. (The
    shell's ``execution_count`` is no answer: IPython counts the cell before or after running it,
    by version and by whether it is kept in the history.)"""
    f: FrameType | None = sys._getframe(1)
    for _ in range(depth):
        if f is None:
            return None
        number = cell_number(f.f_code.co_filename, shell)
        if number is not None:
            return number
        f = f.f_back
    return None


def compiled_cell_name(shell: Any, source: str, number: int | None = None) -> str:
    """The file name to compile a ``%%opprof`` cell's body under: IPython's own, registered under
    the running cell's number, or ``number`` (a labelled cell run again by ``--interleave`` keeps
    its own), so :func:`cell_number` and tracebacks know it; else a plain label."""
    compiler = getattr(shell, "compile", None)
    number = number if number is not None else running_cell(shell)
    if compiler is None or number is None:
        return "<opprof-cell>"
    try:
        return str(compiler.cache(source, number))
    except Exception:
        return "<opprof-cell>"
