"""What runs differently on a Databricks cluster, checked here without one: the state store
provider the session sets, the maintenance command on the cluster's own session and without
delta-rs, and the job scripts that never put a checkout ahead of the installed wheel."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from controlplane.engine.session import (
    DATABRICKS_ROCKSDB_PROVIDER,
    PROVIDER_CONF,
    ROCKSDB_PROVIDER,
    STATE_CONF,
    apply_state_conf,
)

ROOT = Path(__file__).resolve().parents[2]


class FakeConf:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


class FakeSession:
    def __init__(self) -> None:
        self.conf = FakeConf()


def test_a_databricks_session_gets_databricks_rocksdb_provider_and_a_local_one_spark_s() -> None:
    """Databricks documents its own RocksDB provider class; the provider is frozen into a
    checkpoint by its first run, so the first production run must already have it."""
    session = FakeSession()
    apply_state_conf(session, shuffle_partitions=8)
    assert session.conf.values[PROVIDER_CONF] == DATABRICKS_ROCKSDB_PROVIDER
    assert session.conf.values[
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
    ] == ("true")
    assert session.conf.values["spark.sql.shuffle.partitions"] == "8"
    assert STATE_CONF[PROVIDER_CONF] == ROCKSDB_PROVIDER  # local sessions: Apache Spark's


def test_maintenance_with_spark_on_databricks_takes_the_cluster_s_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The nightly job runs `maintenance --engine spark` on the cluster: its session (its
    Delta, its catalog), never a local[2] one with the project's jars."""
    from pyspark.sql import SparkSession

    from controlplane.engine import session

    cluster = object()

    class Builder:
        def getOrCreate(self) -> Any:
            return cluster

    def no_local_session(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a local session on a Databricks cluster")

    monkeypatch.setattr(SparkSession, "builder", Builder())
    monkeypatch.setattr(session, "build_local_session", no_local_session)
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "17.3")
    assert session.command_session("controlplane-maintenance") is cluster
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION")
    with pytest.raises(AssertionError, match="a local session"):
        session.command_session("controlplane-maintenance")


def test_the_tables_are_found_without_delta_rs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Databricks runtime has no delta-rs (`deltalake`): the maintenance job lists the
    tables from their logs alone."""
    from controlplane.cli.tables import table_paths
    from controlplane.io.sinks import DeltaRsWriter

    DeltaRsWriter(tmp_path, "test").write("decisions", [{"event_id": "a"}], 0)
    (tmp_path / "not_a_table" / "_delta_log").mkdir(parents=True)  # an empty log
    (tmp_path / "loose").mkdir()
    monkeypatch.setitem(sys.modules, "deltalake", None)  # import deltalake fails
    assert table_paths(tmp_path) == {"decisions": tmp_path / "decisions"}


@pytest.mark.parametrize("script", ["coordinator.py", "quota.py", "control_plane.py"])
def test_a_job_script_runs_the_installed_package_not_the_checkout(
    script: str, tmp_path: Path
) -> None:
    """The synced lib/ used to go first on the driver's path, ahead of the wheel the
    executors run. An installed package (here a stand-in on PYTHONPATH) wins; the checkout's
    lib/ is only a fallback."""
    cli = tmp_path / "controlplane" / "cli"
    cli.mkdir(parents=True)
    (tmp_path / "controlplane" / "__init__.py").write_text("")
    (cli / "__init__.py").write_text("")
    (cli / "job.py").write_text("def main(argv):\n    print('installed', *argv)\n    return 0\n")
    ran = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / script), "--config", "c.yaml"],
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    query = {"coordinator.py": "coordinator", "quota.py": "quota"}.get(script, "all")
    assert ran.stdout.split() == ["installed", query, "--config", "c.yaml"]


def test_a_job_script_falls_back_to_the_checkout(tmp_path: Path) -> None:
    """Without an installed package the checkout's lib/ is used (its own --help). `-S`: no
    site initialisation, so the venv's editable install (a .pth file) is not seen, while its
    site-packages on PYTHONPATH still give PyYAML."""
    import sysconfig

    ran = subprocess.run(
        [sys.executable, "-S", str(ROOT / "jobs" / "quota.py"), "--help"],
        env={"PYTHONPATH": sysconfig.get_paths()["purelib"], "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr
    assert "usage: python -m controlplane job quota" in ran.stdout
