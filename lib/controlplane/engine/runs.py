"""The runs of the coordinator query, recorded in its checkpoint before each start.

Each start of the coordinator query in processing time is a new run of the coordinator, as a
Kafka coordinator's failover is a new epoch: the shards it serves are loaded again, and a
group whose timer came due while no run served it gets its sessions restarted rather than its
members expired (core.coordinator.runner, docs/engine.md, "A restart loads the groups").

A run is known by when it started (the driver's wall clock, in milliseconds), and every run's
start is kept, in order, in a record beside Spark's files (``io.checkpoint.RUNS_RECORD``, one
line of JSON). The runner is given them all, and a call's epoch is the latest start at or
before its tick. That makes a batch's decisions a function of its records, its batch time and
its state, whichever run executes it: a batch that a run planned and did not commit is run
again by the next, with the same batch time and ticks, and so the same epoch. A start is at
least a millisecond after the one before it, so the record stays ordered when a driver's clock
is behind the last one's.
"""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Any, Final

from controlplane.core.config import ConfigError
from controlplane.io.checkpoint import RUNS_RECORD, RecordError, read_record, write_record

RUNS_VERSION: Final = 1


def record_run_start(spark: Any, checkpoint: str, now_ms: int) -> tuple[int, ...]:
    """Record a new run of the query whose checkpoint is ``checkpoint``, starting at
    ``now_ms``; returns every run's start, this one last. A ConfigError for a record that
    cannot be read or written."""
    try:
        text = read_record(spark, checkpoint, RUNS_RECORD)
        starts = () if text is None else parse_runs(text)
        starts = (*starts, next_start(starts, now_ms))
        write_record(spark, checkpoint, runs_text(starts), replace=True, name=RUNS_RECORD)
    except (RecordError, ValueError) as exc:
        raise ConfigError(
            f"checkpoint {checkpoint}: its record of runs ({RUNS_RECORD}): {exc}; moving it"
            " away starts a new record (a batch the last run left uncommitted may then restart"
            " the sessions of other groups than it did)"
        ) from exc
    return starts


def next_start(starts: tuple[int, ...], now_ms: int) -> int:
    """A new run's start: ``now_ms``, or a millisecond after the last start if that is later."""
    return max(now_ms, starts[-1] + 1) if starts else now_ms


def runs_text(starts: tuple[int, ...]) -> str:
    return json.dumps({"version": RUNS_VERSION, "starts": list(starts)}, separators=(",", ":"))


def parse_runs(text: str) -> tuple[int, ...]:
    """The starts of a record's text; ValueError for one this build cannot read."""
    record = json.loads(text)
    if not isinstance(record, dict) or record.get("version") != RUNS_VERSION:
        raise ValueError(f"not a version {RUNS_VERSION} record: {text[:200]}")
    starts = record.get("starts")
    if not isinstance(starts, list) or not all(type(s) is int for s in starts):
        raise ValueError("its starts are not a list of whole numbers")
    if any(later <= earlier for earlier, later in pairwise(starts)):
        raise ValueError("its starts are not in increasing order")
    return tuple(starts)
