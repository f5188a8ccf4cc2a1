"""The differential harness itself, without a broker: what it calls a match, how it names
member ids, the tolerances it grants the real clock, when it plays a scenario again, and that
docs/conformance.md reports every scenario as the suite asserts it."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from differential.broker_player import BrokerPlayer, Expectations, Sent
from differential.harness import timing_drift, undecided, unordered
from differential.observe import DIFFERENCES, Answer, Played, Roles, compare, normalize
from differential.our_player import OurPlayer
from differential.scenarios import SCENARIOS
from differential.scenarios_group import MAIN
from differential.script import (
    CreateTopics,
    Describe,
    Heartbeat,
    Join,
    Run,
    Scenario,
    Sync,
    Wait,
    check,
    label,
)

ROOT = Path(__file__).resolve().parents[2]
BY_NAME = {s.name: s for s in SCENARIOS}


def played(observations: dict[str, dict[str, Any]], **extra: Any) -> Played:
    return Played({name: dict(fields) for name, fields in observations.items()}, **extra)


def test_a_differing_field_is_a_mismatch_naming_the_request() -> None:
    kafka = played({"01 A.Heartbeat": {"slot": "01 A.Heartbeat", "error": "NONE"}})
    ours = played({"01 A.Heartbeat": {"slot": "01 A.Heartbeat", "error": "UNKNOWN_MEMBER_ID"}})
    assert compare(kafka, kafka).matched
    comparison = compare(kafka, ours)
    assert not comparison.matched
    assert comparison.lines[0].startswith("01 A.Heartbeat:")


def test_an_answer_in_another_slot_or_on_one_side_only_is_a_mismatch() -> None:
    kafka = played({"01 B.Join": {"slot": "03 A.Join", "error": "NONE"}})
    assert not compare(kafka, played({"01 B.Join": {"slot": "01 B.Join", "error": "NONE"}})).matched
    assert not compare(kafka, played({})).matched


def describe(version: int, error: str) -> tuple[dict[str, Any], Describe]:
    fields = {"slot": "00 A.Describe", "error": error, "state": "Dead", "members": []}
    return fields, Describe("A", version)


def test_a_documented_difference_applies_only_where_its_rule_does() -> None:
    theirs, step_v6 = describe(6, "GROUP_ID_NOT_FOUND")
    mine, _ = describe(6, "NONE")
    steps = {"00 A.Describe": step_v6}
    name = "describe_missing_group_v6"
    assert not compare(played({"00 A.Describe": theirs}), played({"00 A.Describe": mine})).matched
    assert compare(
        played({"00 A.Describe": theirs}), played({"00 A.Describe": mine}), [name], steps
    ).matched
    # the same answers to a v5 request are not covered by the rule
    v5 = {"00 A.Describe": Describe("A", 5)}
    assert not compare(
        played({"00 A.Describe": theirs}), played({"00 A.Describe": mine}), [name], v5
    ).matched


def test_a_documented_difference_that_does_not_occur_fails_the_scenario() -> None:
    same, step = describe(6, "NONE")
    comparison = compare(
        played({"00 A.Describe": same}),
        played({"00 A.Describe": same}),
        ["describe_missing_group_v6"],
        {"00 A.Describe": step},
    )
    assert not comparison.matched
    assert "did not occur" in comparison.lines[0]


def test_throttle_times_agree_within_the_tolerance_and_no_further() -> None:
    def quota(throttle_ms: int) -> dict[str, Any]:
        return {"slot": "02 u1.CreateTopics", "topics": [], "throttle_time_ms": throttle_ms}

    ours = played({"02 u1.CreateTopics": quota(1000)})
    for kafka_ms, matched in ((1010, True), (990, True), (1011, False)):
        kafka = played(
            {"02 u1.CreateTopics": quota(kafka_ms)},
            throttle_tolerance_ms={"02 u1.CreateTopics": 10},
        )
        comparison = compare(kafka, ours)
        assert comparison.matched is matched, kafka_ms
        assert comparison.throttle_deviation_ms == {"02 u1.CreateTopics": abs(kafka_ms - 1000)}


def test_member_ids_are_named_by_role_not_by_value() -> None:
    roles = Roles(literals=["unknown-member-id"])
    roles.learn("A", "consumer-1-2c0f")
    roles.learn("B", "consumer-1-9d1e")
    roles.learn("A", "a-77e1")  # a static member's second id
    fields = {
        "error": 0,
        "generation": 2,
        "member_id": "a-77e1",
        "leader": "consumer-1-2c0f",
        "protocol_type": "consumer",
        "protocol_name": "range",
        "skip_assignment": False,
        "members": [
            ("consumer-1-9d1e", None, b"R"),
            ("unknown-member-id", None, b"R"),
            ("someone-else", None, b"R"),
        ],
    }
    out = normalize(Answer("03 A.Join", "A", "Join", 5, "03 A.Join", fields), roles)
    assert (out["member"], out["leader"]) == ("A#2", "A")
    assert out["members"] == [
        ("<unknown id>", None, b"R"),
        ("B", None, b"R"),
        ("unknown-member-id", None, b"R"),
    ]
    assert "protocol_type" not in out  # JoinGroup v5 has no protocol type


def test_a_join_that_our_side_parks_is_awaited_only_briefly_and_its_release_is_expected() -> None:
    """The broker player waits for what our side answered in each slot (rebalance_two_members:
    B's second join is parked until A's rejoin completes the generation)."""
    scenario = BY_NAME["rebalance_two_members"]
    ours = OurPlayer(Run(scenario, 1, "g")).play()
    expected = Expectations.of(ours)
    parked, releasing = "04 B.Join", "06 A.Join"
    assert [label(i, s) for i, s in enumerate(scenario.steps)][4:7] == [
        parked,
        "05 A.Heartbeat",
        releasing,
    ]
    assert not expected.immediate(parked)
    assert expected.immediate(releasing)
    assert expected.released(releasing) == {parked}


def test_our_side_at_the_scripts_own_times_is_the_scripted_run() -> None:
    scenario = BY_NAME["initial_delay_extended_by_a_new_member"]
    run = Run(scenario, 1, "g")
    clock, times = 0, {}
    for index, step in enumerate(scenario.steps):
        clock += step.ms if isinstance(step, Wait) else 0
        times[label(index, step)] = clock
    assert OurPlayer(run, times).play().observations == OurPlayer(run).play().observations
    # B joining 600 ms late, after the first delay ran out: the group forms without it
    late = {name: ms + (600 if ms >= 500 else 0) for name, ms in times.items()}
    assert timing_drift(OurPlayer(run).play(), OurPlayer(run, late).play())


def test_a_run_whose_times_change_our_answers_is_drift_but_throttle_times_are_not() -> None:
    base = {"slot": "02 u1.CreateTopics", "topics": [("t1", "NONE")], "throttle_time_ms": 0}
    other = {**base, "throttle_time_ms": 250}
    assert timing_drift(played({"x": base}), played({"x": other})) == []
    refused = {**base, "topics": [("t1", "THROTTLING_QUOTA_EXCEEDED")]}
    assert timing_drift(played({"x": base}), played({"x": refused}))


def test_a_strict_decision_closer_to_the_other_outcome_than_the_clock_tells_is_undecided() -> None:
    kafka = played({}, throttle_tolerance_ms={"03 u1.CreateTopics": 300})
    assert undecided(played({}, margins_s={"03 u1.CreateTopics": [5.0, -0.25]}), kafka)
    assert not undecided(played({}, margins_s={"03 u1.CreateTopics": [5.0, -0.35]}), kafka)


def test_a_slow_broker_leaves_the_order_of_a_parked_request_unestablished() -> None:
    """rebalance_two_members parks B's join: if any immediate group request of the run took the
    broker longer than the settle the parked one got, the run is played again."""
    scenario = BY_NAME["rebalance_two_members"]
    scripted = OurPlayer(Run(scenario, 1, "g")).play()
    names = [label(i, s) for i, s in enumerate(scenario.steps)]
    fast = played({}, round_trips_ms=dict.fromkeys(names, 20))
    assert unordered(scripted, fast) == []
    slow = played({}, round_trips_ms={**dict.fromkeys(names, 20), "05 A.Heartbeat": 400})
    assert unordered(scripted, slow) == [
        "05 A.Heartbeat: answered in 400 ms, longer than the 300 ms a parked request gets"
    ]
    # the parked join's own wait is no measure of the broker's speed
    parked_slow = played({}, round_trips_ms={**dict.fromkeys(names, 20), "04 B.Join": 900})
    assert unordered(scripted, parked_slow) == []
    # with nothing parked, order needs no settle
    alone = BY_NAME["heartbeat_errors"]
    alone_names = [label(i, s) for i, s in enumerate(alone.steps)]
    assert (
        unordered(
            OurPlayer(Run(alone, 1, "g")).play(),
            played({}, round_trips_ms=dict.fromkeys(alone_names, 400)),
        )
        == []
    )


def test_our_side_measures_each_strict_decision_in_seconds_of_refill() -> None:
    """quota_strict_burst_then_throttle at the script's times: 11 tokens at 1/s, then 5 after
    6 partitions, then -3 after 8 more; 5.5 s later -3 + 5.5 = 2.5."""
    ours = OurPlayer(Run(BY_NAME["quota_strict_burst_then_throttle"], 1, "g")).play()
    assert ours.margins_s == {
        "02 u1.CreateTopics": [11.0],
        "03 u1.CreateTopics": [5.0],
        "04 u1.CreateTopics": [-3.0],
        "06 u1.CreateTopics": [2.5],
    }


def test_the_throttle_tolerance_is_the_longest_round_trip_so_far() -> None:
    scenario = BY_NAME["quota_strict_burst_then_throttle"]
    player = BrokerPlayer(None, Run(scenario, 1, "g"), Expectations({}))  # type: ignore[arg-type]
    now = time.monotonic()
    step = CreateTopics("u1", "c1", (("t1", 1),))
    for name, sent_s, took_s in (("02", 0.0, 0.040), ("03", 0.1, 0.120), ("04", 0.3, 0.010)):
        sent = Sent(name, step, now + sent_s)
        sent.done_at = now + sent_s + took_s
        player.sent.append(sent)
    assert player._throttle_tolerances() == {"02": 41, "03": 121, "04": 121}


def test_a_script_cannot_ask_for_a_field_its_version_lacks() -> None:
    def scenario(*steps: Any) -> Scenario:
        return Scenario("bad", MAIN, steps, "")

    check(scenario(Join("A", 5, instance="a"), Heartbeat("A", 3, instance="a")))
    with pytest.raises(ValueError, match="no group_instance_id"):
        check(scenario(Join("A", 4, instance="a")))
    with pytest.raises(ValueError, match="no group_instance_id"):
        check(scenario(Sync("A", 2, instance="a")))
    with pytest.raises(ValueError, match="no rebalance timeout"):
        check(scenario(Join("A", 0, rebalance_ms=1)))


def test_every_scenario_is_valid_and_uniquely_named() -> None:
    assert len({s.name for s in SCENARIOS}) == len(SCENARIOS)
    assert len(SCENARIOS) >= 40
    for scenario in SCENARIOS:
        check(scenario)
        assert set(scenario.differences) <= set(DIFFERENCES), scenario.name


def conformance_rows() -> dict[str, str]:
    """The scenario table of docs/conformance.md: name -> result."""
    text = (ROOT / "docs" / "conformance.md").read_text(encoding="utf-8")
    table = text.split("\n## Scenarios\n", 1)[1]
    rows = re.findall(r"^\| `([a-z0-9_]+)` \| .* \| ([^|]+) \|$", table, flags=re.MULTILINE)
    return {name: result.strip() for name, result in rows}


def test_the_conformance_report_lists_every_scenario_with_its_result() -> None:
    """docs/conformance.md: one row per scenario, "matched" or the documented differences the
    scenario asserts (the test of each scenario asserts exactly that)."""
    expected = {
        s.name: "matched"
        if not s.differences
        else "documented difference: " + ", ".join(f"`{d}`" for d in s.differences)
        for s in SCENARIOS
    }
    assert conformance_rows() == expected


def test_every_documented_difference_is_described_in_the_report() -> None:
    text = (ROOT / "docs" / "conformance.md").read_text(encoding="utf-8")
    for name in DIFFERENCES:
        assert f"### `{name}`" in text, name
