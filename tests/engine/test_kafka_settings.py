"""The Kafka side of the engine without a broker: source and answers settings, secret
references, the translation of Kafka's client properties for the engine's own Python clients,
the answers a batch publishes (after its Delta tables), and records the source refused."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd
import pyarrow as pa
import pytest

from controlplane.core.config import ConfigError, parse_settings
from controlplane.engine import batch, launch
from controlplane.engine.adapter import StateFunction, input_row, parse_row
from controlplane.engine.batch import BatchSink
from controlplane.engine.envelope import envelope_table
from controlplane.engine.keying import SparkKeys
from controlplane.engine.options import (
    AnswersOrder,
    EngineOptions,
    Keying,
    TimeMode,
    parse_engine_options,
)
from controlplane.engine.queries import QuotaKeyer
from controlplane.engine.reload import SettingsSource
from controlplane.engine.secrets import resolve, resolve_mapping
from controlplane.io.answers import AnswersNotDelivered, AnswersPublisher, answer_records
from controlplane.io.kafka_clients import KafkaSetupError, python_client_config
from controlplane.io.options import MAX_RECORDS_PER_TRIGGER, KafkaEndpoint, SourceOptions
from controlplane.io.sources import FETCH_MAX_WAIT_MS, kafka_reader_options
from engine.fakes import CountingRunner, FakeGroupState, FakeSpark

JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule required"


def kafka(**source: Any) -> dict[str, Any]:
    return {"format": "kafka", "path": "requests", "kafka_bootstrap_servers": "b:9092", **source}


def parse(sources: dict[str, Any], engine: dict[str, Any] | None = None) -> EngineOptions:
    return parse_engine_options(parse_settings({"sources": sources, "engine": engine or {}}))


# --- source settings ---------------------------------------------------------------------


def test_a_kafka_source_starts_from_the_earliest_offsets_by_default() -> None:
    """``latest`` (Spark's default) would skip the backlog on a first start and after every
    checkpoint reset."""
    source = parse({"quota": kafka()}).quota_source
    assert source is not None
    assert source.starting_offsets == "earliest"
    assert source.max_records_per_trigger == MAX_RECORDS_PER_TRIGGER
    # Neither a steady batch at the issue-14 load (10,200 events/s) nor the join burst's is
    # capped: its batches took up to 11.5 s, and heartbeats left unread past the members' 6-s
    # session expired them (docs/engine.md, "The cap and the members' sessions"). Twice that.
    assert MAX_RECORDS_PER_TRIGGER >= 2 * 12 * 10_200
    assert SourceOptions("kafka", "t").max_records_per_trigger == MAX_RECORDS_PER_TRIGGER
    offsets = {"requests": {"0": 42, "1": -2}}
    again = parse({"quota": kafka(starting_offsets=offsets, max_records_per_trigger=500)})
    assert again.quota_source is not None
    assert json.loads(again.quota_source.starting_offsets) == offsets
    assert again.quota_source.max_records_per_trigger == 500


def test_the_source_lets_the_broker_hold_an_empty_fetch_briefly_unless_told_otherwise() -> None:
    """The consumer's fetch sent ahead at the end of a batch's range would otherwise hold up
    the next batch's first poll for up to Kafka's default 500 ms a partition."""
    source = parse({"coordinator": kafka(max_records_per_trigger=500)}).coordinator_source
    assert source is not None
    assert kafka_reader_options(source) == {
        "kafka.bootstrap.servers": "b:9092",
        "subscribe": "requests",
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "500",
        "includeHeaders": "true",
        "failOnDataLoss": "true",
        "kafka.fetch.max.wait.ms": str(FETCH_MAX_WAIT_MS),
    }
    assert FETCH_MAX_WAIT_MS < 500
    options = {"fetch.max.wait.ms": "200", "security.protocol": "SSL"}
    told = parse({"coordinator": kafka(kafka_options=options)}).coordinator_source
    assert told is not None
    chosen = kafka_reader_options(told)
    assert chosen["kafka.fetch.max.wait.ms"] == "200"
    assert chosen["kafka.security.protocol"] == "SSL"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (kafka(max_files_per_trigger=10), r"\['max_files_per_trigger'\] do not apply to format "),
        (kafka(clean_source="delete"), "do not apply to format kafka"),
        ({"path": "in", "max_records_per_trigger": 5}, "do not apply to format jsonl"),
        ({"path": "in", "kafka_options": {"a": "b"}}, "do not apply to format jsonl"),
        (kafka(starting_offsets="oldest"), "starting_offsets: expected earliest, latest"),
        (kafka(starting_offsets="[1]"), "starting_offsets"),
        (kafka(max_records_per_trigger=0), "max_records_per_trigger: expected an integer >= 1"),
        (kafka(max_record_bytes=True), "max_record_bytes"),
        (kafka(kafka_options=["security.protocol"]), "kafka_options: expected a mapping"),
        (
            kafka(kafka_options={"kafka.security.protocol": "SSL"}),
            "write the Kafka property name 'security.protocol' without kafka.",
        ),
        (kafka(kafka_options={"bootstrap.servers": "x"}), "use kafka_bootstrap_servers"),
        (kafka(kafka_options={"auto.offset.reset": "latest"}), "use starting_offsets"),
        (kafka(kafka_options={"value.deserializer": "x"}), "reads bytes"),
        (kafka(kafka_options={"request.timeout.ms": [1]}), "expected a string, number or bool"),
        (
            kafka(kafka_options={"sasl.jaas.config": f'{JAAS} username="u" password="hunter2";'}),
            "the JAAS password must be a secret reference",
        ),
        (
            kafka(kafka_options={"ssl.truststore.password": "changeit"}),
            "a password must be a secret reference, not inline",
        ),
        (
            kafka(kafka_options={"ssl.key.password": "{{secrets/scope}}"}),
            "malformed secret reference",
        ),
        (kafka(kafka_options={"sasl.jaas.config": "x ${ENV:}"}), "malformed secret reference"),
    ],
)
def test_bad_kafka_source_settings_are_refused_naming_the_key(
    source: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        parse({"coordinator": source})
    assert "sources.coordinator" in str(error.value)
    assert "hunter2" not in str(error.value)
    assert "changeit" not in str(error.value)


def test_kafka_options_are_kafka_property_names_with_text_values() -> None:
    jaas = f'{JAAS} username="{{{{secrets/kafka/user}}}}" password="${{ENV:KAFKA_PASSWORD}}";'
    source = parse(
        {
            "coordinator": kafka(
                kafka_options={
                    "security.protocol": "SASL_SSL",
                    "sasl.jaas.config": jaas,
                    "request.timeout.ms": 20000,
                    "ssl.endpoint.identification.algorithm": "",
                    "check.crcs": True,
                }
            )
        }
    ).coordinator_source
    assert source is not None
    assert source.kafka_options == {
        "security.protocol": "SASL_SSL",
        "sasl.jaas.config": jaas,
        "request.timeout.ms": "20000",
        "ssl.endpoint.identification.algorithm": "",
        "check.crcs": "true",
    }
    assert "kafka_options" not in repr(source)  # resolved, they are credentials


# --- answers settings ----------------------------------------------------------------------


def test_the_answers_go_to_the_brokers_of_a_kafka_source_by_default() -> None:
    options = parse(
        {"coordinator": kafka(kafka_options={"security.protocol": "SSL"})},
        {"answers_topic": "answers"},
    )
    assert options.coordinator_source is not None
    endpoint = options.answers_endpoint(options.coordinator_source)
    assert endpoint == KafkaEndpoint("b:9092", {"security.protocol": "SSL"})


def test_answers_settings_of_their_own_win() -> None:
    options = parse(
        {"coordinator": {"path": "in"}, "quota": kafka()},
        {
            "answers_topic": "answers",
            "answers_bootstrap_servers": "other:9093",
            "answers_kafka_options": {"security.protocol": "SASL_SSL"},
            "answers_timeout_ms": 5000,
            "answers_order": "with_delta",
        },
    )
    assert options.coordinator_source is not None
    assert options.quota_source is not None
    for source in (options.coordinator_source, options.quota_source):
        assert options.answers_endpoint(source) == KafkaEndpoint(
            "other:9093", {"security.protocol": "SASL_SSL"}
        )
    assert options.answers_timeout_ms == 5000
    assert options.answers_order is AnswersOrder.WITH_DELTA


def test_the_answers_wait_for_delta_unless_told() -> None:
    options = parse({"coordinator": kafka()}, {"answers_topic": "answers"})
    assert options.answers_order is AnswersOrder.AFTER_DELTA
    assert EngineOptions().answers_order is AnswersOrder.AFTER_DELTA


@pytest.mark.parametrize(
    ("sources", "engine", "message"),
    [
        ({"coordinator": {"path": "in"}}, {"answers_topic": "a"}, "answers_bootstrap_servers"),
        ({"coordinator": kafka()}, {"answers_timeout_ms": 5000}, "need engine.answers_topic"),
        ({"coordinator": kafka()}, {"answers_order": "with_delta"}, "need engine.answers_topic"),
        (
            {"coordinator": kafka()},
            {"answers_topic": "a", "answers_order": "before_delta"},
            "engine.answers_order: expected one of after_delta, with_delta, got 'before_delta'",
        ),
        ({"coordinator": kafka()}, {"answers_topic": ""}, "engine.answers_topic"),
        (
            {"coordinator": kafka()},
            {"answers_topic": "a", "answers_kafka_options": {"sasl.password": "x"}},
            "engine.answers_kafka_options.sasl.password",
        ),
    ],
)
def test_bad_answers_settings_are_refused(
    sources: dict[str, Any], engine: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        parse(sources, engine)


def test_no_answers_topic_no_answers() -> None:
    options = parse({"coordinator": kafka()})
    assert options.coordinator_source is not None
    assert options.answers_endpoint(options.coordinator_source) is None


# --- secret references ---------------------------------------------------------------------


def test_references_are_replaced_where_they_stand() -> None:
    jaas = f'{JAAS} username="{{{{secrets/kafka/user}}}}" password="${{ENV:KAFKA_PW}}";'
    secrets = {("kafka", "user"): "svc-engine"}
    resolved = resolve("k", jaas, lambda scope, key: secrets[(scope, key)], {"KAFKA_PW": "s3cr3t"})
    assert resolved == f'{JAAS} username="svc-engine" password="s3cr3t";'
    assert resolve("k", "plain text", None, {}) == "plain text"


def test_an_unset_variable_or_a_missing_secret_store_refuses_to_start_without_values() -> None:
    with pytest.raises(ConfigError, match=r"k\.sasl\.jaas\.config: environment variable PW is"):
        resolve_mapping("k", {"sasl.jaas.config": "p=${ENV:PW}"}, None, {"OTHER": "x"})
    with pytest.raises(ConfigError, match="needs the Databricks secret store"):
        resolve("k", "{{secrets/kafka/pw}}", None, {})

    def failing(scope: str, key: str) -> str:
        raise PermissionError("the value must not leak: s3cr3t")

    with pytest.raises(ConfigError, match="cannot read secret 'pw' of scope 'kafka'") as error:
        resolve("k", "{{secrets/kafka/pw}}", failing, {})
    assert "s3cr3t" not in str(error.value)


# --- Kafka properties for the engine's Python clients ---------------------------------------


def test_sasl_properties_become_kafka_python_arguments() -> None:
    for module in (
        "org.apache.kafka.common.security.plain.PlainLoginModule",
        "kafkashaded.org.apache.kafka.common.security.scram.ScramLoginModule",  # Databricks
    ):
        endpoint = KafkaEndpoint(
            "a:9093,b:9093",
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.jaas.config": f"{module} required username='svc' password=\"p w\";",
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": "/etc/ca.pem",
                "ssl.endpoint.identification.algorithm": "",
                "request.timeout.ms": "20000",
                "fetch.min.bytes": "1",  # consumer tuning for Spark: not for these clients
            },
        )
        assert python_client_config(endpoint) == {
            "bootstrap_servers": ["a:9093", "b:9093"],
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "svc",
            "sasl_plain_password": "p w",
            "ssl_cafile": "/etc/ca.pem",
            "ssl_check_hostname": False,
            "request_timeout_ms": 20000,
        }


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"ssl.truststore.location": "/etc/trust.jks"}, "PEM files only"),
        ({"sasl.kerberos.service.name": "kafka"}, r"\['sasl.kerberos.service.name'\] cannot be"),
        ({"sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;"}, "Krb5"),
        ({"sasl.jaas.config": f"{JAAS} username='u';"}, "needs username and password"),
    ],
)
def test_security_properties_the_python_clients_cannot_apply_refuse_the_start(
    options: dict[str, str], message: str
) -> None:
    """Dropping one would connect without it."""
    with pytest.raises(KafkaSetupError, match=message):
        python_client_config(KafkaEndpoint("b:9092", options))


# --- the answers of a batch -----------------------------------------------------------------


def test_the_answers_producer_takes_the_endpoints_properties_and_the_engines_guarantees() -> None:
    endpoint = KafkaEndpoint(
        "b1:9092,b2:9092",
        {"security.protocol": "SASL_SSL", "linger.ms": "20", "request.timeout.ms": "90000"},
    )
    options = AnswersPublisher(endpoint, "answers", timeout_ms=10_000).writer_options()
    assert options == {
        "kafka.bootstrap.servers": "b1:9092,b2:9092",
        "kafka.batch.size": "262144",
        "kafka.linger.ms": "20",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.acks": "all",
        "kafka.request.timeout.ms": "10000",  # no answer waits longer than the timeout
        "kafka.max.block.ms": "10000",
        "kafka.delivery.timeout.ms": "10020",  # the producer refuses less than linger + request
        "topic": "answers",
    }
    plain = AnswersPublisher(KafkaEndpoint("b:9092"), "a", timeout_ms=60_000).writer_options()
    assert plain["kafka.request.timeout.ms"] == "30000"
    assert plain["kafka.delivery.timeout.ms"] == "60010"
    assert (plain["kafka.batch.size"], plain["kafka.linger.ms"]) == ("262144", "10")
    for refused in (
        {"partitioner.class": "x.Y"},
        {"partitioner.ignore.keys": "true"},
        {"transactional.id": "t"},
        {"enable.idempotence": "false"},
    ):
        with pytest.raises(KafkaSetupError, match=f"{next(iter(refused))}.* is refused"):
            AnswersPublisher(KafkaEndpoint("b:9092", refused), "a")
    small_topic = AnswersPublisher(KafkaEndpoint("b:9092"), "a", 5_000, max_message_bytes=100_000)
    assert small_topic.writer_options()["kafka.batch.size"] == "100000"  # never split (KAFKA-19479)
    big_batches = KafkaEndpoint("b:9092", {"batch.size": "4000000"})
    assert (
        AnswersPublisher(big_batches, "a", 5_000, 1_048_588).writer_options()["kafka.batch.size"]
        == "1048588"
    )
    forced = KafkaEndpoint("b:9092", {"acks": "1", "max.block.ms": "600000"})
    assert AnswersPublisher(forced, "a", 5_000).writer_options()["kafka.acks"] == "all"
    assert AnswersPublisher(forced, "a", 5_000).writer_options()["kafka.max.block.ms"] == "5000"


class RecordingWriter:
    kind = "fake"

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def write(self, table: str, rows: Any, batch_id: int) -> bool:
        self.log.append(f"write {table} ({len(rows)})")
        return True


class RecordingPublisher:
    topic = "answers"

    def __init__(self, log: list[str], fail: bool = False) -> None:
        self.log = log
        self.fail = fail
        self.published: list[tuple[Any, Any]] = []

    def publish(self, spark: Any, answers: Any, batch_id: int, processed_at_ms: int) -> int:
        records = answer_records(answers, batch_id, processed_at_ms)
        count = 0 if records is None else records.num_rows
        self.log.append(f"publish ({count})")
        if self.fail:
            raise AnswersNotDelivered("answers topic answers: 1 answers not all published")
        self.published.append((spark, records))
        return count


class Batch:
    sparkSession = "the batch's session"

    def __init__(self, envelopes: list[tuple[str, dict[str, Any]]]) -> None:
        self.envelopes = envelopes

    def toArrow(self) -> pa.Table:
        return envelope_table(self.envelopes, answers=True)


def sink(
    tmp_path: Path,
    publisher: Any,
    log: list[str],
    order: AnswersOrder = AnswersOrder.AFTER_DELTA,
    writer: Any = None,
) -> BatchSink:
    tables = ("decisions", "group_events", "groups", "rejected_events")
    result = BatchSink(
        "coordinator", tables, str(tmp_path), str(tmp_path), "delta-rs", publisher, order
    )
    result._writer = RecordingWriter(log) if writer is None else writer
    return result


BATCH = [
    ("decisions", {"event_id": "e1", "group_id": "g"}),
    ("group_events", {"group_id": "g", "kind": "member_added"}),
    ("rejected_events", {"raw": "x", "reason": "not JSON"}),
    ("_metrics", {"events": 1}),
]


def test_the_answers_are_published_after_every_delta_table_is_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from controlplane.engine import progress
    from controlplane.engine.batch import SINK_TIMINGS

    log: list[str] = []
    publisher = RecordingPublisher(log)
    with caplog.at_level("DEBUG", logger="controlplane.engine.batch"):
        sink(tmp_path, publisher, log)(Batch(BATCH), 3)
    progress.take("coordinator", 3)
    (record,) = [r for r in caplog.records if hasattr(r, SINK_TIMINGS)]
    assert "answers" in getattr(record, SINK_TIMINGS)  # the publish is timed beside the tables
    assert log == [
        "write decisions (1)",
        "write group_events (1)",
        "write groups (0)",
        "write rejected_events (1)",
        "publish (1)",
    ]
    [(spark, records)] = publisher.published
    assert spark is Batch.sparkSession  # the batch's own session writes the answers
    [record] = records.to_pylist()
    answer = json.loads(record["value"])
    assert (record["key"], answer["event_id"], answer["batch_id"]) == ("g", "e1", 3)


class BatchWithoutAnswers(Batch):
    def toArrow(self) -> pa.Table:
        return envelope_table(self.envelopes)


def test_a_state_function_without_answers_behind_an_answers_topic_fails_before_delta(
    tmp_path: Path,
) -> None:
    log: list[str] = []
    with pytest.raises(RuntimeError, match="batch 3: 0 answers for 1 decisions"):
        sink(tmp_path, RecordingPublisher(log), log)(BatchWithoutAnswers(BATCH), 3)
    assert log == []  # nothing written, nothing published


def test_a_failed_publish_fails_the_batch_once_delta_is_written(tmp_path: Path) -> None:
    """Spark then runs the batch again: Delta skips what it has, the answers go out again."""
    log: list[str] = []
    with pytest.raises(AnswersNotDelivered):
        sink(tmp_path, RecordingPublisher(log, fail=True), log)(Batch(BATCH), 3)
    assert log[-1] == "publish (1)"
    assert log[:-1] == [line for line in log if line.startswith("write")]


class Meeting:
    """A writer and a publisher that each wait (5 s unless told) to see the other at work: they
    meet only when the answers are published while the tables are written."""

    def __init__(self, wait_s: float = 5.0) -> None:
        self.writing, self.publishing = threading.Event(), threading.Event()
        self.wait_s = wait_s


class MeetingWriter(RecordingWriter):
    def __init__(self, log: list[str], meeting: Meeting, fail: bool = False) -> None:
        super().__init__(log)
        self.meeting, self.fail = meeting, fail

    def write(self, table: str, rows: Any, batch_id: int) -> bool:
        if table == "decisions":
            self.meeting.writing.set()
            self.log.append(
                f"the writer saw the publish: {self.meeting.publishing.wait(self.meeting.wait_s)}"
            )
            if self.fail:
                raise OSError("decisions: the storage refused the commit")
        return super().write(table, rows, batch_id)


class MeetingPublisher(RecordingPublisher):
    def __init__(
        self, log: list[str], meeting: Meeting, fail: bool = False, slow_s: float = 0.0
    ) -> None:
        super().__init__(log, fail)
        self.meeting, self.slow_s = meeting, slow_s
        self.threads: list[str] = []

    def publish(self, spark: Any, answers: Any, batch_id: int, processed_at_ms: int) -> int:
        self.threads.append(threading.current_thread().name)
        self.meeting.publishing.set()
        seen = self.meeting.writing.wait(self.meeting.wait_s)
        self.log.append(f"the publish saw the writes: {seen}")
        time.sleep(self.slow_s)  # the brokers' acknowledgements
        return super().publish(spark, answers, batch_id, processed_at_ms)


def test_with_delta_the_answers_are_published_while_the_tables_are_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from controlplane.engine import progress
    from controlplane.engine.batch import SINK_TIMINGS

    log: list[str] = []
    meeting = Meeting()
    publisher = MeetingPublisher(log, meeting)
    writer = MeetingWriter(log, meeting)
    with caplog.at_level("DEBUG", logger="controlplane.engine.batch"):
        sink(tmp_path, publisher, log, AnswersOrder.WITH_DELTA, writer)(Batch(BATCH), 3)
    progress.take("coordinator", 3)
    assert "the writer saw the publish: True" in log
    assert "the publish saw the writes: True" in log
    assert publisher.threads != [threading.current_thread().name]
    # the batch ended with both: every table, in order, and the answer once
    assert [line for line in log if line.startswith("write")] == [
        "write decisions (1)",
        "write group_events (1)",
        "write groups (0)",
        "write rejected_events (1)",
    ]
    assert log.count("publish (1)") == 1
    [(spark, records)] = publisher.published
    assert spark is Batch.sparkSession
    assert json.loads(records.to_pylist()[0]["value"])["batch_id"] == 3
    (record,) = [r for r in caplog.records if hasattr(r, SINK_TIMINGS)]
    timings = getattr(record, SINK_TIMINGS)
    assert {"answers", "answers_wait"} <= set(timings)  # the publish, and the wait after Delta


def test_after_delta_the_publish_never_meets_the_writes(tmp_path: Path) -> None:
    """The harness of the test above, in the default order: each waits for the other in vain
    (so that test's meeting proves the order, not the harness)."""
    log: list[str] = []
    meeting = Meeting(wait_s=0.5)
    publisher = MeetingPublisher(log, meeting)
    sink(tmp_path, publisher, log, AnswersOrder.AFTER_DELTA, MeetingWriter(log, meeting))(
        Batch(BATCH), 3
    )
    assert log.index("the writer saw the publish: False") < log.index("publish (1)")
    assert publisher.threads == [threading.current_thread().name]


def test_with_delta_a_failed_publish_fails_the_batch_once_delta_is_written(
    tmp_path: Path,
) -> None:
    log: list[str] = []
    meeting = Meeting()
    publisher = MeetingPublisher(log, meeting, fail=True)
    batch_sink = sink(
        tmp_path, publisher, log, AnswersOrder.WITH_DELTA, MeetingWriter(log, meeting)
    )
    with pytest.raises(AnswersNotDelivered):
        batch_sink(Batch(BATCH), 3)
    assert {"write decisions (1)", "write rejected_events (1)", "publish (1)"} <= set(log)


def test_with_delta_a_failed_write_fails_the_batch_after_the_publish_ended(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The write's error is the batch's; the publish beside it has ended (its answers are out:
    the replay publishes them again), and a publish that failed too is logged."""
    for fail_publish in (False, True):
        log: list[str] = []
        meeting = Meeting()
        publisher = MeetingPublisher(log, meeting, fail=fail_publish, slow_s=0.3)
        writer = MeetingWriter(log, meeting, fail=True)
        batch_sink = sink(tmp_path, publisher, log, AnswersOrder.WITH_DELTA, writer)
        caplog.clear()
        with pytest.raises(OSError, match="the storage refused the commit"):
            batch_sink(Batch(BATCH), 3)
        assert "publish (1)" in log  # ended before the batch failed
        assert ("answers not published" in caplog.text) is fail_publish


def test_with_delta_sinks_built_again_publish_on_the_process_s_threads(tmp_path: Path) -> None:
    """Each rebuilt query gets a new sink, which Spark holds until the JVM lets it go; their
    publishes share the process's publisher threads instead of a thread each."""

    class ThreadRecordingPublisher(RecordingPublisher):
        threads: ClassVar[set[int]] = set()

        def publish(self, spark: Any, answers: Any, batch_id: int, processed_at_ms: int) -> int:
            self.threads.add(threading.get_ident())
            return super().publish(spark, answers, batch_id, processed_at_ms)

    log: list[str] = []
    sinks = []  # held, as Spark's foreachBatch holds them
    for batch_id in range(5):
        sinks.append(sink(tmp_path, ThreadRecordingPublisher(log), log, AnswersOrder.WITH_DELTA))
        sinks[-1](Batch(BATCH), batch_id)
    assert log.count("publish (1)") == 5
    assert threading.get_ident() not in ThreadRecordingPublisher.threads  # beside, not inline
    assert len(ThreadRecordingPublisher.threads) <= batch._POOL_SIZES[batch.ANSWER_THREADS]


def test_with_delta_a_batch_without_answers_starts_no_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log: list[str] = []
    pools: list[str] = []
    monkeypatch.setattr(batch, "shared_pool", lambda name: pools.append(name))
    batch_sink = sink(tmp_path, RecordingPublisher(log), log, AnswersOrder.WITH_DELTA)
    batch_sink(Batch([("_metrics", {"events": 0})]), 4)  # an idle batch
    batch_sink(Batch([("group_events", {"group_id": "g", "kind": "expired"})]), 5)
    assert pools == []  # nor writer threads: RecordingWriter's tables go one at a time
    assert log == [
        "publish (0)",  # the idle batch: nothing written, nothing to publish
        "write decisions (0)",
        "write group_events (1)",
        "write groups (0)",
        "write rejected_events (0)",
        "publish (0)",
    ]


# --- records the source refused ---------------------------------------------------------------


def test_a_record_the_source_refused_is_rejected_with_its_reason_not_parsed() -> None:
    row = {
        "raw": json.dumps({"event_id": "a", "type": "count", "user": "mallory"}),
        "source": "requests/1/42",
        "arrival_time_ms": 5,
        "seq": None,
        "principal": None,
        "reject_reason": "no 'user' header: a quota request needs exactly one",
    }
    assert parse_row(input_row(row), TimeMode.PROCESSING_TIME, 10) == {
        "raw": row["raw"],
        "reason": "no 'user' header: a quota request needs exactly one",
        "source": "requests/1/42",
        "arrival_time_ms": 5,
    }
    state = FakeGroupState(batch_time_ms=10)
    out = StateFunction(CountingRunner, TimeMode.PROCESSING_TIME).call(
        iter([pd.DataFrame([{**row, "key": "k"}])]), state
    )
    assert [table for table, _ in out] == ["rejected_events", "_metrics"]


def test_a_kafka_record_is_named_by_topic_partition_and_offset() -> None:
    """A file line is ``file:N`` (1-based); a Kafka record's source names it already."""
    row = {"raw": '{"event_id": "a"}', "source": "requests/1/42", "arrival_time_ms": 5}
    kafka_event = parse_row(input_row({**row, "seq": None}), TimeMode.PROCESSING_TIME, 10)
    file_event = parse_row(
        input_row({**row, "source": "f.jsonl", "seq": 3}), TimeMode.PROCESSING_TIME, 10
    )
    assert getattr(kafka_event, "line", None) == "requests/1/42"
    assert getattr(file_event, "line", None) == "f.jsonl:4"


def test_the_quota_keyer_never_resolves_a_refused_record() -> None:
    """Its payload claims a user: keying by it would put the claim in that user's bucket."""
    quotas = parse_settings({"quotas": [{"user": "<default>", "controller_mutation_rate": 10}]})
    keyer = QuotaKeyer(SettingsSource(path=None, initial=quotas), SparkKeys(Keying.GROUP, 64))
    raw = json.dumps({"type": "create_topics", "user": "mallory", "client_id": "c"})
    frame = pd.DataFrame(
        [
            {"raw": raw, "source": "t/0/1", "arrival_time_ms": 1, "seq": None}
            | {"principal": None, "reject_reason": "no 'user' header"},
            {"raw": raw, "source": "t/0/2", "arrival_time_ms": 1, "seq": None}
            | {"principal": "alice", "reject_reason": None},
        ]
    )
    [out] = list(keyer(iter([frame])))
    assert out["key"].tolist() == ["", "user=alice"]
    assert out["reject_reason"].tolist()[0] == "no 'user' header"


# --- the job ---------------------------------------------------------------------------------


def test_a_kafka_setup_error_ends_the_job_with_status_2_and_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from controlplane.engine import queries, warmup

    config = tmp_path / "conf.yaml"
    config.write_text(
        "sources:\n  coordinator: {format: kafka, path: t, kafka_bootstrap_servers: b:1}\n"
    )

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise KafkaSetupError("Kafka request topic(s) use message.timestamp.type {'t': 'X'}")

    log: list[str] = []
    monkeypatch.setattr(launch, "session_for", lambda *args: FakeSpark(log))
    monkeypatch.setattr(queries, "register_progress_listener", lambda *args: None)
    monkeypatch.setattr(warmup, "warm_python_workers", lambda *args, **kwargs: None)
    monkeypatch.setattr(queries, "build_coordinator_query", refuse)
    assert launch.run(["--config", str(config)], ["coordinator"], "") == 2
    assert "coordinator: Kafka request topic(s) use message.timestamp.type" in caplog.text
    assert log == ["session stopped"]


def test_source_options_built_in_code_keep_the_defaults() -> None:
    source = SourceOptions(format="kafka", path="t", kafka_bootstrap_servers="b:1")
    assert (source.starting_offsets, source.max_record_bytes) == ("earliest", 1_048_576)
