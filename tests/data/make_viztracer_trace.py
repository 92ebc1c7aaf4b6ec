"""Make tests/data/viztracer-1.1-threads.json with the real VizTracer (1.1.x, in the project venv).

Run from the repository root: ``.venv/bin/python tests/data/make_viztracer_trace.py``.
Two worker threads, a custom instant, a counter and a nested function chain, kept small.
"""

import os
import threading

from viztracer import VizTracer

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "viztracer-1.1-threads.json")


def leaf(n):
    return sum(range(n))


def middle(n):
    return leaf(n) + leaf(n // 2)


def work(n):
    for _ in range(3):
        middle(n)


def main():
    tracer = VizTracer(output_file=OUT, verbose=0, max_stack_depth=6)
    tracer.start()
    threads = [threading.Thread(target=work, args=(2000,), name=f"worker-<{i}>") for i in range(2)]
    for t in threads:
        t.start()
    work(1000)
    tracer.log_instant("checkpoint <b>html</b>", args={"step": 1})
    tracer.log_var("progress", 0.5)
    for t in threads:
        t.join()
    tracer.stop()
    tracer.save()
    print(OUT, os.path.getsize(OUT))


if __name__ == "__main__":
    main()
