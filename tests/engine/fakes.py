"""Test doubles for the engine: a tiny Runner with a timer, and a GroupState that validates
calls the way Spark's Python GroupState does (pyspark/sql/streaming/state.py; the rules
are in docs/engine.md, "The adapter")."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from controlplane.core.runtime import RunResult, TimedEvent


class BatchFrame:
    """What foreachBatch hands the sink, as far as the sink reads it: the batch as Arrow, and
    no session (a test gives the sink its writer)."""

    sparkSession = None

    def __init__(self, arrow: Any) -> None:
        self.arrow = arrow

    def toArrow(self) -> Any:
        return self.arrow


class CountingRunner:
    """Counts a key's events; each event arms a timer ``timeout_ms`` after it; ``forget``
    drops the key. Rows: a ``decisions`` row per event (``generation_id`` = the count,
    ``decided_at_ms`` = its time), a ``group_events`` row per timer (at its deadline)."""

    def run(
        self, state: bytes | None, events: Sequence[TimedEvent], tick_ms: int | None
    ) -> RunResult:
        data = (
            json.loads(state)
            if state
            else {"count": 0, "deadline": None, "clock": 0, "group": None}
        )
        counts: list[dict[str, Any]] = []
        fired: list[dict[str, Any]] = []
        for timed in events:
            self._fire(data, timed.time_ms or data["clock"], fired)
            data["clock"] = max(data["clock"], timed.time_ms or 0)
            data["group"] = timed.event.get("group_id")
            if timed.event.get("type") == "forget":
                return RunResult(None, {"decisions": counts, "group_events": fired}, None)
            data["count"] += 1
            counts.append(
                {
                    "event_id": timed.event.get("event_id"),
                    "group_id": data["group"],
                    "generation_id": data["count"],
                    "decided_at_ms": data["clock"],
                }
            )
            data["deadline"] = data["clock"] + int(timed.event.get("timeout_ms", 1000))
        if tick_ms is not None:
            self._fire(data, tick_ms, fired)
            data["clock"] = max(data["clock"], tick_ms)
        encoded = json.dumps(data).encode()
        return RunResult(encoded, {"decisions": counts, "group_events": fired}, data["deadline"])

    @staticmethod
    def _fire(data: dict[str, Any], now_ms: int, fired: list[dict[str, Any]]) -> None:
        if data["deadline"] is not None and data["deadline"] <= now_ms:
            fired.append(
                {
                    "group_id": data["group"],
                    "at_ms": data["deadline"],
                    "kind": "timer_fired",
                    "generation_id": data["count"],
                }
            )
            data["deadline"] = None


class FakeGroupState:
    """Spark's GroupState as seen from Python, with its checks."""

    def __init__(
        self,
        *,
        timeout: str = "ProcessingTimeTimeout",
        batch_time_ms: int = 0,
        watermark_ms: int | None = None,
        value: tuple[Any, ...] | None = None,
        timed_out: bool = False,
    ) -> None:
        self.timeout = timeout
        self.batch_time_ms = batch_time_ms
        self.watermark_ms = watermark_ms
        self.value = value
        self.hasTimedOut = timed_out
        self.removed = False
        self.updated = False
        self.timeout_timestamp: int | None = None

    @property
    def exists(self) -> bool:
        return self.value is not None

    @property
    def get(self) -> tuple[Any, ...]:
        if self.value is None:
            raise ValueError("STATE_NOT_EXISTS")
        return self.value

    def update(self, value: tuple[Any, ...]) -> None:
        if value is None:
            raise ValueError("CANNOT_BE_NONE")
        for item in value:
            if isinstance(item, int) and not -(2**63) <= item < 2**63:
                raise OverflowError(f"state field out of the long range: {item}")
        self.value, self.updated, self.removed = tuple(value), True, False
        self.timeout_timestamp = None  # update() alone clears the timeout

    def remove(self) -> None:
        self.value, self.removed = None, True
        self.timeout_timestamp = None

    def setTimeoutDuration(self, duration_ms: int) -> None:
        if self.timeout != "ProcessingTimeTimeout":
            raise RuntimeError("CANNOT_WITHOUT ProcessingTimeTimeout")
        if not isinstance(duration_ms, int) or duration_ms <= 0:
            raise ValueError(f"timeout duration must be a positive int, got {duration_ms!r}")
        if self.batch_time_ms + duration_ms >= 2**63:
            raise ArithmeticError("long overflow")  # Spark adds it to the batch time
        self.timeout_timestamp = self.batch_time_ms + duration_ms

    def setTimeoutTimestamp(self, timestamp_ms: int) -> None:
        if self.timeout != "EventTimeTimeout":
            raise RuntimeError("CANNOT_WITHOUT EventTimeTimeout")
        if self.watermark_ms is not None and timestamp_ms < self.watermark_ms:
            raise ValueError("INVALID_TIMEOUT_TIMESTAMP")
        if timestamp_ms >= 2**63:
            raise OverflowError("a timeout timestamp is a long")
        self.timeout_timestamp = timestamp_ms

    def getCurrentProcessingTimeMs(self) -> int:
        return self.batch_time_ms

    def getCurrentWatermarkMs(self) -> int:
        if self.watermark_ms is None:
            raise RuntimeError("CANNOT_WITHOUT watermark")
        return self.watermark_ms

    def next_call(self, batch_time_ms: int, *, watermark_ms: int | None = None) -> FakeGroupState:
        """The same key in a later batch (what the state store would hand back)."""
        return FakeGroupState(
            timeout=self.timeout,
            batch_time_ms=batch_time_ms,
            watermark_ms=watermark_ms,
            value=self.value,
        )


class FakeConf:
    def set(self, key: str, value: str) -> None:
        pass


class FakeStreams:
    def removeListener(self, listener: Any) -> None:
        pass


class FakeSpark:
    """No JVM: the job's JVM log levels and its graceful stop fall back (the query's own
    ``stop()``)."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.streams = FakeStreams()
        self.conf = FakeConf()

    def stop(self) -> None:
        self.log.append("session stopped")
