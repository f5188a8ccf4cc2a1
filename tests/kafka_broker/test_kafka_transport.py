"""KafkaTransport on the local broker, against an engine stand-in written from the deployment
contract (echo_engine.py): requests go out keyed and with the principal's header, answers come
back from the answers partition the client computed, duplicates and other clients' answers are
dropped, the client never reads the partition's history and is positioned before it sends, and
close() is prompt. Then real clients (GroupMember, AdminClient) over it, the real cores behind
the stand-in."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from controlplane.client.admin import AdminClient
from controlplane.client.clock import RealClock
from controlplane.client.config import AdminConfig, ConsumerConfig
from controlplane.client.member import GroupMember, MemberState
from controlplane.client.records import InMemoryLog, Record
from controlplane.client.transport import Requester, Stream
from controlplane.client.transport_kafka import KafkaTransport, answer_partition
from controlplane.core.config import parse_settings
from controlplane.io.broker import LocalBroker
from controlplane.jvm import BROKER_JARS, require_jars, require_java
from kafka_broker.conftest import poll_until
from kafka_broker.echo_engine import Cores, EchoEngine, Row

pytestmark = pytest.mark.kafka

LOG_APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}
ANSWER_PARTITIONS = 8


@dataclass(frozen=True)
class Topics:
    coordinator: str
    quota: str
    answers: str

    @property
    def requests(self) -> dict[Stream, str]:
        return {Stream.GROUP: self.coordinator, Stream.QUOTA: self.quota}


@pytest.fixture
def topics(kafka_broker: LocalBroker) -> Topics:
    suffix = uuid.uuid4().hex[:8]
    names = Topics(f"requests-{suffix}", f"mutations-{suffix}", f"answers-{suffix}")
    kafka_broker.create_topic(names.coordinator, 2, LOG_APPEND_TIME)
    kafka_broker.create_topic(names.quota, 2, LOG_APPEND_TIME)
    kafka_broker.create_topic(names.answers, ANSWER_PARTITIONS, LOG_APPEND_TIME)
    return names


@pytest.fixture
def clock() -> RealClock:
    return RealClock()


def connect(broker: LocalBroker, topics: Topics, clock: RealClock, **options: Any) -> Any:
    return KafkaTransport(
        clock, broker.bootstrap_servers, topics.requests, topics.answers, **options
    )


@pytest.fixture
def transport(kafka_broker: LocalBroker, topics: Topics, clock: RealClock) -> Iterator[Any]:
    transport = connect(kafka_broker, topics, clock)
    yield transport
    transport.close()


def groups_on(partition: int, count: int, prefix: str = "g") -> list[str]:
    """``count`` group ids whose answers go to ``partition`` of the answers topic."""
    found = []
    for index in range(10_000):
        name = f"{prefix}-{index}"
        if answer_partition(name, ANSWER_PARTITIONS) == partition:
            found.append(name)
            if len(found) == count:
                return found
    raise AssertionError(f"no {count} group ids on partition {partition}")


class Answers:
    """Callbacks that keep every answer they get, by event_id."""

    def __init__(self, clock: RealClock) -> None:
        self.clock = clock
        self.got: dict[str, list[Row]] = {}
        self._lock = threading.Lock()

    def on(self, event_id: str) -> Any:
        def called(row: Any) -> None:
            with self._lock:
                self.got.setdefault(event_id, []).append(dict(row))
            self.clock.notify()

        return called

    def wait(self, event_ids: list[str], timeout_ms: int = 20_000) -> None:
        if not self.clock.wait_for(lambda: all(e in self.got for e in event_ids), timeout_ms):
            missing = [e for e in event_ids if e not in self.got]
            raise AssertionError(f"no answer for {missing}")


def describe(event_id: str, group_id: str) -> Row:
    return {"event_id": event_id, "event_time_ms": 0, "type": "describe", "group_id": group_id}


def produce_answer(broker: LocalBroker, topic: str, key: str, row: Row) -> int:
    from kafka import KafkaProducer

    producer = KafkaProducer(**broker.client_config(), acks="all")
    try:
        value = json.dumps(row).encode()
        sent = producer.send(topic, key=key.encode(), value=value, headers=[("table", b"x")])
        return int(sent.get(timeout=30).partition)
    finally:
        producer.close()


# --- the contract, piece by piece ----------------------------------------------------------


def test_a_request_on_each_stream_goes_out_keyed_and_its_answer_comes_back(
    kafka_broker: LocalBroker, topics: Topics, transport: Any, clock: RealClock
) -> None:
    with EchoEngine(kafka_broker, topics.requests, topics.answers) as engine:
        requester = Requester(transport, clock, "c1")
        group = requester.call(Stream.GROUP, {"type": "describe", "group_id": "orders"}, 20_000)
        body = {"type": "create_topics", "user": "alice", "client_id": "c1", "topics": []}
        quota = requester.call(Stream.QUOTA, body, 20_000)
        assert group.result()["answered"] == "describe"
        assert quota.result()["answered"] == "create_topics"
        assert engine.error is None
        coordinator_request, quota_request = engine.requests
        assert coordinator_request[1]["event_id"] == group.event_id
        assert coordinator_request[2] == {}  # no principal configured: no header
        assert quota_request[2] == {"user": [b"alice"]}  # exactly one, from the request's user
    keys = {key for key, _ in engine.answers}
    assert keys == {"orders", "alice"}
    assert set(transport.positions()) == {
        answer_partition("orders", ANSWER_PARTITIONS),
        answer_partition("alice", ANSWER_PARTITIONS),
    }


def test_the_configured_principal_is_the_header_and_the_key_of_quota_answers(
    kafka_broker: LocalBroker, topics: Topics, clock: RealClock
) -> None:
    transport = connect(kafka_broker, topics, clock, principal="bob")
    try:
        with EchoEngine(kafka_broker, topics.requests, topics.answers) as engine:
            requester = Requester(transport, clock, "tool")
            body = {"type": "create_topics", "user": "mallory", "client_id": "tool", "topics": []}
            answer = requester.call(Stream.QUOTA, body, 20_000).result()
        assert answer["user"] == "bob"  # the engine takes the header, never the payload
        assert engine.requests[0][2] == {"user": [b"bob"]}
        assert [key for key, _ in engine.answers] == ["bob"]
    finally:
        transport.close()


def test_the_answer_partition_is_the_java_producers_default_partition(
    tmp_path: Path, kafka_broker: LocalBroker
) -> None:
    """The engine produces answers with the JVM producer: our partition of a key must be the
    one the Java producer gives a keyed record (BuiltInPartitioner.partitionForKey, murmur2),
    for any key and partition count."""
    source = tmp_path / "Partition.java"
    source.write_text(
        "import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;\n"
        "import java.io.*;\n"
        "import java.nio.charset.StandardCharsets;\n"
        "public class Partition { public static void main(String[] args) throws Exception {\n"
        "  BufferedReader in = new BufferedReader(new InputStreamReader(System.in,"
        " StandardCharsets.UTF_8));\n"
        "  String line; while ((line = in.readLine()) != null) {\n"
        "    int tab = line.indexOf('\\t'); int n = Integer.parseInt(line.substring(0, tab));\n"
        "    byte[] key = line.substring(tab + 1).getBytes(StandardCharsets.UTF_8);\n"
        "    System.out.println(BuiltInPartitioner.partitionForKey(key, n)); } } }\n",
        encoding="utf-8",
    )
    keys = ["orders", "alice", "", "a", "group-with-a-long-name-0123456789", "ünïcødé", "日本"]
    keys += [f"g-{i}" for i in range(200)] + [uuid.uuid4().hex for _ in range(50)]
    cases = [(n, key) for key in keys for n in (1, 3, 8, 50)]
    stdin = "".join(f"{n}\t{key}\n" for n, key in cases)
    java = require_java("the partitioner check")
    jars = require_jars(BROKER_JARS, "the partitioner check")
    result = subprocess.run(
        [java, "-cp", os.pathsep.join(str(jar) for jar in jars), str(source)],
        input=stdin.encode("utf-8"),
        capture_output=True,
        timeout=120,
        check=True,
    )
    theirs = [int(line) for line in result.stdout.decode().split()]
    assert theirs == [answer_partition(key, n) for n, key in cases]


def test_answers_for_other_clients_on_the_same_partition_are_ignored(
    kafka_broker: LocalBroker, topics: Topics, clock: RealClock
) -> None:
    mine, theirs = groups_on(3, 2)
    a, b = connect(kafka_broker, topics, clock), connect(kafka_broker, topics, clock)
    answers = Answers(clock)
    try:
        with EchoEngine(kafka_broker, topics.requests, topics.answers):
            a.send(Stream.GROUP, describe("a-1", mine), answers.on("a-1"))
            answers.wait(["a-1"])  # b positions itself after this answer: it never sees it
            b.send(Stream.GROUP, describe("b-1", theirs), answers.on("b-1"))
            b.send(Stream.GROUP, describe("b-2", mine), answers.on("b-2"))
            answers.wait(["b-1", "b-2"])
            a.send(Stream.GROUP, describe("a-2", mine), answers.on("a-2"))
            answers.wait(["a-2"])
            # each client's answers reach the other too (same partition), and are dropped there
            poll_until(
                lambda: (a.strangers, b.strangers) == (2, 1),
                what="a stranger for each of the other client's answers on the partition",
            )
        assert answers.got["a-1"][0]["group_id"] == mine
        assert answers.got["b-1"][0]["group_id"] == theirs
        counts = {e: len(rows) for e, rows in answers.got.items()}
        assert counts == {"a-1": 1, "b-1": 1, "b-2": 1, "a-2": 1}
        assert a.delivered == 2
        assert b.delivered == 2
    finally:
        a.close()
        b.close()


def test_a_duplicate_answer_is_delivered_once(
    kafka_broker: LocalBroker, topics: Topics, transport: Any, clock: RealClock
) -> None:
    answers = Answers(clock)
    twice = {"d-2", "d-4"}
    with EchoEngine(
        kafka_broker, topics.requests, topics.answers, duplicate=lambda r: r["event_id"] in twice
    ) as engine:
        ids = [f"d-{i}" for i in range(5)]
        for event_id in ids:
            transport.send(Stream.GROUP, describe(event_id, "dupes"), answers.on(event_id))
        answers.wait(ids)
        poll_until(lambda: transport.answers_read == 7, what="all seven answers read")
        assert len(engine.answers) == 7
    assert {e: len(rows) for e, rows in answers.got.items()} == dict.fromkeys(ids, 1)
    assert transport.duplicates == 2
    assert transport.strangers == 0


def test_the_answers_partitions_history_is_not_read(
    kafka_broker: LocalBroker, topics: Topics, clock: RealClock
) -> None:
    """An answer already on the partition before the client positioned itself (here: an old
    answer carrying the very event_id the client is about to use) is never delivered."""
    partition = produce_answer(
        kafka_broker,
        topics.answers,
        "history",
        {"event_id": "h-1", "group_id": "history", "answered": "an old batch"},
    )
    assert partition == answer_partition("history", ANSWER_PARTITIONS)
    transport = connect(kafka_broker, topics, clock)
    answers = Answers(clock)
    try:
        with EchoEngine(kafka_broker, topics.requests, topics.answers):
            transport.send(Stream.GROUP, describe("h-1", "history"), answers.on("h-1"))
            answers.wait(["h-1"])
        assert [row["answered"] for row in answers.got["h-1"]] == ["describe"]
        assert transport.positions() == {answer_partition("history", ANSWER_PARTITIONS): 1}
    finally:
        transport.close()


def test_a_request_goes_out_only_once_its_answers_partition_is_positioned(
    kafka_broker: LocalBroker, topics: Topics, clock: RealClock
) -> None:
    """The stand-in answers the moment it reads a request, and this client's reader takes up
    to 2 s between looks (a slow reader thread): a request produced before its answers
    partition is positioned would be answered before the client starts at the partition's
    end, and its answer missed. Each request here is the first on its partition."""
    transport = connect(kafka_broker, topics, clock, poll_interval_ms=2_000)
    answers = Answers(clock)
    firsts = [groups_on(partition, 1, prefix="first")[0] for partition in range(8)]
    try:
        with EchoEngine(kafka_broker, topics.requests, topics.answers) as engine:
            for index, group in enumerate(firsts):
                event_id = f"p-{index}"
                transport.send(Stream.GROUP, describe(event_id, group), answers.on(event_id))
            answers.wait([f"p-{i}" for i in range(len(firsts))])
            assert engine.error is None
        assert set(transport.positions()) == set(range(ANSWER_PARTITIONS))
    finally:
        transport.close()


def test_a_request_forgotten_before_its_partition_was_positioned_is_not_produced(
    kafka_broker: LocalBroker, topics: Topics, transport: Any, clock: RealClock
) -> None:
    answers = Answers(clock)
    with EchoEngine(kafka_broker, topics.requests, topics.answers) as engine:
        transport.send(Stream.GROUP, describe("gone", "forgetful"), answers.on("gone"))
        transport.forget("gone")  # the caller timed out at once (the reader had no time yet)
        transport.send(Stream.GROUP, describe("kept", "forgetful"), answers.on("kept"))
        answers.wait(["kept"])
        assert [r["event_id"] for r in engine.seen(group_id="forgetful")] == ["kept"]
    assert "gone" not in answers.got


def test_close_stops_promptly_and_later_sends_fail(
    kafka_broker: LocalBroker, topics: Topics, clock: RealClock
) -> None:
    transport = connect(kafka_broker, topics, clock)
    answers = Answers(clock)
    with EchoEngine(kafka_broker, topics.requests, topics.answers, hold=lambda r: True):
        transport.send(Stream.GROUP, describe("c-1", "closing"), answers.on("c-1"))
        poll_until(lambda: transport.positions(), what="the partition positioned")
        started = time.monotonic()
        transport.close()  # the reader is waiting in a fetch for an answer that never comes
        took_s = time.monotonic() - started
    assert took_s < 4.0, f"close took {took_s:.1f} s"  # the reader's join would wait 5 s
    assert not transport.reading
    with pytest.raises(RuntimeError, match="closed"):
        transport.send(Stream.GROUP, describe("c-2", "closing"), answers.on("c-2"))
    assert answers.got == {}


def test_a_missing_topic_fails_the_start_with_its_name(
    kafka_broker: LocalBroker, topics: Topics, clock: RealClock
) -> None:
    missing = Topics(topics.coordinator, topics.quota, f"no-such-{uuid.uuid4().hex[:6]}")
    with pytest.raises(ValueError, match="no-such-"):
        connect(kafka_broker, missing, clock, metadata_timeout_ms=2_000)


# --- real clients over Kafka, the real cores behind the stand-in ---------------------------

SETTINGS = parse_settings(
    {
        "group.initial.rebalance.delay.ms": 500,
        "group.min.session.timeout.ms": 1000,
        "quotas": [{"user": "alice", "controller_mutation_rate": 2}],  # burst 22 mutations
    }
)


class App:
    """A member polled by its own thread, as an application would."""

    def __init__(self, member: GroupMember) -> None:
        self.member = member
        self.records: list[Record] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.records.extend(self.member.poll(200))
        except BaseException as error:
            self.error = error

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.member.close(10_000)


def test_group_members_and_an_admin_over_kafka_with_the_real_cores(
    kafka_broker: LocalBroker, topics: Topics, clock: RealClock
) -> None:
    log = InMemoryLog(clock)
    log.create_topic("events", 4)
    for partition in range(4):
        log.append("events", partition, [f"e{partition}-{i}" for i in range(30)])
    transports: list[Any] = []
    apps: list[App] = []

    def member(name: str) -> GroupMember:
        transports.append(connect(kafka_broker, topics, clock, client_id=name))
        config = ConsumerConfig(
            group_id="over-kafka",
            topics=("events",),
            client_id=name,
            session_timeout_ms=6_000,
            heartbeat_interval_ms=500,
            max_poll_interval_ms=10_000,
            request_timeout_ms=5_000,
            max_poll_records=10,
        )
        return GroupMember(config, transports[-1], clock, log, auto_offset_reset="earliest")

    engine = EchoEngine(kafka_broker, topics.requests, topics.answers, Cores(SETTINGS))
    try:
        apps = [App(member("m1")), App(member("m2"))]

        def split() -> bool:
            stable = all(a.member.state is MemberState.STABLE for a in apps)
            return stable and [len(a.member.assignment()) for a in apps] == [2, 2]

        poll_until(split, 30, "two members sharing four partitions")
        owned = [set(a.member.assignment()) for a in apps]
        assert owned[0].isdisjoint(owned[1])
        poll_until(lambda: sum(len(a.records) for a in apps) >= 120, 30, "every record")
        generation = apps[0].member.generation.generation_id
        heartbeats = len(engine.seen(type="heartbeat"))
        time.sleep(2)  # four heartbeat intervals: heartbeats go on, the generation holds
        assert len(engine.seen(type="heartbeat")) >= heartbeats + 2
        assert apps[0].member.generation.generation_id == generation

        transports.append(connect(kafka_broker, topics, clock, principal="alice"))
        admin = AdminClient(AdminConfig(user="alice", client_id="admin"), transports[-1], clock)
        results = admin.create_topics({f"t{i}": 6 for i in range(5)}, timeout_ms=30_000)
        assert all(r.ok for r in results.values()), results
        assert max(r.attempts for r in results.values()) > 1  # 30 mutations > a burst of 22

        apps[1].close()  # a dynamic member leaves: the other takes everything
        poll_until(lambda: len(apps[0].member.assignment()) == 4, 30, "the survivor's takeover")
        assert apps[0].member.generation.generation_id > generation
        assert [a.error for a in apps] == [None, None]
        assert engine.error is None
        assert len(engine.seen(type="leave")) == 1
    finally:
        for app in apps:
            if app.member.state is not MemberState.CLOSED:
                app.close()
        for transport in transports:
            transport.close()
        engine.stop()
    assert sum(t.produce_errors for t in transports) == 0
