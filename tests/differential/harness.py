"""Play scenarios on both sides and compare (docs/conformance.md).

``start_broker`` starts one broker for a settings group (its static group settings, the SASL
users of its quota scenarios), waits until the group coordinator answers and creates the topics
the scenarios need. ``play_all`` runs the scenarios of that group concurrently, each on its own
group id, principals and topics.

One scenario is played three times: on our side at the script's times (what the scenario means;
it also tells the broker player how long to wait for each answer), on the broker with real
sleeps, and on our side again at the times the broker run actually had (each request at the
moment it was sent, each wait ending when the next step began). The comparison is between the
last two, so that the milliseconds a loaded machine adds to a run shift both sides alike. If our
two plays disagree, the broker run did not test what the script says (a step ran so late that a
timer moved across it); likewise if a strict quota decision of the run fell closer to the other
outcome than the clock can tell (``undecided``), or if the broker was so slow that a parked
request may have been overtaken by the next step (``unordered``). Such a run is played again, on
a new group id and new principals, up to ``ATTEMPTS`` times, then reported.
"""

from __future__ import annotations

import time
import traceback
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from controlplane.io.broker import LocalBroker
from differential.broker_player import SETTLE_S, BrokerPlayer, Connection, Expectations
from differential.observe import Comparison, Played, compare
from differential.our_player import OurPlayer
from differential.script import (
    ATTEMPTS,
    OFFSETS_TOPIC,
    OFFSETS_TOPIC_PARTITIONS,
    BrokerSettings,
    Run,
    Scenario,
    check,
    label,
)

CONCURRENCY = 16
WARMUP_ROUNDS = 5
READY_TIMEOUT_S = 60.0


@dataclass
class Result:
    scenario: Scenario
    kafka: Played | None
    ours: Played | None
    comparison: Comparison
    attempts: int
    seconds: float
    retried_for: list[str] = field(default_factory=list)  # why earlier attempts did not count

    def report(self) -> str:
        late = "-" if self.kafka is None else self.kafka.late_ms
        head = f"{self.scenario.name}: late {late} ms, {self.attempts} attempt(s)"
        return "\n".join([head, *self.retried_for, *self.comparison.lines])


def password(user: str) -> str:
    return f"{user}-secret"


def start_broker(settings: BrokerSettings, scenarios: Sequence[Scenario]) -> LocalBroker:
    users = {
        Run(s, attempt, "").principal(user): ""
        for s in scenarios
        for user in s.users()
        for attempt in range(1, ATTEMPTS + 1)
    }
    users = {user: password(user) for user in users}
    broker = LocalBroker(
        group_initial_rebalance_delay_ms=settings.initial_rebalance_delay_ms,
        group_min_session_timeout_ms=settings.min_session_timeout_ms,
        group_max_size=settings.max_size,
        extra_users=users,
    )
    broker.start()
    try:
        _wait_for_coordinator(broker)
        broker.create_topic(OFFSETS_TOPIC, partitions=OFFSETS_TOPIC_PARTITIONS)
        for scenario in scenarios:
            for attempt in range(1, ATTEMPTS + 1):
                for topic, partitions in scenario.topics.items():
                    name = Run(scenario, attempt, "").topic(topic)
                    broker.create_topic(name, partitions=partitions)
    except BaseException:
        broker.stop()
        raise
    return broker


def _wait_for_coordinator(broker: LocalBroker) -> None:
    """FindCoordinator creates the offsets topic; the coordinator then loads it. A
    DescribeGroups that answers NONE says the group coordinator is ready."""
    from kafka.protocol.admin import DescribeGroupsRequest
    from kafka.protocol.metadata import FindCoordinatorRequest

    connection = Connection(broker, "differential-warmup")
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            found = connection.call(FindCoordinatorRequest(version=3, key="warmup", key_type=0))
            described = connection.call(
                DescribeGroupsRequest(
                    version=5, groups=["warmup"], include_authorized_operations=False
                )
            )
            if found.error_code == 0 and described.groups[0].error_code == 0:
                break
            if time.monotonic() > deadline:
                raise TimeoutError("the broker's group coordinator did not become ready")
            time.sleep(0.2)
        for round_ in range(WARMUP_ROUNDS):  # the first requests of a JVM are slow
            _warm_up(connection, f"warmup-{round_}")
    finally:
        connection.close()


def _warm_up(connection: Connection, group: str) -> None:
    from kafka.protocol.consumer import JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest

    protocol = JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")
    joined = connection.call(
        JoinGroupRequest(
            version=3,
            group_id=group,
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            member_id="",
            protocol_type="consumer",
            protocols=[protocol],
        )
    )
    connection.call(
        SyncGroupRequest(
            version=3,
            group_id=group,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
        )
    )
    connection.call(LeaveGroupRequest(version=1, group_id=group, member_id=joined.member_id))


def play(broker: LocalBroker, scenario: Scenario) -> Result:
    """Both sides of one scenario, compared (see the module docstring)."""
    began = time.monotonic()
    attempt = 0
    retried_for: list[str] = []
    try:
        check(scenario)
        while True:
            attempt += 1
            run = Run(scenario, attempt, f"{scenario.name}-{uuid.uuid4().hex[:8]}")
            scripted = OurPlayer(run).play()
            kafka = BrokerPlayer(broker, run, Expectations.of(scripted)).play()
            ours = OurPlayer(run, kafka.times_ms).play()
            drift = (
                timing_drift(scripted, ours) + undecided(ours, kafka) + unordered(scripted, kafka)
            )
            if not drift or attempt == ATTEMPTS:
                break
            retried_for += [f"attempt {attempt}: {line}" for line in drift]
    except Exception:
        failed = Comparison(False, [traceback.format_exc()], {})
        return Result(scenario, None, None, failed, attempt, time.monotonic() - began)
    steps = {label(index, step): step for index, step in enumerate(scenario.steps)}
    comparison = compare(kafka, ours, scenario.differences, steps)
    if drift:
        comparison.matched = False
        comparison.lines.append(
            "the broker run did not keep to the script's timing (late by up to "
            f"{kafka.late_ms} ms): played at the run's times, our core answers otherwise than "
            "at the script's:\n" + "\n".join(drift)
        )
    return Result(scenario, kafka, ours, comparison, attempt, time.monotonic() - began, retried_for)


def unordered(scripted: Played, kafka: Played) -> list[str]:
    """A request our side parks gets ``SETTLE_S`` on the broker before the next step goes out,
    on another connection: the order of the two holds if the broker takes the parked one in
    within that time. No answer says when it did; the answers to the run's immediate group
    requests say how long the broker took to handle a request. If one took longer than the
    settle, the run's order is not established."""
    expected = Expectations.of(scripted)
    if all(expected.immediate(name) for name in kafka.round_trips_ms):
        return []  # nothing parked
    settle_ms = SETTLE_S * 1000
    return [
        f"{name}: answered in {ms} ms, longer than the {settle_ms:.0f} ms a parked request gets"
        for name, ms in sorted(kafka.round_trips_ms.items())
        if expected.immediate(name) and ms > settle_ms and not _is_quota(name, scripted)
    ]


def _is_quota(name: str, played: Played) -> bool:
    return "throttle_time_ms" in played.observations.get(name, {})


def undecided(ours: Played, kafka: Played) -> list[str]:
    """Strict quota decisions taken closer to the other outcome than the clock can tell: the
    broker handled the request somewhere within its round trip, which moves the refill by up to
    the tolerance of its throttle time. Such a run decides nothing about conformance."""
    found = []
    for name, margins in ours.margins_s.items():
        tolerance_s = kafka.throttle_tolerance_ms.get(name, 0) / 1000
        close = [m for m in margins if abs(m) <= tolerance_s]
        if close:
            found.append(f"{name}: decided {close[0]:+.3f} s of refill from the other outcome")
    return found


def timing_drift(scripted: Played, measured: Played) -> list[str]:
    """Where our answers at the broker run's times differ from our answers at the script's
    times (throttle times aside: they follow the clock by design). Empty: the run tested what
    the script says."""

    def timeless(played: Played) -> dict[str, dict[str, object]]:
        return {
            name: {k: v for k, v in fields.items() if k != "throttle_time_ms"}
            for name, fields in played.observations.items()
        }

    a, b = timeless(scripted), timeless(measured)
    return [
        f"{name}: script {a.get(name)} / run {b.get(name)}"
        for name in sorted(set(a) | set(b))
        if a.get(name) != b.get(name)
    ]


def play_all(broker: LocalBroker, scenarios: Sequence[Scenario]) -> dict[str, Result]:
    with ThreadPoolExecutor(CONCURRENCY, thread_name_prefix="scenario") as pool:
        futures = {s.name: pool.submit(play, broker, s) for s in scenarios}
        return {name: future.result() for name, future in futures.items()}
