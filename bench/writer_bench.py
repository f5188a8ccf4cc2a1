"""Writer benchmark: the cost of one micro-batch's Delta writes, delta-rs against native Delta
(delta-spark on the local session), on the batch the engine writes at 10,000 groups. Prints
figures; asserts nothing about speed.

    PYTHONPATH=lib .venv/bin/python bench/writer_bench.py [--groups 10000] [--batches 8]

One batch = what a 500 ms trigger carries at 10,000 groups with the engine bench's workload
(3,400 events/s offered): ~1,700 decisions, ~350 group events, and the ``groups`` MERGE of
the groups those touched. Each writer writes ``--batches`` batches in turn (the two writers
alternate, batch by batch, so both see the same machine load); the first batch of each
(table creation, JIT) is reported apart. Figures: p50, p90 and mean milliseconds per batch,
and the same for the MERGE alone.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))


def batch_rows(groups: int, batch_id: int) -> dict[str, list[dict[str, Any]]]:
    decisions_per_batch = groups * 17 // 100  # 3,400 events/s at 10,000 groups, 0.5 s
    touched = [
        f"g{(batch_id * decisions_per_batch + i) % groups:05d}" for i in range(decisions_per_batch)
    ]
    member = {"member_id": "m", "client_id": "c", "client_host": "/10.0.0.1", "offline": False}
    decisions = [
        {
            "event_id": f"b{batch_id}-{i}",
            "group_id": group,
            "type": "heartbeat",
            "member_id": "m",
            "error_code": 0,
            "error": "NONE",
            "generation_id": 1,
            "group_state": "Stable",
            "group_members": [member],
            "event_time_ms": 1_700_000_000_000 + batch_id,
            "decided_at_ms": 1_700_000_000_000 + batch_id,
        }
        for i, group in enumerate(touched)
    ]
    events = [
        {"group_id": group, "at_ms": 1, "kind": "rebalance_started", "reason": "join"}
        for group in touched[: len(touched) // 5]
    ]
    states = [
        {
            "group_id": group,
            "group_state": "Stable",
            "generation_id": batch_id + 1,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "leader_id": "m",
            "members": [member],
            "updated_at_ms": batch_id,
        }
        for group in sorted(set(touched))
    ]
    engine = {"batch_id": batch_id, "processed_at_ms": 0}
    return {
        "decisions": [{**r, **engine} for r in decisions],
        "group_events": [{**r, **engine} for r in events],
        "groups": [{**r, **engine} for r in states],
    }


def write_batch(
    writer: Any, rows: dict[str, list[dict[str, Any]]], batch_id: int
) -> tuple[float, float]:
    start = time.perf_counter()
    merge_ms = 0.0
    for table in ("decisions", "group_events", "groups"):
        table_start = time.perf_counter()
        writer.write(table, rows[table], batch_id)
        if table == "groups":
            merge_ms = (time.perf_counter() - table_start) * 1000
    return (time.perf_counter() - start) * 1000, merge_ms


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return f"{statistics.median(ordered):8.0f} {p90:8.0f} {statistics.mean(ordered):8.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--out", default="out/bench/writers")
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "lib"), os.environ.get("PYTHONPATH", "")]
    )
    from controlplane.engine.session import build_local_session
    from controlplane.io.sinks import DeltaRsWriter, NativeDeltaWriter

    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    spark = build_local_session("writer-bench", require_jars=True)
    writers = {
        "delta-rs": DeltaRsWriter(out / "delta-rs", "bench"),
        "native": NativeDeltaWriter(spark, str((out / "native").resolve()), "bench"),
    }
    first: dict[str, tuple[float, float]] = {}
    totals: dict[str, list[float]] = {name: [] for name in writers}
    merges: dict[str, list[float]] = {name: [] for name in writers}
    for batch_id in range(args.batches + 1):
        rows = batch_rows(args.groups, batch_id)
        for name, writer in writers.items():
            total, merge = write_batch(writer, rows, batch_id)
            if batch_id == 0:
                first[name] = (total, merge)
            else:
                totals[name].append(total)
                merges[name].append(merge)
    sizes = {table: len(rows) for table, rows in batch_rows(args.groups, 1).items()}
    print(f"groups {args.groups}, rows per batch {sizes}, {args.batches} batches per writer")
    print("writer      first_ms  batch_p50  batch_p90  batch_mean   merge_p50 merge_p90 merge_mean")
    for name in writers:
        print(
            f"{name:10s} {first[name][0]:9.0f}  {summary(totals[name])}   {summary(merges[name])}",
            flush=True,
        )
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
