"""The only code that knows Spark's GroupState: wraps a pure Runner into the function of
``applyInPandasWithState``.

Per call (one Spark key, one micro-batch):

1. decode the key's state (envelope version, next deadline, the core's bytes);
2. order the key's rows by source position (file time, file, line; Kafka partition offset);
3. parse each row; a text that is not a JSON object becomes a ``rejected_events`` row;
4. run the core with the tick: in processing time the latest arrival the call read, or the
   batch time for a call that read nothing (``processing_tick``); the watermark in event time.
   The core fires every due timer first, so a key that gets data after its deadline (Spark
   does not flag it as timed out) still fires its timers before the data;
5. end the call with ``remove()``, or ``update()`` plus the one Spark timeout set to the
   earliest timer (``setTimeoutDuration`` / ``setTimeoutTimestamp``), or ``update()`` alone
   (which clears the timeout) when the key has no timer.

``rows`` returns the call's rows with their tables, and a ``_metrics`` row carrying the
figures of the progress line; the function Spark calls hands them on as one output row per
table, its rows as one Arrow stream in the table's columns (engine.envelope), built here, on
the executors, so the driver only concatenates them (engine.batch). ``call`` gives the same rows
as JSON texts: the per-row form the tests compare against.
"""

from __future__ import annotations

import binascii
import enum
import gc
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pybase64

from controlplane.core.jsonwire import INT64_MAX, decode_event_text, long_or_none
from controlplane.core.runtime import Runner, RunResult, TimedEvent, make_timed_event
from controlplane.engine import envelope
from controlplane.engine.envelope import METRICS_TABLE, Row, row_text
from controlplane.engine.options import TimeMode

log = logging.getLogger(__name__)

STATE_VERSION = 1
NO_DEADLINE = -1
CENTURY_MS = 100 * 365 * 86_400_000
REJECTED_TABLE = "rejected_events"


class StateFormat(enum.Enum):
    """How a key's state keeps the core's bytes: the Spark type of the state's ``blob``
    (engine.schemas), fixed by the checkpoint's state schema (engine.checkpoints).

    ``TEXT`` is the bytes' base64 text, in a ``string``. Spark hands a ``binary`` state to
    Python through its pickler a byte at a time, as a Latin-1 string that is encoded to UTF-8
    in the JVM and decoded again in the worker; an ASCII string is copied at each step, and
    the base64 text costs less than that detour on both sides (docs/benchmarks/engine.md,
    issue 14, seventh session). ``BINARY`` is the bytes themselves, the format of
    checkpoints written before; such a checkpoint keeps it."""

    BINARY = "binary"
    TEXT = "text"


@dataclass(frozen=True, slots=True)
class KeyState:
    deadline_ms: int | None
    blob: bytes | None


def decode_state(state: Any) -> KeyState:
    """The key's stored state, its bytes read from either format (bytes, or base64 text);
    ValueError for a state this build cannot read."""
    if not state.exists:
        return KeyState(None, None)
    version, deadline_ms, blob = state.get
    if version != STATE_VERSION:
        raise ValueError(f"state envelope version {version} is not supported ({STATE_VERSION})")
    deadline = None if deadline_ms is None or deadline_ms == NO_DEADLINE else int(deadline_ms)
    return KeyState(deadline, blob_bytes(blob))


def blob_bytes(blob: Any) -> bytes | None:
    """A state's ``blob`` as bytes, from either format; ValueError for text that is not base64."""
    if blob is None:
        return None
    if isinstance(blob, str):
        try:
            return pybase64.b64decode(blob, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"state blob is not base64 text: {exc}") from None
    return bytes(blob)


def encode_blob(blob: bytes | None, state_format: StateFormat) -> bytes | str | None:
    """The core's bytes as the state keeps them in ``state_format``. The text is made in one
    step, without a second buffer of its size (bytes, then their decoding): in a fresh process
    glibc mapped that buffer afresh at each call, 566 against 19 µs for a 380 KB shard; in a
    worker of the state round-trip benchmark the two were within the spread between runs
    (docs/benchmarks/engine.md, issue 14, ninth session)."""
    if blob is None or state_format is StateFormat.BINARY:
        return blob
    return pybase64.b64encode_as_string(blob)


InputRow = tuple[Any, Any, Any, Any, int | None, int | None]
"""One input row as the function reads it: raw, source, principal, reject_reason (texts or
None), arrival_time_ms, seq (ints or None): the order of ``_COLUMNS``."""


def input_row(values: Mapping[str, Any]) -> InputRow:
    """An ``InputRow`` from its columns by name (absent: None), as a frame would give it."""
    raw, source, principal, refused, arrival, seq = (values.get(name) for name in _COLUMNS)
    return (raw, source, principal, refused, _number(arrival), _number(seq))


def _rejection(row: InputRow, reason: str) -> dict[str, Any]:
    raw, source, _, _, arrival, _ = row
    return {"raw": raw, "reason": reason, "source": source, "arrival_time_ms": arrival}


def parse_row(row: InputRow, mode: TimeMode, batch_time_ms: int) -> TimedEvent | dict[str, Any]:
    """A TimedEvent, or the rejected_events row of a record its source refused or of a text
    that is not a JSON object."""
    raw, source, principal, refused, arrival, seq = row
    if isinstance(refused, str):
        return _rejection(row, refused)
    try:
        event = decode_event_text(raw) if isinstance(raw, str) else None
    except (ValueError, RecursionError) as exc:
        return _rejection(row, f"not JSON: {exc}")
    if not isinstance(event, dict):
        return _rejection(row, f"not a JSON object: {type(event).__name__}")
    if (raw.count('"group_id"') > 1 or "\\u" in raw) and _has_duplicate_group_id(raw):
        # Spark's get_json_object keys the row by the first, Python reads the last: the group
        # would live in another group's key, beside its own (two state machines for one group).
        # A name may be escaped (group\u005fid): a line with an escape is read in full.
        return _rejection(row, "not a JSON object: duplicate key group_id")
    if isinstance(principal, str):  # the source authenticated the writer: that is the user
        event["user"] = principal
    # a file's line, 1-based as in replay; a Kafka source already names its record
    line = str(source) if seq is None else f"{source}:{seq + 1}"
    if mode is TimeMode.EVENT_TIME:
        time_ms = long_or_none(event.get("event_time_ms"))
    else:
        time_ms = batch_time_ms if arrival is None or arrival > batch_time_ms else arrival
    return make_timed_event(event=event, time_ms=time_ms, line=line)


def processing_tick(batch_time_ms: int, arrivals: Iterable[int | None]) -> int:
    """A processing-time call's tick: the latest arrival among the records it read (requests
    and rejected records alike), or the batch time for a call that read none (a timed-out key).

    A tick says that every request of the key up to it has been handled. The batch time says
    so only when the batch read everything that had arrived, which a batch cannot know: a
    source's cap (``max_records_per_trigger``, ``max_files_per_trigger``) leaves the newest
    records waiting after a stop or a long batch, and a tick past them would expire the members
    whose next heartbeats are among them (and refuse those heartbeats with UNKNOWN_MEMBER_ID
    when they are read). The latest arrival read is as far as the call knows its input; a
    backlog is then handled at its own arrival times, as a coordinator that was up would have
    handled it. The key's Spark timeout is set from the tick too (``StateFunction._finish``)."""
    read = [t for t in arrivals if t is not None]
    return min(max(read), batch_time_ms) if read else batch_time_ms


def misrouted(
    event: TimedEvent,
    row: InputRow,
    spark_key: Any,
    route: Callable[[str], str],
    routes: dict[str, str],
) -> dict[str, Any] | None:
    """The rejected_events row of a request whose ``group_id`` is not one of the Spark key it
    came under, else None. Spark keys a line by its own reading of ``$.group_id`` and Python
    handles it by its own; where the two disagree (a line beyond a limit of Spark's JSON reader,
    which then reads no group id: docs/engine.md, "The adapter"), the group would live under
    another key beside its own: two state machines for one group."""
    group_id = event.event.get("group_id")
    if not isinstance(group_id, str) or _routed(group_id, route, routes) == spark_key:
        return None  # a group_id that is not a text: the runner answers it, under any key
    return _rejection(
        row,
        f"misrouted: Spark read this line's group_id otherwise than {group_id!r}, or not at all"
        f" (it keyed the line {spark_key!r}, the group's key is {routes[group_id]!r})",
    )


def _routed(group_id: str, route: Callable[[str], str], routes: dict[str, str]) -> str:
    routed = routes.get(group_id)
    if routed is None:
        routed = routes[group_id] = route(group_id)
    return routed


def strays_dropped(
    rows: Sequence[Row], spark_key: Any, route: Callable[[str], str], routes: dict[str, str]
) -> list[Row]:
    """``rows`` without those of a group that is not one of the call's key: a *stray*, written
    under another key by a build before ``misrouted`` (its timers still fire there, and its
    rows, under its group id, would overwrite the group's own: the ``groups`` row, which the
    stray's end would delete)."""
    kept = [
        r
        for r in rows
        if not isinstance(gid := r.get("group_id"), str) or _routed(gid, route, routes) == spark_key
    ]
    if len(kept) < len(rows):
        log.warning(
            "%d rows of groups that are not of key %r dropped (strays written by an earlier"
            ' build: docs/engine.md, "The adapter")',
            len(rows) - len(kept),
            spark_key,
        )
    return kept


def _has_duplicate_group_id(raw: str) -> bool:
    top: list[list[str]] = []

    def names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        top.append([name for name, _ in pairs])
        return dict(pairs)

    json.loads(raw, object_pairs_hook=names)
    return bool(top) and top[-1].count("group_id") > 1  # the outermost object closes last


# The input columns the function reads; the numbers come from pandas as floats when the
# column has a null (NaN), else as numpy ints: both become Python ints or None here.
_TEXT_COLUMNS = ("raw", "source", "principal", "reject_reason")
_NUMBER_COLUMNS = ("arrival_time_ms", "seq")


def _records(frames: Iterator[Any]) -> list[InputRow]:
    """The key's rows in source order. Read column by column into tuples (``to_dict`` per row
    costs several times more; a dict per row about 1 µs more than a tuple)."""
    rows: list[InputRow] = []
    for frame in frames:
        size = len(frame)
        if not size:
            continue
        columns = [_texts(frame, name, size) for name in _TEXT_COLUMNS]
        columns += [
            [_number(v) for v in frame[name].tolist()] if name in frame else [None] * size
            for name in _NUMBER_COLUMNS
        ]
        rows.extend(zip(*columns, strict=True))
    if len(rows) > 1:
        orders: dict[Any, tuple[bool, Any]] = {}  # the source's sort key, once per source
        rows.sort(key=lambda row: _source_order(row, orders))
    return rows


_COLUMNS = (*_TEXT_COLUMNS, *_NUMBER_COLUMNS)


def _texts(frame: Any, name: str, size: int) -> list[Any]:
    if name not in frame:
        return [None] * size
    column = frame[name]
    values: list[Any] = column.tolist()
    if column.dtype != object:  # a string dtype that holds nulls as NaN
        values = [None if v != v else v for v in values]
    return values


def _number(value: Any) -> int | None:
    if value is None or value != value:  # NaN: a null in a column that has one
        return None
    return int(value)


_DIGITS = re.compile(r"(\d+)")


def _source_order(row: InputRow, orders: dict[Any, tuple[bool, Any]]) -> tuple[Any, ...]:
    """(arrival time, source, seq), each None last, the source compared with its numbers as
    numbers: a Kafka source is ``topic/partition/offset``, and offset 100 comes after 99 (as
    text it sorted first, reordering a partition's records that share a timestamp). One flat
    tuple per row: a None is (True, 0), a value (False, value). ``orders`` keeps each
    source's part, computed once per call."""
    _, source, _, _, arrival, seq = row
    order = orders.get(source)
    if order is None:
        key = source
        if isinstance(source, str):
            parts = _DIGITS.split(source)
            key = tuple(int(part) if i % 2 else part for i, part in enumerate(parts))
        order = orders[source] = (key is None, "" if key is None else key)
    return (arrival is None, arrival or 0, *order, seq is None, seq or 0)


@dataclass(frozen=True, slots=True)
class CallFigures:
    events: int
    rejected: int
    timers_fired: int
    max_timer_lateness_ms: int

    def row(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "rejected": self.rejected,
            "timers_fired": self.timers_fired,
            "max_timer_lateness_ms": self.max_timer_lateness_ms,
        }


class StateFunction:
    """Picklable callable for ``applyInPandasWithState``; ``runner_factory`` runs in workers.
    ``state_format`` is the one of the state schema the query is started with (a new
    checkpoint's by default); a state of either format is read. With ``answers`` (an answers
    topic), a call also hands Spark its answers (engine.envelope). With ``route`` (the
    coordinator: a group id's Spark key, ``SparkKeys.of``), a request whose ``group_id`` is
    not one of the call's key is rejected (``misrouted``)."""

    def __init__(
        self,
        runner_factory: Callable[[], Runner],
        mode: TimeMode,
        state_format: StateFormat = StateFormat.TEXT,
        answers: bool = False,
        route: Callable[[str], str] | None = None,
    ) -> None:
        self.runner_factory = runner_factory
        self.mode = mode
        self.state_format = state_format
        self.answers = answers
        self.route = route

    def __call__(self, key: tuple[Any, ...], frames: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        with _no_cyclic_gc():
            # one output row per table: its rows as one Arrow stream (engine.envelope)
            rows = self.rows(frames, state, spark_key=key[0])
            frame = pd.DataFrame(envelope.columns(rows, self.answers))
        yield frame

    def ticks(self, state: Any, batch_time_ms: int, arrivals: list[int | None]) -> tuple[int, int]:
        """The call's tick and the time a timer's lateness is measured from: the watermark for
        both in event time; in processing time ``processing_tick`` and the batch time."""
        if self.mode is TimeMode.EVENT_TIME:
            watermark = int(state.getCurrentWatermarkMs())
            return watermark, watermark
        return processing_tick(batch_time_ms, arrivals), batch_time_ms

    def call(
        self, frames: Iterator[Any], state: Any, spark_key: str | None = None
    ) -> list[tuple[str, str]]:
        """``rows``, each row as its JSON text: the per-row form of a call's output."""
        return [(table, row_text(row)) for table, row in self.rows(frames, state, spark_key)]

    def rows(
        self, frames: Iterator[Any], state: Any, spark_key: str | None = None
    ) -> list[tuple[str, Row]]:
        """One call (of the Spark key ``spark_key``): returns its rows, each with its table, in
        order; always ends with remove() or update(+timeout)."""
        batch_time = int(state.getCurrentProcessingTimeMs())
        stored = decode_state(state)
        events: list[TimedEvent] = []
        rejected: list[dict[str, Any]] = []
        route = self.route if spark_key is not None else None
        routes: dict[str, str] = {}  # a call's groups are few against its requests
        for row in _records(frames):
            parsed = parse_row(row, self.mode, batch_time)
            if route is not None and isinstance(parsed, TimedEvent):
                parsed = misrouted(parsed, row, spark_key, route, routes) or parsed
            (events if isinstance(parsed, TimedEvent) else rejected).append(parsed)  # type: ignore[arg-type]
        arrivals = [e.time_ms for e in events] + [r["arrival_time_ms"] for r in rejected]
        tick, now = self.ticks(state, batch_time, arrivals)
        result = self._run(stored, events, tick, rejected)
        self._finish(state, result, tick)
        deadline = stored.deadline_ms
        fired = deadline is not None and deadline <= tick
        figures = CallFigures(
            events=len(events),
            rejected=len(rejected),
            timers_fired=1 if fired else 0,
            max_timer_lateness_ms=now - deadline if fired and deadline is not None else 0,
        )
        out: list[tuple[str, Row]] = [(REJECTED_TABLE, row) for row in rejected]
        for table, rows in result.outputs.items():
            if route is not None:
                rows = strays_dropped(rows, spark_key, route, routes)
            out.extend((table, row) for row in rows)
        out.append((METRICS_TABLE, figures.row()))
        return out

    def _run(
        self,
        stored: KeyState,
        events: Sequence[TimedEvent],
        tick: int,
        rejected: list[dict[str, Any]],
    ) -> RunResult:
        try:
            return self.runner_factory().run(stored.blob, events, tick)
        except Exception as exc:  # a core bug: keep the old state, leave a trace per event
            log.exception("runner failed; events rejected, state kept")
            for event in events:
                rejected.append(
                    {
                        "raw": row_text(event.event),
                        "reason": f"internal error: {type(exc).__name__}: {exc}",
                        "source": event.line,
                        "arrival_time_ms": event.time_ms,
                    }
                )
            return RunResult(stored.blob, {}, stored.deadline_ms)

    def _finish(self, state: Any, result: RunResult, tick: int) -> None:
        deadline = result.next_deadline_ms
        if deadline is not None:
            # An event time near the end of the long range (the wire allows any long) can put
            # a deadline past it; Spark keeps longs: such a timer never fires anyway.
            deadline = min(deadline, INT64_MAX)
        if result.state is None and deadline is None:
            state.remove()
            return
        blob = encode_blob(result.state, self.state_format)
        state.update((STATE_VERSION, NO_DEADLINE if deadline is None else deadline, blob))
        if deadline is None:
            return  # update() alone clears the Spark timeout: the key has no timer
        if self.mode is TimeMode.EVENT_TIME:
            state.setTimeoutTimestamp(max(deadline, tick + 1))
        else:
            # Spark adds the duration to the batch time. From the tick: a key whose tick is its
            # latest arrival wakes once as much time as its timer is ahead of that arrival has
            # passed, by which time the source, read at least as fast as records arrive, has
            # read the key's records up to the timer (processing_tick). Keep the sum a long (a
            # century is "never" for a timer; the key wakes, finds nothing due, and sleeps).
            state.setTimeoutDuration(min(max(1, deadline - tick), CENTURY_MS))


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Python's cyclic garbage collector paused for one call. A call allocates tens of
    container objects per event (rows, requests, group values), none of them in a cycle, and
    each allocation burst starts collections that rescan what the worker keeps alive (pandas,
    pyarrow, pyspark: hundreds of thousands of objects): 3-20 % of a heartbeat batch's time in
    the state function, measured alternating (docs/benchmarks/engine.md, issue 14). Reference
    counting frees the call's values as before; a cycle made during the call is collected at
    the next collection after it."""
    paused = gc.isenabled()
    if paused:
        _freeze_once()
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def prepare_worker() -> None:
    """What a worker's first call does before its rows (``_freeze_once``), done ahead by
    engine.warmup while the query starts."""
    _freeze_once()


_FROZEN_IN: list[int] = []  # the process that froze its objects (a forked worker does its own)


def _freeze_once() -> None:
    """Move what the worker process holds at its first call (modules, classes, pandas,
    pyarrow, pyspark: ~76,000 objects) out of the cyclic collector's reach, once per process.

    PySpark's daemon runs a full ``gc.collect()`` in the worker after every task, and each one
    rescanned all of them: 10.8 % of the Python workers' CPU samples in a saturated run of
    bench/engine_bench.py, 1.5-2.1 % with the freeze (docs/benchmarks/engine.md, issue 14). A
    collection runs first, so no garbage is frozen; what the first task still holds then (its
    command, its first frames) is never collected as a cycle: a one-off, bounded cost."""
    pid = os.getpid()
    if _FROZEN_IN and _FROZEN_IN[0] == pid:
        return
    gc.collect()
    gc.freeze()
    _FROZEN_IN[:] = [pid]
