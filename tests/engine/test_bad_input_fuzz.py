"""Bad input never fails the query: arbitrary damage to real events, through the whole Python
side of the engine (the quota keyer, the state function with the real runners, the state
store, the batch's split into tables and the conversion to each table's Arrow schema).

Each example takes events of conf/sample, damages some of them (a field replaced by any JSON
value, including integers past the long range, non-finite numbers and lone surrogates; a field
removed; an unknown field added; the line cut short) and runs them in two batches of one key.
Whatever the damage, no event may reach the runner's "internal error" path, every row must fit
its table's schema, and the stored state must be one the next batch can read.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.core.config import parse_settings
from controlplane.core.jsonwire import INT64_MAX, INT64_MIN
from controlplane.core.runtime import Runner
from controlplane.engine.adapter import StateFunction
from controlplane.engine.batch import split_envelopes
from controlplane.engine.keying import ShardNames, SparkKeys, balanced_names
from controlplane.engine.options import Keying, TimeMode
from controlplane.engine.queries import CoordinatorRunners, QuotaKeyer, QuotaRunners
from controlplane.engine.reload import SettingsSource
from controlplane.io.sinks import to_arrow
from engine.fakes import FakeGroupState

SAMPLE = Path(__file__).resolve().parents[2] / "conf" / "sample"
SETTINGS = parse_settings(
    {
        "group.initial.rebalance.delay.ms": 0,
        "quotas": [
            {"user": "alice", "controller_mutation_rate": 1},
            {"user": "<default>", "controller_mutation_rate": 10},
        ],
    }
)


def templates(name: str) -> list[dict[str, Any]]:
    lines = (SAMPLE / name).read_text(encoding="utf-8").splitlines()
    events = []
    for text in lines:
        try:
            value = json.loads(text)
        except ValueError:
            continue  # the samples hold bad lines on purpose
        if isinstance(value, dict) and value.get("type"):
            events.append(value)
    return events


GROUP_EVENTS = templates("group_events.jsonl")
QUOTA_EVENTS = templates("quota_events.jsonl")

SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
ODD_TEXT = st.text(alphabet=st.one_of(st.characters(), SURROGATES), max_size=8)
ODD_NUMBERS = st.one_of(
    st.integers(),
    st.sampled_from(
        [INT64_MAX, INT64_MAX + 1, INT64_MIN, INT64_MIN - 1, 2**31, -(2**31) - 1, -1, 0, 10**30]
    ),
    st.floats(),  # NaN and the infinities make the line not JSON
)
SCALARS = st.one_of(st.none(), st.booleans(), ODD_NUMBERS, ODD_TEXT)
ODD_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(ODD_TEXT, inner, max_size=3)
    ),
    max_leaves=6,
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in an event that holds a value: object fields and array items."""
    found: list[tuple[Any, ...]] = []
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for name, inner in items:
        found.append((*prefix, name))
        if isinstance(inner, (dict, list)):
            found.extend(paths(inner, (*prefix, name)))
    return found


HEADER = ("event_time_ms", "event_id", "group_id", "member_id", "user", "client_id", "type")


@st.composite
def damaged_line(draw: st.DrawFn, events: list[dict[str, Any]]) -> str:
    event = json.loads(json.dumps(draw(st.sampled_from(events))))
    cut = False
    for _ in range(draw(st.integers(0, 3))):
        how = draw(st.sampled_from(["header", "replace", "remove", "add", "cut"]))
        places = paths(event)
        if how == "header":
            event[draw(st.sampled_from(HEADER))] = draw(st.one_of(ODD_NUMBERS, ODD_TEXT))
        elif how in ("replace", "remove") and places:
            path = draw(st.sampled_from(places))
            parent = event
            for step in path[:-1]:
                parent = parent[step]
            if how == "replace":
                parent[path[-1]] = draw(ODD_VALUES)
            else:
                del parent[path[-1]]
        elif how == "add":
            event[draw(ODD_TEXT)] = draw(ODD_VALUES)
        elif how == "cut":
            cut = True
    text = json.dumps(event)  # ensure_ascii: a surrogate becomes a \u escape, as on the wire
    if cut:
        text = text[: draw(st.integers(0, len(text) - 1))]
    return text


def run_two_batches(
    lines: list[str], runners: Callable[[], Runner], mode: TimeMode
) -> list[tuple[str, str]]:
    base = {"key": "k", "source": "f.jsonl", "principal": None}
    half = len(lines) // 2
    batches = [lines[:half], lines[half:]]
    out: list[tuple[str, str]] = []
    function = StateFunction(runners, mode)
    timeout = "EventTimeTimeout" if mode is TimeMode.EVENT_TIME else "ProcessingTimeTimeout"
    state = FakeGroupState(timeout=timeout, batch_time_ms=1_700_000_000_000, watermark_ms=0)
    for number, batch in enumerate(batches):
        if number:
            state = state.next_call(1_700_000_060_000, watermark_ms=1_700_000_000_000)
        rows = [
            {**base, "raw": raw, "seq": index, "arrival_time_ms": state.batch_time_ms}
            for index, raw in enumerate(batch)
        ]
        frames = iter([pd.DataFrame(rows)] if rows else [])
        out.extend(function.call(frames, state))
        assert state.removed or state.updated, "every call ends with remove() or update()"
    return out


def check_outputs(envelopes: list[tuple[str, str]]) -> None:
    tables, _ = split_envelopes(envelopes, batch_id=0, processed_at_ms=0)
    for row in tables.get("rejected_events", []):
        assert not row["reason"].startswith("internal error"), row
    for table, rows in tables.items():
        to_arrow(table, rows)  # every value fits its column (a long, a UTF-8 string, ...)


MODES = st.sampled_from([TimeMode.PROCESSING_TIME, TimeMode.EVENT_TIME])


@given(lines=st.lists(damaged_line(GROUP_EVENTS), min_size=1, max_size=12), mode=MODES)
def test_damaged_coordinator_events_never_fail_the_engine(lines: list[str], mode: TimeMode) -> None:
    runners = CoordinatorRunners(SettingsSource(path=None, initial=SETTINGS), None)
    check_outputs(run_two_batches(lines, runners, mode))


@given(lines=st.lists(damaged_line(QUOTA_EVENTS), min_size=1, max_size=12), mode=MODES)
def test_damaged_mutation_events_never_fail_the_engine(lines: list[str], mode: TimeMode) -> None:
    source = SettingsSource(path=None, initial=SETTINGS)
    keyer = QuotaKeyer(source, SparkKeys(Keying.GROUP, 64))
    for raw in lines:
        key, time_ms = keyer.key(raw, None, SETTINGS.quota)
        key.encode("utf-8")  # Arrow must be able to store the Spark key
        assert time_ms is None or INT64_MIN <= time_ms <= INT64_MAX
    check_outputs(run_two_batches(lines, QuotaRunners(source), mode))


@pytest.mark.parametrize("keying", [Keying.GROUP, Keying.SHARD])
def test_the_quota_keyer_output_fits_the_keyed_schema(keying: Keying) -> None:
    source = SettingsSource(path=None, initial=SETTINGS)
    keys = SparkKeys(keying, 8, ShardNames.BALANCED, 2)
    keyer = QuotaKeyer(source, keys)
    raw = json.dumps(QUOTA_EVENTS[0] | {"user": "alice", "client_id": "c"})
    frame = pd.DataFrame(
        [{"raw": raw, "source": "f", "arrival_time_ms": 0, "seq": 0, "principal": None}]
    )
    (out,) = list(keyer(iter([frame])))
    shard = zlib.crc32(b"user=alice") % 8
    expected = "user=alice" if keying is Keying.GROUP else balanced_names(8, 2)[shard]
    assert out["key"].tolist() == [expected]
