"""ONE real Kafka broker for every test marked ``kafka`` (session-scoped): KRaft, single node,
loopback, from the pinned jars of ``make setup`` (lib/controlplane/io/broker.py). Started on
first use, stopped at the end of the session whatever happens (its temporary directory goes
with it). Missing Java or jars fail the tests that need it, with one line naming the fix.

``group.initial.rebalance.delay.ms`` is 0 so that joins in tests do not wait; the other static
group settings are Kafka's defaults. A test that needs other static settings starts its own
``LocalBroker``. A test that changes broker-wide state (a user's quota) undoes it.

(The folder is not called ``tests/kafka``: with ``tests`` on the path, a package ``kafka``
there would hide kafka-python.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from controlplane.io.broker import LocalBroker

GROUP_INITIAL_REBALANCE_DELAY_MS = 0


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[LocalBroker]:
    broker = LocalBroker(group_initial_rebalance_delay_ms=GROUP_INITIAL_REBALANCE_DELAY_MS)
    try:
        broker.start()  # stops what it started if it fails
        print(f"\nlocal Kafka broker ready in {broker.started_in_s:.1f} s")
        yield broker
    finally:
        broker.stop()


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
