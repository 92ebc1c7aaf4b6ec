"""opprof's benchmark suite: ``python -m benchmarks`` (``make bench``) prints one table.

Each module measures one part and can run on its own (``python benchmarks/engine.py``); each
exposes ``rows(quick=..., repeats=...)`` returning :class:`benchmarks.common.Row` objects.
The latest full table from the project's machine is in ``benchmarks/RESULTS.md``.
"""
