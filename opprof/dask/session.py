"""``with opprof.dask.profile(client) as prof:`` — profile work on a Dask cluster into one trace.

Starting installs two plugins through Dask's plugin API (``Client.register_plugin``): on every
worker, :class:`~.worker.OpprofWorkerPlugin` (also on workers that join later: Dask installs a
registered plugin on each new worker); on the scheduler, a counter of the tasks each worker
finished, so that when a worker dies the trace can say how many of its tasks never arrived.
It then measures each worker's clock against the client's (:mod:`.clock`) and starts a thread
that pulls the workers' records every ``interval`` seconds, at most ``chunk`` tasks a reply.

Stopping pulls what is left (the engines' last segments included), measures the clocks again,
removes both plugins (always, also after an error or Ctrl-C) and merges everything into
``prof.trace`` (:mod:`.merge`). The client's own opprof engine is recorded meanwhile as process 0.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from distributed import Client, SchedulerPlugin

from ..profiler import Profiler, stop_after
from ..trace import Trace
from .clock import ClockEstimate, Exchange, estimate
from .live import DaskLiveFeed
from .merge import WorkerRecords, merge
from .worker import CLOCK_HANDLER, PLUGIN_NAME, VERSION, OpprofWorkerPlugin, Reply, drain

__all__ = ["COUNTER_NAME", "DaskProfile", "DaskProfileError", "client_for", "profile"]

COUNTER_NAME = "opprof-task-counter"


class DaskProfileError(RuntimeError):
    """A Dask profile that cannot start (no client, an asynchronous client, one already running)."""


class TaskCounter(SchedulerPlugin):
    """On the scheduler: how many tasks each worker finished since the profile started."""

    name = COUNTER_NAME

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if start == "processing" and (finish == "memory" or finish == "erred"):
            worker = kwargs.get("worker")
            if worker is not None:
                self.counts[worker] = self.counts.get(worker, 0) + 1


async def _exchanges(client: Client, address: str, rounds: int) -> list[Exchange]:
    """Clock exchanges with one worker, timed on the client's event loop, straight to the worker's
    own handler (:data:`~.worker.CLOCK_HANDLER`): ~0.3 ms round trips here, offsets within ~20 µs."""
    rpc = client.rpc(address)
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        w = await getattr(rpc, CLOCK_HANDLER)()
        t1 = time.perf_counter_ns()
        out.append(Exchange(t0, int(w), t1))
    return out


def _counts(dask_scheduler: Any = None) -> dict[str, int]:
    plugin = dask_scheduler.plugins.get(COUNTER_NAME) if dask_scheduler is not None else None
    return dict(plugin.counts) if plugin is not None else {}


class DaskProfile:
    """One profile of a Dask cluster (see the module docstring); ``trace`` after :meth:`stop`."""

    def __init__(
        self,
        client: Client,
        *,
        interval: float = 1.0,
        chunk: int = 100_000,
        max_events: int = 5_000_000,
        clock_rounds: int = 15,
        engine: bool = True,
        memory: bool = False,
        _clock_offsets_ns: dict[str, int] | None = None,
    ) -> None:
        if not isinstance(client, Client):
            raise DaskProfileError(f"opprof.dask.profile() takes a distributed.Client, got {type(client).__name__}")
        client_for(client)  # a closed client says so (installing the plugins would fail for another reason)
        if client.asynchronous:
            raise DaskProfileError("opprof.dask.profile() needs a synchronous Client (this one is asynchronous)")
        if interval <= 0 or chunk < 1 or clock_rounds < 1:
            raise ValueError(
                f"interval > 0, chunk >= 1 and clock_rounds >= 1 are needed, got {interval}, {chunk}, {clock_rounds}"
            )
        self.client = client
        self.interval = float(interval)
        self.chunk = int(chunk)
        self.max_events = int(max_events)
        self.clock_rounds = int(clock_rounds)
        self.engine = engine
        #: Each NDArray's storage too, on the client and every worker (:mod:`opprof.profiler.memory`).
        self.memory = memory
        self._offsets = dict(_clock_offsets_ns or {})
        self.trace: Trace | None = None
        self.workers: dict[str, WorkerRecords] = {}
        self.problems: list[str] = []
        #: The client process's own recording (process 0); a caller may poll it (``%%opprof``'s live view).
        self.local = Profiler(max_events, memory=memory)
        self._lock = threading.Lock()  # one pull at a time: the puller's and stop()'s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._clock_start: dict[str, list[Exchange]] = {}
        self._clock_end: dict[str, list[Exchange]] = {}
        self._running = False
        #: What the client's own final wait raised (an op there that failed and nobody waited for):
        #: kept, not raised, as :meth:`stop` builds the trace anyway (as :attr:`opprof.Profiler.error`).
        self.error: BaseException | None = None
        #: (how to remove it, its name) of each plugin start() installed, until stop() removes them.
        self._installed: list[tuple[Callable[[str], Any], str]] = []

    # ------------------------------------------------------------------ start / stop
    def start(self) -> DaskProfile:
        if self._running:
            raise DaskProfileError("this Dask profile is already running")
        c = self.client
        plugin = OpprofWorkerPlugin(
            max_events=self.max_events,
            client_pid=os.getpid(),
            client_host=os.uname().nodename,
            clock_offsets_ns=self._offsets,
            engine=self.engine,
            client_version=VERSION,
            memory=self.memory,
        )
        self._running = True
        try:
            # The workers' first: a task that ends between the two is then recorded and not
            # counted (so never called missing), rather than counted and not recorded.
            try:
                c.register_plugin(plugin, name=PLUGIN_NAME)
                self._installed.append((c.unregister_worker_plugin, PLUGIN_NAME))
                c.register_plugin(TaskCounter(), name=COUNTER_NAME)
                self._installed.append((c.unregister_scheduler_plugin, COUNTER_NAME))
            except Exception as e:  # most often: the workers or the scheduler cannot import opprof
                raise DaskProfileError(
                    f"installing opprof's plugins on the cluster failed ({type(e).__name__}: {e}); "
                    "opprof must be installed where the scheduler and the workers run, at the client's version"
                ) from e
            # Every worker there now is known from the start, so one that dies before its first
            # pull is still named in the trace (workers that join later are known by their replies).
            info = self.client.scheduler_info(n_workers=-1).get("workers", {})
            for address, w in sorted(info.items(), key=lambda kv: str(kv[1].get("name", kv[0]))):
                self.workers[address] = WorkerRecords(address, name=str(w.get("name", address)), pid=int(w.get("pid") or 0))
            self._clock_start = self._sync()
            self.local.start()
        except BaseException:
            self._remove_plugins()
            self._running = False
            raise
        self._stop.clear()
        self._thread = threading.Thread(target=self._poll, name="opprof-dask-puller", daemon=True)
        self._thread.start()
        return self

    def stop(self, wait: bool | float = True) -> Trace:
        """Pull what is left, remove the plugins, merge: ``self.trace``. ``wait``: for the client's
        own engine, as :meth:`opprof.Profiler.stop` (the workers' engines are waited for at most 5 s)."""
        if not self._running:
            if self.trace is None:
                raise DaskProfileError("this Dask profile has no trace: it was never started, or a Ctrl-C cut its merge short")
            return self.trace
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        counts: dict[str, int] = {}
        try:
            try:
                self._pull(final=True)
                self._clock_end = self._sync()
                counts = self.client.run_on_scheduler(_counts)
            except Exception as e:  # the cluster went away: keep what arrived
                self.problems.append(f"the final pull failed: {type(e).__name__}: {e}")
        finally:
            self._remove_plugins()
            self._running = False
            local = self._stop_local(wait)
        self.trace = self._merge(local, counts)
        return self.trace

    def _stop_local(self, wait: bool | float) -> Trace | None:
        """The client's own trace; an error its final wait raised is kept in ``error``."""
        if not self.local.running:
            return self.local.trace
        if not self.local.recorded_any:
            # Nothing ran on the client's engine: no final wait either, whose span would end after
            # every worker's work and so start the critical path from the client doing nothing.
            wait = False
        try:
            return self.local.stop(wait=wait)
        except BaseException as e:  # the trace is built before the error is raised
            self.error = e
            return self.local.trace

    def _remove_plugins(self) -> None:
        """Remove what :meth:`start` installed (only that: a start that failed half-way leaves less)."""
        installed, self._installed = self._installed, []
        for remove, name in installed:
            try:
                remove(name)
            except Exception as e:  # the cluster is gone: nothing left to remove it from
                self.problems.append(f"removing the {name} plugin failed: {type(e).__name__}: {e}")

    def live_feed(self) -> DaskLiveFeed:
        """A feed of what this running profile has recorded since the last poll: the client's
        spans and the workers' tasks as the pulls bring them (:mod:`.live`)."""
        if not self._running:
            raise DaskProfileError("this Dask profile is not running")
        return DaskLiveFeed(self.workers, self.start_clock, self.local.live_feed())

    def start_clock(self, address: str) -> ClockEstimate | None:
        """Worker ``address``'s clock against the client's, from the exchanges at the start (None: none)."""
        return estimate(self._clock_start.get(address, ()))

    # ------------------------------------------------------------------ pulling
    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._pull(final=False)
            except Exception as e:  # noted, and the next round tries again
                self.problems.append(f"a pull failed: {type(e).__name__}: {e}")

    def _pull(self, final: bool) -> None:
        """Drain every worker until none has more (``final``: with the engines' last segments)."""
        with self._lock:
            workers: list[str] | None = None  # None: all of them (the first round)
            while True:
                first = workers is None
                replies = self.client.run(drain, PLUGIN_NAME, self.chunk, final and first, workers=workers, on_error="return")
                workers = []
                for address, reply in replies.items():
                    if isinstance(reply, BaseException):
                        self._lost(address, f"did not answer ({type(reply).__name__}: {reply})")
                        continue
                    if reply is None:  # joined before the plugin was installed there, or it is restarting
                        continue
                    assert isinstance(reply, Reply)
                    self._received(address, reply)
                    if reply.more:
                        workers.append(address)
                if first:  # a worker heard from before but absent from a round of all: gone
                    for address, w in self.workers.items():
                        if address not in replies and w.gone is None:
                            w.gone = "left the cluster (died or was restarted) before the profile ended"
                if not workers:
                    return

    def _received(self, address: str, reply: Reply) -> None:
        """A worker's reply. One from another OS process at a known address is a restarted worker:
        the old process's records stay apart (a process of their own in the trace, said to be
        gone), and the new one's start afresh."""
        w = self.workers.get(address)
        if w is not None and w.pid and reply.pid and reply.pid != w.pid:
            w.gone = w.gone or f"restarted: process {reply.pid} took over its address"
            self.workers[f"{address} (process {w.pid})"] = self.workers.pop(address)
            w = None
        if w is None:
            w = self.workers[address] = WorkerRecords(address)
        w.add(reply)

    def _lost(self, address: str, why: str) -> None:
        w = self.workers.setdefault(address, WorkerRecords(address))
        w.gone = w.gone or why

    def _sync(self) -> dict[str, list[Exchange]]:
        """``clock_rounds`` clock exchanges with each worker that has the plugin (see :mod:`.clock`)."""
        out: dict[str, list[Exchange]] = {}
        for address in self.client.scheduler_info(n_workers=-1).get("workers", {}):
            try:
                got = self.client.sync(_exchanges, self.client, address, self.clock_rounds)
            except Exception:  # gone, or the plugin not there (yet): no estimate for it from this batch
                continue
            if got:
                out[address] = got
        return out

    def _merge(self, local: Trace | None, counts: dict[str, int]) -> Trace:
        lost = []
        for address in counts.keys() - self.workers.keys():  # joined and died between two pulls
            self.workers[address] = WorkerRecords(address, name=address, gone="left the cluster before sending anything")
        # The scheduler counts a worker's finished tasks by address: a restarted worker's processes
        # share it, so their records are set against it together (the current process reports).
        sent_at: dict[str, int] = {}
        for w in self.workers.values():
            sent_at[w.address] = sent_at.get(w.address, 0) + w.sent
        for address, w in self.workers.items():
            w.clock = estimate(self._clock_start.get(w.address, ()), self._clock_end.get(w.address, ()))
            finished = counts.get(w.address) if address == w.address else None
            missing = max(0, finished - sent_at[w.address]) if finished is not None else None
            if w.gone is not None or (missing or 0) > 0 or w.engine_pending:
                lost.append(
                    {
                        "worker": address,
                        "name": w.name,
                        "why": w.gone or "records left unsent",
                        "tasks_missing": missing,
                        "tasks_received": w.received,
                        "engine_records_missing": w.engine_pending,
                    }
                )
        info = {
            "scheduler": self.client.scheduler.address if self.client.scheduler is not None else None,
            "workers": [
                {
                    "address": w.address,
                    "name": w.name,
                    "os_pid": w.pid,
                    "pid": k + 1,
                    "tasks": w.received,
                    "overflow": w.overflow,
                    **(w.clock.as_metadata() if w.clock is not None else {"clock_offset_ns": None}),
                }
                for k, w in enumerate(self.workers.values())
            ],
            "lost": lost,
            "problems": self.problems + [p for w in self.workers.values() for p in w.problems],
        }
        if lost:
            warnings.warn(
                "opprof.dask: records missing from "
                + "; ".join(
                    f"{x['worker']} ({x['why']}; {x['tasks_missing']} tasks missing)"
                    if x["tasks_missing"]
                    else f"{x['worker']} ({x['why']})"
                    for x in lost
                ),
                RuntimeWarning,
                stacklevel=3,
            )
        return merge(local, list(self.workers.values()), {"dask": info})


def _probe(address: str) -> None:
    """Fail fast on a TCP address nothing listens at: Dask's Client retries until its timeout (10 s)."""
    host_port = address.split("://", 1)[-1]
    if address.startswith(("tcp://", "tls://")) or "://" not in address:
        host, _, port = host_port.rpartition(":")
        if port.isdigit():
            try:
                socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=5).close()
            except OSError as e:
                raise DaskProfileError(f"cannot reach a Dask scheduler at {address} ({e})") from None


#: Clients :func:`client_for` made, by scheduler address: one each for the process's life.
_CLIENTS: dict[str, Client] = {}


def client_for(target: Any) -> Client:
    """``target`` if it is a Client; for a scheduler address, a Client connected there (made once,
    then reused: it is also the default client the user's own Dask calls pick up)."""
    if isinstance(target, Client):
        if target.status in ("closing", "closed"):
            raise DaskProfileError("the Dask client is closed: profile with a Client that is connected (make a new one)")
        return target
    if not isinstance(target, str):
        raise DaskProfileError(f"expected a distributed.Client or a scheduler address, got a {type(target).__name__}")
    client = _CLIENTS.get(target)
    if client is None or client.status != "running":
        _probe(target)
        try:
            client = _CLIENTS[target] = Client(target, timeout=10)
        except (OSError, TimeoutError, ValueError) as e:
            raise DaskProfileError(f"cannot reach a Dask scheduler at {target} ({e})") from None
    return client


@contextmanager
def profile(client: Client, **options: Any) -> Iterator[DaskProfile]:
    """Profile the block's work on ``client``'s cluster; ``prof.trace`` after it, also when it raised.

    Options: ``interval`` (s between pulls, 1.0), ``chunk`` (tasks a reply at most, 100,000),
    ``max_events`` (per worker, as ``opprof.profile``), ``clock_rounds`` (exchanges per clock
    measurement, 15), ``engine`` (record the workers' opprof engines, True), ``memory`` (each
    NDArray's storage too, on the client and every worker, False).
    """
    prof = DaskProfile(client, **options).start()
    try:
        yield prof
    except BaseException as e:
        stop_after(prof, e)  # after Ctrl-C, the client's queued work is waited for briefly; the block's error wins
        raise
    else:
        prof.stop()
