"""Why ready work waited, on workloads whose answer is known: a Python that spins holds the GIL, one
that sleeps or a NumPy dot on a large array releases it, and a chain of trivial custom ops with
nothing else running waits for thread hand-offs. Each profile's waiting causes, the GIL's holder
and the hand-offs' cost must say so (the threaded engine: the naive one runs everything on the
pushing thread and has no pools to queue for)."""

from __future__ import annotations

import gc
import inspect
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import ClassVar

import numpy as np
import pytest

import opprof
from opprof import nd
from opprof.engine import gil, handoff
from opprof.trace import Role, Trace
from opprof.trace.analysis.critical import BLOCKED_WORDS
from opprof.trace.analysis.gil import PYTHON_GIL_PARTS, handoff_costs
from opprof.trace.columns import ROLE_CODE
from opprof.trace.records import GC_CATEGORY, gc_span_name
from opprof.trace.text import why_text
from opprof.trace.threadstates import STATES, ThreadState, cpu_wait_ns
from tests.helpers import register_op, retried, spin

pytestmark = pytest.mark.skipif(not gil.AVAILABLE, reason=f"no GIL evidence here: {gil.WHY_NOT}")


class _Spin(opprof.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        spin(0.04)
        self.assign(out_data[0], req[0], in_data[0] + 1)


class _Nap(opprof.operator.CustomOp):
    """Sleeps (the GIL released): meanwhile the program fills the engine with other work."""

    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        time.sleep(0.02)
        self.assign(out_data[0], req[0], in_data[0] + 1)


class _Nap3(opprof.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        time.sleep(0.003)
        self.assign(out_data[0], req[0], in_data[0] + 1)


class _SpinCollect(opprof.operator.CustomOp):
    """Spins 20 ms (the GIL dropped at each switch interval), then runs a full garbage collection
    (the GIL held throughout): ``took`` keeps each collection's wall time as measured around it."""

    took: ClassVar[list[int]] = []

    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        spin(0.02)
        t = time.perf_counter_ns()
        gc.collect()
        _SpinCollect.took.append(time.perf_counter_ns() - t)
        self.assign(out_data[0], req[0], in_data[0] + 1)


class _PushThenSpin(opprof.operator.CustomOp):
    """Pushes its sub-op, then spins 0.4 ms (under a sampling period) holding the GIL: the engine
    worker woken for the sub-op waits for the GIL this Python holds."""

    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        self.assign(out_data[0], req[0], in_data[0] + 1)
        spin(0.0004)


class _Tiny(opprof.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):  # type: ignore[no-untyped-def]
        self.assign(out_data[0], req[0], in_data[0] + 1)


for _name, _op in (
    ("KnownSpin", _Spin),
    ("KnownNap", _Nap),
    ("KnownNap3", _Nap3),
    ("KnownPushThenSpin", _PushThenSpin),
    ("KnownTiny", _Tiny),
    ("KnownSpinCollect", _SpinCollect),
):
    register_op(_name, _op)


class _NotHeldUp(AssertionError):
    """A try whose known answer's premise did not hold (the ops were not held up): nothing to judge."""


def _judged(check: Callable[[], None], tries: int) -> None:
    """Run ``check`` until it passes, at most ``tries`` times. A try whose premise did not hold
    (:class:`_NotHeldUp`) says nothing either way; a failed assertion is kept. Every try failed:
    the last failure is raised; none met its premise: the test is skipped, saying why."""
    failures: list[AssertionError] = []
    last: AssertionError | None = None
    for k in range(tries):
        try:
            check()
            return
        except _NotHeldUp as e:
            last = e
        except AssertionError as e:
            failures.append(e)
            last = e
        if k < tries - 1:
            time.sleep(2.0)
    if failures:
        raise failures[-1]
    pytest.skip(f"the machine never let the known answer's premise hold, in {tries} tries: {last}")


def _stalled_python(trace: Trace, op_type: str) -> str:
    """ "" where every Python of ``op_type`` ran as it does alone (well under a sampling period, on a
    CPU throughout), else what one did: waited for the GIL or a CPU inside itself. The samples (one
    a period, later under load) then cannot tell its holders apart: its thread, caught holding the
    GIL just before a forced switch, is credited until the next sample. Seen beside a CPU-bound
    process: a tiny op's Python of 2.4 ms with 0.22 ms on a CPU, its thread named the top holder."""
    t = trace.table
    names = t.str_list(t.name)
    py = [i for i in np.flatnonzero(t.role == ROLE_CODE[Role.PYTHON]).tolist() if names[i] == f"{op_type}::pure_python"]
    period = trace.thread_states.period_ns if trace.thread_states is not None else 1_000_000
    for i in py:
        dur, cpu = int(t.end[i] - t.start[i]), int(t.cpu[i])
        if dur >= period and 0 <= cpu < dur // 2:
            return f"a {op_type} Python took {dur / 1e6:.2f} ms, {cpu / 1e6:.2f} ms of it on a CPU"
    return ""


def _profile(work: Callable[[nd.NDArray], None], *, warm: bool = True) -> Trace:
    """``work`` profiled on a new threaded engine (two workers, a pool of two), after two custom
    ops ran on it unless not ``warm``."""
    opprof.set_engine("threaded", workers=2, custom_workers=2)
    try:
        x = nd.ones((4, 4))
        for op in ("KnownTiny", "KnownTiny") if warm else ():
            nd.Custom(x, op_type=op)
        nd.waitall()
        with opprof.profile() as prof:
            work(x)
            nd.waitall()
    finally:
        opprof.set_engine("threaded")
    assert prof.trace is not None and prof.trace.validate() == []
    return prof.trace


def _diagnosis(trace: Trace) -> str:
    """What a failed assertion prints beside its values: the threads the trace has, each one's ms
    per GIL state, the garbage collections, the machine's load and the threads alive (a full suite failed where alone it
    passes: this says how the process and the machine differed)."""
    import os

    states = trace.thread_states
    names = {th.tid: th.name for th in trace.threads}
    per: dict[str, dict[str, float]] = {}
    if states is not None:
        cols = (states.tid.tolist(), states.state.tolist(), states.start.tolist(), states.end.tolist())
        for tid, st, a, b in zip(*cols, strict=True):
            d = per.setdefault(names.get(tid, str(tid)), {})
            key = STATES[st - 1].name if 0 < st <= len(STATES) else str(st)
            d[key] = round(d.get(key, 0.0) + (b - a) / 1e6, 2)
    alive = sorted(t.name for t in threading.enumerate())
    cpu = {names.get(tid, str(tid)): round(ns / 1e6, 2) for tid, ns in (cpu_wait_ns(trace.metadata) or {}).items() if ns}
    return (
        f"states (ms): {per}; waited for a CPU (ms): {cpu}; "
        f"gil metadata: {trace.metadata.get('gil', {}).get('samples')} samples; "
        f"garbage collections: {trace.metadata.get('gc')}; "
        f"load {os.getloadavg()}; {len(alive)} threads alive: {alive}; switch interval {__import__('sys').getswitchinterval()}"
    )


def _waiting(trace: Trace, op_type: str) -> dict[str, int]:
    """The type's waiting by cause (forward calls), ns."""
    ot = trace.analysis().op_types
    k = ot.index(op_type)
    return dict(zip(ot.causes, ot.by_cause[k].tolist(), strict=True))


def _gil_share(w: dict[str, int]) -> float:
    return (w.get("custom_pool_gil", 0) + w.get("subop_queue_gil", 0)) / max(1, sum(w.values()))


def _tiny_ops_behind(op_type: str, n: int) -> Callable[[nd.NDArray], None]:
    """Work that pushes a custom op of ``op_type`` and, once its Python has its thread, ``n`` small ones."""

    def work(x: nd.NDArray) -> None:
        nd.Custom(x, op_type=op_type)
        time.sleep(0.002)  # the first op's Python has its thread
        for _ in range(n):
            nd.Custom(x, op_type="KnownTiny")

    return work


def test_small_ops_behind_a_spinning_python_wait_for_the_gil_it_holds() -> None:
    """Known answer 1: a custom op's Python spins 40 ms while four small custom ops are ready and
    the engine workers idle: >= 80 % of their waiting is the GIL, held by the spinner's Python."""

    work = _tiny_ops_behind("KnownSpin", 4)

    def check() -> None:
        trace = _profile(work)
        w = _waiting(trace, "KnownTiny")
        if sum(w.values()) < 2 * sys.getswitchinterval() * 1e9:
            # The premise: the spinner held the small ops up, for two switch intervals at least. Beside
            # a full suite's run on the 2 cores, three tries in a row waited ~0.2 ms in all: the small
            # ops ran before the spinner, its thread not yet running, had the GIL. Alone, 40 tries here
            # waited 22-84 ms where held up, at most 4.5 ms where not; beside a spinning process, tries
            # that waited 5-9 ms were mostly the OS waking threads it had no CPU for. Nothing to judge.
            waited = sum(w.values()) / 1e6
            raise _NotHeldUp(
                f"the small ops waited {waited:.2f} ms in all: the spinner held them up for less than two switch intervals"
            )
        wake = w.get("custom_pool_wake", 0) + w.get("subop_queue_wake", 0)
        if wake > 0.1 * sum(w.values()):
            # The premise also needs a CPU for each woken thread: the hand-off's wake (put to the OS
            # running the getter, stamped in C before it asks for the GIL, so never the GIL) was
            # 0-5 % of the waiting in 15 tries alone here (at most 1.1 ms for the four). One try
            # took 6.6 ms (23 %, beside 21 ms of GIL): the host gave the VM's other vCPU no time.
            # Named right; nothing to judge.
            raise _NotHeldUp(f"the OS took {wake / 1e6:.1f} ms to wake the small ops' threads: no CPU was free for them")
        assert _gil_share(w) >= 0.8, (w, _diagnosis(trace))
        # An assertion, not a KeyError, where no holder was named: a loaded machine's run is retried.
        holders = trace.analysis().queue_gil_holders.get("custom_pool", {}).get("KnownTiny", [])
        assert holders, trace.analysis().queue_gil_holders
        assert holders[0].running == "KnownSpin::pure_python", holders
        assert "held most by KnownSpin::pure_python on opprof-custom-" in why_text(trace)
        # Alone on the machine, the spinner had its CPU: nothing is said to be off one.
        assert holders[0].off_cpu_ns * 10 < holders[0].ns, (holders[0], _diagnosis(trace))
        assert "off a CPU" not in why_text(trace)
        # The spinner bounds the run: the critical path runs through its Python, or (where the small
        # ops finished last) steps across to it while their threads waited for the GIL.
        path = trace.critical_path()
        assert path.check() == []
        spinner = [
            s
            for s in path.segments
            if (s.kind.value == "gil" and s.name.startswith("KnownSpin::pure_python on"))
            or (s.kind.value == "python" and s.name == "KnownSpin::pure_python")
        ]
        assert sum(s.dur for s in spinner) >= 0.5 * path.total, path.by_name()

    _judged(check, tries=4)


def test_small_ops_behind_a_garbage_collection_wait_for_the_collector_not_the_op_it_ran_in() -> None:
    """Known answer: a custom op's Python spins 20 ms and then runs a full collection of 400,000
    objects (~40 ms, the GIL held throughout, never dropped at the switch interval) while eight small
    custom ops are under way: their waiting is the GIL, held most by the collection, which is named
    (not the Python it ran in); the collection is a span inside that Python, as long as it was measured."""
    heap = [[i] for i in range(400_000)]

    work = _tiny_ops_behind("KnownSpinCollect", 8)

    def check() -> None:
        _SpinCollect.took.clear()
        trace = _profile(work)
        (py,) = [s for s in trace.spans if s.name == "KnownSpinCollect::pure_python"]
        (full,) = [s for s in trace.spans if s.cat == GC_CATEGORY and s.name == gc_span_name(2) and s.tid == py.tid]
        assert py.start <= full.start and full.end <= py.end
        assert 0.8 * _SpinCollect.took[0] <= full.end - full.start <= _SpinCollect.took[0]
        # The premise: a small op had started (its engine op) before the collection and its Python
        # waited through it (past its middle: the collector's last step, running finalizers, may
        # drop the GIL). The forced switches of the spin decide whether any did: ~40 % of tries
        # here; the rest ran all their Pythons before it, or were pushed after it.
        starts = sorted(s.start for s in trace.spans if s.name == "KnownTiny")
        pys = sorted(s.start for s in trace.spans if s.name == "KnownTiny::pure_python")
        middle = (full.start + full.end) // 2
        if not any(a < full.start and middle <= b for a, b in zip(starts, pys, strict=True)):
            raise _NotHeldUp("no small op waited through the collection: all ran before it, or were pushed after it")
        w = _waiting(trace, "KnownTiny")
        assert _gil_share(w) >= 0.8, (w, _diagnosis(trace))
        holders = trace.analysis().queue_gil_holders.get("custom_pool", {}).get("KnownTiny", [])
        assert holders and holders[0].running == gc_span_name(2), holders
        assert f"held most by {gc_span_name(2)} on opprof-custom-" in why_text(trace)

    try:
        _judged(check, tries=8)
    finally:
        del heap


@contextmanager
def _one_cpu_beside_a_spinning_process() -> Iterator[None]:
    """Every thread of this process (and those it starts meanwhile) on one CPU, shared with another
    process that spins there: the OS splits the CPU between them, so a thread that holds the GIL
    here loses its CPU for whole scheduler slices (a few ms) while it holds it."""
    cpu = min(os.sched_getaffinity(0))
    mask = os.sched_getaffinity(0)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(hog.pid, {cpu})
        for task in os.listdir("/proc/self/task"):
            with suppress(OSError):  # a thread that ended meanwhile
                os.sched_setaffinity(int(task), {cpu})
        time.sleep(0.05)  # the spinner is running
        yield
    finally:
        hog.kill()
        hog.wait()
        for task in os.listdir("/proc/self/task"):  # those started meanwhile too (a new engine's)
            with suppress(OSError):
                os.sched_setaffinity(int(task), mask)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_spinning_pythons_that_the_os_takes_the_cpu_from_hold_the_gil_off_a_cpu() -> None:
    """Beyond the issue's known answers: two custom ops' Pythons spin 40 ms each, so each waits for
    the GIL the other holds, on one CPU shared with another process that spins. The OS gives that
    process about half the CPU in slices of milliseconds, often while a spinner holds the GIL: of
    the time each Python waited for the GIL, a fifth or more its holder had no CPU, and the
    why-text says so beside the holder. (Alone, known answers 1 and 5 say nothing of the kind.)"""

    def work(x: nd.NDArray) -> None:
        nd.Custom(x, op_type="KnownSpin")
        nd.Custom(x, op_type="KnownSpin")

    def check() -> None:
        with _one_cpu_beside_a_spinning_process():
            trace = _profile(work)
        parts, holders = trace.analysis().python_gil_by_type["KnownSpin"]
        gil_wait = int(parts[list(PYTHON_GIL_PARTS).index("GIL wait")])
        assert holders and holders[0].running == "KnownSpin::pure_python", (holders, _diagnosis(trace))
        assert gil_wait > 0 and holders[0].off_cpu_ns >= 0.2 * holders[0].ns, (holders[0], parts, _diagnosis(trace))
        assert "(off a CPU " in why_text(trace), why_text(trace)

    retried(check)


def test_a_program_spinning_after_its_pushes_holds_the_gil_at_its_line() -> None:
    """Known answer 2: the program thread spins 30 ms in Python right after pushing four small custom
    ops: >= 80 % of their waiting is the GIL, held by MainThread, placed before its next wait's line."""
    wait_line = 0

    def work(x: nd.NDArray) -> None:
        nonlocal wait_line
        for _ in range(4):
            nd.Custom(x, op_type="KnownTiny")
        spin(0.03)
        wait_line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        nd.waitall()

    def check() -> None:
        trace = _profile(work)
        w = _waiting(trace, "KnownTiny")
        assert _gil_share(w) >= 0.8, (w, _diagnosis(trace))
        holders = trace.analysis().queue_gil_holders.get("custom_pool", {})
        assert "KnownTiny" in holders, holders  # an assertion, so that a loaded machine's run is retried
        (top, *_) = holders["KnownTiny"]
        assert top.thread == "MainThread" and top.running == "", top
        assert top.before.endswith(f"test_gil_known_answers.py:{wait_line}"), top
        assert f"held most by MainThread (your code before test_gil_known_answers.py:{wait_line})" in why_text(trace)
        path = trace.critical_path()
        # The spinning program bounds the run: the path runs through its own Python, or (where the
        # small ops finished last) steps across to it while their threads waited for the GIL.
        main = [
            s
            for s in path.segments
            if (s.kind.value == "gil" and s.name == "MainThread (your code, between its ops) holding the GIL")
            or (s.kind.value == "program" and s.name.startswith("MainThread"))
        ]
        assert sum(s.dur for s in main) >= 0.5 * path.total, path.by_name()

    retried(check)


@pytest.mark.parametrize("started", ["before the profile", "inside the profiled code", "before, on a fresh engine"])
def test_small_ops_behind_a_users_own_spinning_thread_wait_for_the_gil_it_holds(started: str) -> None:
    """Beyond the issue's known answers: a thread of the user's own (a data loader: neither the
    program's nor the engine's, started before the profile or by the profiled code) spins in Python
    while four small custom ops are ready. >= 80 % of their waiting is the GIL, and its holder is
    that thread, by name: not an engine thread the samples happened to catch holding it between
    two of the loader's turns.

    The loader spins until the ops are done (at most 2 s), not for a fixed 40 ms, so that the ops
    are ready only while it wants the GIL: the program takes the GIL from it to push them (a forced
    switch, 5 ms here) and, on a busy machine, the OS may run the program late. With a fixed spin
    the test failed in 2 full-suite runs of 5 (2026-12-04: ~130 µs of waiting in all), and 3 of 3
    beside two CPU-bound processes: there the ops waited only for the OS to run their threads, and
    the GIL went from the program to the engine's threads, which finished the ops before the loader
    had it back. opprof said so (waking, not the GIL), and it was true; it is not the known answer.

    On a fresh engine (no custom op run on it before the profile) the answer is the same: the
    pool's threads started with the engine. Started at the pool's first tasks, each waited in its
    first line of Python for the loader's GIL, unsampled, while the engine worker that started it
    waited in Thread.start(): 15 ms said to be "queued for a custom-op thread, all busy" and waking.
    """
    go, spinning, done = threading.Event(), threading.Event(), threading.Event()
    threads: list[threading.Thread] = []

    def loader() -> None:
        go.wait()
        spinning.set()
        end = time.perf_counter() + 2.0
        while not done.is_set() and time.perf_counter() < end:  # pure Python: holds the GIL
            pass

    def start_loader() -> None:
        threads.append(threading.Thread(target=loader, name="UsersLoader"))
        threads[-1].start()

    def work(x: nd.NDArray) -> None:
        if started == "inside the profiled code":
            start_loader()
        go.set()
        spinning.wait(5)  # the loader holds the GIL (a fixed nap missed it when the loader had no CPU yet)
        for _ in range(4):
            nd.Custom(x, op_type="KnownTiny")
        nd.waitall()
        done.set()

    def check() -> None:
        go.clear()
        spinning.clear()
        done.clear()
        threads.clear()
        if started.startswith("before"):
            start_loader()
        release = threading.Event()
        idle = threading.Thread(target=release.wait, name="UsersIdleThread")  # blocked throughout: no lane
        idle.start()
        try:
            trace = _profile(work, warm="fresh" not in started)
        finally:
            go.set()
            done.set()
            release.set()
            for th in [*threads, idle]:
                th.join()
        assert "UsersIdleThread" not in {th.name for th in trace.threads}
        w = _waiting(trace, "KnownTiny")
        if sum(w.values()) < 2 * sys.getswitchinterval() * 1e9:
            # The known answer's premise: the ops waited for the loader. In 8 of 40 single tries
            # here they did not (1-3 ms of waiting, against 20-85 ms when the loader held them for a
            # switch interval each): the GIL went from the program to the pool's threads, and one or
            # two 1 ms samples named whoever held it meanwhile. Nothing to attribute: tried again.
            # Two intervals, not one: a CI run failed on a try of 5.3 ms in all (four calls of 1.3 ms,
            # the loader forced off 0.6 ms after the pushes, one sample then naming a pool thread for
            # the next millisecond); in 37 tries that met the premise beside a CPU-bound process the
            # ops waited 22-55 ms, and every one named the loader.
            waited = sum(w.values()) / 1e6
            raise _NotHeldUp(f"the ops waited {waited:.1f} ms in all: the loader held them up for no switch interval each")
        if stalled := _stalled_python(trace, "KnownTiny"):
            raise _NotHeldUp(f"{stalled}: the loader was not all that held the ops up")
        assert _gil_share(w) >= 0.8, (w, _diagnosis(trace))
        # An assertion, not a KeyError, where no holder was named: a loaded machine's run is retried.
        holders = trace.analysis().queue_gil_holders.get("custom_pool", {}).get("KnownTiny", [])
        assert holders, (trace.analysis().queue_gil_holders, _diagnosis(trace))
        assert holders[0].thread == "UsersLoader" and holders[0].running == "", (holders, _diagnosis(trace))
        said = "UsersLoader (its own Python, outside the engine's ops)"
        assert f"held most by {said}" in why_text(trace)
        assert all(not h.thread.startswith("opprof-") for h in holders if h.ns >= 0.1 * holders[0].ns), holders
        # The path steps across to the loader, named as the why-text names it (not "between its
        # ops": it pushed none), for the waits of the pools and of the woken program alike: when
        # every such piece was wholly the GIL's, the path came back "queued" (2026-12-04).
        path = trace.critical_path()
        assert path.check() == []
        loader = sum(s.dur for s in path.segments if s.kind.value == "gil" and s.name == f"{said} holding the GIL")
        assert loader >= 0.5 * path.total, (path.by_name(), _diagnosis(trace))

    # Six tries: beside the spinning loader a single try failed in 12 of 40 here (2026-12-05): in 8
    # the loader held the ops up for no switch interval (the premise, above: such a try says
    # nothing either way), in 4 a pool thread held the GIL 11-32 % as long as the loader while the
    # others waited (a convoy: the thread that won the GIL at a forced switch keeps it for its
    # Python, its waiters for it). Timed inside the forward, no forward took over 300 µs in 70 runs:
    # a long "held" Python was one waiting for the GIL between the samples. Six tries failed in a
    # row once in a CI run, each of them, by their figures, a try whose premise did not hold. Beside
    # a CPU-bound process (2026-12-05), 4 of 12 single runs of the three cases failed on a tiny
    # Python that itself waited inside (2.4 ms, 0.22 of it on a CPU), its thread named the top
    # holder: such a try is also one whose premise did not hold (_stalled_python), and is retried.
    _judged(check, tries=6)


def test_a_sub_op_behind_dots_that_release_the_gil_waits_for_busy_workers() -> None:
    """Known answer 3: both engine workers run large NumPy dots (the GIL released) while a custom
    op's sub-op is ready: >= 80 % of its waiting is "every engine worker busy", <= 10 % the GIL."""
    a = nd.array(np.random.default_rng(0).random((1200, 1200), dtype=np.float32))
    a.wait_to_read()

    def work(x: nd.NDArray) -> None:
        nd.Custom(x, op_type="KnownNap")  # its sub-ops come after its 20 ms nap
        time.sleep(0.002)  # its Python started: the engine workers are free again
        # Two dots a worker: one each (~15 ms here once BLAS's threads are warm) could end before
        # the nap, and the sub-op then waited for a parked worker's wake, not for busy ones (11 of
        # 20 in a loop on 3.11, 10 of 20 on 3.13; one CI run's five tries in a row on 3.13).
        for _ in range(4):
            nd.dot(a, a)

    def check() -> None:
        trace = _profile(work)
        w = _waiting(trace, "KnownNap")
        total = max(1, sum(w.values()))
        assert w["subop_queue"] >= 0.8 * total, (w, _diagnosis(trace))
        assert _gil_share(w) <= 0.1, (w, _diagnosis(trace))
        text = why_text(trace)
        # Busy with what: the two dots, by name, first (the span name of nd.dot).
        busy = trace.analysis().workers_busy.get("KnownNap", {})
        assert busy and next(iter(busy)) == "dot" and busy["dot"] >= 0.8 * sum(busy.values()), busy
        assert "sub-ops ready, every engine worker busy — the 2 engine workers were busy with dot " in text, text
        # The critical path alike: its queued time stays "queue" (the workers busy), not a hand-off
        # (measured: queue 53-61 % of the path, waking 0-0.3 %).
        by = trace.critical_path().by_kind()
        assert by.get("queue", 0) >= 0.3 * sum(by.values()) and by.get("wake", 0) <= 0.05 * sum(by.values()), by
        # Without the GIL's evidence (the pure path) the queued time is not known to be all busy:
        # what the workers ran meanwhile is said, not that every one was busy.
        bare = Trace(trace.threads, trace.table, trace.instants, trace.counters, trace.flow_table, trace.metadata, trace.ops)
        plain = why_text(bare)
        assert "sub-ops ready, queued for an engine worker — the 2 engine workers meanwhile ran dot " in plain, plain
        assert "were busy with dot" not in plain, plain

    # Alone, one recording in 40 missed (2026-12-04: its sub-op waited 2 ms for the GIL some other
    # thread held, 48 % of its waiting), none of 120 in two more sets; in one CI run three in a row
    # missed, after the browser and Dask tests: five tries, as the what-if replays take.
    retried(check, tries=5)


@pytest.mark.skipif(not handoff.AVAILABLE, reason=f"hand-offs not timed here: {handoff.WHY_NOT}")
def test_waits_shorter_than_a_sampling_period_name_the_python_that_held_the_gil() -> None:
    """Known answer: 60 chained custom ops, each pushing its sub-op and then spinning 0.4 ms (less
    than a sampling period) with the GIL: each engine worker woken for a sub-op waits for that
    Python. >= 75 % of the workers' GIL waiting names a custom-op thread, <= 20 % names no one
    (84-88 % and 8-12 % in runs here: what names no one is mostly the GIL free between the spinner's
    park and the worker's taking, the OS waking the worker). The samples alone (one a ms) named
    custom-op threads for 64-68 % and no one for 29-48 %, as on the demo, where 11-15 ms of a 31-36
    ms critical path was "holder not seen": a hand-off's timed taking of the GIL names its getter
    the holder until its next park, the next taking or the next sample."""

    def work(x: nd.NDArray) -> None:
        for _ in range(60):
            x = nd.Custom(x, op_type="KnownPushThenSpin")

    def check() -> None:
        trace = _profile(work)
        states = trace.analysis().thread_states
        assert states is not None
        names = {th.tid: th.name for th in trace.threads}
        workers = [t for t, n in names.items() if n.startswith("opprof-engine-")]
        customs = {t for t, n in names.items() if n.startswith("opprof-custom-")}
        wait = np.isin(states.tid, workers) & (states.state == int(ThreadState.WAIT))
        ns = states.end[wait] - states.start[wait]
        total = int(ns.sum())
        if total < 60 * 100_000:  # 0.1 ms a call: the spins held the workers up
            raise _NotHeldUp(f"the workers waited {total / 1e6:.2f} ms for the GIL in all")
        by_custom = int(ns[np.isin(states.holder[wait], list(customs))].sum())
        unseen = int(ns[states.holder[wait] < 0].sum())
        said = (
            f"{total / 1e6:.2f} ms: {by_custom / 1e6:.2f} by custom-op threads, {unseen / 1e6:.2f} by no one; {_diagnosis(trace)}"
        )
        assert by_custom >= 0.75 * total and unseen <= 0.2 * total, said

    _judged(check, tries=4)


def _chain(x: nd.NDArray, n: int = 300) -> None:
    """Trivial custom ops, each reading the last one's output, behind a 20 ms nap: the program
    pushes them all meanwhile, so they run with nothing else running."""
    x = nd.Custom(x, op_type="KnownNap")
    for _ in range(n):
        x = nd.Custom(x, op_type="KnownTiny")


@pytest.mark.skipif(not handoff.AVAILABLE, reason=f"hand-offs not timed here: {handoff.WHY_NOT}")
def test_a_chain_of_trivial_custom_ops_waits_for_thread_hand_offs() -> None:
    """Known answer 4: hundreds of trivial custom ops and nothing else running: their queued time
    is mostly the hand-off (waking the thread, then the GIL its waker still holds), hardly ever every
    thread busy; every hand-off is timed."""

    def check() -> None:
        trace = _profile(_chain)
        w = _waiting(trace, "KnownTiny")
        queued = {k: v for k, v in w.items() if k.startswith(("custom_pool", "subop_queue"))}
        wake = queued.get("custom_pool_wake", 0) + queued.get("subop_queue_wake", 0)
        gil_after = queued.get("custom_pool_gil", 0) + queued.get("subop_queue_gil", 0)
        busy = queued.get("custom_pool", 0) + queued.get("subop_queue", 0)
        total = max(1, sum(queued.values()))
        # The hand-off: the wake, and the GIL the waker (or the thread before it) still holds.
        assert wake + gil_after >= 0.75 * total and wake >= 0.25 * total and busy <= 0.2 * total, queued
        hops = handoff_costs(trace)
        assert hops["custom"].count >= 100 and hops["engine"].count >= 100, hops  # some gets find work waiting
        assert "handing over, waking it (" in why_text(trace)
        # The critical path alike: no pool was ever busy, so nothing on it is "queue" or
        # "custom_pool"; its hand-offs are "wake" (14-18 % here) and the GIL. Before, its queued
        # pieces kept those kinds wherever no thread of the pool waited for the GIL with a holder
        # known: the demo's path was 41 % "queue" and "custom_pool" with no pool ever busy.
        by = trace.critical_path().by_kind()
        total_path = sum(by.values())
        assert by.get("queue", 0) + by.get("custom_pool", 0) <= 0.05 * total_path, by
        assert by.get("wake", 0) >= 0.05 * total_path, by

    retried(check)


@pytest.mark.skipif(not handoff.AVAILABLE, reason=f"hand-offs not timed here: {handoff.WHY_NOT}")
def test_the_logged_hops_account_for_a_thread_ping_pong() -> None:
    """Known answer 4, the cost: two threads ping-pong 300 times through the engine's queue; the
    hand-offs the queue logs (put to GIL held) add up to the ping-pong's own wall time within 10 %.
    (A hop here swings 30-130 µs from one second to the next as idle vCPUs halt: the comparison is
    within one run. ``python -m benchmarks`` compares a profiled chain's hops with the ping-pong.)
    The getters park at once here (``spin_us=0``): a polled hop is a fraction of a µs, less than
    the loop's own put and get, so the log would account for the wake only, not the wall time."""
    trips = 300
    assert handoff.start()
    try:
        handoff.drain()
        one_way_us = handoff.ping_pong_us(trips, spin_us=0)
        r = handoff.drain().records
    finally:
        handoff.stop()
    logged_us = (r["gil"] - np.maximum(r["put"], r["park"])).sum() / 1e3 / (2 * trips)
    assert len(r) >= trips  # most gets park: the other thread is still on its way
    assert abs(logged_us / one_way_us - 1) <= 0.1, (logged_us, one_way_us)


def _union(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals ``[a, b)`` as disjoint sorted intervals."""
    order = np.argsort(a, kind="stable")
    a, b = a[order], b[order]
    out_a, out_b = [], []
    for x, y in zip(a.tolist(), b.tolist(), strict=True):
        if out_b and x <= out_b[-1]:
            out_b[-1] = max(out_b[-1], y)
        else:
            out_a.append(x)
            out_b.append(y)
    return np.array(out_a, dtype=np.int64), np.array(out_b, dtype=np.int64)


def _idle_worker_time(trace: Trace) -> tuple[int, int]:
    """(ns a ready sub-op waited while some engine worker ran no span, and the part of it the
    engine pool's condition calls busy): the demo's known answer, read off the spans."""
    a = trace.analysis()
    t, ops = trace.table, trace.ops
    assert ops is not None
    _, engine = a.pool_tids
    _, cond = a.pool_conditions
    assert cond is not None
    lo, hi = int(t.start.min()), int(t.end.max())
    # Moments some engine worker ran no span: the complement of each worker's spans, united.
    idle_a, idle_b = [], []
    for tid in engine.tolist():
        on = t.tid == tid
        ua, ub = _union(t.start[on], t.end[on])
        idle_a.append(np.concatenate(([lo], ub)))
        idle_b.append(np.concatenate((ua, [hi])))
    ia, ib = _union(np.concatenate(idle_a), np.concatenate(idle_b))
    # Ready sub-ops of custom ops waiting to start.
    rows = a.span_op_rows
    sub = np.flatnonzero((rows >= 0) & (t.inv >= 0) & (t.tid != 0))
    sub = sub[np.isin(t.tid[sub], engine)]
    ready = ops.ready[rows[sub]]
    qa, qb = _union(ready[ready < t.start[sub]], t.start[sub][ready < t.start[sub]])
    # Their intersection, then the busy part of it.
    pts = np.unique(np.concatenate([ia, ib, qa, qb]))
    mid = (pts[:-1] + pts[1:]) // 2

    def inside(x_a: np.ndarray, x_b: np.ndarray) -> np.ndarray:  # each segment's middle within one interval
        return np.searchsorted(x_a, mid, side="right") - 1 == np.searchsorted(x_b, mid, side="right")

    both = inside(ia, ib) & inside(qa, qb)
    seg = np.diff(pts)[both]
    busy = cond.time_in(type(cond).BUSY, pts[:-1][both], pts[1:][both])
    return int(seg.sum()), int(busy.sum())


def test_the_demo_never_calls_a_pool_with_an_idle_worker_busy() -> None:
    """Known answer 6: on the demo, of the time a ready sub-op waited while an engine worker ran no
    span at all, at most 5 % is still named "every engine worker busy" (it was 100 % before the
    GIL's evidence)."""
    from opprof.demo import train

    def check() -> None:
        opprof.set_engine("threaded")
        with opprof.profile() as prof:
            train(10)
        assert prof.trace is not None
        idle, busy = _idle_worker_time(prof.trace)
        assert idle > 0
        assert busy <= 0.05 * idle, (busy, idle)

    retried(check)


@pytest.mark.skipif(not handoff.AVAILABLE, reason=f"waits not timed here: {handoff.WHY_NOT}")
def test_a_program_waiting_for_its_ops_is_parked_in_its_waits_not_holding_the_gil() -> None:
    """The program's waits (wait_to_read: WaitForVar) are timed like the pools' hand-offs: inside
    20 waits of ~3 ms for an op that naps, the program is parked, then woken, then waiting for the
    GIL, exactly; never holding it (sampled at 1 kHz, a sample just before each wait stretched over
    its period called a third of the demo's waiting "holding the GIL")."""

    def work(x: nd.NDArray) -> None:
        for _ in range(20):
            nd.Custom(x, op_type="KnownNap3").wait_to_read()

    trace = _profile(work)
    t = trace.table
    main = next(th.tid for th in trace.threads if th.name == "MainThread")
    waits = np.flatnonzero((t.tid == main) & (t.name == t.strings.index("WaitForVar")))
    assert len(waits) == 20
    st = trace.thread_states
    assert st is not None
    ov = st.overlap(np.full(len(waits), main), t.start[waits], t.end[waits]).sum(axis=0)
    total = int((t.end[waits] - t.start[waits]).sum())
    by = dict(zip((s.name for s in STATES), ov.tolist(), strict=True))
    assert by["HELD"] <= 0.05 * total, (by, total)
    assert by["BLOCKED"] + by["RUNNABLE"] + by["WAIT"] >= 0.9 * total, (by, total)
    assert trace.metadata["gil"]["handoffs"]["wait"]["count"] >= 20
    assert handoff_costs(trace)["wait"].count >= 20
    assert " back to waiting threads, " in why_text(trace)


@pytest.mark.parametrize("then", ["sleeps", "spins"])
def test_a_program_that_sleeps_after_its_pushes_is_blocked_on_the_path_one_that_spins_runs(then: str) -> None:
    """Known answers on the critical path's program time: four small custom ops, then the program
    sleeps 30 ms (the GIL released, the thread blocked) or spins 30 ms in Python, then waits. The
    path is the program's either way; sleeping it is "blocked between its pushes" (its thread state),
    spinning its own Python. Both were called "the program's own Python" before."""

    def work(x: nd.NDArray) -> None:
        for _ in range(4):
            nd.Custom(x, op_type="KnownTiny")
        if then == "sleeps":
            time.sleep(0.03)
        else:
            spin(0.03)

    def check() -> None:
        trace = _profile(work)
        path = trace.critical_path()
        assert path.check() == []
        by = dict(path.by_kind())
        blocked, program = by.get("blocked", 0), by.get("program", 0)
        if then == "sleeps":
            assert blocked >= 0.8 * path.total, (path.by_name(), _diagnosis(trace))
            said = f"MainThread {BLOCKED_WORDS}"
            assert any(s.name == said for s in path.segments)
        else:
            assert program >= 0.8 * path.total and blocked <= 0.05 * path.total, (path.by_name(), _diagnosis(trace))
        kind = "blocked" if then == "sleeps" else "program"
        assert f"{100 * max(blocked, program) / path.total:.0f}% {kind}" in why_text(trace)

    retried(check)
