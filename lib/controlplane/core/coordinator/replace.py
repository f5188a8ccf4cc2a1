"""Static member replacement and fencing (docs/reference/group-coordinator.md §3.6, KIP-345,
GMM:5098).

A join with an unknown member id and a known instance id replaces the old member id: the old
id's parked join or sync is answered FENCED_INSTANCE_ID, the new id inherits the old record
(assignment included), and in Stable no rebalance starts unless the chosen protocol changes.
"""

from __future__ import annotations

import dataclasses

from controlplane.core.coordinator import answers, static
from controlplane.core.coordinator.draft import Draft
from controlplane.core.coordinator.membership import update_member
from controlplane.core.coordinator.protocol import select_protocol
from controlplane.core.coordinator.rebalance import (
    leader_member_list,
    maybe_complete_join_phase,
    maybe_prepare_rebalance_or_complete_join,
    prepare_rebalance,
)
from controlplane.core.coordinator.records import EventKind
from controlplane.core.coordinator.requests import JoinGroup
from controlplane.core.coordinator.state import GroupPhase, Member, TimerKind
from controlplane.core.errors import Errors


def replace_static_member(
    d: Draft, request: JoinGroup, old_member_id: str, new_member_id: str
) -> None:
    current_leader_id = d.leader_id or ""
    parked = answers.parked(request.header)
    old = d.members[old_member_id]
    new = static.mark_returned(d, _swap(d, old, new_member_id))
    d.schedule(TimerKind.HEARTBEAT, new_member_id, old.session_timeout_ms)
    new = update_member(d, new, request, parked)
    if d.phase is GroupPhase.STABLE:
        selected = select_protocol(list(d.members.values()), d.leader_id)
        if selected != d.protocol_name:
            maybe_prepare_rebalance_or_complete_join(d, "static_member_replaced")
            return
        d.update(dataclasses.replace(new, awaiting_join=None))
        version = request.header.request_version
        if version is None or version >= 9:
            is_leader = new_member_id == d.leader_id
            listing = leader_member_list(d) if is_leader else ()
            d.answer(answers.join_ok(d, parked, new_member_id, listing, skip_assignment=is_leader))
        else:
            # v<9: the old leader id, so a rejoining old leader does not think it leads.
            d.answer(answers.join_ok(d, parked, new_member_id, leader_id=current_leader_id))
    elif d.phase is GroupPhase.COMPLETING_REBALANCE:
        prepare_rebalance(d, "static_member_replaced")
    else:
        maybe_complete_join_phase(d)


def _swap(d: Draft, old: Member, new_member_id: str) -> Member:
    """CG:543 replaceStaticMember: the new id takes the old record's place, in order."""
    if old.awaiting_join is not None:
        d.answer(answers.join_error(d, old.awaiting_join, old.member_id, Errors.FENCED_INSTANCE_ID))
    if old.awaiting_sync is not None:
        d.answer(answers.sync_error(d, old.awaiting_sync, old.member_id, Errors.FENCED_INSTANCE_ID))
    new = dataclasses.replace(
        old, member_id=new_member_id, is_new=False, awaiting_join=None, awaiting_sync=None
    )
    d.members = {
        (new_member_id if mid == old.member_id else mid): (new if mid == old.member_id else m)
        for mid, m in d.members.items()
    }
    if old.member_id in d.pending_sync:  # the new id owes the SyncGroup the old one owed
        d.pending_sync = {
            (new_member_id if mid == old.member_id else mid): None for mid in d.pending_sync
        }
    if d.leader_id == old.member_id:
        d.leader_id = new_member_id
    d.emit(
        EventKind.MEMBER_FENCED,
        member_id=old.member_id,
        group_instance_id=old.group_instance_id,
        reason="static_replaced",
    )
    d.emit(
        EventKind.MEMBER_ADDED,
        member_id=new_member_id,
        group_instance_id=old.group_instance_id,
        reason="static_replaced",
    )
    return new
