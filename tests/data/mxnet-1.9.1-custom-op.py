# ruff: noqa
# Verbatim copy of shared/traces/mxnet-1.9.1-custom-op.py, the script that made mxnet-1.9.1-custom-op.json
# with real MXNet 1.9.1 (which does not install here). Kept as written.
import mxnet as mx, numpy as np, time, json, sys


class MyAddOne(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        x = in_data[0]
        y = x.asnumpy()  # pure python / numpy part
        y = np.tanh(y) * 2
        z = mx.nd.array(y) + 1  # sub-operators
        z = z * 3
        self.assign(out_data[0], req[0], z)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        g = out_grad[0] * 3
        self.assign(in_grad[0], req[0], g)


@mx.operator.register("MyAddOne")
class MyAddOneProp(mx.operator.CustomOpProp):
    def __init__(self):
        super().__init__(need_top_grad=True)

    def list_arguments(self):
        return ["data"]

    def list_outputs(self):
        return ["output"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return MyAddOne()


mx.profiler.set_config(profile_all=True, aggregate_stats=True, filename="mx_trace.json")
a = mx.nd.ones((100, 100))
a.attach_grad()
mx.profiler.set_state("run")
for i in range(3):
    with mx.autograd.record():
        b = mx.nd.Custom(a, op_type="MyAddOne")
        c = b * 2
    c.backward()
    b2 = a + 1
mx.nd.waitall()
mx.profiler.set_state("stop")
mx.profiler.dump()
print(mx.profiler.dumps())
