"""Make tests/data/mxnet-1.9.1-{list,dict}.params with the real MXNet 1.9.1 (``pip install mxnet==1.9.1 'numpy<1.24'``).

Run from the repository root with that interpreter: ``python tests/data/make_mxnet_params.py``.
"""

import os

import mxnet as mx
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
mx.nd.save(
    os.path.join(HERE, "mxnet-1.9.1-list.params"), [mx.nd.array([[1, 2], [3, 4]]), mx.nd.array(np.arange(3), dtype="int64")]
)
mx.nd.save(
    os.path.join(HERE, "mxnet-1.9.1-dict.params"),
    {"w": mx.nd.ones((2, 3), dtype="float64"), "b": mx.nd.array([7], dtype="uint8")},
)
