"""KIP-599's controller mutation quota as a pure state machine: a token bucket per quota key.

``resolution`` maps a principal to its bucket and rate, ``machine`` answers one request against
one bucket and fires its expiry, ``runner`` holds a Spark key's buckets (``QuotaShard``) and is
the shell contract (``QuotaRunner``), ``codec`` the versioned state encoding.
"""

from controlplane.core.quota.resolution import Resolution, carry_removed_quotas, key_of, resolve
from controlplane.core.quota.runner import QuotaRunner, QuotaShard

__all__ = ["QuotaRunner", "QuotaShard", "Resolution", "carry_removed_quotas", "key_of", "resolve"]
