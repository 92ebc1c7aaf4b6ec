"""A ``%%opprof`` timeline for a notebook that nobody watches while it runs (nbclient, papermill,
nbconvert: the "page" way of :mod:`.bokehjs`), drawn again by whichever Jupyter opens it.

Why not the widget there: a widget's state is saved with the notebook, and a timeline's is ~105 KB
of Bokeh models even for a small cell (three profiled cells made a 409 KB notebook). This output
keeps the trace itself instead, as a compressed ``.opprof`` (a few KB: the engine's edges and the
GIL's thread states included), with the still picture and the summary:

* untrusted, on GitHub, in nbconvert's HTML: the picture and the summary (no script runs);
* trusted, in a Jupyter whose server runs opprof's extension (:mod:`.server`): a short script
  posts the trace to ``<base_url>opprof/render`` and embeds the timeline it answers (zoom, hover,
  the critical path toggle, the tables: everything drawn in the browser; the kernel's controls,
  the filters and the refinement of merged spans on zoom, are the live widget's);
* trusted, where nothing answers: the picture, and a line that says why.

A trace over :data:`MAX_EMBEDDED_BYTES` compressed is not kept: the picture and summary say so.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from ..trace import Trace
from ..trace.text import text_summary
from .pagejs import page_base_url_js

__all__ = ["MAX_EMBEDDED_BYTES", "RENDER_ROUTE", "SavedTimeline"]

#: The server extension's route, under the server's base URL (no leading slash).
RENDER_ROUTE = "opprof/render"
#: A larger trace stays out of the notebook (1M spans compress to ~12 MB): the picture stands.
MAX_EMBEDDED_BYTES = 2 << 20

# Runs in the output's own ``element`` (JupyterLab and Notebook 7 run application/javascript
# with it bound; the classic notebook gives a jQuery object). The picture shows at once, and the
# timeline replaces it when the server answers. The XSRF token is the page's own cookie, which
# the server checks on every POST.
_RENDER_JS = """(function (el) {
  el = el && el.jquery ? el[0] : el;
  if (!el) return;
  var box = document.createElement("div");
  var img = document.createElement("img");
  img.src = "data:image/png;base64," + %(png)s;
  img.style.maxWidth = "100%%";
  var note = document.createElement("div");
  note.style.cssText = "font: 12px sans-serif; color: #666; margin: 2px 0";
  box.appendChild(img);
  box.appendChild(note);
  el.appendChild(box);
  var trace = %(trace)s;
  if (!trace) { note.textContent = %(why)s; return; }
  if (!window.Bokeh || !window.Bokeh.embed) {
    note.textContent = "opprof: BokehJS is not in this page (is opprof's Jupyter server extension enabled? " +
      "`jupyter server extension list`): a still picture.";
    return;
  }
  %(base)s
  var m = document.cookie.match("\\\\b_xsrf=([^;]*)\\\\b");
  var raw = atob(trace), bytes = new Uint8Array(raw.length);
  for (var i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  note.textContent = "opprof: drawing the saved timeline...";
  fetch(base + %(route)s, {
    method: "POST", credentials: "same-origin", body: bytes,
    headers: {"Content-Type": "application/octet-stream", "X-XSRFToken": m ? decodeURIComponent(m[1]) : ""}
  }).then(function (r) {
    if (!r.ok) return r.text().then(function (t) { throw new Error(r.status + " " + t.slice(0, 300)); });
    return r.json();
  }).then(function (item) {
    var target = document.createElement("div");
    box.replaceWith(target);
    return window.Bokeh.embed.embed_item(item, target);
  }).catch(function (e) {
    note.textContent = "opprof: the saved timeline was not drawn (" + e.message + "): a still picture.";
  });
})(typeof element !== "undefined" ? element : null);"""


_TEXT_NOTE = "Open the notebook trusted, in a Jupyter with opprof installed, to draw the interactive timeline."


class SavedTimeline:
    """The output of a ``%%opprof`` cell in a notebook executed where no page watches (see the
    module docstring): ``image/png`` and ``text/plain`` for where no script runs, and the script
    (with the trace) for a trusted page."""

    def __init__(self, trace: Trace, *, width: int = 1000) -> None:
        from ..view.embed import timeline_picture, trace_bytes  # Bokeh's side: when a timeline is asked for

        self.trace = trace
        self.picture = timeline_picture(trace, width=width)
        data = trace_bytes(trace)
        self.embedded = len(data) <= MAX_EMBEDDED_BYTES
        self.trace_b64 = base64.b64encode(data).decode("ascii") if self.embedded else ""
        self.why_not = (
            ""
            if self.embedded
            else f"opprof: this trace ({len(data) / 2**20:.1f} MB compressed) is too large to keep in the notebook "
            f"(over {MAX_EMBEDDED_BYTES >> 20} MB): a still picture. Save it with %%opprof -o FILE.opprof to view it."
        )

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        png = base64.b64encode(self.picture).decode("ascii")
        js = _RENDER_JS % {
            "png": json.dumps(png),
            "trace": json.dumps(self.trace_b64),
            "why": json.dumps(self.why_not),
            "route": json.dumps(RENDER_ROUTE),
            "base": page_base_url_js("/"),
        }
        first = text_summary(self.trace).splitlines()[0]
        return {"application/javascript": js, "image/png": png, "text/plain": f"{first}\n{_TEXT_NOTE}"}
