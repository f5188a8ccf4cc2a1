"""Many groups behind one key: the coordinator's runner (core.runtime.Runner) and its shard.

A :class:`CoordinatorShard` holds the groups of one Spark key (one group under group keying,
every group of a shard under shard keying) and feeds wire events to the one-group state
machine (``machine``) under the clock rules of docs/reference/events.md §6:

* each group has its own clock, which never goes back: an event is handled at
  ``now = max(group clock, event time)``; before it, the group's due timers fire (each at its
  own deadline, by ``machine.fire_due``);
* a ``tick`` with ``group_id`` ticks that group, without one every group (in group id order);
  ``tick(now_ms)`` (the engine's tick, or the watermark) does the same at the end of a batch;
* failover (``failover_gap_ms``): the first time a batch touches a group whose earliest timer
  is overdue by more than the gap (the engine was stopped or far behind when it should have
  fired), its members' sessions are reset (``machine.reset_sessions``: and an interrupted
  rebalance's deadline, and what else is overdue comes due then) at that time, before its
  timers fire, as Kafka does when a coordinator loads a group. Lateness of a timer, not the
  lag of the group's clock, is the measure: a group may be idle for hours (no timer due) and a
  crashed member's session must still expire when its deadline is reached;
* loading (``run_starts``, when each run of the engine started): a call's epoch is the latest
  run start at or before its tick. A shard whose state was written under an earlier epoch (or
  none) is being loaded, as by a new coordinator after a failover, whose downtime need not be
  longer than the gap: in that call, the first touch of a group with a timer due at all resets
  its sessions the same way. Such a timer came due while no run served the shard, or before
  the key's tick first passed the new run's start (a key woken only by its timeout, a backlog
  read in slices): its member is then removed a session after the load, a timer's lateness
  plus a session later than by a running coordinator. Either way the requests that kept its
  members may be waiting in records not read yet. The epoch follows the tick, not the run that
  executes the call, so a batch run again by a later run decides as it did the first time;
* idempotence (``core/idempotence.py``, the quota's design too): a request whose ``event_id``
  is among the group's last 64 handled requests is not handled again; it leaves a
  ``duplicate_request`` group event. The window lives with the group: when a group ceases to
  exist (never created, deleted, expired) it leaves the state, and its window with it, so a
  repeat sent after that is handled as a new request;
* an invalid event (INVALID_REQUEST) never reaches a group and changes no state; it is answered
  at its group's clock or its own event time, whichever is later; with neither, at the latest
  clock among the shard's groups (0 in an empty shard), so the answer does not depend on how
  the input was cut into batches.

The state bytes (version 2) are a version byte and the size of the rest, then one
``marshal`` record (stdlib, format 4, as the group codec uses) of the shard's latest time and
four parallel lists: the group ids, their clocks, their next deadlines and the sizes of their
bodies; then the bodies (the idempotence window, an 8-byte digest per event id, then the
machine's encoding of the group). A call decodes and re-encodes a shard with a
few C-level passes over these lists; only the groups its events and due timers reach are
read, and only those that changed are encoded again, so the Python work of a call follows the
groups it touches, not the shard's size. A group is read as its encoding's lists and built
as a ``Group`` only when something needs one: a heartbeat from a member in good standing, the
most common request, is answered on the lists (``fields.py``: ``machine.handle``'s fast path).
A version 1 state (one struct header per group) is still read, and written back as version 2.
Version 3 is version 2 with the latest epoch the shard was called in after the four lists; a
shard with an epoch is written as version 3, one without as version 2.
"""

from __future__ import annotations

import marshal
import struct
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate
from typing import Any, Final

from controlplane.core.config import CoordinatorConfig
from controlplane.core.coordinator import codec, fields, machine
from controlplane.core.coordinator.records import Decision, EventKind, GroupEvent
from controlplane.core.coordinator.requests import Heartbeat, Request, Tick
from controlplane.core.coordinator.state import Group
from controlplane.core.coordinator.wire import InvalidEvent, parse_event
from controlplane.core.idempotence import DIGEST_BYTES, WINDOW, digest, remembered, seen
from controlplane.core.runtime import RunResult, TimedEvent

Row = dict[str, Any]
Rows = dict[str, list[Row]]

DECISIONS: Final = "decisions"
GROUP_EVENTS: Final = "group_events"
GROUPS: Final = "groups"
OUTPUTS: Final = (DECISIONS, GROUP_EVENTS, GROUPS)

STATE_VERSION: Final = 2
EPOCH_STATE_VERSION: Final = 3  # version 2's record with the epoch after its lists
_WINDOW_SIZE: Final = struct.Struct("<H")  # a body starts with its window's digest count
# Version 2: the version byte and the size of the marshal record that follows.
_HEADER: Final = struct.Struct("<BI")
_MARSHAL_VERSION: Final = 4
# Version 1: version, shard clock, group count; per group: id size, clock, next deadline
# (_NONE for None), body size, then the id and the body.
_V1_SHARD_HEADER: Final = struct.Struct("<BqI")
_V1_GROUP_HEADER: Final = struct.Struct("<IqqI")
_NONE: Final = -(2**63)


class _Loaded:
    """A group a batch reached: the idempotence window (the digests of its last 64 handled
    requests, oldest first, as one bytes) and the group, held as its encoding's lists
    (``codec.read_fields``) until something needs it as a ``Group``: a heartbeat of the fast
    path (``fields.heartbeat``) and the group's row need only the lists."""

    __slots__ = ("_fields", "_group", "changed", "span", "window")

    def __init__(
        self,
        window: bytes,
        group: Group | None = None,
        span: tuple[int, int] | None = None,  # where its body was in the decoded state's bodies
        lists: list[Any] | None = None,
    ) -> None:
        self.window = window
        self._group = group
        self._fields = lists  # the encoding's lists (fields.py), when ``_group`` is None
        self.span = span
        self.changed = False  # the body must be encoded again

    @property
    def group(self) -> Group:
        group = self._group
        if group is None:
            assert self._fields is not None
            group = self._group = codec.group_of_fields(self._fields)
            self._fields = None
        return group

    @group.setter
    def group(self, group: Group) -> None:
        self._group, self._fields = group, None

    def fast_heartbeat(self, request: Heartbeat, now_ms: int) -> tuple[Decision, int | None] | None:
        """``fields.heartbeat`` on a group not yet decoded: its answer and the group's next
        deadline; None when the group is decoded, or when the heartbeat needs the general path.
        The caller remembers the request (which marks the body changed)."""
        lists = self._fields
        if lists is None:
            return None
        decision = fields.heartbeat(lists, request, now_ms)
        return None if decision is None else (decision, fields.next_deadline_ms(lists))

    def row(self, now_ms: int) -> Row:
        if self._fields is not None:
            return fields.group_row(self._fields, now_ms)
        return machine.group_row(self.group, now_ms)

    def remember(self, event_digest: bytes) -> None:
        self.window = remembered(self.window, event_digest)
        self.changed = True

    def body(self) -> bytes:
        window = self.window
        count = _WINDOW_SIZE.pack(len(window) // DIGEST_BYTES)
        if self._fields is not None:
            encoding = codec.encode_fields(self._fields)
        else:
            encoding = codec.encode_group(self.group)
        return b"".join((count, window, encoding))


def _load(body: bytes, span: tuple[int, int]) -> _Loaded:
    start = _WINDOW_SIZE.size
    count = _WINDOW_SIZE.unpack_from(body, 0)[0] if len(body) >= start else -1
    end = start + count * DIGEST_BYTES
    if count < 0 or count > WINDOW or len(body) < end:
        raise ValueError("coordinator state: a group's idempotence window is unreadable")
    return _Loaded(body[start:end], span=span, lists=codec.read_fields(body[end:]))


class CoordinatorShard:
    """The mutable, in-memory holder of a shard's groups; ``run`` and the replay build on it.

    The groups live in slots, in the state's order: per slot the group id, its clock, its next
    deadline and the size of its encoded body, as four lists (what the state stores). The
    bodies of the decoded state stay one bytes; a group a batch reaches is decoded once into
    ``_loaded``, and ``encode`` splices the bodies that changed into the old ones. A group that
    ceases keeps its slot (``_dead``) until ``encode``; one that comes to exist takes a new
    slot at the end. The id -> slot index is built on the first lookup, so a call that only
    ticks the shard, with nothing due, does no per-group Python work beyond a few list passes.
    """

    def __init__(
        self,
        config: CoordinatorConfig,
        *,
        failover_gap_ms: int | None = None,
        coordinator_epoch: int | None = None,
    ) -> None:
        self.config = config
        self.failover_gap_ms = failover_gap_ms
        self.epoch = coordinator_epoch  # the latest epoch of a call (None: no runs)
        self._loading = False  # the decoded state was written under an earlier epoch
        self.clock_ms: int | None = None  # the latest time the shard has seen
        self._ids: list[str] = []
        self._clocks: list[int] = []
        self._deadlines: list[int | None] = []  # None for no timer, and for a dead slot
        self._sizes: list[int] = []
        self._blob = b""  # the bodies of the decoded state, in its order
        self._starts: list[int] = [0]  # where each of them starts in ``_blob``, and its end
        self._index: dict[str, int] | None = None  # group id -> slot, built when first needed
        self._dead: set[int] = set()
        self._loaded: dict[int, _Loaded] = {}  # by slot
        self._dropped: list[tuple[int, int]] = []  # spans of decoded groups that ceased
        # this batch: groups a request or timer reached (id -> existed at some point), groups
        # whose clock was checked for a failover gap, and when groups ceased to exist
        self._touched: dict[str, bool] = {}
        self._visited: set[str] = set()
        self._deleted_at_ms: dict[str, int] = {}

    # --- batches -----------------------------------------------------------------------------

    def group_rows(self) -> list[Row]:
        """The ``groups`` row of every group a request or a timer reached in this batch, with
        ``deleted`` true for one that ceased to exist. A tick that fires nothing changes no row,
        so the end-of-batch tick over a large shard does not rewrite every group's row."""
        rows: list[Row] = []
        for group_id, existed in self._touched.items():
            slot = self._slot(group_id)
            if slot is not None:
                row = self._entry(slot).row(self._clocks[slot])
                row["deleted"] = False
                rows.append(row)
            elif existed:
                rows.append(_deleted_row(group_id, self._deleted_at_ms[group_id]))
        return rows

    @property
    def group_ids(self) -> list[str]:
        return [self._ids[slot] for slot in self._live_slots()]

    def group(self, group_id: str) -> Group | None:
        slot = self._slot(group_id)
        return None if slot is None else self._entry(slot).group

    def next_deadline_ms(self) -> int | None:
        return min([d for d in self._deadlines if d is not None], default=None)

    def _live_slots(self) -> range | list[int]:
        if not self._dead:
            return range(len(self._ids))
        return [slot for slot in range(len(self._ids)) if slot not in self._dead]

    def _slots(self) -> dict[str, int]:
        index = self._index
        if index is None:
            index = self._index = dict(zip(self._ids, range(len(self._ids)), strict=True))
            for slot in self._dead:
                del index[self._ids[slot]]
        return index

    def _slot(self, group_id: str) -> int | None:
        return self._slots().get(group_id)

    def _entry(self, slot: int) -> _Loaded:
        loaded = self._loaded.get(slot)
        if loaded is None:  # a group of the decoded state (every other one is loaded)
            start, end = self._starts[slot], self._starts[slot + 1]
            loaded = self._loaded[slot] = _load(self._blob[start:end], (start, end))
        return loaded

    # --- events --------------------------------------------------------------------------------

    def feed(self, event: TimedEvent) -> Rows:
        """Handle one wire event; returns its decisions and group_events rows, in order."""
        rows: Rows = {DECISIONS: [], GROUP_EVENTS: []}
        self.feed_into(event, rows)
        return rows

    def feed_into(self, event: TimedEvent, rows: Rows) -> None:
        """``feed``, appending the rows to ``rows`` (a decisions and a group_events list)."""
        parsed = parse_event(event)
        if isinstance(parsed, InvalidEvent):
            self._answer_invalid(parsed, event.time_ms, rows)
            return
        time_ms = parsed.header.event_time_ms if event.time_ms is None else event.time_ms
        self._see(time_ms)
        group_id = parsed.header.group_id
        if isinstance(parsed, Tick):
            if group_id is None:
                self._advance_all(time_ms, rows)
            else:
                slot = self._slot(group_id)
                if slot is not None:
                    self._advance(slot, time_ms, rows)
            return
        assert group_id is not None  # the wire parser requires it for every request
        self._request(group_id, parsed, time_ms, rows)

    def tick(self, now_ms: int) -> Rows:
        """Advance every group to ``now_ms`` (the engine's tick), firing due timers."""
        rows: Rows = {DECISIONS: [], GROUP_EVENTS: []}
        self.tick_into(now_ms, rows)
        return rows

    def tick_into(self, now_ms: int, rows: Rows) -> None:
        self._see(now_ms)
        self._advance_all(now_ms, rows)

    def _see(self, time_ms: int) -> None:
        self.clock_ms = time_ms if self.clock_ms is None else max(self.clock_ms, time_ms)

    def _answer_invalid(self, invalid: InvalidEvent, time_ms: int | None, rows: Rows) -> None:
        slot = None if invalid.group_id is None else self._slot(invalid.group_id)
        if time_ms is None:
            time_ms = invalid.event_time_ms
        candidates = (time_ms, None if slot is None else self._clocks[slot])
        known = [t for t in candidates if t is not None and t >= 0]
        if known:
            decided_at_ms = max(known)
            self._see(decided_at_ms)
        else:  # no time of its own: the latest clock among the shard's groups, which the
            # state keeps (the shard's own clock is lost when its last group goes)
            clocks = self._clocks
            decided_at_ms = max((clocks[slot] for slot in self._live_slots()), default=0)
        rows[DECISIONS].append(invalid.decision(decided_at_ms).to_row())

    def _advance_all(self, time_ms: int, rows: Rows) -> None:
        """``_advance`` for every group, in group id order. Only a group with a timer due by
        its new clock has anything to do beyond its clock (a failover gap needs an overdue
        timer too): those go through ``_advance``; every other group's clock moves in one
        pass, and it counts as visited, as ``_advance`` would count it."""
        clocks, ids = self._clocks, self._ids
        gap = self.failover_gap_ms
        if gap is not None and gap < 0:  # a negative gap: any timer may count as overdue
            due = [slot for slot in self._live_slots()]
        else:
            due = [
                slot
                for slot, deadline in enumerate(self._deadlines)
                if deadline is not None and (deadline <= time_ms or deadline <= clocks[slot])
            ]
        self._clocks = [c if c >= time_ms else time_ms for c in clocks]
        visited = self._visited
        fresh = [ids[slot] for slot in due if ids[slot] not in visited]
        visited.update(ids)  # the dead slots' ids were visited when their group ceased
        visited.difference_update(fresh)
        for slot in sorted(due, key=ids.__getitem__):
            self._advance(slot, time_ms, rows)

    def _advance(self, slot: int, time_ms: int, rows: Rows) -> bool:
        """Move a group's clock to ``time_ms`` (never back), resetting sessions after a
        failover gap and firing due timers. Returns whether the group (still) exists."""
        group_id = self._ids[slot]
        clock_ms = self._clocks[slot]
        now_ms = clock_ms if clock_ms >= time_ms else time_ms
        first_touch = group_id not in self._visited
        self._visited.add(group_id)
        due = self._deadlines[slot]
        if first_touch and self._overdue(due, now_ms):
            step = machine.reset_sessions(self._entry(slot).group, now_ms, self.config)
            if not self._apply(slot, step, rows):
                return False
            due = self._deadlines[slot]
        self._clocks[slot] = now_ms
        if due is not None and due <= now_ms:
            step = machine.fire_due(self._entry(slot).group, now_ms, self.config)
            return self._apply(slot, step, rows)
        return True

    def _overdue(self, due: int | None, now_ms: int) -> bool:
        """The group's earliest timer should have fired more than the gap ago, or at all while
        the shard is loaded by a new epoch: the engine was stopped (or far behind), not the group
        idle, since a running engine calls a key by its deadline. An idle group's clock may lag
        by hours without its sessions being reset."""
        if due is None:
            return False
        if self._loading and due <= now_ms:
            return True
        gap = self.failover_gap_ms
        return gap is not None and now_ms - due > gap

    def _request(self, group_id: str, request: Request, time_ms: int, rows: Rows) -> None:
        slot = self._slot(group_id)
        if slot is not None and not self._advance(slot, time_ms, rows):
            slot = None
        event_digest = digest(request.header.event_id)
        if slot is None:
            step = machine.handle(None, request, time_ms, self.config)
            self._touched.setdefault(group_id, False)
            if step.group is None:  # answered without a group coming to exist
                _emit(step, rows)
                return
            slot = self._create(group_id, time_ms, step.group)
            loaded = self._loaded[slot]
        else:
            loaded = self._entry(slot)
            if seen(loaded.window, event_digest):
                rows[GROUP_EVENTS].append(_duplicate(request, self._clocks[slot]))
                return
            self._touched.setdefault(group_id, False)
            if isinstance(request, Heartbeat) and group_id:  # machine.handle's condition
                answered = loaded.fast_heartbeat(request, self._clocks[slot])
                if answered is not None:
                    decision, self._deadlines[slot] = answered
                    loaded.remember(event_digest)
                    rows[DECISIONS].append(decision.to_row())
                    return
            step = machine.handle(loaded.group, request, self._clocks[slot], self.config)
        loaded.remember(event_digest)
        self._apply(slot, step, rows)

    def _create(self, group_id: str, now_ms: int, group: Group) -> int:
        slot = len(self._ids)
        self._slots()[group_id] = slot
        self._ids.append(group_id)
        self._clocks.append(now_ms)
        self._deadlines.append(None)
        self._sizes.append(0)  # until encoded
        self._loaded[slot] = _Loaded(b"", group)
        return slot

    def _apply(self, slot: int, step: machine.Step, rows: Rows) -> bool:
        """Emit the step's rows and keep its group; False when the group ceased."""
        _emit(step, rows)
        group_id = self._ids[slot]
        self._touched[group_id] = True
        group = step.group
        if group is None:
            self._deleted_at_ms[group_id] = self._clocks[slot]
            del self._slots()[group_id]
            self._dead.add(slot)
            self._deadlines[slot] = None
            gone = self._loaded.pop(slot)
            if gone.span is not None:
                self._dropped.append(gone.span)
            return False
        loaded = self._entry(slot)
        if loaded.group is not group:
            loaded.group = group
            loaded.changed = True
        self._deadlines[slot] = step.next_deadline_ms
        return True

    # --- the envelope --------------------------------------------------------------------------

    def encode(self) -> bytes | None:
        """The shard's state bytes; None when no group is left (the key can be forgotten).

        The bodies of the groups no batch changed are copied from the decoded state in runs,
        with the changed ones put in their place, the dropped ones left out, and the new ones
        after them (slots past the decoded ones, in slot order)."""
        live = self._live_slots()
        if not live:
            return None
        sizes = list(self._sizes)
        cuts: list[tuple[int, int, bytes]] = [(start, end, b"") for start, end in self._dropped]
        tail: list[tuple[int, bytes]] = []
        for slot, loaded in self._loaded.items():
            if loaded.span is None:
                body = loaded.body()
                tail.append((slot, body))
            elif loaded.changed:
                body = loaded.body()
                cuts.append((*loaded.span, body))
            else:
                continue
            sizes[slot] = len(body)
        blob = memoryview(self._blob)
        pieces: list[bytes | memoryview] = []
        at = 0
        for start, end, body in sorted(cuts):
            pieces += (blob[at:start], body)
            at = end
        pieces.append(blob[at:])
        pieces += [body for _, body in sorted(tail)]
        ids, clocks, deadlines = self._ids, self._clocks, self._deadlines
        if self._dead:
            ids = [ids[slot] for slot in live]
            clocks = [clocks[slot] for slot in live]
            deadlines = [deadlines[slot] for slot in live]
            sizes = [sizes[slot] for slot in live]
        fields: tuple[Any, ...] = (self.clock_ms, ids, clocks, deadlines, sizes)
        version = STATE_VERSION
        if self.epoch is not None:
            fields, version = (*fields, self.epoch), EPOCH_STATE_VERSION
        record = marshal.dumps(fields, _MARSHAL_VERSION)
        return b"".join((_HEADER.pack(version, len(record)), record, *pieces))

    @classmethod
    def decode(
        cls,
        data: bytes | None,
        config: CoordinatorConfig,
        *,
        failover_gap_ms: int | None = None,
        coordinator_epoch: int | None = None,
    ) -> CoordinatorShard:
        """A shard from its state bytes (None: an empty shard). Raises ValueError if corrupt.
        With an epoch, a state written under an earlier one (or under none) is being loaded;
        the shard keeps the later of the two."""
        shard = cls(config, failover_gap_ms=failover_gap_ms, coordinator_epoch=coordinator_epoch)
        if data is None:
            return shard
        version = data[0] if data else None
        stored_epoch = None
        if version in (STATE_VERSION, EPOCH_STATE_VERSION):
            stored_epoch = shard._read(data, with_epoch=version == EPOCH_STATE_VERSION)
        elif version == 1:
            shard._read_v1(data)
        else:
            found = "nothing" if version is None else version
            raise ValueError(
                f"coordinator state: unsupported version {found} (this build reads 1 to 3)"
            )
        if coordinator_epoch is None:
            shard.epoch = stored_epoch  # kept as it was
        elif stored_epoch is None or stored_epoch < coordinator_epoch:
            shard._loading = True
        else:  # a call whose tick is before the latest epoch the shard has seen
            shard.epoch = stored_epoch
        return shard

    def _read(self, data: bytes, *, with_epoch: bool) -> int | None:
        """Versions 2 and 3: the header, the marshal record, then the bodies, one after
        another. Returns the epoch of a version 3 record."""
        start = _HEADER.size
        size = _HEADER.unpack_from(data, 0)[1] if len(data) >= start else -1
        if size < 0 or len(data) < start + size:
            raise ValueError("coordinator state: truncated")
        epoch: int | None = None
        try:
            record = marshal.loads(data[start : start + size])
            if with_epoch:
                *record, epoch = record
            clock_ms, ids, clocks, deadlines, sizes = record
            count = len(ids)
            shaped = (
                type(ids) is type(clocks) is type(deadlines) is type(sizes) is list
                and len(clocks) == len(deadlines) == len(sizes) == count
                and set(map(type, sizes)) <= {int}
                and min(sizes, default=0) >= 0
                and (clock_ms is None or type(clock_ms) is int)
                and (not with_epoch or type(epoch) is int)
            )
        except (EOFError, ValueError, TypeError):
            shaped = False
        if not shaped:
            raise ValueError(f"coordinator state: malformed version {data[0]} record")
        bodies = start + size
        end = bodies + sum(sizes)
        if len(data) < end:
            raise ValueError("coordinator state: truncated")
        if len(data) > end:
            raise ValueError("coordinator state: trailing bytes after the last group")
        self._set(clock_ms, ids, clocks, deadlines, sizes, data[bodies:])
        return epoch

    def _set(
        self,
        clock_ms: int | None,
        ids: list[str],
        clocks: list[int],
        deadlines: list[int | None],
        sizes: list[int],
        blob: bytes,
    ) -> None:
        self.clock_ms = clock_ms
        self._ids, self._clocks, self._deadlines, self._sizes = ids, clocks, deadlines, sizes
        self._starts = list(accumulate(sizes, initial=0))
        self._blob = blob

    def _read_v1(self, data: bytes) -> None:
        """The version 1 layout: a struct header per group."""
        ids: list[str] = []
        clocks: list[int] = []
        deadlines: list[int | None] = []
        bodies: list[bytes] = []
        try:
            _, clock, count = _V1_SHARD_HEADER.unpack_from(data, 0)
            offset = _V1_SHARD_HEADER.size
            for _ in range(count):
                name_size, clock_ms, deadline, body_size = _V1_GROUP_HEADER.unpack_from(
                    data, offset
                )
                offset += _V1_GROUP_HEADER.size
                ids.append(data[offset : offset + name_size].decode("utf-8"))
                offset += name_size
                body = data[offset : offset + body_size]
                offset += body_size
                if len(body) != body_size:
                    raise struct.error("short body")
                clocks.append(clock_ms)
                deadlines.append(None if deadline == _NONE else deadline)
                bodies.append(body)
        except struct.error:
            raise ValueError("coordinator state: truncated") from None
        if offset != len(data):
            raise ValueError("coordinator state: trailing bytes after the last group")
        clock_ms = None if clock == _NONE else clock
        self._set(clock_ms, ids, clocks, deadlines, [len(b) for b in bodies], b"".join(bodies))


class CoordinatorRunner:
    """core.runtime.Runner for the coordinator: decode, feed the batch, tick, encode."""

    def __init__(
        self,
        config: CoordinatorConfig,
        *,
        failover_gap_ms: int | None = None,
        run_starts: Sequence[int] = (),
    ) -> None:
        self.config = config
        self.failover_gap_ms = failover_gap_ms
        self.run_starts = tuple(run_starts)  # in increasing order

    def run(
        self, state: bytes | None, events: Sequence[TimedEvent], tick_ms: int | None
    ) -> RunResult:
        shard = CoordinatorShard.decode(
            state,
            self.config,
            failover_gap_ms=self.failover_gap_ms,
            coordinator_epoch=epoch_at(self.run_starts, tick_ms),
        )
        outputs: Rows = {DECISIONS: [], GROUP_EVENTS: []}
        for event in events:
            shard.feed_into(event, outputs)
        if tick_ms is not None:
            shard.tick_into(tick_ms, outputs)
        outputs[GROUPS] = shard.group_rows()
        return RunResult(shard.encode(), outputs, shard.next_deadline_ms())


def epoch_at(run_starts: Sequence[int], tick_ms: int | None) -> int | None:
    """The latest run start at or before ``tick_ms`` (``run_starts`` in increasing order);
    None without a tick or before the first start."""
    if tick_ms is None:
        return None
    at = bisect_right(run_starts, tick_ms)
    return run_starts[at - 1] if at else None


def _emit(step: machine.Step, rows: Rows) -> None:
    if step.decisions:
        rows[DECISIONS] += [decision.to_row() for decision in step.decisions]
    if step.events:
        rows[GROUP_EVENTS] += [event.to_row() for event in step.events]


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
