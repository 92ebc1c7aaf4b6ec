"""Writes the demo notebooks (without outputs) from the cells below: `python notebooks/make_notebooks.py`.

Keeping the source here keeps diffs readable; the .ipynb files are what users open (and Binder runs).
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).parent

CUSTOM_OP = '''import numpy as np

import opprof as mx


class MyAddOne(mx.operator.CustomOp):
    """tanh(x) * 2 in NumPy on the custom-op thread, then (y + 1) * 3 as engine sub-operators."""

    def forward(self, is_train, req, in_data, out_data, aux):
        y = np.tanh(in_data[0].asnumpy()) * 2   # pure Python / NumPy
        z = (mx.nd.array(y) + 1) * 3            # sub-operators, pushed to the engine
        self.assign(out_data[0], req[0], z)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], out_grad[0] * 3)


@mx.operator.register("MyAddOne")
class MyAddOneProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return MyAddOne()'''

quickstart = [
    new_markdown_cell(
        "# opprof quickstart\n\n"
        "opprof shows where the time goes inside **custom operators** of an asynchronous engine. "
        "Its API is MXNet's: `import opprof as mx` runs MXNet custom-operator code unchanged.\n\n"
        "Install with `pip install -e .` from the repository (or open this notebook on Binder)."
    ),
    new_code_cell("%load_ext opprof"),
    new_markdown_cell(
        "A custom operator: its `forward()` runs on a custom-op worker thread. Part of it is plain NumPy, "
        "part of it pushes NDArray **sub-operators** to the engine, which run asynchronously on engine threads."
    ),
    new_code_cell(CUSTOM_OP),
    new_markdown_cell(
        "`%%opprof` runs the cell under the engine and the profiler, waits for the asynchronous work the cell "
        "started, and shows the timeline: one lane per thread, and a **custom ops** lane where each invocation's "
        "parent span holds its Python, its sub-operators and its `Dummy_Wait`."
    ),
    new_code_cell(
        "%%opprof --stats 10 --memory\n"
        "a = mx.nd.ones((100, 100))\n"
        "a.attach_grad()\n"
        "for i in range(3):\n"
        "    with mx.autograd.record():\n"
        "        b = mx.nd.Custom(a, op_type='MyAddOne')\n"
        "        c = b * 2\n"
        "    c.backward()\n"
        "float(a.grad.asnumpy()[0, 0])"
    ),
    new_markdown_cell(
        "**Reading it.** Hover a span for its name, thread, start and duration; hover a custom-op parent for its "
        "split into *python* (its Python ran), *sub-ops* (one of its sub-operators ran) and *waiting* (neither: "
        "queued behind other work). Click any span of an invocation to highlight its whole family.\n\n"
        "The result stays in `_opprof` (choose another name with `--var`):"
    ),
    new_code_cell(
        "for row in _opprof.trace.custom_ops():\n"
        "    kind = 'backward' if row.backward else 'forward'\n"
        "    print(f'{kind:8s} #{row.invocation}: wall {row.wall_ns / 1e3:7.1f} us = python {row.python_ns / 1e3:6.1f}'\n"
        "          f' + sub-ops {row.subops_ns / 1e3:6.1f} + waiting {row.waiting_ns / 1e3:6.1f}')"
    ),
    new_code_cell("_opprof.trace.validate()  # [] : properly nested, every family complete"),
    new_markdown_cell(
        "## Why it waits\n\n"
        "*Waiting* is not one thing. The engine recorded, for every op, when it was pushed, when its last "
        "dependency cleared and which op cleared it, so each waiting nanosecond has a cause: `custom_pool` "
        "(queued for a custom-op thread), `subop_queue` (a sub-op ready, no engine worker free yet), "
        "`dependency` (a sub-op waiting for another op's result; the blocker is named) and `completion` "
        "(after the last sub-op, until `Dummy_Wait` ran). Where the GIL's evidence was recorded (the "
        "compiled part), the two queues split further: `..._gil` (a thread of the pool waited for the GIL; "
        "its holder is named), `..._wake` (a thread was being woken for the op) and the rest, every thread "
        "busy. The **critical path** is the chain of work and waiting that set the cell's end-to-end time "
        "(its pieces say the same: `gil`, `wake`, `queue`...); the timeline's *critical path* toggle outlines it."
    ),
    new_code_cell("from opprof.trace.text import why_text\n\nprint(why_text(_opprof.trace))"),
    new_code_cell(
        "row = _opprof.trace.custom_ops()[0]\n"
        "print(row.waiting_by_cause, 'sum', sum(row.waiting_by_cause.values()), '== waiting', row.waiting_ns)\n"
        "print('python on a CPU', row.python_cpu_ns, 'ns, off it', row.python_off_cpu_ns, 'ns')"
    ),
    new_markdown_cell(
        "**What if** the Python were twice as fast? The recorded dependency graph is replayed by a model of the "
        "engine (`%%opprof --why` prints the words above for any cell; `opprof why trace.opprof --what-if "
        "MyAddOne::pure_python=2` does it on the command line):"
    ),
    new_code_cell("print(_opprof.trace.what_if({'MyAddOne::pure_python': 2.0}))"),
    new_markdown_cell(
        "## Memory\n\n"
        "With `--memory` the profile also records every NDArray's storage, exact to the byte: the memory lane "
        "under the spans shows live bytes over time, and each invocation knows what its sub-operators allocated "
        "and the peak while it ran (its hover in the timeline says so too):"
    ),
    new_code_cell(
        "for row in _opprof.trace.custom_ops()[:2]:\n"
        "    print(f'{row.name} #{row.invocation}: its sub-ops allocated {row.allocated_bytes:,} bytes, '\n"
        "          f'peak {row.peak_bytes:,} bytes while it ran')"
    ),
    new_markdown_cell(
        "**A leak caught.** Arrays made in a profiled cell and still alive when it ends are listed by the op that "
        "made them. This loop keeps every step's per-sample losses (a `mean` output) in a list, as a training "
        "loop that logs `loss` instead of `loss.mean().asscalar()` does:"
    ),
    new_code_cell(
        "%%opprof --memory --no-widget\n"
        "history = []\n"
        "for step in range(10):\n"
        "    loss = (mx.nd.ones((100, 100)) * step).mean(axis=1)\n"
        "    history.append(loss)  # keeps each loss NDArray alive"
    ),
    new_markdown_cell(
        "Save the trace: `.opprof` keeps everything, the engine's edges too; Chrome JSON is for Perfetto / "
        "chrome://tracing. Or the timeline as a standalone HTML file:"
    ),
    new_code_cell(
        "import os\nimport tempfile\n\n"
        "out = tempfile.mkdtemp()\n"
        "_opprof.trace.save(os.path.join(out, 'trace.opprof'))\n"
        "_opprof.trace.save(os.path.join(out, 'trace.json'))\n"
        "sorted(os.listdir(out))"
    ),
]

anatomy = [
    new_markdown_cell(
        "# Anatomy of a custom operator\n\n"
        "The profiler that shipped with MXNet's custom operators had three problems "
        "(each is shown below against what opprof records instead):\n\n"
        "1. the custom-op event ended only when its completion op `Dummy_Wait` *started*, so nobody could tell "
        "Python from sub-operators from waiting;\n"
        "2. it did not contain `Dummy_Wait`, so begin/end pairs interleaved and chrome://tracing showed broken events;\n"
        "3. every custom op was called `Custom`.\n\n"
        "This notebook shows each one on a real run and what opprof shows instead."
    ),
    new_code_cell("%load_ext opprof"),
    new_code_cell(
        "import time\n"
        "import numpy as np\n"
        "import opprof as mx\n\n\n"
        "class SlowPython(mx.operator.CustomOp):\n"
        '    """Most of its time is its own Python."""\n'
        "    def forward(self, is_train, req, in_data, out_data, aux):\n"
        "        x = in_data[0].asnumpy()\n"
        "        for _ in range(20):\n"
        "            x = np.tanh(x) + 0.1\n"
        "        time.sleep(0.002)\n"
        "        self.assign(out_data[0], req[0], mx.nd.array(x))\n\n\n"
        "class SlowSubops(mx.operator.CustomOp):\n"
        '    """Most of its time is in the sub-operators it pushes."""\n'
        "    def forward(self, is_train, req, in_data, out_data, aux):\n"
        "        x = in_data[0]\n"
        "        for _ in range(6):\n"
        "            x = mx.nd.dot(x, x.T) / 300\n"
        "        self.assign(out_data[0], req[0], x)\n\n\n"
        "class Cheap(mx.operator.CustomOp):\n"
        '    """Does almost nothing: its time goes in waiting for a busy engine."""\n'
        "    def forward(self, is_train, req, in_data, out_data, aux):\n"
        "        self.assign(out_data[0], req[0], in_data[0] + 1)\n\n\n"
        "for name, cls in [('SlowPython', SlowPython), ('SlowSubops', SlowSubops), ('Cheap', Cheap)]:\n"
        "    mx.operator.register(name)(type(name + 'Prop', (mx.operator.CustomOpProp,), {\n"
        "        'create_operator': lambda self, ctx, shapes, dtypes, cls=cls: cls()}))"
    ),
    new_markdown_cell(
        "Run all three, one after the other. `Cheap` is pushed while the engine's two workers are busy with "
        "large matrix products, so its single sub-operator queues behind them."
    ),
    new_code_cell(
        "%%opprof --threads 2 --var run\n"
        "x = mx.nd.random.uniform(shape=(300, 300))\n"
        "a = mx.nd.Custom(x, op_type='SlowPython')\n"
        "a.wait_to_read()\n"
        "b = mx.nd.Custom(x, op_type='SlowSubops')\n"
        "b.wait_to_read()\n"
        "busy = [mx.nd.dot(x, x) for _ in range(8)]\n"
        "c = mx.nd.Custom(x, op_type='Cheap')"
    ),
    new_markdown_cell(
        "## Problem 1: how long, and doing what?\n\n"
        "The old event ran from the start of the custom op to the *start* of its `Dummy_Wait` (in MXNet that "
        "start also waited for variable deletions, so the event was longer still), and said nothing about what "
        "happened inside it. opprof's parent span ends when `Dummy_Wait` ends, and splits into python / sub-ops / "
        "waiting, which add up to it:"
    ),
    new_code_cell(
        "families = run.trace.families()\n"
        "for row in run.trace.custom_ops():\n"
        "    dummy = next(s for s in families[row.invocation] if s.role == 'dummy_wait')\n"
        "    old = (dummy.start - row.start_ns) / 1e3\n"
        "    print(f'{row.op_type:10s} old event {old:8.1f} us | parent {row.wall_ns / 1e3:8.1f} us = '\n"
        "          f'python {100 * row.python_ns / row.wall_ns:4.0f}% + sub-ops {100 * row.subops_ns / row.wall_ns:4.0f}% '\n"
        "          f'+ waiting {100 * row.waiting_ns / row.wall_ns:4.0f}%')"
    ),
    new_markdown_cell(
        "Each op is recognisable from its split: `SlowPython` is mostly *python*, `SlowSubops` mostly *sub-ops*, "
        "and `Cheap` mostly *waiting* — its few microseconds of work sat behind the matrix products."
    ),
    new_markdown_cell(
        "## Problem 2: properly nested events\n\n"
        "Every span nests on its thread, and each `Dummy_Wait` lies inside its parent; the exported Chrome trace "
        "has no begin/end pairs at all (`X` slices, plus one async track per invocation)."
    ),
    new_code_cell(
        "print(run.trace.validate())\nevents = run.trace.to_chrome()['traceEvents']\nprint(sorted({e['ph'] for e in events}))"
    ),
    new_markdown_cell("## Problem 3: names\n\nEvery span says which op it belongs to, and `args` link it to its invocation:"),
    new_code_cell(
        "for s in run.trace.spans:\n"
        "    if s.invocation == 1:\n"
        "        print(f'{s.name:28s} role={s.role:10s} thread={run.trace.thread_name(s.tid)}')"
    ),
]

others = [
    new_markdown_cell(
        "# Traces from other tools\n\n"
        "opprof's timeline, stats and custom-op split read only its trace model, so they work on traces that "
        "other profilers wrote too. `data/` holds small traces made by the real tools (the scripts that made "
        "them are in the repository's `tests/data/`)."
    ),
    new_code_cell("%load_ext opprof\nimport opprof as mx"),
    new_markdown_cell(
        "## MXNet 1.9.1\n\n"
        "The profiler that shipped with MXNet: B/E pairs (some interleaving), 64-bit thread ids, no thread names, "
        "no parent span per custom-op call, and a completion op named `MyAddOne::`. opprof maps the threads to "
        "small named lanes and recovers custom-op families from the `Type::op` names as far as the data allows:"
    ),
    new_code_cell("%opprof_view data/mxnet-1.9.1-custom-op.json"),
    new_code_cell(
        "mxt = mx.trace.load('data/mxnet-1.9.1-custom-op.json')\n"
        "recovery = mxt.metadata['custom_op_recovery']\n"
        "print('invocations recovered:', recovery['recovered'])\n"
        "for reason in recovery['unrecoverable']:\n"
        "    print('-', reason)"
    ),
    new_markdown_cell(
        "`validate()` says where the MXNet data falls short of opprof's invariants (for example, no completion "
        "op closes an invocation):"
    ),
    new_code_cell("problems = mxt.validate()\nprint(len(problems), 'problems, e.g.:')\nprint(*problems[:3], sep='\\n')"),
    new_markdown_cell("## PyTorch 2.13 (`torch.profiler`, a custom autograd Function)"),
    new_code_cell("%opprof_view data/torch-2.13-custom-function.json"),
    new_code_cell(
        "tt = mx.trace.load('data/torch-2.13-custom-function.json')\n"
        "for row in tt.stats()[:8]:\n"
        "    print(f'{row.name[:50]:50s} {row.count:4d} x {row.total_ns / 1e3:9.1f} us')"
    ),
    new_markdown_cell("## VizTracer 1.1 (several threads)"),
    new_code_cell("%opprof_view data/viztracer-1.1-threads.json"),
]


dask_cluster = [
    new_markdown_cell(
        "# Profiling work on a Dask cluster\n\n"
        "When the work outgrows one process it often moves onto **Dask distributed**: worker processes that run "
        "tasks on thread pools. `%%opprof --dask CLIENT` (or `with opprof.dask.profile(client) as prof:`) follows "
        "it there: every worker process becomes a group of lanes in the same timeline, each Dask task a span on the "
        "thread that ran it, the opprof engine and custom ops inside the tasks as usual, and the task graph's "
        "dependencies as arrows from worker to worker. Each worker's clock is mapped onto this kernel's.\n\n"
        "Needs `pip install opprof[dask]`. Here the cluster is a `LocalCluster` of two worker processes on this machine."
    ),
    new_code_cell("%load_ext opprof"),
    new_code_cell(
        "from distributed import Client, LocalCluster\n\n"
        "cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)\n"
        "client = Client(cluster)\n"
        "client"
    ),
    new_markdown_cell(
        "A small pipeline: load a shard, fit the demo model on it (two custom ops, `ScaledTanh` and "
        "`RowSquaredError`, forward and backward), then combine the losses. The workers import the custom ops "
        "from `opprof.demo`: a custom op used on a cluster must live in a module the workers can import, "
        "as with any Dask task."
    ),
    new_code_cell(
        "import numpy as np\n\n\n"
        "def load(shard):\n"
        "    rng = np.random.default_rng(shard)\n"
        "    return int(rng.integers(1_000_000))  # a seed standing for the shard's data\n\n\n"
        "def fit(seed):\n"
        "    import opprof as mx\n"
        "    from opprof.demo import train  # registers the demo's custom ops in this worker\n\n"
        "    loss = train(steps=3, seed=seed)[-1]\n"
        "    mx.nd.waitall()  # the last update is still running on the engine: end the task with it\n"
        "    return loss\n\n\n"
        "def combine(*losses):\n"
        "    return float(np.mean(losses))"
    ),
    new_markdown_cell(
        "`%%opprof --dask client` profiles the cell here *and* on every worker. The timeline groups lanes by "
        "process: the client, then each worker with its Dask thread, its engine threads and its custom-op threads. "
        "The arrows are the task graph's edges: each `fit` waits for its `load`, `combine` for every `fit`."
    ),
    new_code_cell(
        "%%opprof --dask client --no-live\n"
        "shards = client.map(load, range(6))\n"
        "losses = client.map(fit, shards)\n"
        "client.submit(combine, *losses).result()"
    ),
    new_markdown_cell(
        "What the profile knows about the cluster: each worker's process, how many tasks it sent, and its clock "
        "offset from this kernel's with the bound on the residual skew (half the shortest clock exchange)."
    ),
    new_code_cell(
        "for w in _opprof.trace.metadata['dask']['workers']:\n"
        "    print(f\"worker {w['name']}: {w['tasks']} tasks, clock offset {w['clock_offset_ns'] / 1e3:+.0f} µs \"\n"
        "          f\"(skew at most {w['clock_skew_bound_ns'] / 1e3:.0f} µs)\")"
    ),
    new_markdown_cell(
        "The same from Python, for scripts: `opprof.dask.profile(client)` gives `prof.trace`, the merged trace, "
        "with every analysis: the custom-op split across workers, why they wait, the critical path through the "
        "task graph (approximate here: it follows threads and the graph's arrows, as the note says), "
        "`trace.save(...)` and `opprof view`."
    ),
    new_code_cell(
        "import opprof\n"
        "from opprof.trace.text import split_table, why_text\n\n"
        "with opprof.dask.profile(client) as prof:\n"
        "    client.submit(combine, *client.map(fit, client.map(load, range(100, 104)))).result()\n\n"
        "print(split_table(prof.trace))\n"
        "print(why_text(prof.trace))"
    ),
    new_code_cell("client.close()\ncluster.close()"),
]


def write(name: str, cells: list) -> None:
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, HERE / name)


if __name__ == "__main__":
    write("01-quickstart.ipynb", quickstart)
    write("02-anatomy-of-a-custom-op.ipynb", anatomy)
    write("03-traces-from-other-tools.ipynb", others)
    write("04-dask-cluster.ipynb", dask_cluster)
