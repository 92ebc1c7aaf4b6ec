"""The threaded engine's two pools as a trace knows them (``opprof.trace.records.ENGINE_POOL`` and
``CUSTOM_POOL``): one spelling of their thread names, shared by the engine that names its threads
and the trace layer that reads them, and each pool's size recorded as data when the trace is made."""

from __future__ import annotations

import threading

import pytest

import opprof as mx
from opprof.trace.records import CUSTOM_POOL, ENGINE_POOL, ThreadInfo
from tests.helpers import MyAddOneProp

pytestmark = pytest.mark.timeout(60)

mx.operator.register("PoolsAddOne")(MyAddOneProp)


def test_the_engine_names_its_threads_with_the_trace_layers_prefixes() -> None:
    assert mx.engine.ENGINE_THREAD_PREFIX is ENGINE_POOL.thread_prefix
    assert mx.engine.CUSTOM_THREAD_PREFIX is CUSTOM_POOL.thread_prefix
    eng = mx.set_engine("threaded", workers=3, custom_workers=2)
    try:
        x = mx.nd.ones((2, 2))
        mx.nd.Custom(x, op_type="PoolsAddOne").wait_to_read()
        names = {t.name for t in threading.enumerate()}
        assert {f"{ENGINE_POOL.thread_prefix}{i}" for i in range(3)} <= names
        assert any(n.startswith(CUSTOM_POOL.thread_prefix) for n in names)
    finally:
        assert eng is mx.get_engine()
        mx.set_engine("threaded")


def test_a_profile_records_each_pools_size(engine: mx.engine.Engine) -> None:
    with mx.profile() as prof:
        (mx.nd.ones((2, 2)) + 1).wait_to_read()
    threaded = engine.kind == "threaded"
    meta = prof.trace.metadata
    assert meta[ENGINE_POOL.size_key] == (2 if threaded else None)
    assert meta[CUSTOM_POOL.size_key] == (2 if threaded else None)


def test_recorded_size_reads_the_metadata_else_counts_the_pools_threads() -> None:
    threads = [ThreadInfo(1, "MainThread"), ThreadInfo(2, "opprof-engine-0"), ThreadInfo(3, "opprof-engine-1")]
    assert ENGINE_POOL.recorded_size({"engine_workers": 4}, threads) == 4
    # A file made before the sizes were recorded, or with no usable size: its threads say.
    for meta in ({}, {"engine_workers": None}, {"engine_workers": 0}, {"engine_workers": True}, {"engine_workers": "4"}):
        assert ENGINE_POOL.recorded_size(meta, threads) == 2
    assert CUSTOM_POOL.recorded_size({}, threads) is None
    assert CUSTOM_POOL.recorded_size({"custom_workers": 3}, []) == 3
