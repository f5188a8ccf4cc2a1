"""KIP-599's controller mutation quota as a pure state machine: a token bucket per quota key.

``resolution`` maps a principal to its bucket and rate, ``machine`` answers one request against
one bucket, ``runner`` is the shell contract, ``codec`` the versioned state encoding.
"""

from controlplane.core.quota.resolution import Resolution, carry_removed_quotas, key_of, resolve
from controlplane.core.quota.runner import QuotaRunner, QuotaSession

__all__ = ["QuotaRunner", "QuotaSession", "Resolution", "carry_removed_quotas", "key_of", "resolve"]
