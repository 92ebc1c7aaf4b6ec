"""The discrete-event model of the threaded engine: programs and custom-op Python replaying their
pushes and waits, the vars' version queues, the engine workers with their FIFO and chain rule, and
the custom-op pool (see :mod:`opprof.trace.analysis.whatif` for what it models and what not).
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque

import numpy as np

from ...ops import OpKind
from ...threadstates import ThreadState
from .gil import Gil
from .prepare import Recording

__all__ = ["CUSTOM_THREAD_KEY", "EXTERNAL", "OUTSIDE_KEY", "Replay"]

_CUSTOM, _DUMMY, _WAIT = int(OpKind.CUSTOM), int(OpKind.DUMMY), int(OpKind.WAIT)
_BLOCKED = int(ThreadState.BLOCKED)
_RUNNABLE = int(ThreadState.RUNNABLE)
_ACT, _DONE, _RESUME, _EXT, _FREE, _TAKE, _WAKE, _GIL, _BEGIN, _WOKEN, _OUTSIDE, _OUTSIDE_DONE = range(12)
EXTERNAL = -2  # ``Replay.by`` of a row enabled by an op from before the recording (as recorded)
#: GIL keys: an actor's index (>= 0), an engine worker's ``-1 - w``, a custom-op thread's between
#: its Pythons ``CUSTOM_THREAD_KEY - th`` (below every worker's).
CUSTOM_THREAD_KEY = -1_000_000
#: A thread outside the engine that held the GIL (``Recording.outside[k]``): ``OUTSIDE_KEY - k``.
OUTSIDE_KEY = -2_000_000


class _Actor:
    """A thread replaying its items: a program, or one custom op's Python on a pool thread."""

    __slots__ = ("fam", "gaps", "idx", "items", "let_go", "pos", "tail", "thread", "thread_index")

    def __init__(self, idx: int, items: list[int], gaps: list[int], tail: int, thread: int, fam: int) -> None:
        self.idx = idx  # its place in Replay.actors: events name actors by it
        self.items, self.gaps, self.tail = items, gaps, tail
        self.pos = 0
        self.thread = thread  # a program's recorded tid, or the number of a custom-op thread
        self.fam = fam  # the family whose Python this is; -1 for a program
        self.thread_index = -1  # a program's place in Recording.programs
        self.let_go = False  # a program the engine held back, let go: its next push is not held again


class Replay:
    """One run of the model (see :mod:`opprof.trace.analysis.whatif`); times are ns from the trace's origin.

    Events sit in one heap by (time, order of scheduling): at equal times, what was scheduled
    first happens first, so a replay is deterministic.
    """

    def __init__(
        self,
        rec: Recording,
        span_factor: np.ndarray,
        engine_threads: int,
        custom_threads: int,
        *,
        switch_ns: int | None = None,
        gil_span: np.ndarray | None = None,
    ) -> None:
        """``switch_ns``: the GIL's switch interval (None: no GIL, a free-threaded build);
        ``gil_span``: per span, 1.0 / 0.0 to force its work to hold / not hold the GIL, NaN as recorded."""
        self.rec = rec
        n = len(rec.kind)
        f = span_factor.tolist()
        self.dur = [round(d / f[s]) if s >= 0 else d for d, s in zip(rec.dur, rec.span, strict=True)]
        self.py_factor = [f[fam.python] for fam in rec.families]
        force = gil_span.tolist() if gil_span is not None else None
        #: What each thread did about the GIL: (thread key: an actor's index, or -1 - worker; ThreadState; start; end).
        self.gil_log: list[tuple[int, int, int, int]] = []
        self.gil = (
            Gil(
                switch_ns,
                self._gil_at,
                self._gil_done,
                self._gil_log,
                rec.gil_transfer_ns,
                rec.gil_asleep_transfer_ns,
            )
            if switch_ns is not None
            else None
        )
        # Each op's run: (ns with the GIL, ns without), its GIL waits dropped.
        op_wait, op_share = rec.op_wait or [0] * n, rec.op_share or [0.0] * n
        self.op_gil = [0] * n
        for r, s in enumerate(rec.span):
            if s < 0 or not self.dur[r]:
                continue
            work = max(0, round((rec.dur[r] - op_wait[r]) / f[s]))
            share = op_share[r] if force is None or force[s] != force[s] else force[s]
            self.dur[r], self.op_gil[r] = work, round(work * share) if self.gil is not None else 0
        self.py_force = [float("nan") if force is None else force[fam.python] for fam in rec.families]
        lat = rec.latency
        self.l_wake, self.l_next = lat["engine_wake"], lat["engine_next"]
        self.l_cwake, self.l_cnext = lat["custom_wake"], lat["custom_next"]
        self.l_wprog, self.l_wpy = lat["wake_program"], lat["wake_python"]
        #: Hand-offs hold the GIL where the recording says when it was held: a parked thread woken
        #: (the OS's part, without the GIL) takes the GIL back before it runs anything.
        self.hop_gil = self.gil is not None and rec.hop_gil
        self.hop_held = rec.hop_held
        self.hops: list[tuple[int, int, int, int]] = []  # (key, ns with the GIL, event, arg) after an OS wake
        self.custom_threads = custom_threads
        # Per row: what happened to it in the model.
        self.pushed = [-1] * n
        self.pusher = [0] * n  # a program's tid, or -(1 + custom thread number)
        self.ready = [-1] * n
        self.start = [-1] * n
        self.end = [-1] * n
        self.by = [-1] * n
        self.by_var = [-1] * n
        self.worker = [-1] * n
        self.count = [0] * n  # its dependencies not yet cleared
        self.waiter: dict[int, _Actor] = {}  # a blocked wait's row -> the thread waiting in it
        # Vars: the engine's version queues (made on first use).
        self.writing: set[int] = set()
        self.reading: dict[int, int] = defaultdict(int)
        self.queue: dict[int, deque[tuple[int, bool]]] = {}
        self.pending = 0
        self.all_waiters: list[int] = []
        # Back-pressure: programs held at a push, and each hold (program tid, from, to) as it ended.
        self.max_pending = rec.max_pending
        self.held: list[tuple[_Actor, int]] = []
        self.holds: list[tuple[int, int, int]] = []
        # Engine workers (idle ones in a heap: the lowest number first) and the ready FIFO.
        self.idle = list(range(engine_threads))
        self.fifo: deque[int] = deque()
        # The custom-op pool.
        self.tasks: deque[int] = deque()
        self.threads = 0
        self.idle_threads: list[int] = []
        self.taking = 0  # threads about to take a task: still idle to the pool
        self.blocked = 0
        k = len(rec.families)
        self.py_start = [-1] * k
        self.py_end = [-1] * k
        self.py_thread = [-1] * k
        self.heap: list[tuple[int, int, int, int]] = []
        self.seq = 0
        self.actors: list[_Actor] = []

    def at(self, t: int, what: int, arg: int) -> None:
        """Schedule event ``what`` (about row, actor, worker or thread ``arg``) at ``t``."""
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, what, arg))

    def _actor(self, items: list[int], gaps: list[int], tail: int, thread: int, fam: int) -> _Actor:
        a = _Actor(len(self.actors), items, gaps, tail, thread, fam)
        self.actors.append(a)
        return a

    def run(self) -> Replay:
        """Replay every program from its first item until no event is left."""
        # Threads outside the engine first: one holding the GIL when the recording began holds it
        # at the model's start too (at equal times, what was scheduled first happens first).
        self.out_pos = [0] * len(self.rec.outside)
        if self.gil is not None:
            for k, (_, asks, _, _) in enumerate(self.rec.outside):
                self.at(asks[0], _OUTSIDE, k)
        for k, p in enumerate(self.rec.programs):
            a = self._actor(p.items, p.gaps, 0, p.tid, -1)
            a.thread_index = k
            if p.items:
                self._gap(a, 0, p.gaps[0], 0)
        heap, families = self.heap, self.rec.families
        while heap:
            t, _, what, arg = heapq.heappop(heap)
            if what == _DONE:
                self._done(arg, t)
            elif what == _ACT:
                self._act(self.actors[arg], t)
            elif what == _RESUME:
                a = self.actors[arg]
                if a.fam >= 0:
                    self.blocked -= 1
                self._next(a, t)
            elif what == _EXT:
                self.count[arg] -= 1
                if self.count[arg] == 0:
                    self.by[arg] = EXTERNAL
                    for o in self._settle([arg], t):
                        self._dispatch(o, t)
            elif what == _WAKE:
                self._wake(arg, t)
            elif what == _TAKE:
                self._take(arg, t)
            elif what == _GIL:
                assert self.gil is not None
                self.gil.event(t, arg)
            elif what == _BEGIN:
                self._start(arg, self.worker[arg], t)
            elif what == _OUTSIDE:  # a thread outside the engine asks for the GIL for its next stretch
                self._work(t, OUTSIDE_KEY - arg, self.rec.outside[arg][2][self.out_pos[arg]], 0, _OUTSIDE_DONE, arg)
            elif what == _OUTSIDE_DONE:  # ... and, its own time later (not before it asked in the recording), the next
                j = self.out_pos[arg] = self.out_pos[arg] + 1
                _, asks, _, gaps = self.rec.outside[arg]
                if j < len(asks):
                    self.at(max(t + gaps[j], asks[j]), _OUTSIDE, arg)
            elif what == _WOKEN:
                key, held, ev, ev_arg = self.hops[arg]
                self._work(t, key, held, 0, ev, ev_arg)
            else:  # _FREE: the thread of a returned Python pushes its Dummy_Wait and is free
                th = self.py_thread[arg]
                self._push(families[arg].dummy, t, -1 - th)
                if self.tasks:  # straight on to the next task (its get does not sleep: the GIL kept)
                    self.taking += 1
                    self._keep(t, CUSTOM_THREAD_KEY - th, self.l_cnext, _TAKE, th)
                elif self.hop_gil and self.rec.tail_held > 0:
                    # The engine's Python back to the pool's queue, with the GIL, before it parks;
                    # a task that comes meanwhile is taken there (the thread counts as taking).
                    self.taking += 1
                    self._work(t, CUSTOM_THREAD_KEY - th, self.rec.tail_held, 0, _TAKE, th)
                else:
                    heapq.heappush(self.idle_threads, th)
        return self

    @property
    def end_ns(self) -> int:
        """End-to-end: the last thing anything did (an op's end, a wait's, a Python's, a push)."""
        return max([0, *self.end, *self.py_end, *self.pushed])

    # -------------------------------------------------------------- programs and Pythons
    def _act(self, a: _Actor, t: int) -> None:
        """The actor's next item: a push, a wait, or (a Python with none left) its return."""
        if a.pos == len(a.items):
            if a.fam >= 0:  # a Python returns; its thread pushes Dummy_Wait after the recorded delay
                self.py_end[a.fam] = t
                self.at(t + self.rec.families[a.fam].dummy_delay, _FREE, a.fam)
            return
        r = a.items[a.pos]
        if a.fam < 0 and self._held_back(a, r, t):
            return
        a.pos += 1
        tid = a.thread if a.fam < 0 else -1 - a.thread
        if self.rec.kind[r] == _WAIT:
            self._wait(a, r, t, tid)
        else:
            self._push(r, t, tid)
            self._next(a, t)

    def _held_back(self, a: _Actor, r: int, t: int) -> bool:
        """The engine's back-pressure (``Engine._throttle``): a program's push, or wait for a var,
        while ``max_pending`` ops are pending holds the program until half as many are (the
        completion that gets there wakes it); then that push goes ahead without a second check."""
        if a.let_go:
            a.let_go = False
            return False
        m = self.max_pending
        if m is None or self.pending < m or (self.rec.kind[r] == _WAIT and not self.rec.reads[r]):
            return False
        self.held.append((a, t))
        return True

    def _let_go(self, t: int) -> None:
        """Enough ops completed: every held program wakes (after a program's wake) and pushes."""
        for a, since in self.held:
            a.let_go = True
            self.holds.append((a.thread, since, t + self.l_wprog))
            self._hop(t, a.idx, self.l_wprog, "all", _ACT, a.idx)
        self.held = []

    def _next(self, a: _Actor, t: int) -> None:
        """The actor's next item after its own time before it (a Python's divided by its factor)."""
        if a.pos < len(a.items):
            gap = a.gaps[a.pos]
        elif a.fam >= 0:
            gap = a.tail
        else:
            return  # a program's last item is done
        self._gap(a, a.pos, gap, t)

    def _gap(self, a: _Actor, k: int, gap: int, t: int) -> None:
        """The actor's own time before its item ``k`` (its tail at ``len(items)``), the GIL's part taken
        when the GIL is free, then ``_ACT``."""
        if a.fam >= 0:
            fam = self.rec.families[a.fam]
            waits, shares = fam.gap_wait, fam.gap_share
            factor, force = self.py_factor[a.fam], self.py_force[a.fam]
        else:
            waits, shares = self.rec.programs[a.thread_index].gap_wait, self.rec.programs[a.thread_index].gap_share
            factor, force = 1.0, float("nan")
        if waits is None or shares is None:  # a recording read without the GIL's part
            self.at(t + round(gap / factor), _ACT, a.idx)
            return
        work = round(max(0, gap - waits[k]) / factor)
        share = shares[k] if force != force else force
        held = round(work * share) if self.gil is not None else 0
        self._work(t, a.idx, held, work - held, _ACT, a.idx)

    def _work(self, t: int, key: int, held: int, free: int, ev: int, arg: int) -> None:
        """Thread ``key`` works ``held`` ns with the GIL, then ``free`` ns without, then event ``ev`` about ``arg``."""
        if held <= 0 or self.gil is None:
            if self.gil is not None and held + free > 0:
                self.gil_log.append((key, _BLOCKED, t, t + held + free))
            self.at(t + held + free, ev, arg)
        else:
            self.gil.request(t, key, held, free, ev, arg)

    def _keep(self, t: int, key: int, latency: int, ev: int, arg: int) -> None:
        """A running thread goes on to its next work: ``latency`` of the engine's Python, with the
        GIL it holds (where the recording says when the GIL was held; else a plain delay)."""
        if self.hop_gil:
            self._work(t, key, latency, 0, ev, arg)
        else:
            self.at(t + latency, ev, arg)

    def _hop(self, t: int, key: int, latency: int, pool: str, ev: int, arg: int) -> None:
        """A parked thread handed work, ``latency`` after the signal: woken by the OS (without the
        GIL), it takes the GIL back and runs the engine's Python before ``ev``: ``hop_held[pool]``
        of the latency, measured (1 ns, the take alone, where not). Without the GIL's evidence, or
        without the GIL, the whole latency is a delay."""
        if not self.hop_gil:
            self.at(t + latency, ev, arg)
            return
        held = min(latency, max(1, self.hop_held.get(pool, 1)))
        woken = latency - held
        self.hops.append((key, held, ev, arg))
        if woken > 0:
            self.gil_log.append((key, _RUNNABLE, t, t + woken))
        self.at(t + woken, _WOKEN, len(self.hops) - 1)

    def _gil_log(self, key: int, state: int, a: int, b: int) -> None:
        if b > a:
            self.gil_log.append((key, state, a, b))

    def _gil_at(self, t: int, gen: int) -> None:
        self.at(t, _GIL, gen)

    def _gil_done(self, t: int, free: int, ev: int, arg: int) -> None:
        self.at(t + free, ev, arg)

    def _wait(self, a: _Actor, r: int, t: int, tid: int) -> None:
        """A wait: like the engine's token, a read of the var queued behind its pending writes."""
        self.pushed[r], self.pusher[r] = t, tid
        cnt = 0
        reads = self.rec.reads[r]
        if not reads:  # WaitForAll: until no op is pending
            if self.pending:
                self.all_waiters.append(r)
                cnt += 1
        else:
            v = reads[0]
            if v in self.writing or self.queue.get(v):
                self.queue.setdefault(v, deque()).append((r, False))
                cnt += 1
            else:
                self.reading[v] += 1
        ext = self.rec.ext[r]
        if ext > t:
            cnt += 1
            self.at(ext, _EXT, r)
        self.count[r] = cnt
        self.waiter[r] = a
        if cnt == 0:
            more: list[int] = []
            self._token_done(r, t, more, blocked=False)
            for o in self._settle(more, t):
                self._dispatch(o, t)
        elif a.fam >= 0:  # a blocked pool thread does not count: the pool may grow
            self.blocked += 1
            self._grow(t)

    def _token_done(self, r: int, t: int, granted: list[int], *, blocked: bool) -> None:
        """A wait got its var: the var is free again, and the waiting thread goes on (after it wakes)."""
        reads = self.rec.reads[r]
        if reads:
            v = reads[0]
            self.reading[v] -= 1
            if self.reading[v] == 0 and self.queue.get(v):
                self._release(v, granted, r)
        a = self.waiter.pop(r)
        if blocked:
            latency = self.l_wpy if a.fam >= 0 else self.l_wprog
            self.ready[r] = self.end[r] = t + latency
            self._hop(t, a.idx, latency, "all", _RESUME, a.idx)
        else:
            end = t + self.rec.quiet[r]
            self.ready[r] = self.end[r] = end
            self._next(a, end)

    # -------------------------------------------------------------- vars
    def _push(self, r: int, t: int, tid: int) -> None:
        """Register ``r`` on its vars, reads then writes, as the engine's push does."""
        self.pushed[r], self.pusher[r] = t, tid
        self.pending += 1
        cnt = 0
        writing, reading, queue = self.writing, self.reading, self.queue
        for v in self.rec.reads[r]:
            if v in writing or queue.get(v):
                queue.setdefault(v, deque()).append((r, False))
                cnt += 1
            else:
                reading[v] += 1
        for v in self.rec.writes[r]:
            if v in writing or reading.get(v) or queue.get(v):
                queue.setdefault(v, deque()).append((r, True))
                cnt += 1
            else:
                writing.add(v)
        ext = self.rec.ext[r]
        if ext > t:
            cnt += 1
            self.at(ext, _EXT, r)
        self.count[r] = cnt
        if cnt == 0:
            self.ready[r] = t
            self._dispatch(r, t)

    def _release(self, v: int, granted: list[int], by: int) -> None:
        """Grant ``v`` to the head of its queue: a run of reads, or one write (the engine's rule)."""
        q = self.queue.get(v)
        while q:
            o, is_write = q[0]
            if is_write:
                if self.reading.get(v, 0) == 0 and v not in self.writing:
                    q.popleft()
                    self.writing.add(v)
                    self._granted(o, v, by, granted)
                return
            q.popleft()
            self.reading[v] += 1
            self._granted(o, v, by, granted)

    def _granted(self, o: int, v: int, by: int, granted: list[int]) -> None:
        """``o`` got ``v``; with that its last dependency, ``by``'s completion is its enabling edge."""
        self.count[o] -= 1
        if self.count[o] == 0:
            self.by[o], self.by_var[o] = by, v
            granted.append(o)

    def _complete(self, r: int, t: int) -> list[int]:
        """``r`` is complete at ``t``: the ops (not waits) that made ready, in the engine's order."""
        self.end[r] = t
        granted: list[int] = []
        for v in self.rec.reads[r]:
            self.reading[v] -= 1
            if self.reading[v] == 0 and self.queue.get(v):
                self._release(v, granted, r)
        for v in self.rec.writes[r]:
            self.writing.discard(v)
            self._release(v, granted, r)
        self.pending -= 1
        if self.held and self.max_pending is not None and self.pending <= self.max_pending // 2:
            self._let_go(t)
        if self.pending == 0 and self.all_waiters:
            for w in self.all_waiters:
                self._granted(w, -1, r, granted)
            self.all_waiters = []
        return self._settle(granted, t)

    def _settle(self, granted: list[int], t: int) -> list[int]:
        """Of the rows whose dependencies just cleared, end the waits (which may clear more) and
        return the ops, ready now."""
        out: list[int] = []
        i = 0
        while i < len(granted):
            o = granted[i]
            i += 1
            if self.rec.kind[o] == _WAIT:
                self._token_done(o, t, granted, blocked=True)
            else:
                self.ready[o] = t
                out.append(o)
        return out

    # -------------------------------------------------------------- engine workers
    def _dispatch(self, r: int, t: int) -> None:
        """Into the FIFO; the put wakes one idle worker, which takes whatever heads the FIFO once it
        is up. Nothing is reserved for it (a queue's get is first come, first served): while it
        wakes, a busy worker finishing its op may take the op first, and then it sleeps again."""
        self.fifo.append(r)
        if self.idle:
            w = heapq.heappop(self.idle)
            self._hop(t, -1 - w, self.l_wake, "engine", _WAKE, w)

    def _wake(self, w: int, t: int) -> None:
        """Worker ``w`` is up: it runs the FIFO's head, or finds it taken and sleeps again."""
        if self.fifo:
            self._start(self.fifo.popleft(), w, t)
        else:
            heapq.heappush(self.idle, w)

    def _start(self, r: int, w: int, t: int) -> None:
        """``r`` runs on worker ``w`` from ``t`` (a custom op's engine op ends as it starts)."""
        self.start[r], self.worker[r] = t, w
        custom = self.rec.kind[r] == _CUSTOM and self.rec.family_of[r] >= 0
        if custom:
            self.at(t, _DONE, r)
        else:
            held = self.op_gil[r]
            self._work(t, -1 - w, held, self.dur[r] - held, _DONE, r)

    def _done(self, r: int, t: int) -> None:
        """``r`` ends on its worker, which then runs the first op that made ready, else the FIFO's head."""
        w = self.worker[r]
        k = self.rec.kind[r]
        nxt: list[int] = []
        if k == _CUSTOM and self.rec.family_of[r] >= 0:
            self._submit(self.rec.family_of[r], t)  # the async op hands its Python over and returns
        elif k == _DUMMY and self.rec.custom_of[r] >= 0:
            # Dummy_Wait completes its custom op first (what that releases goes to the FIFO), then itself.
            for o in self._complete(self.rec.custom_of[r], t):
                self._dispatch(o, t)
            nxt = self._complete(r, t)
        else:
            nxt = self._complete(r, t)
        if nxt:
            self._begin(nxt[0], w, t)
            for o in nxt[1:]:
                self._dispatch(o, t)
        elif self.fifo:
            self._begin(self.fifo.popleft(), w, t)
        else:
            heapq.heappush(self.idle, w)

    def _begin(self, r: int, w: int, t: int) -> None:
        """Worker ``w`` goes from its op to ``r``: the engine's Python between them, with the GIL kept."""
        self.worker[r] = w
        self._keep(t, -1 - w, self.l_next, _BEGIN, r)

    # -------------------------------------------------------------- custom-op pool
    # As in CustomPool: a submit wakes one sleeping thread, and a new one starts while more tasks
    # are queued than idle threads (sleeping, or woken and not yet holding a task) and fewer than
    # the pool's size are active (not blocked in a wait).
    def _submit(self, f: int, t: int) -> None:
        """A custom op's engine op hands its Python to the pool."""
        self.tasks.append(f)
        if self.idle_threads and len(self.tasks) > self.taking:
            self._wake_thread(heapq.heappop(self.idle_threads), t)
        self._grow(t)

    def _grow(self, t: int) -> None:
        """CustomPool._grow: a new thread while tasks outnumber idle threads and the pool has room."""
        idle = self.taking + len(self.idle_threads)
        if len(self.tasks) > idle and self.threads - self.blocked < self.custom_threads:
            self.threads += 1
            self._wake_thread(self.threads - 1, t)

    def _wake_thread(self, th: int, t: int) -> None:
        """Thread ``th`` is woken at ``t`` to look for a task; until it has one it counts as idle (as in CustomPool)."""
        self.taking += 1
        self._hop(t, CUSTOM_THREAD_KEY - th, self.l_cwake, "custom", _TAKE, th)

    def _take(self, th: int, t: int) -> None:
        """Thread ``th`` is up: it runs the Python at the head of the queue, or sleeps again."""
        self.taking -= 1
        if not self.tasks:
            heapq.heappush(self.idle_threads, th)
            return
        f = self.tasks.popleft()
        fam = self.rec.families[f]
        self.py_thread[f], self.py_start[f] = th, t
        a = self._actor(fam.items, fam.gaps, fam.tail, th, f)
        self._gap(a, 0, fam.gaps[0] if fam.items else fam.tail, t)
