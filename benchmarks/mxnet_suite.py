"""MXNet's own unit tests, adapted only at their imports, run against opprof on each engine.

``python -m benchmarks.mxnet_suite [--mxnet-source PATH] [--engine threaded|naive|both] [--json OUT] [-k EXPR]``

opprof claims that ``import opprof as mx`` runs MXNet 1.x imperative code. This measures that
claim with MXNet's tests rather than ours: ``tests/python/unittest/`` ``test_operator``,
``test_autograd``, ``test_ndarray``, ``test_profiler``, ``test_engine`` and ``test_exc_handling``
at tag 1.9.1, restricted to the tests whose API opprof claims (see :data:`OUT_OF_SCOPE` and
:data:`EXCLUDED`), each run under pytest with a per-test timeout, once per engine.

MXNet's tests are MXNet's code (Apache-2.0): they are read from a checkout at run time (a work
tree, or a git directory at the tag) into a temporary directory and never copied into this
repository. The copy is changed at its import lines only (:func:`rewrite_imports`); every other
byte is MXNet's. Two things are supplied from outside the test files: a stand-in for the few
``nose.tools`` names they import (nose is unmaintained and not an opprof dependency), and this
module itself as a pytest plugin that records each result as it happens, so that a hang or a
crash loses nothing already run.

Output: a Markdown summary row, then the failures grouped by their first error line, the cause
that blocks most tests first; ``--json OUT`` writes ``{engine: {test_id: {"outcome", "error"}}}``.
Exit status: 0 when it ran (whatever passed), 2 when no MXNet source was found.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
import unittest
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

TAG = "1.9.1"
UNITTEST = "tests/python/unittest"
TEST_FILES = ("test_operator", "test_autograd", "test_ndarray", "test_profiler", "test_engine", "test_exc_handling")
#: Read alongside the tests: their helpers (``common`` imports ``models``) and a data file.
SUPPORT_FILES = (f"{UNITTEST}/common.py", "tests/python/common/models.py", f"{UNITTEST}/legacy_ndarray.v0")
DEFAULT_MIRROR = Path("/work/.mirror/apache+mxnet/repo")
REPO = Path(__file__).resolve().parents[1]
LOG_ENV = "OPPROF_MXNET_SUITE_LOG"
SELECT_ENV = "OPPROF_MXNET_SUITE_SELECT"
PROBE_ENV = "OPPROF_MXNET_SUITE_PROBE"
#: One test's result: ``outcome`` (passed, failed, error, timeout, crashed, skipped, not run), ``error``
#: (its first line, "" if it passed) and ``seconds`` (when pytest reported it).
Result = dict[str, Any]
PLUGIN = "benchmarks.mxnet_suite"  # this module, as pytest loads it in the test process

#: The static rule: a test function whose own source text (decorators included) mentions any of
#: these uses an API opprof does not claim: the symbolic API and executors, Gluon, sparse storage,
#: the NumPy interface, GPUs and CUDA libraries, RNN cells, data iterators, modules, kvstore,
#: images, ONNX, AMP.
OUT_OF_SCOPE = re.compile(
    r"\b(mx\.sym|mx\.symbol|sym\.|symbol\.|gluon|sparse|stype|tostype|mx\.np\b|mx\.npx|np_shape|use_np|gpu|rnn\.|"
    r"check_numeric_gradient|check_symbolic|simple_bind|bind\(|mx\.io|mx\.mod|kvstore|csr|row_sparse|mx\.image|cuda|"
    r"mkldnn|onnx|amp)"
)

_SYMBOLIC_HELPER = "calls {}, which builds mx.symbol graphs and binds executors"
#: Tests the rule passes whose out-of-scope use is indirect (a helper they call) or fancy indexing.
EXCLUDED: dict[str, str] = {
    # Imperative-looking tests whose checking is done by a symbolic helper.
    "test_operator.py::test_elementwise_sum": _SYMBOLIC_HELPER.format("check_elementwise_sum_with_shape"),
    "test_operator.py::test_concat": _SYMBOLIC_HELPER.format("check_concat_with_shape"),
    "test_operator.py::test_deconvolution": _SYMBOLIC_HELPER.format("check_deconvolution_forward_backward/_gradient"),
    "test_operator.py::test_nearest_upsampling": _SYMBOLIC_HELPER.format("check_nearest_upsampling_with_shape"),
    "test_operator.py::test_bilinear_upsampling": _SYMBOLIC_HELPER.format("check_bilinear_upsampling_with_shape"),
    "test_operator.py::test_convolution_dilated_impulse_response": _SYMBOLIC_HELPER.format(
        "test_run_convolution_dilated_impulse_response"
    ),
    "test_operator.py::test_pad": _SYMBOLIC_HELPER.format("check_pad_with_shape"),
    "test_operator.py::test_instance_normalization": _SYMBOLIC_HELPER.format("check_instance_norm_with_shape"),
    "test_operator.py::test_l2_normalization": _SYMBOLIC_HELPER.format("check_l2_normalization"),
    "test_operator.py::test_layer_norm": _SYMBOLIC_HELPER.format("check_layer_normalization"),
    "test_operator.py::test_sequence_last": _SYMBOLIC_HELPER.format("check_sequence_func"),
    "test_operator.py::test_sequence_mask": _SYMBOLIC_HELPER.format("check_sequence_func"),
    "test_operator.py::test_sequence_reverse": _SYMBOLIC_HELPER.format("check_sequence_func/check_sequence_reverse"),
    "test_operator.py::test_ctc_loss": _SYMBOLIC_HELPER.format("check_ctc_loss"),
    "test_operator.py::test_softmax": _SYMBOLIC_HELPER.format("check_softmax_with_shape/check_softmax_grad"),
    "test_profiler.py::test_custom_operator_profiling_multiple_custom_ops_symbolic": (
        "runs its helper in mode='symbolic': mx.symbol.Custom bound to executors"
    ),
    # The symbolic API reached through autograd, and NumPy-interface shapes through a setter.
    "test_autograd.py::test_get_symbol": "autograd.get_symbol returns a Symbol (list_arguments): the symbolic API",
    "test_operator.py::test_boolean_mask": "mx.set_np_shape(True): the NumPy interface's zero-size shape semantics",
    # Fancy (advanced) indexing.
    "test_ndarray.py::test_ndarray_slice": "a[[1, 1, 0], [0, 1, 0]] and a[nd_index, nd_index]: advanced indexing",
    "test_ndarray.py::test_ndarray_indexing": "most of its cases index with lists, NDArrays and boolean masks: advanced indexing",
}
# Not excluded though the rule's regex matches a helper they call, since the test's own path
# never reaches the matching code: test_allclose_function ('gpu' only in a printed title, called
# with [cpu]) and test_custom_operator_profiling_multiple_custom_ops_imperative (mode='imperative').


# ---------------------------------------------------------------------------- reading MXNet
def source_reader(where: str | None) -> Callable[[str], bytes] | None:
    """A function reading a file of MXNet 1.9.1 by its path in the repository, or None if none is found.

    ``where`` is a work tree (a directory holding ``tests/python/unittest``) or a git directory
    holding tag 1.9.1; by default ``$OPPROF_MXNET_SOURCE``, else the mirror on this machine.
    """
    if where is None:
        where = os.environ.get("OPPROF_MXNET_SOURCE") or (str(DEFAULT_MIRROR) if DEFAULT_MIRROR.exists() else None)
    if where is None:
        return None
    root = Path(where).expanduser()
    if (root / UNITTEST).is_dir():
        return lambda rel: (root / rel).read_bytes()
    git = ["git", "--git-dir", str(root)]
    probe = subprocess.run([*git, "rev-parse", "--verify", "-q", f"{TAG}^{{commit}}"], capture_output=True)
    if probe.returncode != 0:
        return None
    return lambda rel: subprocess.run([*git, "show", f"{TAG}:{rel}"], capture_output=True, check=True).stdout


_IMPORT = re.compile(r"^(?P<indent>[ \t]*)(?P<kw>import|from)[ \t]+mxnet(?P<sub>(?:\.\w+)*)(?P<rest>\b.*)$")


def rewrite_imports(text: str, test_utils: str = "opprof.nd.test_utils") -> str:
    """MXNet's import lines turned into opprof's; every other line is left byte for byte.

    ``import mxnet as mx`` -> ``import opprof as mx``; ``from mxnet.X import Y`` -> ``from opprof.X
    import Y``; ``import mxnet.X as Y`` -> ``import opprof.X as Y``; ``import mxnet.X`` (which binds
    the name ``mxnet``) -> ``import opprof.X; import opprof as mxnet``. ``mxnet.test_utils`` becomes
    ``test_utils`` (``opprof.nd.test_utils`` until ``opprof.test_utils`` exists). Only statements that
    start a line are rewritten, so comments and strings mentioning mxnet stay as they are.
    """

    def module(sub: str) -> str:
        return test_utils if sub == ".test_utils" else "opprof" + sub

    def line(m: re.Match[str]) -> str:
        indent, kw, sub, rest = m["indent"], m["kw"], m["sub"], m["rest"]
        if kw == "from" or rest.lstrip().startswith("as "):
            return f"{indent}{kw} {module(sub)}{rest}"
        if not sub:
            return f"{indent}import opprof as mxnet{rest}"
        return f"{indent}import {module(sub)}; import opprof as mxnet{rest}"

    return "".join(_IMPORT.sub(line, ln) for ln in text.splitlines(keepends=True))


def _unconditional_skip(node: ast.FunctionDef) -> bool:
    """``@unittest.skip(...)``: a test MXNet itself disables."""
    for d in node.decorator_list:
        f = d.func if isinstance(d, ast.Call) else d
        if isinstance(f, ast.Attribute) and f.attr == "skip" and isinstance(f.value, ast.Name) and f.value.id == "unittest":
            return True
    return False


def select(files: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The in-scope test ids (``file.py::name``) and, for every other test, why it is out.

    Only module-level ``def test*`` count (what pytest collects here); a name defined twice counts
    once, as its last definition, the one Python keeps.
    """
    selected: list[str] = []
    out: dict[str, str] = {}
    for fname, text in files.items():
        lines = text.splitlines()
        tests: dict[str, ast.FunctionDef] = {}
        for node in ast.parse(text).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
                tests.pop(node.name, None)
                tests[node.name] = node
        for name, node in tests.items():
            tid = f"{fname}::{name}"
            first = min([d.lineno for d in node.decorator_list] + [node.lineno])
            m = OUT_OF_SCOPE.search("\n".join(lines[first - 1 : node.end_lineno]))
            if _unconditional_skip(node):
                out[tid] = "disabled in MXNet itself (@unittest.skip)"
            elif m:
                out[tid] = f"uses {m.group(0)!r}"
            elif tid in EXCLUDED:
                out[tid] = EXCLUDED[tid]
            else:
                selected.append(tid)
    return selected, out


# ---------------------------------------------------------------------------- running
def _limit_memory(gib: float) -> Callable[[], None]:
    def apply() -> None:  # in the child, before pytest starts: a runaway allocation fails, not the machine
        limit = int(gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def _read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for ln in path.read_text().splitlines():
        try:
            out.append(json.loads(ln))
        except json.JSONDecodeError:  # a line cut short by a kill
            pass
    return out


def run_engine(
    engine: str,
    unit: Path,
    ids: list[str],
    *,
    per_test: float,
    overall: float,
    memory_gib: float,
    seed: str,
    k: str | None,
    probe: bool = False,
    python: str = sys.executable,
) -> tuple[dict[str, Result], str]:
    """Run ``ids`` under pytest with ``OPPROF_ENGINE=engine``; each test's outcome and first error line.

    pytest runs in a process group of its own, under an address-space limit; a test past
    ``per_test`` seconds fails as a timeout (pytest-timeout). If the whole run passes ``overall``
    seconds, or pytest dies, the test it was in is recorded as a hang or a crash and the rest are
    run in a fresh process, until none is left or the time is spent.
    """
    results: dict[str, Result] = {}
    collect_errors: dict[str, str] = {}
    deselected: set[str] = set()
    notes: list[str] = []
    deadline = time.monotonic() + overall
    remaining = list(ids)
    attempt = 0
    while remaining:
        attempt += 1
        log = unit / f"results-{engine}-{attempt}.jsonl"
        chosen = unit / f"select-{engine}-{attempt}.txt"
        chosen.write_text("".join(f"{t}\n" for t in remaining))
        files = sorted({t.split("::")[0] for t in remaining})
        cmd = [python, "-m", "pytest", "-p", "no:cacheprovider", "-p", PLUGIN, "-c", str(unit / "pytest.ini")]
        cmd += ["--rootdir", str(unit), "--timeout", str(per_test), "--timeout-method", "signal"]
        cmd += ["--continue-on-collection-errors", "-q", "-rN", "--no-header", *(["-k", k] if k else []), *files]
        env = {k_: v for k_, v in os.environ.items() if k_ != "PYTEST_ADDOPTS"}
        env.update(OPPROF_ENGINE=engine, MXNET_MODULE_SEED=seed, PYTHONDONTWRITEBYTECODE="1")
        env[LOG_ENV], env[SELECT_ENV] = str(log), str(chosen)
        if probe:
            env[PROBE_ENV] = "1"
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
        with open(unit / f"pytest-{engine}-{attempt}.out", "wb") as out:
            proc = subprocess.Popen(
                cmd, cwd=unit, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=_limit_memory(memory_gib),
            )  # fmt: skip
            why = _wait(proc, log, deadline, stuck_after=per_test + 30)
        if why.startswith("pytest died") and "exit code -" not in why:  # pytest's own error: its last words
            tail = (unit / f"pytest-{engine}-{attempt}.out").read_text(errors="replace").strip().splitlines()[-3:]
            why += ": " + " / ".join(tail)
        records = _read_log(log)
        started: str | None = None
        for r in records:
            if r["kind"] == "start":
                started = r["id"]
            elif r["kind"] == "result":
                results[r["id"]] = {"outcome": r["outcome"], "error": r["error"], "seconds": r["seconds"]}
                started = None if started == r["id"] else started
            elif r["kind"] == "collect":
                collect_errors[r["id"]] = r["error"]
            elif r["kind"] == "deselected":
                deselected.update(r["ids"])
        if why:
            notes.append(why)
        if started is not None and started not in results:
            outcome = "timeout" if why.startswith(("overall", "a test")) else "crashed"
            results[started] = {"outcome": outcome, "error": f"{why} while this test ran"}
        for tid in remaining:
            bad = collect_errors.get(tid.split("::")[0])
            if tid not in results and bad is not None:
                results[tid] = {"outcome": "error", "error": bad}
        left = [t for t in remaining if t not in results and t not in deselected]
        if not why or not left or left == remaining or time.monotonic() >= deadline:
            for tid in left:
                results[tid] = {"outcome": "not run", "error": why or "pytest reported no result for it"}
            break
        remaining = left
    return {t: results[t] for t in ids if t in results}, "; ".join(notes)


def _wait(proc: subprocess.Popen[bytes], log: Path, deadline: float, stuck_after: float) -> str:
    """Wait for pytest; '' if it ended by itself, else why it was killed or died.

    It is killed at the deadline, when a test has run ``stuck_after`` seconds (its own timeout did
    not fire: a hang where no signal handler runs), or 30 s after its session finished.
    """
    finished_at: float | None = None
    while True:
        try:
            code = proc.wait(timeout=1.0)
            if code in (0, 1, 2, 5) or finished_at is not None:  # passed, failed, interrupted, no tests
                return ""
            return f"pytest died (exit code {code}, {_signal_name(code)})"
        except subprocess.TimeoutExpired:
            pass
        tail = log.read_bytes()[-300:] if log.exists() else b""
        if finished_at is None and b'"kind": "finish"' in tail:
            finished_at = time.monotonic()
        last = tail.rstrip().rpartition(b"\n")[2]
        if last.startswith(b'{"kind": "start"') and time.time() - log.stat().st_mtime > stuck_after:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return f"a test ran {stuck_after:.0f} s, past its own timeout (killed)"
        if finished_at is not None and time.monotonic() - finished_at > 30:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return "pytest did not exit within 30 s of finishing its tests (killed)"
        if time.monotonic() >= deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return "overall timeout (killed)"


def _signal_name(code: int) -> str:
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            pass
    return "no signal"


# ---------------------------------------------------------------------------- the pytest plugin
# This module is loaded in the pytest process with ``-p benchmarks.mxnet_suite``: these hooks
# append one JSON line per event to $OPPROF_MXNET_SUITE_LOG, flushed at once.


def _log(**record: Any) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


def first_error_line(report: Any) -> str:
    """The exception line of a failed report: its type and the first line of its message."""
    if report.skipped and isinstance(report.longrepr, tuple):
        return f"skipped: {report.longrepr[2]}"
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    marked = [ln[1:].strip() for ln in text.splitlines() if ln.startswith("E ")]
    lines = marked or [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return ""
    first = lines[0]
    if first.endswith(":") and len(lines) > 1:  # "AssertionError:" with the message on the next line
        first = f"{first} {lines[1]}"
    return first[:300]


def pytest_configure(config: Any) -> None:
    if os.environ.get(LOG_ENV):
        sys.modules.setdefault("nose", _NOSE)
        sys.modules.setdefault("nose.tools", _NOSE.tools)
    if os.environ.get(PROBE_ENV):
        for path in sorted(Path.cwd().glob("*.py")):
            fill_missing_imports(path.read_text())


class MissingInOpprof(AttributeError):
    """What a --probe placeholder raises when it is used."""


class _Placeholder:
    """--probe's stand-in for a name a test file imports and opprof lacks: any use raises."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _fail(self) -> MissingInOpprof:
        return MissingInOpprof(f"opprof lacks {self._name} (imported by the test file; a --probe placeholder)")

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise self._fail()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):  # used as a decorator at import time

            def fails(*a: Any, **k: Any) -> None:
                raise self._fail()

            return fails
        raise self._fail()


def _placeholder(name: str) -> Any:
    """An exception class for ``...Error`` names (nothing raises it, so ``except`` clauses still work)."""
    last = name.rpartition(".")[2]
    return type(last, (Exception,), {}) if last.endswith(("Error", "Exception")) else _Placeholder(name)


def fill_missing_imports(text: str) -> None:
    """--probe: give every opprof module and name that ``text``'s top-level imports lack a placeholder.

    Not the measure: it shows the per-test failures that a missing import otherwise hides behind
    one collection error for the whole file.
    """
    bound: dict[str, str] = {}  # names the imports bind to opprof modules (``mx``)
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef):  # decorators run at import time: ``@mx.use_np_shape``
            for d in node.decorator_list:
                chain = _attribute_chain(d.func if isinstance(d, ast.Call) else d)
                if len(chain) > 1 and chain[0] in bound:
                    obj = _module_or_placeholder(bound[chain[0]])
                    for i, attr in enumerate(chain[1:], 1):
                        if not hasattr(obj, attr):
                            setattr(obj, attr, _placeholder(".".join([bound[chain[0]], *chain[1 : i + 1]])))
                        obj = getattr(obj, attr)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("opprof"):
            assert node.module is not None
            mod = _module_or_placeholder(node.module)
            for alias in node.names:
                if alias.name != "*" and not hasattr(mod, alias.name):
                    setattr(mod, alias.name, _submodule(f"{node.module}.{alias.name}"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("opprof"):
                    _module_or_placeholder(alias.name)
                    bound[alias.asname or alias.name.partition(".")[0]] = alias.name if alias.asname else "opprof"


def _attribute_chain(node: ast.expr) -> list[str]:
    """``mx.a.b`` as ["mx", "a", "b"]; [] for anything else."""
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.insert(0, node.attr)
        node = node.value
    return [node.id, *names] if isinstance(node, ast.Name) else []


def _submodule(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return _placeholder(name)


def _module_or_placeholder(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        parent, _, last = name.rpartition(".")
        mod = types.ModuleType(name)
        mod.__getattr__ = lambda attr: _placeholder(f"{name}.{attr}")  # type: ignore[method-assign]
        sys.modules[name] = mod
        if parent:
            setattr(_module_or_placeholder(parent), last, mod)
        return mod


def pytest_collection_modifyitems(session: Any, config: Any, items: list[Any]) -> None:
    """Keep the tests named in $OPPROF_MXNET_SUITE_SELECT (pytest is given whole files, so that one
    that fails to import is reported as a collection error instead of stopping the run)."""
    path = os.environ.get(SELECT_ENV)
    if not path:
        return
    wanted = set(Path(path).read_text().split())
    items[:] = [i for i in items if i.nodeid in wanted]


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    _log(kind="start", id=nodeid)


_PHASES: dict[str, dict[str, Any]] = {}


def pytest_runtest_logreport(report: Any) -> None:
    phases = _PHASES.setdefault(report.nodeid, {})
    phases[report.when] = report
    if report.when != "teardown":
        return
    del _PHASES[report.nodeid]
    setup, call = phases.get("setup"), phases.get("call")
    outcome, error = "passed", ""
    for phase in (setup, call, report):
        if phase is None or phase.passed:
            continue
        error = first_error_line(phase)
        if phase.skipped:
            outcome = "skipped"
        elif "Timeout" in error and phase.when == "call":
            outcome = "timeout"
        else:
            outcome = "failed" if phase.when == "call" else "error"
        break
    seconds = round(sum(p.duration for p in phases.values()), 3)
    _log(kind="result", id=report.nodeid, outcome=outcome, error=error, seconds=seconds)


def pytest_collectreport(report: Any) -> None:
    if report.failed:
        _log(kind="collect", id=report.nodeid, error=first_error_line(report))


def pytest_deselected(items: list[Any]) -> None:
    _log(kind="deselected", ids=[i.nodeid for i in items])


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    _log(kind="finish", status=int(exitstatus))


def _nose_module() -> types.ModuleType:
    """The names of ``nose`` / ``nose.tools`` that MXNet's tests import, on unittest."""
    nose = types.ModuleType("nose")
    tools = types.ModuleType("nose.tools")
    case = unittest.TestCase()

    def make_decorator(func: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        # Like nose: the wrapper takes the test's name and attributes but not ``__wrapped__``, so
        # pytest reads the wrapper's (*args, **kwargs) and asks for no fixtures.
        def decorate(wrapper: Callable[..., Any]) -> Callable[..., Any]:
            for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
                setattr(wrapper, attr, getattr(func, attr))
            wrapper.__dict__.update(func.__dict__)
            return wrapper

        return decorate

    def raises(*exceptions: type[BaseException]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
            def test(*args: Any, **kwargs: Any) -> None:
                try:
                    func(*args, **kwargs)
                except exceptions:
                    return
                raise AssertionError(f"{func.__name__}() did not raise {' or '.join(e.__name__ for e in exceptions)}")

            return make_decorator(func)(test)

        return decorate

    def ok_(expr: Any, msg: str | None = None) -> None:
        if not expr:
            raise AssertionError(msg)

    def eq_(a: Any, b: Any, msg: str | None = None) -> None:
        if not a == b:
            raise AssertionError(msg or f"{a!r} != {b!r}")

    tools.__dict__.update(
        make_decorator=make_decorator, raises=raises, ok_=ok_, eq_=eq_,
        assert_raises=case.assertRaises, assert_equal=case.assertEqual, assert_true=case.assertTrue,
    )  # fmt: skip
    nose.__dict__.update(tools=tools, SkipTest=unittest.SkipTest, runmodule=lambda *a, **k: None)
    return nose


_NOSE = _nose_module()


# ---------------------------------------------------------------------------- the report
def cause_key(error: str) -> str:
    """Errors that differ only in numbers (values, shapes, seeds), or after their first 100 characters
    (where pytest's own cut of a long repr falls), group as one cause."""
    return re.sub(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w])", "#", error)[:100]


def report(results: dict[str, dict[str, Result]], in_scope: int, top: int | None = None) -> str:
    engines = list(results)
    counts = {e: Counter(r["outcome"] for r in results[e].values()) for e in engines}
    passed = ", ".join(f"{counts[e]['passed']} {e}" for e in engines)
    hangs = sum(counts[e]["timeout"] for e in engines)
    per = ", ".join(f"{e} {counts[e]['timeout']}" for e in engines)
    out = ["| suite | result |", "| --- | --- |"]
    out.append(f"| MXNet {TAG} unit tests (in scope {in_scope}) | passed {passed}, hangs {hangs} ({per}) |")
    out.append("")
    for e in engines:
        c = counts[e]
        out.append(f"{e}: " + ", ".join(f"{n} {o}" for o, n in sorted(c.items(), key=lambda kv: -kv[1])))
    causes: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    examples: dict[str, Counter[str]] = defaultdict(Counter)
    for e in engines:
        for tid, r in results[e].items():
            if r["outcome"] in ("passed", "skipped"):
                continue
            key = f"[{r['outcome']}] {cause_key(r['error'])}"
            causes[key][e].append(tid)
            examples[key][r["error"]] += 1
    ranked = sorted(causes.items(), key=lambda kv: (-max(len(v) for v in kv[1].values()), kv[0]))
    out += ["", "Failures by cause (first error line; numbers in messages grouped as #):", ""]
    out.append("| # | " + " | ".join(engines) + " | outcome and first error line | tests |")
    out.append("| --- | " + " | ".join("---" for _ in engines) + " | --- | --- |")
    for i, (key, by_engine) in enumerate(ranked[:top] if top else ranked, 1):
        example = examples[key].most_common(1)[0][0][:200].replace("|", "\\|")
        outcome = key.split("]")[0] + "]"
        tests = sorted({t.split("::")[1] for ts in by_engine.values() for t in ts})
        shown = ", ".join(tests[:8]) + (f", ... ({len(tests)})" if len(tests) > 8 else "")
        nums = " | ".join(str(len(by_engine.get(e, []))) for e in engines)
        out.append(f"| {i} | {nums} | {outcome} {example} | {shown} |")
    return "\n".join(out)


# ---------------------------------------------------------------------------- main
def main(argv: Iterable[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.mxnet_suite", description=__doc__.splitlines()[0])
    ap.add_argument("--mxnet-source", help="an MXNet work tree, or a git dir with tag 1.9.1 (default: $OPPROF_MXNET_SOURCE)")
    ap.add_argument("--engine", choices=("threaded", "naive", "both"), default="both")
    ap.add_argument("--json", type=Path, help="write {engine: {test_id: {outcome, error}}} here")
    ap.add_argument("-k", help="pytest -k expression, to run some of the in-scope tests")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per test (default 60)")
    ap.add_argument("--overall-timeout", type=float, default=1800.0, help="seconds per engine (default 1800)")
    ap.add_argument("--memory-gib", type=float, default=8.0, help="address-space limit of the test process (default 8)")
    ap.add_argument("--seed", default="0", help="MXNET_MODULE_SEED, so both engines draw the same data (default 0)")
    ap.add_argument("--top", type=int, default=None, help="show only the N causes blocking most tests")
    ap.add_argument("--list", action="store_true", help="print the selection and why each other test is out; run nothing")
    ap.add_argument(
        "--probe", action="store_true", help="not the measure: fill names the files import and opprof lacks with placeholders"
    )
    ap.add_argument(
        "--baseline-python",
        help="also run the selection unchanged on MXNet itself, with this Python (it needs mxnet==1.9.1, pytest-timeout)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (pytest output, logs)")
    args = ap.parse_args(list(argv) if argv is not None else None)

    read = source_reader(args.mxnet_source)
    if read is None:
        print(
            f"no MXNet {TAG} source: pass --mxnet-source (a work tree, or a git dir with tag {TAG}) or set OPPROF_MXNET_SOURCE",
            file=sys.stderr,
        )
        return 2
    if importlib.util.find_spec("pytest_timeout") is None:
        print("pytest-timeout is needed (the 'test' extra: pip install -e '.[test]')", file=sys.stderr)
        return 2
    test_utils = "opprof.test_utils" if importlib.util.find_spec("opprof.test_utils") else "opprof.nd.test_utils"

    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="opprof-mxnet-suite-"))
    try:
        texts = {f"{name}.py": read(f"{UNITTEST}/{name}.py").decode() for name in TEST_FILES}
        ids, out = select(texts)
        unit = tmp / UNITTEST
        unit.mkdir(parents=True)
        for rel in SUPPORT_FILES:
            dest = tmp / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            data = read(rel)
            dest.write_bytes(rewrite_imports(data.decode(), test_utils).encode() if rel.endswith(".py") else data)
        for fname, text in texts.items():
            (unit / fname).write_text(rewrite_imports(text, test_utils))
        (unit / "pytest.ini").write_text("[pytest]\n")
        if args.baseline_python:  # the same files, imports unchanged
            base = tmp / "mxnet"
            for rel in [*SUPPORT_FILES, *(f"{UNITTEST}/{f}" for f in texts), f"{UNITTEST}/pytest.ini"]:
                (base / rel).parent.mkdir(parents=True, exist_ok=True)
                (base / rel).write_bytes((tmp / rel).read_bytes() if rel.endswith(".ini") else read(rel))

        total = len(ids) + len(out)
        reasons = Counter("regex" if r.startswith("uses ") else r if r.startswith("disabled") else "listed" for r in out.values())
        print(
            f"MXNet {TAG}: {total} test functions in {len(TEST_FILES)} files; in scope {len(ids)}; out: "
            f"{reasons['regex']} by the regex, {reasons['listed']} by the exclusion list, "
            f"{reasons['disabled in MXNet itself (@unittest.skip)']} disabled in MXNet itself",
            file=sys.stderr,
        )
        if args.list:
            for tid in ids:
                print(f"in   {tid}")
            for tid, why in sorted(out.items()):
                print(f"out  {tid}: {why}")
            return 0

        engines = ["threaded", "naive"] if args.engine == "both" else [args.engine]
        results: dict[str, dict[str, Result]] = {}
        for engine in engines:
            t1 = time.monotonic()
            print(f"running {len(ids)} tests on the {engine} engine...", file=sys.stderr, flush=True)
            results[engine], notes = run_engine(
                engine, unit, ids, per_test=args.timeout, overall=args.overall_timeout,
                memory_gib=args.memory_gib, seed=args.seed, k=args.k, probe=args.probe,
            )  # fmt: skip
            print(f"  {engine}: {time.monotonic() - t1:.0f} s" + (f" ({notes})" if notes else ""), file=sys.stderr)
        if args.baseline_python:
            t1 = time.monotonic()
            print(f"running {len(ids)} tests on MXNet itself ({args.baseline_python})...", file=sys.stderr, flush=True)
            results["mxnet"], notes = run_engine(
                "mxnet", tmp / "mxnet" / UNITTEST, ids, per_test=args.timeout, overall=args.overall_timeout,
                memory_gib=args.memory_gib, seed=args.seed, k=args.k, python=args.baseline_python,
            )  # fmt: skip
            print(f"  mxnet: {time.monotonic() - t1:.0f} s" + (f" ({notes})" if notes else ""), file=sys.stderr)
        if args.probe:
            print("PROBE (not the measure): names the test files import and opprof lacks were filled with placeholders\n")
        print(report(results, len(ids), args.top))
        print(f"\ntotal {time.monotonic() - t0:.0f} s; test_utils: {test_utils}; seed {args.seed}")
        if args.json:
            args.json.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        return 0
    finally:
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
