"""The notebook experience in a real browser: the quickstart's timeline, light notebooks, a reload
that redraws, the still picture where the widget cannot run, one refinement per zoom (Notebook 7:
tests/e2e/test_live_browser.py runs its live view and full timeline there too).

One JupyterLab server for the session (``lab_server`` in conftest: it also serves Notebook 7's
``/notebooks/`` pages); headless Debian Chromium. Each test asserts a behaviour, never a time.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import nbformat
import pytest

import benchmarks.page_js as js
from benchmarks.notebook import write_notebook

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

NOTEBOOKS = Path(__file__).parents[2] / "notebooks"

SMALL_CELL = """%%opprof
import time
import opprof as mx


class Sleepy(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        time.sleep(0.002)
        self.assign(out_data[0], req[0], in_data[0] + 1)


@mx.operator.register("Sleepy")
class SleepyProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return Sleepy()


x = mx.nd.ones((10, 10))
for _ in range(20):
    x = mx.nd.Custom(x, op_type="Sleepy")
x.wait_to_read()"""


def _small_notebook(path: Path) -> Path:
    write_notebook(path, ["%load_ext opprof", SMALL_CELL])
    return path


def _run_all(page: Any, url: str) -> None:
    page.goto(url)
    page.wait_for_function(js.KERNEL_IDLE, timeout=90_000)
    page.evaluate(js.RUN_ALL)
    page.wait_for_function(js.ALL_RAN, timeout=150_000, polling=250)
    errors = [o["error"] for o in page.evaluate(js.OUTPUTS) if "error" in o]
    assert errors == [], f"cells raised: {errors}"


def _loader_modes(nb: dict[str, Any]) -> list[str]:
    return [
        o["metadata"]["opprof"]["bokehjs"] for c in nb["cells"] for o in c.get("outputs", []) if "opprof" in o.get("metadata", {})
    ]


def test_the_quickstart_draws_its_timeline_stays_light_and_comes_back_after_a_reload(
    lab_server: Any, chromium_page: Any, tmp_path: Path
) -> None:
    page, console, page_errors = chromium_page
    page.set_viewport_size({"width": 1600, "height": 1000})
    shutil.copy(NOTEBOOKS / "01-quickstart.ipynb", lab_server.root / "light.ipynb")
    _run_all(page, f"{lab_server.url}/lab/tree/light.ipynb?reset")
    page.wait_for_function(js.painted_timeline(), timeout=30_000)
    text = "".join(o.get("text", "") for o in page.evaluate(js.OUTPUTS))
    assert "opprof:" in text and "custom-op calls" in text  # the magic's summary line printed
    tl = page.evaluate(js.TIMELINE)
    assert tl["widget"] and tl["in_cell"] and tl["colors"] > 3, f"the timeline looks wrong: {tl}"

    # The critical-path toggle: the outline shows at once (in the browser); the path itself is
    # computed by the kernel on that first click and arrives as data.
    outline = """() => { const m = Bokeh.documents.map((d) => d.get_model_by_name("critical_path_outline")).find(Boolean);
                         return m ? m.visible : null; }"""
    path_rows = """() => { const m = Bokeh.documents.map((d) => d.get_model_by_name("critical_path")).find(Boolean);
                           return m ? m.data.span.length : -1; }"""
    assert page.evaluate(outline) is False and page.evaluate(path_rows) == 0
    page.evaluate("() => window.__opprof_tl().canvas_view.primary.canvas.scrollIntoView({block: 'center'})")
    page.get_by_role("button", name="critical path").first.click()
    page.wait_for_function(f"() => ({outline})() === true", timeout=10_000)
    page.wait_for_function(f"() => ({path_rows})() > 0", timeout=30_000)
    page.evaluate("() => window.__opprof_tl().canvas_view.primary.canvas.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(300)
    page.screenshot(path=str(tmp_path / "jupyterlab-timeline.png"))

    page.evaluate(js.SAVE)
    page.wait_for_timeout(500)
    saved = json.loads((lab_server.root / "light.ipynb").read_text())
    size = (lab_server.root / "light.ipynb").stat().st_size
    # The server extension served BokehJS: the notebook keeps a loader of ~2 KB, not megabytes.
    assert _loader_modes(saved) == ["served"], _loader_modes(saved)
    assert size < 300_000, f"executed quickstart is {size:,} bytes"
    print(f"\nexecuted quickstart saved from JupyterLab: {size:,} bytes")
    pictures = [o for c in saved["cells"] for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert pictures and all(len(o["data"]["image/png"]) < 100_000 for o in pictures)

    # A reload with the kernel alive: the loader runs first (synchronously), then the widget manager
    # restores the live widgets; nothing is re-run.
    page.reload()
    page.wait_for_function(js.KERNEL_IDLE, timeout=90_000)
    page.wait_for_function(js.painted_timeline(), timeout=60_000, polling=250)
    prompts = page.evaluate("() => [...document.querySelectorAll('.jp-InputArea-prompt')].map((p) => p.textContent)")
    assert not any("*" in p for p in prompts), "a cell ran again after the reload"
    # SlickGrid (Bokeh's DataTable) throws this when a restored table is sized before JupyterLab
    # attaches its output to the page; the table draws once attached. Anything else is a failure.
    assert [e for e in page_errors if "SlickGrid Cannot find stylesheet" not in e] == [], page_errors
    bad = [t for kind, t in console if kind == "error" and ("bokeh" in t.lower() or "widget" in t.lower())]
    assert bad == [], bad


def _several_cells(n: int) -> list[str]:
    """``%load_ext opprof`` and ``n`` profiled cells, each with a custom op of its own."""
    return ["%load_ext opprof"] + [
        SMALL_CELL.replace('"Sleepy"', f'"Sleepy{k}"').replace("Sleepy(", f"Sleepy{k}(") for k in range(n)
    ]


def _executed_elsewhere(path: Path, n: int) -> Any:
    """A notebook of ``n`` profiled cells executed by nbclient (as CI and docs builds do: no page)."""
    from nbclient import NotebookClient

    write_notebook(path, _several_cells(n))
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=180, kernel_name="python3").execute()
    return nb


# Every %%opprof cell's output holds a painted Bokeh figure: [(cell index, painted pixels)].
_SAVED_TIMELINES = """() => {
  const nb = window.jupyterapp.shell.currentWidget.content;
  const cells = nb.model.toJSON().cells;
  const out = [];
  const views = [];
  const stack = [...((window.Bokeh && Bokeh.index) || [])];
  while (stack.length) {
    const v = stack.pop();
    const title = v.model.title && String(v.model.title.text);
    if (v.model.type === "Figure" && v.canvas_view && title && title.startsWith("opprof timeline")) views.push(v);
    stack.push(...(v.child_views ?? []));
  }
  cells.forEach((c, k) => {
    if (![].concat(c.source).join("").startsWith("%%opprof")) return;
    const area = nb.widgets[k].node.querySelector(".jp-OutputArea");
    const inside = (v) => {
      for (let n = v.canvas_view.primary.canvas; n; n = n.parentNode || n.host) if (area.contains(n)) return true;
      return false;
    };
    const v = views.find(inside);
    if (!v) { out.push([k, 0]); return; }
    const c2 = v.canvas_view.primary.canvas, d = c2.getContext("2d").getImageData(0, 0, c2.width, c2.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 16) if (d[i + 3] > 0 && (d[i] < 235 || d[i + 1] < 235 || d[i + 2] < 235)) n++;
    out.push([k, n]);
  });
  return out;
}"""


def test_a_notebook_executed_elsewhere_is_light_shows_the_picture_untrusted_and_the_timelines_trusted(
    lab_server: Any, chromium_page: Any, tmp_path: Path
) -> None:
    """Executed by nbclient (as CI and docs builds do; no Jupyter server, no page): four
    ``%%opprof`` cells, and the notebook stays under 300 KB (BokehJS inline made one cell 2.3 MB;
    the widgets' saved state made three cells 409 KB). It keeps each cell's trace, not a widget.
    Opened in JupyterLab untrusted: no script runs, the still pictures and the summary show.
    Trusted, with opprof's server extension answering: each cell's saved trace is drawn by the
    server into an interactive timeline, with nothing re-run."""
    from nbformat.sign import NotebookNotary

    page, _console, page_errors = chromium_page
    page.set_viewport_size({"width": 1600, "height": 1000})
    nb = _executed_elsewhere(tmp_path / "elsewhere.ipynb", 4)
    assert _loader_modes(nb) == ["page"], _loader_modes(nb)
    assert not nb.metadata.get("widgets"), "a widget's state was saved"
    for cell in nb.cells[1:]:
        png = next(base64.b64decode(o["data"]["image/png"]) for o in cell.outputs if "image/png" in o.get("data", {}))
        assert len(png) < 60_000
    target = lab_server.root / "elsewhere.ipynb"
    nbformat.write(nb, target)
    size = target.stat().st_size
    assert size <= 300_000, f"a notebook executed by nbclient weighs {size:,} bytes"
    print(f"\nexecuted by nbclient, 4 %%opprof cells: {size:,} bytes")

    page.goto(f"{lab_server.url}/lab/tree/elsewhere.ipynb?reset")
    page.wait_for_function(js.KERNEL_IDLE, timeout=90_000)
    picture = """() => {
      const panel = window.jupyterapp.shell.currentWidget;
      const cell = panel && panel.content && panel.content.widgets[1];
      const out = cell && cell.node.querySelector(".jp-OutputArea");
      const img = out && out.querySelector("img");
      return img && img.complete ? {w: img.naturalWidth, h: img.naturalHeight, text: out.innerText} : null;
    }"""
    try:
        page.wait_for_function(f"() => !!({picture})()", timeout=30_000)
    except Exception:
        page.screenshot(path=str(tmp_path / "elsewhere.png"))
        raise
    shown = page.evaluate(picture)
    assert shown["w"] >= 500 and shown["h"] >= 60, shown
    assert "opprof:" in shown["text"] and "custom-op calls" in shown["text"], shown["text"][:500]
    assert page.evaluate("() => !window.Bokeh"), "an untrusted notebook ran BokehJS"

    # Trusted (signed in this server's notary, as `jupyter trust` does), then opened again.
    shutil.copy(target, lab_server.root / "trusted.ipynb")
    NotebookNotary(data_dir=str(lab_server.root.parent / "jupyter-data")).sign(
        nbformat.read(lab_server.root / "trusted.ipynb", as_version=4)
    )
    page.goto(f"{lab_server.url}/lab/tree/trusted.ipynb?reset")
    page.wait_for_function(js.KERNEL_IDLE, timeout=90_000)
    drawn = f"() => {{ const d = ({_SAVED_TIMELINES})(); return d.length === 4 && d.every(([, n]) => n > 500); }}"
    try:
        page.wait_for_function(drawn, timeout=60_000, polling=250)
    except Exception:
        page.screenshot(path=str(tmp_path / "trusted.png"))
        raise AssertionError(f"not every saved timeline was drawn: {page.evaluate(_SAVED_TIMELINES)}") from None
    # The server computed the exact critical path: the toggle says so, and shows it without a kernel.
    labels = page.evaluate(
        "() => Bokeh.documents.flatMap((d) => [...d.all_models]).filter((m) => m.type === 'Toggle').map((m) => m.label)"
    )
    assert labels == ["critical path"] * 4, labels
    prompts = page.evaluate("() => [...document.querySelectorAll('.jp-InputArea-prompt')].map((p) => p.textContent)")
    assert not any("*" in p for p in prompts), "a cell ran again"
    assert [e for e in page_errors if "SlickGrid Cannot find stylesheet" not in e] == [], page_errors
    page.screenshot(path=str(tmp_path / "trusted.png"))


def test_a_zoom_costs_one_refinement_sent_as_one_patch(lab_server: Any, chromium_page: Any) -> None:
    """A wheel zoom in the real widget: the kernel refines once, from one RangesUpdate, and sends
    the redraw as one PATCH-DOC; the refined rectangles arrive in the page."""
    page, _console, page_errors = chromium_page
    page.set_viewport_size({"width": 1600, "height": 1000})
    setup = "import opprof\nfrom opprof.trace.synthetic import synthetic_trace\ntr = synthetic_trace(150_000)"
    show = "w = opprof.timeline(tr, title='opprof timeline zoom')\nw"
    write_notebook(lab_server.root / "zoom.ipynb", ["%load_ext opprof", setup, show])
    _run_all(page, f"{lab_server.url}/lab/tree/zoom.ipynb?reset")
    title = "opprof timeline zoom"
    page.wait_for_function(f"(t) => ({js.PAINTED})(t)", arg=title, timeout=60_000)
    page.wait_for_timeout(1000)  # BokehJS's first-render range report (no refinement: tested in Python)
    counts = "print(w.refinements, w.bokeh.patches_sent)"
    before = [int(x) for x in page.evaluate(js.EXEC, counts).split()]
    box = page.evaluate(js.CANVAS_BOX, title)
    page.evaluate(js.ARM, title)
    page.mouse.move(box["x"] + box["w"] * 0.6, box["y"] + box["h"] * 0.4)
    page.mouse.wheel(0, -1200)
    assert page.evaluate(js.AWAIT_REFINED, 30_000) > 0, "the refined spans never reached the page"
    page.wait_for_function(js.KERNEL_IDLE, timeout=30_000)
    page.wait_for_timeout(500)
    after = [int(x) for x in page.evaluate(js.EXEC, counts).split()]
    assert after[0] - before[0] == 1, (before, after)  # one refinement
    assert after[1] - before[1] == 1, (before, after)  # sent as one PATCH-DOC (three comm messages)
    assert page_errors == [], page_errors


def test_the_bokehjs_route_keeps_jupyters_host_check_and_security_headers(lab_server: Any) -> None:
    """The server extension's four files come with Jupyter's own protections: a request whose Host
    is not local is refused (DNS rebinding), responses carry its security headers, and nothing but
    the four files is served."""
    import http.client
    from urllib.parse import urlsplit

    import bokeh

    from opprof.jupyter.server import BOKEHJS_FILES, bokehjs_route

    url = urlsplit(lab_server.url)
    path = f"{url.path.rstrip('/')}/{bokehjs_route(bokeh.__version__)}"

    def get(name: str, host: str | None = None) -> tuple[int, dict[str, str]]:
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=20)
        try:
            conn.request("GET", path + name, headers={"Host": host} if host else {})
            r = conn.getresponse()
            r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}
        finally:
            conn.close()

    status, headers = get(BOKEHJS_FILES[0])
    assert status == 200
    assert "content-security-policy" in headers and headers.get("x-content-type-options") == "nosniff"
    assert get(BOKEHJS_FILES[0], host=f"rebind.example.com:{url.port}")[0] == 403
    assert get("bokeh-mathjax.min.js")[0] == 404  # in Bokeh's static dir, but not one of the four


# A POST to the render route from the logged-in page: resolves to [status, first 300 characters].
_POST_RENDER = """async ([body, xsrf]) => {
  const m = document.cookie.match(/\\b_xsrf=([^;]*)\\b/);
  const headers = {"Content-Type": "application/octet-stream"};
  if (xsrf && m) headers["X-XSRFToken"] = decodeURIComponent(m[1]);
  const r = await fetch("/opprof/render", {method: "POST", credentials: "same-origin", headers, body: new Uint8Array(body)});
  return [r.status, (await r.text()).slice(0, 300)];
}"""


def test_saved_timelines_draw_on_a_server_with_a_token_and_xsrf_checks(chromium_page: Any, tmp_path: Path) -> None:
    """The server as users run it (a token to log in, XSRF checks on): the saved timeline is drawn
    in JupyterLab and in Notebook 7, and the render route refuses a POST without the page's XSRF
    token, an unauthenticated one, a body that is no trace (saying why) and one too large."""
    import urllib.error
    import urllib.request

    from nbformat.sign import NotebookNotary

    from benchmarks.jupyter import start_server
    from opprof.jupyter.server import MAX_RENDER_BYTES

    page, _console, page_errors = chromium_page
    server = start_server(tmp_path / "secure", token="opprof-e2e-token")
    try:
        nb = _executed_elsewhere(tmp_path / "one.ipynb", 1)
        target = server.root / "one.ipynb"
        nbformat.write(nb, target)
        NotebookNotary(data_dir=str(tmp_path / "secure" / "jupyter-data")).sign(nbformat.read(target, as_version=4))
        drawn = f"() => {{ const d = ({_SAVED_TIMELINES})(); return d.length === 1 && d[0][1] > 500; }}"
        for where in ("lab/tree", "notebooks"):
            page.goto(f"{server.url}/{where}/one.ipynb?token={server.token}")
            page.wait_for_function(js.KERNEL_IDLE, timeout=90_000)
            try:
                page.wait_for_function(drawn, timeout=60_000, polling=250)
            except Exception:
                page.screenshot(path=str(tmp_path / f"secure-{where.replace('/', '-')}.png"))
                raise AssertionError(f"{where}: the saved timeline was not drawn: {page.evaluate(_SAVED_TIMELINES)}") from None

        assert page.evaluate(_POST_RENDER, [[1, 2, 3], False])[0] == 403  # no XSRF token
        status, text = page.evaluate(_POST_RENDER, [[1, 2, 3], True])
        assert status == 400 and "not a saved opprof trace" in text, (status, text)
        status, _ = page.evaluate(_POST_RENDER, [[0] * (MAX_RENDER_BYTES + 1), True])
        assert status == 413
        anonymous = urllib.request.Request(f"{server.url}/opprof/render", data=b"x", method="POST")
        try:
            urllib.request.urlopen(anonymous, timeout=10)
            raise AssertionError("an unauthenticated POST was answered")
        except urllib.error.HTTPError as e:
            assert e.code == 403, e.code
        # Notebook 7's own errors (tests/e2e/test_live_browser.py sees them too), and SlickGrid's (above).
        known = ("reading 'schema'", "'filebrowser:open-path' not registered", "SlickGrid Cannot find stylesheet")
        assert [e for e in page_errors if not any(k in e for k in known)] == [], page_errors
    finally:
        server.stop()
