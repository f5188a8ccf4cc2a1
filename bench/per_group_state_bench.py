"""Per-group state against the shard's blob: what a batch would cost if each group's state were
its own entry in Spark's state store (``transformWithStateInPandas`` with a map state under the
shard key), so that a call reads and writes only the groups its rows reach, instead of the
shard's whole state going to the Python worker and back (``applyInPandasWithState``, which the
engine runs). Prints figures; asserts nothing.

    PYTHONPATH= .venv/bin/python bench/per_group_state_bench.py [--apis blob,map,none]
        [--groups 34000] [--rate 10400] [--seconds 60] [--rounds 1]

The engine's load at its target (issue 14): 34,000 groups of 717 bytes of state each (the
idempotence window full: 64 digests of 8 bytes, and the group's encoding), 64 shard keys,
about 10,400 requests a second, each group reached once every 3.3 s as by its heartbeats.
Spark's rate source gives the rows (row ``n`` reaches group ``n mod groups``, in shard
``group mod 64``), on the engine's local session (RocksDB with changelog checkpointing, two
shuffle partitions), with a 1-second trigger. No run does the engine's work on the rows: each
moves state only, so the figures are the state's cost and the input's, not the core's.

* ``blob``: ``applyInPandasWithState`` keyed by shard, the state one base64 text of the
  shard's bytes (groups / 64 x 717 bytes), read and replaced whole each call, as the engine
  does (engine.adapter's encoding).
* ``map``: ``transformWithStateInPandas`` keyed by shard, a map state from group id to the
  group's 717 bytes; a call reads and replaces the value of each group its rows reach (a
  group not yet there gets random bytes), one request to the JVM's state server each.
* ``none``: ``applyInPandasWithState`` keyed by shard with 100 bytes of state a key: the
  input's own cost, for the difference the state makes.

Per run, over the loaded batches after the first three that start once every group has its
state: the median ``addBatch`` and batch duration, the median rows a batch, ``addBatch`` over
the groups a batch reached (a batch slower than the trigger takes more rows, and reaches more
groups, up to all of them), and the CPU the JVM and the Python workers used after the run's
first third. ``transformWithStateInPandas`` needs protobuf in the
environment (``pip install 'protobuf==6.33.5'``, the version of pyspark 4.2's generated
code); it is not a dependency of the project, as the engine does not use that API.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
sys.path.insert(0, str(ROOT / "bench"))

import state_roundtrip_bench  # noqa: E402
from cpu_meter import describe  # noqa: E402
from state_roundtrip_bench import measure, rotated  # noqa: E402

SHARDS = 64  # the engine's default shard count
GROUP_BYTES = 717  # a group's state with a full idempotence window (docs/benchmarks/engine.md)
WARM_BATCHES = 3
APIS = ("blob", "map", "none")


def keeps_a_blob(size: int) -> Callable[..., Iterator[Any]]:
    """``blob`` and ``none``: the shard's state, ``size`` bytes as base64 text, read and replaced
    whole as the engine does (the state round-trip benchmark's function)."""
    return state_roundtrip_bench.keeps_a_blob(size, "text")


def keeps_a_map() -> Any:
    """``map``: a stateful processor whose state is one map entry per group."""
    from pyspark.sql.streaming import StatefulProcessor

    class GroupBodies(StatefulProcessor):  # type: ignore[misc]
        def init(self, handle: Any) -> None:
            from controlplane.engine.adapter import prepare_worker

            prepare_worker()
            self.bodies = handle.getMapState("bodies", "group long", "body binary")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:
            import pandas as pd

            count = 0
            reached: set[int] = set()
            for frame in rows:
                count += len(frame)
                reached.update(int(group) for group in frame["group"])
            for group in sorted(reached):
                value = self.bodies.getValue((group,))
                body = os.urandom(GROUP_BYTES) if value is None else bytes(value[0])
                self.bodies.updateValue((group,), (rotated(body),))
            yield pd.DataFrame({"key": [key[0]], "rows": [count]})

        def close(self) -> None:
            pass

    return GroupBodies()


@dataclass(frozen=True)
class Figures:
    add_batch_ms: float  # medians over the measured batches
    batch_ms: float
    rows: float
    batches: int
    cores: dict[str, float] | None

    def per_group_us(self, groups: int) -> float:
        """A batch's ``addBatch`` over the groups its rows reached (consecutive rows reach
        distinct groups, up to all of them)."""
        return self.add_batch_ms * 1000 / min(self.rows, groups)


def run(spark: Any, api: str, groups: int, rate: int, seconds: int, checkpoint: Path) -> Figures:
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    source = spark.readStream.format("rate").option("rowsPerSecond", rate).load()
    group = F.col("value") % groups
    keyed = source.select((group % SHARDS).cast("string").alias("key"), group.alias("group"))
    if api == "map":
        out = keyed.groupBy("key").transformWithStateInPandas(
            keeps_a_map(), "key string, rows long", "Append", "None"
        )
    else:
        size = 100 if api == "none" else -(-groups // SHARDS) * GROUP_BYTES
        out = keyed.groupBy("key").applyInPandasWithState(
            keeps_a_blob(size),
            "key string, rows long",
            "blob string",
            "append",
            GroupStateTimeout.NoTimeout,
        )
    progress, cores = measure(spark, out, checkpoint, seconds)
    batches = [p for p in progress if p["numInputRows"]]
    measured = warmed(batches, groups)
    if not measured:
        durations = [p["durationMs"].get("triggerExecution", 0) for p in batches]
        raise RuntimeError(
            f"no loaded batch after the warm-up in {seconds} s"
            f" (the loaded batches took {durations} ms)"
        )
    return Figures(
        add_batch_ms=statistics.median(p["durationMs"].get("addBatch", 0) for p in measured),
        batch_ms=statistics.median(p["durationMs"].get("triggerExecution", 0) for p in measured),
        rows=statistics.median(p["numInputRows"] for p in measured),
        batches=len(measured),
        cores=cores,
    )


def warmed(batches: list[dict[str, Any]], groups: int) -> list[dict[str, Any]]:
    """The loaded batches after the warm-up: the first ``WARM_BATCHES`` (a fresh JVM compiles),
    and any that started before every group had its state (the rows before them had not
    reached every group yet: row ``n`` reaches group ``n mod groups``)."""
    measured, rows_before = [], 0
    for number, progress in enumerate(batches):
        if number >= WARM_BATCHES and rows_before >= groups:
            measured.append(progress)
        rows_before += progress["numInputRows"]
    return measured


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--apis", default=",".join(APIS), help="alternated within each round")
    parser.add_argument("--groups", type=int, default=34_000)
    parser.add_argument("--rate", type=int, default=10_400, help="rows a second")
    parser.add_argument("--seconds", type=int, default=60, help="each run")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    args.apis = args.apis.split(",")
    unknown = [name for name in args.apis if name not in APIS]
    if unknown:
        parser.error(f"--apis takes {', '.join(APIS)}, not {', '.join(unknown)}")
    if args.groups < SHARDS or args.rate < 1 or args.rounds < 1:
        parser.error(f"--groups at least {SHARDS}, --rate and --rounds at least 1")
    if args.seconds < 30:
        parser.error("--seconds at least 30: the first batches warm up")
    if "map" in args.apis:
        try:
            import google.protobuf  # noqa: F401
        except ImportError:
            parser.error("--apis map needs protobuf: pip install 'protobuf==6.33.5'")
    return args


def main() -> int:
    args = parse_args()
    # bench/ too: the workers import the state round-trip benchmark's function by name
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "lib"), str(ROOT / "bench"), os.environ.get("PYTHONPATH", "")]
    )
    from controlplane.engine.session import build_local_session

    spark = build_local_session("per-group-state-bench", shuffle_partitions=2)
    work = Path(tempfile.mkdtemp(prefix="per-group-state-"))
    try:
        for round_number in range(1, args.rounds + 1):
            for api in args.apis:
                figures = run(
                    spark,
                    api,
                    args.groups,
                    args.rate,
                    args.seconds,
                    work / f"{api}-{round_number}",
                )
                print(
                    f"round {round_number}: {api}, {args.groups} groups, {args.rate} rows/s:"
                    f" addBatch median {figures.add_batch_ms:.0f} ms, batch median"
                    f" {figures.batch_ms:.0f} ms, {figures.rows:.0f} rows a batch"
                    f" ({figures.per_group_us(args.groups):.0f} µs of addBatch a group reached;"
                    f" {figures.batches} batches)",
                    flush=True,
                )
                if figures.cores is not None:
                    print(f"  {describe(figures.cores)}", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
