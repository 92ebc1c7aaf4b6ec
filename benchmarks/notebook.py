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
* the live view: how long after a span ends it is in the page while the cell still runs.

Times come from the page's clock (``performance.now()``), gestures from playwright's mouse.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
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

__all__ = ["measure", "rows"]

SECTION = "Notebook"
NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"

def _notebook(path: Path, cells: list[str]) -> None:
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
        _notebook(server.root / f"five{r}.ipynb", ["%load_ext opprof", *[_SMALL_CELL] * 5])
        five.append(_run_all_and_save(page, server, f"five{r}.ipynb") / 1e3)
        progress(f"notebook sizes, round {r + 1}: quickstart {quick[-1]:.0f} KB, five cells {five[-1]:.0f} KB")
    return quick, five


def _big(page: Any, server: Any, spans: int, repeats: int) -> dict[str, list[float]]:
    """First paint, zoom in / pan / zoom out and refinements, RSS: one 1M-span trace, ``repeats`` widgets."""
    setup = f"import opprof\nfrom opprof.trace.synthetic import synthetic_trace\ntr = synthetic_trace({spans})"
    # Each round closes the previous widget first: the RSS row is the kernel holding one.
    show = [
        (f"w{r - 1}.close(); del w{r - 1}; import gc; gc.collect()\n" if r else "")
        + f"w{r} = opprof.timeline(tr, title='opprof timeline {r}')\nw{r}"
        for r in range(repeats)
    ]
    _notebook(server.root / "big.ipynb", ["%load_ext opprof", setup, *show])
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
        server = start_server(base)
        try:
            with chromium(base) as browser:
                page = browser.new_page(viewport={"width": 1600, "height": 1000})
                page.set_default_timeout(120_000)
                quick, five = _sizes(page, server, repeats)
                big = _big(page, server, spans, repeats)
        finally:
            server.stop()
    judged = spans >= 1_000_000
    n = f"{spans / 1e6:g}M" if spans >= 1_000_000 else f"{spans:,}"
    q, f5 = med(quick), med(five)
    rows.append(Row(SECTION, "executed quickstart .ipynb, saved from JupyterLab", q, "KB", "was 12.3 MB", "<= 300 KB", q <= 300))
    rows.append(Row(SECTION, "notebook of five `%%opprof` cells, saved", f5, "KB", "was ~30 MB", "<= 1 MB", f5 <= 1000))
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
