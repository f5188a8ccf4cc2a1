"""Helpers for the tests against the local Kafka broker. The session-scoped ``kafka_broker``
fixture itself lives in tests/conftest.py, so that tests/spark can use it too.

(The folder is not called ``tests/kafka``: with ``tests`` on the path, a package ``kafka``
there would hide kafka-python.)
"""

from __future__ import annotations

import time
from typing import Any

from controlplane.io.broker import LocalBroker


def send_request(broker: LocalBroker, request: Any, user: str | None = None) -> Any:
    """One raw protocol request (a kafka-python ``kafka.protocol`` class at an explicit version)
    on a fresh connection, as ``user`` over SASL/PLAIN or anonymously over PLAINTEXT."""
    from kafka.net.compat import KafkaNetClient

    client = KafkaNetClient(**broker.client_config(user), client_id=f"test-{user or 'anonymous'}")
    try:
        client.check_version(timeout_ms=10_000)
        return client.send_and_receive(client.least_loaded_node(), request, timeout_ms=30_000)
    finally:
        client.close()


def poll_until(check: Any, deadline_s: float = 30.0, what: str = "") -> Any:
    end = time.monotonic() + deadline_s
    while True:
        value = check()
        if value or time.monotonic() > end:
            if not value:
                raise AssertionError(f"timed out after {deadline_s} s waiting for {what or check}")
            return value
        time.sleep(0.2)
