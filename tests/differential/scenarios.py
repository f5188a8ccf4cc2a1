"""Every differential scenario, group protocol and mutation quota (docs/conformance.md)."""

from __future__ import annotations

from differential.scenarios_group import GROUP_SCENARIOS
from differential.scenarios_quota import QUOTA_SCENARIOS
from differential.script import Scenario

SCENARIOS: tuple[Scenario, ...] = (*GROUP_SCENARIOS, *QUOTA_SCENARIOS)
