"""The Jupyter server extension: serves the installed Bokeh's own BokehJS files to the page.

jupyter_bokeh's front end draws with ``window.Bokeh`` and brings none, so something must put
BokehJS in the page. Inline, that is 2-4 MB of JavaScript saved in every notebook that shows a
timeline; from the CDN, it fails offline. Served by the Jupyter server from the bokeh package
installed beside it, the notebook keeps only a loader of about 2 KB (:mod:`.bokehjs`), and the
files stay offline and exactly the version the package is.

``pip install opprof`` enables it: the wheel puts ``etc/jupyter/jupyter_server_config.d/opprof.json``
into the environment (``jupyter server extension list`` shows it). URLs carry the Bokeh version
(``<base_url>opprof/bokehjs/<version>/js/bokeh.min.js``), so a kernel whose bokeh differs from
the server's finds nothing there and falls back to inline BokehJS instead of loading a mismatch
(the two halves of Bokeh must be the same release), and browsers may cache the files for good.

It also draws saved timelines (``POST <base_url>opprof/render``, :mod:`.saved`): a notebook executed
where no page watched keeps each ``%%opprof`` cell's trace, not a widget's 105 KB of Bokeh state,
and its page posts the trace here to get the timeline back as a ``json_item``. Authenticated and
XSRF-checked like the server's own API; the body is read as a ``.opprof`` file by opprof's reader
(data only, its inflation bounded) and refused past :data:`MAX_RENDER_BYTES`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from .saved import MAX_EMBEDDED_BYTES, RENDER_ROUTE

__all__ = ["BOKEHJS_FILES", "MAX_RENDER_BYTES", "bokehjs_route"]

#: What the timeline needs: BokehJS, its WebGL backend, widgets (the toggle) and tables (the stats
#: table). Not bokeh-mathjax (1.8 MB, for LaTeX in labels, which the timeline never draws).
BOKEHJS_FILES = ("bokeh.min.js", "bokeh-gl.min.js", "bokeh-widgets.min.js", "bokeh-tables.min.js")

_YEAR_S = 365 * 24 * 3600
#: A body past twice what a saved output keeps (:data:`.saved.MAX_EMBEDDED_BYTES`) is not one.
MAX_RENDER_BYTES = 2 * MAX_EMBEDDED_BYTES


def bokehjs_route(version: str) -> str:
    """The path, under the server's base URL, of this Bokeh version's files (no leading slash)."""
    return f"opprof/bokehjs/{version}/js/"


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "opprof.jupyter.server"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    import bokeh
    from bokeh.util.paths import bokehjs_path
    from jupyter_server.base.handlers import FileFindHandler, JupyterHandler
    from jupyter_server.utils import url_path_join
    from tornado.web import HTTPError, authenticated

    class BokehJSFiles(FileFindHandler):
        """The four files above and nothing else from Bokeh's static dir; public library code, so
        unauthenticated (a ``<script>`` or XHR from the page needs no token). A Jupyter handler,
        as the server's own static files are: its host check (a request whose Host is not local
        is refused, against DNS rebinding) and its security headers (Content-Security-Policy,
        X-Content-Type-Options) apply here too, which tornado's plain StaticFileHandler skipped."""

        def validate_absolute_path(self, root: str, absolute_path: str) -> str | None:
            if self.path_args and self.path_args[0] not in BOKEHJS_FILES:
                raise HTTPError(404)
            return super().validate_absolute_path(root, absolute_path)

        def get_cache_time(self, path: str, modified: Any, mime_type: str) -> int:
            return _YEAR_S  # the URL names the version: these bytes never change

    class RenderSaved(JupyterHandler):
        """A saved trace (the body, ``.opprof`` bytes) drawn as the timeline's ``json_item``."""

        @authenticated
        async def post(self) -> None:
            body = self.request.body
            if not body or len(body) > MAX_RENDER_BYTES:
                raise HTTPError(413 if body else 400, f"a saved trace is 1 byte to {MAX_RENDER_BYTES:,} bytes")
            # The drawing takes ~0.1-1 s of CPU: off the server's event loop.
            try:
                item = await asyncio.get_running_loop().run_in_executor(None, _render, body)
            except ValueError as e:  # the reader's words, as text the page shows
                self.set_status(400)
                self.set_header("Content-Type", "text/plain; charset=utf-8")
                self.finish(str(e))
                return
            self.set_header("Content-Type", "application/json")
            self.finish(item)

    web_app = serverapp.web_app
    base = web_app.settings.get("base_url", "/")
    pattern = url_path_join(base, bokehjs_route(bokeh.__version__), "(.*)")
    web_app.add_handlers(
        ".*$",
        [
            (pattern, BokehJSFiles, {"path": str(bokehjs_path() / "js")}),
            (url_path_join(base, RENDER_ROUTE), RenderSaved),
        ],
    )
    serverapp.log.info("opprof: serving BokehJS %s at %s", bokeh.__version__, pattern[: -len("(.*)")])


def _render(body: bytes) -> bytes:
    """The timeline of a saved trace as JSON bytes; ValueError (with the reader's words) for a bad one."""
    from ..trace import TraceFormatError
    from ..view.embed import timeline_item, trace_from_bytes

    try:
        trace = trace_from_bytes(body)
    except TraceFormatError as e:
        raise ValueError(f"not a saved opprof trace: {e}") from None
    return json.dumps(timeline_item(trace)).encode()


# The name jupyter_server looks for in older releases.
load_jupyter_server_extension = _load_jupyter_server_extension
