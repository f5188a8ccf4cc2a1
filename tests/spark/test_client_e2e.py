"""End to end: real clients (GroupMember, AdminClient) through FileTransport against the local
streaming engine (both queries, processing time). Asserts what happened, with generous
deadlines, never how fast."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from controlplane.client.admin import AdminClient
from controlplane.client.clock import RealClock
from controlplane.client.config import AdminConfig, ConsumerConfig
from controlplane.client.member import GroupMember, MemberState
from controlplane.client.records import InMemoryLog, Record
from controlplane.client.transport import Stream
from controlplane.client.transport_files import FileTransport
from controlplane.core.config import parse_settings
from controlplane.engine.options import EngineOptions, Keying
from controlplane.engine.queries import build_coordinator_query, build_quota_query
from controlplane.io.options import CleanSource, SourceOptions
from spark.conftest import read_table

pytestmark = pytest.mark.spark

DEADLINE_S = 240.0
SETTINGS = parse_settings(
    {
        "group.initial.rebalance.delay.ms": 1000,
        "group.min.session.timeout.ms": 1000,
        "quotas": [{"user": "ops", "controller_mutation_rate": 1}],  # burst 11 mutations
    }
)


def _options(tmp_path: Path) -> EngineOptions:
    def source(name: str) -> SourceOptions:
        landing = str(tmp_path / "landing" / name)
        return SourceOptions(format="jsonl", path=landing, clean_source=CleanSource.DELETE)

    return EngineOptions(
        trigger_interval_ms=500,
        keying=Keying.SHARD,
        shards=4,
        shuffle_partitions=2,
        checkpoint_root=str(tmp_path / "checkpoints"),
        tables_root=str(tmp_path / "tables"),
        writer="delta-rs",
        coordinator_source=source("coordinator"),
        quota_source=source("quota"),
    )


class App:
    """A member polled by its own thread, as an application would."""

    def __init__(self, member: GroupMember) -> None:
        self.member = member
        self.records: list[Record] = []
        self.error: BaseException | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                self.records.extend(self.member.poll(500))
        except BaseException as error:  # surfaced by the test
            self.error = error

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)
        self.member.close(30_000)


def _until(check: Any, queries: list[Any], what: str) -> None:
    end = time.monotonic() + DEADLINE_S
    while time.monotonic() < end:
        for query in queries:
            assert query.exception() is None, f"query failed: {query.exception()}"
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_members_and_admin_through_the_engine(spark: Any, tmp_path: Path) -> None:
    options = _options(tmp_path)
    queries = [
        build(spark, SETTINGS, options=options).start()
        for build in (build_coordinator_query, build_quota_query)
    ]
    clock = RealClock()
    assert options.coordinator_source is not None
    assert options.quota_source is not None
    landing = {
        Stream.GROUP: options.coordinator_source.path,
        Stream.QUOTA: options.quota_source.path,
    }
    transport = FileTransport(clock, landing, options.tables_root, poll_interval_ms=100)
    log = InMemoryLog(clock)
    log.create_topic("events", 4)
    for partition in range(4):
        log.append("events", partition, [f"e{partition}-{i}" for i in range(40)])
    apps: list[App] = []
    try:

        def member(name: str) -> GroupMember:
            config = ConsumerConfig(
                group_id="e2e",
                topics=("events",),
                client_id=name,
                session_timeout_ms=30_000,
                heartbeat_interval_ms=2_000,
                max_poll_interval_ms=60_000,
                request_timeout_ms=30_000,
                max_poll_records=20,
            )
            return GroupMember(config, transport, clock, log, auto_offset_reset="earliest")

        apps = [App(member("m1")), App(member("m2"))]

        def split() -> bool:
            sizes = [len(a.member.assignment()) for a in apps]
            stable = all(a.member.state is MemberState.STABLE for a in apps)
            return stable and sizes == [2, 2]

        _until(split, queries, "two members sharing four partitions")
        owned = [set(a.member.assignment()) for a in apps]
        assert owned[0].isdisjoint(owned[1])
        _until(lambda: sum(len(a.records) for a in apps) >= 160, queries, "every record")
        assert all(a.error is None for a in apps), [a.error for a in apps]

        admin = AdminClient(AdminConfig(user="ops", client_id="e2e-admin"), transport, clock)
        results = admin.create_topics({f"t{i}": 4 for i in range(4)}, timeout_ms=120_000)
        assert all(r.ok for r in results.values()), results
        assert max(r.attempts for r in results.values()) > 1  # 16 mutations > burst of 11

        apps[1].close()  # a dynamic member leaves: the other one takes over everything
        _until(lambda: len(apps[0].member.assignment()) == 4, queries, "the survivor's takeover")
    finally:
        for app in apps:
            if app.member.state is not MemberState.CLOSED:
                app.close()
        transport.close()
        for query in queries:
            query.stop()

    tables = Path(options.tables_root)
    events = read_table(tables / "group_events")
    reasons = {row["reason"] for row in events if row["kind"] == "member_removed"}
    assert "leave" in reasons
    throttles = read_table(tables / "throttle_events")
    assert throttles
    assert {row["user"] for row in throttles} == {"ops"}
    commits = [r for r in read_table(tables / "decisions") if r["type"] == "offset_commit"]
    assert any(r["error"] == "NONE" for r in commits)
