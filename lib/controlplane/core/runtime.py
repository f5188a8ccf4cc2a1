"""The contract between the cores and their shells (replay command, streaming engine).

A *runner* owns the state of one Spark key: one group, one coordinator shard holding many
groups, one quota key, or one quota shard. The shell hands it the key's encoded state, the
key's events in source order with the time each is handled at, and the tick (in processing
time the latest arrival read, or the batch time; the watermark; or None); it returns the new
encoded state (None: forget the key), the output rows per table in order, and the key's next
deadline (None: no timer). Runners are pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from controlplane.core.frozen import fast_constructor


@dataclass(frozen=True, slots=True)
class TimedEvent:
    """A raw wire event (a parsed JSON object, or a text that was not one) and its handling time.

    ``time_ms`` is the event's clock candidate: ``event_time_ms`` in replay and event-time mode,
    the arrival time clamped to the batch time in processing-time mode (docs/reference/events.md
    §6). The key's clock is ``max(key clock, time_ms)``. ``line`` names the input position for error
    messages.
    """

    event: Mapping[str, Any]
    time_ms: int | None
    line: str | None = None  # e.g. "events.jsonl:12"; named in INVALID_REQUEST messages
    error: str | None = None  # set when the text could not be parsed into a JSON object
    raw: str | None = None  # the text as received, kept when ``error`` is set


make_timed_event = fast_constructor(TimedEvent)  # built per event by the engine


@dataclass(frozen=True, slots=True)
class RunResult:
    state: bytes | None
    outputs: Mapping[str, Sequence[Mapping[str, Any]]]  # table name -> rows, in order
    next_deadline_ms: int | None


class Runner(Protocol):
    def run(
        self,
        state: bytes | None,
        events: Sequence[TimedEvent],
        tick_ms: int | None,
    ) -> RunResult: ...
