"""``replay quota`` end to end: a recorded event file and its expected output (each row checked
by hand against the rules; the walk-through is in docs/quota.md), plus the run conditions of
docs/reference/events.md §8."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from controlplane.__main__ import main

DATA = Path(__file__).resolve().parents[1] / "data" / "replay"
SAMPLE = Path(__file__).resolve().parents[2] / "conf" / "sample" / "quota_events.jsonl"


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def test_recorded_replay(tmp_path: Path) -> None:
    code = main(
        [
            "replay",
            "quota",
            "--events",
            str(DATA / "quota_events.jsonl"),
            "--out",
            str(tmp_path),
            "--config",
            str(DATA / "quota_config.yaml"),
        ]
    )
    assert code == 0
    for table in ("quota_decisions", "throttle_events"):
        expected = read_rows(DATA / "quota_expected" / f"{table}.jsonl")
        assert read_rows(tmp_path / f"{table}.jsonl") == expected, table


def test_recorded_output_holds_the_story() -> None:
    """The facts the expected file must show, independent of how it was produced."""
    decisions = {
        row["event_id"]: row for row in read_rows(DATA / "quota_expected" / "quota_decisions.jsonl")
    }
    assert decisions["q03"]["throttle_time_ms"] == 200  # alice at -2 tokens, 10/s
    assert [t["error_code"] for t in decisions["q04"]["topics"]] == [0, 89]  # 0 tokens admits
    assert decisions["q05"]["throttle_time_ms"] == 5000  # permissive CreatePartitions v2
    assert decisions["q07"]["topics"][0]["error_code"] == 0  # validate_only, charged
    assert decisions["q08"]["throttle_time_ms"] == 8900  # paid for the validate_only
    assert decisions["q09"]["error_code"] == 42
    assert decisions["q12"]["quota_entity"] is None  # empty client id: unlimited
    assert decisions["q16"]["topics"][0]["error_code"] == 0  # idle > 1 h: fresh bucket
    assert len(read_rows(DATA / "quota_expected" / "quota_decisions.jsonl")) == 17  # dup q01


def test_summary_counts_the_answers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--summary`` prints what the recorded output holds: the answers by error, the topics
    throttled away, the throttle time per quota key."""
    args = ["replay", "quota", "--events", str(DATA / "quota_events.jsonl"), "--out"]
    config = ["--config", str(DATA / "quota_config.yaml")]
    assert main([*args, str(tmp_path), *config, "--summary"]) == 0
    printed = capsys.readouterr().out.splitlines()
    decisions = read_rows(DATA / "quota_expected" / "quota_decisions.jsonl")
    errors = Counter(str(row["error"]) for row in decisions)
    by_error = ", ".join(f"{name} {count}" for name, count in sorted(errors.items()))
    assert f"requests answered: {len(decisions)} ({by_error})" in printed
    throttled = [t for row in decisions for t in row["topics"] or [] if t["error_code"] == 89]
    assert f"topics rejected with THROTTLING_QUOTA_EXCEEDED: {len(throttled)}" in printed
    per_key: Counter[str] = Counter()
    for row in read_rows(DATA / "quota_expected" / "throttle_events.jsonl"):
        per_key[row["quota_key"]] += row["throttle_time_ms"]
    for key, total in per_key.items():
        assert f"throttled: {key} {total} ms in all" in printed


def test_sample_replays(tmp_path: Path) -> None:
    args = ["replay", "quota", "--events", str(SAMPLE), "--out", str(tmp_path)]
    assert main([*args, "--config", str(DATA / "quota_config.yaml")]) == 0
    rows = read_rows(tmp_path / "quota_decisions.jsonl")
    assert any(row["throttle_time_ms"] > 0 for row in rows)


def test_without_quotas_nothing_is_tracked(tmp_path: Path) -> None:
    assert main(["replay", "quota", "--events", str(SAMPLE), "--out", str(tmp_path)]) == 0
    rows = read_rows(tmp_path / "quota_decisions.jsonl")
    valid = [row for row in rows if row["error_code"] != 42]
    assert valid
    assert all(row["quota_key"] is None and row["throttle_time_ms"] == 0 for row in valid)
    assert read_rows(tmp_path / "throttle_events.jsonl") == []


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        (["--events", "/nonexistent/events.jsonl"], 1),  # missing input: cannot run
        (["--config", "/nonexistent/config.yaml"], 1),  # missing configuration
    ],
)
def test_cannot_run(tmp_path: Path, extra: list[str], code: int) -> None:
    args = ["replay", "quota", "--events", str(SAMPLE), "--out", str(tmp_path / "out"), *extra]
    assert main(args) == code


def test_invalid_configuration(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("quotas:\n  - {user: alice, controller_mutation_rate: -1}\n")
    args = ["replay", "quota", "--events", str(SAMPLE), "--out", str(tmp_path / "o")]
    assert main([*args, "--config", str(config)]) == 1
