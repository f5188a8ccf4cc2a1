"""The demo on Kafka (``python -m controlplane demo --transport kafka``, ``make demo-kafka``).

The same engine, fleet and timeline as the default run, with Kafka in place of the landing
directories and the answer-table reads (docs/client.md, "Over Kafka"):

* a local broker (io/broker.py) is started for the run and stopped after it;
* three topics are created with ``message.timestamp.type=LogAppendTime`` (the broker's clock is
  the arrival time): the coordinator's requests, the quota's requests, the answers;
* the configuration is the one given (``conf/demo.yaml``) with its sources turned into Kafka
  sources on those topics (``format: kafka``, ``path: <topic>``, ``kafka_bootstrap_servers``),
  ``engine.answers_topic`` set, and its own tables and checkpoints under ``out/demo-kafka``;
* the clients share one ``KafkaTransport`` (requests produced, answers consumed).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from controlplane.core.config import Settings

COORDINATOR_TOPIC = "controlplane-coordinator-requests"
QUOTA_TOPIC = "controlplane-quota-requests"
ANSWERS_TOPIC = "controlplane-answers"
TOPIC_PARTITIONS = {COORDINATOR_TOPIC: 4, QUOTA_TOPIC: 2, ANSWERS_TOPIC: 4}
TOPIC_CONFIG = {"message.timestamp.type": "LogAppendTime"}
OUT_ROOT = "out/demo-kafka"
FILES_ONLY = ("max_files_per_trigger", "clean_source", "archive_dir")


def kafka_settings(settings: Settings, bootstrap_servers: str) -> Settings:
    """``settings`` with Kafka sources on the demo's topics, the answers topic, and tables and
    checkpoints of their own. The file-only source settings are dropped (``clean_source``,
    ``archive_dir``, ``max_files_per_trigger``: the Kafka cap is the engine's records per
    trigger, its default here); the others are kept (``user_header``)."""
    sections: dict[str, Any] = dict(settings.sections)
    engine = dict(sections.get("engine") or {})
    engine.update(
        answers_topic=ANSWERS_TOPIC,
        checkpoint_root=f"{OUT_ROOT}/checkpoints",
        tables_root=f"{OUT_ROOT}/tables",
    )
    sources: dict[str, Any] = {}
    topics = {"coordinator": COORDINATOR_TOPIC, "quota": QUOTA_TOPIC}
    for name, raw in dict(sections.get("sources") or {}).items():
        kept = {
            k: v for k, v in dict(raw or {}).items() if k not in ("format", "path", *FILES_ONLY)
        }
        sources[name] = {
            **kept,
            "format": "kafka",
            "path": topics[name],
            "kafka_bootstrap_servers": bootstrap_servers,
        }
    sections.update(engine=engine, sources=sources)
    return replace(settings, sections=sections)


def start_broker() -> Any:
    """A local broker with the demo's topics (the caller stops it)."""
    from controlplane.io.broker import LocalBroker

    broker = LocalBroker()
    broker.start()
    try:
        for topic, partitions in TOPIC_PARTITIONS.items():
            broker.create_topic(topic, partitions, TOPIC_CONFIG)
    except BaseException:
        broker.stop()
        raise
    return broker
