"""How a user's line is written in a profile: ``file:line``, or a name the front end knows it by.

The recorder keeps each push's and wait's line as ``(file, line)`` and writes it as text when the
trace is built. Code typed into a notebook lives in a file IPython made up
(``/tmp/ipykernel_7/4035412252.py``), which means nothing to the person who typed it: they know
the cell as ``In [3]``. The notebook layer registers a namer (:func:`name_sites_with`) that turns
such a file and line into ``In [3], line 12``; everything else stays ``file:line``. This layer does
not know IPython (the import contracts say so): it only calls what it was given.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from types import CodeType
from typing import Any

__all__ = ["NOT_USER", "SiteNamer", "add_not_user_code", "name_sites_with", "resolve", "site_text"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Where code lives that is not the user's: a push or wait passes through it on its way from the
#: user's line (the recorder walks past it). opprof's own machinery (the demo's and the notebooks'
#: custom ops are user code, though they live in the package), and what a front end adds with
#: :func:`add_not_user_code` (the notebook layer: the magic itself and IPython's frames, so that
#: the wait a ``%%opprof`` cell ends with is that cell's line, not the magic's). Path prefixes.
NOT_USER: tuple[str, ...] = (
    *(os.path.join(_PACKAGE, d) + os.sep for d in ("engine", "nd", "profiler", "gluon")),
    os.path.join(_PACKAGE, "__init__.py"),
    # The standard library's context managers: ``with opprof.profile():`` ends in a wait pushed from
    # contextlib's __exit__, which was named as the line ("before contextlib.py:144"), not the with.
    contextlib.__file__,
)


def add_not_user_code(*prefixes: str) -> None:
    """Walk past code under these path prefixes too, looking for the user's line."""
    global NOT_USER
    NOT_USER = (*NOT_USER, *(p for p in prefixes if p and p not in NOT_USER))


#: ``(file, line) -> text``, or None where it does not know the file.
SiteNamer = Callable[[str, int], "str | None"]

_namer: SiteNamer | None = None


def name_sites_with(namer: SiteNamer | None) -> SiteNamer | None:
    """Use ``namer`` for the lines of traces built from now on (None: ``file:line`` only); returns
    the namer it replaces."""
    global _namer
    previous, _namer = _namer, namer
    return previous


def site_text(file: str, line: int) -> str:
    """A user's line as the trace writes it: the namer's text where it has one, else ``file:line``.
    A namer that fails is not the profile's problem: its line is written plainly."""
    namer = _namer
    if namer is not None:
        try:
            text = namer(file, line)
        except Exception:
            text = None
        if text:
            return text
    return f"{file}:{line}"


def resolve(site: tuple[Any, int]) -> tuple[str, int]:
    """A recorded site as ``(file, line)``: the pure recorder keeps that already; the compiled one
    keeps ``(code, offset)`` (the frame's code and instruction offset, read in C without a frame
    object), whose line is looked up here, once per distinct site, when the trace is built."""
    where, at = site
    if not isinstance(where, CodeType):
        return where, at
    line = next((ln for a, b, ln in where.co_lines() if a <= at < b and ln is not None), where.co_firstlineno)
    return where.co_filename, line
