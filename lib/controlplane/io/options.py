"""What the io layer is given: a source (``SourceOptions``, and what becomes of its files once
read, ``CleanSource``) and a Kafka endpoint (``KafkaEndpoint``).

The engine parses the ``sources`` and ``engine`` sections into these (engine/options.py); the
io modules read them. They live here, below the engine, so imports run one way: engine -> io.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

# A Kafka source's records per micro-batch unless configured. It bounds the first batch after a
# long stop, and holds what arrives while a running job's longest batch runs: records left
# unread wait a batch more, and a heartbeat left waiting past its session timeout finds its
# member expired. 50,000 (the earlier default) expired members after issue 14's join burst
# when its batch ran 8.3 s or more at 9,667 events/s; 10,000 held the engine to 72 % of the load
# (docs/engine.md, "The cap and the members' sessions"; docs/benchmarks/engine.md, issue 14,
# fourteenth and eighteenth sessions).
MAX_RECORDS_PER_TRIGGER: Final = 500_000


class CleanSource(StrEnum):
    OFF = "off"
    ARCHIVE = "archive"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class SourceOptions:
    format: str  # "jsonl" (landing directory), "kafka" or "delta"
    path: str  # directory, topic list (comma-separated) or table path
    max_files_per_trigger: int = 100  # files and Delta: the streaming max.poll.records
    clean_source: CleanSource = CleanSource.ARCHIVE
    archive_dir: str | None = None
    kafka_bootstrap_servers: str | None = None
    user_header: str = "user"  # Kafka header carrying the authenticated principal
    # Kafka only: records per micro-batch (Spark's maxOffsetsPerTrigger), where a first start
    # (or a reset checkpoint) begins, the largest value handed to the core, and extra client
    # properties (``security.protocol``, ``sasl.*``, ...) passed as ``kafka.<name>``, whose
    # values may hold secret references (engine/secrets.py). Not in repr: resolved values are
    # credentials.
    max_records_per_trigger: int = MAX_RECORDS_PER_TRIGGER
    starting_offsets: str = "earliest"
    max_record_bytes: int = 1_048_576
    kafka_options: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True, slots=True)
class KafkaEndpoint:
    """Where a Kafka client connects: bootstrap servers and client properties (Kafka's names)."""

    bootstrap_servers: str
    options: Mapping[str, str] = field(default_factory=dict, repr=False)
