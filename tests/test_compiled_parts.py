"""Where the build had a C compiler, every compiled part is built and in use.

A compiled part is optional (``optional=True`` in setup.py): where it fails to compile, pip says
nothing and opprof takes the pure-Python path, so a C error would pass unseen as "no compiler".
CI installs a compiler and sets ``OPPROF_EXPECT_COMPILED=1``; this test then holds each part to it.
"""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.skipif(
    os.environ.get("OPPROF_EXPECT_COMPILED") != "1" or os.environ.get("OPPROF_PURE") == "1",
    reason="set OPPROF_EXPECT_COMPILED=1 where the install had a C compiler (CI does)",
)


def test_every_compiled_part_is_built_and_in_use() -> None:
    from opprof.engine import gil, handoff
    from opprof.profiler import memory, npmem, recorder

    why = {
        "opprof.engine._gil": gil.WHY_NOT,
        "opprof.engine._handoff": handoff.WHY_NOT,
        "opprof.profiler._spanlog": recorder.COMPILED_WHY_NOT,
        "opprof.profiler._memlog": memory.COMPILED_WHY_NOT,
        "opprof.profiler._npmem": npmem.WHY_NOT,
        "the memory log's view of NumPy's struct and handler": memory.WATCH_WHY_NOT,
    }
    assert {part: reason for part, reason in why.items() if reason} == {}
