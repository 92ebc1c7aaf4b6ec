"""How a user's line is written in a profile: ``file:line``, or a name the front end knows it by.

The recorder keeps each push's and wait's line as ``(file, line)`` and writes it as text when the
trace is built. Code typed into a notebook lives in a file IPython made up
(``/tmp/ipykernel_7/4035412252.py``), which means nothing to the person who typed it: they know
the cell as ``In [3]``. The notebook layer registers a namer (:func:`name_sites_with`) that turns
such a file and line into ``In [3], line 12``; everything else stays ``file:line``. This layer does
not know IPython (the import contracts say so): it only calls what it was given.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["SiteNamer", "name_sites_with", "site_text"]

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
