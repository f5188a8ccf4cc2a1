"""The answers topic (``engine.answers_topic``): each ``decisions`` and ``quota_decisions`` row
of a batch as a Kafka record, written by Spark's Kafka sink after the batch's Delta tables (or
while they are written: ``engine.answers_order``, engine.batch).

A record's key is the row's ``group_id`` (decisions) or ``user`` (quota decisions; its
``client_id`` when the user is null), so Kafka's default partitioner (murmur2 of the key) puts
it where a client computes it; its value is the row as JSON with the Delta table's columns,
nulls included; its ``table`` header names the table.

Spark's sink, not a Python producer on the driver: kafka-python took 140-160 µs of the
driver's CPU an answer, one and a half cores at 10,000 answers a second, on the batch's path.
The Java producer writes them from one task (the batch's order kept), and the endpoint's client
properties go to the producer as they are (``kafka.`` + the Kafka name), as to Spark's source.
The JSON is built in the Python workers during the stateful stage (engine.answer_json, the
``_answers`` envelope: each answer's table, key and text less the sink's columns), where the
calls run side by side; the driver appends ``batch_id`` and ``processed_at_ms`` in Arrow. Built
in the JVM from the batch's rows by ``to_json`` it took 400-600 ms for 50,000 answers, on the
batch's path (docs/benchmarks/engine.md). (The topic check at start is still kafka-python's, which
refuses the security properties it cannot apply: io/kafka_clients.py.) Properties that would
break what clients rely on (the partition, the order, at least once) are refused at start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from controlplane.io.kafka_clients import KafkaSetupError
from controlplane.io.options import KafkaEndpoint

ANSWERED_TABLES: Final = ("decisions", "quota_decisions")
ANSWERS_TABLE: Final = "_answers"  # a call's answers in the state function's output
# Its columns (engine.answer_json builds them, ``answer_records`` reads them): the answer's table,
# its record's key, its JSON text less ``batch_id``, ``processed_at_ms`` and the closing brace.
ANSWER_SCHEMA: Final = pa.schema(
    [pa.field("table", pa.string()), pa.field("key", pa.string()), pa.field("head", pa.binary())]
)
TABLE_HEADER: Final = "table"
# The producer's batching unless the endpoint's properties say otherwise: a batch's answers go
# out at once, and the Java client's defaults (kafka-clients 3.9: 16 KB, 0 ms) sent 50,000
# answers in 560-600 ms against 360-410 ms with these (docs/benchmarks/engine.md).
PRODUCER_DEFAULTS: Final[Mapping[str, str]] = {"batch.size": "262144", "linger.ms": "10"}
# Producer properties the answers refuse, and why: clients compute an answer's partition from
# its key (Kafka's default partitioner), read a batch's answers in order, and get each at
# least once, never in a transaction they would have to read committed.
REFUSED: Final[Mapping[str, str]] = {
    "partitioner.class": "clients compute the partition with Kafka's default partitioner",
    "partitioner.ignore.keys": "clients compute the partition from the key",
    "transactional.id": "the answers are at least once, not transactional",
}
MAX_CAUSES: Final = 32


class AnswersNotDelivered(RuntimeError):
    """Some answers of a batch were not acknowledged by the brokers: the batch fails."""


@dataclass(frozen=True, slots=True)
class AnswersPublisher:
    """One answers topic on one Kafka endpoint. ``publish`` returns once the brokers have
    acknowledged every answer (``acks=all``), else raises ``AnswersNotDelivered``: no answer
    waits longer than ``timeout_ms`` for its acknowledgement or for the topic's metadata."""

    endpoint: KafkaEndpoint
    topic: str
    timeout_ms: int = 30_000
    # The topic's max.message.bytes, read at start (None: unknown). A batch larger than the
    # topic takes is split and sent again by the producer, and kafka-clients 3.9.0 (Spark
    # 4.0's) then let flush() return before the split records were sent or failed: the
    # publish "succeeded" and they were lost (KAFKA-19479; 3.9.2 fails the publish). Batches
    # within the topic's limit never take that path.
    max_message_bytes: int | None = None

    def __post_init__(self) -> None:
        for name, why in REFUSED.items():
            if name in self.endpoint.options:
                raise KafkaSetupError(f"answers topic: {name} is refused ({why})")
        if str(self.endpoint.options.get("enable.idempotence", "true")).lower() != "true":
            raise KafkaSetupError(
                "answers topic: enable.idempotence=false is refused (a retried request could "
                "reorder a batch's answers)"
            )

    def writer_options(self) -> dict[str, str]:
        """The options of Spark's Kafka sink: the endpoint's client properties, then what the
        engine requires of the producer (the acknowledgements and the timeouts)."""
        given = {**PRODUCER_DEFAULTS, **self.endpoint.options}
        if self.max_message_bytes is not None:
            given["batch.size"] = str(min(int(given["batch.size"]), self.max_message_bytes))
        linger_ms = int(given["linger.ms"])
        request_timeout_ms = min(int(given.get("request.timeout.ms", 30_000)), self.timeout_ms)
        producer = {
            **given,
            "bootstrap.servers": self.endpoint.bootstrap_servers,
            "acks": "all",
            "request.timeout.ms": str(request_timeout_ms),
            "max.block.ms": str(self.timeout_ms),
            # the producer refuses a delivery timeout below linger + request timeout
            "delivery.timeout.ms": str(self.timeout_ms + linger_ms),
        }
        return {**{f"kafka.{name}": value for name, value in producer.items()}, "topic": self.topic}

    def publish(
        self, spark: Any, answers: pa.Table | None, batch_id: int, processed_at_ms: int
    ) -> int:
        """The batch's answers (its ``_answers`` rows) on the topic, in batch order; how many
        were sent."""
        records = answer_records(answers, batch_id, processed_at_ms)
        if records is None:
            return 0
        count = int(records.num_rows)
        frame = record_frame(spark, records)
        try:
            frame.write.format("kafka").options(**self.writer_options()).save()
        except Exception as exc:
            raise AnswersNotDelivered(
                f"answers topic {self.topic}: {count} answers not all published ({reason_of(exc)})"
            ) from exc
        return count


def reason_of(exc: BaseException) -> str:
    """The innermost JVM cause behind a failed write (the producer's own error, under Spark's
    job and task failures), else the Python exception's first line."""
    from controlplane.io.sinks import jvm_exception

    java = jvm_exception(exc)
    try:
        for _ in range(MAX_CAUSES):  # a cause chain may loop
            if java is None or java.getCause() is None:
                break
            java = java.getCause()
        if java is not None:
            return f"{java.getClass().getName()}: {java.getMessage()}"
    except Exception:  # a closed gateway: the Python side is all there is
        pass
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def answer_keys(table: str, rows: pa.Table) -> Any:
    """The answers' record keys, from the rows as Delta gets them: a decision's ``group_id``, a
    quota decision's ``user`` (its ``client_id`` when the user is null)."""
    if table == "decisions":
        return rows.column("group_id")
    return pc.coalesce(rows.column("user"), rows.column("client_id"))


def answer_records(
    answers: pa.Table | None, batch_id: int, processed_at_ms: int
) -> pa.Table | None:
    """The batch's answers as records (``key``, ``value``, ``table``): decisions then quota
    decisions, each table's in batch order, each value its head with the sink's columns and
    the closing brace appended; None when the batch has none."""
    if answers is None or not answers.num_rows:
        return None
    tail = pa.scalar(f',"batch_id":{batch_id},"processed_at_ms":{processed_at_ms}}}'.encode())
    parts = []
    for table in ANSWERED_TABLES:
        rows = answers.filter(pc.equal(answers.column("table"), table))
        if rows.num_rows:
            value = pc.binary_join_element_wise(rows.column("head"), tail, b"")
            parts.append(
                pa.table({"key": rows.column("key"), "value": value, "table": rows.column("table")})
            )
    return pa.concat_tables(parts) if parts else None


def record_frame(spark: Any, records: pa.Table) -> Any:
    """The records as the Kafka sink's rows (``key``, ``value``, ``headers``), in one
    partition."""
    from pyspark.sql import functions as F

    table = F.col("table").cast("binary")
    header = F.struct(F.lit(TABLE_HEADER).alias("key"), table.alias("value"))
    frame = spark.createDataFrame(records)
    return frame.select("key", "value", F.array(header).alias("headers")).coalesce(1)
