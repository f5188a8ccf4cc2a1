"""The engine's own Kafka client on the driver (kafka-python): the topic check at start. Spark's
Kafka source (io/sources.py) and the answers topic's sink (io/answers.py) are configured
elsewhere; all take the same client properties, by their Kafka names, so one ``kafka_options``
mapping serves them.

``python_client_config`` turns Kafka's property names into kafka-python's keyword arguments:
the security properties it can apply (``security.protocol``, ``sasl.mechanism``, a PLAIN or
SCRAM ``sasl.jaas.config``, PEM trust stores, host name checking) and a few client settings.
A security property it cannot apply (a JKS key store, Kerberos, OAuth) fails the start with its
name: a client that silently dropped it would connect without it. Other properties (consumer
tuning for Spark's source) do not concern these clients and are left out.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from controlplane.io.options import KafkaEndpoint

log = logging.getLogger(__name__)

LOG_APPEND_TIME: Final = "LogAppendTime"
TIMESTAMP_TYPE: Final = "message.timestamp.type"
MAX_MESSAGE_BYTES: Final = "max.message.bytes"


class KafkaSetupError(RuntimeError):
    """A topic or a client setting that the engine refuses to start with."""


# Kafka property -> (kafka-python argument, conversion)
_SIMPLE: Final[Mapping[str, tuple[str, type]]] = {
    "security.protocol": ("security_protocol", str),
    "sasl.mechanism": ("sasl_mechanism", str),
    "client.id": ("client_id", str),
    "request.timeout.ms": ("request_timeout_ms", int),
    "max.request.size": ("max_request_size", int),
    "linger.ms": ("linger_ms", int),
    "compression.type": ("compression_type", str),
}
_JAAS_OPTION: Final = re.compile(r"""(\w+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s;]+))""")
_JAAS_MODULES: Final = ("PlainLoginModule", "ScramLoginModule")


def _jaas(value: str) -> dict[str, str]:
    """User name and password of a PLAIN or SCRAM login module (Databricks shades the class as
    ``kafkashaded.org.apache.kafka...``; only its last name matters here)."""
    module = value.split(maxsplit=1)[0] if value.split() else ""
    if not module.endswith(_JAAS_MODULES):
        raise KafkaSetupError(
            f"sasl.jaas.config: the engine's Python clients support PlainLoginModule and "
            f"ScramLoginModule, not {module!r}"
        )
    found = {
        match.group(1): next(g for g in match.groups()[1:] if g is not None)
        for match in _JAAS_OPTION.finditer(value)
    }
    if "username" not in found or "password" not in found:
        raise KafkaSetupError("sasl.jaas.config: needs username and password")
    return {"sasl_plain_username": found["username"], "sasl_plain_password": found["password"]}


def python_client_config(endpoint: KafkaEndpoint) -> dict[str, Any]:
    """kafka-python keyword arguments for ``endpoint`` (see the module docstring)."""
    options = dict(endpoint.options)
    config: dict[str, Any] = {"bootstrap_servers": endpoint.bootstrap_servers.split(",")}
    for key, (name, convert) in _SIMPLE.items():
        if key in options:
            config[name] = convert(options.pop(key))
    if "sasl.jaas.config" in options:
        config.update(_jaas(options.pop("sasl.jaas.config")))
    algorithm = options.pop("ssl.endpoint.identification.algorithm", None)
    if algorithm is not None:
        config["ssl_check_hostname"] = algorithm.lower() == "https"
    for store, argument in (("truststore", "ssl_cafile"), ("keystore", "ssl_certfile")):
        location = options.pop(f"ssl.{store}.location", None)
        store_type = options.pop(f"ssl.{store}.type", "JKS")
        if location is not None:
            if store_type.upper() != "PEM":
                raise KafkaSetupError(
                    f"ssl.{store}.location: the engine's Python clients read PEM files only "
                    f"(ssl.{store}.type: PEM), not {store_type}"
                )
            config[argument] = location
    if "ssl.key.password" in options:
        config["ssl_password"] = options.pop("ssl.key.password")
    unsupported = sorted(key for key in options if key.startswith(("ssl.", "sasl.")))
    if unsupported:
        raise KafkaSetupError(
            f"Kafka client properties {unsupported} cannot be applied by the engine's Python "
            "client (the topic check at start)"
        )
    return config


def _for_client(config: Mapping[str, Any], client: Any) -> dict[str, Any]:
    """The arguments ``client`` takes (kafka-python refuses unknown ones)."""
    return {key: value for key, value in config.items() if key in client.DEFAULT_CONFIG}


def admin_client(endpoint: KafkaEndpoint, timeout_ms: int = 30_000) -> Any:
    from kafka.admin import KafkaAdminClient

    config = _for_client(python_client_config(endpoint), KafkaAdminClient)
    config.setdefault("client_id", "controlplane-engine-admin")
    config.setdefault("request_timeout_ms", timeout_ms)
    return KafkaAdminClient(**config, bootstrap_timeout_ms=timeout_ms)


def topic_names(path: str) -> list[str]:
    """The topics of a Kafka source's ``path`` (Spark's ``subscribe``: comma-separated)."""
    return [name.strip() for name in path.split(",") if name.strip()]


def topic_config(admin: Any, topics: Sequence[str], name: str) -> dict[str, str | None]:
    """Each topic's value of the config ``name`` (its own, or the broker default it inherits);
    the topics must exist."""
    from kafka.admin import ConfigResource

    if not topics:
        return {}
    described = admin.describe_configs(
        [ConfigResource("TOPIC", topic, [name]) for topic in topics], config_filter="all"
    )
    by_topic = described.get("topic", {})
    return {topic: (by_topic.get(topic, {}).get(name) or {}).get("value") for topic in topics}


def timestamp_types(admin: Any, topics: Sequence[str]) -> dict[str, str | None]:
    """Each existing topic's ``message.timestamp.type`` (its own, or the broker default it
    inherits); a topic that does not exist is left out."""
    existing = set(admin.list_topics())
    return topic_config(admin, [topic for topic in topics if topic in existing], TIMESTAMP_TYPE)


def check_request_topics(endpoint: KafkaEndpoint, topics: Sequence[str]) -> None:
    """Refuse to start unless every request topic exists with LogAppendTime timestamps: the
    engine orders a key's records by their timestamp, which is the broker's clock only then
    (CreateTime is each producer's clock, and reorders a partition's records)."""
    admin = admin_client(endpoint)
    try:
        types = timestamp_types(admin, topics)
    finally:
        admin.close()
    missing = [topic for topic in topics if topic not in types]
    if missing:
        raise KafkaSetupError(
            f"Kafka request topic(s) {missing} do not exist on {endpoint.bootstrap_servers}: "
            f"create them with {TIMESTAMP_TYPE}={LOG_APPEND_TIME}"
        )
    wrong = {topic: kind for topic, kind in types.items() if kind != LOG_APPEND_TIME}
    if wrong:
        fixes = "; ".join(
            f"kafka-configs --alter --entity-type topics --entity-name {topic} "
            f"--add-config {TIMESTAMP_TYPE}={LOG_APPEND_TIME}"
            for topic in wrong
        )
        raise KafkaSetupError(
            f"Kafka request topic(s) use {TIMESTAMP_TYPE} {wrong}, the engine needs "
            f"{LOG_APPEND_TIME} (records are ordered by the broker's append time): {fixes}"
        )


def check_topic_exists(endpoint: KafkaEndpoint, topic: str) -> int | None:
    """Refuse to start unless the answers topic exists; its ``max.message.bytes`` (its own or
    the broker default it inherits), or None when it cannot be read (an ACL without
    DescribeConfigs), which the answers' producer keeps its batches within."""
    admin = admin_client(endpoint)
    try:
        if topic not in set(admin.list_topics()):
            raise KafkaSetupError(
                f"the answers topic {topic!r} does not exist on {endpoint.bootstrap_servers}"
            )
        try:
            value = topic_config(admin, [topic], MAX_MESSAGE_BYTES)[topic]
            return int(value) if value is not None else None
        except Exception as exc:  # not allowed to read it: the producer's own batch size
            log.warning("answers topic %s: %s not read (%s)", topic, MAX_MESSAGE_BYTES, exc)
            return None
    finally:
        admin.close()
