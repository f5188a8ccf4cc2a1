"""Named deadlines (docs/reference/group-coordinator.md §0.2-2/3, docs/reference/events.md §6).

A timer is keyed by (kind, member id); scheduling a key replaces its pending timer. Due timers
fire in (deadline, scheduling sequence) order, each with the clock at its own deadline.

A frozen ``Group`` keeps its timers in that order, so its next timer is the head
(``Group.next_deadline_ms``, ``machine.fire_due``). A step's ``Draft`` keeps them by key, so that
scheduling replaces in place, and ``Draft.freeze`` puts them back in order; while timers fire,
``pop_due`` takes the earliest due one from the draft's keys (firing one may schedule another).
Keeping the group's timers sorted costs a sort at freeze and an insertion on the heartbeat fast
path (``Group.rescheduled``), and saves a scan per step: the two cost the same on a 10-member
group (~1.4 µs a step either way), and the heartbeat, the commonest request, is cheaper sorted.
"""

from __future__ import annotations

from controlplane.core.coordinator import expiry, offsets, static
from controlplane.core.coordinator.draft import Draft
from controlplane.core.coordinator.state import Timer, TimerKind


def pop_due(d: Draft, now_ms: int) -> Timer | None:
    """Remove and return the first timer due at ``now_ms``, or None."""
    due = [t for t in d.timers.values() if t.deadline_ms <= now_ms]
    if not due:
        return None
    timer = min(due, key=lambda t: (t.deadline_ms, t.seq))
    del d.timers[(timer.kind, timer.member_id)]
    return timer


def fire(d: Draft, timer: Timer) -> None:
    d.now_ms = timer.deadline_ms
    d.event_id = None
    if timer.kind is TimerKind.HEARTBEAT:
        expiry.on_heartbeat_expired(d, timer.member_id)
    elif timer.kind is TimerKind.JOIN:
        expiry.on_join_timer(d, timer)
    elif timer.kind is TimerKind.SYNC:
        expiry.on_sync_timer(d)
    elif timer.kind is TimerKind.RETENTION:
        offsets.on_retention(d)
    elif timer.kind is TimerKind.REGISTRATION:
        static.on_registration_timeout(d)
    else:
        static.on_expansion_timeout(d)
