"""Many groups behind one key: the coordinator's runner (core.runtime.Runner) and its shard.

A :class:`CoordinatorShard` holds the groups of one Spark key (one group under group keying,
every group of a shard under shard keying) and feeds wire events to the one-group state
machine (``machine``) under the clock rules of docs/reference/events.md §6:

* each group has its own clock, which never goes back: an event is handled at
  ``now = max(group clock, event time)``; before it, the group's due timers fire (each at its
  own deadline, by ``machine.fire_due``);
* a ``tick`` with ``group_id`` ticks that group, without one every group (in group id order);
  ``tick(now_ms)`` (the batch time or watermark) does the same at the end of a batch;
* failover (``failover_gap_ms``): the first time a batch touches a group whose earliest timer
  is overdue by more than the gap (the engine was stopped or far behind when it should have
  fired), its members' sessions are reset (``machine.reset_sessions``) at that time, before
  its timers fire, as Kafka does when a coordinator loads a group. Lateness of a timer, not the
  lag of the group's clock, is the measure: a group may be idle for hours (no timer due) and a
  crashed member's session must still expire when its deadline is reached;
* idempotence: a request whose ``event_id`` is among the group's last 64 handled requests is
  not handled again; it leaves a ``duplicate_request`` group event. The window lives with the
  group: when a group ceases to exist (never created, deleted, expired) it leaves the state,
  and its window with it, so a repeat sent after that is handled as a new request;
* an invalid event (INVALID_REQUEST) never reaches a group and changes no state; it is answered
  at its group's clock or its own event time, whichever is later; with neither, at the latest
  clock among the shard's groups (0 in an empty shard), so the answer does not depend on how
  the input was cut into batches.

The state bytes are an envelope: a version byte, the shard's latest time, then per group its
id, clock, next deadline, idempotence window (an 8-byte digest per event id, so the state does
not grow with the length of ids) and the machine's encoding of the group. Groups a batch does
not touch are copied through without being decoded.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from controlplane.core.config import CoordinatorConfig
from controlplane.core.coordinator import codec, machine
from controlplane.core.coordinator.records import EventKind, GroupEvent
from controlplane.core.coordinator.requests import Request, Tick
from controlplane.core.coordinator.state import Group
from controlplane.core.coordinator.wire import InvalidEvent, parse_event
from controlplane.core.runtime import RunResult, TimedEvent

Row = dict[str, Any]
Rows = dict[str, list[Row]]

DECISIONS: Final = "decisions"
GROUP_EVENTS: Final = "group_events"
GROUPS: Final = "groups"
OUTPUTS: Final = (DECISIONS, GROUP_EVENTS, GROUPS)

IDEMPOTENCE_WINDOW: Final = 64
STATE_VERSION: Final = 1
# The envelope: version, shard clock, group count; per group: id size, clock, next deadline,
# body size, then the id and the body: the window (a count, then one 8-byte digest per event id,
# oldest first), then the machine's encoding of the group.
_SHARD_HEADER: Final = struct.Struct("<BqI")
_GROUP_HEADER: Final = struct.Struct("<IqqI")
_WINDOW_SIZE: Final = struct.Struct("<H")
_DIGEST_BYTES: Final = 8
_NONE: Final = -(2**63)  # stands for None in the clock and deadline fields
_MAX: Final = 2**63 - 1


@dataclass(slots=True)
class _Entry:
    """One group of the shard, decoded only when a batch needs it.

    ``body`` is the group's encoded idempotence window and group (None once either changed;
    ``encode`` rebuilds it). ``window`` and ``group`` are filled from it on first use."""

    clock_ms: int
    next_deadline_ms: int | None
    body: bytes | None = None
    _window: dict[bytes, None] | None = None  # ordered set of the last 64 id digests
    _group: Group | None = None

    @property
    def window(self) -> dict[bytes, None]:
        if self._window is None:
            self._load()
        assert self._window is not None
        return self._window

    def decoded(self) -> Group:
        if self._group is None:
            self._load()
        assert self._group is not None
        return self._group

    def remember(self, digest: bytes) -> None:
        window = self.window
        window[digest] = None
        if len(window) > IDEMPOTENCE_WINDOW:
            del window[next(iter(window))]
        self.body = None

    def replace(self, group: Group) -> None:
        if self._window is None:  # load the window before the body is dropped
            self._load()
        self._group = group
        self.body = None

    def encoded_body(self) -> bytes:
        if self.body is None:
            window = self.window
            group = codec.encode_group(self.decoded())
            self.body = b"".join((_WINDOW_SIZE.pack(len(window)), *window, group))
        return self.body

    def _load(self) -> None:
        if self.body is None:  # a new entry
            self._window = {}
            return
        body = self.body
        start = _WINDOW_SIZE.size
        count = _WINDOW_SIZE.unpack_from(body, 0)[0] if len(body) >= start else -1
        end = start + count * _DIGEST_BYTES
        if count < 0 or count > IDEMPOTENCE_WINDOW or len(body) < end:
            raise ValueError("coordinator state: a group's idempotence window is unreadable")
        if self._window is None:
            self._window = dict.fromkeys(body[i : i + _DIGEST_BYTES] for i in range(start, end, 8))
        if self._group is None:
            self._group = codec.decode_group(body[end:])


class CoordinatorShard:
    """The mutable, in-memory holder of a shard's groups; ``run`` and the replay build on it."""

    def __init__(self, config: CoordinatorConfig, *, failover_gap_ms: int | None = None) -> None:
        self.config = config
        self.failover_gap_ms = failover_gap_ms
        self.clock_ms: int | None = None  # the latest time the shard has seen
        self._entries: dict[str, _Entry] = {}
        # this batch: groups a request or timer reached (id -> existed at some point), groups
        # whose clock was checked for a failover gap, and when groups ceased to exist
        self._touched: dict[str, bool] = {}
        self._visited: set[str] = set()
        self._deleted_at_ms: dict[str, int] = {}

    # --- batches -----------------------------------------------------------------------------

    def begin_batch(self) -> None:
        """Forget which groups the previous batch touched (failover and ``groups`` rows)."""
        self._touched.clear()
        self._visited.clear()
        self._deleted_at_ms.clear()

    def group_rows(self) -> list[Row]:
        """The ``groups`` row of every group a request or a timer reached in this batch, with
        ``deleted`` true for one that ceased to exist. A tick that fires nothing changes no row,
        so a batch-time tick over a large shard does not rewrite every group's row."""
        rows: list[Row] = []
        for group_id, existed in self._touched.items():
            entry = self._entries.get(group_id)
            if entry is not None:
                row = dict(machine.group_row(entry.decoded(), entry.clock_ms))
                row["deleted"] = False
                rows.append(row)
            elif existed:
                rows.append(_deleted_row(group_id, self._deleted_at_ms[group_id]))
        return rows

    @property
    def group_ids(self) -> list[str]:
        return list(self._entries)

    def group(self, group_id: str) -> Group | None:
        entry = self._entries.get(group_id)
        return None if entry is None else entry.decoded()

    def next_deadline_ms(self) -> int | None:
        deadlines = [
            e.next_deadline_ms for e in self._entries.values() if e.next_deadline_ms is not None
        ]
        return min(deadlines, default=None)

    # --- events --------------------------------------------------------------------------------

    def feed(self, event: TimedEvent) -> Rows:
        """Handle one wire event; returns its decisions and group_events rows, in order."""
        rows: Rows = {DECISIONS: [], GROUP_EVENTS: []}
        parsed = parse_event(event)
        if isinstance(parsed, InvalidEvent):
            self._answer_invalid(parsed, event.time_ms, rows)
            return rows
        time_ms = parsed.header.event_time_ms if event.time_ms is None else event.time_ms
        self._see(time_ms)
        group_id = parsed.header.group_id
        if isinstance(parsed, Tick):
            for tick_id in sorted(self._entries) if group_id is None else [group_id]:
                self._advance(tick_id, time_ms, rows)
            return rows
        assert group_id is not None  # the wire parser requires it for every request
        self._request(group_id, parsed, time_ms, rows)
        return rows

    def tick(self, now_ms: int) -> Rows:
        """Advance every group to ``now_ms`` (batch time or watermark), firing due timers."""
        rows: Rows = {DECISIONS: [], GROUP_EVENTS: []}
        self._see(now_ms)
        for group_id in sorted(self._entries):
            self._advance(group_id, now_ms, rows)
        return rows

    def _see(self, time_ms: int) -> None:
        self.clock_ms = time_ms if self.clock_ms is None else max(self.clock_ms, time_ms)

    def _answer_invalid(self, invalid: InvalidEvent, time_ms: int | None, rows: Rows) -> None:
        entry = None if invalid.group_id is None else self._entries.get(invalid.group_id)
        if time_ms is None:
            time_ms = invalid.event_time_ms
        candidates = (time_ms, None if entry is None else entry.clock_ms)
        known = [t for t in candidates if t is not None and t >= 0]
        if known:
            decided_at_ms = max(known)
            self._see(decided_at_ms)
        else:  # no time of its own: the latest clock among the shard's groups, which the
            # state keeps (the shard's own clock is lost when its last group goes)
            decided_at_ms = max((e.clock_ms for e in self._entries.values()), default=0)
        rows[DECISIONS].append(invalid.decision(decided_at_ms).to_row())

    def _advance(self, group_id: str, time_ms: int, rows: Rows) -> _Entry | None:
        """Move a known group's clock to ``time_ms`` (never back), resetting sessions after a
        failover gap and firing due timers. Returns the entry, or None if the group is gone."""
        entry = self._entries.get(group_id)
        if entry is None:
            return None
        now_ms = max(entry.clock_ms, time_ms)
        first_touch = group_id not in self._visited
        self._visited.add(group_id)
        if first_touch and self._overdue(entry, now_ms):
            self._apply(
                group_id, entry, machine.reset_sessions(entry.decoded(), now_ms, self.config), rows
            )
            if group_id not in self._entries:
                return None
        entry.clock_ms = now_ms
        due = entry.next_deadline_ms
        if due is not None and due <= now_ms:
            self._apply(
                group_id, entry, machine.fire_due(entry.decoded(), now_ms, self.config), rows
            )
        return self._entries.get(group_id)

    def _overdue(self, entry: _Entry, now_ms: int) -> bool:
        """The group's earliest timer should have fired more than the gap ago: the engine was
        stopped (or far behind), not the group idle, since a running engine calls a key by its
        deadline. An idle group's clock may lag by hours without its sessions being reset."""
        gap = self.failover_gap_ms
        due = entry.next_deadline_ms
        return gap is not None and due is not None and now_ms - due > gap

    def _request(self, group_id: str, request: Request, time_ms: int, rows: Rows) -> None:
        entry = self._advance(group_id, time_ms, rows)
        header = request.header
        digest = _digest(header.event_id)
        if entry is not None and digest in entry.window:
            rows[GROUP_EVENTS].append(_duplicate(request, entry.clock_ms))
            return
        self._touched.setdefault(group_id, False)
        now_ms = time_ms if entry is None else entry.clock_ms
        group = None if entry is None else entry.decoded()
        step = machine.handle(group, request, now_ms, self.config)
        if entry is None:
            if step.group is None:  # answered without a group coming to exist
                _emit(step, rows)
                return
            entry = _Entry(clock_ms=now_ms, next_deadline_ms=None)
            self._entries[group_id] = entry
        entry.remember(digest)
        self._apply(group_id, entry, step, rows)

    def _apply(self, group_id: str, entry: _Entry, step: machine.Step, rows: Rows) -> None:
        _emit(step, rows)
        self._touched[group_id] = True
        if step.group is None:
            del self._entries[group_id]
            self._deleted_at_ms[group_id] = entry.clock_ms
            return
        entry.replace(step.group)
        entry.next_deadline_ms = machine.next_deadline_ms(step.group)

    # --- the envelope --------------------------------------------------------------------------

    def encode(self) -> bytes | None:
        """The shard's state bytes; None when no group is left (the key can be forgotten)."""
        if not self._entries:
            return None
        clock = _NONE if self.clock_ms is None else self.clock_ms
        parts = [_SHARD_HEADER.pack(STATE_VERSION, clock, len(self._entries))]
        for group_id, entry in self._entries.items():
            name = group_id.encode("utf-8")
            body = entry.encoded_body()
            # A hint of the body's next deadline; one past the long range (a request near its
            # end: the wire allows any long) is stored as the range's end and never fires.
            deadline = (
                _NONE if entry.next_deadline_ms is None else min(entry.next_deadline_ms, _MAX)
            )
            parts.append(_GROUP_HEADER.pack(len(name), entry.clock_ms, deadline, len(body)))
            parts.append(name)
            parts.append(body)
        return b"".join(parts)

    @classmethod
    def decode(
        cls,
        data: bytes | None,
        config: CoordinatorConfig,
        *,
        failover_gap_ms: int | None = None,
    ) -> CoordinatorShard:
        """A shard from its state bytes (None: an empty shard). Raises ValueError if corrupt."""
        shard = cls(config, failover_gap_ms=failover_gap_ms)
        if data is None:
            return shard
        if not data or data[0] != STATE_VERSION:
            found = data[0] if data else "nothing"
            raise ValueError(f"coordinator state: unsupported version {found} (expected 1)")
        try:
            _, clock, count = _SHARD_HEADER.unpack_from(data, 0)
            offset = _SHARD_HEADER.size
            shard.clock_ms = None if clock == _NONE else clock
            for _ in range(count):
                name_size, clock_ms, deadline, body_size = _GROUP_HEADER.unpack_from(data, offset)
                offset += _GROUP_HEADER.size
                group_id = data[offset : offset + name_size].decode("utf-8")
                offset += name_size
                body = data[offset : offset + body_size]
                offset += body_size
                if len(body) != body_size:
                    raise struct.error("short body")
                next_deadline_ms = None if deadline == _NONE else deadline
                shard._entries[group_id] = _Entry(clock_ms, next_deadline_ms, body)
        except struct.error:
            raise ValueError("coordinator state: truncated") from None
        if offset != len(data):
            raise ValueError("coordinator state: trailing bytes after the last group")
        return shard


class CoordinatorRunner:
    """core.runtime.Runner for the coordinator: decode, feed the batch, tick, encode."""

    def __init__(self, config: CoordinatorConfig, *, failover_gap_ms: int | None = None) -> None:
        self.config = config
        self.failover_gap_ms = failover_gap_ms

    def run(
        self, state: bytes | None, events: Sequence[TimedEvent], tick_ms: int | None
    ) -> RunResult:
        shard = CoordinatorShard.decode(state, self.config, failover_gap_ms=self.failover_gap_ms)
        outputs: Rows = {DECISIONS: [], GROUP_EVENTS: []}
        for event in events:
            _extend(outputs, shard.feed(event))
        if tick_ms is not None:
            _extend(outputs, shard.tick(tick_ms))
        outputs[GROUPS] = shard.group_rows()
        return RunResult(shard.encode(), outputs, shard.next_deadline_ms())


def _digest(event_id: str) -> bytes:
    """8 bytes of BLAKE2b: a state that does not grow with the length of event ids. Two ids of
    one window collide with a chance of about 64 in 2**64."""
    return hashlib.blake2b(event_id.encode("utf-8"), digest_size=_DIGEST_BYTES).digest()


def _emit(step: machine.Step, rows: Rows) -> None:
    if step.decisions:
        rows[DECISIONS] += [decision.to_row() for decision in step.decisions]
    if step.events:
        rows[GROUP_EVENTS] += [event.to_row() for event in step.events]


def _extend(outputs: Rows, rows: Mapping[str, Iterable[Row]]) -> None:
    for table, table_rows in rows.items():
        outputs[table].extend(table_rows)


def _duplicate(request: Request, at_ms: int) -> Row:
    header = request.header
    assert header.group_id is not None
    return GroupEvent(
        group_id=header.group_id,
        at_ms=at_ms,
        kind=EventKind.DUPLICATE_REQUEST,
        member_id=header.member_id,
        group_instance_id=header.group_instance_id,
        event_id=header.event_id,
    ).to_row()


def _deleted_row(group_id: str, at_ms: int) -> Row:
    return {
        "group_id": group_id,
        "group_state": "Dead",
        "generation_id": None,
        "protocol_type": None,
        "protocol_name": None,
        "leader_id": None,
        "members": [],
        "updated_at_ms": at_ms,
        "deleted": True,
    }
