"""Kafka against our core, scenario by scenario (docs/conformance.md). Each test is one scenario:
its observations on a real broker and through our engine path must be equal, or equal once
Kafka's side is rewritten by the documented differences the scenario names."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from differential.harness import Result
from differential.scenarios import SCENARIOS
from differential.script import BrokerSettings, Scenario

pytestmark = [pytest.mark.kafka, pytest.mark.differential]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_kafka_and_our_core_agree(
    scenario: Scenario,
    differential_results: Callable[[BrokerSettings], dict[str, Result]],
) -> None:
    result = differential_results(scenario.settings)[scenario.name]
    assert result.comparison.matched, result.report()
