"""The ``opprof`` command: ``demo``, ``view``, ``stats``, ``convert`` and ``run``.

Errors are one line on stderr and a non-zero exit code (2 for bad usage, 1 when the work failed),
never a traceback, except for the user's own script under ``run``, whose traceback is theirs.
"""

from __future__ import annotations

import argparse
import glob
import os
import runpy
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from .engine import MAX_POOL_THREADS
from .trace import Trace, TraceFormatError, load
from .trace.analysis.stats import SORT_KEYS
from .trace.compare import compare, side_by_side
from .trace.formats.jsonio import TraceSaveError, output_path_problem
from .trace.text import calls_table, compare_table, split_table, stats_json, stats_table, summary_line, why_text

__all__ = ["main"]


class CommandError(Exception):
    """A failure to report as one line."""


def _check_outputs(**paths: str | None) -> None:
    for option, path in paths.items():
        problem = path and output_path_problem(path)
        if problem:
            raise CommandError(f"--{option}: {problem}")


def _save_html(trace: Trace, path: str) -> bool:
    try:
        from .view import save_html  # Bokeh: imported only by the commands that draw
    except ImportError as e:
        print(f"opprof: timeline HTML not written ({e})", file=sys.stderr)
        return False
    save_html(trace, path)
    return True


def _load(path: str) -> Trace:
    if not os.path.exists(path):
        raise CommandError(f"no such file: {path}")
    try:
        return load(path)
    except TraceFormatError as e:
        raise CommandError(str(e)) from None


def cmd_demo(args: argparse.Namespace) -> int:
    from . import demo

    argv = ["--steps", str(args.steps), "--out", args.out, "--engine", args.engine]
    if args.threads is not None:
        argv += ["--threads", str(args.threads)]
    code = demo.main(argv)
    # The picture is drawn from opprof's own file, which keeps the engine's edges (Chrome JSON has
    # no place for them): the page then shows the same causes and exact critical path as the text.
    trace_path = os.path.join(args.out, "trace.opprof")
    html = os.path.join(args.out, "timeline.html")
    if os.path.exists(trace_path) and _save_html(_load(trace_path), html):
        print(f"timeline written to {html}: open it in a browser (works offline)")
    return code


#: The endings of a trace file's name, longest first: a directory given for a side of `opprof diff`
#: is searched for these, and a default output name drops only these.
_TRACE_SUFFIXES = (".json.gz", ".opprof", ".json")


def default_html_path(trace_path: str) -> str:
    """``report.v2.json`` -> ``report.v2.html``: the trace's name less its trace ending (only that:
    ``report.v2`` is the user's name, not an ending), plus ``.html``."""
    base = trace_path
    for suffix in _TRACE_SUFFIXES:
        if base.endswith(suffix) and len(base) > len(suffix):
            base = base[: -len(suffix)]
            break
    return base + ".html"


def _not_ours(path: str) -> bool:
    """Whether ``path`` is a file opprof did not write as a timeline (one the user made)."""
    if not os.path.exists(path):
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return True
    return b"<title>opprof" not in head


def cmd_view(args: argparse.Namespace) -> int:
    out = args.output or default_html_path(args.trace)
    if not args.output and _not_ours(out):  # never replace a file the user did not name
        raise CommandError(f"{out} exists and is not an opprof timeline: not replaced (name the output with -o)")
    _check_outputs(output=out)
    trace = _load(args.trace)
    print(summary_line(trace))
    if not _save_html(trace, out):
        return 1
    print(f"timeline written to {out}")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    trace = _load(args.trace)
    if args.format == "json":
        print(stats_json([trace], sort_by=args.sort_by))
    else:
        print(stats_table([trace], sort_by=args.sort_by, top=args.top))
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    """Rewrite a trace in the format its output name says: a Chrome JSON file opened once as
    ``.opprof`` then loads without parsing (1M spans: ~0.1 s instead of seconds)."""
    if os.path.abspath(args.output) == os.path.abspath(args.trace):
        raise CommandError("the output is the input file; name another")
    _check_outputs(output=args.output)
    trace = _load(args.trace)
    if args.output.endswith(".opprof"):
        trace.save(args.output, compress=args.compress)
    else:
        trace.save(args.output)
    print(f"{summary_line(trace)}\ntrace written to {args.output}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from .profiler import Profiler, stop_after

    script = args.script
    if not os.path.isfile(script):
        raise CommandError(f"no such script: {script}")
    _check_outputs(output=args.output, html=args.html)  # before the script runs, not after
    sys.argv = [script, *args.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    prof = Profiler(args.max_events, gil=not args.no_gil_samples).start()
    code = 0
    ended: BaseException | None = None  # how the script ended, if not by returning or exiting
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except KeyboardInterrupt as e:
        print("opprof run: interrupted; keeping what was recorded", file=sys.stderr)
        code, ended = 130, e
    except BaseException as e:
        traceback.print_exc()
        code, ended = 1, e
    finally:
        failed = stop_after(prof, ended)
        if failed is not None:  # an engine error nobody waited for: report it, keep the trace
            print(f"opprof: the script left a failed operation: {type(failed).__name__}: {failed}", file=sys.stderr)
            code = code or 1
    trace = prof.trace
    assert trace is not None
    print(summary_line(trace), file=sys.stderr)
    if len(trace.analysis().parents):
        print(split_table(trace), file=sys.stderr)
    if args.output:
        trace.save(args.output)
        print(f"trace written to {args.output}", file=sys.stderr)
    if args.html and _save_html(trace, args.html):
        print(f"timeline written to {args.html}", file=sys.stderr)
    return code


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def _threads(text: str) -> int:
    """A pool size: a whole number from 1 to the engine's bound."""
    n = _positive(text)
    if n > MAX_POOL_THREADS:
        raise argparse.ArgumentTypeError(f"at most {MAX_POOL_THREADS:,} threads, got {n:,}")
    return n


def _factor(text: str) -> tuple[str, float]:
    """``NAME=FACTOR`` of ``--what-if`` (a factor 2 makes NAME twice as fast)."""
    name, sep, value = text.rpartition("=")
    try:
        factor = float(value)
    except ValueError:
        factor = float("nan")
    if not sep or not name or not factor > 0 or factor == float("inf"):
        raise argparse.ArgumentTypeError(f"expected NAME=FACTOR with a factor above 0 (2 = twice as fast), got {text!r}")
    return name, factor


def _positive_float(text: str) -> float:
    """A number above 0 (a switch interval in ms)."""
    try:
        x = float(text)
    except ValueError:
        x = float("nan")
    if not x > 0 or x == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text!r}")
    return x


def cmd_why(args: argparse.Namespace) -> int:
    """Why the custom ops wait and what bounds the run; with ``--what-if``, what a change would buy."""
    trace = _load(args.trace)
    print(why_text(trace, top=args.top))
    gil_asked = args.switch_interval is not None or args.releases_gil or args.no_gil
    if args.what_if or args.engine_threads or args.custom_threads or gil_asked:
        try:
            result = trace.what_if(
                dict(args.what_if),
                engine_threads=args.engine_threads,
                custom_threads=args.custom_threads,
                switch_interval=args.switch_interval / 1e3 if args.switch_interval is not None else None,
                releases_gil={name: True for name in args.releases_gil},
                gil=False if args.no_gil else None,
            )
        except ValueError as e:
            raise CommandError(str(e)) from None
        print(f"What if: {result}")
    return 0


def _runs(spec: str) -> list[Trace]:
    """One side of ``opprof diff``: a trace file, a directory of them, or a glob (quoted), one run each."""
    if os.path.isdir(spec):
        paths = sorted(str(p) for p in Path(spec).iterdir() if p.name.endswith(_TRACE_SUFFIXES))
    elif any(ch in spec for ch in "*?["):
        paths = sorted(glob.glob(spec))
    else:
        paths = [spec]
    if not paths:
        raise CommandError(f"no trace files in {spec} (looked for {', '.join(_TRACE_SUFFIXES)})")
    return [_load(p) for p in paths]


def _label(runs: list[Trace], default: str) -> str:
    """The side's name: the ``%%opprof --label`` its runs were saved with, when they all agree."""
    labels = {t.metadata.get("label") for t in runs}
    label = labels.pop() if len(labels) == 1 else None
    return str(label) if label else default


def cmd_diff(args: argparse.Namespace) -> int:
    """Compare runs A with runs B; with ``--fail-if-slower PCT``, exit 2 when B is clearly slower by more."""
    _check_outputs(html=args.html)
    a, b = _runs(args.a), _runs(args.b)
    result = compare(a, b, label_a=_label(a, "A"), label_b=_label(b, "B"))
    print(compare_table(result, top=args.top))
    if args.html and _save_html(side_by_side(a, b, label_a=result.label_a, label_b=result.label_b), args.html):
        print(f"{result.label_a}'s and {result.label_b}'s typical runs on one time axis: {args.html}")
    for name in args.calls:
        try:
            print(calls_table(result, name))
        except KeyError as why:
            raise CommandError(str(why.args[0])) from None
    if args.fail_if_slower is not None and result.slower_than(args.fail_if_slower):
        e = result.end_to_end
        assert e is not None  # slower_than is False without one
        print(
            f"opprof diff: B is slower end to end ({e.ratio:.3f}x, 95 % interval {e.low:.3f}-{e.high:.3f}), "
            f"more than the {args.fail_if_slower:g} % allowed",
            file=sys.stderr,
        )
        return 2
    return 0


def _percent(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a percentage of 0 or more, got {text!r}")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="opprof", description="See where the time goes inside custom operators.")
    p.add_argument("--version", action="version", version=f"opprof {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    d = sub.add_parser("demo", help="train the built-in two-custom-op model under the profiler")
    d.add_argument("--out", default="opprof-demo", help="output directory (default ./opprof-demo)")
    d.add_argument("--steps", type=_positive, default=20, help="training steps (default 20)")
    d.add_argument("--engine", choices=["threaded", "naive"], default="threaded")
    d.add_argument("--threads", type=_threads, default=None, help="engine worker threads")
    d.set_defaults(func=cmd_demo)

    v = sub.add_parser("view", help="write a trace file's timeline as standalone HTML")
    v.add_argument("trace", help="trace file (.opprof, or .json / .json.gz: opprof, MXNet, PyTorch, VizTracer, Chrome)")
    v.add_argument("-o", "--output", help="HTML file (default: next to the trace)")
    v.set_defaults(func=cmd_view)

    s = sub.add_parser("stats", help="print a trace file's aggregate table and custom-op split")
    s.add_argument("trace")
    s.add_argument("--sort-by", choices=list(SORT_KEYS), default="total")
    s.add_argument("--top", type=_positive, default=None, help="only the first N rows")
    s.add_argument("--format", choices=["table", "json"], default="table")
    s.set_defaults(func=cmd_stats)

    c = sub.add_parser("convert", help="rewrite a trace file as .opprof (fast to open) or Chrome JSON (for Perfetto)")
    c.add_argument("trace", help="any trace file opprof opens")
    c.add_argument("output", help="the new file: .opprof for opprof's own format, else Chrome JSON (.json, .json.gz)")
    c.add_argument("--compress", action="store_true", help="deflate a .opprof file (~5x smaller, slower to write)")
    c.set_defaults(func=cmd_convert)

    w = sub.add_parser("why", help="why a trace's custom ops wait, its critical path, and what-if predictions")
    w.add_argument("trace", help="a trace file; an .opprof profile has the engine's edges (Chrome JSON keeps none)")
    w.add_argument(
        "--what-if",
        type=_factor,
        action="append",
        default=[],
        metavar="NAME=FACTOR",
        help="predict the run with NAME (a span name or custom-op type) FACTOR times as fast; repeatable",
    )
    w.add_argument("--engine-threads", type=_threads, default=None, help="predict with this many engine workers")
    w.add_argument("--custom-threads", type=_threads, default=None, help="predict with this many custom-op threads")
    w.add_argument(
        "--switch-interval", type=_positive_float, default=None, metavar="MS",
        help="predict with this GIL switch interval in ms (as sys.setswitchinterval; recorded: the profile's)",
    )  # fmt: skip
    w.add_argument(
        "--releases-gil", action="append", default=[], metavar="NAME",
        help="predict with NAME (a span name or custom-op type) running without the GIL; repeatable",
    )  # fmt: skip
    w.add_argument("--no-gil", action="store_true", help="predict on a free-threaded Python (no GIL)")
    w.add_argument("--top", type=_positive, default=5, help="how many op types and path entries to name (default 5)")
    w.set_defaults(func=cmd_why)

    f = sub.add_parser("diff", help="compare runs A with runs B: medians, B/A with a 95 %% interval, verdicts")
    f.add_argument("a", metavar="A", help="runs before: a trace file, a directory of trace files, or a quoted glob")
    f.add_argument("b", metavar="B", help="runs after, the same way")
    f.add_argument(
        "--fail-if-slower", type=_percent, default=None, metavar="PCT",
        help="exit with status 2 when B is slower end to end (its interval above 1) by more than PCT %% (a CI gate)",
    )  # fmt: skip
    f.add_argument("--top", type=_positive, default=25, help="rows to show (default 25)")
    f.add_argument("--html", default=None, metavar="HTML", help="write both sides' typical runs on one time axis here")
    f.add_argument(
        "--calls", action="append", default=[], metavar="OP",
        help="also show every call of custom op OP (_backward_OP for its backward), paired by order; repeatable",
    )  # fmt: skip
    f.set_defaults(func=cmd_diff)

    r = sub.add_parser("run", help="profile a Python script that uses opprof")
    r.add_argument("-o", "--output", help="save the trace here (.opprof, .json or .json.gz)")
    r.add_argument("--html", help="save the timeline here")
    r.add_argument("--max-events", type=_positive, default=5_000_000)
    r.add_argument(
        "--no-gil-samples",
        action="store_true",
        help="do not sample the GIL or time the engine's hand-offs (less overhead; no GIL evidence in the trace)",
    )
    r.add_argument("script")
    r.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    r.set_defaults(func=cmd_run)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CommandError as e:
        print(f"opprof {args.command}: {e}", file=sys.stderr)
        return 1
    except TraceSaveError as e:  # a trace this format cannot hold: nothing written
        print(f"opprof {args.command}: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # a file that could not be written after all (disk full, permissions)
        print(f"opprof {args.command}: {e.strerror or e}: {e.filename or ''}".rstrip(": "), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("opprof: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
