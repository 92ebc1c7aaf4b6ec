"""Run the whole benchmark suite in one process and print one table of medians and ratios.

``python -m benchmarks [--quick] [--repeats N] [--peers]`` (``make bench``, ``make bench-peers``).
Progress goes to stderr, the table (Markdown) to stdout, then one line counting goals met and
missed. A missed goal is shown as missed. ``--quick`` uses small sizes (a smoke test: its figures
are not the goals' and goals about 1M spans are not judged). ``--peers`` also measures MXNet 1.9.1
in a venv of its own (made on first use, see ``benchmarks/peers.py``); Dask is measured whenever
it is installed (the ``bench`` extra). The notebook section drives a real JupyterLab in headless
Chromium (``benchmarks/notebook.py``: about 3 minutes).
"""

from __future__ import annotations

import argparse
import os

from . import cluster, compare, engine, load, memory, notebook, peers, profiler, timeline
from . import why as why_section
from .common import Row, format_table, machine, progress, summary

SECTIONS = ("engine", "profiler", "memory", "why", "compare", "trace", "timeline", "notebook", "dask", "peers")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, one round: a smoke test, not figures to quote")
    ap.add_argument(
        "--repeats", type=int, default=None, help="rounds per figure (default: 5 for engine/profiler, 3 for the rest)"
    )
    ap.add_argument("--peers", action="store_true", help="also MXNet 1.9.1, in a venv of its own made on first use")
    ap.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="run only these sections")
    args = ap.parse_args(argv)
    quick, repeats = args.quick, args.repeats

    mxnet: dict[str, float] | None = None
    why = "not asked for (run with --peers, or make bench-peers)"
    if args.peers and "peers" in args.only:
        mxnet, why = peers.run_mxnet(quick, repeats or (1 if quick else 3))

    rows: list[Row] = []
    if "engine" in args.only:
        rows += engine.rows(quick, repeats, mxnet)
    if "profiler" in args.only:
        rows += profiler.rows(quick, repeats, mxnet)
    if "memory" in args.only:
        rows += memory.rows(quick, repeats)
    if "why" in args.only:
        rows += why_section.rows(quick, repeats)
    if "compare" in args.only:
        rows += compare.rows(quick, repeats)
    if "trace" in args.only:
        rows += load.rows(quick, repeats)
    if "timeline" in args.only:
        rows += timeline.rows(quick, repeats)
    if "notebook" in args.only:
        rows += notebook.rows(quick, repeats)
    if "dask" in args.only:
        rows += cluster.rows(quick, repeats)
    if "peers" in args.only:
        ours = {r.key: r.value for r in rows if r.key and r.value is not None}
        rows += peers.dask_rows(5_000 if quick else 100_000, repeats or (1 if quick else 3), ours)
        rows += peers.mxnet_rows(mxnet, why, ours)
    progress("done")

    rounds = (
        "one round each (--quick)"
        if quick
        else f"medians of {repeats} interleaved rounds"
        if repeats
        else "medians of 3-5 interleaved rounds"
    )
    print(f"# opprof benchmarks{' (quick: smoke-test sizes)' if quick else ''}: {rounds}")
    print(f"# {machine()}")
    blas = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in os.environ}
    if blas:
        print(f"# note: {blas} set; NumPy may run slower kernels than it would unset")
    print()
    print(format_table(rows))
    print()
    print(summary(rows))


if __name__ == "__main__":
    main()
