"""IPython front door: the ``%%opprof`` cell magic, ``%opprof_view`` and ``%opprof_init``.

The cell runs the way a plain cell does: in the user's namespace, with IPython's syntax
transforms, its last expression's value shown as ``Out[]``, and an error raised as the cell's
error (after the partial timeline is shown), so nbclient and CI see it. The cell is compiled and
run here rather than through a nested ``shell.run_cell``, which swallows the error.

In a kernel the timeline also grows while the cell runs (``--live``: :mod:`.live`); the full
timeline takes the live view's place when the cell ends, however it ends.
"""

from __future__ import annotations

import ast
import importlib
import keyword
import os
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from .. import engine as _engine
from ..engine import MAX_POOL_THREADS
from ..profiler import Profiler, ProfileSession, stop_after
from ..profiler.ab import MAX_LOOPS, MIN_RUN_S, loops_after_warmup, pair_order, run_seconds
from ..profiler.memory import COMPILED_WHY_NOT as MEMORY_WHY_NOT
from ..trace import Trace, load
from ..trace.analysis.stats import SORT_KEYS
from ..trace.compare import Comparison, compare, loops_of, side_by_side
from ..trace.formats.atomic import not_a_regular_file
from ..trace.formats.jsonio import output_path_problem
from ..trace.text import alive_text, compare_table, fmt_us, split_table, stats_table, summary_line, why_text
from .bokehjs import load_bokehjs, unwatched
from .cells import compiled_cell_name, running_cell
from .live import PERIOD_S as LIVE_PERIOD_S
from .live import LiveView
from .saved import SavedTimeline
from .widgets import timeline

__all__ = ["CellProfile", "OpprofMagics"]


@dataclass
class CellProfile:
    """What ``%%opprof`` leaves in the user namespace (``--var``, default ``_opprof``).

    ``trace`` is the (last) measured run; with ``--repeat N``, ``runs`` holds all N of them and
    ``warmup`` the run before them, kept apart (first runs pay for imports and caches). ``code``
    is the cell's text (what ``--interleave`` runs again for a label), ``comparison`` the result of
    ``--compare``."""

    trace: Trace
    error: BaseException | None
    wall_s: float
    runs: list[Trace] = field(default_factory=list)
    warmup: Trace | None = None
    label: str | None = None
    code: str | None = None
    cell_number: int | None = None  # the cell's execution count, where known
    comparison: Comparison | None = None

    def __post_init__(self) -> None:
        if not self.runs:
            self.runs = [self.trace]

    def timeline(self, **options: Any) -> Any:
        return timeline(self.trace, **options)

    def stats(self, sort_by: str = "total") -> str:
        return stats_table(self.runs, sort_by=sort_by)

    def save(self, directory: str) -> list[str]:
        """Every measured run as ``run<k>.opprof`` in ``directory`` (made if need be; the warm-up is
        left out), for ``opprof diff`` or :func:`opprof.compare` another day. Returns the paths."""
        os.makedirs(directory, exist_ok=True)
        paths = [os.path.join(directory, f"run{k}.opprof") for k in range(len(self.runs))]
        for k, (trace, path) in enumerate(zip(self.runs, paths, strict=True)):
            # The label and the run's place travel in the file: `opprof diff` names the sides by them.
            trace.metadata.update({"label": self.label, "run": k, "runs": len(self.runs)} if self.label else {"run": k})
            trace.save(path)
        return paths

    def compare(self, other: CellProfile) -> Comparison:
        """This result's runs (A) against ``other``'s (B)."""
        return compare(self.runs, other.runs, label_a=self.label or "A", label_b=other.label or "B")

    def __repr__(self) -> str:
        runs = f"{len(self.runs)} runs, last: " if len(self.runs) > 1 else ""
        return f"<CellProfile{' ' + repr(self.label) if self.label else ''}: {runs}{summary_line(self.trace, self.wall_s)}>"


#: Where ``--label`` keeps results in the user namespace, for ``--compare`` (a dict: label -> CellProfile).
HISTORY_VAR = "_opprof_history"


def _run_code(shell: Any, cell: str, number: int | None = None) -> Any:
    """Run ``cell`` in the user namespace; return the value of a final expression (like a cell).

    The body is compiled under IPython's own name for this cell (or for cell ``number``: a
    labelled cell run again), so a profile's lines and a traceback say ``In [5], line 3``, its
    lines counted from the cell's first line: the ``%%opprof`` line is line 1 in the notebook, so
    the body starts at line 2."""
    source = shell.transform_cell(cell)
    name = compiled_cell_name(shell, "\n" + source, number)  # the cached text lines up with the notebook's
    tree = ast.parse(source, filename=name)
    ast.increment_lineno(tree, 1)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    ns = shell.user_ns
    if tree.body:
        exec(compile(tree, name, "exec"), ns, ns)  # running the user's cell is the point
    if last is not None:
        return eval(compile(last, name, "eval"), ns, ns)
    return None


def _loops(args: Any, warmup_s: float) -> int:
    """How many times each measured run runs the cell: ``--loops K``, or (auto) enough for a run of
    at least :data:`MIN_RUN_S` after a warm-up run of ``warmup_s``."""
    return loops_after_warmup(warmup_s) if args.loops == "auto" else int(args.loops)


def _loops_as(args: Any, baseline: CellProfile | None) -> int | None:
    """With ``--compare NAME`` and ``--loops auto``: as many loops as NAME's measured runs had, where
    NAME ran with ``--repeat`` (else None). Rows are compared per loop, and what happens once a run
    (the profile's final wait for the engine, a run's first ops on cold caches) weighs 1/loops of
    it: sides calibrated apart, from one warm-up each (3 and 11 loops, 9 and 19, on small ops here),
    made the final wait's row differ in 5 of 20 blocked trials of identical code; with A's loops on
    both sides, in 0 of 20 (2026-12-04)."""
    if args.loops != "auto" or baseline is None or baseline.warmup is None or not baseline.runs:
        return None
    return loops_of(baseline.runs[0])


def _memory_wanted(args: Any) -> bool:
    """``--memory``, ``--no-memory``; else on where it is cheap: the compiled hook (~6 % on a loop of
    tiny ops, within noise on custom ops), not the pure-Python one (~30 %; ``benchmarks``, "Memory")."""
    if args.memory or args.no_memory:
        return bool(args.memory)
    return not MEMORY_WHY_NOT


@magics_class
class OpprofMagics(Magics):
    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        self._shown: dict[str, list[Any]] = {}  # per cell (_cell_key): the widgets its last run showed
        self._cell = ""  # the running cell's key

    @magic_arguments()
    @argument("--engine", choices=["threaded", "naive"], default=None, help="engine for this cell (default: the current one)")
    @argument("--threads", type=int, default=None, metavar="N", help="engine worker threads")
    @argument("--custom-threads", type=int, default=None, metavar="N", help="custom-op worker threads")
    @argument("-o", "--output", default=None, metavar="PATH", help="save the trace (.opprof, .json, .json.gz); --repeat: a dir")
    @argument("--html", default=None, metavar="PATH", help="save the timeline as standalone HTML")
    @argument("--no-widget", action="store_true", help="do not show the timeline widget")
    @argument("--live", action="store_true", help="show the timeline growing while the cell runs (default in a notebook)")
    @argument("--no-live", action="store_true", help="no live view: the timeline shows when the cell ends")
    @argument("--stats", nargs="?", const=20, type=int, default=None, metavar="N", help="print the top-N aggregate table")
    @argument("--sort-by", choices=list(SORT_KEYS), default="total", help="order of the --stats table")
    @argument("--why", action="store_true", help="print why the custom ops wait and the critical path, in words")
    @argument(
        "--memory",
        action="store_true",
        help="record each NDArray's storage: peak and allocated bytes, a memory lane, what stays alive "
        "(the default where opprof's compiled part is built; in pure Python it costs ~30 %% on tiny ops)",
    )
    @argument("--no-memory", action="store_true", help="do not record memory")
    @argument(
        "--no-gil-samples",
        action="store_true",
        help="do not sample the GIL or time the engine's hand-offs (for a program whose threads the sampler's "
        "wakes disturb); waiting is then no longer split into the GIL and waking a thread",
    )
    @argument("--var", default="_opprof", metavar="NAME", help="user variable for the result (default _opprof)")
    @argument("--repeat", type=int, default=None, metavar="N", help="run the cell N times after one warm-up run (kept apart)")
    @argument(
        "--loops",
        default=None,
        metavar="K|auto",
        help="with --repeat: the cell K times inside each measured run (default auto: runs of at least 100 ms)",
    )
    @argument("--label", default=None, metavar="NAME", help="keep the result under NAME in _opprof_history, for --compare")
    @argument("--compare", default=None, metavar="NAME", help="compare this cell's runs with those labelled NAME")
    @argument(
        "--interleave",
        action="store_true",
        help="with --compare NAME and --repeat N: run NAME's cell and this one alternately, run by run",
    )
    @argument("--max-events", type=int, default=5_000_000, metavar="N", help="event cap (memory bound)")
    @argument("--dask", default=None, metavar="CLIENT", help="also profile a Dask cluster (Client variable or address)")
    @cell_magic
    def opprof(self, line: str, cell: str) -> Any:
        """Run the cell under the opprof engine and profiler, then show its timeline."""
        args = self._parse(line)
        shell = self.shell
        assert shell is not None  # a magic always runs in a shell
        # This cell's earlier run's widgets: the output they were shown in is being replaced.
        self._release(self._cell_key(line, cell))
        # The cell's own engine (--engine, --threads): made current for the cell's runs only.
        engine_for_cell: AbstractContextManager[object] = nullcontext()
        if args.engine is not None or args.threads is not None or args.custom_threads is not None:
            kind = args.engine or _engine.get_engine().kind
            if kind == "naive" and (args.threads or args.custom_threads):
                raise UsageError(f"--threads and --custom-threads need the threaded engine\n{self.opprof.parser.format_usage()}")
            spec = {"workers": args.threads, "custom_workers": args.custom_threads} if kind == "threaded" else {}
            engine_for_cell = _engine.use(kind, **spec)

        history = shell.user_ns.setdefault(HISTORY_VAR, {})
        if args.compare is not None and args.compare not in history:
            known = ", ".join(sorted(history)) or "none yet: run a cell with --label NAME first"
            raise UsageError(f"--compare {args.compare}: no result has that label (labels: {known})")
        # With --repeat, no live view: each run has a profiler of its own.
        live_wanted = self._live_wanted(args) and args.repeat is None
        if live_wanted:
            try:
                # Bokeh's import (~0.6 s, once a kernel) here rather than in the thread's first
                # poll, which would show the view that much later; the final timeline needs it anyway.
                importlib.import_module("opprof.view.live")
            except ImportError:  # bokeh/ipywidgets missing: no live view (the end says why)
                live_wanted = False
            else:
                load_bokehjs(once=True)  # before any BokehModel shows (a no-op once %load_ext did it)
        if args.interleave:
            return self._interleaved(shell, cell, args, history, engine_for_cell)
        runs: list[Trace] = []
        warmup: Trace | None = None
        live: LiveView | None = None
        error: BaseException | None = None
        result = None
        wall = 0.0
        loops = 1
        with engine_for_cell:  # the engine before the cell is current again after it, however it ends
            for k in range(1 + (args.repeat or 0)):  # with --repeat, run 0 is the warm-up
                trace, error, wall, result, live = self._profile_once(shell, cell, args, live_wanted, loops)
                if args.repeat and k == 0 and error is None:
                    warmup = trace
                    # Runs long enough to compare: the warm-up's time sets the loops (or --loops K).
                    matched = _loops_as(args, history[args.compare] if args.compare is not None else None)
                    run_s = run_seconds(trace, wall)
                    loops = matched if matched is not None else _loops(args, run_s)
                    if matched is not None:
                        print(
                            f"opprof: each of the {args.repeat} runs runs the cell {loops} time(s), as {args.compare}'s "
                            "runs did (both sides alike: what happens once a run weighs the same per loop; --loops K to set it)"
                        )
                    elif loops > 1:
                        print(
                            f"opprof: each of the {args.repeat} runs runs the cell {loops} times "
                            f"(one run took {run_s * 1e3:.1f} ms; a run of at least "
                            f"{MIN_RUN_S * 1e3:.0f} ms compares reliably; --loops K to set it)"
                        )
                else:
                    runs.append(trace)
                if error is not None:  # an error or Ctrl-C ends the repeats: what ran is kept
                    break
        if not runs:  # the warm-up itself failed
            runs = [trace]
        before = history[args.compare].runs if args.compare is not None else []
        number = running_cell(shell)
        profile = CellProfile(runs[-1], error, wall, runs=runs, warmup=warmup, label=args.label, code=cell, cell_number=number)
        shell.user_ns[args.var] = profile
        if args.label:
            history[args.label] = profile
        try:
            self._report(profile, args, live)
            if args.compare is not None and error is None:
                profile.comparison = compare(before, profile.runs, label_a=args.compare, label_b=args.label or "this cell")
                self._show_comparison(profile.comparison, before, profile.runs, args)
        finally:
            if live is not None:
                live.close()
        if error is not None:
            raise error
        return result

    def _interleaved(
        self, shell: Any, cell: str, args: Any, history: dict[str, CellProfile], engine_for_cell: AbstractContextManager[object]
    ) -> Any:
        """``--compare NAME --interleave --repeat N``: the cell labelled NAME (its code, kept with
        the label) and this one run alternately, N measured runs each after a warm-up of each, and
        the rows judged run pair by run pair. Blocks of runs taken minutes apart differ as wholes
        (the machine's state moves); runs side by side in time share it, so a change shows
        through drift that a blocked comparison has to decline."""
        usage = self.opprof.parser.format_usage()
        a = history[args.compare]
        label_a, label_b = args.compare, args.label or "this cell"
        if a.code is None:
            raise UsageError(f"--interleave: the result labelled {label_a} was kept without its cell's code\n{usage}")
        if a.code.strip() == cell.strip():
            raise UsageError(
                f"--interleave: the cell labelled {label_a} is this same code, so interleaving would run one version "
                "twice (a change made outside the cell, such as a function defined again in another cell, applies "
                "to both). Keep both versions and compare them with opprof.compare_functions(old, new), or give "
                f"each version its own cell\n{usage}"
            )
        # Side 0 is A (the labelled cell), side 1 B (this one): by side, not by label, as both may
        # carry one label (``--label A --compare A --interleave``).
        sides: tuple[list[Trace], list[Trace]] = ([], [])
        codes = (a.code, cell)
        numbers = (a.cell_number, running_cell(shell))
        error: BaseException | None = None
        failed = -1
        result = None
        wall = 0.0
        loops = 1
        with engine_for_cell:
            # The warm-up: one run of each (imports, caches, the pools' threads); the quicker sets the loops.
            took = [0.0, 0.0]
            for side in (0, 1):
                trace, error, wall, value, _ = self._profile_once(shell, codes[side], args, False, 1, numbers[side])
                took[side] = run_seconds(trace, wall)
                if error is not None:
                    failed = side
                    sides[side].append(trace)
                    break
                if side == 1:
                    result = value
            if error is None:
                loops = _loops(args, min(took))
                print(
                    f"opprof: {label_a} and {label_b} run alternately, {args.repeat} runs each after a warm-up"
                    + (f", each run the cell {loops} times (runs of at least {MIN_RUN_S * 1e3:.0f} ms)" if loops > 1 else "")
                )
                for k in range(args.repeat):
                    # Each pair in turn A, B then B, A: neither side always runs first.
                    for side in pair_order(k):
                        trace, error, run_wall, value, _ = self._profile_once(
                            shell, codes[side], args, False, loops, numbers[side]
                        )
                        sides[side].append(trace)
                        if side == 1:
                            result, wall = value, run_wall
                        if error is not None:
                            failed = side
                            break
                    if error is not None:
                        break
        b_runs = sides[1] or sides[0]
        profile = CellProfile(b_runs[-1], error, wall, runs=b_runs, label=args.label, code=cell, cell_number=numbers[1])
        shell.user_ns[args.var] = profile
        if args.label:
            history[args.label] = profile
        if error is not None:
            if failed == 0:
                print(f"opprof: the cell labelled {label_a} failed when run again for --interleave:")
            self._report(profile, args)
            raise error
        n = min(len(sides[0]), len(sides[1]))
        profile.comparison = compare(sides[0][:n], sides[1][:n], label_a=label_a, label_b=label_b, paired=True)
        profile.comparison.notes.insert(
            0, f"interleaved: {label_a} and {label_b} ran alternately, {n} runs each of {loops} loop(s), judged pair by pair"
        )
        self._report(profile, args)
        self._show_comparison(profile.comparison, sides[0][:n], sides[1][:n], args)
        return result

    def _show_comparison(self, comparison: Comparison, a: list[Trace], b: list[Trace], args: Any) -> None:
        self._show_diff(comparison, a, b, args)
        print(compare_table(comparison))

    # ------------------------------------------------------------------ the widgets a cell shows
    # A timeline holds its trace and drawing (~16 MB at 200k spans) for as long as its widgets stay
    # registered in the kernel, which is until closed: re-running a cell replaces its output, so the
    # widgets its earlier run showed are closed then (200 profiled cells took a kernel from 72 to
    # 633 MB while none was). A cell is known by the id the notebook sends with it, else its text.
    def _cell_key(self, line: str, cell: str) -> str:
        kernel = getattr(self.shell, "kernel", None)
        parent = kernel.get_parent() if kernel is not None and hasattr(kernel, "get_parent") else None
        cell_id = ((parent or {}).get("metadata") or {}).get("cellId")
        self._cell = f"id:{cell_id}" if cell_id else f"text:{line}\n{cell}"
        return self._cell

    def _keep(self, *widgets: Any) -> None:
        """Remember the widgets this cell shows, to close when it runs again."""
        self._shown.setdefault(self._cell, []).extend(w for w in widgets if w is not None)

    def _release(self, key: str) -> None:
        for w in self._shown.pop(key, []):
            try:
                if type(w).__name__ == "BokehModel":
                    # As a plain widget: BokehModel's own close raises when its __del__ calls it again.
                    importlib.import_module("ipywidgets").DOMWidget.close(w)
                else:
                    w.close()
            except Exception:  # a widget already closed (by the user) or a comm already gone
                pass

    def _show_diff(self, comparison: Comparison, a: list[Trace], b: list[Trace], args: Any) -> None:
        """The comparison's bar chart, then both sides' typical runs on one time axis, above its
        table (the table alone with --no-widget)."""
        if args.no_widget:
            return
        both_runs = side_by_side(a, b, label_a=comparison.label_a, label_b=comparison.label_b)
        if unwatched():  # no widgets to save (see _show): both runs, kept for the opening page
            if self._show_saved(both_runs):
                print("(the diff chart shows where a page watches the cell run: the table above has its rows)")
            return
        try:
            from jupyter_bokeh import BokehModel

            from ..view import diff_figure
        except ImportError as e:
            print(f"(diff chart unavailable: {e})")
            return
        load_bokehjs(once=True)
        chart = BokehModel(diff_figure(comparison))
        both = timeline(both_runs)
        self._keep(chart, both)
        display(chart)
        display(both)

    def _profile_once(
        self, shell: Any, cell: str, args: Any, live_wanted: bool, loops: int = 1, number: int | None = None
    ) -> tuple[Trace, BaseException | None, float, Any, LiveView | None]:
        """One run of the cell (``loops`` times over) under a profile of its own (this process's,
        or with ``--dask`` the cluster's too): (trace, error, wall s, value, live view)."""
        session: ProfileSession = (
            self._dask_profile(args, live_wanted)
            if args.dask
            else Profiler(args.max_events, memory=_memory_wanted(args), gil=not args.no_gil_samples).start()
        )
        live: LiveView | None = None
        error: BaseException | None = None
        result = None
        t0 = time.perf_counter()
        try:
            try:
                if live_wanted:
                    live = LiveView(session.live_feed()).start()
                for _ in range(loops):
                    result = _run_code(shell, cell, number)
            except BaseException as e:  # shown after the partial timeline, then re-raised
                error = e
            finally:
                # After Ctrl-C, wait only briefly: the work still queued may be what hung. A Dask
                # profile also removes its plugins from the workers here.
                failed = stop_after(session, error)
                error = error or failed or session.error
        finally:
            # The live view polled through the final wait (the cell's queued work); no longer.
            if live is not None:
                live.stop()
        trace = session.trace
        if trace is None:
            # A second Ctrl-C cut the build short; a Profiler keeps its records, and building again
            # leaves the partial trace viewable, as for any cell that raised.
            try:
                trace = session.stop()
            except BaseException as e:
                error = error or e
                trace = session.trace
        if trace is None:  # interrupted again, or a cluster's merge cut short: nothing to show
            trace = Trace(metadata={"interrupted": "the trace was not built: Ctrl-C while building it"})
        if loops > 1:
            trace.metadata["loops"] = loops  # the comparison divides by it (opprof.trace.compare.loops_of)
        return trace, error, time.perf_counter() - t0, result, live

    def _dask_profile(self, args: Any, live: bool) -> ProfileSession:
        """``--dask``: a started :class:`opprof.dask.DaskProfile` on the Client the option names (a
        variable of the user's), or on the scheduler at that address (the Client is made once and
        kept: it is the default client the cell's own Dask calls use)."""
        usage = self.opprof.parser.format_usage()
        try:
            from ..dask import DaskProfile, DaskProfileError, client_for
        except ImportError as e:
            raise UsageError(f"--dask needs Dask's distributed: pip install 'opprof[dask]' ({e})\n{usage}") from None
        shell = self.shell
        assert shell is not None
        if args.dask.isidentifier() and args.dask not in shell.user_ns:
            raise UsageError(f"--dask {args.dask}: no such variable (give a Client variable or a scheduler address)\n{usage}")
        try:
            client = client_for(shell.user_ns[args.dask] if args.dask.isidentifier() else args.dask)
        except DaskProfileError as e:
            raise UsageError(f"--dask {args.dask}: {e}\n{usage}") from None
        # With the live view, pull as often as it polls (a pull costs ~2 ms here): else the workers'
        # tasks would reach it a second late, and a short cell's not at all.
        interval = LIVE_PERIOD_S if live else 1.0
        return DaskProfile(client, max_events=args.max_events, interval=interval, memory=_memory_wanted(args)).start()

    @line_magic
    def opprof_view(self, line: str) -> None:
        """Open a trace file (opprof, MXNet, PyTorch, VizTracer or any Chrome trace) in the timeline."""
        path = line.strip().strip("'\"")
        if not path:
            raise UsageError("usage: %opprof_view PATH")
        if not os.path.exists(path):
            raise UsageError(f"%opprof_view: no such file: {path}")
        trace = load(path)
        print(summary_line(trace))
        self._show(trace)

    @line_magic
    def opprof_init(self, line: str = "") -> None:
        """Emit the BokehJS loader again: for a page that never ran it (a notebook first opened
        untrusted); `%load_ext` a second time does nothing. A reload needs nothing: the loader's
        saved output runs again."""
        load_bokehjs()

    # ------------------------------------------------------------------ helpers
    def _parse(self, line: str) -> Any:
        try:
            args = parse_argstring(self.opprof, line)
        except UsageError as e:
            raise UsageError(f"{e}\n{self.opprof.parser.format_usage()}") from None
        usage = self.opprof.parser.format_usage()
        for name in ("threads", "custom_threads", "max_events", "stats", "repeat"):
            value = getattr(args, name)
            if value is not None and value < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1\n{usage}")
        for name in ("threads", "custom_threads"):
            value = getattr(args, name)
            if value is not None and value > MAX_POOL_THREADS:
                raise UsageError(f"--{name.replace('_', '-')}: at most {MAX_POOL_THREADS:,} threads, got {value:,}\n{usage}")
        # Checked before the cell runs: a cell must not run only for its trace to have nowhere to go.
        for name in ("output", "html"):
            into_dir = name == "output" and args.repeat is not None  # with --repeat, -o names a directory for the runs
            problem = getattr(args, name) and output_path_problem(getattr(args, name), directory=into_dir)
            if problem:
                raise UsageError(f"--{name}: {problem}\n{usage}")
        if args.live and args.repeat is not None:
            raise UsageError(f"--live cannot go with --repeat (each run has a profiler of its own)\n{usage}")
        if args.loops is not None and args.repeat is None:
            raise UsageError(f"--loops goes with --repeat (it sets how many times each measured run runs the cell)\n{usage}")
        if args.loops is None:
            args.loops = "auto"
        elif args.loops != "auto":
            if not args.loops.isdigit() or not 1 <= int(args.loops) <= MAX_LOOPS:
                raise UsageError(f"--loops must be auto or a whole number from 1 to {MAX_LOOPS:,}, got {args.loops!r}\n{usage}")
        for name in ("label", "compare"):
            value = getattr(args, name)
            if value is not None and not value.strip():
                raise UsageError(f"--{name} needs a name\n{usage}")
        if args.interleave and (args.compare is None or args.repeat is None or args.repeat < 2):
            raise UsageError(
                "--interleave runs the cell labelled NAME and this one alternately: it needs --compare NAME "
                f"and --repeat N (N at least 2: an interval needs two runs a side)\n{usage}"
            )
        if args.no_gil_samples and args.dask:
            raise UsageError(f"--no-gil-samples is for this process's profile: it cannot go with --dask\n{usage}")
        if args.live and (args.no_live or args.no_widget):
            other = "--no-live" if args.no_live else "--no-widget"
            raise UsageError(f"--live shows a widget while the cell runs: it cannot go with {other}\n{usage}")
        if not args.var.isidentifier() or keyword.iskeyword(args.var):
            raise UsageError(f"--var must be a Python name, got {args.var!r}\n{usage}")
        # A name the interpreter or IPython lives on (__builtins__, get_ipython, In, Out, _ih, ...):
        # rebinding it would break every later cell or magic. A refused cell changes nothing.
        hidden = getattr(self.shell, "user_ns_hidden", {}) if self.shell is not None else {}
        if (args.var.startswith("__") and args.var.endswith("__")) or args.var in hidden or args.var == HISTORY_VAR:
            raise UsageError(f"--var {args.var}: IPython or Python itself uses that name; choose another\n{usage}")
        # An output that exists and is not a regular file (a FIFO) would block the save or lose it.
        for name in ("output", "html"):
            problem = getattr(args, name) and not_a_regular_file(getattr(args, name))
            if problem and not (name == "output" and args.repeat is not None):
                raise UsageError(f"--{name}: {problem}\n{usage}")
        return args

    def _live_wanted(self, args: Any) -> bool:
        """``--live``; else by default in a kernel with a page to stream to: never in terminal
        IPython, nor where no page watches the run (nbclient, papermill)."""
        if args.live:
            return True
        if args.no_live or args.no_widget or getattr(self.shell, "kernel", None) is None:
            return False
        return not unwatched()

    def _report(self, profile: CellProfile, args: Any, live: LiveView | None = None) -> None:
        trace = profile.trace
        saved = ""
        if args.output and args.repeat is not None:
            saved = f"{len(profile.save(args.output))} runs saved as .opprof files in {args.output}"
        elif args.output:
            trace.save(args.output)
            saved = f"trace saved to {args.output}"
        if args.html:
            from ..view import save_html

            save_html(trace, args.html)
        if not args.no_widget:
            self._show(trace, live)
        if live is not None and live.error is not None:
            print(f"(the live view stopped early: {type(live.error).__name__}: {live.error})")
        print(summary_line(trace, profile.wall_s))
        alive = alive_text(trace)
        if alive:
            print(alive)
        if len(profile.runs) > 1:
            ends = sorted(t.table.length_ns / 1e3 for t in profile.runs if len(t.table))
            if ends:
                print(
                    f"{len(profile.runs)} runs after a warm-up: end to end median {fmt_us(ends[len(ends) // 2])} "
                    f"(min {fmt_us(ends[0])}, max {fmt_us(ends[-1])}); the timeline and tables show the last run"
                )
        if len(trace.analysis().parents):
            print(split_table(trace))
        if args.why:
            print(why_text(trace))
        if args.stats is not None:
            print(stats_table([trace], sort_by=args.sort_by, top=args.stats))
        if saved:
            print(saved)
        if args.html:
            print(f"timeline saved to {args.html}")

    def _show_saved(self, trace: Trace) -> bool:
        """The saved timeline of ``trace`` (:mod:`.saved`), for a run no page watches; False (saying
        why) where Bokeh is missing."""
        try:
            saved = SavedTimeline(trace)
        except ImportError as e:
            print(f"(timeline unavailable: {e})")
            return False
        load_bokehjs(once=True)
        display(saved)
        return True

    def _show(self, trace: Trace, live: LiveView | None = None) -> None:
        """The timeline widget, in the live view's place if one was shown (else below the cell's output);
        where no page watches (nbclient), the saved timeline that the opening page draws (:mod:`.saved`)."""
        if live is None and unwatched():
            self._show_saved(trace)
            return
        try:
            widget = timeline(trace)
        except ImportError as e:  # bokeh/ipywidgets missing: the text summary still shows
            print(f"(timeline unavailable: {e})")
            return
        retired = live.view if live is not None else None  # its box stays open where it was shown
        self._keep(widget, retired)
        if live is None or not live.replace(widget):
            display(widget)
