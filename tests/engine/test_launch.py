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
