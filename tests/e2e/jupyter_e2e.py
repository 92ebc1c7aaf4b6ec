"""The browser tests' Jupyter server: :mod:`benchmarks.jupyter`'s, with pytest's skip/fail rules.

One server per test session (starting one costs 5-10 s on this 2-core machine, and the suite's
budget is about 5 minutes); see ``lab_server`` in conftest.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from benchmarks.jupyter import JupyterServer
from benchmarks.jupyter import start_server as _start
from tests.conftest import require_chromium

__all__ = ["JupyterServer", "start_server"]


def start_server(base: Path) -> JupyterServer:
    """Start JupyterLab (+ Notebook 7) under ``base``; skip without them, or fail when ``CI`` is set."""
    require_chromium()
    for module in ("jupyterlab", "notebook"):
        if importlib.util.find_spec(module) is None:
            msg = f"this test needs {module}: pip install -e '.[test,e2e]' (make test does)"
            if os.environ.get("CI"):
                pytest.fail(msg + " [CI is set, so this is a failure, not a skip]")
            pytest.skip(msg)
    try:
        return _start(base)
    except RuntimeError as e:
        pytest.fail(str(e))
