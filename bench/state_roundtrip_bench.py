"""What a big per-key state costs a micro-batch: the state's round trip from the state store
to the Python worker and back, apart from any work on it. Prints figures; asserts nothing.

    PYTHONPATH= .venv/bin/python bench/state_roundtrip_bench.py [--sizes 100,160000]
        [--encodings binary,text] [--keys 64] [--seconds 45] [--rounds 2]
        [--conf KEY=VALUE ...]

64 keys (the engine's default shard count; ``--keys``), each called in every batch with about
two rows from Spark's rate source (128 rows a second, a 1-second trigger), on the engine's
local session (RocksDB with changelog checkpointing, two shuffle partitions). The function
reads its key's state, a blob of ``size`` random bytes, and replaces it with a new blob of the
same size (the old one rotated by a byte); it does nothing else. The blob is kept as the
engine keeps its state's (``--encodings``: bytes in a ``binary``, or base64 text in a
``string``, engine.adapter.StateFormat). The sizes, key counts and encodings alternate,
``--rounds`` times; per run the median ``addBatch`` and batch duration of the loaded batches
after the first eight, and the CPU the JVM and the Python workers used after the run's first
third. The engine's shard state at 34,000 groups is about 200,000 bytes a key after two
minutes and 381,000 once every group's idempotence window is full (717 bytes a group,
docs/benchmarks/engine.md).
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
sys.path.insert(0, str(ROOT / "bench"))

from cpu_meter import CpuMeter, describe  # noqa: E402

KEYS = 64  # the engine's default shard count
ROWS_PER_SECOND = 2 * KEYS
WARM_BATCHES = 8


ENCODINGS = ("binary", "text")
"""How the blob is kept: the engine's state formats (engine.adapter.StateFormat), a Spark
``binary`` or its base64 text in a ``string``."""


def rotated(blob: bytes) -> bytes:
    """A new value of the same size: the old one rotated by a byte."""
    return blob[1:] + blob[:1]


def keeps_a_blob(size: int, encoding: str = "binary") -> Callable[..., Iterator[Any]]:
    """The state function: one output row per call, the state replaced by a blob of ``size``,
    read and written as the engine reads and writes its state's blob, in a worker prepared as
    the engine prepares its own (``prepare_worker``: what the worker holds frozen out of the
    cyclic collector, which PySpark's daemon runs after every task; without it that collection
    was 28 % of this benchmark's Python samples, a cost the engine's workers do not pay)."""
    from controlplane.engine.adapter import StateFormat, blob_bytes, encode_blob, prepare_worker

    state_format = StateFormat(encoding)

    def function(key: tuple[str], frames: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        prepare_worker()  # once per worker process
        rows = sum(len(frame) for frame in frames)
        blob = blob_bytes(state.get[0]) if state.exists else os.urandom(size)  # incompressible
        assert blob is not None
        state.update((encode_blob(rotated(blob), state_format),))
        yield pd.DataFrame({"key": [key[0]], "rows": [rows]})

    return function


def run(
    spark: Any, size: int, encoding: str, keys: int, seconds: int, checkpoint: Path
) -> tuple[float, float, int, dict[str, float] | None]:
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    source = spark.readStream.format("rate").option("rowsPerSecond", ROWS_PER_SECOND).load()
    keyed = source.select((F.col("value") % keys).cast("string").alias("key"), "value")
    out = keyed.groupBy("key").applyInPandasWithState(
        keeps_a_blob(size, encoding),
        "key string, rows long",
        "blob binary" if encoding == "binary" else "blob string",
        "append",
        GroupStateTimeout.NoTimeout,
    )
    progress, cores = measure(spark, out, checkpoint, seconds)
    loaded = [p for p in progress if p["numInputRows"]][WARM_BATCHES:]
    if not loaded:
        raise RuntimeError(f"no loaded batch after the first {WARM_BATCHES} in {seconds} s")
    add = statistics.median(p["durationMs"].get("addBatch", 0) for p in loaded)
    total = statistics.median(p["durationMs"].get("triggerExecution", 0) for p in loaded)
    return add, total, len(loaded), cores


def measure(
    spark: Any, out: Any, checkpoint: Path, seconds: int
) -> tuple[list[dict[str, Any]], dict[str, float] | None]:
    """Run ``out`` into Spark's no-op sink on a 1-second trigger for ``seconds``: the progress
    of its batches (the last 100, as Spark keeps them) and the CPU of the machine's processes
    after the first third. The query's own failure is raised."""
    query = (
        out.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        time.sleep(seconds / 3)  # the CPU of the batches after the first third
        meter = CpuMeter.start(spark)
        time.sleep(seconds - seconds / 3)
        cores = None if meter is None else meter.stop()
        progress = list(query.recentProgress)
    finally:
        query.stop()
    failure = query.exception()
    if failure is not None:  # the query's own error, not "no batch"
        raise RuntimeError(f"the query failed: {failure}")
    return progress, cores


def numbers(parser: argparse.ArgumentParser, option: str, text: str) -> list[int]:
    try:
        return [int(item) for item in text.split(",")]
    except ValueError:
        parser.error(f"{option} takes whole numbers, comma-separated, not {text!r}")


def parse_args() -> tuple[argparse.Namespace, dict[str, str]]:
    """The arguments, with --sizes, --keys and --encodings as lists, and the --conf settings."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,160000", help="state bytes a key, alternated")
    parser.add_argument(
        "--encodings",
        default="binary",
        help=f"how the blob is kept, alternated within each size: {', '.join(ENCODINGS)}",
    )
    parser.add_argument(
        "--keys",
        default=str(KEYS),
        help=f"keys called every batch, alternated ({ROWS_PER_SECOND} rows a second in all)",
    )
    parser.add_argument("--seconds", type=int, default=45, help="each run")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a session setting over the engine's (e.g. another state store provider)",
    )
    args = parser.parse_args()
    extra: dict[str, str] = {}
    for item in args.conf:
        key, equals, value = item.partition("=")
        if not equals or not key:
            parser.error(f"--conf takes KEY=VALUE, not {item!r}")
        if key in extra:
            parser.error(f"--conf sets {key} twice")
        extra[key] = value
    args.sizes = numbers(parser, "--sizes", args.sizes)
    args.keys = numbers(parser, "--keys", args.keys)
    if any(not 1 <= keys <= ROWS_PER_SECOND for keys in args.keys):
        parser.error(f"--keys between 1 and {ROWS_PER_SECOND} (each key gets a row a second)")
    args.encodings = args.encodings.split(",")
    unknown = [name for name in args.encodings if name not in ENCODINGS]
    if unknown:
        parser.error(f"--encodings takes {', '.join(ENCODINGS)}, not {', '.join(unknown)}")
    if args.seconds < 15 or args.rounds < 1 or any(size < 1 for size in args.sizes):
        parser.error("--seconds at least 15, --rounds at least 1, sizes at least 1 byte")
    return args, extra


def main() -> int:
    args, extra = parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "lib"), os.environ.get("PYTHONPATH", "")]
    )
    from controlplane.engine.session import build_local_session

    spark = build_local_session("state-roundtrip-bench", shuffle_partitions=2, extra_conf=extra)
    work = Path(tempfile.mkdtemp(prefix="state-roundtrip-"))
    try:
        for round_number in range(1, args.rounds + 1):
            for size, keys, encoding in itertools.product(args.sizes, args.keys, args.encodings):
                add, total, batches, cores = run(
                    spark,
                    size,
                    encoding,
                    keys,
                    args.seconds,
                    work / f"{size}-{encoding}-{keys}-{round_number}",
                )
                print(
                    f"round {round_number}: {keys} keys, {size} bytes a key"
                    f" ({size * keys / 1e6:.1f} MB in all) as {encoding}:"
                    f" addBatch median {add:.0f} ms, batch median {total:.0f} ms"
                    f" ({batches} batches)",
                    flush=True,
                )
                if cores is not None:
                    print(f"  {describe(cores)}", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
