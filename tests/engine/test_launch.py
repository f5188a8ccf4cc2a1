"""The jobs' common entry point: configuration errors end the job before Spark starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from controlplane.engine import launch


def no_spark(*args: Any) -> Any:
    raise AssertionError("a session was started for a job that cannot run")


def test_a_job_whose_source_is_not_configured_ends_before_any_query_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """control_plane.py with a file naming only the coordinator's source used to start the
    coordinator query, then fail with a traceback building the quota one."""
    config = tmp_path / "conf.yaml"
    config.write_text("sources:\n  coordinator: {format: jsonl, path: in}\n")
    monkeypatch.setattr(launch, "session_for", no_spark)
    assert launch.run(["--config", str(config)], ["coordinator", "quota"], "") == 2
    assert "sources.quota is not configured" in caplog.text


def test_a_bad_configuration_file_ends_the_job_with_status_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launch, "session_for", no_spark)
    assert launch.run(["--config", str(tmp_path / "missing.yaml")], ["coordinator"], "") == 2


class FakeQuery:
    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def awaitTermination(self) -> None:
        self.log.append(f"{self.name} ended")

    def stop(self) -> None:
        self.log.append(f"{self.name} stopped")

    def exception(self) -> None:
        return None


class FakeStreams:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def awaitAnyTermination(self) -> None:
        self.log.append("first ended")


class FakeSpark:
    def __init__(self, log: list[str]) -> None:
        self.streams = FakeStreams(log)


def fake_builder(log: list[str], name: str) -> Any:
    class Writer:
        def start(self) -> FakeQuery:
            return FakeQuery(log, name)

    def build(spark: Any, settings: Any, **kwargs: Any) -> Writer:
        log.append(f"{name} available_now={kwargs['available_now']}")
        return Writer()

    return build


def test_available_now_replays_wait_for_every_query_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/engine.md's event-time replays: the jobs could not ask for availableNow, and
    awaitAnyTermination would have stopped the other query when the first one ended."""
    from controlplane.engine import queries

    config = tmp_path / "conf.yaml"
    config.write_text(
        "engine: {mode: event_time}\nsources:\n  coordinator: {path: a}\n  quota: {path: b}\n"
    )
    log: list[str] = []
    monkeypatch.setattr(launch, "session_for", lambda *args: FakeSpark(log))
    monkeypatch.setattr(queries, "register_progress_listener", lambda *args: None)
    monkeypatch.setattr(queries, "build_coordinator_query", fake_builder(log, "coordinator"))
    monkeypatch.setattr(queries, "build_quota_query", fake_builder(log, "quota"))
    argv = ["--config", str(config), "--available-now"]
    assert launch.run(argv, ["coordinator", "quota"], "") == 0
    assert log == [
        "coordinator available_now=True",
        "quota available_now=True",
        "coordinator ended",
        "quota ended",
        "coordinator stopped",
        "quota stopped",
    ]


def test_available_now_is_refused_in_processing_time_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "conf.yaml"
    config.write_text("sources:\n  coordinator: {path: a}\n")
    monkeypatch.setattr(launch, "session_for", no_spark)
    assert launch.run(["--config", str(config), "--available-now"], ["coordinator"], "") == 2
