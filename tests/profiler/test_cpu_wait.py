"""The OS's run-queue time per thread (``metadata["cpu_wait"]``): exact from the kernel's counts, on a
workload whose answer is known (more spinning processes than cores keep the engine's threads
waiting for a CPU) and said in the why-text only where it is a noticeable share of the recording."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

import opprof
from opprof import nd
from opprof.profiler import cpuwait
from opprof.trace.analysis.gil import cpu_waits
from opprof.trace.text import why_text
from tests.helpers import retried
from tests.profiler import test_gil_known_answers  # noqa: F401 - registers KnownTiny

linux = pytest.mark.skipif(cpuwait.run_queue_ns(threading.get_native_id()) is None, reason="no /proc schedstat here")


@linux
def test_a_thread_that_spins_beside_more_spinners_than_cores_waits_for_a_cpu() -> None:
    """Known answer: a thread started during the recording that spins 200 ms while more processes
    spin than there are cores waits for a CPU a good part of it (alone with cores + 1 spinners,
    each runnable thread gets a core about half the time: 40-100 ms measured of its 200, 40 in
    one full suite's run); one that ended before the stop is not counted."""
    cores = len(os.sched_getaffinity(0))
    if cores > 16:
        pytest.skip(f"{cores} cores: too many to keep busy for a test")

    def check() -> None:
        rec = cpuwait.CpuWaitRecording()
        ids: dict[str, int] = {}
        done = threading.Event()

        def spin(name: str, stay: bool) -> None:
            ids[name] = threading.get_native_id()
            end = time.perf_counter() + 0.2
            while time.perf_counter() < end:
                pass
            if stay:
                done.wait(10)

        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores + 1)]
        try:
            time.sleep(0.2)
            rec.start()
            ended = threading.Thread(target=spin, args=("ended", False))
            ended.start()
            ended.join()
            stays = threading.Thread(target=spin, args=("stays", True))
            stays.start()
            while "stays" not in ids:
                time.sleep(0.01)
            time.sleep(0.25)
            rec.stop()
        finally:
            done.set()
            for h in hogs:
                h.kill()
                h.wait()
        stays.join()
        meta = rec.metadata({ids["ended"]: 1, ids["stays"]: 2})["cpu_wait"]
        assert set(meta["ns"]) == {"2"}, meta
        assert meta["ns"]["2"] >= 0.15 * 0.2e9, meta  # >= 15 % of its 200 ms spin

    retried(check)


@linux
def test_a_chain_of_custom_ops_on_a_machine_others_keep_busy_says_it_waited_for_a_cpu() -> None:
    """More spinning processes than cores: the engine's threads wait in the OS's run queue for a
    good part of the recording, and the why-text says so, with the pools named."""
    cores = len(os.sched_getaffinity(0))
    if cores > 16:
        pytest.skip(f"{cores} cores: too many to keep busy for a test")

    def check() -> None:
        x = nd.ones((4, 4))
        nd.Custom(x, op_type="KnownTiny").wait_to_read()
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores + 1)]
        try:
            time.sleep(0.2)
            with opprof.profile() as prof:
                y = x
                for _ in range(100):
                    y = nd.Custom(y, op_type="KnownTiny")
                nd.waitall()
        finally:
            for h in hogs:
                h.kill()
                h.wait()
        trace = prof.trace
        assert trace is not None
        waits = cpu_waits(trace)
        wall = trace.metadata["t_stop_ns"] - trace.metadata["t_start_ns"]
        assert waits.get("engine", 0) + waits.get("custom", 0) >= 0.2 * wall, (waits, wall)
        text = why_text(trace)
        assert "Waiting for a CPU (the OS's run queue): " in text and "engine workers" in text, text

    retried(check)


def test_without_the_kernels_counts_the_trace_says_why_and_the_text_says_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpuwait, "run_queue_ns", lambda native_id: None)
    with opprof.profile() as prof:
        (nd.ones((2, 2)) + 1).wait_to_read()
    trace = prof.trace
    assert trace is not None
    assert "schedstat" in trace.metadata["cpu_wait"]["why_not"]
    assert cpu_waits(trace) == {}
    assert "Waiting for a CPU" not in why_text(trace)


def _native_threads() -> list[int]:
    """This process's threads that Python's threading does not know (a BLAS pool's, at import)."""
    python = {t.native_id for t in threading.enumerate()}
    return [int(t) for t in os.listdir("/proc/self/task") if int(t) not in python]


@linux
def test_a_matmul_split_across_numpys_blas_pool_is_counted_as_cpu_outside_python() -> None:
    """Known answer: a large matrix product on the program's thread runs on NumPy's BLAS pool too;
    its helper threads, which Python's threading does not know, ran for a good part of it (each of
    n threads about 1/n of the work), and the recording counts their CPU time; the why-text, where
    Python's threads waited for a CPU, names them."""
    import numpy as np

    a = np.random.default_rng(0).random((1500, 1500))
    a @ a  # a BLAS pool may start its threads at its first product
    if not _native_threads() or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("NumPy's BLAS runs on the calling thread alone here: no native pool to count")

    def check() -> None:
        rec = cpuwait.CpuWaitRecording()
        rec.start()
        t0 = time.perf_counter()
        a @ a
        wall = time.perf_counter() - t0
        rec.stop()
        got = rec.metadata({threading.get_native_id(): 1})["cpu_wait"]["outside_python"]
        assert got["threads"] >= 1 and got["ns"] >= 0.25 * wall * 1e9, (got, wall)

    retried(check)


@linux
def test_a_profile_leaves_its_own_gil_sampler_out_of_the_threads_outside_python() -> None:
    """The sampler is a thread of opprof's, not a native pool of the user's: named so at the OS, and
    never counted (an idle profile of 0.2 s counts no CPU outside Python, where no native pool ran)."""
    from opprof.engine import gil

    if not gil.AVAILABLE:
        pytest.skip(f"no GIL sampler here: {gil.WHY_NOT}")
    # A BLAS pool's threads spin ~0.1 s after their last work (OpenBLAS's thread timeout: measured
    # here after the matmul test, 100 ms of CPU in an idle profile that followed it): let them sleep.
    time.sleep(0.5)
    with opprof.profile() as prof:
        (nd.ones((2, 2)) + 1).wait_to_read()
        comms = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
        time.sleep(0.2)
    assert gil.SAMPLER_THREAD_NAME == "opprof-gil" and gil.SAMPLER_THREAD_NAME in comms, comms
    trace = prof.trace
    assert trace is not None
    outside = trace.metadata["cpu_wait"]["outside_python"]
    assert outside["ns"] < 0.01 * 0.2e9, outside  # < 2 ms: the sampler's own ~1-4 ms would show


def test_the_why_text_names_the_cpu_the_threads_outside_python_took() -> None:
    """Where Python's threads waited for a CPU, the line says how much CPU the process's own native
    threads took meanwhile (merged traces, Dask's workers, sum each process's: tests/dask)."""
    from opprof.trace.synthetic import synthetic_trace

    trace = synthetic_trace(200, seed=1)
    wall = 10_000_000
    tid = trace.threads[0].tid
    trace.metadata = {
        **trace.metadata,
        "t_start_ns": 0,
        "t_stop_ns": wall,
        "cpu_wait": {"source": "test", "ns": {str(tid): wall // 2}, "outside_python": {"ns": wall, "threads": 2}},
    }
    text = why_text(trace)
    line = next(x for x in text.splitlines() if x.startswith("Waiting for a CPU"))
    assert "2 threads of this process that Python's threading does not know ran" in line and "(1.0 cores' worth)" in line
    trace.metadata = {**trace.metadata, "cpu_wait": {"source": "test", "ns": {str(tid): wall // 2}}}
    assert "does not know" not in why_text(trace)
