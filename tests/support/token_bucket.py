"""Kafka's ``TokenBucket`` as the tests' oracle, written from docs/reference/mutation-quota.md §1.

The core applies these formulas inline in its admission loops (core/quota/machine.py:
``admit_strict`` and ``admit_permissive``), which the tests drive directly; this module is only
what a test needs besides: the tokens a bucket's ``tokens`` metric would read at a time
(``measure``), and a deduction (``record``), for the tests that follow a bucket by hand.
"""

from __future__ import annotations


def measure(
    tokens: float, last_update_ms: int, now_ms: int, rate_per_s: float, burst: float
) -> float:
    """§1.3: ``min(burst, tokens + quota * ((now - last) / 1000.0))`` (down if time went back)."""
    return min(burst, tokens + rate_per_s * ((now_ms - last_update_ms) / 1000.0))


def record(tokens: float, value: float, burst: float) -> float:
    """§1.4, after a refill: ``min(burst, tokens - value)`` (no lower bound)."""
    return min(burst, tokens - value)
