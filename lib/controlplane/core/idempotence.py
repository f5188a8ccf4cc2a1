"""The idempotence window both cores keep per key: a repeated ``event_id`` is not handled twice.

The engine reads its sources at least once (a batch replayed after a failure, a client that
resends), so the same request may arrive again. Each key (a group, a quota bucket) remembers
the event ids of its last ``WINDOW`` handled requests; a repeat among them is not handled again.
One design serves both cores:

* **The window lives in the shard, beside the key's state, not in the machine.** Deduplication
  answers the delivery of the input, not a rule of Kafka's, so the machines (``handle``,
  ``fire_due``) stay ports of Kafka's rules alone. The window goes with its key: when a group
  ceases to exist or a bucket expires, its window is forgotten, and a repeat sent after that is
  a new request.
* **Digests, not ids.** Each id is kept as 8 bytes of BLAKE2b, so a key's state does not grow
  with the length of the ids its clients choose (64 UUIDs as text would be 2.3 KB a key; the
  window is 512 bytes). Two ids of one window collide with a chance of about 64 in 2**64.
* **What a core remembers** is its own rule: the coordinator every request a group handled
  (its repeat leaves a ``duplicate_request`` group event), the quota every charged request
  (nothing charged, nothing to charge twice; its repeat leaves no row).

A window is one ``bytes``: the digests oldest first, ``DIGEST_BYTES`` each.
"""

from __future__ import annotations

import hashlib
from typing import Final

WINDOW: Final = 64  # requests remembered per key
DIGEST_BYTES: Final = 8
WINDOW_BYTES: Final = WINDOW * DIGEST_BYTES


def digest(event_id: str) -> bytes:
    """The 8-byte BLAKE2b digest a window keeps for ``event_id``."""
    return hashlib.blake2b(event_id.encode("utf-8"), digest_size=DIGEST_BYTES).digest()


def seen(window: bytes, digest: bytes) -> bool:
    """Whether ``digest`` is one of the window's (at a digest boundary, not across two)."""
    at = window.find(digest)
    while at >= 0:
        if at % DIGEST_BYTES == 0:
            return True
        at = window.find(digest, at + 1)
    return False


def remembered(window: bytes, digest: bytes) -> bytes:
    """The window with ``digest`` last, the oldest dropped once it holds ``WINDOW``."""
    if len(window) >= WINDOW_BYTES:
        window = window[len(window) - WINDOW_BYTES + DIGEST_BYTES :]
    return window + digest
