"""The runs of the coordinator query, recorded in its checkpoint at each start.

Each start of the coordinator query in processing time is a new run of the coordinator, as a
Kafka coordinator's failover is a new epoch: the shards it serves are loaded again, and a
group whose timer came due while no run served it gets its sessions restarted rather than its
members expired (core.coordinator.runner; docs/engine.md, "A restart loads the groups").

A run is known by when it started, in milliseconds, and every run's start is kept in a record
beside Spark's files (``io.checkpoint.RUNS_RECORD``), a line of JSON a run, appended: nothing
is ever rewritten, so a crash leaves the starts recorded before it. The runner is given them
all, and a call's epoch is the latest start at or before its tick. That makes a batch's
decisions a function of its records, its batch time and its state, whichever run executes it:
a batch that a run planned and did not commit is run again by the next, with the same batch
time and ticks, so with the same epoch, as long as every later start is after that batch time.
So a start is the driver's clock, or later: a millisecond after the last recorded start and
after the batch time of the last batch Spark planned, when the clock is behind them (a clock
stepped back; on Spark Connect, a client's clock behind the server's). The new run's loads
then wait until its ticks pass the start it was given.
"""

from __future__ import annotations

import json
from typing import Any, Final

from controlplane.core.config import ConfigError
from controlplane.io.checkpoint import (
    RUNS_RECORD,
    RecordError,
    append_line,
    latest_batch_time_ms,
    read_lines,
)

RUNS_VERSION: Final = 1


def plan_run_start(spark: Any, checkpoint: str, now_ms: int) -> tuple[int, ...]:
    """Every recorded run's start, and last a new run's: ``now_ms``, or later (``next_start``).
    Nothing is written (``record_run_start`` does, once the query is built). A ConfigError for
    a record or an offset log that cannot be read."""
    try:
        lines = read_lines(spark, checkpoint, name=RUNS_RECORD)
        starts = () if lines is None else parse_runs(lines)
    except (RecordError, ValueError) as exc:
        raise ConfigError(
            f"checkpoint {checkpoint}: its record of runs ({RUNS_RECORD}): {exc}; moving it"
            " away starts a new record (a batch the last run left uncommitted may then restart"
            " the sessions of other groups than it did)"
        ) from exc
    try:
        planned = latest_batch_time_ms(spark, checkpoint)
    except RecordError as exc:
        raise ConfigError(f"checkpoint {checkpoint}: its offset log: {exc}") from exc
    return (*starts, next_start(starts, planned, now_ms))


def record_run_start(spark: Any, checkpoint: str, start_ms: int) -> None:
    """Append a run's start to the checkpoint's record (ConfigError if it cannot be)."""
    try:
        append_line(spark, checkpoint, run_line(start_ms), name=RUNS_RECORD)
    except RecordError as exc:
        raise ConfigError(f"checkpoint {checkpoint}: its record of runs: {exc}") from exc


def next_start(starts: tuple[int, ...], planned_ms: int | None, now_ms: int) -> int:
    """A new run's start: ``now_ms``, or a millisecond after the last recorded start or after
    the last planned batch's time, if either is later."""
    after = [t + 1 for t in (starts[-1] if starts else None, planned_ms) if t is not None]
    return max([now_ms, *after])


def run_line(start_ms: int) -> str:
    return json.dumps({"version": RUNS_VERSION, "start": start_ms}, separators=(",", ":"))


def parse_runs(lines: list[str]) -> tuple[int, ...]:
    """The recorded starts, in order (lines written through Spark come in any order, and a
    task attempt may leave one twice); ValueError for a line this build cannot read."""
    starts: set[int] = set()
    for line in lines:
        if not line.strip():
            continue
        record = json.loads(line)
        if not isinstance(record, dict) or record.get("version") != RUNS_VERSION:
            raise ValueError(f"not a version {RUNS_VERSION} line: {line[:200]}")
        start = record.get("start")
        if type(start) is not int:
            raise ValueError(f"a start that is not a whole number: {line[:200]}")
        starts.add(start)
    return tuple(sorted(starts))
