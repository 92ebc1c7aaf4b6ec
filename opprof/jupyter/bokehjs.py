"""BokehJS in the notebook page: jupyter_bokeh's front end calls ``window.Bokeh`` and brings none.

Two ways, chosen by looking, not assuming:

* **served** (about 2 KB in the notebook): the kernel's own Jupyter server runs opprof's server
  extension (:mod:`.server`) with the same Bokeh release; the page then fetches BokehJS from it.
  The loader fetches synchronously so that ``window.Bokeh`` exists before any widget view is made,
  which is what lets timelines come back after a page reload: the trusted loader output runs
  again first, then the widget manager restores the live widgets from the kernel.
* **page** (the same 2 KB loader): no Jupyter server started this kernel (nbclient, papermill,
  nbconvert: CI and docs builds). Nothing shows the notebook now; whoever opens it later does, in
  the page of *their* Jupyter, whose base URL the loader reads from the page itself. A notebook
  executed that way stays light (an executed quickstart was 2.3 MB with BokehJS inline, 21 KB of
  it the notebook's own), shows the still picture and summary where no script runs (untrusted,
  GitHub), and draws its timelines again where opprof's server extension answers.
* **inline** (about 2.1 MB, once per kernel): a front end that is no Jupyter page (VS Code: no
  server extension can answer there), a server in another environment or with another Bokeh.
  Offline either way: the default CDN resources fail there.

``OPPROF_BOKEHJS`` = ``served`` / ``page`` / ``inline`` / ``auto`` (default) overrides the choice.
"""

from __future__ import annotations

import json
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .pagejs import page_base_url_js
from .server import BOKEHJS_FILES, bokehjs_route

__all__ = ["BokehJSSource", "bokehjs_source", "load_bokehjs", "unwatched"]

_loaded = False
_source: BokehJSSource | None = None  # what this kernel chose, once it chose
_PROBE_TIMEOUT_S = 2.0  # a local server answers a HEAD in milliseconds; a hung one must not hang the kernel


@dataclass(frozen=True)
class BokehJSSource:
    """How the page gets BokehJS: ``mode`` "served" (with the server's ``base_url``), "page" (from
    whichever Jupyter page opens the notebook) or "inline"."""

    mode: str
    base_url: str = "/"
    reason: str = ""


def _kernel_server() -> dict[str, object] | None:
    """The running Jupyter server that started this kernel (its ``jpserver-<pid>.json``), if any."""
    try:
        from jupyter_core.paths import jupyter_runtime_dir
    except ImportError:  # pragma: no cover - ipykernel depends on jupyter_core
        return None
    path = Path(jupyter_runtime_dir()) / f"jpserver-{os.getppid()}.json"
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def _served_here(info: dict[str, object], version: str) -> bool:
    """Whether that server serves this Bokeh release's files (one HEAD request)."""
    url = str(info.get("url", "")).rstrip("/") + "/" + bokehjs_route(version) + BOKEHJS_FILES[0]
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=_PROBE_TIMEOUT_S) as r:
            return bool(r.status == 200)
    except (OSError, ValueError):
        return False


def _in_vscode() -> bool:
    """Whether VS Code started this kernel (it passes its own environment on to the kernels it starts)."""
    return any(k in os.environ for k in ("VSCODE_PID", "VSCODE_CWD", "VSCODE_IPC_HOOK", "VSCODE_NLS_CONFIG"))


def bokehjs_source() -> BokehJSSource:
    """Where this kernel's page can get BokehJS (see the module docstring)."""
    import bokeh

    choice = os.environ.get("OPPROF_BOKEHJS", "auto").strip().lower()
    if choice == "inline":
        return BokehJSSource("inline", reason="OPPROF_BOKEHJS=inline")
    if choice == "page":
        return BokehJSSource("page", reason="OPPROF_BOKEHJS=page")
    info = _kernel_server()
    if info is None:
        if _in_vscode() and choice != "served":
            return BokehJSSource("inline", reason="VS Code runs this kernel: its pages have no Jupyter server to serve BokehJS")
        if choice != "served":
            return BokehJSSource("page", reason="no Jupyter server started this kernel: the page that opens it serves BokehJS")
        reason = "no Jupyter server started this kernel"
    elif _served_here(info, bokeh.__version__):
        return BokehJSSource("served", str(info.get("base_url", "/")), f"served by the Jupyter server at {info.get('url')}")
    else:
        reason = f"the Jupyter server at {info.get('url')} does not serve BokehJS {bokeh.__version__} (opprof's server extension)"
    if choice == "served":  # asked for, not found: still served, the page may know better
        return BokehJSSource("served", str((info or {}).get("base_url", "/")), f"OPPROF_BOKEHJS=served ({reason})")
    return BokehJSSource("inline", reason=reason)


#: Run after BokehJS loads. jupyter_bokeh's front end sends the kernel every change of its
#: document, also those it has just applied from the kernel (BokehJS marks them ``sync=false``;
#: Bokeh's own server client skips them, jupyter_bokeh does not): each refinement at 1M spans
#: came back as ~300 KB of its own columns, serialised on the page's main thread before the
#: repaint. Here document listeners get only synced events, as Bokeh's server client does itself.
_SYNC_ONLY_JS = """
(function () {
  var D = window.Bokeh && window.Bokeh.require && window.Bokeh.require("document").Document;
  if (!D || D.prototype.__opprof_sync_only) return;
  var on_change = D.prototype.on_change, remove = D.prototype.remove_on_change, wrapped = new WeakMap();
  D.prototype.on_change = function (callback, allow_batches) {
    if (!wrapped.has(callback)) {
      wrapped.set(callback, function (event) {
        if (event.sync === false) return;  // applied from the kernel: not news to it
        return callback(event);
      });
    }
    return on_change.call(this, wrapped.get(callback), allow_batches);
  };
  D.prototype.remove_on_change = function (callback) {
    return remove.call(this, wrapped.get(callback) || callback);
  };
  D.prototype.__opprof_sync_only = true;
})();
"""


def _served_loader(version: str, base_url: str) -> str:
    """The page-side loader: the server's base URL from the page itself (the notebook may be
    opened from another server later), then each file fetched and run in order, synchronously."""
    files = json.dumps([bokehjs_route(version) + f for f in BOKEHJS_FILES])
    return (
        f"""(function () {{
  if (window.Bokeh && window.Bokeh.version === {json.dumps(version)}) return;
  {page_base_url_js(base_url)}
  var files = {files};
  for (var i = 0; i < files.length; i++) {{
    var xhr = new XMLHttpRequest();
    xhr.open("GET", base + files[i], false);
    try {{ xhr.send(); }} catch (e) {{}}
    if (xhr.status !== 200) {{
      console.error("opprof: BokehJS is not served at " + base + files[i] +
        " (is opprof's Jupyter server extension enabled? `jupyter server extension list`)");
      return;
    }}
    var s = document.createElement("script");
    s.text = xhr.responseText;
    document.head.appendChild(s);
  }}
}})();"""
        + _SYNC_ONLY_JS
    )


def _inline_loader() -> str:
    """The installed BokehJS itself, the same four files (not MathJax), as one script."""
    from bokeh.util.paths import bokehjs_path

    js = bokehjs_path() / "js"
    return "\n;\n".join((js / f).read_text(encoding="utf-8") for f in BOKEHJS_FILES) + "\n;\n" + _SYNC_ONLY_JS


def _in_kernel() -> bool:
    """Whether this is a kernel's shell (ipykernel's), with a page, now or later, to show output in."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


def unwatched() -> bool:
    """Whether no page watches this kernel run: the "page" way, where the notebook is drawn later by
    whoever opens it (:mod:`.saved` keeps the trace, not a widget, for them). Never outside a
    kernel (terminal IPython), where nothing is saved."""
    global _source
    if not _in_kernel():
        return False
    if _source is None:
        _source = bokehjs_source()
    return _source.mode == "page"


def load_bokehjs(once: bool = False) -> bool:
    """Load BokehJS into the notebook page; True if a loader was emitted.

    ``once``: not again if this kernel already emitted it (``%load_ext opprof`` and every
    ``opprof.timeline()``). Without it, always (``%opprof_init``: a page that lost it, e.g. a
    notebook reopened untrusted and then trusted).
    """
    global _loaded, _source
    if once and _loaded:
        return False
    if not _in_kernel():
        return False
    import bokeh
    from IPython.display import publish_display_data

    source = _source = bokehjs_source()
    js = _inline_loader() if source.mode == "inline" else _served_loader(bokeh.__version__, source.base_url)
    # One MIME type, not Bokeh's two copies (application/javascript and bokehjs_load): every
    # front end that runs jupyter_bokeh (JupyterLab, Notebook 7, classic) runs application/javascript.
    publish_display_data({"application/javascript": js}, metadata={"opprof": {"bokehjs": source.mode}})
    _loaded = True
    return True
