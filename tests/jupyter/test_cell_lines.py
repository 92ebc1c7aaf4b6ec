"""A notebook's lines read as the notebook shows them: ``In [3], line 12``, not IPython's temp file.

Known answers: a custom op defined in one cell pushes its sub-op from a line we know; a
``%%opprof`` cell waits on a line we know (the ``%%opprof`` line is line 1 of its cell). The
trace's sites, the why-text and the timeline's hover all name those cells and lines.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from IPython.utils.capture import capture_output

pytestmark = pytest.mark.timeout(120)

# Line 5 of this cell pushes the sub-op.
DEFINE = """import opprof as mx
class CellLineTwice(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        x = in_data[0]
        self.assign(out_data[0], req[0], x * 2)
@mx.operator.register("CellLineTwice")
class CellLineTwiceProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return CellLineTwice()
"""


def test_sites_why_text_and_hover_name_cells_as_the_notebook_shows_them(ip: Any, tmp_path: Any) -> None:
    ip.run_cell(DEFINE, store_history=True)
    defined_in = ip.execution_count - 1  # run_cell counted it
    with capture_output() as out:
        result = ip.run_cell(
            "%%opprof --no-widget --why --var cell_lines_prof\n"
            "a = mx.nd.ones((50, 50))\n"
            "for _ in range(20):\n"
            "    a = mx.nd.Custom(a, op_type='CellLineTwice')\n"
            "a.wait_to_read()\n",
            store_history=True,
        )
    profiled_in = ip.execution_count - 1
    assert result.error_in_exec is None, result.error_in_exec
    trace = ip.user_ns["cell_lines_prof"].trace
    sites = set(trace.ops.strings) & {s for s in trace.ops.strings if "line" in s}
    assert f"In [{defined_in}], line 5" in sites, sites  # the sub-op's push, in the defining cell
    assert f"In [{profiled_in}], line 5" in sites, sites  # the cell's own wait_to_read (line 1: %%opprof)
    assert not any(re.search(r"\d{6,}\.py", s) for s in trace.ops.strings), "IPython's file name leaked"
    # The wait the magic ends the cell with is the cell's (its %%opprof line), not opprof's own code.
    assert not any("magics.py" in s or "interactiveshell.py" in s for s in trace.ops.strings), trace.ops.strings
    assert f"In [{profiled_in}], line 1" in sites, sites
    text = out.stdout
    assert f"In [{defined_in}], line 5" in text, text
    # The hover of a sub-op names the same line (the page's hover texts, without a browser).
    from opprof.view import save_html

    tl = save_html(trace, str(tmp_path / "cell.html"))
    assert any(f"pushed at In [{defined_in}], line 5" in t for t in tl.names.data["detail"])


def test_a_script_keeps_its_file_and_line(ip: Any, tmp_path: Any) -> None:
    """Outside a notebook cell the namer says nothing and the line stays ``file:line``."""
    from opprof.jupyter.cells import cell_site

    assert cell_site(str(tmp_path / "model.py"), 12) is None
    from opprof.profiler.sites import site_text

    assert site_text(str(tmp_path / "model.py"), 12) == f"{tmp_path / 'model.py'}:12"
