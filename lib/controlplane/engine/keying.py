"""Which Spark key an event belongs to: its group (or quota key), or a shard of those.

A shard is ``crc32(utf-8 bytes of the key) mod shards``: stable across processes, Python
versions and Spark versions (Python's ``hash()`` is salted per process), and computed the
same way by Spark's ``crc32`` function and Python's ``zlib.crc32``. Each shard's state holds
the state machines of its groups side by side; the runner keeps their timers separate.
The default (shard, 64) was chosen by measurement: docs/engine.md, "Keying".
"""

from __future__ import annotations

import zlib
from typing import Any

from controlplane.engine.options import Keying

SHARD_PREFIX = "shard-"


def shard_of(key: str, shards: int) -> int:
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    return zlib.crc32(key.encode("utf-8")) % shards


def spark_key_of(key: str | None, keying: Keying, shards: int) -> str:
    """The Spark grouping key for a group id / quota key (None counts as "")."""
    text = key or ""
    if keying is Keying.GROUP:
        return text
    return f"{SHARD_PREFIX}{shard_of(text, shards)}"


def spark_key_column(column: Any, keying: Keying, shards: int) -> Any:
    """The same as ``spark_key_of`` as a Spark column expression (no Python UDF)."""
    from pyspark.sql import functions as F

    text = F.coalesce(column, F.lit(""))
    if keying is Keying.GROUP:
        return text
    shard = F.pmod(F.crc32(text.cast("binary")), F.lit(shards))
    return F.concat(F.lit(SHARD_PREFIX), shard.cast("string"))
