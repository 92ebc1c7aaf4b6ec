"""README.md and the pages it links (docs/*.md) stay true: their Python blocks run, and every
path, link and API name they mention exists.

* Every ```python block runs. A plain block runs with ``exec`` in a fresh namespace, in a temporary
  working directory (so the ``trace.json`` / ``timeline.html`` it writes land there); blocks are
  self-contained, none continues another. A block that is a notebook cell (it starts with ``%``,
  e.g. ``%load_ext opprof``, ``%%opprof``) runs through a real IPython shell, all of them in order in
  one namespace, as a notebook's cells do.
* An unindented ``print(...)  # X ...`` line promises that it prints the line ``X`` (the first word
  of its comment); ``.save("name")`` promises a file ``name``.
* Paths (``opprof/...``, ``tests/...``, ``notebooks/...``, ``benchmarks/...``), file names in
  backticks, ``mx.`` / ``opprof.`` names and the names listed for ``mx.nd`` and ``mx.autograd``
  exist; the layer listing matches the import-linter contract; nothing points at ``shared/``.

A failure names the page and the block's line in it.
"""

from __future__ import annotations

import ast
import importlib
import io
import re
import tokenize
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import opprof as mx

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: The README and the reference pages it links, in that order (their cells run in this order).
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
TEXTS = {page: page.read_text(encoding="utf-8") for page in PAGES}
#: Every page's text, for what must exist wherever it is named.
TEXT = "\n".join(TEXTS.values())


@dataclass(frozen=True)
class Block:
    lang: str
    line: int  # the page's line of the block's first code line (1-based)
    code: str
    section: str
    page: Path = README

    @property
    def is_cell(self) -> bool:
        """A notebook cell: it starts with a line or cell magic."""
        return self.code.lstrip().startswith("%")

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)} line {self.line} (section {self.section!r})"


def _blocks(text: str, page: Path = README) -> list[Block]:
    blocks: list[Block] = []
    section = "(top)"
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = line[3:].strip()
        fence = re.match(r"^```(\w*)\s*$", line)
        if fence:
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            assert j < len(lines), f"{page.relative_to(ROOT)} line {i + 1}: unclosed code fence"
            blocks.append(Block(fence.group(1), i + 2, "\n".join(lines[i + 1 : j]) + "\n", section, page))
            i = j
        i += 1
    return blocks


BLOCKS = [b for page, text in TEXTS.items() for b in _blocks(text, page)]
PYTHON = [b for b in BLOCKS if b.lang == "python"]
PLAIN = [b for b in PYTHON if not b.is_cell]
CELLS = [b for b in PYTHON if b.is_cell]
# Outside code blocks: the prose and its `inline code`.
PROSE = re.sub(r"^```.*?^```", "", TEXT, flags=re.S | re.M)


@pytest.fixture(scope="module", autouse=True)
def restore_engine() -> Iterator[None]:
    yield
    eng = mx.get_engine()
    eng.wait_for_all()
    assert eng.observer is None, "a README block left a profiler attached to the engine"
    if eng.kind != "threaded":
        mx.set_engine("threaded")


def test_readme_has_the_blocks_this_file_runs() -> None:
    assert len(PLAIN) >= 3 and len(CELLS) >= 2, [b.where() for b in PYTHON]
    assert any(b.code.lstrip().startswith("%%opprof") for b in CELLS)
    # The first screen: a script and a profiled cell, run here like the rest.
    assert any(b.page == README for b in PLAIN) and sum(b.page == README for b in CELLS) >= 2


def test_every_page_the_readme_links_exists_and_is_tested() -> None:
    linked = set()
    for page, text in TEXTS.items():
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if re.match(r"[a-z]+:", target):  # http(s):, mailto:
                continue
            path = (page.parent / target).resolve()
            assert path.exists(), f"{page.relative_to(ROOT)} links {target}, which does not exist"
            if path.suffix == ".md" and page == README:
                linked.add(path)
    docs = set((ROOT / "docs").glob("*.md"))
    assert docs and docs <= linked, f"pages in docs/ the README does not link: {sorted(p.name for p in docs - linked)}"
    assert {p.resolve() for p in PAGES} >= linked - {README.resolve()}


def test_no_block_is_a_fragment_with_placeholders() -> None:
    # `...` standing for "your code here" runs (it is Python) but shows nothing: blocks do real work.
    from IPython.core.inputtransformer2 import TransformerManager

    tm = TransformerManager()
    for block in PYTHON:
        tree = ast.parse(tm.transform_cell(block.code) if block.is_cell else block.code)
        for node in ast.walk(tree):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and node.value.value is Ellipsis:
                pytest.fail(
                    f"{block.where()}: line {block.line + node.lineno - 1} is a `...` placeholder; make the block runnable"
                )


# ---------------------------------------------------------------------------- plain Python blocks
def _promised_output(block: Block) -> list[str]:
    """The first word of the comment on each unindented ``print(...)`` line, in order."""
    promised = []
    for tok in tokenize.generate_tokens(io.StringIO(block.code).readline):
        if tok.type == tokenize.COMMENT and tok.line.startswith("print(") and tok.string[1:].split():
            promised.append(tok.string[1:].split()[0])
    return promised


def _promised_files(block: Block) -> list[str]:
    return re.findall(r"""\.save\(\s*["']([^"']+)["']""", block.code)


def _block_param(block: Block) -> Any:
    """A block that starts a Dask cluster (worker processes) is end to end: ``-m "not e2e"`` leaves it out."""
    marks = [pytest.mark.e2e] if "LocalCluster(" in block.code else []
    return pytest.param(block, id=f"{block.page.stem}-line{block.line}", marks=marks)


@pytest.mark.parametrize("block", [_block_param(b) for b in PLAIN])
def test_python_block_runs(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    # Blank lines in front, so a traceback's line numbers are the page's.
    code = compile("\n" * (block.line - 1) + block.code, str(block.page), "exec")
    namespace: dict[str, Any] = {"__name__": "__readme__"}
    try:
        exec(code, namespace)  # running the README's code is the point
    except Exception:
        pytest.fail(f"{block.where()}: the block raised\n{traceback.format_exc()}")
    out = capsys.readouterr().out
    lines = [ln.strip() for ln in out.splitlines()]
    pos = 0
    for expected in _promised_output(block):
        hits = [k for k in range(pos, len(lines)) if lines[k] == expected]
        assert hits, f"{block.where()}: the README says it prints {expected!r}; it printed:\n{out}"
        pos = hits[0] + 1
    for name in _promised_files(block):
        assert (tmp_path / name).is_file(), f"{block.where()}: the README says it writes {name!r}; it did not"


def test_the_custom_op_example_promises_its_gradient() -> None:
    # The guard for the check above: the MXNet example's `print(...)   # 6.0` is read as a promise.
    (block,) = [b for b in PLAIN if "MyAddOne" in b.code]
    assert _promised_output(block) == ["6.0"], block.where()


# ---------------------------------------------------------------------------- notebook cells
def test_notebook_cells_are_valid_ipython() -> None:
    from IPython.core.inputtransformer2 import TransformerManager

    tm = TransformerManager()
    for block in CELLS:
        source = tm.transform_cell(block.code)
        try:
            compile(source, f"{block.where()}", "exec")
        except SyntaxError as e:
            pytest.fail(f"{block.where()}: not a valid IPython cell: {e}\n{source}")


def test_notebook_cells_run_in_ipython(ipython_shell: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from IPython.utils.capture import capture_output

    monkeypatch.chdir(tmp_path)
    shell = ipython_shell
    shell.user_ns.pop("_opprof", None)
    for block in CELLS:
        with capture_output() as out:
            result = shell.run_cell(block.code)
        error = result.error_before_exec or result.error_in_exec
        if not result.success or error is not None:
            detail = "".join(traceback.format_exception(error)) if error is not None else ""
            pytest.fail(f"{block.where()}: the cell failed: {error!r}\n{detail}\n{out.stdout}{out.stderr}")
    if any(b.code.lstrip().startswith("%%opprof") for b in CELLS):
        # "The result stays in `_opprof` (`.trace`, ...)"
        profile = shell.user_ns.get("_opprof")
        assert profile is not None, "after the README's %%opprof cell there is no _opprof"
        assert profile.trace.validate() == []
        assert profile.error is None


# ---------------------------------------------------------------------------- what it names exists
def test_readme_never_points_at_shared() -> None:
    for page, text in TEXTS.items():
        for n, line in enumerate(text.splitlines(), 1):
            where = f"{page.relative_to(ROOT)} line {n}"
            assert "shared/" not in line, f"{where} points at shared/, which a clone does not have: {line.strip()}"


PATH = re.compile(r"(?<![\w./-])((?:opprof|tests|notebooks|benchmarks|binder|docs|\.ci)/[\w./-]*)")


def _line_of(needle: str) -> str:
    """Where ``needle`` first appears: "page line N"."""
    for page, text in TEXTS.items():
        if needle in text:
            return f"{page.relative_to(ROOT)} line {text[: text.index(needle)].count(chr(10)) + 1}"
    return "(not found)"


def test_every_path_exists() -> None:
    paths = {m.group(1).rstrip(".,;:") for m in PATH.finditer(TEXT)}
    assert len(paths) > 10, paths
    missing = [f"{p} ({_line_of(p)})" for p in sorted(paths) if not (ROOT / p).exists()]
    assert not missing, f"the README and its pages mention paths that do not exist: {missing}"
    for url_path in re.findall(r"urlpath=lab/tree/([\w./-]+)", TEXT):  # the Binder badge
        assert (ROOT / url_path).is_file(), url_path


def _repo_files() -> set[str]:
    skip = {".venv", ".git", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis", ".import_linter_cache"}
    return {p.name for p in ROOT.rglob("*") if p.is_file() and not skip & set(p.relative_to(ROOT).parts)}


def test_every_file_name_in_backticks_exists() -> None:
    names = set(re.findall(r"`([\w.-]+\.(?:py|json|ipynb|md))`", PROSE))
    assert names, "no file names found"
    missing = sorted(names - _repo_files())
    assert not missing, f"README.md names files the repository does not have: {missing}"


def _layout_block() -> Block:
    (block,) = [b for b in BLOCKS if b.lang == "text" and b.code.startswith("opprof/")]
    return block


def test_layout_listing_names_real_modules() -> None:
    block = _layout_block()
    directory: Path | None = None
    layer: Path | None = None  # the layer's folder; an indented "analysis/" line names a folder in it
    for k, line in enumerate(block.code.splitlines()):
        head = re.match(r"^(opprof/[\w./]*)", line) or re.match(r"^\s+([\w/]+/)(?=\s)", line)
        if head and line.startswith("opprof/"):
            target = ROOT / head.group(1)
            assert target.exists(), f"{block.page.name} line {block.line + k}: {head.group(1)} does not exist"
            directory = layer = target if target.is_dir() else None
        elif head and layer is not None:
            directory = layer / head.group(1)
            assert directory.is_dir(), f"{block.page.name} line {block.line + k}: {layer.name}/{head.group(1)} is no folder"
        if directory is not None:
            for name in re.findall(r"\b(\w+\.py)\b", line[head.end() if head else 0 :]):
                assert (directory / name).is_file(), (
                    f"{block.page.name} line {block.line + k}: {directory.name}/{name} does not exist"
                )


def test_layout_listing_follows_the_import_contract() -> None:
    # pyproject.toml's [tool.importlinter] layers (tomllib is 3.11+; the project supports 3.10).
    # The package's layers: the first contract's (the trace layer's own floors come after it).
    layers = re.findall(r"^layers = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(), flags=re.S | re.M)[0]
    contract = [name.strip() for layer in re.findall(r'"([^"]+)"', layers) for name in layer.split("|")]
    heads = [re.match(r"^opprof/(\w+)", line) for line in _layout_block().code.splitlines()]
    listed = [m.group(1) for m in heads if m]
    assert listed == contract, f"README's layer listing {listed} is not pyproject.toml's layers {contract}"


#: Names the README mentions as what opprof does NOT provide, or no longer provides.
ABSENT = {"mx.sym"}


def _resolve(dotted: str) -> Any:
    parts = dotted.split(".")
    if parts[0] == "mx":
        parts[0] = "opprof"
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def test_every_api_name_exists() -> None:
    from opprof.moved import MOVED

    names = set(re.findall(r"\b(?:mx|opprof)(?:\.[A-Za-z_]\w*)+", TEXT))
    assert len(names) > 20, names
    problems = []
    for name in sorted(names):
        if name in ABSENT:
            with pytest.raises((AttributeError, ImportError)):
                _resolve(name)
        elif name in MOVED:  # opprof 0.1's flat modules: a clear error naming the new home
            with pytest.raises(ModuleNotFoundError, match="has moved"):
                importlib.import_module(name)
        else:
            try:
                _resolve(name)
            except (AttributeError, ImportError) as e:
                problems.append(f"{name} ({_line_of(name)}): {type(e).__name__}: {e}")
    assert not problems, "README.md names what opprof does not have:\n" + "\n".join(problems)


def _listed_names(namespace: str) -> list[tuple[str, int]]:
    """The words of each `a b c ...` list in the README bullet for ``namespace`` (e.g. `mx.nd`)."""
    start = PROSE.index(f"(`{namespace}`):")
    end = PROSE.find("\n- **", start)
    bullet = PROSE[start:end]
    words = []
    for group in re.findall(r"`([^`]+)`", bullet):
        tokens = group.split()
        if len(tokens) >= 3 and all(re.fullmatch(r"[A-Za-z_]\w*(\.\w+)?", t) for t in tokens):
            words += [(t, _line_of(group)) for t in tokens]  # type: ignore[misc]
    return words


@pytest.mark.parametrize("namespace", ["mx.nd", "mx.autograd"])
def test_listed_functions_exist(namespace: str) -> None:
    module = _resolve(namespace)
    words = _listed_names(namespace)
    assert len(words) > 5, words
    missing = []
    for word, line in words:
        try:
            _resolve(f"{namespace}.{word}")
        except AttributeError:
            if not hasattr(mx.nd.NDArray, word):  # the NDArray methods and properties listed with them
                missing.append(f"{word} (line {line})")
    assert not missing, f"README lists names that {module.__name__} (and NDArray) lack: {missing}"
