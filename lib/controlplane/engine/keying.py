"""Which Spark key an event belongs to: its group (or quota key), or a shard of those.

A shard is ``crc32(utf-8 bytes of the key) mod shards``: stable across processes, Python
versions and Spark versions (Python's ``hash()`` is salted per process), and computed the
same way by Spark's ``crc32`` function and Python's ``zlib.crc32``. Each shard's state holds
the state machines of its groups side by side; the runner keeps their timers separate.
The defaults (shard keying, 64 shards; 16 in conf/local.yaml) were chosen by measurement:
docs/engine.md, "Keying".

A shard's Spark key is a name. Spark puts a key in state partition
``pmod(murmur3(key), partitions)`` (its ``hash`` function, seed 42), so which partition a
shard lands in depends on its name, and the plain names ``shard-<n>`` spread unevenly: with
64 shards over 8 partitions the busiest holds 12 of them, one and a half times its share,
and a stage's time is its slowest task's. The balanced names (``ShardNames.BALANCED``, new
checkpoints) are ``shard-<n>`` or, when that lands elsewhere, the first ``shard-<n>.<i>`` that
lands in partition ``n mod partitions``: each partition then holds ``shards / partitions``
shards (one more in some when it does not divide). Which names a checkpoint's state is under
is recorded beside it (engine.checkpoints).
"""

from __future__ import annotations

import enum
import functools
import zlib
from dataclasses import dataclass
from typing import Any

from controlplane.engine.options import Keying

SHARD_PREFIX = "shard-"
SPARK_HASH_SEED = 42  # HashPartitioning's Murmur3Hash


class ShardNames(enum.Enum):
    PLAIN = "plain"  # shard-<n>: checkpoints started before the names were balanced
    BALANCED = "balanced"  # shard-<n>[.<i>], each in partition n mod partitions


def shard_of(key: str, shards: int) -> int:
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    return zlib.crc32(key.encode("utf-8")) % shards


@dataclass(frozen=True, slots=True)
class SparkKeys:
    """How a group id / quota key becomes its Spark grouping key: itself (``group`` keying), or
    its shard's name (``shard``). ``partitions`` (the query's state partitions) is what the
    balanced names are balanced over; plain names do not need it. ``shard_names`` (by shard
    number) are computed from the rest unless given: a checkpoint's record gives the names it
    holds, so no later change to how names are found can rename its shards."""

    keying: Keying
    shards: int
    names: ShardNames = ShardNames.PLAIN
    partitions: int | None = None
    shard_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.shards < 1:
            raise ValueError(f"shards must be >= 1, got {self.shards}")
        if self.names is ShardNames.BALANCED and (self.partitions is None or self.partitions < 1):
            raise ValueError(f"balanced shard names need partitions >= 1, got {self.partitions}")
        if self.keying is Keying.GROUP:
            return
        if not self.shard_names:
            object.__setattr__(self, "shard_names", self._computed_names())
        elif len(self.shard_names) != self.shards or len(set(self.shard_names)) != self.shards:
            raise ValueError(f"{self.shards} shards need as many distinct names")

    def _computed_names(self) -> tuple[str, ...]:
        if self.names is ShardNames.PLAIN:
            return tuple(f"{SHARD_PREFIX}{n}" for n in range(self.shards))
        assert self.partitions is not None
        return balanced_names(self.shards, self.partitions)

    def of(self, key: str | None) -> str:
        """The Spark key for a group id / quota key (None counts as "")."""
        text = key or ""
        if self.keying is Keying.GROUP:
            return text
        return self.shard_names[shard_of(text, self.shards)]

    def column(self, column: Any) -> Any:
        """``of`` as a Spark column expression (no Python UDF)."""
        from pyspark.sql import functions as F

        text = F.coalesce(column, F.lit(""))
        if self.keying is Keying.GROUP:
            return text
        shard = F.pmod(F.crc32(text.cast("binary")), F.lit(self.shards))
        names = F.array(*(F.lit(name) for name in self.shard_names))
        return F.element_at(names, (shard + F.lit(1)).cast("int"))


def spark_key_of(key: str | None, keying: Keying, shards: int) -> str:
    """The Spark grouping key for a group id / quota key under the plain shard names."""
    return SparkKeys(keying, shards).of(key)


@functools.lru_cache(maxsize=16)
def balanced_names(shards: int, partitions: int) -> tuple[str, ...]:
    """Shard n's name: ``shard-<n>`` if Spark puts it in partition ``n mod partitions``, else
    the first ``shard-<n>.<i>`` (i = 1, 2, ...) it does put there. About ``partitions`` hashes
    a shard: 512 for 64 shards over 8 partitions."""
    names = []
    for n in range(shards):
        target = n % partitions
        name, i = f"{SHARD_PREFIX}{n}", 0
        while spark_partition_of(name, partitions) != target:
            i += 1
            name = f"{SHARD_PREFIX}{n}.{i}"
        names.append(name)
    return tuple(names)


def spark_partition_of(key: str, partitions: int) -> int:
    """The state partition Spark puts a string grouping key in: ``pmod(hash(key), partitions)``."""
    return spark_hash(key) % partitions  # Python's % of a positive modulus is pmod


_M32 = 0xFFFFFFFF


def spark_hash(text: str, seed: int = SPARK_HASH_SEED) -> int:
    """Spark's ``hash`` of a string (Murmur3_x86_32.hashUnsafeBytes over its UTF-8 bytes), as
    a signed 32-bit int. Spark's variant: the bytes after the last whole 4-byte word are mixed
    one at a time, each as a sign-extended int, not as one tail word as in the reference
    Murmur3."""
    data = text.encode("utf-8")
    h1 = seed & _M32
    aligned = len(data) - len(data) % 4
    for i in range(0, aligned, 4):
        h1 = _mix_h1(h1, _mix_k1(int.from_bytes(data[i : i + 4], "little")))
    for byte in data[aligned:]:
        h1 = _mix_h1(h1, _mix_k1((byte - 256 if byte > 127 else byte) & _M32))
    h1 ^= len(data)
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _M32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _M32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def _mix_k1(k1: int) -> int:
    k1 = (k1 * 0xCC9E2D51) & _M32
    k1 = ((k1 << 15) | (k1 >> 17)) & _M32
    return (k1 * 0x1B873593) & _M32


def _mix_h1(h1: int, k1: int) -> int:
    h1 ^= k1
    h1 = ((h1 << 13) | (h1 >> 19)) & _M32
    return (h1 * 5 + 0xE6546B64) & _M32
