"""The job as an operator runs it: ``python jobs/control_plane.py --config FILE`` in its own
process. Idle, it logs a handful of lines; SIGTERM or Ctrl-C (SIGINT) stops it with one line
and status 0, without a traceback; the landing files it read end in the archive, moved once.

It used to log a py4j line per listener call, Spark's "Current batch is falling behind" every
idle batch and "Fail to move" for every archived file at every idle batch; SIGTERM printed
about 1,230 Java stack lines (the query listener called into a dying Python process) and
Ctrl-C Python tracebacks ("RuntimeError: reentrant call")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spark.conftest import ROOT, drop_events, read_table

pytestmark = pytest.mark.spark

START_DEADLINE_S = 300.0  # a first batch takes 10-60 s on a busy 2-core machine
STOP_DEADLINE_S = 120.0
IDLE_S = 20.0
IDLE_LINES_AT_MOST = 4  # a line per query per minute, and some slack

CONFIG = """
group.initial.rebalance.delay.ms: 3000
group.min.session.timeout.ms: 6000
quotas:
  - {{user: "<default>", controller_mutation_rate: 10}}
engine:
  trigger_interval_ms: 1000
  shuffle_partitions: 2
  shards: 4
  checkpoint_root: {root}/checkpoints
  tables_root: {root}/tables
  writer: delta-rs
sources:
  coordinator:
    path: {root}/landing/coordinator
    archive_dir: {root}/archive/coordinator
  quota:
    path: {root}/landing/quota
    archive_dir: {root}/archive/quota
"""

JOIN = {
    "event_id": "join-1",
    "event_time_ms": 1,
    "type": "join",
    "group_id": "orders",
    "member_id": "",
    "client_id": "app",
    "request_version": 4,  # asks for a member id: a pending member, and its timer
    "session_timeout_ms": 10_000,
    "rebalance_timeout_ms": 30_000,
    "protocol_type": "consumer",
    "protocols": [{"name": "range", "metadata": ""}],
}
MUTATION = {
    "event_id": "create-1",
    "event_time_ms": 1,
    "type": "create_topics",
    "user": "alice",
    "client_id": "admin",
    "request_version": 7,
    "topics": [{"name": "orders", "partitions": 3}],
}


class Job:
    """The job in a subprocess; stdout and stderr go to files (a full pipe would block it)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        config = root / "job.yaml"
        config.write_text(CONFIG.format(root=root))
        self.out, self.err = root / "job.out", root / "job.err"
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT / "lib"),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }
        with self.out.open("w") as out, self.err.open("w") as err:
            self.process = subprocess.Popen(
                [sys.executable, "jobs/control_plane.py", "--config", str(config)],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=err,
            )

    def text(self) -> str:
        return self.out.read_text() + self.err.read_text()

    def lines(self) -> list[str]:
        return self.text().splitlines()

    def wait_for(self, *texts: str) -> None:
        end = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < end:
            output = self.text()
            if all(text in output for text in texts):
                return
            if self.process.poll() is not None:
                break
            time.sleep(1.0)
        pytest.fail(f"no {texts} in the job's output:\n{self.text()[-4000:]}")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_idle_job_is_quiet_and_a_signal_stops_it_with_one_line(
    tmp_path: Path, signum: signal.Signals
) -> None:
    job = Job(tmp_path)
    try:
        job.wait_for("query coordinator started", "query quota started")
        joins = drop_events(tmp_path / "landing" / "coordinator", [JOIN])
        mutations = drop_events(tmp_path / "landing" / "quota", [MUTATION])
        job.wait_for("coordinator: batch 0:", "quota: batch 0:")
        busy = len(job.lines())
        time.sleep(IDLE_S)  # idle batches run every trigger: the pending member's timer
        idle = job.lines()[busy:]
        assert len(idle) <= IDLE_LINES_AT_MOST, "\n".join(idle)
        job.process.send_signal(signum)
        status = job.process.wait(STOP_DEADLINE_S)
    finally:
        job.kill()
    output = job.text()
    assert status == 0, output[-4000:]
    assert "Traceback" not in output
    assert "Exception" not in output
    assert "Fail to move" not in output
    assert "falling behind" not in output
    stops = [line for line in job.lines() if "stopped on" in line]
    assert len(stops) == 1
    assert stops[0].endswith(f"stopped on {signum.name} (coordinator, quota)")
    assert len(job.lines()) <= 40, output  # a few lines at the start, a few per batch 0
    assert [r["event_id"] for r in read_table(tmp_path / "tables" / "decisions")] == ["join-1"]
    assert [r["event_id"] for r in read_table(tmp_path / "tables" / "quota_decisions")] == [
        "create-1"
    ]
    archived = sorted(p.name for p in (tmp_path / "archive").rglob("*.jsonl"))
    assert archived == sorted([joins.name, mutations.name])
    assert not list((tmp_path / "landing").rglob("*.jsonl"))
