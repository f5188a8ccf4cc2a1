"""Group vs shard keying: stable, in range, and independent of the process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from controlplane.engine.keying import shard_of, spark_key_of
from controlplane.engine.options import Keying


def test_group_keying_is_the_group_id() -> None:
    assert spark_key_of("orders", Keying.GROUP, 64) == "orders"
    assert spark_key_of(None, Keying.GROUP, 64) == ""


# crc32 (IEEE, as zlib and Spark's crc32 compute it) of the UTF-8 bytes, written down once
@pytest.mark.parametrize(
    ("key", "shard"), [("", 0), ("a", 3904355907 % 64), ("orders", 3845127662 % 64)]
)
def test_shard_is_crc32_mod_shards(key: str, shard: int) -> None:
    assert shard_of(key, 64) == shard
    assert spark_key_of(key, Keying.SHARD, 64) == f"shard-{shard}"


def test_shards_spread_groups() -> None:
    counts = [0] * 16
    for i in range(16_000):
        counts[shard_of(f"group-{i}", 16)] += 1
    assert min(counts) > 800
    assert max(counts) < 1200


def test_shard_is_the_same_in_another_process() -> None:
    code = "from controlplane.engine.keying import shard_of; print(shard_of('payments', 50))"
    other = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": "lib", "PYTHONHASHSEED": "123"},
    )
    assert int(other.stdout) == shard_of("payments", 50)


def test_bad_shard_count_is_refused() -> None:
    with pytest.raises(ValueError, match="shards must be >= 1"):
        shard_of("g", 0)
