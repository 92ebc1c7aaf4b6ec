"""MXNet's ``mx.runtime``: which compile-time features the library has, for code that checks.

opprof is pure Python on NumPy, CPU only: no CUDA, cuDNN, NCCL, TensorRT, MKL-DNN, distributed
kvstore or TVM. Its arrays index with 64-bit integers, and its profiler is always there.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["Feature", "Features", "feature_list"]

# MXNet 1.9.1's feature names, in its order; True where opprof has the feature.
_FEATURES = {
    "CUDA": False,
    "CUDNN": False,
    "NCCL": False,
    "CUDA_RTC": False,
    "TENSORRT": False,
    "CPU_SSE": False,
    "CPU_SSE2": False,
    "CPU_SSE3": False,
    "CPU_SSE4_1": False,
    "CPU_SSE4_2": False,
    "CPU_SSE4A": False,
    "CPU_AVX": False,
    "CPU_AVX2": False,
    "OPENMP": False,
    "SSE": False,
    "F16C": False,
    "JEMALLOC": False,
    "BLAS_OPEN": False,
    "BLAS_ATLAS": False,
    "BLAS_MKL": False,
    "BLAS_APPLE": False,
    "LAPACK": False,
    "MKLDNN": False,
    "OPENCV": False,
    "CAFFE": False,
    "PROFILER": True,
    "DIST_KVSTORE": False,
    "CXX14": False,
    "INT64_TENSOR_SIZE": True,
    "SIGNAL_HANDLER": False,
    "DEBUG": False,
    "TVM_OP": False,
}


@dataclass(frozen=True)
class Feature:
    name: str
    enabled: bool

    def __repr__(self) -> str:
        return f"{'✔' if self.enabled else '✖'} {self.name}"


def feature_list() -> list[Feature]:
    return [Feature(name, on) for name, on in _FEATURES.items()]


class Features(OrderedDict[str, Feature]):
    """Features by name; ``is_enabled(name)`` refuses a name MXNet does not know."""

    def __init__(self) -> None:
        super().__init__((f.name, f) for f in feature_list())

    def __repr__(self) -> str:
        return str(list(self.values()))

    def is_enabled(self, feature_name: str) -> bool:
        name = feature_name.upper()
        if name not in self:
            raise RuntimeError(f"Feature '{feature_name}' is unknown, known features are: {', '.join(self)}")
        return self[name].enabled
