"""What users would pick instead, measured beside opprof: Dask's local scheduler and MXNet 1.9.1.

Run: ``python benchmarks/peers.py [--mxnet]`` (or ``make bench-peers`` for the whole suite).

* Dask (the ``bench`` extra: ``pip install -e '.[bench]'``): the threaded scheduler's cost per
  trivial task without and with ``dask.diagnostics.Profiler``, and the Bokeh ``visualize()`` of
  that profile at 100k tasks (time, HTML size), beside opprof's timeline at 100k spans. Skipped
  with a note when dask is not installed.
* MXNet 1.9.1, only with ``--mxnet`` (``--peers`` in the suite): per small op (``a = a + 1``) and
  per trivial custom-op call, with its profiler off and on. MXNet needs ``numpy<1.24``, so it runs
  in a venv of its own, made on first use (``$OPPROF_MXNET_VENV``, default
  ``~/.cache/opprof/mxnet-1.9.1``; ``pip install mxnet==1.9.1 'numpy<1.24'``), as a subprocess
  running :data:`MXNET_SCRIPT`, which prints JSON. A failed install is reported as a note.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    from benchmarks.common import Row, interleaved, print_rows, progress
except ImportError:  # run as a script: python benchmarks/peers.py
    from common import Row, interleaved, print_rows, progress  # type: ignore[no-redef]

SECTION = "Peers"
MXNET_VENV = Path(os.environ.get("OPPROF_MXNET_VENV", Path.home() / ".cache" / "opprof" / "mxnet-1.9.1"))
MXNET_REQUIREMENTS = ["mxnet==1.9.1", "numpy<1.24"]


def _inc(i: int) -> int:
    return i + 1


def dask_rows(n: int, repeats: int, ours: dict[str, float]) -> list[Row]:
    try:
        import dask
        from dask.diagnostics import Profiler
        from dask.threaded import get
    except ImportError:
        return [Row(SECTION, "Dask: skipped, not installed (pip install -e '.[bench]')", None)]
    progress(f"peers: Dask threaded scheduler, {n:,} tasks, without and with its Profiler, {repeats} rounds")
    dsk = {("inc", i): (_inc, i) for i in range(n)}
    keys = list(dsk)
    last: list[Profiler] = []

    def plain() -> float:
        t = time.perf_counter()
        get(dsk, keys)
        return time.perf_counter() - t

    def profiled() -> float:
        t = time.perf_counter()
        with Profiler() as prof:
            get(dsk, keys)
        dt = time.perf_counter() - t
        last[:] = [prof]
        return dt

    t = interleaved({"off": plain, "on": profiled}, repeats)
    off, on = t["off"] / n * 1e6, t["on"] / n * 1e6
    version = f"Dask {dask.__version__}"
    ratio = ""
    if "threaded_10" in ours:
        ratio = f"{off / ours['threaded_10']:.1f}x opprof's threaded op (10x10)"
    out = [
        Row(SECTION, f"{version} threaded scheduler, trivial task", off, "µs/task", ratio),
        Row(SECTION, f"{version} same, with dask.diagnostics.Profiler", on, "µs/task", f"profiler on/off {on / off:.2f}x"),
    ]

    progress(f"peers: Dask's Bokeh visualize() of {n:,} tasks, {repeats} rounds")
    from bokeh.io import output_file, reset_output

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "dask-profile.html")

        def visualize() -> float:
            t = time.perf_counter()
            last[0].visualize(filename=path, show=False, save=True)
            dt = time.perf_counter() - t
            reset_output()  # visualize() leaves bokeh's output_file state set for the process
            return dt

        output_file(path)  # warm bokeh's import and resources up outside the timing
        reset_output()
        secs = interleaved({"v": visualize}, repeats)["v"]
        mb = os.path.getsize(path) / 1e6
    ratio = ""
    if f"timeline_s_{n}" in ours:
        ratio = (
            f"opprof timeline at {n // 1000}k spans: {ours[f'timeline_s_{n}']:.2f} s, {ours[f'timeline_mb_{n}']:.1f} MB "
            f"(Dask {secs / ours[f'timeline_s_{n}']:.1f}x the time, {mb / ours[f'timeline_mb_{n}']:.1f}x the size)"
        )
    out.append(Row(SECTION, f"{version} Profiler.visualize() (Bokeh), {n:,} tasks: time", secs, "s", ratio))
    out.append(
        Row(
            SECTION,
            f"{version} Profiler.visualize() (Bokeh), {n:,} tasks: HTML size",
            mb,
            "MB",
            "BokehJS from a CDN (opprof's file has it inline), no level of detail",
        )
    )
    return out


# Runs inside the MXNet venv: python - OPS CALLS REPEATS; prints one JSON object (µs per op/call).
MXNET_SCRIPT = r"""
import json, os, statistics, sys, tempfile, time
import numpy as np
import mxnet as mx

ops, calls, repeats = (int(a) for a in sys.argv[1:4])

class AddOne(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0] + 1)
    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], out_grad[0])

@mx.operator.register("BenchAddOne")
class AddOneProp(mx.operator.CustomOpProp):
    def __init__(self):
        super().__init__(need_top_grad=True)
    def create_operator(self, ctx, shapes, dtypes):
        return AddOne()

tmp = tempfile.mkdtemp()
mx.profiler.set_config(profile_all=True, aggregate_stats=False, filename=os.path.join(tmp, "profile.json"))

def numpy_chain(n):
    x = np.ones((n, n), np.float32)
    t = time.perf_counter()
    for _ in range(ops):
        x = x + 1
    return (time.perf_counter() - t) / ops

def chain(n):
    a = mx.nd.ones((n, n)); mx.nd.waitall()
    t = time.perf_counter()
    for _ in range(ops):
        a = a + 1
    mx.nd.waitall()
    dt = time.perf_counter() - t
    assert a.asnumpy()[0, 0] == ops + 1
    return dt / ops

def custom_fwd():
    a = mx.nd.ones((10, 10)); mx.nd.waitall()
    t = time.perf_counter()
    for _ in range(calls):
        a = mx.nd.Custom(a, op_type="BenchAddOne")
    mx.nd.waitall()
    dt = time.perf_counter() - t
    assert a.asnumpy()[0, 0] == calls + 1
    return dt / calls

def custom_fwdbwd():
    x = mx.nd.ones((10, 10)); x.attach_grad(); mx.nd.waitall()
    t = time.perf_counter()
    for _ in range(calls):
        with mx.autograd.record():
            y = mx.nd.Custom(x, op_type="BenchAddOne")
        y.backward()
    mx.nd.waitall()
    dt = time.perf_counter() - t
    assert x.grad.asnumpy()[0, 0] == 1
    return dt / calls

def profiled(fn):
    def run():
        mx.nd.waitall()
        mx.profiler.set_state("run")
        dt = fn()
        mx.profiler.set_state("stop")
        mx.profiler.dump(finished=False)  # write and drop the events, outside the timing
        return dt
    return run

cases = {
    "numpy_10": lambda: numpy_chain(10), "numpy_100": lambda: numpy_chain(100),
    "op_10": lambda: chain(10), "op_100": lambda: chain(100),
    "custom_fwd": custom_fwd, "custom_fwdbwd": custom_fwdbwd,
}
cases.update({k + "_prof": profiled(fn) for k, fn in list(cases.items()) if not k.startswith("numpy")})
runs = {k: [] for k in cases}
for _ in range(repeats):
    for k, fn in cases.items():
        runs[k].append(fn())
out = {k: statistics.median(v) * 1e6 for k, v in runs.items()}
out["versions"] = f"MXNet {mx.__version__}, NumPy {np.__version__}"
print(json.dumps(out))
"""


def mxnet_python() -> tuple[Path | None, str]:
    """The MXNet venv's python, made on first use; or None and why not."""
    python = MXNET_VENV / "bin" / "python"
    if python.exists() and subprocess.run([python, "-c", "import mxnet"], capture_output=True).returncode == 0:
        return python, ""
    progress(f"peers: installing {' '.join(MXNET_REQUIREMENTS)} into {MXNET_VENV} (takes a minute or two)")
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(MXNET_VENV)],
        [str(python), "-m", "pip", "install", "--quiet", *MXNET_REQUIREMENTS],
    ]
    for cmd in steps:
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            lines = [line for line in (r.stderr or r.stdout).splitlines() if line.strip() and "is ignored" not in line]
            return None, f"`{' '.join(cmd[-3:])}` failed: {lines[-1] if lines else f'exit code {r.returncode}'}"
    return python, ""


def run_mxnet(quick: bool, repeats: int) -> tuple[dict[str, float] | None, str]:
    """MXNet's figures (µs per op / call, keyed like :data:`MXNET_SCRIPT`'s output), or None and why."""
    python, why = mxnet_python()
    if python is None:
        return None, why
    ops, calls = (2_000, 100) if quick else (20_000, 1_000)
    progress(f"peers: MXNet 1.9.1 in {MXNET_VENV}: {ops} ops and {calls} custom-op calls, profiler off/on, {repeats} rounds")
    r = subprocess.run(
        [str(python), "-", str(ops), str(calls), str(repeats)], input=MXNET_SCRIPT, capture_output=True, text=True, timeout=1800
    )
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or [f"exit code {r.returncode}"])[-1]
        return None, f"MXNet benchmark failed: {tail}"
    return json.loads(r.stdout.strip().splitlines()[-1]), ""


def mxnet_rows(mxnet: dict[str, float] | None, why: str, ours: dict[str, float]) -> list[Row]:
    if mxnet is None:
        return [Row(SECTION, f"MXNet 1.9.1: skipped, {why}", None)]
    version = str(mxnet["versions"]).split(",")[0]
    out = []
    for key, label, unit, opprof_key in (
        ("op_10", "`a = a + 1`, 10x10", "µs/op", "threaded_10"),
        ("op_100", "`a = a + 1`, 100x100", "µs/op", "threaded_100"),
        ("custom_fwd", "trivial custom op, forward", "µs/call", "custom_threaded_fwd"),
        ("custom_fwdbwd", "trivial custom op, forward + backward", "µs/call", "custom_threaded_fwdbwd"),
    ):
        ratio = f"profiler on/off {mxnet[key + '_prof'] / mxnet[key]:.2f}x ({mxnet[key + '_prof']:,.1f} {unit} on)"
        if key.startswith("op_"):
            ratio += f"; {mxnet[key] / mxnet['numpy_' + key[3:]]:.1f}x its NumPy 1.23"
        if opprof_key in ours:
            ratio += f"; {mxnet[key] / ours[opprof_key]:.1f}x opprof threaded"
        out.append(Row(SECTION, f"{version} {label}", mxnet[key], unit, ratio))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mxnet", action="store_true", help="also MXNet 1.9.1 (installs its venv on first use)")
    ap.add_argument("--quick", action="store_true", help="MXNet with fewer ops and calls")
    args = ap.parse_args()
    rows = dask_rows(args.tasks, args.repeats, {})
    if args.mxnet:
        rows += mxnet_rows(*run_mxnet(args.quick, args.repeats), {})
    else:
        rows.append(Row(SECTION, "MXNet 1.9.1: skipped (add --mxnet)", None))
    print_rows(f"peers, medians of {args.repeats}", rows)


if __name__ == "__main__":
    main()
