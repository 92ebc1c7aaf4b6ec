"""What if an op were faster, or a pool bigger? A recorded profile replayed by a model of the engine.

A profile says where the time went; the question a user asks next is what a change would buy:
"my custom op's Python is 2x faster", "two custom-op threads instead of one", "four engine
workers". :func:`what_if` answers it without touching the program: it replays the profile's
engine side (:mod:`opprof.trace.ops`: every push, wait and var access) with a discrete-event model of opprof's
threaded engine, once as recorded (the *baseline*, which says how faithful the model is for this
trace) and once with the change, and gives the predicted end-to-end time and the predicted run as
a trace.

The model (every choice mirrors what :mod:`opprof.engine` does, so a replay without change lands
close to the recording):

* **Programs.** Each thread that pushes outside a custom op's Python (usually ``MainThread``)
  replays its pushes and waits in their recorded order; the time between two of them is the
  program's own Python and stays as recorded, less the time the engine held a push back
  (``Backpressure`` spans), which the model re-derives as the engine does: a program's push (or
  wait for a var) while ``max_pending`` ops are pending (the recorded one; 128 in a file made
  before it was recorded) waits until half as many are, then wakes as a program woken by an op's
  end does. 400 ops that sleep 0.5 ms, recorded on one worker and held back five times, replayed
  on two against a real run on two (3 recordings): +96 to +120 % with the held time kept as the
  program's own, -4 to -13 % re-derived (with each op's GIL read by its name, below).
* **Dependencies** are re-derived, not copied: every push registers its op on the vars it read and
  wrote in the model's push order, with the engine's version-queue rules (reads of a var overlap,
  a write waits for earlier reads and writes). A change that reorders completions therefore
  changes which op enables which. Only a dependency on an op pushed before the recording began is
  taken from the recording (its ready time).
* **Engine workers.** ``engine_threads`` workers and one FIFO of ready ops. A worker that completes
  an op runs the first op that completion made ready itself (the engine's chain rule), the others
  go to the FIFO, and each put wakes an idle worker. Nothing is reserved for the woken worker (a
  queue's get is first come, first served): when waking takes long (the GIL held elsewhere), a
  busy worker finishing meanwhile takes the op. An op lasts its recorded span divided by its
  factor. A custom op's own engine op only hands its Python to the custom pool: it holds its
  worker for no time.
* **Custom ops.** Their Python goes to a pool of ``custom_threads`` threads, as in
  :class:`~opprof.engine.threaded.CustomPool`: a submit wakes an idle thread, and starts a new one
  while more tasks are queued than idle threads (a woken or new thread counts as idle until it has
  taken its task) and fewer than ``custom_threads`` are active; a thread blocked in a wait is not
  active (the pool grows past it). The Python's own time (its recorded span
  minus its waits) is divided by its factor; its pushes and waits keep their places in it. After
  it returns, the thread pushes ``Dummy_Wait`` (after the recorded delay), then, with no task
  waiting, holds the GIL for the engine's own Python back to the pool's queue (the median from a
  ``Dummy_Wait``'s push to its thread's park, measured: 2 µs a call of small custom ops, 11 µs on
  the demo's; the demo replayed -6.3 % without it, -5.1 % with it, 24 recordings); ``Dummy_Wait``
  runs on a worker after the sub-ops, and its end completes the custom op and releases its outputs.
* **Waits** block until the var has no pending write pushed before them (``WaitForAll``: until no
  op is pending), then the waiting thread wakes.
* **Hand-offs** (a ready op to an idle worker, a busy worker to its next op, a custom op's start
  to its Python, a finished op to the thread waiting for it) are calibrated from the trace itself:
  the mean of the recorded gaps of each kind where nothing queued (less their waits for the GIL),
  so a slower machine's latencies come with its traces. Defaults apply when a trace has no sample
  of a kind. Where the GIL was sampled, a hand-off holds the GIL as the engine does: a woken
  thread is first run by the OS, then takes the GIL back and runs the engine's Python before its
  work (the part measured from the timed hand-offs, 1.5-3.5 µs for a worker and 9-15 µs for a
  custom-op thread here), and a worker keeps the GIL from one op to its next.
* **The GIL** (:mod:`.gil`): one lock, handed first come, first served, and taken from a holder
  once another thread has waited one switch interval (the recorded ``sys.getswitchinterval()``,
  else 5 ms). Each op's run and each stretch of Python holds it for the share of its time its
  thread held the GIL in the recorded thread states (a custom op's Python: its CPU time); its time
  waiting for the GIL is left to the model. An op's run too short to hold two samples takes what
  the sampler saw at the instants that fell inside the runs of its name (at least five: an op that
  sleeps or does I/O is seen blocked there, one that runs Python holding the GIL). Without thread
  states, a custom op's Python holds it while on a CPU and ops and programs are taken to release
  it. ``switch_interval=``, ``releases_gil={"T": True}`` and ``gil=False`` (a free-threaded
  build) change it.
* **Threads outside the engine** (a user's data loader, a library's thread: they push nothing
  and run no span, and are no pool's) that held the GIL keep their recorded stretches with it, in
  order, each asking when it asked in the recording (or its own recorded time after the previous
  one ended, if later): they compete for the GIL, nothing in the engine feeds them. Without them a
  recording of four small custom ops beside a spinning loader replayed in 1 ms of its 21 ms
  (12 recordings: median -92 %; with them -15 %, 6 within 20 %).
* **Handing the GIL over** to a waiting thread costs its wake-up (measured in the trace where a
  pool thread parks while another waits for the GIL; at once where it shows fewer than five such
  handovers), and while that thread wakes the GIL is free: a thread that asks meanwhile takes
  it, as in CPython, and the woken one waits again. A thread that had waited 20 µs or more is
  asleep and has its own, measured on such handovers alike (0.2 µs against 4-20 µs on the demo,
  whose program, woken for each step's loss, waited 2-3 ms a run for the GIL as the pool's threads
  passed it among themselves: one transfer for all replayed 0.6-1 ms of it).
* **Not modelled:** the engine's own Python beyond the hand-offs (pushing, completing), where
  inside a stretch its GIL part fell, how much of a piece shorter than two GIL samples held the
  GIL where its name's runs hold fewer than five sampled instants (it is taken to hold it all
  along, its waits for it included, except where pieces on other
  threads overlap it: one thread holds the GIL at a time, so overlapping pieces share it, first a
  Python whose CPU time was read, then an op's run, then a program's Python between its pushes;
  a 2 ms trace of ops that run NumPy without the GIL replays within 10 % in 7 of 10), contention
  between threads for cores and memory (durations are replayed as recorded, with whatever slowdown
  the work beside them caused), the start of a new pool thread, and synchronisation between
  program threads outside the engine. A trace's :attr:`WhatIf.notes` say which of these matter
  for it (an op slower beside other work than alone, workers waiting long to wake, several pushing
  threads) and how the GIL was read.
* **Cores** bound the answer, not the schedule: the recording's CPU work (its ops' runs on a CPU
  by the sampled states, its custom ops' Python by their CPU clocks, its native threads' CPU, a
  BLAS pool's) divided by its factors and spread over the recording's cores (or as many as it
  used, where its counts say more) is the least a changed run can take; where that exceeds the
  model's schedule, it is the prediction, and a note says so. 60 dots of 300x300 recorded on one
  worker, OpenBLAS on both cores, were predicted 2x faster on two workers by the schedule alone
  (-41 to -52 % against the real run, which gained nothing); -4 to -23 % with the bound. Without
  thread states or the cores' count (the pure path, an older file) there is no bound; a note says
  where the native threads took a quarter of a core or more.

The naive engine runs everything inline on the pushing thread, so there is nothing to schedule:
its replay is a time warp of each thread, where every span's own time (without the spans nested
in it) is divided by its factor.

One module per phase: :mod:`.change` (the change checked, and the factor of every span), :mod:`.gil` (the GIL's part
in every piece, and the lock),
:mod:`.prepare` (the recorded graph read into the replay's inputs, with the hand-offs calibrated
from it), :mod:`.model` (the discrete-event model of the engine's workers and custom-op pool),
:mod:`.predict` (the model's run as a trace), :mod:`.warp` (the naive engine's time warp) and
:mod:`.answer` (:func:`what_if` and :class:`WhatIf`, with the notes on what a prediction assumes).
"""

from .answer import WhatIf, what_if

__all__ = ["WhatIf", "what_if"]
