"""The `opprof` command through a subprocess: each subcommand, --help, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import opprof as mx
from opprof.trace.synthetic import synthetic_trace
from opprof.trace.text import CAUSE_WORDS


def opprof(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "opprof.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=timeout, check=False
    )


COMMANDS = ["demo", "view", "stats", "convert", "why", "diff", "run"]


@pytest.mark.parametrize("sub", COMMANDS)
def test_every_command_has_help(sub: str) -> None:
    r = opprof(sub, "--help")
    assert r.returncode == 0 and f"usage: opprof {sub}" in r.stdout


def test_the_top_help_lists_every_command() -> None:
    """Each command's one-line help is %-formatted by argparse: a bare "95 %" in one broke it."""
    r = opprof("--help")
    assert r.returncode == 0, r.stderr
    listed = [line.split()[0] for line in r.stdout.splitlines() if line.startswith("    ") and not line.startswith("     ")]
    assert listed == COMMANDS
    assert "95 % interval" in r.stdout


def test_version() -> None:
    r = opprof("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"opprof {mx.__version__}"


def test_demo_writes_trace_and_prints_the_split(tmp_path: Path) -> None:
    r = opprof("demo", "--steps", "3", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "custom operators, where the wall time went" in r.stdout
    trace = mx.trace.load(tmp_path / "out" / "trace.json")
    assert trace.validate() == [] and len(trace.custom_ops()) == 12
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"], "no stray files outside --out"


def test_stats_table_and_json(tmp_path: Path) -> None:
    opprof("demo", "--steps", "2", "--out", str(tmp_path))
    r = opprof("stats", str(tmp_path / "trace.json"), "--top", "3", "--sort-by", "count")
    assert r.returncode == 0, r.stderr
    assert "Profile Statistics" in r.stdout and "where the wall time went" in r.stdout
    r = opprof("stats", str(tmp_path / "trace.json"), "--format", "json")
    data = json.loads(r.stdout)
    assert {c["name"] for c in data["custom_ops"]} == {
        "ScaledTanh",
        "_backward_ScaledTanh",
        "RowSquaredError",
        "_backward_RowSquaredError",
    }


def test_run_profiles_a_script_and_passes_its_arguments(tmp_path: Path) -> None:
    script = tmp_path / "work.py"
    script.write_text(
        "import sys\nimport opprof as mx\nn = int(sys.argv[1])\na = mx.nd.ones((2, 2))\n"
        "for _ in range(n):\n    a = a + 1\nprint('value', a.asnumpy()[0, 0])\n"
    )
    out = tmp_path / "t.json.gz"
    r = opprof("run", "-o", str(out), str(script), "5")
    assert r.returncode == 0, r.stderr
    assert "value 6.0" in r.stdout
    trace = mx.trace.load(out)
    assert sum(s.name == "_plus_scalar" for s in trace.spans) == 5


def test_run_without_gil_samples_says_so_in_the_trace(tmp_path: Path) -> None:
    from opprof.profiler.gil import TURNED_OFF

    script = tmp_path / "work.py"
    script.write_text("import opprof as mx\n(mx.nd.ones((2, 2)) + 1).wait_to_read()\n")
    out = tmp_path / "t.opprof"
    r = opprof("run", "--no-gil-samples", "-o", str(out), str(script))
    assert r.returncode == 0, r.stderr
    trace = mx.trace.load(out)
    assert trace.thread_states is None and trace.metadata["gil"] == {"why_not": TURNED_OFF}


def test_run_reports_a_failing_script_and_keeps_the_trace(tmp_path: Path) -> None:
    script = tmp_path / "bad.py"
    script.write_text("import opprof as mx\n(mx.nd.ones((2,)) + 1).wait_to_read()\nraise SystemExit(3)\n")
    out = tmp_path / "t.json"
    r = opprof("run", "-o", str(out), str(script))
    assert r.returncode == 3
    assert any(s.name == "_plus_scalar" for s in mx.trace.load(out).spans)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["stats", "missing.json"], "no such file: missing.json"),
        (["run", "missing.py"], "no such script: missing.py"),
        (["demo", "--steps", "0"], "must be at least 1"),
        (["stats", "x.json", "--sort-by", "name"], "invalid choice"),
        (["bogus"], "invalid choice"),
        (["why", "x.opprof", "--what-if", "Slow"], "expected NAME=FACTOR"),
        (["why", "x.opprof", "--what-if", "Slow=0"], "a factor above 0"),
        (["why", "x.opprof", "--switch-interval", "0"], "a number above 0"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(tmp_path: Path, args: list[str], message: str) -> None:
    r = opprof(*args, cwd=tmp_path)
    assert r.returncode != 0
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_a_malformed_trace_file_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    r = opprof("stats", str(bad))
    assert r.returncode == 1 and str(bad) in r.stderr and "Traceback" not in r.stderr


def test_view_writes_a_standalone_timeline(tmp_path: Path) -> None:
    opprof("demo", "--steps", "2", "--out", str(tmp_path))
    assert (tmp_path / "timeline.html").exists(), "opprof demo writes the timeline too"
    out = tmp_path / "view.html"
    r = opprof("view", str(tmp_path / "trace.json"), "-o", str(out))
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    assert "cdn.bokeh.org" not in html and "Bokeh" in html  # inline BokehJS: opens offline
    assert f"timeline written to {out}" in r.stdout
    r = opprof("view", str(tmp_path / "trace.json"))  # default: next to the trace
    assert r.returncode == 0 and (tmp_path / "trace.html").exists()


def test_convert_between_chrome_json_and_opprof_files(tmp_path: Path) -> None:
    synthetic_trace(3_000).save(tmp_path / "t.json")
    r = opprof("convert", str(tmp_path / "t.json"), str(tmp_path / "t.opprof"), "--compress")
    assert r.returncode == 0, r.stderr
    assert "trace written to" in r.stdout
    r = opprof("convert", str(tmp_path / "t.opprof"), str(tmp_path / "back.json.gz"))
    assert r.returncode == 0, r.stderr
    a, b, c = (mx.trace.load(tmp_path / n) for n in ("t.json", "t.opprof", "back.json.gz"))
    assert a == b == c
    r = opprof("stats", str(tmp_path / "t.opprof"), "--top", "2")  # every command opens it
    assert r.returncode == 0 and "Profile Statistics" in r.stdout


def test_convert_refuses_to_overwrite_its_input(tmp_path: Path) -> None:
    synthetic_trace(100).save(tmp_path / "t.json")
    r = opprof("convert", str(tmp_path / "t.json"), str(tmp_path / "t.json"))
    assert r.returncode == 1 and "the output is the input file" in r.stderr


def test_why_explains_a_profile_and_predicts_a_change(tmp_path: Path) -> None:
    r = opprof("demo", "--steps", "3", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "Why the custom ops wait" in r.stdout and "Critical path" in r.stdout
    native = tmp_path / "trace.opprof"
    r = opprof("why", str(native), "--what-if", "ScaledTanh::pure_python=2", "--custom-threads", "4")
    assert r.returncode == 0, r.stderr
    # The custom-op pool's queue in one of its causes' words (busy, waking a thread, the GIL): the
    # critical path, which also said "queued for a custom-op thread", now says which of them it was.
    assert any(CAUSE_WORDS[k] in r.stdout for k in ("custom_pool", "custom_pool_wake", "custom_pool_gil")), r.stdout
    assert "Critical path" in r.stdout
    what_if = [line for line in r.stdout.splitlines() if line.startswith("What if:")]
    assert len(what_if) == 1 and "predicted" in what_if[0] and "recorded" in what_if[0]
    # A Chrome file keeps no edges: the path is the stated approximation, what-if is refused clearly.
    r = opprof("why", str(tmp_path / "trace.json"))
    assert r.returncode == 0 and "approximate" in r.stdout, r.stderr
    r = opprof("why", str(tmp_path / "trace.json"), "--what-if", "ScaledTanh=2")
    assert r.returncode == 1 and ".opprof" in r.stderr and "Traceback" not in r.stderr
    r = opprof("why", str(native), "--what-if", "NoSuchOp=2")
    assert r.returncode == 1 and "NoSuchOp" in r.stderr and "Traceback" not in r.stderr
    # The GIL's knobs: another switch interval, an op that releases it, no GIL at all.
    r = opprof("why", str(native), "--switch-interval", "0.5", "--releases-gil", "ScaledTanh", "--no-gil")
    assert r.returncode == 0, r.stderr
    (line,) = [line for line in r.stdout.splitlines() if line.startswith("What if:")]
    assert "ScaledTanh releases the GIL" in line and "no GIL" in line
