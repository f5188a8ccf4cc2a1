"""The engine benchmark's workload and its latency windows (bench/engine_bench.py): the Spark
run itself is by hand, but what it offers and how it buckets its figures are checked here."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import engine_bench

GROUPS, SECONDS = 200, 20


def heartbeats(slots: list[list[dict[str, Any]]]) -> Counter[str]:
    return Counter(e["group_id"] for s in slots for e in s if e["type"] == "heartbeat")


def silent(group_id: str) -> bool:
    return int(group_id[1:]) % 10 == 9


def test_by_default_the_silent_groups_stop_after_their_sync() -> None:
    beats = heartbeats(engine_bench.workload(GROUPS, SECONDS))
    assert not [g for g in beats if silent(g)]
    assert len(beats) == GROUPS - GROUPS // 10
    # a group joining in second 0 beats in seconds 4, 7, ..., 19: six times
    assert beats["g00000"] == len(range(4, SECONDS, 3))


def test_spread_silence_stops_the_silent_groups_at_spread_times_and_changes_nothing_else() -> None:
    plain = engine_bench.workload(GROUPS, SECONDS)
    spread = engine_bench.workload(GROUPS, SECONDS, spread_silence=True)
    beats, plain_beats = heartbeats(spread), heartbeats(plain)
    full = len(range(4, SECONDS, 3))
    stops = Counter(beats[f"g{g:05d}"] for g in range(9, GROUPS, 10))
    assert sorted(stops) == list(range(full))  # every count from none to all but one
    assert max(stops.values()) - min(stops.values()) <= 1  # evenly
    assert {g: n for g, n in beats.items() if not silent(g)} == plain_beats
    others = [[e for e in s if e["type"] != "heartbeat"] for s in spread]
    assert others == [[e for e in s if e["type"] != "heartbeat"] for s in plain]


def test_latency_windows_bucket_answers_by_drop_time_and_timers_by_deadline() -> None:
    answers = [(1_000, 1_500), (1_900, 4_900), (11_000, 11_100), (25_000, 27_000)]
    timers = [(12_000, 12_400)]
    lines = engine_bench.latency_windows(answers, timers, first_drop_ms=1_000, window_s=10)
    assert lines == [
        "answers 0-10 s: 2, p50 3000 / p99 3000 ms",
        "answers 10-20 s: 1, p50 100 / p99 100 ms",
        "answers 20-30 s: 1, p50 2000 / p99 2000 ms",
        "timers 10-20 s: 1, p50 400 / p99 400 ms",
    ]


@pytest.mark.parametrize("seconds", [4, 5, 6])
def test_a_run_too_short_for_heartbeats_still_builds(seconds: int) -> None:
    slots = engine_bench.workload(30, seconds, spread_silence=True)
    assert len(slots) == seconds
    assert sum(1 for s in slots for e in s if e["type"] == "join") == 30
