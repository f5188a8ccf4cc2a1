"""What the heartbeat, join and sync timers do when they fire (docs/reference/group-coordinator.md
§7, §3.7).

Each handler runs with the draft's clock at the timer's own deadline.
"""

from __future__ import annotations

from controlplane.core.coordinator import static
from controlplane.core.coordinator.draft import Draft
from controlplane.core.coordinator.rebalance import complete_join, prepare_rebalance
from controlplane.core.coordinator.records import EventKind
from controlplane.core.coordinator.state import GroupPhase, Timer, TimerKind


def on_heartbeat_expired(d: Draft, member_id: str) -> None:
    """GMM:4583 expireClassicGroupMemberHeartbeat."""
    if d.phase is GroupPhase.DEAD:
        return
    if member_id in d.pending_join:
        del d.pending_join[member_id]
        d.emit(EventKind.MEMBER_REMOVED, member_id=member_id, reason="pending_member_timeout")
        if d.phase is GroupPhase.PREPARING_REBALANCE and d.has_all_members_joined():
            complete_join(d)
        return
    member = d.member(member_id)
    if member is None or member.has_satisfied_heartbeat:
        return  # already gone or replaced; or parked: re-armed by completion or the sync answer
    if static.goes_offline(d, member):
        return
    reason = "new_member_join_timeout" if member.is_new else "session_timeout"
    d.remove_member(member_id, reason)
    if d.phase in (GroupPhase.STABLE, GroupPhase.COMPLETING_REBALANCE):
        prepare_rebalance(d, reason)
    elif d.phase is GroupPhase.PREPARING_REBALANCE and d.has_all_members_joined():
        complete_join(d)  # Java: also during the initial rebalance (§11 D3)


def on_join_timer(d: Draft, timer: Timer) -> None:
    """§7.2 rebalance timeout, or §3.7 the initial delay with its extension."""
    if timer.delay_ms is None or timer.remaining_ms is None:
        complete_join(d)
    elif d.new_member_added and timer.remaining_ms != 0:
        d.new_member_added = False
        delay_ms = min(timer.delay_ms, timer.remaining_ms)
        remaining_ms = max(timer.remaining_ms - timer.delay_ms, 0)
        d.schedule(
            TimerKind.JOIN, "", delay_ms, initial_delay_ms=delay_ms, remaining_ms=remaining_ms
        )
    else:
        complete_join(d)


def on_sync_timer(d: Draft) -> None:
    """§7.3 pending sync (KAFKA-12890): members that never synced are removed."""
    if d.phase not in (GroupPhase.STABLE, GroupPhase.COMPLETING_REBALANCE):
        return
    if not d.pending_sync:
        return
    for member_id in list(d.pending_sync):
        if member_id in d.members:
            d.remove_member(member_id, "pending_sync_timeout")
    d.pending_sync.clear()
    prepare_rebalance(d, "pending_sync_timeout")
