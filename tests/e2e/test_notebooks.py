"""Every demo notebook runs top to bottom in a real kernel (nbclient) with no error output."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = sorted((Path(__file__).parents[2] / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks() -> None:
    names = [p.name for p in NOTEBOOKS]
    assert names == [
        "01-quickstart.ipynb", "02-anatomy-of-a-custom-op.ipynb", "03-traces-from-other-tools.ipynb", "04-dask-cluster.ipynb",
    ]  # fmt: skip


@pytest.mark.timeout(240)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_without_errors(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit notebooks without outputs"
    client = nbclient.NotebookClient(nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, [f"{e.ename}: {e.evalue}" for e in errors]
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "opprof:" in text  # every notebook profiles something and prints its summary line
    if path.name == "01-quickstart.ipynb" and "memory: peak" in text:  # memory on: the compiled part is built
        # The leak it catches, named by the op and the cell's line that made the kept arrays.
        assert re.search(r"10 x mean at In \[\d+\], line 4", text), text
