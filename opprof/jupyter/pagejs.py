"""JavaScript that opprof's notebook outputs share."""

from __future__ import annotations

import json

__all__ = ["page_base_url_js"]


def page_base_url_js(default: str) -> str:
    """Statements that set ``var base`` to the base URL of the Jupyter page running them, ending in
    ``/`` (``default`` where the page says none): a saved notebook may be opened from another
    server than the one that ran it, so its outputs read the page, not what the kernel knew."""
    return f"""var cfg = document.getElementById("jupyter-config-data");
  var base = {json.dumps(default)};
  try {{ if (cfg) base = JSON.parse(cfg.textContent).baseUrl || base; }} catch (e) {{}}
  if (base.slice(-1) !== "/") base += "/";"""
