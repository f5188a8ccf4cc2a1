"""Client round trip over Kafka against the landing-directory transport: the demo's fleet, the
same configuration and trigger, one run per transport. Prints figures; asserts nothing.

    PYTHONPATH=lib .venv/bin/python bench/client_latency_bench.py [--config conf/demo.yaml]
        [--duration-s 120] [--transports files,kafka]

Each transport runs in its own process (a fresh Spark session, and for Kafka a fresh local
broker): ``python -m controlplane demo --transport files|kafka --latency-report FILE``, as
``make demo`` and ``make demo-kafka`` run it (cli/demo_run.py), ``--duration-s`` long.
Figures per run:

* the round trip of every answered client request, send to answer received (members and the
  admin tool; ``Requester.round_trips_ms``): count, p50, p90, p99, max;
* the coordinator's and the quota's batch time (``duration_ms`` of ``query_progress``), p50
  and p90, and the trigger interval T;
* the goal of the issue: p99 <= 2 T + one batch (the coordinator's p50 batch time).

The Kafka run needs the engine's Kafka side (Kafka sources and ``engine.answers_topic``): on a
build without it the demo refuses at once, and the run is reported as not run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))


def percentile(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def batch_times(tables_root: str) -> dict[str, list[int]]:
    """``duration_ms`` per query from ``query_progress``, without the first batch (Spark's
    start, not a steady-state batch)."""
    from deltalake import DeltaTable

    path = str(Path(tables_root) / "query_progress")
    if not DeltaTable.is_deltatable(path):
        print(f"(no batch times: no table {path})")
        return {}
    out: dict[str, list[int]] = {}
    for row in DeltaTable(path).to_pyarrow_table().to_pylist():
        if int(row["batch_id"]) > 0:
            out.setdefault(str(row["query"]), []).append(int(row["duration_ms"]))
    return out


def figures(trips: list[int]) -> str:
    if not trips:
        return "no answers"
    return (
        f"{len(trips)} answers: p50 {percentile(trips, 0.5):,} ms, p90 {percentile(trips, 0.9):,}"
        f" ms, p99 {percentile(trips, 0.99):,} ms, max {max(trips):,} ms"
    )


def report(transport: str, result: dict[str, Any]) -> None:
    print(f"\n--- {transport}")
    if "member_round_trips_ms" not in result:
        print(f"  not run (the demo exited with {result.get('exit')}; see its output above)")
        return
    members, admin = result["member_round_trips_ms"], result["admin_round_trips_ms"]
    trips = members + admin
    print(f"  round trip, every request: {figures(trips)}")
    print(f"  round trip, members only:  {figures(members)}")
    trigger_ms = int(result["trigger_interval_ms"])
    for query, durations in sorted(result["batches"].items()):
        print(
            f"  {query} batch time ({len(durations)} batches): p50 {percentile(durations, 0.5):,}"
            f" ms, p90 {percentile(durations, 0.9):,} ms"
        )
    coordinator = result["batches"].get("coordinator")
    if not trips or not coordinator:
        print("  goal p99 <= 2 T + one batch: no figure (no answers or no batch times)")
        return
    goal_ms = 2 * trigger_ms + percentile(coordinator, 0.5)
    p99 = percentile(trips, 0.99)
    verdict = "met" if p99 <= goal_ms else "NOT met"
    print(f"  goal p99 <= 2 x {trigger_ms:,} ms + one batch = {goal_ms:,} ms: {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="conf/demo.yaml")
    parser.add_argument("--duration-s", type=int, default=120)
    parser.add_argument("--transports", default="files,kafka")
    parser.add_argument(
        "--engine-start-timeout-s",
        type=int,
        default=900,
        help="demo.engine_start_timeout_s for these runs (a loaded machine starts Spark slowly)",
    )
    parser.add_argument(
        "--writer",
        default="delta-rs",
        help="engine.writer for both runs (default delta-rs: no JVM Delta writes competing with"
        " the queries for the two cores)",
    )
    args = parser.parse_args()
    results: dict[str, dict[str, Any]] = {}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "lib"), str(ROOT / "tests")])}
    for transport in args.transports.split(","):
        with tempfile.TemporaryDirectory() as scratch:
            out = Path(scratch) / "report.json"
            config = Path(scratch) / "config.yaml"
            raw = yaml.safe_load((ROOT / args.config).read_text(encoding="utf-8"))
            raw.setdefault("demo", {})["engine_start_timeout_s"] = args.engine_start_timeout_s
            raw.setdefault("engine", {})["writer"] = args.writer
            config.write_text(yaml.safe_dump(raw), encoding="utf-8")
            print(f"\n=== the demo fleet over {transport} ({args.duration_s} s)", flush=True)
            command = [sys.executable, "-m", "controlplane", "demo", "--config", str(config)]
            command += ["--duration-s", str(args.duration_s), "--transport", transport]
            command += ["--latency-report", str(out)]
            code = subprocess.call(command, cwd=ROOT, env=env)
            result: dict[str, Any] = {"exit": code}
            if out.is_file():
                result.update(json.loads(out.read_text()))
                result["batches"] = batch_times(result["tables_root"])
            results[transport] = result
    print("\n=== client round trips (send -> answer received), same fleet, same trigger")
    for transport, result in results.items():
        report(transport, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
