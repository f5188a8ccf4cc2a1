"""Both queries reading Kafka topics on the local broker through Spark's Kafka source
(``spark-sql-kafka-0-10``), end to end: the coordinator answers a multi-partition topic as the
replay answers the file, batches stay under ``max_records_per_trigger``, the quota takes the
principal from exactly one header, poison records land in ``rejected_events`` while the query
lives on, a restart from the checkpoint answers every request exactly once in Delta, the answers
topic carries every decision under its key, and a topic with CreateTime timestamps is refused.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.listener import StreamingQueryProgress

from controlplane.core.config import parse_settings
from controlplane.engine.options import AnswersOrder, EngineOptions, Keying, TimeMode
from controlplane.engine.progress import records_left_unread
from controlplane.engine.queries import build_coordinator_query, build_quota_query
from controlplane.io.broker import LocalBroker
from controlplane.io.options import SourceOptions
from kafka_broker.conftest import poll_until
from spark.conftest import assert_same_rows, read_table, run_to_end, wait_for
from spark.test_coordinator_engine import canonical, events_with_final_tick, replay

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

LOG_APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}
# Where an INVALID_REQUEST message says the request came from: ``file:line`` or
# ``topic/partition/offset``.
POSITION = re.compile(r"^\S*?(?:\.jsonl:\d+|/\d+/\d+): ")


def new_topic(broker: LocalBroker, prefix: str, partitions: int = 1, **config: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    broker.create_topic(name, partitions, {**LOG_APPEND_TIME, **config})
    return name


Record = tuple[str | None, bytes | None, list[tuple[str, bytes]]]


def produce(broker: LocalBroker, topic: str, records: list[Record], **config: Any) -> list[Any]:
    """Send every record (key, value, headers), wait for all; returns their metadata."""
    from kafka import KafkaProducer

    producer = KafkaProducer(**broker.client_config(), acks="all", linger_ms=5, **config)
    try:
        futures = [
            producer.send(
                topic,
                key=None if key is None else key.encode(),
                value=value,
                headers=headers,
            )
            for key, value, headers in records
        ]
        producer.flush(timeout=60)
        return [future.get(timeout=1) for future in futures]
    finally:
        producer.close()


def consume_all(broker: LocalBroker, topic: str) -> list[Any]:
    """Every record of every partition, up to the end offsets of now."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**broker.client_config(), enable_auto_commit=False)
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(partitions)
        got: list[Any] = []
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            for batch in consumer.poll(timeout_ms=1000).values():
                got.extend(batch)
        return got
    finally:
        consumer.close()


def kafka_source(broker: LocalBroker, topic: str, **fields: Any) -> SourceOptions:
    return SourceOptions(
        format="kafka", path=topic, kafka_bootstrap_servers=broker.bootstrap_servers, **fields
    )


def partition_of(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner (murmur2 of the key), as a client computes it."""
    from kafka.partitioner.default import murmur2

    return int((murmur2(key) & 0x7FFFFFFF) % partitions)


def without_position(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {**row, "error_message": POSITION.sub("", row["error_message"] or "") or None}
        for row in rows
    ]


def group_key(line: str) -> str | None:
    try:
        event = json.loads(line)
    except ValueError:
        return None
    group = event.get("group_id") if isinstance(event, dict) else None
    return group if isinstance(group, str) else None


def test_the_coordinator_answers_a_kafka_topic_as_the_replay_answers_the_file(
    spark: Any, kafka_broker: LocalBroker, tmp_path: Path
) -> None:
    """The sample traffic on a 3-partition topic keyed by group (one group's requests in one
    partition, in order), read in event time with availableNow: the same decisions and group
    events as the replay of the file, nothing dropped by the watermark; the answers topic
    carries every decision, keyed and partitioned by its group, as the Delta row."""
    events = events_with_final_tick(tmp_path)
    expected = replay(events, tmp_path / "replay")
    requests = new_topic(kafka_broker, "coordinator-requests", 3)
    answers = new_topic(kafka_broker, "coordinator-answers", 3)
    lines = events.read_text().splitlines()
    sent = produce(kafka_broker, requests, [(group_key(line), line.encode(), []) for line in lines])
    assert len({meta.partition for meta in sent}) > 1
    options = EngineOptions(
        mode=TimeMode.EVENT_TIME,
        watermark_delay_ms=60_000,
        keying=Keying.SHARD,
        shards=4,
        checkpoint_root=str(tmp_path / "checkpoints"),
        tables_root=str(tmp_path / "tables"),
        writer="delta-rs",
        coordinator_source=kafka_source(kafka_broker, requests),
        answers_topic=answers,
    )
    progress = run_to_end(
        build_coordinator_query(spark, parse_settings({}), options=options, available_now=True)
    )
    dropped = sum(
        int(op["numRowsDroppedByWatermark"]) for p in progress for op in p["stateOperators"]
    )
    assert dropped == 0
    tables = Path(options.tables_root)
    decisions = read_table(tables / "decisions")
    answered = [r for r in expected["decisions"] if r.get("event_id") is not None]
    assert_same_rows(
        spark, canonical(without_position(decisions)), canonical(without_position(answered))
    )
    assert_same_rows(
        spark, canonical(read_table(tables / "group_events")), canonical(expected["group_events"])
    )
    # INVALID_REQUEST names the record: topic/partition/offset
    audit = next(r for r in decisions if r["event_id"] == "aud-035")
    where = sent[next(i for i, line in enumerate(lines) if '"aud-035"' in line)]
    assert audit["error_message"].startswith(f"{requests}/{where.partition}/{where.offset}: ")
    [rejected] = read_table(tables / "rejected_events")
    assert rejected["raw"].startswith('{"event_id": "bad-1"')
    bad = sent[next(i for i, line in enumerate(lines) if '"bad-1"' in line)]
    assert rejected["source"] == f"{requests}/{bad.partition}/{bad.offset}"

    published = consume_all(kafka_broker, answers)
    assert len(published) == len(decisions)
    for record in published:
        row = json.loads(record.value)
        assert record.key == row["group_id"].encode()
        assert record.partition == partition_of(record.key, 3)
        assert dict(record.headers) == {"table": b"decisions"}
    assert sorted(json.dumps(json.loads(r.value), sort_keys=True) for r in published) == sorted(
        json.dumps(row, sort_keys=True) for row in decisions
    )


def describe(event_id: str, group: str, time_ms: int = 1_000) -> bytes:
    return json.dumps(
        {"event_id": event_id, "event_time_ms": time_ms, "type": "describe", "group_id": group}
    ).encode()


def test_max_records_per_trigger_bounds_every_batch(
    spark: Any, kafka_broker: LocalBroker, tmp_path: Path
) -> None:
    """A backlog of 40 requests on 2 partitions, at most 7 records a micro-batch (Spark's
    maxOffsetsPerTrigger): no batch reads more, so at least 6 read some, and every request is
    answered once. Each batch but the last says how many records it left unread (the source
    metric the progress log warns of)."""
    requests = new_topic(kafka_broker, "capped", 2)
    produce(
        kafka_broker,
        requests,
        [(f"g{i % 5}", describe(f"d{i}", f"g{i % 5}"), []) for i in range(40)],
    )
    options = EngineOptions(
        mode=TimeMode.EVENT_TIME,
        watermark_delay_ms=60_000,
        keying=Keying.SHARD,
        shards=2,
        checkpoint_root=str(tmp_path / "checkpoints"),
        tables_root=str(tmp_path / "tables"),
        writer="delta-rs",
        coordinator_source=kafka_source(kafka_broker, requests, max_records_per_trigger=7),
    )
    progress = run_to_end(
        build_coordinator_query(spark, parse_settings({}), options=options, available_now=True)
    )
    sizes = [int(p["numInputRows"]) for p in progress if p["numInputRows"]]
    unread = [records_left_unread(StreamingQueryProgress.fromJson(p)) for p in progress]
    assert unread[0] >= (40 - 7) // 2  # the fuller of the two partitions
    assert unread[-1] == 0
    assert sum(sizes) == 40
    assert max(sizes) <= 7
    assert len(sizes) >= 6
    answered = Counter(r["event_id"] for r in read_table(Path(options.tables_root) / "decisions"))
    assert answered == Counter(f"d{i}" for i in range(40))


QUOTAS = parse_settings(
    {
        "quotas": [
            {"user": "<default>", "controller_mutation_rate": 10},
            {"user": "alice", "controller_mutation_rate": 1000},
        ]
    }
)


def mutation(event_id: str, user: str | None = None) -> bytes:
    event = {
        "event_id": event_id,
        "event_time_ms": 1_767_225_600_000,
        "type": "create_topics",
        "client_id": "console",
        "request_version": 7,
        "topics": [{"name": f"t-{event_id}", "partitions": 3}],
    }
    if user is not None:
        event["user"] = user
    return json.dumps(event).encode()


def test_the_quota_takes_the_principal_from_exactly_one_header_over_sasl(
    spark: Any, kafka_broker: LocalBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quota query reads its topic as alice over SASL/PLAIN, the password given by
    reference (${ENV:...}). The header ``user`` is the principal: a payload ``user`` neither
    overrides it nor stands in for it. A request with no such header, two of them, or an
    empty one goes to rejected_events with the reason; the answers topic gets the rest, keyed
    by the principal."""
    monkeypatch.setenv("CP_TEST_KAFKA_PASSWORD", kafka_broker.users["alice"])
    requests = new_topic(kafka_broker, "mutations", 2)
    answers = new_topic(kafka_broker, "quota-answers", 2)
    alice = [("user", b"alice")]
    records: list[Record] = [
        ("alice", mutation("claims-mallory", user="mallory"), alice),
        ("alice", mutation("no-claim"), alice),
        ("mallory", mutation("no-header", user="mallory"), [("x-user", b"mallory")]),
        ("bob", mutation("no-headers-at-all", user="bob"), []),
        ("alice", mutation("two-headers"), [("user", b"alice"), ("user", b"bob")]),
        ("alice", mutation("empty-header", user="alice"), [("user", b"")]),
    ]
    sent = produce(kafka_broker, requests, records)
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="alice" password="${ENV:CP_TEST_KAFKA_PASSWORD}";'
    )
    source = SourceOptions(
        format="kafka",
        path=requests,
        kafka_bootstrap_servers=kafka_broker.sasl_bootstrap_servers,
        kafka_options={
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": jaas,
        },
    )
    options = EngineOptions(
        mode=TimeMode.EVENT_TIME,
        watermark_delay_ms=60_000,
        keying=Keying.SHARD,
        shards=2,
        checkpoint_root=str(tmp_path / "checkpoints"),
        tables_root=str(tmp_path / "tables"),
        writer="delta-rs",
        quota_source=source,
        answers_topic=answers,
    )
    run_to_end(build_quota_query(spark, QUOTAS, options=options, available_now=True))
    tables = Path(options.tables_root)
    decided = {r["event_id"]: r for r in read_table(tables / "quota_decisions")}
    assert sorted(decided) == ["claims-mallory", "no-claim"]
    for row in decided.values():
        assert (row["user"], row["quota_key"], row["rate_per_s"]) == ("alice", "user=alice", 1000.0)
    rejected = {json.loads(r["raw"])["event_id"]: r for r in read_table(tables / "rejected_events")}
    assert rejected["no-header"]["reason"].startswith("no 'user' header")
    assert rejected["no-headers-at-all"]["reason"].startswith("no 'user' header")
    assert rejected["two-headers"]["reason"].startswith("2 'user' headers")
    assert rejected["empty-header"]["reason"] == "the 'user' header has no UTF-8 value"
    assert rejected["no-header"]["source"] == f"{requests}/{sent[2].partition}/{sent[2].offset}"
    assert len(rejected) == 4
    published = consume_all(kafka_broker, answers)
    assert sorted(json.loads(r.value)["event_id"] for r in published) == sorted(decided)
    for record in published:
        assert record.key == b"alice"
        assert record.partition == partition_of(b"alice", 2)
        assert dict(record.headers) == {"table": b"quota_decisions"}


def processing_time_options(tmp_path: Path, source: SourceOptions, **fields: Any) -> EngineOptions:
    return EngineOptions(
        trigger_interval_ms=500,
        keying=Keying.SHARD,
        shards=2,
        checkpoint_root=str(tmp_path / "checkpoints"),
        tables_root=str(tmp_path / "tables"),
        writer="delta-rs",
        coordinator_source=source,
        **fields,
    )


def answered(tables: Path, query: Any, event_ids: set[str], what: str) -> list[dict[str, Any]]:
    def check() -> list[dict[str, Any]] | None:
        rows = read_table(tables / "decisions")
        return rows if event_ids <= {r["event_id"] for r in rows} else None

    rows: list[dict[str, Any]] = wait_for(check, query, what=what)
    return rows


def set_topic_config(broker: LocalBroker, topic: str, key: str, value: str) -> None:
    """Change a topic's config and wait until the broker describes it so."""
    from kafka.admin import ConfigResource

    admin = broker.admin()
    try:
        admin.alter_configs([ConfigResource("TOPIC", topic, {key: value})])
        poll_until(
            lambda: (
                admin.describe_configs(
                    [ConfigResource("TOPIC", topic, [key])], config_filter="all"
                )["topic"][topic][key]["value"]
                == value
            ),
            what=f"{topic}: {key}={value}",
        )
    finally:
        admin.close()


def test_poison_records_go_to_rejected_events_and_the_query_lives_on(
    spark: Any, kafka_broker: LocalBroker, tmp_path: Path
) -> None:
    """Records the source refuses (a 2 MB value, bytes that are not UTF-8, a null value, a
    record stamped with CreateTime after the topic was switched to it) and texts that are not a
    JSON object land in rejected_events with their reason; a request with fields of the wrong
    type is answered INVALID_REQUEST; requests after each are answered: the query lives on."""
    requests = new_topic(kafka_broker, "poison", 2, **{"max.message.bytes": str(4 << 20)})
    options = processing_time_options(tmp_path, kafka_source(kafka_broker, requests))
    tables = Path(options.tables_root)
    huge = json.dumps(
        {"event_id": "huge", "type": "describe", "group_id": "g", "x": "y" * (2 << 20)}
    )
    wrong_types = {"event_id": "wrong-types", "type": "describe", "group_id": "g"}
    wrong_types["event_time_ms"] = "yesterday"  # type: ignore[assignment]
    poison: list[Record] = [
        ("g", b"this is not json", []),
        ("g", huge.encode(), []),
        ("g", b'{"event_id": "latin-1", "group_id": "caf\xe9"}', []),
        ("g", None, []),
        ("g", b"[1, 2, 3]", []),
        ("g", json.dumps(wrong_types).encode(), []),
        ("g", describe("after-poison", "g"), []),
    ]
    query = build_coordinator_query(spark, parse_settings({}), options=options).start()
    try:
        produce(kafka_broker, requests, poison, max_request_size=8 << 20)
        rows = answered(tables, query, {"after-poison", "wrong-types"}, "the answers after poison")
        wrong = next(r for r in rows if r["event_id"] == "wrong-types")
        assert wrong["error"] == "INVALID_REQUEST"
        assert POSITION.sub("", wrong["error_message"]).startswith("event_time_ms: ")
        reasons = {r["reason"].split(":")[0] for r in read_table(tables / "rejected_events")}
        assert reasons == {
            "not JSON",
            "too large",
            "not UTF-8",
            "no value (a null record)",
            "not a JSON object",
        }
        rejected = {r["reason"].split(":")[0]: r for r in read_table(tables / "rejected_events")}
        assert rejected["too large"]["reason"] == (
            f"too large: {len(huge)} bytes, over max_record_bytes (1048576)"
        )
        assert len(rejected["too large"]["raw"]) == 4096
        assert rejected["not UTF-8"]["raw"] == '{"event_id": "latin-1", "group_id": "caf\ufffd"}'
        # The topic switched to CreateTime under a running query: refused per record.
        set_topic_config(kafka_broker, requests, "message.timestamp.type", "CreateTime")
        produce(kafka_broker, requests, [("g", describe("create-time", "g"), [])])
        stamped = wait_for(
            lambda: [
                r
                for r in read_table(tables / "rejected_events")
                if "create-time" in (r["raw"] or "")
            ],
            query,
            what="the CreateTime record in rejected_events",
        )
        assert stamped[0]["reason"] == (
            "timestamp type CreateTime: the topic must use message.timestamp.type=LogAppendTime"
        )
        set_topic_config(kafka_broker, requests, "message.timestamp.type", "LogAppendTime")
        produce(kafka_broker, requests, [("g", describe("still-alive", "g"), [])])
        answered(tables, query, {"still-alive"}, "an answer after the CreateTime record")
        assert query.isActive
    finally:
        query.stop()
    assert "create-time" not in {r["event_id"] for r in read_table(tables / "decisions")}


def test_a_restart_from_the_checkpoint_answers_every_request_exactly_once(
    spark: Any, kafka_broker: LocalBroker, tmp_path: Path
) -> None:
    """Stopped in the middle of a backlog (3 records a batch), more requests produced while it
    is down, restarted from its checkpoint: every request answered exactly once in Delta, and
    at least once on the answers topic, each answer carrying its event_id."""
    requests = new_topic(kafka_broker, "restart", 3)
    answers = new_topic(kafka_broker, "restart-answers", 3)
    source = kafka_source(kafka_broker, requests, max_records_per_trigger=3)
    options = processing_time_options(tmp_path, source, answers_topic=answers)
    tables = Path(options.tables_root)
    first = {f"a{i}" for i in range(45)}
    produce(
        kafka_broker,
        requests,
        [(f"g{i % 4}", describe(f"a{i}", f"g{i % 4}"), []) for i in range(45)],
    )
    query = build_coordinator_query(spark, parse_settings({}), options=options).start()
    try:
        wait_for(lambda: read_table(tables / "decisions"), query, what="the first answers")
    finally:
        query.stop()
    done = {r["event_id"] for r in read_table(tables / "decisions")}
    assert 0 < len(done) < len(first), "stopped in the middle of the backlog"
    second = {f"b{i}" for i in range(15)}
    produce(
        kafka_broker,
        requests,
        [(f"g{i % 4}", describe(f"b{i}", f"g{i % 4}"), []) for i in range(15)],
    )
    query = build_coordinator_query(spark, parse_settings({}), options=options).start()

    def published_ids() -> set[str] | None:
        ids = {json.loads(r.value)["event_id"] for r in consume_all(kafka_broker, answers)}
        return ids if first | second <= ids else None

    try:
        answered(tables, query, first | second, "every request after the restart")
        # after_delta: a batch's answers are published once its tables are written, so the
        # last batch's may still be on their way when Delta shows them
        wait_for(published_ids, query, what="every answer on the topic")
    finally:
        query.stop()
    counts = Counter(r["event_id"] for r in read_table(tables / "decisions"))
    assert counts == Counter(first | second)  # nothing lost, nothing twice
    published = Counter(json.loads(r.value)["event_id"] for r in consume_all(kafka_broker, answers))
    assert set(published) == first | second


@pytest.mark.parametrize("order", list(AnswersOrder))
def test_an_answer_that_cannot_be_produced_fails_the_batch_after_delta_and_is_produced_on_replay(
    spark: Any, kafka_broker: LocalBroker, tmp_path: Path, order: AnswersOrder
) -> None:
    """The answers topic refuses the batch's records (its max.message.bytes shrunk under the
    running query): the batch fails after its Delta tables are written, and so does the query.
    Restarted once the topic takes them again, the batch runs again: Delta skips what it has
    (one decision per request) and the answers are produced. In either order: published
    beside the Delta writes (``with_delta``), the batch still ends with both."""
    requests = new_topic(kafka_broker, "replayed", 1)
    answers = new_topic(kafka_broker, "replayed-answers", 1)
    options = processing_time_options(
        tmp_path,
        kafka_source(kafka_broker, requests),
        answers_topic=answers,
        answers_timeout_ms=5000,
        answers_order=order,
    )
    tables = Path(options.tables_root)
    query = build_coordinator_query(spark, parse_settings({}), options=options).start()
    try:
        produce(kafka_broker, requests, [("g", describe("r1", "g"), [])])
        answered(tables, query, {"r1"}, "r1")
        wait_for(lambda: consume_all(kafka_broker, answers), query, what="r1 on the answers topic")
        set_topic_config(kafka_broker, answers, "max.message.bytes", "64")
        produce(kafka_broker, requests, [("g", describe("r2", "g"), [])])
        with pytest.raises(Exception, match="answers topic"):
            query.awaitTermination(300)
    finally:
        query.stop()
    assert Counter(r["event_id"] for r in read_table(tables / "decisions")) == {"r1": 1, "r2": 1}
    assert [json.loads(r.value)["event_id"] for r in consume_all(kafka_broker, answers)] == ["r1"]
    set_topic_config(kafka_broker, answers, "max.message.bytes", str(1 << 20))
    query = build_coordinator_query(spark, parse_settings({}), options=options).start()
    try:
        wait_for(
            lambda: len(consume_all(kafka_broker, answers)) >= 2, query, what="r2 after the replay"
        )
    finally:
        query.stop()
    assert Counter(r["event_id"] for r in read_table(tables / "decisions")) == {"r1": 1, "r2": 1}
    published = [json.loads(r.value) for r in consume_all(kafka_broker, answers)]
    assert [row["event_id"] for row in published] == ["r1", "r2"]
    r2 = next(r for r in read_table(tables / "decisions") if r["event_id"] == "r2")
    # the row as Delta holds it (written by the failed attempt), but for when the replay ran
    assert published[1]["processed_at_ms"] > r2["processed_at_ms"]
    assert {**published[1], "processed_at_ms": None} == {**r2, "processed_at_ms": None}
