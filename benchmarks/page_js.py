"""JavaScript the browser tests and the notebook benchmarks run in JupyterLab 4 and Notebook 7 pages (both expose
``window.jupyterapp`` with ``--LabApp.expose_app_in_browser``; Notebook 7's shell has the same
``currentWidget`` notebook panel).

BokehJS's views live in shadow roots, out of reach of CSS selectors, so figures are found from
``Bokeh.index`` and data sources from ``Bokeh.documents``.
"""

from __future__ import annotations

# The open notebook panel, once its kernel is connected and idle.
KERNEL_IDLE = """() => {
  const nb = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const kernel = nb && nb.sessionContext && nb.sessionContext.session && nb.sessionContext.session.kernel;
  return !!(kernel && kernel.connectionStatus === "connected" && kernel.status === "idle" && nb.content.widgets.length);
}"""

# Every code cell has run (an execution count, no "[*]" prompt) and the kernel is idle again.
ALL_RAN = """() => {
  const nb = window.jupyterapp.shell.currentWidget;
  const kernel = nb.sessionContext.session && nb.sessionContext.session.kernel;
  const code = nb.content.model.toJSON().cells.filter((c) => c.cell_type === "code");
  const prompts = [...nb.content.node.querySelectorAll(".jp-InputArea-prompt")].map((p) => p.textContent);
  return !!kernel && kernel.status === "idle" && code.every((c) => c.execution_count) && !prompts.some((t) => t.includes("*"));
}"""

RUN_ALL = "() => window.jupyterapp.commands.execute('notebook:run-all-cells')"
SAVE = "() => window.jupyterapp.shell.currentWidget.context.save()"

# Every output of every cell, from the notebook model: errors as "ename: evalue", streams as text.
OUTPUTS = """() => window.jupyterapp.shell.currentWidget.content.model.toJSON().cells
  .flatMap((c) => c.outputs || [])
  .map((o) => o.output_type === "error" ? {error: `${o.ename}: ${o.evalue}`} : {text: [].concat(o.text || []).join("")})"""

# window.__opprof_tl(): the main timeline figure's view, found by its title.
DEFINE_FIND = """() => {
window.__opprof_tl = () => {
  const stack = [...((window.Bokeh && Bokeh.index) || [])];
  while (stack.length) {
    const v = stack.pop();
    const title = v.model.type === "Figure" && v.model.title ? String(v.model.title.text) : "";
    if (title.startsWith("opprof timeline") && v.canvas_view) return v;
    stack.push(...(v.child_views ?? []));
  }
  return null;
};
}"""

# Whether the timeline canvas lies in the output area of a %%opprof cell (``cell``: which), and its painted pixels.
TIMELINE = """() => {
  if (!window.__opprof_tl) return null;
  const view = window.__opprof_tl();
  if (!view) return null;
  const canvas = view.canvas_view.primary.canvas;
  const nb = window.jupyterapp.shell.currentWidget.content;
  const cells = nb.model.toJSON().cells;
  const outputs = cells.map((c, k) => [].concat(c.source).join("").startsWith("%%opprof") && nb.widgets[k]
    ? nb.widgets[k].node.querySelector(".jp-OutputArea") : null);
  if (!outputs.some(Boolean)) return null;  // not rendered yet (after a reload, cells render as they come)
  let node = canvas;  // climb out of Bokeh's shadow roots
  let k = -1;
  while (node && k < 0) {
    k = outputs.findIndex((o) => o && o.contains(node));
    node = node.parentNode || node.host;
  }
  const d = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let painted = 0;
  const colors = new Set();
  for (let i = 0; i < d.length; i += 4) {
    if (d[i + 3] > 0 && (d[i] < 235 || d[i + 1] < 235 || d[i + 2] < 235)) {
      painted++;
      colors.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
    }
  }
  return {cell: k, in_cell: k >= 0, widget: k >= 0 && !!outputs[k].querySelector(".jupyter-widgets"),
          width: canvas.width, height: canvas.height, painted, colors: colors.size};
}"""


def painted_timeline(min_pixels: int = 2000) -> str:
    """A predicate: the timeline is drawn in its cell with at least ``min_pixels`` painted."""
    return f"() => {{ ({DEFINE_FIND})(); const t = ({TIMELINE})(); return !!t && t.in_cell && t.painted > {min_pixels}; }}"


# ---------------------------------------------------------------- timing and driving a figure
# Run code in the page's kernel; resolve to its printed text.
EXEC = """async (code) => {
  const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  let out = "";
  const f = k.requestExecute({code, store_history: false});
  f.onIOPub = (m) => { if (m.header.msg_type === "stream") out += m.content.text;
                       if (m.header.msg_type === "error") out += m.content.ename + ": " + m.content.evalue; };
  await f.done;
  return out;
}"""
# The view of the figure titled ``title`` (BokehJS views live in shadow roots: found from Bokeh.index).
FIND = """(title) => {
  const stack = [...((window.Bokeh && Bokeh.index) || [])];
  while (stack.length) {
    const v = stack.pop();
    if (v.model.type === "Figure" && v.model.title && String(v.model.title.text).startsWith(title) && v.canvas_view) return v;
    stack.push(...(v.child_views ?? []));
  }
  return null;
}"""
PAINTED = f"""(title) => {{
  const v = ({FIND})(title);
  if (!v) return false;
  const c = v.canvas_view.primary.canvas;
  if (!c.width) return false;
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 0; i < d.length; i += 16) if (d[i + 3] > 0 && (d[i] < 235 || d[i + 1] < 235 || d[i + 2] < 235)) n++;
  return n > 500;
}}"""
# Run cell ``k`` and resolve to ms from the command to the first painted timeline titled ``title``.
TIME_TO_PAINT = f"""async ([k, title]) => {{
  const app = window.jupyterapp;
  const nb = app.shell.currentWidget.content;
  nb.activeCellIndex = k;
  const t0 = performance.now();
  app.commands.execute("notebook:run-cell");
  while (!({PAINTED})(title)) await new Promise((r) => setTimeout(r, 10));
  return performance.now() - t0;
}}"""
# Arm: remember the spans source's data; then resolve to ms until it is replaced (the refinement
# arrived) and two animation frames passed (painted), or -1 after ``limit`` ms.
ARM = f"""(title) => {{
  const v = ({FIND})(title);
  window.__src = v.model.document.get_model_by_name("spans");
  window.__data = window.__src.data;
  window.__t0 = performance.now();
}}"""
AWAIT_REFINED = """async (limit) => {
  while (window.__src.data === window.__data) {
    if (performance.now() - window.__t0 > limit) return -1;
    await new Promise((r) => setTimeout(r, 5));
  }
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  return performance.now() - window.__t0;
}"""
CANVAS_BOX = f"""(title) => {{
  const c = ({FIND})(title).canvas_view.primary.canvas;
  c.scrollIntoView({{block: "center"}});
  const r = c.getBoundingClientRect();
  return {{x: r.x, y: r.y, w: r.width, h: r.height}};
}}"""
