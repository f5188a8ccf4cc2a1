"""A group member's OffsetCommits: the application's ``commit()`` (waits, retries within its
timeout), auto-commit (asynchronous, at most every ``auto.commit.interval.ms``, and once before
a rejoin), and what a commit's answer does to the membership (a rejoin, a reset, fenced)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controlplane.client import protocol as p
from controlplane.client.assignors import TopicPartition
from controlplane.client.membership import (
    CommitFailedError,
    FencedInstanceIdError,
    Membership,
    MemberState,
    RebalanceInProgressError,
)
from controlplane.client.records import Fetcher
from controlplane.client.timeouts import (
    ClientError,
    Deadline,
    PendingCall,
    RetriableError,
    with_retries,
)
from controlplane.client.transport import Stream


class Commits:
    def __init__(self, membership: Membership, fetcher: Fetcher, now_ms: int) -> None:
        self._member = membership
        self._fetcher = fetcher
        self._last_auto_commit_ms = now_ms
        self._auto_commits: list[tuple[p.Generation, PendingCall]] = []  # in flight

    def commit(self, offsets: Mapping[TopicPartition, int] | None, timeout_ms: int | None) -> None:
        """Commit ``offsets`` (default: the positions of the records returned so far)."""
        member = self._member
        config, clock = member.config, member.clock
        deadline = Deadline.start(clock, timeout_ms, config.default_api_timeout_ms)
        generation = member.generation
        if member.state is not MemberState.STABLE or not generation.valid:
            raise RebalanceInProgressError("not a member of a stable generation: poll() first")
        to_commit = dict(self._fetcher.positions() if offsets is None else offsets)
        if not to_commit:
            return

        def attempt(wait_ms: int) -> None:
            body = p.commit_body(config, generation, to_commit)
            answer = member.requester.call(Stream.GROUP, body, wait_ms).result()
            self.check_answer(answer, generation)

        with_retries(
            clock, deadline, config.request_timeout_ms, config.retry_backoff_ms,
            attempt, f"commit of {config.group_id}",
        )  # fmt: skip

    def commit_async(self, *, always: bool = False) -> None:
        """Send a commit of the current positions without waiting (auto-commit). The periodic
        one waits for the previous answer; the one before a rejoin (``always``) does not."""
        self._collect_auto_commits()
        offsets = self._fetcher.positions()
        generation = self._member.generation
        if offsets and generation.valid and (always or not self._auto_commits):
            config = self._member.config
            body = p.commit_body(config, generation, offsets)
            timeout_ms = config.request_timeout_ms
            call = self._member.requester.start(Stream.GROUP, body, timeout_ms)
            self._auto_commits.append((generation, call))
            self._last_auto_commit_ms = self._member.clock.now_ms()

    def _collect_auto_commits(self) -> None:
        pending = []
        for generation, call in self._auto_commits:
            if not call.done:
                pending.append((generation, call))
                continue
            self._member.requester.forget(call)
            try:  # judged against the generation it was sent in: a late answer is no news
                self.check_answer(call.result(), generation)
            except ClientError as error:
                self._member.record("commit_failed", str(error))
        self._auto_commits = pending

    def check_answer(self, answer: Mapping[str, Any], generation: p.Generation) -> None:
        member = self._member
        error = p.error_of(answer)
        action = p.action_for(error)
        if action is p.Action.OK:
            return
        if action is p.Action.RETRY:
            raise RetriableError(error)
        if action is p.Action.REJOIN:
            with member.lock:
                if member.generation == generation:
                    member.rejoin_needed = True
            raise RebalanceInProgressError(f"commit: {error}")
        if action is p.Action.FENCED:
            if member.generation == generation:
                member.set_state(MemberState.FENCED)
            raise FencedInstanceIdError(f"commit: {error}")
        with member.lock:
            if member.generation == generation and action is not p.Action.FATAL:
                # As ConsumerCoordinator: the generation is gone (ILLEGAL_GENERATION keeps the
                # member id, UNKNOWN_MEMBER_ID does not); rejoin. A newer generation is kept.
                member.rejoin_needed = True
                member.reset_for(action)
        raise CommitFailedError(f"commit: {error}")

    def maybe_auto_commit(self) -> None:
        """Asynchronous auto-commit at most every auto.commit.interval.ms (as Kafka's poll)."""
        self._collect_auto_commits()
        member = self._member
        now_ms = member.clock.now_ms()
        due = now_ms - self._last_auto_commit_ms >= member.config.auto_commit_interval_ms
        if member.config.enable_auto_commit and due and member.state is MemberState.STABLE:
            self.commit_async()
