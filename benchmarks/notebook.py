"""The notebook experience, measured in a real JupyterLab 4 driven by headless Chromium.

``python benchmarks/notebook.py [--spans N] [--repeats R]`` (or the "notebook" section of
``python -m benchmarks``). One JupyterLab server from this venv (opprof's server extension
enabled, as ``pip install`` leaves it); each figure is a median of ``repeats`` rounds:

* saved sizes: the quickstart notebook run and saved from JupyterLab; a notebook of five
  ``%%opprof`` cells;
* a 1M-span trace: from the moment the cell is run to the first painted timeline; a wheel zoom
  in, a drag pan and a wheel zoom out, each to the repaint of the refined spans, with the number
  of refinements each caused (the kernel's ``TimelineWidget.refinements``); the kernel's RSS
  holding that widget;
* the live view: how long after a span ends it is in the page while the cell still runs (the
  page samples the live figure's sources every 50 ms, against the recording's own clock).

Times come from the page's clock (``performance.now()``), gestures from playwright's mouse.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import benchmarks.page_js as js
    from benchmarks.common import Row, print_rows, progress
    from benchmarks.jupyter import chromium, start_server
except ImportError:  # run as a script: python benchmarks/notebook.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import benchmarks.page_js as js
    from benchmarks.common import Row, print_rows, progress
    from benchmarks.jupyter import chromium, start_server

__all__ = ["live_run", "measure", "rows", "write_notebook"]

SECTION = "Notebook"
NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"

# ---------------------------------------------------------------- the live view
LIVE_SETUP = """\
%load_ext opprof
import time
import opprof as mx

class Sleepy(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        time.sleep(0.05)
        self.assign(out_data[0], req[0], in_data[0] + 1)

@mx.operator.register("LiveSleepy")
class SleepyProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return Sleepy()
"""
LIVE_CELL = """\
%%opprof --var live_prof
x = mx.nd.ones((4, 4))
for i in range(60):  # ~3 s: 50 ms of Python per call, one call at a time
    x = mx.nd.Custom(x, op_type="LiveSleepy")
    x.wait_to_read()
"""
# When the recording started and stopped, as wall time (the page's Date.now() is wall time too).
LIVE_CLOCK = """\
import json
wall = time.time() - time.perf_counter()
meta = live_prof.trace.metadata
print("CLOCK", json.dumps({"start": meta["t_start_ns"] / 1e9 + wall, "stop": meta["t_stop_ns"] / 1e9 + wall}))
"""

# Every 50 ms: the page's time, the kernel's status (for a reader of samples.json), the live
# sources' rows and latest span end (µs), and whether a live figure is attached to the page.
LIVE_SAMPLER = """() => {
  window.__live = [];
  const rows = (name) => {
    const models = (window.Bokeh ? Bokeh.documents : []).map((d) => d.get_model_by_name(name)).filter(Boolean);
    let n = 0, right = -Infinity;
    for (const m of models) {
      const r = m.data.right || [];
      n += r.length;
      for (let i = 0; i < r.length; i++) if (r[i] > right) right = r[i];
    }
    return [n, right];
  };
  const liveShown = () => {
    const stack = [...((window.Bokeh && Bokeh.index) || [])];
    while (stack.length) {
      const v = stack.pop();
      const title = v.model.type === "Figure" && v.model.title ? String(v.model.title.text) : "";
      if (title.startsWith("opprof live view") && v.el && v.el.isConnected) return true;
      stack.push(...(v.child_views ?? []));
    }
    return false;
  };
  window.__live_timer = setInterval(() => {
    const nb = window.jupyterapp.shell.currentWidget;
    const kernel = nb && nb.sessionContext.session && nb.sessionContext.session.kernel;
    const [a, ra] = rows("opprof_live_spans"), [b, rb] = rows("opprof_live_outer");
    window.__live.push({t: Date.now() / 1000, status: kernel ? kernel.status : null, rows: a + b,
                        right: Math.max(ra, rb), shown: liveShown()});
  }, 50);
}"""


def _live_notebook(path: Path) -> None:
    write_notebook(path, [LIVE_SETUP, LIVE_CELL, LIVE_CLOCK])


@dataclass
class LiveRun:
    """One run of the live notebook: the page's samples and, while the cell ran, how late spans came."""

    samples: list[dict[str, Any]]
    during: list[dict[str, Any]]
    lags: list[float]  # s from a span's end to the sample that first had it (at most 50 ms late)
    first: float  # s from the recording's start to the first spans in the page
    text: str
    errors: list[str]

    @property
    def median(self) -> float:
        return self.lags[len(self.lags) // 2] if self.lags else float("nan")

    @property
    def worst(self) -> float:
        return self.lags[-1] if self.lags else float("nan")


def live_run(page: Any, server: Any, front: str = "notebooks", name: str = "live.ipynb") -> LiveRun:
    """Run the live notebook in ``front`` ("notebooks": Notebook 7, "lab/tree": JupyterLab) and sample
    the live figure's sources every 50 ms from the page, against the recording's own clock."""
    _live_notebook(server.root / name)
    # ?reset: JupyterLab would otherwise restore the session's last workspace (another notebook).
    page.goto(f"{server.url}/{front}/{name}" + ("?reset" if front.startswith("lab") else ""))
    page.wait_for_function(js.KERNEL_IDLE, timeout=90_000)
    page.evaluate(LIVE_SAMPLER)
    page.evaluate(js.RUN_ALL)
    page.wait_for_function(js.ALL_RAN, timeout=150_000, polling=250)
    page.wait_for_timeout(300)  # a last sample or two, idle
    samples = page.evaluate("() => { clearInterval(window.__live_timer); return window.__live; }")
    outputs = page.evaluate(js.OUTPUTS)
    errors = [o["error"] for o in outputs if "error" in o]
    text = "".join(o.get("text", "") for o in outputs)
    lines = [line for line in text.splitlines() if line.startswith("CLOCK ")]
    if not lines:
        return LiveRun(samples, [], [], float("nan"), text, errors or ["no CLOCK line printed"])
    clock = json.loads(lines[0].split(" ", 1)[1])
    # While the cell ran: the recording's own clock says when; JupyterLab's kernel status does
    # not (it read "idle" for most of the cell once widget messages flowed).
    during = [s for s in samples if s["t"] < clock["stop"] and s["rows"] > 0]
    lags = []
    seen = -float("inf")
    for s in during:  # each time the latest span end grows: how long after that end the page had it
        if s["right"] > seen:
            seen = s["right"]
            lags.append(s["t"] - (clock["start"] + s["right"] / 1e6))
    lags.sort()
    first = during[0]["t"] - clock["start"] if during else float("nan")
    return LiveRun(samples, during, lags, first, text, errors)


def write_notebook(path: Path, cells: list[str]) -> None:
    """A notebook of code ``cells`` for the python3 kernel (the browser tests write theirs with it too)."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(cells=[new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def _open(page: Any, url: str) -> None:
    page.goto(url)
    page.wait_for_function(js.KERNEL_IDLE, timeout=120_000)


def _run_all_and_save(page: Any, server: Any, name: str) -> int:
    _open(page, f"{server.url}/lab/tree/{name}?reset")
    page.evaluate(js.RUN_ALL)
    page.wait_for_function(js.ALL_RAN, timeout=300_000, polling=250)
    page.wait_for_timeout(300)
    page.evaluate(js.SAVE)
    page.wait_for_timeout(300)
    return (server.root / name).stat().st_size


_SMALL_CELL = """%%opprof
import opprof as mx
x = mx.nd.ones((10, 10))
for _ in range(200):
    x = x + 1
x.wait_to_read()"""


def _sizes(page: Any, server: Any, repeats: int) -> tuple[list[float], list[float]]:
    import shutil

    quick, five = [], []
    for r in range(repeats):
        shutil.copy(NOTEBOOKS / "01-quickstart.ipynb", server.root / f"quick{r}.ipynb")
        quick.append(_run_all_and_save(page, server, f"quick{r}.ipynb") / 1e3)
        write_notebook(server.root / f"five{r}.ipynb", ["%load_ext opprof", *[_SMALL_CELL] * 5])
        five.append(_run_all_and_save(page, server, f"five{r}.ipynb") / 1e3)
        progress(f"notebook sizes, round {r + 1}: quickstart {quick[-1]:.0f} KB, five cells {five[-1]:.0f} KB")
    return quick, five


def _executed_elsewhere(base: Path) -> tuple[float, float]:
    """KB of the quickstart and of a notebook of four ``%%opprof`` cells executed by nbclient (as CI
    and docs builds do: no page, so the cells keep their traces, not widgets)."""
    import nbformat
    from nbclient import NotebookClient

    sizes = []
    for name, make in (
        ("quick-nbclient.ipynb", lambda p: p.write_bytes((NOTEBOOKS / "01-quickstart.ipynb").read_bytes())),
        ("four-nbclient.ipynb", lambda p: write_notebook(p, ["%load_ext opprof", *[_SMALL_CELL] * 4])),
    ):
        path = base / name
        make(path)
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
        nbformat.write(nb, path)
        sizes.append(path.stat().st_size / 1e3)
    progress(f"executed by nbclient: quickstart {sizes[0]:.0f} KB, four cells {sizes[1]:.0f} KB")
    return sizes[0], sizes[1]


def _big(page: Any, server: Any, spans: int, repeats: int) -> dict[str, list[float]]:
    """First paint, zoom in / pan / zoom out and refinements, RSS: one 1M-span trace, ``repeats`` widgets."""
    setup = f"import opprof\nfrom opprof.trace.synthetic import synthetic_trace\ntr = synthetic_trace({spans})"
    # Each round closes the previous widget first: the RSS row is the kernel holding one.
    show = [
        (f"w{r - 1}.close(); del w{r - 1}; import gc; gc.collect()\n" if r else "")
        + f"w{r} = opprof.timeline(tr, title='opprof timeline {r}')\ndisplay(w{r})  # no Out[] entry, which IPython keeps"
        for r in range(repeats)
    ]
    write_notebook(server.root / "big.ipynb", ["%load_ext opprof", setup, *show])
    _open(page, f"{server.url}/lab/tree/big.ipynb?reset")
    for k in (0, 1):
        page.evaluate(f"() => {{ const nb = window.jupyterapp.shell.currentWidget.content; nb.activeCellIndex = {k}; }}")
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-cell')")
        page.wait_for_function(js.KERNEL_IDLE, timeout=300_000, polling=100)
    out: dict[str, list[float]] = {k: [] for k in ("paint", "zoom_in", "pan", "zoom_out", "trips", "rss")}
    for r in range(repeats):
        title = f"opprof timeline {r}"
        out["paint"].append(page.evaluate(js.TIME_TO_PAINT, [2 + r, title]) / 1e3)
        page.wait_for_function(js.KERNEL_IDLE, timeout=120_000, polling=100)
        page.wait_for_timeout(1000)  # BokehJS's first-render range echo and its (no-op) round trip
        before = int(page.evaluate(js.EXEC, f"print(w{r}.refinements)").strip() or 0)
        box = page.evaluate(js.CANVAS_BOX, title)
        cx, cy = box["x"] + box["w"] * 0.7, box["y"] + box["h"] * 0.4
        gestures = []
        for name in ("zoom_in", "pan", "zoom_out"):
            page.evaluate(js.ARM, title)
            page.mouse.move(cx, cy)
            if name == "zoom_in":
                page.mouse.wheel(0, -1200)
            elif name == "zoom_out":
                page.mouse.wheel(0, 1200)
            else:
                page.mouse.down()
                page.mouse.move(cx - box["w"] * 0.45, cy, steps=8)  # past the computed window: a refinement
                page.mouse.up()
                # Timed from the drag's end: each drag step repaints in the browser alone, before any refinement.
                page.evaluate("() => { window.__t0 = performance.now(); }")
            ms = page.evaluate(js.AWAIT_REFINED, 10_000)
            page.wait_for_function(js.KERNEL_IDLE, timeout=60_000, polling=50)
            page.wait_for_timeout(300)
            out[name].append(ms / 1e3 if ms >= 0 else float("nan"))
            gestures.append(name)
        after = int(page.evaluate(js.EXEC, f"print(w{r}.refinements)").strip() or 0)
        out["trips"].append((after - before) / len(gestures))
        status = page.evaluate(js.EXEC, "print(open('/proc/self/status').read())")
        rss = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
        out["rss"].append(rss / 1024)
        progress(
            f"{spans:,} spans, widget {r + 1}: paint {out['paint'][-1]:.2f} s, zoom in {out['zoom_in'][-1]:.2f} s, "
            f"pan {out['pan'][-1]:.2f} s, zoom out {out['zoom_out'][-1]:.2f} s, {out['trips'][-1]:.1f} refinements "
            f"per gesture, kernel RSS {out['rss'][-1]:.0f} MB"
        )
    return out


def measure(spans: int = 1_000_000, repeats: int = 3) -> list[Row]:
    def med(xs: list[float]) -> float:
        good = [x for x in xs if x == x]  # NaN: the refinement never arrived
        return statistics.median(good) if good else float("nan")

    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="opprof-nb-bench-") as tmp:
        base = Path(tmp)
        elsewhere = _executed_elsewhere(base)
        server = start_server(base)
        try:
            with chromium(base) as browser:
                page = browser.new_page(viewport={"width": 1600, "height": 1000})
                page.set_default_timeout(120_000)
                quick, five = _sizes(page, server, repeats)
                big = _big(page, server, spans, repeats)
                lives = []
                for r in range(repeats):
                    run = live_run(page, server, "lab/tree", f"live{r}.ipynb")
                    lives.append(run)
                    progress(f"live view, round {r + 1}: span end -> page: median {run.median:.3f} s, worst {run.worst:.3f} s")
        finally:
            server.stop()
    judged = spans >= 1_000_000
    n = f"{spans / 1e6:g}M" if spans >= 1_000_000 else f"{spans:,}"
    q, f5 = med(quick), med(five)
    rows.append(Row(SECTION, "executed quickstart .ipynb, saved from JupyterLab", q, "KB", "was 12.3 MB", "<= 300 KB", q <= 300))
    rows.append(Row(SECTION, "notebook of five `%%opprof` cells, saved", f5, "KB", "was ~30 MB", "<= 1 MB", f5 <= 1000))
    eq, e4 = elsewhere
    rows.append(Row(SECTION, "executed quickstart .ipynb, by nbclient", eq, "KB", "was 2.36 MB", "<= 300 KB", eq <= 300))
    rows.append(
        Row(SECTION, "four `%%opprof` cells, executed by nbclient", e4, "KB", "was 409 KB for three", "<= 300 KB", e4 <= 300)
    )
    paint = med(big["paint"])
    rows.append(
        Row(SECTION, f"{n} spans: cell run -> first paint", paint, "s", "was 4.6 s", "<= 2 s", paint <= 2 if judged else None)
    )
    trips = med(big["trips"])
    for name, label in (("zoom_in", "zoom in"), ("pan", "pan"), ("zoom_out", "zoom out")):
        v = med(big[name])
        met = v <= 0.25 and trips <= 1 if judged else None
        detail = f"{trips:.1f} refinements per gesture"
        rows.append(Row(SECTION, f"{n} spans: {label} -> refined paint", v, "s", detail, "<= 0.25 s, one round trip", met))
    live_median = med([run.median for run in lives])
    worst = max((run.worst for run in lives if run.worst == run.worst), default=float("nan"))
    rows.append(
        Row(SECTION, "live view: span end -> in the page (JupyterLab)", live_median, "s", f"worst {worst:.2f} s", "<= 0.5 s",
            live_median <= 0.5)
    )  # fmt: skip
    rss = med(big["rss"])
    rss_met = rss <= 400 if judged else None
    rows.append(Row(SECTION, f"kernel RSS with a {n}-span widget", rss, "MB", "was 745 MB", "<= 400 MB", rss_met))
    return rows


def rows(quick: bool = False, repeats: int | None = None) -> list[Row]:
    return measure(20_000 if quick else 1_000_000, repeats or (1 if quick else 3))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spans", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = ap.parse_args()
    result = measure(args.spans, args.repeats)
    if args.json:
        print(json.dumps([r.__dict__ for r in result], indent=1))
    else:
        print_rows(SECTION, result)


if __name__ == "__main__":
    main()
