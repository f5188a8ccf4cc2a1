"""The state round-trip benchmark's function (bench/state_roundtrip_bench.py): the Spark run
is by hand, but the state it keeps must stay the size it measures and be a new value every
call, as the engine's is."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from engine.fakes import FakeGroupState

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import state_roundtrip_bench


def test_each_call_replaces_the_state_with_a_new_blob_of_the_size() -> None:
    function = state_roundtrip_bench.keeps_a_blob(1000)
    state = FakeGroupState(timeout="NoTimeout")
    frames = [pd.DataFrame({"value": [1, 2]}), pd.DataFrame({"value": [3]})]
    (out,) = list(function(("k7",), iter(frames), state))
    assert out.to_dict("records") == [{"key": "k7", "rows": 3}]
    first = state.value[0]
    assert len(first) == 1000
    list(function(("k7",), iter([pd.DataFrame({"value": [4]})]), state))
    assert len(state.value[0]) == 1000
    assert state.value[0] != first


def test_the_text_encoding_keeps_the_blob_as_the_engines_base64_text() -> None:
    import base64

    function = state_roundtrip_bench.keeps_a_blob(999, "text")
    state = FakeGroupState(timeout="NoTimeout")
    list(function(("k1",), iter([pd.DataFrame({"value": [1]})]), state))
    first = state.value[0]
    assert isinstance(first, str)
    assert len(base64.b64decode(first, validate=True)) == 999
    list(function(("k1",), iter([pd.DataFrame({"value": [2]})]), state))
    second = base64.b64decode(state.value[0], validate=True)
    assert second == base64.b64decode(first)[1:] + base64.b64decode(first)[:1]
