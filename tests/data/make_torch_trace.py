"""Make tests/data/torch-2.13-custom-function.json with the real torch.profiler (torch==2.13.0, CPU).

Run from the repository root: ``.venv/bin/python tests/data/make_torch_trace.py``. torch is not a
dependency of opprof; install it by hand (``.venv/bin/pip install torch==2.13.0``) to regenerate.
"""

import os

import torch
from torch.profiler import ProfilerActivity, profile, record_function

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch-2.13-custom-function.json")


class MyAddOne(torch.autograd.Function):
    """The custom op of the MXNet script, as a PyTorch autograd Function."""

    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x) * 2
        return (y + 1) * 3

    @staticmethod
    def backward(ctx, g):
        return g * 3


def main():
    torch.manual_seed(0)
    a = torch.ones(16, 16, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        for i in range(2):
            with record_function(f"step_{i}"):
                b = MyAddOne.apply(a)
                c = (b * 2).sum()
                c.backward()
    prof.export_chrome_trace(OUT)
    print(OUT, os.path.getsize(OUT))


if __name__ == "__main__":
    main()
