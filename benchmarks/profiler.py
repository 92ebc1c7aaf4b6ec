"""Profiler cost, as ratios and per-item medians measured in one run.

Run: ``python benchmarks/profiler.py`` (or ``make bench`` for the whole suite). Figures are medians
of ``--repeats`` interleaved runs.

* naming: the hot-path part of naming an op (``Recorder.on_push``: who pushed it, inside which
  custom op) for a regular op and for a sub-op pushed inside a custom op's Python; the string
  ``Type::op`` itself is made once per span at build time, counted in the build figure.
* recording: what the engine pays per recorded span (``on_push`` then ``run`` around a no-op,
  less calling the no-op directly).
* on/off: a chain of ``--ops`` small ops and ``--calls`` trivial custom ops, profiler off vs on
  (until the engine is idle); building the trace after ``stop()`` is reported per span. The ratio
  is the median over rounds of each round's on over its own off (the two run back to back), over
  at least :data:`ON_OFF_ROUNDS` rounds: the host drifts by minutes, and the ratio of the two
  medians swung with it. Seen on 2,000 trivial custom ops (2026-12-05): off 40-63 µs a call over
  five rounds, the compiled recorder's row 1.12x, 1.51x, 1.86x and 1.56x in four runs of the
  section, each round's own ratio 0.97-1.33.

Goals (issue 7): naming <= 0.1 us for a regular op and <= 0.5 us for a sub-op (the seed's bars:
< 1 us and < 10 us, mean < 5 us). Issue 14: the build after ``stop()`` <= 0.2 us per plain op span
and <= 0.5 us per custom-op family span. The recorder-at-its-floor issue: profiler on/off <= 1.10x
(MXNet 1.9.1: 1.4-2.0x), on/off counting the build <= 1.15x, recording a span <= 0.3 µs; where an
earlier issue's goal for the same row is stricter (issue 14: 1.12x with the build for small ops,
0.2 / 0.5 µs for the build) that one stays. Every row is measured on the compiled recorder and on
the pure-Python one (``Recorder(compiled=False)``, what an install without a compiler runs).
Export and load of traces are in ``benchmarks/load.py``.
"""

from __future__ import annotations

import argparse
import functools
import resource
import statistics
import time
from collections.abc import Callable

import opprof as mx
from opprof.engine import Invocation, Opr, Var
from opprof.engine.state import thread_state
from opprof.profiler import Recorder
from opprof.trace.analysis.gil import HandoffCost, handoff_costs

try:
    from benchmarks import live
    from benchmarks.common import Row, interleaved, print_rows, progress
except ImportError:  # run as a script: python benchmarks/profiler.py
    import live  # type: ignore[no-redef]
    from common import Row, interleaved, print_rows, progress  # type: ignore[no-redef]

SECTION = "Profiler"
ON_OFF_GOAL = 1.10
#: The compiled recorder with ``Profiler(gil=False)``: no GIL sampler, no timed hand-offs.
NO_GIL = "compiled, gil=False"
MXNET_ON_OFF_REFERENCE = "1.4-2.0x"  # the figure for MXNet 1.9.1 on this kind of machine
# Issue 14's goals: on/off counting the build after stop(), and the build per span.
STOP_GOALS = {("threaded", "small ops"): 1.12, ("threaded", "trivial custom ops"): 1.15}
SPAN_GOAL = 0.3  # µs
#: The fewest rounds of the on/off rows: a round is three short runs (off, then each recorder),
#: 0.1-0.2 s each, so more rounds cost seconds and steady the median of the rounds' ratios.
ON_OFF_ROUNDS = 11
#: The recorders measured: the compiled one where it is built, and the pure-Python one always.
PATHS = {"compiled": True, "pure Python": False}
BUILD_GOALS = {"small ops": 0.2, "trivial custom ops": 0.5}
BUILD_WHAT = {"small ops": "plain op spans", "trivial custom ops": "custom-op family spans"}


class _AddOne(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        self.assign(out_data[0], req[0], in_data[0] + 1)


@mx.operator.register("ProfBenchAddOne")
class _AddOneProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, in_shapes, in_dtypes):  # type: ignore[no-untyped-def]
        return _AddOne()


class _Nap(mx.operator.CustomOp):
    """Sleeps 20 ms, the GIL released: the program pushes a chain behind it meanwhile."""

    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        time.sleep(0.02)
        self.assign(out_data[0], req[0], in_data[0] + 1)


@mx.operator.register("ProfBenchNap")
class _NapProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, in_shapes, in_dtypes):  # type: ignore[no-untyped-def]
        return _Nap()


def _noop() -> None:
    pass


def _opr() -> Opr:
    return Opr(_noop, (), (Var(),), "_plus_scalar", False, False, None)


def _paths() -> dict[str, bool]:
    from opprof.profiler.recorder import COMPILED_WHY_NOT

    return {k: v for k, v in PATHS.items() if not (v and COMPILED_WHY_NOT)}


def naming_cost_ns(n: int, inside: bool, compiled: bool | None = None) -> float:
    rec = Recorder(compiled=compiled)
    opr = _opr()
    inv = Invocation("MyAddOne", 1, False)
    prev = thread_state.invocation
    thread_state.invocation = inv if inside else None
    try:
        on_push = rec.on_push
        t = time.perf_counter_ns()
        for _ in range(n):
            on_push(opr)
        return (time.perf_counter_ns() - t) / n
    finally:
        thread_state.invocation = prev


def span_cost_ns(n: int, compiled: bool | None = None) -> float:
    """Recording one span on the hot path (``on_push`` + ``run``), less running the op bare."""
    rec = Recorder(max_events=n + 1, compiled=compiled)
    opr = _opr()
    on_push, run, fn = rec.on_push, rec.run, _noop
    t = time.perf_counter_ns()
    for _ in range(n):
        on_push(opr)
        run(opr, fn)
    recorded = time.perf_counter_ns() - t
    t = time.perf_counter_ns()
    for _ in range(n):
        fn()
    bare = time.perf_counter_ns() - t
    assert rec.events == n
    return (recorded - bare) / n


def _run(
    work: Callable[[], None], profiled: bool, compiled: bool | None = None, gil: bool = True
) -> tuple[float, float, int, int]:
    """(seconds until the engine is idle, seconds to build the trace afterwards, spans in it, page
    faults the build took: a fresh page costs ~1.8 µs here, and a build that made all its arrays on
    fresh pages paid ~3 ms of 9 for them at 20,000 spans)."""
    mx.nd.waitall()
    prof = mx.Profiler(compiled=compiled, gil=gil) if profiled else None
    t = time.perf_counter()
    if prof is not None:
        prof.start()
    work()
    mx.nd.waitall()
    recorded = time.perf_counter() - t
    if prof is None:
        return recorded, 0.0, 0, 0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = time.perf_counter()
    trace = prof.stop()
    built = time.perf_counter() - t
    return recorded, built, trace.n_spans, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults


def chain(ops: int, profiled: bool, compiled: bool | None = None, gil: bool = True) -> tuple[float, float, int, int]:
    a = mx.nd.ones((10, 10))

    def work() -> None:
        nonlocal a
        for _ in range(ops):
            a = a + 1

    return _run(work, profiled, compiled, gil)


def custom_calls(calls: int, profiled: bool, compiled: bool | None = None) -> tuple[float, float, int, int]:
    a = mx.nd.ones((10, 10))

    def work() -> None:
        nonlocal a
        for _ in range(calls):
            a = mx.nd.Custom(a, op_type="ProfBenchAddOne")

    return _run(work, profiled, compiled)


def rows(quick: bool = False, repeats: int | None = None, mxnet: dict[str, float] | None = None) -> list[Row]:
    n, ops, calls = (20_000, 2_000, 200) if quick else (200_000, 20_000, 2_000)
    out = measure(n, ops, calls, repeats or (1 if quick else 5), mxnet)
    out += gil_sampler_rows(0.3 if quick else 2.0)
    out += busy_profile_sampler_rows(200 if quick else 2_000, 3 if quick else 9)
    out += handoff_rows(100 if quick else 300, 3 if quick else 9)
    return out + live.rows(quick, repeats)  # %%opprof's live view


#: The GIL issue's cost goal for the sampler thread: a share of one core.
GIL_SAMPLER_GOAL = 0.02


def gil_sampler_rows(seconds: float) -> list[Row]:
    """The GIL sampler's own CPU time as a share of one core, as the profiler runs it (1 kHz while
    threads contend, every 2.5 ms once they have for 100 ms, every 4 ms while none does): with the program and three idle threads
    registered (an engine between ops), and with two threads spinning in Python (contending all
    along); beside them the fixed 1 kHz and 5 kHz rates. Its stats count the sampler thread's CPU clock."""
    from opprof.engine import gil
    from opprof.profiler.gil import PERIOD_NS, QUIET_PERIOD_NS, SUSTAINED_AFTER_NS, SUSTAINED_PERIOD_NS

    if not gil.AVAILABLE:
        return [Row(SECTION, "GIL sampler's own CPU", None, "", f"not measured: {gil.WHY_NOT}")]
    progress(f"profiler: the GIL sampler's own CPU, {seconds:g} s for each case")
    idle = gil.sampler_cpu_share((PERIOD_NS,), seconds, quiet_period_ns=QUIET_PERIOD_NS)[PERIOD_NS]
    busy = gil.sampler_cpu_share(
        (PERIOD_NS,),
        seconds,
        idle_threads=1,
        quiet_period_ns=QUIET_PERIOD_NS,
        spinners=2,
        sustained_period_ns=SUSTAINED_PERIOD_NS,
        sustained_after_ns=SUSTAINED_AFTER_NS,
    )[PERIOD_NS]
    fixed = gil.sampler_cpu_share((PERIOD_NS, 200_000), seconds)
    goal = f"≤ {100 * GIL_SAMPLER_GOAL:g} %"
    return [
        Row(
            SECTION,
            "GIL sampler's own CPU as the profiler runs it, an idle engine (4 threads)",
            100 * idle,
            "% of a core",
            f"fixed 1 kHz: {100 * fixed[PERIOD_NS]:.1f} %, 5 kHz: {100 * fixed[200_000]:.1f} %",
            goal,
            idle <= GIL_SAMPLER_GOAL,
        ),
        Row(
            SECTION,
            f"GIL sampler's own CPU as the profiler runs it, two Pythons contending for {seconds:g} s",
            100 * busy,
            "% of a core",
            f"1 kHz for the first {SUSTAINED_AFTER_NS // 1_000_000} ms of contention, "
            f"then every {SUSTAINED_PERIOD_NS / 1e6:g} ms (1 kHz held: 2.75 % on 2026-12-03)",
            goal,
            busy <= GIL_SAMPLER_GOAL,
        ),
    ]


def busy_profile_sampler_rows(calls: int, rounds: int) -> list[Row]:
    """The GIL sampler's own CPU during real profiles that contend from start to end, as its
    ``metadata["gil"]["sampler_cpu_ns"]`` over the profile's time: a chain of ``calls`` trivial
    custom ops (four threads hand work on and off), four such chains side by side, and ten times
    as many small ops. A few hundred ms each, so mostly at the fine rate (the sustained back-off
    waits for 50 ms of contention): the case the idle and two-spinner rows above do not show.
    Median of ``rounds`` interleaved rounds; each workload's median and the worst beside it."""
    from opprof.engine import gil

    if not gil.AVAILABLE:
        return [Row(SECTION, "GIL sampler's own CPU during a busy profile", None, "", f"not measured: {gil.WHY_NOT}")]
    progress(f"profiler: the GIL sampler's own CPU in busy profiles, {rounds} rounds")

    def chain() -> None:
        a = mx.nd.ones((10, 10))
        for _ in range(calls):
            a = mx.nd.Custom(a, op_type="ProfBenchAddOne")
        mx.nd.waitall()

    def wide() -> None:
        xs = [mx.nd.ones((10, 10)) for _ in range(4)]
        for _ in range(calls // 4):
            xs = [mx.nd.Custom(x, op_type="ProfBenchAddOne") for x in xs]
        mx.nd.waitall()

    def small() -> None:
        a = mx.nd.ones((10, 10))
        for _ in range(10 * calls):
            a = a + 1
        mx.nd.waitall()

    workloads = {"chained custom ops": chain, "4-wide custom ops": wide, "small ops": small}
    shares: dict[str, list[float]] = {name: [] for name in workloads}
    for _ in range(rounds):
        for name, work in workloads.items():
            with mx.profile() as prof:
                work()
            assert prof.trace is not None
            meta = prof.trace.metadata
            shares[name].append(meta["gil"]["sampler_cpu_ns"] / (meta["t_stop_ns"] - meta["t_start_ns"]))
    medians = {name: statistics.median(v) for name, v in shares.items()}
    worst = max(medians.values())
    return [
        Row(
            SECTION,
            f"GIL sampler's own CPU during a busy profile ({calls:,} trivial custom ops; worst of three workloads)",
            100 * worst,
            "% of a core",
            ", ".join(f"{name} {100 * m:.2f} %" for name, m in medians.items())
            + " (medians; a timer wake alone is ~20 µs of CPU here, 2 % at 1 kHz)",
            f"≤ {100 * GIL_SAMPLER_GOAL:g} %",
            worst <= GIL_SAMPLER_GOAL,
        )
    ]


#: The GIL issue's goal for a profile's timed hand-offs: their median hop within 20 % of a ping-pong.
HANDOFF_GOAL = 0.2


def profiled_handoff(calls: int) -> dict[str, HandoffCost]:
    """The hand-offs (median wake, GIL wait and hop from put to GIL held, per pool and for all) a
    profile times in a chain of trivial custom ops, pushed behind a 20 ms nap so that it runs with
    nothing else running (the GIL issue's known answer 4)."""

    a = mx.nd.ones((10, 10))
    with mx.profile() as prof:
        a = mx.nd.Custom(a, op_type="ProfBenchNap")
        for _ in range(calls):
            a = mx.nd.Custom(a, op_type="ProfBenchAddOne")
        mx.nd.waitall()
    assert prof.trace is not None
    return handoff_costs(prof.trace)


def handoff_rows(calls: int, repeats: int) -> list[Row]:
    """A hop as a profile times it (a chain of trivial custom ops: each call hands off twice) beside
    the two-thread ping-pong through the same queue, interleaved round by round: a hop swings
    30-130 µs here from one second to the next (idle vCPUs halt).

    The two hops of a call differ in kind. To its custom-op thread, the engine worker puts the
    Python's task and goes back to its queue, releasing the GIL, as the ping-pong's putter does:
    that hop is the engine's hand-off, held to the ping-pong. To an engine worker, the custom op's
    Python pushes a sub-op and goes on running (its next push, its return): the woken worker waits
    for that Python's GIL, which the analysis names as such ("waiting for the GIL, held by ..."), not
    as the hand-off's cost (2026-12-05: 11.8 µs of which 0.5 the wake, against 1.3 µs, 0.5 the wake,
    for the custom-op hop)."""
    from opprof.engine import handoff

    if not handoff.AVAILABLE:
        return [Row(SECTION, "thread hand-off as a profile times it", None, "", f"not measured: {handoff.WHY_NOT}")]
    progress(f"profiler: timed hand-offs in a chain of {calls} custom ops vs a ping-pong, {repeats} rounds")
    costs: list[dict[str, HandoffCost]] = []
    pong_wakes: list[float] = []

    def last(pool: str, field: str) -> float:
        """µs of the last round's ``field`` for ``pool``; NaN where that pool had no timed hand-off
        (every get found its work waiting), which fails the row rather than the run."""
        cost = costs[-1].get(pool)
        return getattr(cost, field) / 1e3 if cost is not None else float("nan")

    def hop() -> float:
        costs.append(profiled_handoff(calls))
        return last("custom", "hop_ns")

    def pong() -> float:
        one_way, logged = handoff.timed_ping_pong(calls)
        pong_wakes.append(logged.get("wake_ns_median", 0) / 1e3)
        return one_way

    got = interleaved(
        {
            "hop": hop,
            "wake": lambda: last("all", "wake_ns"),
            "engine hop": lambda: last("engine", "hop_ns"),
            "engine wake": lambda: last("engine", "wake_ns"),
            "custom wake": lambda: last("custom", "wake_ns"),
            "pong": pong,
            "pong wake": lambda: pong_wakes[-1],
        },
        repeats,
    )
    ratio = got["hop"] / got["pong"]
    wake_ratio = got["wake"] / got["pong wake"] if got["pong wake"] > 0 else float("nan")
    return [
        Row(
            SECTION,
            f"thread hand-off as a profile times it, median wake of {calls} trivial custom ops (what 'waking a thread' quotes)",
            got["wake"],
            "µs",
            f"{wake_ratio:.2f}x the ping-pong's wake timed alike, put to the OS running the getter "
            f"({got['pong wake']:.2f} µs), same rounds: the quoted figure checked against two threads doing nothing else",
            f"within {100 * HANDOFF_GOAL:g} % of the ping-pong's",
            abs(wake_ratio - 1) <= HANDOFF_GOAL,
        ),
        Row(
            SECTION,
            f"thread hand-off as a profile times it, median hop to a custom-op thread, {calls} trivial custom ops",
            got["hop"],
            "µs",
            f"{ratio:.2f}x the ping-pong's one way ({got['pong']:.2f} µs), same rounds: put to GIL held, the putter "
            f"going back to its queue as the ping-pong's does; the wake {got['custom wake']:.2f} µs",
            f"within {100 * HANDOFF_GOAL:g} % of the ping-pong",
            abs(ratio - 1) <= HANDOFF_GOAL,
        ),
        Row(
            SECTION,
            f"thread hand-off as a profile times it, median hop to an engine worker, {calls} trivial custom ops",
            got["engine hop"],
            "µs",
            f"{got['engine hop'] / got['pong']:.1f}x the ping-pong's one way; the wake {got['engine wake']:.2f} µs, the "
            "rest the GIL of the custom op's Python that pushed the sub-op and runs on (named as that, not as the hand-off)",
        ),
    ]


def measure(n: int, ops: int, calls: int, repeats: int, mxnet: dict[str, float] | None = None) -> list[Row]:
    paths = _paths()
    progress(f"profiler: naming and recording cost, {n} calls, {repeats} rounds, recorders: {', '.join(paths)}")
    cases: dict[str, Callable[[], float]] = {}
    for path, compiled in paths.items():
        cases[f"regular {path}"] = functools.partial(naming_cost_ns, n, False, compiled)
        cases[f"sub {path}"] = functools.partial(naming_cost_ns, n, True, compiled)
        cases[f"span {path}"] = functools.partial(span_cost_ns, n, compiled)
    ns = interleaved(cases, repeats)
    out: list[Row] = []
    for path in paths:
        regular, sub, span = ns[f"regular {path}"] / 1e3, ns[f"sub {path}"] / 1e3, ns[f"span {path}"] / 1e3
        out += [
            Row(
                SECTION,
                f"naming on the hot path, regular op, {path}",
                regular,
                "µs",
                "seed's bar < 1 µs",
                "≤ 0.1 µs",
                regular <= 0.1,
            ),
            Row(
                SECTION,
                f"naming on the hot path, sub-op, {path}",
                sub,
                "µs",
                "seed's bar < 10 µs (mean < 5 µs)",
                "≤ 0.5 µs",
                sub <= 0.5,
            ),
            Row(
                SECTION,
                f"recording one span (on_push + run), {path}",
                span,
                "µs/span",
                "a span recorded in plain Python ≈ 0.14 µs",
                f"≤ {SPAN_GOAL} µs",
                span <= SPAN_GOAL,
            ),
        ]
    try:
        for kind in ("threaded", "naive"):
            for label, fn, count, unit, key in (
                ("small ops", chain, ops, "op", "op_10"),
                ("trivial custom ops", custom_calls, calls, "call", "custom_fwd"),
            ):
                rounds = max(repeats, ON_OFF_ROUNDS)
                progress(f"profiler: {count} {label} on the {kind} engine, off/on ({', '.join(paths)}), {rounds} rounds")
                mx.set_engine(kind)
                # Interleaved: off, then each recorder, round by round; on the threaded small ops (the
                # loop the GIL's sampler costs most: two threads contend throughout) also the compiled
                # recorder without the GIL's evidence, which says what that evidence costs.
                no_gil = kind == "threaded" and fn is chain and "compiled" in paths
                runs = [
                    (
                        fn(count, False),
                        {path: fn(count, True, compiled) for path, compiled in paths.items()}
                        | ({NO_GIL: chain(count, True, None, gil=False)} if no_gil else {}),
                    )
                    for _ in range(rounds)
                ]
                off = statistics.median(r[0][0] for r in runs)
                for path in paths:
                    on = statistics.median(r[1][path][0] for r in runs)
                    with_stop = statistics.median((r[1][path][0] + r[1][path][1]) / r[0][0] for r in runs)
                    build = statistics.median(r[1][path][1] / max(1, r[1][path][2]) for r in runs)
                    ratio = statistics.median(r[1][path][0] / r[0][0] for r in runs)  # each round's own
                    peer = MXNET_ON_OFF_REFERENCE + " (issue's reference)"
                    if mxnet and f"{key}_prof" in mxnet:
                        peer = f"{mxnet[f'{key}_prof'] / mxnet[key]:.2f}x (measured)"
                    detail = (
                        f"off {off / count * 1e6:.1f}, on {on / count * 1e6:.1f} µs/{unit}; "
                        f"build after stop {build * 1e6:.2f} µs/span; MXNet {peer}"
                    )
                    goal = f"≤ {ON_OFF_GOAL}x"
                    what = f"{count:,} {label}, {kind}, {path}"
                    out.append(Row(SECTION, f"profiler on/off, {what}", ratio, "x", detail, goal, ratio <= ON_OFF_GOAL))
                    # What the user waits for is the run *and* the build after stop().
                    stop_goal = STOP_GOALS.get((kind, label))
                    out.append(
                        Row(
                            SECTION,
                            f"profiler on/off including stop(), {what}",
                            with_stop,
                            "x",
                            "median over rounds of (run with the profiler + its build) / run without",
                            f"≤ {stop_goal}x" if stop_goal else "",
                            with_stop <= stop_goal if stop_goal else None,
                        )
                    )
                    if kind == "threaded":
                        build_goal = BUILD_GOALS[label]
                        faults = [r[1][path][3] for r in runs]
                        out.append(
                            Row(
                                SECTION,
                                f"stop() build, {BUILD_WHAT[label]}, {path}",
                                build * 1e6,
                                "µs/span",
                                f"{count:,} {label}, threaded engine; page faults a build: {statistics.median(faults):,.0f} "
                                f"(median; the first round's {faults[0]:,}); was 0.56-0.70 (plain), 3.3-8.6 (families)",
                                f"≤ {build_goal} µs/span",
                                build * 1e6 <= build_goal,
                            )
                        )
                if no_gil:
                    # What the GIL's evidence costs this loop: the same rounds' compiled ratio beside.
                    ratio = statistics.median(r[1][NO_GIL][0] / r[0][0] for r in runs)
                    with_gil = statistics.median(r[1]["compiled"][0] / r[0][0] for r in runs)
                    on = statistics.median(r[1][NO_GIL][0] for r in runs)
                    out.append(
                        Row(
                            SECTION,
                            f"profiler on/off, {count:,} {label}, {kind}, compiled, without the GIL's evidence (gil=False)",
                            ratio,
                            "x",
                            f"off {off / count * 1e6:.1f}, on {on / count * 1e6:.1f} µs/{unit}; with the GIL's "
                            f"evidence (the default) {with_gil:.2f}x in the same rounds",
                            f"≤ {ON_OFF_GOAL}x",
                            ratio <= ON_OFF_GOAL,
                        )
                    )
    finally:
        mx.set_engine("threaded")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls-naming", type=int, default=200_000, help="calls timed for naming and recording")
    parser.add_argument("--ops", type=int, default=20_000)
    parser.add_argument("--calls", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    title = f"opprof profiler benchmark, medians of {args.repeats} runs"
    print_rows(title, measure(args.calls_naming, args.ops, args.calls, args.repeats))


if __name__ == "__main__":
    main()
