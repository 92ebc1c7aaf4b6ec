# ruff: noqa
# made with real MXNet 1.9.1; kept as run
# (venv as benchmarks/peers.py makes it: ~/.cache/opprof/mxnet-1.9.1, Python 3.11,
#  pip install mxnet==1.9.1 'numpy<1.24' -> numpy 1.23.5)
#
# Run: python mxnet-1.9.1-memory.py PREFIX [all]
# writes PREFIX.json (Chrome trace from mx.profiler.dump()), PREFIX-dumps.json
# (mx.profiler.dumps(format='json'), exactly as returned) and PREFIX-dumps.txt (mx.profiler.dumps()).
# With "all", the profiler is configured with profile_all=True instead of the separate flags.
import sys

import mxnet as mx
import numpy as np

prefix = sys.argv[1]
profile_all = len(sys.argv) > 2 and sys.argv[2] == "all"


class MemAddOne(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        x = in_data[0]
        y = np.tanh(x.asnumpy()) * 2
        z = (mx.nd.array(y) + 1) * 3
        self.assign(out_data[0], req[0], z)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], out_grad[0] * 3)


@mx.operator.register("MemAddOne")
class MemAddOneProp(mx.operator.CustomOpProp):
    def __init__(self):
        super().__init__(need_top_grad=True)

    def list_arguments(self):
        return ["data"]

    def list_outputs(self):
        return ["output"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return MemAddOne()


# set_config(**kwargs) in 1.9.1 accepts: filename, profile_all, profile_symbolic, profile_imperative,
# profile_memory, profile_api, continuous_dump, dump_period, aggregate_stats, profile_process.
if profile_all:
    mx.profiler.set_config(profile_all=True, aggregate_stats=True, filename=prefix + ".json")
else:
    mx.profiler.set_config(
        profile_memory=True,
        profile_symbolic=True,
        profile_imperative=True,
        profile_api=False,
        aggregate_stats=True,
        filename=prefix + ".json",
    )

mx.nd.waitall()
mx.profiler.set_state("run")

a = mx.nd.ones((1000, 1000))  # float32: 4,000,000 bytes
mx.nd.waitall()
b = a + 1
mx.nd.waitall()
del a
c = b * 2
mx.nd.waitall()
del b
d = c - 3
mx.nd.waitall()
del c
e = d / 4
mx.nd.waitall()
del d
f = e + 5
mx.nd.waitall()
del e
mx.nd.waitall()

x = mx.nd.ones((100, 100))
x.attach_grad()
with mx.autograd.record():
    y = mx.nd.Custom(x, op_type="MemAddOne")
y.backward()
mx.nd.waitall()
assert abs(f.asnumpy()[0, 0] - (((1 + 1) * 2 - 3) / 4 + 5)) < 1e-6
assert abs(x.grad.asnumpy()[0, 0] - 3) < 1e-6
del f, y

mx.nd.waitall()
mx.profiler.set_state("stop")

with open(prefix + "-dumps.txt", "w") as fh:
    fh.write(mx.profiler.dumps())
with open(prefix + "-dumps.json", "w") as fh:
    fh.write(mx.profiler.dumps(format="json"))
mx.profiler.dump()
