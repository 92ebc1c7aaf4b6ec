"""What :func:`what_if` does with a question: the change checked, the recording replayed without
and with it (or warped, for the naive engine), and the answer, :class:`WhatIf`, with the notes on
what the prediction assumes and what this trace shows to matter (see
:mod:`opprof.trace.analysis.whatif`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ...columns import ROLE_CODE, SpanTable
from ...data import TraceData
from ...records import CUSTOM_POOL, ENGINE_POOL, Role, recorded_cpus
from ...records import WAIT as WAIT_CATEGORY
from ...threadstates import GIL_METADATA, cpu_outside_python, cpu_wait_ns
from ..critical import APPROXIMATE_PATH
from .change import check_factors, check_pool, span_factors
from .gil import DEFAULT_SWITCH_INTERVAL, MIN_NAME_SAMPLES
from .model import Replay
from .predict import model_trace
from .prepare import BORROWED, LATENCY_KEY, LATENCY_WORDS, MODEL_METADATA, POOL_PREFIXES, Recording, prepare
from .warp import naive

__all__ = ["WhatIf", "what_if"]

#: A smaller pool's prediction says the recording's CPU waits are in it where they sum to a tenth
#: of the recording or more: 16 custom ops (half a 4 ms spin and NumPy products, half a 6 ms
#: sleep) on a pool of 2 waited 44 ms for a CPU in a 99 ms recording (OpenBLAS's threads on the
#: same 2 cores), and a pool of 1 was predicted 23-44 % slower than it ran (2026-12-05).
FEWER_THREADS_CPU_WAIT = 10

_PYTHON = ROLE_CODE[Role.PYTHON]
_SUBOP = ROLE_CODE[Role.SUBOP]
_DUMMY_ROLE = ROLE_CODE[Role.DUMMY_WAIT]

_GIL_SAMPLED = (
    "The GIL is modelled as one lock handed over first come, first served, and taken from a holder when another "
    "thread has waited one switch interval ({interval}): each op's run and each stretch of Python holds it for the share "
    "of its time its thread held the GIL in the recording (sampled), its time waiting for the GIL is left to the model."
)
_GIL_CPU = (
    "The GIL is modelled as one lock handed over first come, first served, and taken from a holder when another "
    "thread has waited one switch interval ({interval}). This trace did not sample the GIL ({why}): a custom op's Python "
    "is taken to hold it while on a CPU (its recorded CPU time) and not while off it (which may have been a wait for the "
    "GIL, replayed as time of its own); ops and the program's Python are taken to release it."
)
_GIL_LEFT_OUT = (
    "Left out of the GIL model: the engine's own Python (pushing, completing ops) beyond the hand-offs read off "
    "the trace, where inside a stretch its GIL part fell (the model runs it first), and how much of a piece "
    f"shorter than two GIL samples held the GIL where the sampler saw fewer than {MIN_NAME_SAMPLES} instants inside "
    "the runs of its name (taken as all of it, its waits for it included, except where pieces on other threads overlap it: one "
    "thread holds the GIL at a time, so they share it)."
)
_NO_GIL = "No GIL (a free-threaded build): every thread runs at once; the recorded waits for the GIL are left out."


@dataclass(frozen=True, eq=False)
class WhatIf:
    """A predicted run after a change, beside the recording and the model's replay of it unchanged.

    ``baseline_ns`` is the model replaying the recording with no change: how far it is from
    ``recorded_ns`` is how far to trust ``predicted_ns`` for this trace (the two share the model's
    errors, so ``predicted_ns / baseline_ns`` is often the better estimate of the change itself).
    ``trace`` is the predicted run, with threads, spans, custom-op families and engine table like
    a profile's. ``calibration`` holds the hand-off latencies (ns) the model read off the trace.
    """

    recorded_ns: int
    predicted_ns: int
    baseline_ns: int
    speedup: dict[str, float]
    engine_threads: int | None
    custom_threads: int | None
    trace: TraceData
    notes: list[str]
    recorded_engine_threads: int | None = None
    recorded_custom_threads: int | None = None
    calibration: dict[str, int] | None = None
    switch_interval: float | None = None
    recorded_switch_interval: float | None = None
    releases_gil: dict[str, bool] | None = None
    gil: bool = True

    @property
    def change(self) -> float:
        """Predicted over recorded end-to-end time (0.5: twice as fast)."""
        return self.predicted_ns / self.recorded_ns if self.recorded_ns > 0 else float("nan")

    @property
    def model_error(self) -> float:
        """How far the unchanged model is from the recording, as a fraction of it (0.02: 2 % off)."""
        return (self.baseline_ns - self.recorded_ns) / self.recorded_ns if self.recorded_ns > 0 else float("nan")

    def describe_change(self) -> str:
        """The change in words: ``T::pure_python 2x faster, 2 custom threads (recorded 1)``."""
        parts = []
        for name, f in self.speedup.items():
            parts.append(f"{name} {_num(f)}x faster" if f >= 1 else f"{name} {_num(1 / f)}x slower")
        for what, n, was in (
            ("engine", self.engine_threads, self.recorded_engine_threads),
            ("custom", self.custom_threads, self.recorded_custom_threads),
        ):
            if n is not None and n != was:
                parts.append(f"{n} {what} thread{'s' if n != 1 else ''} (recorded {was})")
        si, was_si = self.switch_interval, self.recorded_switch_interval
        if self.gil and si is not None and was_si is not None and si != was_si:
            parts.append(f"switch interval {_num(si * 1e3)} ms (recorded {_num(was_si * 1e3)} ms)")
        for name, releases in (self.releases_gil or {}).items():
            parts.append(f"{name} {'releases' if releases else 'holds'} the GIL")
        if not self.gil:
            parts.append("no GIL")
        return ", ".join(parts) or "no change"

    def __str__(self) -> str:
        return (
            f"{self.describe_change()}: predicted {_fmt(self.predicted_ns)} (recorded {_fmt(self.recorded_ns)}, "
            f"model without change {_fmt(self.baseline_ns)}): {self.change:.2f}x"
        )


def _num(x: float) -> str:
    """A factor as people write it: ``2``, ``1.5``, ``0.33``."""
    return f"{x:g}" if abs(x - round(x, 2)) < 1e-9 else f"{x:.2f}"


def _count(n: int, one: str, many: str | None = None) -> str:
    """``1 span``, ``3 spans``: notes are read by people."""
    return f"1 {one}" if n == 1 else f"{n} {many or one + 's'}"


def _of_cpus(trace: TraceData) -> str:
    """ "; the recording had N CPUs" where the trace says (:func:`~opprof.trace.records.recorded_cpus`), else ""."""
    cpus = recorded_cpus(trace.metadata)
    return "" if cpus is None else f"; the recording had {cpus} CPUs"


def _fmt(ns: int) -> str:
    """A duration in the unit that keeps it readable (ms for what users run, µs for hand-offs)."""
    if abs(ns) >= 1_000_000_000:
        return f"{ns / 1e9:.2f} s"
    if abs(ns) >= 1_000_000:
        return f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e3:.0f} µs"


def _measured_on(kind: str, n: dict[str, int]) -> str:
    """Where a hand-off's latency came from: the mean of this trace's samples of its kind, another
    kind's (:data:`.prepare.BORROWED`), or the default."""
    if n[kind]:
        return f"mean of {n[kind]}"
    other = BORROWED.get(kind)
    if other is not None and n[other]:
        return f"none seen: as {LATENCY_WORDS[other]}"
    return "none seen: default"


def _notes(rec: Recording, trace: TraceData, dropped: int, interval: float, gil: bool) -> list[str]:
    """The assumptions behind a prediction, and those this trace shows to matter (in plain words)."""
    lat, n = rec.latency, rec.samples
    words = ", ".join(f"{LATENCY_WORDS[k]} {_fmt(lat[k])} ({_measured_on(k, n)})" for k in LATENCY_WORDS)
    meta = trace.metadata.get(GIL_METADATA)
    why = meta.get("why_not") if isinstance(meta, dict) else None
    gil_notes = [
        _GIL_SAMPLED.format(interval=_fmt(round(interval * 1e9)))
        if rec.gil_sampled
        else _GIL_CPU.format(interval=_fmt(round(interval * 1e9)), why=why or "no thread states"),
        _GIL_LEFT_OUT,
    ]
    notes = [
        *(gil_notes if gil else [_NO_GIL]),
        "Threads do not compete for CPU cores in the model's schedule: with more busy threads than cores, expect "
        "longer times (where the thread states and the cores' count are recorded, the run's CPU work over its cores "
        "bounds a changed run, and a note says when it did).",
        "Each op lasts its recorded duration divided by its factor; a custom op's Python its own time (without its "
        "waits) divided by its factor, with its pushes and waits where they were; the program's own time between its "
        "pushes and waits stays as recorded, without the time the engine held a push back (back-pressure), which "
        "the model re-derives.",
        f"Hand-offs, read off this trace: {words}.",
    ]
    t = trace.table
    py = t.role == _PYTHON
    cpu = t.cpu[py]
    wall = (t.end - t.start)[py]
    have = cpu >= 0
    if np.any(have) and wall[have].sum() > 0 and not gil:
        share = float(cpu[have].sum() / wall[have].sum())
        if share > 0.3:
            notes.append(
                f"The custom ops' Python was on a CPU {share:.0%} of its time: with a GIL it held it then; without one "
                "(as asked) it runs in parallel as predicted only if that Python is thread-safe without it."
            )
    pool = POOL_PREFIXES
    programs = [p.tid for p in rec.programs if p.items and not trace.thread_name(p.tid).startswith(pool)]
    if len(programs) > 1:
        names = ", ".join(trace.thread_name(tid) for tid in programs)
        notes.append(
            f"{len(programs)} threads pushed work ({names}): each replays from its own recorded start, so what "
            "synchronised them outside the engine (starting and joining a thread, locks, queues) is not modelled."
        )
    held = sum(sum(holds) for _, _, holds, _ in rec.outside)
    if gil and rec.outside and held * 100 >= rec.end:  # (a kernel's or a library's idle threads take the GIL for µs now and then)
        names = ", ".join(trace.thread_name(o[0]) for o in rec.outside)
        notes.append(
            f"{_count(len(rec.outside), 'thread', 'threads')} outside the engine ({names}) held the GIL for "
            f"{_fmt(held)} of the recording: the model gives each the stretches it recorded, in order, competing "
            "for the GIL as Python does; not what it waited for or what made it run."
        )
    orphans = sum(len(p.items) for p in rec.programs if trace.thread_name(p.tid).startswith(pool))
    if orphans:
        notes.append(
            f"{_count(orphans, 'op or wait', 'ops and waits')} came from engine or custom-op threads outside any "
            "recorded custom-op Python (one that began before the profile did): replayed at their recorded times."
        )
    slow = _contention(t)
    if slow is not None:
        name, ratio = slow
        notes.append(
            f"{name!r} ran {ratio:.1f}x longer (median) with other work beside it than alone: the threads competed for "
            "cores, memory bandwidth or the GIL, which the model does not see. More threads will gain less than "
            "predicted, fewer will lose less."
        )
    if lat["engine_wake"] > 1_000_000:
        notes.append(
            f"An idle engine worker took {_fmt(lat['engine_wake'])} on average to start a ready op: it waited for the GIL, "
            "held by Python on another thread. The model keeps that latency, but not when the GIL really frees."
        )
    if dropped:
        notes.append(
            f"Left out of the predicted trace: {_count(dropped, 'recorded span')} of no engine op or wait (user spans, markers)."
        )
    return notes


def _contention(t: SpanTable) -> tuple[str, float] | None:
    """The op or Python (by name) whose spans ran longest beside other work relative to alone.

    Durations are replayed as recorded, so work that was slowed by work beside it (two BLAS calls
    on two cores, Python holding the GIL) carries that slowdown into every prediction. Each span
    of an op or a Python counts as *beside other work* when another such span runs at its midpoint;
    a name is reported when its median beside others is 1.3x its median alone (spans >= 100 µs).
    """
    role = t.role
    work = ((t.op >= 0) & ((role == 0) | (role == _SUBOP) | (role == _DUMMY_ROLE))) | (role == _PYTHON)
    work &= t.strs(t.cat) != WAIT_CATEGORY
    idx = np.flatnonzero(work)
    if len(idx) < 2:
        return None
    s, e = t.start[idx], t.end[idx]
    mid = (s + e) // 2
    running = np.searchsorted(np.sort(s), mid, side="right") - np.searchsorted(np.sort(e), mid, side="right")
    names = t.name[idx]
    best: tuple[str, float, int] | None = None
    for code in np.unique(names).tolist():
        mine = names == code
        d = (e - s)[mine]
        alone, beside = d[running[mine] <= 1], d[running[mine] > 1]
        if not len(alone) or not len(beside) or np.median(alone) < 100_000:
            continue
        ratio = float(np.median(beside) / np.median(alone))
        total = int(d.sum())
        if ratio > 1.3 and (best is None or total > best[2]):
            best = (t.strings[code], ratio, total)
    return None if best is None else (best[0], best[1])


def what_if(
    trace: TraceData,
    speedup: Mapping[str, float] | None = None,
    *,
    engine_threads: int | None = None,
    custom_threads: int | None = None,
    switch_interval: float | None = None,
    releases_gil: Mapping[str, bool] | None = None,
    gil: bool | None = None,
) -> WhatIf:
    """Predict the end-to-end time of the recorded run after a change (see :mod:`opprof.trace.analysis.whatif`).

    ``speedup`` maps a name to a factor by which the selected spans get faster (2.0: half the time;
    0.5: twice the time). A name is a span name (``"T::pure_python"``, ``"T::_plus_scalar"``, a
    plain op ``"_plus_scalar"``) or a custom-op type: ``"T"`` selects all of T's work, forward and
    backward (its Python, sub-ops and ``Dummy_Wait``), ``"_backward_T"`` its backward only.
    ``engine_threads`` / ``custom_threads`` set the pools' sizes (default: the recorded ones).
    ``switch_interval`` (s, as :func:`sys.setswitchinterval`) sets the GIL's (default: the recorded
    one, else 5 ms); ``releases_gil`` maps names (as ``speedup``'s) to True (their work runs without
    the GIL, as NumPy on large arrays) or False (it holds the GIL all along); ``gil=False`` replays
    on a free-threaded build (no GIL at all), ``gil=True`` with the GIL; by default, as the trace
    ran (without one for a prediction made with ``gil=False``: replayed unchanged, it is itself).

    The trace must carry the engine's edges (``trace.ops``): one recorded by opprof's profiler,
    kept in memory or saved as ``.opprof``. Raises ValueError for an unknown name (with the closest
    known ones), a factor that is not finite and > 0, a pool size below 1 or any pool size for a
    trace of the naive engine, and a trace without edges.
    """
    factors = check_factors(speedup)
    e_threads = check_pool("engine_threads", engine_threads)
    c_threads = check_pool("custom_threads", custom_threads)
    ops = trace.ops
    t = trace.table
    approximate = trace.metadata.get(APPROXIMATE_PATH)
    if isinstance(approximate, str):
        raise ValueError(f"what_if replays one engine's edges, and this trace cannot be replayed as one: {approximate}")
    if ops is None or not len(ops) or not bool(np.any(t.op >= 0)):
        raise ValueError(
            "what_if needs the engine's edges (every push, wait and var access) that opprof's profiler records; "
            "this trace has none. Use the trace of opprof.profile() directly, or save it as .opprof "
            "(Chrome trace JSON keeps no edges, and other tools' traces have none)."
        )
    factor = span_factors(t, factors)
    interval, rec_interval, gil_span, releases = _gil_change(trace, switch_interval, releases_gil, gil)
    if trace.ran_inline:
        if e_threads is not None or c_threads is not None:
            raise ValueError(
                "engine_threads and custom_threads do not apply to a trace of the naive engine, which runs every op "
                "inline on the pushing thread; record with the threaded engine (mx.set_engine('threaded')) to ask that"
            )
        predicted_trace, recorded, predicted = naive(trace, factor)
        notes = [
            "Naive engine: everything ran inline on the pushing thread, so the replay is that thread's timeline with "
            "each span's own time (without the spans nested in it) divided by its factor; the replay without change "
            "is the recording itself.",
        ]
        if len(np.unique(t.tid[t.op >= 0])) > 1:
            notes.append("Threads are replayed each on its own: what one waited for on another is not re-timed.")
        return WhatIf(recorded, predicted, recorded, factors, None, None, predicted_trace, notes)
    # The pools' sizes as recorded (a file made before they were: their named threads), at least 1.
    rec_e = ENGINE_POOL.recorded_size(trace.metadata, trace.threads) or 1
    rec_c = CUSTOM_POOL.recorded_size(trace.metadata, trace.threads) or 1
    e = e_threads if e_threads is not None else rec_e
    c = c_threads if c_threads is not None else rec_c
    rec = prepare(trace)
    rec_gil = rec.had_gil
    gil = rec_gil if gil is None else gil
    rec_ns = max(1, round(rec_interval * 1e9))
    base = Replay(rec, np.ones(len(t)), rec_e, rec_c, switch_ns=rec_ns if rec_gil else None).run()
    changed = bool(factors) or e != rec_e or c != rec_c or interval != rec_interval or bool(releases) or gil != rec_gil
    switch_ns = max(1, round(interval * 1e9)) if gil else None
    sim = Replay(rec, factor, e, c, switch_ns=switch_ns, gil_span=gil_span).run() if changed else base
    predicted_trace, dropped = model_trace(trace, rec, sim, e)
    predicted_trace.metadata.update(
        {
            ENGINE_POOL.size_key: e,
            CUSTOM_POOL.size_key: c,
            MODEL_METADATA: {
                "speedup": dict(factors),
                "engine_threads": e,
                "custom_threads": c,
                "recorded_ns": rec.end,
                "switch_interval": interval,
                "releases_gil": dict(releases),
                "gil": gil,
                LATENCY_KEY: dict(rec.latency),
            },
        },
        producer="opprof what_if",
        switch_interval=interval,
    )
    notes = _notes(rec, trace, dropped, interval, gil)
    held = [h for p in rec.programs for h in p.held if h > 0]
    if held or sim.holds:
        # Back-pressure is re-derived, not copied: say how much there was and how much the model makes.
        predicted = sum(b - a for _, a, b in sim.holds)
        notes.append(
            f"The engine held the program back at {_count(len(held), 'push', 'pushes')} for {_fmt(sum(held))} "
            f"(back-pressure: {rec.max_pending} ops pending, until half had run); the model takes that time out of the "
            f"program's own and holds it as the engine would: {_count(len(sim.holds), 'time', 'times')} for "
            f"{_fmt(predicted)} in the prediction."
        )
    predicted_ns = sim.end_ns
    bound = _cpu_bound(rec, factor) if changed else None
    if bound is not None and bound > predicted_ns:
        # The model's schedule does not see cores: the run cannot do its CPU work faster than on them.
        work, cores, used = _cpu_used(rec)
        notes.append(
            f"The run's CPU work bounds it: the recording's ops, custom-op Python and native threads (a BLAS "
            f"pool's) were on a CPU {_fmt(work)} of its {_fmt(rec.end)} ({used:.1f} cores' worth, {cores} to run on); "
            f"done on those cores, the changed run takes at least {_fmt(bound)}, where the model's schedule, which "
            f"does not see cores, gave {_fmt(predicted_ns)}. The prediction is the bound; its trace is the model's."
        )
        predicted_ns = bound
    outside = cpu_outside_python(trace.metadata)
    if (e > rec_e or c > rec_c) and outside is not None and outside[0] * 4 >= rec.end > 0 and rec.cpu is None:
        # Cores are not modelled, and without the states the CPU work is not known: say what is.
        notes.append(
            f"Threads of this process outside Python (a native pool's: NumPy's BLAS, OpenMP) were on a CPU "
            f"{_fmt(outside[0])} of the {_fmt(rec.end)} recording ({outside[0] / rec.end:.1f} cores' worth{_of_cpus(trace)}): "
            "the ops run threads of their own, which the model does not see. With more "
            "threads they compete for the cores, and the run gains less than predicted, or loses."
        )
    queued = sum((cpu_wait_ns(trace.metadata) or {}).values())
    if (e < rec_e or c < rec_c) and queued * FEWER_THREADS_CPU_WAIT >= rec.end > 0:
        # The pieces keep the time their threads waited for a CPU, which fewer busy threads would not.
        notes.append(
            f"The recording's threads waited {_fmt(queued)} for a CPU in all (the OS's run queue: more runnable "
            f"threads than cores{_of_cpus(trace)}), and the pieces keep that wait, and the "
            "slowdown of sharing the cores: with fewer threads busy the run is likely faster than predicted."
        )
    if sim.threads > rec.recorded_custom:
        notes.append(
            f"The model starts {sim.threads} custom-op threads (the recording used {rec.recorded_custom}) at no cost; "
            "a real run pays ~0.2-4 ms the first time it starts each one."
        )
    stuck = sum(1 for r, p in enumerate(sim.pushed) if p < 0 or sim.end[r] < 0)
    if stuck:
        notes.append(
            f"{_count(stuck, 'recorded op or wait', 'recorded ops or waits')} never ran in the model (the recording is "
            "incomplete): the prediction is too short."
        )
    error = abs(base.end_ns - rec.end) / rec.end if rec.end > 0 else 0.0
    if error > 0.1:
        notes.append(
            f"The model without change is {error:.0%} off the recording: for this trace, trust the ratio of the "
            "prediction to the model without change more than the prediction itself."
        )
    return WhatIf(
        recorded_ns=rec.end,
        predicted_ns=predicted_ns,
        baseline_ns=base.end_ns,
        speedup=factors,
        engine_threads=e,
        custom_threads=c,
        trace=predicted_trace,
        notes=notes,
        recorded_engine_threads=rec_e,
        recorded_custom_threads=rec_c,
        calibration=dict(rec.latency),
        switch_interval=interval,
        recorded_switch_interval=rec_interval,
        releases_gil=releases,
        gil=gil,
    )


def _cpu_used(rec: Recording) -> tuple[int, int, float]:
    """(the recording's CPU work in ns, its cores, the cores' worth it used)."""
    w = rec.cpu
    assert w is not None
    work = sum(w.op_ns) + sum(w.python_ns) + w.native_ns
    return work, w.cores, work / rec.end if rec.end > 0 else 0.0


def _cpu_bound(rec: Recording, factor: np.ndarray) -> int | None:
    """The least time the changed run needs for its CPU work on the recording's cores (None: not
    known). The ops' and Pythons' CPU time is divided by their factors, the native threads' by the
    ops' (they do the ops' work); the cores are as many as the recording had, or as many as it
    used where its counts say more (the states are samples, the native CPU read over the whole
    profile): without change the bound never exceeds the recording.

    Why: 60 dots of 300x300 recorded on one worker (OpenBLAS on both cores) were predicted 2x
    faster on two workers by the model's schedule, which has no cores; the real run was 0-10 %
    slower. The engine's polling between ops and a program's own Python are left out, so this is
    a lower bound that binds only where the ops' own CPU work fills the cores."""
    w = rec.cpu
    if w is None or rec.end <= 0:
        return None
    work, cores, used = _cpu_used(rec)
    if not work:
        return None
    f = factor.tolist()
    ops = sum(ns / f[s] for ns, s in zip(w.op_ns, rec.span, strict=True) if ns and s >= 0)
    pythons = sum(ns / f[fam.python] for ns, fam in zip(w.python_ns, rec.families, strict=True))
    op_total = sum(w.op_ns)
    native = w.native_ns * (ops / op_total) if op_total else float(w.native_ns)
    return round((ops + pythons + native) / max(float(cores), used))


def _gil_change(
    trace: TraceData, switch_interval: float | None, releases_gil: Mapping[str, bool] | None, gil: bool | None
) -> tuple[float, float, np.ndarray | None, dict[str, bool]]:
    """(switch interval, the recorded one, per span 1/0 forcing its work to hold/release the GIL or
    NaN, the names asked), checked."""
    if gil is not None and not isinstance(gil, bool):
        raise TypeError(f"gil must be True or False (or None: as the trace ran), got {gil!r}")
    recorded = trace.metadata.get("switch_interval")
    ok = isinstance(recorded, (int, float)) and not isinstance(recorded, bool) and math.isfinite(recorded) and recorded > 0
    rec_interval = float(recorded) if ok and isinstance(recorded, (int, float)) else DEFAULT_SWITCH_INTERVAL
    interval = rec_interval
    if switch_interval is not None:
        if isinstance(switch_interval, bool) or not isinstance(switch_interval, (int, float, np.integer, np.floating)):
            raise TypeError(f"switch_interval must be a number of seconds (0.005), got {switch_interval!r}")
        interval = float(switch_interval)
        if not math.isfinite(interval) or interval <= 0:
            raise ValueError(
                f"switch_interval must be a finite number of seconds > 0 (as sys.setswitchinterval), got {switch_interval!r}"
            )
    releases: dict[str, bool] = {}
    for name, r in (releases_gil or {}).items():
        if not isinstance(r, (bool, np.bool_)):
            raise TypeError(f"releases_gil[{name!r}] must be True (runs without the GIL) or False (holds it), got {r!r}")
        releases[name] = bool(r)
    if not releases:
        return interval, rec_interval, None, releases
    t = trace.table
    force = np.full(len(t), np.nan)
    for name, r in releases.items():
        try:
            hit = span_factors(t, {name: 2.0}) != 1.0
        except ValueError as e:
            raise ValueError(str(e).replace("speedup name", "releases_gil name", 1)) from None
        force[hit] = 0.0 if r else 1.0
    return interval, rec_interval, force, releases
