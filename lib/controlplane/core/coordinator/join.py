"""JoinGroup (docs/reference/group-coordinator.md §3): validation order, new, pending and known
members."""

from __future__ import annotations

from controlplane.core.config import CoordinatorConfig
from controlplane.core.coordinator import answers, static
from controlplane.core.coordinator.draft import Draft
from controlplane.core.coordinator.ids import new_member_id
from controlplane.core.coordinator.membership import (
    join_version,
    new_member,
    update_member,
    validate_member,
)
from controlplane.core.coordinator.protocol import matches, supports_protocols
from controlplane.core.coordinator.rebalance import (
    leader_member_list,
    maybe_complete_join_phase,
    maybe_prepare_rebalance_or_complete_join,
    prepare_rebalance,
)
from controlplane.core.coordinator.replace import replace_static_member
from controlplane.core.coordinator.requests import JoinGroup
from controlplane.core.coordinator.state import (
    GroupPhase,
    ParkedRequest,
    TimerKind,
)
from controlplane.core.errors import Errors


def coordinator_check(request: JoinGroup, config: CoordinatorConfig) -> Errors | None:
    """§3.2 steps 1-2, before any group is looked up or created."""
    if not request.header.group_id:
        return Errors.INVALID_GROUP_ID
    session_ms = request.session_timeout_ms
    if not (
        config.group_min_session_timeout_ms <= session_ms <= config.group_max_session_timeout_ms
    ):
        return Errors.INVALID_SESSION_TIMEOUT
    return None


def handle_join(d: Draft, request: JoinGroup) -> None:
    """§3.2 steps 4-5 on an existing (possibly just created) group."""
    header = request.header
    if not _accept_joining_member(d, header.member_id):
        _refuse_max_size(d, request)
    elif header.member_id == "":
        _join_new_member(d, request)
    else:
        _join_existing_member(d, request)


def _accept_joining_member(d: Draft, member_id: str) -> bool:
    """KIP-389 acceptJoiningMember (GMM:5059)."""
    limit = d.config.group_max_size
    member = d.member(member_id)
    if d.phase is GroupPhase.PREPARING_REBALANCE:
        awaiting = member is not None and member.awaiting_join is not None
        # The awaiting count is at most the member count: count only when that is not enough.
        return awaiting or len(d.members) < limit or d.awaiting_join_count() < limit
    if d.phase in (GroupPhase.COMPLETING_REBALANCE, GroupPhase.STABLE):
        return member is not None or len(d.members) < limit
    return True


def _refuse_max_size(d: Draft, request: JoinGroup) -> None:
    member_id = request.header.member_id
    if member_id in d.pending_join:
        del d.pending_join[member_id]
    elif member_id in d.members:
        # Kafka kicks the member out and leaves its heartbeat timer to find nothing.
        d.remove_member(member_id, "group_max_size", cancel_timer=False)
    d.answer(
        answers.join_error(d, answers.parked(request.header), "", Errors.GROUP_MAX_SIZE_REACHED)
    )


def _supports(d: Draft, request: JoinGroup) -> bool:
    return supports_protocols(
        d.phase, d.protocol_type, d.members.values(), request.protocol_type, request.protocols
    )


def _join_new_member(d: Draft, request: JoinGroup) -> None:
    """§3.3 (GMM:4140)."""
    header = request.header
    parked = answers.parked(header)
    if d.phase is GroupPhase.DEAD:
        d.answer(answers.join_error(d, parked, "", Errors.COORDINATOR_NOT_AVAILABLE))
        return
    if not _supports(d, request):
        d.answer(answers.join_error(d, parked, "", Errors.INCONSISTENT_GROUP_PROTOCOL))
        return
    instance_id = header.group_instance_id
    member_id = new_member_id(d.group_id, header.event_id, instance_id, request.client_id)
    if member_id in d.members or member_id in d.pending_join or member_id in d.expansion_queue:
        message = "event_id: reused; the member id it derives belongs to another member"
        d.answer(answers.join_error(d, parked, "", Errors.INVALID_REQUEST, message))
        return
    if instance_id is not None:
        old_member_id = d.static_member_id(instance_id)
        if old_member_id is not None:
            replace_static_member(d, request, old_member_id, member_id)
        elif static.defers_new_static_member(d):
            static.park_for_expansion(d, new_member(d, request, member_id))
        else:
            add_member_then_rebalance_or_complete_join(d, request, member_id)
    elif join_version(request) >= 4:
        d.pending_join[member_id] = None
        d.schedule(TimerKind.HEARTBEAT, member_id, request.session_timeout_ms)
        d.answer(answers.join_error(d, parked, member_id, Errors.MEMBER_ID_REQUIRED))
    else:
        add_member_then_rebalance_or_complete_join(d, request, member_id)


def add_member_then_rebalance_or_complete_join(
    d: Draft, request: JoinGroup, member_id: str
) -> None:
    """§3.5 (GMM:4717)."""
    if d.phase is GroupPhase.PREPARING_REBALANCE and d.previous_phase is GroupPhase.EMPTY:
        d.new_member_added = True
    d.add_member(new_member(d, request, member_id))
    d.schedule(TimerKind.HEARTBEAT, member_id, d.config.group_new_member_join_timeout_ms)
    maybe_prepare_rebalance_or_complete_join(d, "new_member_joined")


def _join_existing_member(d: Draft, request: JoinGroup) -> None:
    """§3.4 (GMM:4294)."""
    header = request.header
    parked = answers.parked(header)
    member_id = header.member_id
    if d.phase is GroupPhase.DEAD:
        d.answer(answers.join_error(d, parked, member_id, Errors.COORDINATOR_NOT_AVAILABLE))
    elif not _supports(d, request):
        d.answer(answers.join_error(d, parked, member_id, Errors.INCONSISTENT_GROUP_PROTOCOL))
    elif member_id in d.pending_join:
        if header.group_instance_id is not None:
            message = "group_instance_id: a pending (MEMBER_ID_REQUIRED) member id is dynamic"
            d.answer(answers.join_error(d, parked, member_id, Errors.INVALID_REQUEST, message))
        else:
            add_member_then_rebalance_or_complete_join(d, request, member_id)
    else:
        error = validate_member(d, member_id, header.group_instance_id)
        if error is not None:
            d.answer(answers.join_error(d, parked, member_id, error))
        else:
            _rejoin_known_member(d, request, parked)


def _rejoin_known_member(d: Draft, request: JoinGroup, parked: ParkedRequest) -> None:
    member = static.mark_returned(d, d.members[request.header.member_id])
    if d.phase is GroupPhase.PREPARING_REBALANCE:
        update_member(d, member, request, parked)
        maybe_complete_join_phase(d)
        return
    same = matches(member, request.protocols)
    is_leader = member.member_id == d.leader_id
    if d.phase is GroupPhase.COMPLETING_REBALANCE and same:
        listing = leader_member_list(d) if is_leader else ()
        d.answer(answers.join_ok(d, parked, member.member_id, listing))
    elif d.phase is GroupPhase.COMPLETING_REBALANCE:
        update_member(d, member, request, parked)
        prepare_rebalance(d, "protocol_changed")
    elif d.phase is GroupPhase.STABLE and (is_leader or not same):
        update_member(d, member, request, parked)
        prepare_rebalance(d, "leader_rejoined" if is_leader else "protocol_changed")
    elif d.phase is GroupPhase.STABLE:
        d.answer(answers.join_ok(d, parked, member.member_id))
    else:
        d.answer(answers.join_error(d, parked, member.member_id, Errors.UNKNOWN_MEMBER_ID))
