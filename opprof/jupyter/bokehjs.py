"""BokehJS in the notebook page: jupyter_bokeh's front end calls ``window.Bokeh`` and brings none.

Loaded inline (from the installed bokeh package, so it works offline; the default CDN resources
fail there). Inline BokehJS is about 8 MB of notebook output, so it is emitted once per kernel:
this module's one flag records that.
"""

from __future__ import annotations

__all__ = ["load_bokehjs"]

_loaded = False


def load_bokehjs(once: bool = False) -> bool:
    """Load BokehJS into the notebook page; True if it was emitted.

    ``once``: not again if this kernel already emitted it (``%load_ext opprof`` and every
    ``opprof.timeline()``). Without it, always (``%opprof_init``, after a browser reload).
    """
    global _loaded
    if once and _loaded:
        return False
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency
        return False
    ip = get_ipython()
    if ip is None or getattr(ip, "kernel", None) is None:
        return False
    from bokeh.io import output_notebook
    from bokeh.resources import INLINE

    output_notebook(INLINE, hide_banner=True)
    _loaded = True
    return True
