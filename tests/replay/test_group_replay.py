"""``python -m controlplane replay group``: a recorded file against its expected rows, the CLI
as a subprocess, exit codes, settings, and the shared line reader (replay/common.py).

The expected rows under tests/data/replay/group_expected/ were reviewed against
docs/reference/group-coordinator.md (initial delay extended once by the second member, session
expiry at the last heartbeat + 10 s, Empty with generation 3 after the last leave, static
replacement in Stable without a rebalance). When a deliberate behaviour change alters them,
regenerate with ``python -m controlplane replay group --events tests/data/replay/group_events.jsonl
--out tests/data/replay/group_expected`` and review the diff row by row."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from controlplane.replay.common import event_from_line
from controlplane.replay.group import main

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "replay"
RECORDED = DATA / "group_events.jsonl"
EXPECTED = DATA / "group_expected"


def load(path: Path) -> list[dict[str, Any]]:
    """Rows as parsed JSON; a null field may be written or left out (docs/reference/events.md
    §5)."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [{k: v for k, v in row.items() if v is not None} for row in rows]


def replay(tmp_path: Path, *extra: str, events: Path = RECORDED) -> tuple[int, Path]:
    out = tmp_path / "out"
    code = main(["--events", str(events), "--out", str(out), *extra])
    return code, out


# --- the recorded file -----------------------------------------------------------------------


@pytest.mark.parametrize("table", ["decisions", "group_events"])
def test_recorded_file_gives_the_expected_rows(tmp_path: Path, table: str) -> None:
    code, out = replay(tmp_path)
    assert code == 0
    assert load(out / f"{table}.jsonl") == load(EXPECTED / f"{table}.jsonl")


def test_recorded_file_covers_the_story(tmp_path: Path) -> None:
    """The expected rows tell the scenario the file was recorded for."""
    decisions = load(EXPECTED / "decisions.jsonl")
    events = load(EXPECTED / "group_events.jsonl")
    errors = {(row.get("event_id"), row["error"]) for row in decisions}
    assert ("pay-031", "FENCED_INSTANCE_ID") in errors  # the zombie of the restarted instance
    assert ("ord-017", "UNKNOWN_MEMBER_ID") in errors  # the member whose session expired
    assert ("evt-036", "NONE") in errors  # describe of group "": Kafka's backwards compatibility
    assert ("aud-035", "INVALID_REQUEST") in errors  # a bad field
    assert (None, "INVALID_REQUEST") in errors  # a line that is not JSON
    removed = [(e["group_id"], e["reason"]) for e in events if e["kind"] == "member_removed"]
    assert removed == [("orders", "session_timeout"), ("orders", "leave")]
    assert [e["event_id"] for e in events if e["kind"] == "duplicate_request"] == ["ord-009"]
    assert len(decisions) == 35  # 38 lines: one duplicate and two parked-then-answered joins


def test_messages_name_the_file_and_line(tmp_path: Path) -> None:
    _, out = replay(tmp_path)
    messages = [r["error_message"] for r in load(out / "decisions.jsonl") if "error_message" in r]
    assert messages[0].startswith("group_events.jsonl:36: not valid JSON")
    assert messages[1] == (
        "group_events.jsonl:37: session_timeout_ms: expected an int, got a string ('10s')"
    )


def test_settings_change_the_answers(tmp_path: Path) -> None:
    config = tmp_path / "strict.yaml"
    config.write_text("group.min.session.timeout.ms: 20000\nengine: {trigger: 1s}\n")
    code, out = replay(tmp_path, "--config", str(config))
    assert code == 0
    joins = [r for r in load(out / "decisions.jsonl") if r.get("type") == "join"]
    assert {r["error"] for r in joins} == {"INVALID_SESSION_TIMEOUT", "INVALID_REQUEST"}


def test_summary_counts_what_happened(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = replay(tmp_path, "--summary")
    assert code == 0
    printed = capsys.readouterr()
    assert "rebalances started: 4 in 2 group(s)" in printed.out
    assert "members removed: 2 (by reason: leave 1, session_timeout 1)" in printed.out
    assert "members fenced: 1" in printed.out
    assert "requests replaced/duplicate: 0/1" in printed.out
    assert "read 38 lines" in printed.err


def test_requests_left_parked_are_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first_line = RECORDED.read_text(encoding="utf-8").splitlines()[:2]  # a join and its rejoin
    events = tmp_path / "parked.jsonl"
    events.write_text("\n".join(first_line) + "\n")
    code, out = replay(tmp_path, "--summary", events=events)
    assert code == 0
    assert "requests still parked at the end of the input: 1" in capsys.readouterr().out
    assert [r["error"] for r in load(out / "decisions.jsonl")] == ["MEMBER_ID_REQUIRED"]


# --- the command line ------------------------------------------------------------------------


def test_cli_as_a_subprocess_imports_no_spark_and_no_pandas(tmp_path: Path) -> None:
    out = tmp_path / "cli"
    script = (
        "import sys; from controlplane.__main__ import main; "
        f"code = main(['replay', 'group', '--events', {str(RECORDED)!r}, '--out', {str(out)!r}]); "
        "assert not {'pyspark', 'pandas', 'pyarrow'} & set(sys.modules), 'heavy import'; "
        "sys.exit(code)"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT / "lib"))
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "wrote 35 decisions, 30 group_events" in done.stderr
    assert load(out / "decisions.jsonl") == load(EXPECTED / "decisions.jsonl")


def test_missing_events_file_exits_non_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = replay(tmp_path, events=tmp_path / "nope.jsonl")
    assert code == 1
    assert "events file not found" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("content", "named"),
    [
        ("group.max.sise: 3\n", "group.max.sise"),
        ("group.min.session.timeout.ms: ten\n", "group.min.session.timeout.ms"),
        ("[1, 2\n", "not valid YAML"),
    ],
)
def test_invalid_config_exits_non_zero_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, named: str
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(content)
    code, _ = replay(tmp_path, "--config", str(config))
    assert code == 1
    err = capsys.readouterr().err
    assert "invalid configuration" in err
    assert named in err


def test_missing_config_and_bad_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = replay(tmp_path, "--config", str(tmp_path / "none.yaml"))
    assert code == 1
    assert "configuration file not found" in capsys.readouterr().err
    assert main(["--events", str(RECORDED)]) == 2
    assert "--out" in capsys.readouterr().err


# --- the shared line reader ------------------------------------------------------------------


def test_lines_become_timed_events() -> None:
    event = event_from_line(b'{"event_time_ms": 12, "type": "tick"}\n', "f.jsonl", 3)
    assert event is not None
    assert (event.time_ms, event.line, event.error) == (12, "f.jsonl:3", None)
    assert event_from_line(b"   \r\n", "f", 1) is None


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b"{oops}\n", "not valid JSON"),
        (b"[1, 2]\n", "not a JSON object (got a JSON array)"),
        (b'"text"\n', "not a JSON object (got a JSON string)"),
        (b'{"a": NaN}\n', "not valid JSON: NaN is not JSON"),
        (b'{"a": -Infinity}\n', "not valid JSON: -Infinity is not JSON"),
        (b'{"group_id": "g\\ud800"}\n', "not valid JSON: a \\u escape stands for a lone"),
        (b'{"event_id": "\\udc00x"}\n', "not valid JSON: a \\u escape stands for a lone"),
        (b'{"a": "\xff"}\n', "not UTF-8 text"),
        (b'\xef\xbb\xbf{"a": 1}\n', "not valid JSON: Unexpected UTF-8 BOM"),
    ],
)
def test_unparsable_lines_keep_the_reason_and_the_text(raw: bytes, error: str) -> None:
    event = event_from_line(raw, "f.jsonl", 4)
    assert event is not None
    assert event.error is not None
    assert event.error.startswith(error)
    assert event.raw is not None
    assert event.raw.strip()
    assert (event.time_ms, event.line, dict(event.event)) == (None, "f.jsonl:4", {})


def test_an_escaped_surrogate_pair_is_one_character() -> None:
    event = event_from_line(b'{"group_id": "g\\ud83d\\ude00", "event_time_ms": 1}', "f", 1)
    assert event is not None
    assert event.error is None
    assert event.event["group_id"] == "g\U0001f600"


@pytest.mark.parametrize("value", ["12", 12.0, True, None, 2**63, -(2**63) - 1])
def test_only_an_integer_event_time_is_a_time(value: object) -> None:
    line = json.dumps({"event_time_ms": value}).encode()
    event = event_from_line(line, "f", 1)
    assert event is not None
    assert event.time_ms is None


def test_memory_grows_with_groups_not_with_events(tmp_path: Path) -> None:
    """Ten times the events of one group: the peak memory stays put (rows go to disk)."""

    def peak(count: int) -> int:
        path = tmp_path / f"e{count}.jsonl"
        line = {"type": "heartbeat", "group_id": "g", "member_id": "m", "generation_id": 1}
        with path.open("w") as handle:
            for index in range(count):
                handle.write(json.dumps(dict(line, event_id=f"e{index}", event_time_ms=index)))
                handle.write("\n")
        tracemalloc.start()
        try:
            assert main(["--events", str(path), "--out", str(tmp_path / f"o{count}")]) == 0
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, large = peak(1_000), peak(10_000)
    assert large < small * 2, (small, large)
