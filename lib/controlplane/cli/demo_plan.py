"""The demo's plan: its groups, the client settings it defaults to and the story's timing
(the ``demo`` section), read by the command (cli/demo.py) and by the run (cli/demo_run.py)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, fields, replace
from typing import Any

from controlplane.core.config import ConfigError

log = logging.getLogger("controlplane.demo")

GROUPS: dict[str, tuple[str, int, int, bool, str]] = {
    # group -> (topic, partitions, members, static, assignor)
    "orders": ("orders", 6, 3, False, "range"),
    "billing": ("billing", 4, 2, False, "roundrobin"),
    "inventory": ("inventory", 4, 2, True, "range"),
}


# Client settings when the configuration has no `client` section (e.g. conf/local.yaml): short
# enough for the story to play out in minutes, long enough for answers a micro-batch away.
DEMO_CLIENT_DEFAULTS: dict[str, Any] = {
    "session.timeout.ms": 15_000,
    "heartbeat.interval.ms": 3_000,
    "max.poll.interval.ms": 20_000,
    "request.timeout.ms": 15_000,
    "default.api.timeout.ms": 60_000,
    "max.poll.records": 100,
}


@dataclass(frozen=True, slots=True)
class DemoPlan:
    duration_s: int = 150
    crash_at_s: int = 40
    stall_at_s: int = 50
    stall_s: int = 30
    restart_at_s: int = 70
    restart_pause_s: int = 5
    admin_user: str = "admin"
    admin_bursts: int = 6
    admin_interval_s: int = 20
    topics_per_burst: int = 5
    partitions_per_topic: int = 6
    engine_start_timeout_s: int = 300


def parse_plan(raw: Any) -> DemoPlan:
    plan = DemoPlan()
    if raw is None:
        return plan
    names = {f.name for f in fields(DemoPlan)}
    changes: dict[str, Any] = {}
    for key, value in dict(raw).items():
        if key not in names:
            raise ConfigError(f"demo: unknown key {key!r}")
        expected = type(getattr(plan, key))
        if isinstance(value, bool) or not isinstance(value, expected):
            raise ConfigError(f"demo.{key}: expected {expected.__name__}, got {value!r}")
        changes[key] = value
    return replace(plan, **changes)


def elapsed_s(started: float) -> int:
    return int(time.monotonic() - started)
