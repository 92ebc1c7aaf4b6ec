"""The package's import paths: MXNet's module names work, opprof 0.1's flat modules say where they went."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import opprof
from opprof.moved import MOVED


@pytest.mark.parametrize("name", ["ndarray", "autograd", "operator", "random", "context"])
def test_mxnet_module_names_are_the_modules_that_hold_them(name: str) -> None:
    module = importlib.import_module(f"opprof.{name}")
    assert module is getattr(opprof, name)
    assert sys.modules[f"opprof.{name}"] is module


def test_import_opprof_ndarray_as_nd_runs_mxnet_code() -> None:
    import opprof.ndarray as nd

    assert nd is opprof.nd and float(nd.ones((2,)).asnumpy().sum()) == 2.0


@pytest.mark.parametrize("old", sorted(MOVED))
def test_a_moved_module_fails_with_its_new_home(old: str) -> None:
    sys.modules.pop(old, None)
    with pytest.raises(ModuleNotFoundError) as info:
        importlib.import_module(old)
    new_home = MOVED[old].split()[0]
    assert f"{old} has moved" in str(info.value) and new_home in str(info.value)
    assert info.value.name == old


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_new_home_named_exists(old: str) -> None:
    module = MOVED[old].split()[0].rstrip(",;(")
    if module.startswith("opprof.timeline"):  # "opprof.timeline(trace) is a function"
        assert callable(opprof.timeline)
        return
    importlib.import_module(module)


@pytest.mark.e2e  # a fresh interpreter in a subprocess
def test_the_old_chrome_import_in_a_fresh_interpreter_names_opprof_trace() -> None:
    code = "from opprof.chrome import from_chrome"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 1 and "opprof.chrome has moved: use opprof.trace" in out.stderr


def test_modules_below_an_mxnet_name_are_the_same_modules() -> None:
    import opprof.ndarray.ndarray as inner
    from opprof.ndarray.ndarray import NDArray

    assert inner is opprof.nd.ndarray and NDArray is opprof.nd.NDArray
    assert isinstance(opprof.nd.ones((1,)), inner.NDArray)
    assert importlib.import_module("opprof.test_utils") is opprof.nd.test_utils
