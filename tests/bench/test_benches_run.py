"""The benchmarks that need no JVM still run (at toy sizes): a benchmark is only worth its
figures if it runs, and imports move under it. Speed is not asserted here (docs/benchmarks.md);
the Spark benches (engine_bench, restart_bench, writer_bench) are run by hand."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("script", "arguments", "printed"),
    [
        ("coordinator_bench.py", ["--groups", "20", "--storm-groups", "10"], "shard envelope"),
        ("quota_bench.py", ["--requests", "200", "--principals", "100"], "machine.handle"),
        ("keying_check_bench.py", ["--groups", "50", "--shards", "4"], "50 groups in 4 shards"),
        (
            "engine_path_bench.py",
            ["--groups", "30", "--seconds", "4", "--scaling", "10"],
            "one call on a shard of N groups",
        ),
        (
            "engine_path_bench.py",
            ["--groups", "30", "--seconds", "4", "--scaling", "10", "--by-slot", "2", "--answers"],
            "  second 1: 10 syncs, 10 joins: ",
        ),
    ],
)
def test_the_bench_runs_at_a_toy_size(script: str, arguments: list[str], printed: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *arguments],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert printed in done.stdout


def test_a_run_too_short_for_the_workload_is_refused_with_a_message() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "engine_path_bench.py"), "--seconds", "3"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "lib")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "--seconds must be at least 4" in done.stderr
    assert "Traceback" not in done.stderr
