"""The differential suite's broker: one ``LocalBroker`` per settings group
(``script.BrokerSettings``), since ``group.initial.rebalance.delay.ms`` and ``group.max.size``
are static broker settings. The first test of a settings group starts its broker, plays every
scenario of the group at once (``harness.play_all``) and stops it; the other tests of the group
read the cached results. docs/conformance.md describes the method.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from differential.harness import Result, play_all, start_broker
from differential.scenarios import SCENARIOS
from differential.script import BrokerSettings


@pytest.fixture(scope="session")
def differential_results() -> Callable[[BrokerSettings], dict[str, Result]]:
    played: dict[BrokerSettings, dict[str, Result]] = {}

    def results(settings: BrokerSettings) -> dict[str, Result]:
        if settings not in played:
            scenarios = [s for s in SCENARIOS if s.settings == settings]
            broker = start_broker(settings, scenarios)
            try:
                played[settings] = play_all(broker, scenarios)
            finally:
                broker.stop()
        return played[settings]

    return results
