"""The demo's end: the fleet closes without a long silence. Members close at once (each
commits and leaves: round trips through the engine), with a progress line while they do, and
the admin tool stops between bursts without waiting out its interval. Real threads, short
real times."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest

from controlplane.cli.demo_fleet import AdminTool
from controlplane.cli.demo_plan import DemoPlan
from controlplane.cli.demo_run import DemoRun
from controlplane.client.admin import TopicResult
from controlplane.client.clock import RealClock


class SlowClosingApp:
    """A member application whose close takes ``close_s`` (its commit and LeaveGroup)."""

    def __init__(self, name: str, close_s: float) -> None:
        self.name = name
        self.close_s = close_s
        self.closed_at: float | None = None

    def close(self, timeout_ms: int = 30_000) -> None:
        time.sleep(self.close_s)
        self.closed_at = time.monotonic()


class InstantAdmin:
    """Answers every burst at once, every topic created."""

    def __init__(self) -> None:
        self.bursts = 0
        self.answered = threading.Event()

    def create_topics(self, topics: Mapping[str, int]) -> dict[str, TopicResult]:
        self.bursts += 1
        self.answered.set()
        return {name: TopicResult(name, "NONE", 0, 0, 1) for name in topics}


def demo_run_with(apps: list[SlowClosingApp]) -> DemoRun:
    """A run past its timeline: only the members to close matter (no engine, no settings)."""
    settings: Any = None
    run = DemoRun(settings, None, DemoPlan(), {}, "demo.yaml")
    members: Any = {app.name: app for app in apps}
    run.apps = members
    run.fleet_started = time.monotonic()
    return run


def test_members_close_at_once_and_the_wait_prints_progress(
    capsys: pytest.CaptureFixture[str],
) -> None:
    apps = [
        SlowClosingApp("fast-1", 0.05),
        SlowClosingApp("slow-1", 0.6),
        SlowClosingApp("slow-2", 0.6),
    ]
    run = demo_run_with(apps)
    started = time.monotonic()
    run._close_members(progress_every_ms=200)
    took_s = time.monotonic() - started
    assert all(app.closed_at is not None for app in apps)
    assert took_s < 1.0  # one after the other would take 1.25 s
    lines = [line.split("] ", 1)[1] for line in capsys.readouterr().out.splitlines()]
    assert lines[0] == "closing 3 members: each commits, dynamic ones send LeaveGroup"
    assert "... 1/3 closed, waiting for slow-1, slow-2" in lines
    assert lines[-1] == "all 3 members closed"


def test_the_admin_tool_stops_between_bursts_without_waiting_out_its_interval() -> None:
    clock = RealClock()
    admin = InstantAdmin()
    admin_client: Any = admin
    tool = AdminTool(
        clock,
        admin_client,
        bursts=3,
        topics_per_burst=2,
        partitions=1,
        interval_ms=60_000,
    )
    assert admin.answered.wait(5)
    started = time.monotonic()
    tool.stop(30_000)
    assert time.monotonic() - started < 2.0
    assert admin.bursts == 1
    assert tool.totals.created == 2
