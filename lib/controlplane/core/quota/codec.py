"""A versioned, compact, exact encoding of a Spark key's buckets (one quota key, or a shard).

Layout (big-endian), schema version 3::

    b"QB" | version u8 | bucket count u32 |
    per bucket: key (u32 length + UTF-8) | tokens f64 | last_update_ms i64 | last_record_ms i64 |
                handled_ms i64 | digest count u16 | digests (8 bytes each, oldest first)

The digests are the bucket's idempotence window (``core/idempotence.py``). Versions 1 and 2 are
still read: they kept the window's event ids as text (u32 lengths, then the UTF-8 bytes), which
decode as their digests, so a repeat of an id a checkpoint remembers is still recognised;
version 1 has no ``handled_ms`` (it decodes as 0, so the key's clock is its last touch or
creation, as version 1 knew it). A state is always written as version 3. Doubles are stored as
their 8 IEEE bytes, so tokens round-trip bit for bit (negative zero included). Buckets are
written in key order, so equal states give equal bytes. A version this code does not know is
refused with ``StateCodecError`` rather than misread.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Final

from controlplane.core.idempotence import DIGEST_BYTES, WINDOW, digest
from controlplane.core.quota.bucket import Bucket, make_bucket

MAGIC: Final = b"QB"
SCHEMA_VERSION: Final = 3
_HEADER: Final = struct.Struct(">2sBI")
_BODY: Final = struct.Struct(">dqqqH")  # versions 2 and 3
_BODY_V1: Final = struct.Struct(">dqqH")
_LENGTH: Final = struct.Struct(">I")


class StateCodecError(ValueError):
    """Encoded quota state that this version cannot read."""


def _text(value: str) -> bytes:
    data = value.encode("utf-8")
    return _LENGTH.pack(len(data)) + data


def encode(buckets: Mapping[str, Bucket], windows: Mapping[str, bytes]) -> bytes:
    """Every bucket with its window (``windows`` has the same keys; a missing one is empty)."""
    parts = [_HEADER.pack(MAGIC, SCHEMA_VERSION, len(buckets))]
    for key in sorted(buckets):
        bucket = buckets[key]
        window = windows.get(key, b"")
        parts.append(_text(key))
        parts.append(
            _BODY.pack(
                bucket.tokens,
                bucket.last_update_ms,
                bucket.last_record_ms,
                bucket.handled_ms,
                len(window) // DIGEST_BYTES,
            )
        )
        parts.append(window)
    return b"".join(parts)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.offset = 0

    def take(self, layout: struct.Struct) -> tuple[object, ...]:
        end = self.offset + layout.size
        if end > len(self.data):
            raise StateCodecError("quota state is truncated")
        values = layout.unpack_from(self.data, self.offset)
        self.offset = end
        return values

    def text(self) -> str:
        (length,) = self.take(_LENGTH)
        assert isinstance(length, int)
        end = self.offset + length
        if end > len(self.data):
            raise StateCodecError("quota state is truncated")
        try:
            value = self.data[self.offset : end].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StateCodecError(f"quota state holds invalid UTF-8: {exc}") from exc
        self.offset = end
        return value

    def digests(self, count: int) -> bytes:
        """A window of ``count`` digests (version 3)."""
        if count > WINDOW:
            raise StateCodecError(f"quota state holds a window of {count} ids (at most {WINDOW})")
        end = self.offset + count * DIGEST_BYTES
        if end > len(self.data):
            raise StateCodecError("quota state is truncated")
        window = self.data[self.offset : end]
        self.offset = end
        return window

    def texts(self, count: int) -> tuple[str, ...]:
        """``count`` strings: their u32 lengths first, then their bytes."""
        if count == 0:
            return ()
        lengths = self.take(struct.Struct(f">{count}I"))
        values = []
        for length in lengths:
            assert isinstance(length, int)
            end = self.offset + length
            if end > len(self.data):
                raise StateCodecError("quota state is truncated")
            try:
                values.append(self.data[self.offset : end].decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise StateCodecError(f"quota state holds invalid UTF-8: {exc}") from exc
            self.offset = end
        return tuple(values)


def decode(data: bytes | None) -> tuple[dict[str, Bucket], dict[str, bytes]]:
    """The buckets and their windows, by key (both empty for no state)."""
    if not data:
        return {}, {}
    reader = _Reader(bytes(data))
    magic, version, count = reader.take(_HEADER)
    if magic != MAGIC:
        raise StateCodecError("not a quota state (bad magic bytes)")
    if version not in (1, 2, SCHEMA_VERSION):
        raise StateCodecError(
            f"quota state schema version {version} is not supported (this code reads 1 to "
            f"{SCHEMA_VERSION}); was it written by a newer release?"
        )
    assert isinstance(count, int)
    buckets: dict[str, Bucket] = {}
    windows: dict[str, bytes] = {}
    for _ in range(count):
        key = reader.text()
        if version == 1:
            tokens, last_update_ms, last_record_ms, id_count = reader.take(_BODY_V1)
            handled_ms: object = 0
        else:
            tokens, last_update_ms, last_record_ms, handled_ms, id_count = reader.take(_BODY)
        assert isinstance(tokens, float)
        assert isinstance(id_count, int)
        assert isinstance(last_update_ms, int)
        assert isinstance(last_record_ms, int)
        assert isinstance(handled_ms, int)
        if version == SCHEMA_VERSION:
            windows[key] = reader.digests(id_count)
        else:  # the ids as text: their digests, oldest first
            windows[key] = b"".join(map(digest, reader.texts(id_count)[-WINDOW:]))
        buckets[key] = make_bucket(
            tokens=tokens,
            last_update_ms=last_update_ms,
            last_record_ms=last_record_ms,
            handled_ms=handled_ms,
        )
    if reader.offset != len(reader.data):
        raise StateCodecError("quota state has trailing bytes")
    return buckets, windows
