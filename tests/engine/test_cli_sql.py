"""The read side: sql/*.sql run by `python -m controlplane sql`, `groups`, `quotas` and
`maintenance`, over small Delta tables written by the engine's own sink."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from controlplane.cli import groups, maintenance, quotas, sql
from controlplane.io.sinks import DeltaRsWriter

ROOT = Path(__file__).resolve().parents[2]
HOUR_MS = 3_600_000
T0 = 1_700_000_000_000 - (1_700_000_000_000 % HOUR_MS)


def event(group: str, at_ms: int, kind: str, **extra: Any) -> dict[str, Any]:
    return {"group_id": group, "at_ms": at_ms, "kind": kind, **extra}


def write_read_side_tables(root: Path) -> Path:
    """Small tables for every question in sql/, written by the engine's own (delta-rs) sink."""
    writer = DeltaRsWriter(root, "test")
    writer.write(
        "group_events",
        [
            event("orders", T0 + 1, "rebalance_started"),
            event("orders", T0 + 2, "rebalance_started"),
            event("orders", T0 + HOUR_MS + 5, "rebalance_started"),
            event("pay", T0 + 9, "rebalance_started"),
            event("orders", T0 + 3, "member_removed", member_id="m1", reason="session_timeout"),
            event("orders", T0 + 4, "member_removed", member_id="m2", reason="session_timeout"),
            event("pay", T0 + 4, "member_removed", member_id="m3", reason="leave"),
            event(
                "pay",
                T0 + 7,
                "member_fenced",
                member_id="old",
                group_instance_id="pod-1",
                reason="static_replaced",
            ),
        ],
        0,
    )
    joins = [
        {
            "event_id": f"j{i}",
            "group_id": "orders",
            "type": "join",
            "member_id": "m",
            "error_code": 0,
            "error": "NONE",
            "event_time_ms": T0,
            "decided_at_ms": T0 + wait,
        }
        for i, wait in enumerate([100, 200, 300, 3000])
    ]
    commit = {
        "event_id": "c1",
        "group_id": "orders",
        "type": "offset_commit",
        "member_id": "m",
        "error_code": 0,
        "error": "NONE",
        "event_time_ms": T0,
        "decided_at_ms": T0 + 10,
        "offsets": [
            {"topic": "t", "partition": 0, "offset": 42, "metadata": None, "error_code": 0}
        ],
    }
    writer.write("decisions", [*joins, commit], 0)
    writer.write(
        "groups",
        [
            {
                "group_id": "orders",
                "group_state": "Stable",
                "generation_id": 3,
                "protocol_type": "consumer",
                "protocol_name": "range",
                "leader_id": "m",
                "members": [
                    {
                        "member_id": "m",
                        "group_instance_id": None,
                        "client_id": "app",
                        "client_host": "/10.0.0.1",
                        "assignment": None,
                        "offline": False,
                    }
                ],
                "updated_at_ms": T0,
            },
        ],
        0,
    )
    writer.write(
        "throttle_events",
        [
            {
                "event_id": "q1",
                "user": "alice",
                "quota_key": "user=alice",
                "throttle_time_ms": 1500,
                "rejected_topics": ["a", "b"],
            },
            {
                "event_id": "q2",
                "user": "alice",
                "quota_key": "user=alice",
                "throttle_time_ms": 500,
                "rejected_topics": [],
            },
        ],
        0,
    )
    writer.write(
        "quota_decisions",
        [
            {
                "event_id": "q1",
                "user": "alice",
                "client_id": "tf",
                "quota_entity": "user=alice",
                "quota_key": "user=alice",
                "rate_per_s": 10,
                "type": "create_topics",
                "error_code": 89,
                "error": "THROTTLING_QUOTA_EXCEEDED",
                "throttle_time_ms": 1500,
            },
            {
                "event_id": "q0",
                "user": "alice",
                "client_id": "tf",
                "quota_entity": "user=alice",
                "quota_key": "user=alice",
                "rate_per_s": 10,
                "type": "create_topics",
                "error_code": 0,
                "error": "NONE",
                "throttle_time_ms": 0,
            },
        ],
        0,
    )
    return root


@pytest.fixture
def tables(tmp_path: Path) -> Path:
    return write_read_side_tables(tmp_path)


def run_sql(tables: Path, file: str, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    assert sql.main([str(ROOT / "sql" / file), "--tables-root", str(tables), "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_rebalances_per_group_and_hour(tables: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = run_sql(tables, "rebalances_per_group_hour.sql", capsys)
    assert [(r["group_id"], r["rebalances"]) for r in rows] == [
        ("orders", 2),
        ("orders", 1),
        ("pay", 1),
    ]


def test_members_removed_by_reason(tables: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = run_sql(tables, "members_removed_by_reason.sql", capsys)
    assert [(r["group_id"], r["reason"], r["removed"]) for r in rows] == [
        ("orders", "session_timeout", 2),
        ("pay", "leave", 1),
    ]


def test_fenced_static_members(tables: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = run_sql(tables, "fenced_static_members.sql", capsys)
    assert [(r["group_instance_id"], r["member_id"]) for r in rows] == [("pod-1", "old")]


def test_join_wait_percentiles(tables: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (row,) = run_sql(tables, "join_wait_percentiles.sql", capsys)
    assert row["joins"] == 4
    assert 100 <= row["p50_wait_ms"] <= 300
    assert row["max_wait_ms"] == 3000


def test_throttled_principals(tables: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (row,) = run_sql(tables, "throttled_principals.sql", capsys)
    assert (row["user"], row["throttled_requests"], row["throttle_ms_total"]) == ("alice", 2, 2000)
    assert row["rejected_topics"] == 2


def test_sql_text_and_errors(tables: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sql.main(["SELECT count(*) AS n FROM decisions", "--tables-root", str(tables)]) == 0
    assert "5" in capsys.readouterr().out
    assert sql.main(["SELECT * FROM nowhere", "--tables-root", str(tables)]) == 1
    assert "nowhere" in capsys.readouterr().err
    assert sql.main(["missing.sql", "--tables-root", str(tables)]) == 2


def test_groups_list_and_describe(tables: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert groups.main(["list", "--tables-root", str(tables)]) == 0
    out = capsys.readouterr().out
    assert "orders" in out
    assert "Stable" in out
    assert groups.main(["describe", "orders", "--tables-root", str(tables)]) == 0
    out = capsys.readouterr().out
    assert "GENERATION 3" in out
    assert "/10.0.0.1" in out
    assert "42" in out  # the committed offset
    assert groups.main(["describe", "nope", "--tables-root", str(tables)]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_quotas_describe(tables: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "quotas:\n"
        "  - {user: alice, controller_mutation_rate: 10}\n"
        "  - {user: bob, controller_mutation_rate: 1}\n"
    )
    assert (
        quotas.main(["describe", "alice", "--tables-root", str(tables), "--config", str(config)])
        == 0
    )
    out = capsys.readouterr().out
    assert "Quota configs for user=alice are controller_mutation_rate=10.0" in out
    assert "user=bob" not in out
    assert "1500" in out
    assert quotas.main(["describe", "carol", "--tables-root", str(tables)]) == 0
    assert "No mutation requests" in capsys.readouterr().out


def test_maintenance_compacts_and_vacuums(tables: Path, capsys: pytest.CaptureFixture[str]) -> None:
    writer = DeltaRsWriter(tables, "more")
    for batch in range(1, 4):
        writer.write("decisions", [{"event_id": f"x{batch}", "decided_at_ms": 1}], batch)
    assert (
        maintenance.main(["--tables-root", str(tables), "--retention-hours", "0", "--force"]) == 0
    )
    out = capsys.readouterr().out
    assert "decisions: 4 files compacted into 1; vacuum removed 4 files" in out
    assert (
        sql.main(["SELECT count(*) AS n FROM decisions", "--tables-root", str(tables), "--json"])
        == 0
    )
    assert json.loads(capsys.readouterr().out) == {"n": 8}


def test_maintenance_without_tables_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert maintenance.main(["--tables-root", str(tmp_path / "none")]) == 1
    assert "no Delta tables" in capsys.readouterr().err
