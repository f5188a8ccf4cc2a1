"""Shared test configuration. No Spark here: the Spark fixture lives in tests/spark/conftest.py,
so the core's tests never start a JVM.

``kafka_broker``: ONE real Kafka broker for every test that asks for it (session-scoped, here so
that tests/kafka_broker and tests/spark share it): KRaft, single node, loopback, from the pinned
jars of ``make setup`` (lib/controlplane/io/broker.py). Started on first use only, stopped at
the end of the session whatever happens (its temporary directory goes with it). Missing Java or
jars fail the tests that need it, with one line naming the fix.

``group.initial.rebalance.delay.ms`` is 0 so that joins in tests do not wait; the other static
group settings are Kafka's defaults. A test that needs other static settings starts its own
``LocalBroker``. A test that changes broker-wide state (a user's quota) undoes it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

GROUP_INITIAL_REBALANCE_DELAY_MS = 0


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[Any]:
    from controlplane.io.broker import LocalBroker

    broker = LocalBroker(group_initial_rebalance_delay_ms=GROUP_INITIAL_REBALANCE_DELAY_MS)
    try:
        broker.start()  # stops what it started if it fails
        print(f"\nlocal Kafka broker ready in {broker.started_in_s:.1f} s")
        yield broker
    finally:
        broker.stop()


settings.register_profile(
    "default", deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci", deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
