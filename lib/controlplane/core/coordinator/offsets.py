"""OffsetCommit validation and storage, OffsetFetch, and retention
(docs/reference/group-coordinator.md §8).

Retention (this project's reading of Kafka's OffsetConfig and KIP-211): an Empty group's
offsets, and the group with them, expire ``offsets.retention.minutes`` after the later of the
moment the group became Empty and its last commit. A group that is not Empty keeps them.
"""

from __future__ import annotations

from controlplane.core.coordinator import answers, static
from controlplane.core.coordinator.draft import Draft
from controlplane.core.coordinator.membership import validate_member
from controlplane.core.coordinator.records import EventKind, OffsetResult
from controlplane.core.coordinator.requests import OffsetCommit, OffsetFetch, RequestType
from controlplane.core.coordinator.state import GroupPhase, StoredOffset
from controlplane.core.errors import Errors

NEWEST_COMMIT_VERSION = 9


def missing_group_commit_error(request: OffsetCommit) -> Errors | None:
    """§8.1: a missing group takes a commit with generation < 0 (the group is created)."""
    if request.generation_id < 0:
        return None
    version = request.header.request_version
    if version is not None and version < NEWEST_COMMIT_VERSION:
        return Errors.ILLEGAL_GENERATION
    return Errors.GROUP_ID_NOT_FOUND


def commit_error(d: Draft, request: OffsetCommit) -> Errors | None:
    header = request.header
    if d.phase is GroupPhase.DEAD:
        return Errors.COORDINATOR_NOT_AVAILABLE
    if request.generation_id < 0 and d.phase is GroupPhase.EMPTY:
        return None  # a "simple" (manual) commit: no member validation
    if request.generation_id >= 0 or header.member_id or header.group_instance_id is not None:
        error = validate_member(d, header.member_id, header.group_instance_id)
        if error is not None:
            return error
        if request.generation_id != d.generation_id:
            return Errors.ILLEGAL_GENERATION
    else:
        return Errors.UNKNOWN_MEMBER_ID
    if d.phase is GroupPhase.COMPLETING_REBALANCE:
        return Errors.REBALANCE_IN_PROGRESS
    return None


def handle_commit(d: Draft, request: OffsetCommit, error: Errors | None) -> None:
    """Store the offsets unless ``error``; answer one result per partition."""
    if error is None:
        error = commit_error(d, request)
    if error is None:
        _store(d, request)
    results = tuple(
        OffsetResult(o.topic, o.partition, o.offset, o.metadata, (error or Errors.NONE).code)
        for o in request.offsets
    )
    top = error or Errors.NONE
    d.answer(answers.simple(d, request.header, RequestType.OFFSET_COMMIT, top, offsets=results))


def _store(d: Draft, request: OffsetCommit) -> None:
    for entry in request.offsets:
        key = (entry.topic, entry.partition)
        d.offsets[key] = StoredOffset(
            entry.topic, entry.partition, entry.offset, entry.metadata, d.now_ms
        )
    d.last_commit_ms = d.now_ms
    member = d.member(request.header.member_id)
    if member is not None and d.phase in (GroupPhase.STABLE, GroupPhase.PREPARING_REBALANCE):
        d.reset_session(static.mark_returned(d, member))  # a commit keeps the session alive
    if d.phase is GroupPhase.EMPTY:
        d.schedule_retention()


def handle_fetch(d: Draft, request: OffsetFetch) -> None:
    """Committed offsets, or -1 for a requested partition with none; all when topics is null."""
    error = Errors.COORDINATOR_NOT_AVAILABLE if d.phase is GroupPhase.DEAD else Errors.NONE
    results: tuple[OffsetResult, ...] = ()
    if error is Errors.NONE:
        results = fetch_results(d.offsets, request)
    d.answer(answers.simple(d, request.header, RequestType.OFFSET_FETCH, error, offsets=results))


def fetch_results(
    stored: dict[tuple[str, int], StoredOffset], request: OffsetFetch
) -> tuple[OffsetResult, ...]:
    if request.topics is None:
        return tuple(
            OffsetResult(o.topic, o.partition, o.offset, o.metadata, 0)
            for _, o in sorted(stored.items())
        )
    results: list[OffsetResult] = []
    for topic in request.topics:
        for partition in topic.partitions:
            found = stored.get((topic.topic, partition))
            if found is None:
                results.append(OffsetResult(topic.topic, partition, -1, "", 0))
            else:
                results.append(
                    OffsetResult(topic.topic, partition, found.offset, found.metadata, 0)
                )
    return tuple(results)


def on_retention(d: Draft) -> None:
    """The retention timer: an Empty group's offsets expire and the group is deleted."""
    if d.phase is not GroupPhase.EMPTY:
        return
    if d.offsets:
        d.emit(EventKind.OFFSETS_EXPIRED, reason="retention", generation_id=d.generation_id)
        d.offsets.clear()
    d.emit(EventKind.GROUP_DELETED, reason="retention", generation_id=d.generation_id)
    d.deleted = True
