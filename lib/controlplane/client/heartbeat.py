"""A group member's heartbeat thread (KIP-62, Kafka's AbstractCoordinator.HeartbeatThread) and
the poll timer it checks (``max.poll.interval.ms``).

The thread never blocks on an answer: a heartbeat goes out every ``heartbeat.interval.ms``
after the previous send, one awaited at a time (an unanswered one is given up when the next is
due), and the answer of any heartbeat that comes within ``request.timeout.ms`` of its send is
handled, if it is about the member's current generation. When ``poll()`` is not called within
``max.poll.interval.ms`` the thread stops heartbeating and, for a dynamic member only, sends
LeaveGroup (not waiting for the answer); the next ``poll()`` rejoins.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from controlplane.client import protocol as p
from controlplane.client.membership import Membership, MemberState, log
from controlplane.client.timeouts import ClientError, Deadline, PendingCall
from controlplane.client.transport import Stream


class HeartbeatThread:
    def __init__(self, membership: Membership, now_ms: int) -> None:
        self._member = membership
        self._last_poll_ms = now_ms
        self._polling = False  # the application thread is inside poll()
        self._last_heartbeat_ms = now_ms  # when the last heartbeat was sent
        # heartbeats whose answers are still heard (request.timeout.ms), oldest first
        self._heartbeats: list[tuple[p.Generation, PendingCall]] = []
        self._leaves: list[tuple[str, PendingCall]] = []  # poll-timeout LeaveGroups in flight
        self._thread: threading.Thread | None = None

    # --- called by the application thread ----------------------------------------------------

    def poll_started(self, start_ms: int) -> None:
        with self._member.lock:
            self._polling = True  # inside poll() the application is polling: no poll timeout
            self._last_poll_ms = start_ms

    def poll_ended(self) -> None:
        with self._member.lock:
            self._polling = False  # max.poll.interval.ms counts from here to the next poll
            self._last_poll_ms = self._member.clock.now_ms()

    def restart_interval(self, now_ms: int) -> None:
        """Under the lock, on joining a generation: the next heartbeat is an interval away."""
        self._last_heartbeat_ms = now_ms

    def ensure_started(self) -> None:
        if self._thread is None:
            config = self._member.config
            name = f"heartbeat-{config.group_id}-{config.client_id}"
            self._thread = self._member.clock.spawn(self._loop, name)

    def join(self, deadline: Deadline) -> None:
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            clock = self._member.clock
            clock.join(thread, deadline.remaining_ms(clock.now_ms()))

    # --- the thread ----------------------------------------------------------------------------

    def _loop(self) -> None:
        """AbstractCoordinator.HeartbeatThread: the thread never blocks on an answer. Each pass
        takes in the answers that came (of any heartbeat still heard), checks the poll timeout,
        sends a heartbeat when one is due, then sleeps until the next heartbeat, the poll
        deadline, an answer or a state change, whichever comes first."""
        member = self._member
        interval_ms = member.config.heartbeat_interval_ms
        while not member.closed_or_fenced():
            seen = member.version
            now_ms = member.clock.now_ms()
            self._take_answers(now_ms)
            if not self._enabled():
                self._sleep_until(seen, now_ms + interval_ms)
                continue
            with member.lock:
                polling, last_poll_ms = self._polling, self._last_poll_ms
            poll_start_ms = now_ms if polling else last_poll_ms  # inside poll(): no timeout
            poll_deadline_ms = poll_start_ms + member.config.max_poll_interval_ms
            if now_ms >= poll_deadline_ms:
                self._on_poll_timeout()
                continue
            due_ms = self._last_heartbeat_ms + interval_ms  # whatever became of the last one
            if now_ms >= due_ms:
                self._send(now_ms)
                continue
            self._sleep_until(seen, min(due_ms, poll_deadline_ms))

    def _enabled(self) -> bool:
        """Heartbeat while Stable in a valid generation, also once a rejoin is needed and until
        poll() starts it (AbstractCoordinator: the session must outlive the application's
        processing during a rebalance; the coordinator resets it on REBALANCE_IN_PROGRESS)."""
        return self._member.state is MemberState.STABLE and self._member.generation.valid

    def _send(self, now_ms: int) -> None:
        """Send the heartbeat due ``heartbeat.interval.ms`` after the previous one was sent,
        whatever became of that one: one heartbeat is awaited at a time, and an unanswered one
        is given up when the next is due. Its answer is still heard until
        ``request.timeout.ms`` after its send (then the reaper times the call out), and handled
        when it comes, as Kafka's HeartbeatThread handles every answer within the request
        timeout (see ``_on_answer``)."""
        member = self._member
        if self._heartbeats and not self._heartbeats[-1][1].done:
            log.debug("%s: heartbeat unanswered after an interval", member.config.client_id)
        generation = member.generation
        self._last_heartbeat_ms = now_ms
        body = p.heartbeat_body(member.config, generation)
        call = member.requester.start(Stream.GROUP, body, member.config.request_timeout_ms)
        self._heartbeats.append((generation, call))

    def _take_answers(self, now_ms: int) -> None:
        """Reap what expired, then handle the outcomes of the heartbeats (oldest first) and of
        the poll-timeout leaves."""
        member = self._member
        member.requester.calls.reap(now_ms)
        heard = []
        for generation, call in self._heartbeats:
            if not call.done:
                heard.append((generation, call))
                continue
            member.requester.forget(call)
            try:
                answer = call.result()
            except ClientError as error:  # no answer within request.timeout.ms, or closed
                log.debug("%s: heartbeat unanswered: %s", member.config.client_id, error)
            else:
                self._on_answer(answer, generation)
        self._heartbeats = heard
        pending = []
        for reason, call in self._leaves:
            if call.done:
                member.record_leave(reason, call)
            else:
                pending.append((reason, call))
        self._leaves = pending

    def _on_answer(self, answer: Mapping[str, Any], generation: p.Generation) -> None:
        """Handle a heartbeat's answer, timely or late, idempotently. NONE (and a retriable
        error) changes nothing: the next heartbeat is due an interval after the last send
        whatever the answers say. An error that demands an action (REBALANCE_IN_PROGRESS: rejoin;
        ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID: reset and rejoin; FENCED_INSTANCE_ID: fenced)
        applies only while the member is still in the generation, with the member id, that the
        heartbeat was sent with (Kafka's ``generationUnchanged``): an answer about a generation
        the member has left, or rejoined since, is no news."""
        member = self._member
        error = p.error_of(answer)
        action = p.action_for(error)
        if action is p.Action.OK or action is p.Action.RETRY:
            return
        with member.lock:
            if member.generation != generation:
                return
            already_known = member.rejoin_needed and action is p.Action.REJOIN
            member.rejoin_needed = True
            member.reset_for(action)
        if already_known:
            return  # heartbeating on through the rebalance until poll() rejoins
        member.record("heartbeat_error", error)
        if action is p.Action.FENCED:
            member.set_state(MemberState.FENCED)
        else:
            member.bump()

    def _sleep_until(self, seen: int, until_ms: int) -> None:
        """Wait until ``until_ms``, a state change, or the end of a call the thread waits for."""
        member = self._member
        calls = [call for _, call in (*self._leaves, *self._heartbeats)]
        until_ms = min([until_ms, *(call.deadline_ms for call in calls)])
        member.clock.wait_for(
            lambda: (
                member.version != seen
                or member.closed_or_fenced()
                or any(call.done for call in calls)
            ),
            until_ms - member.clock.now_ms(),
        )

    def _on_poll_timeout(self) -> None:
        member = self._member
        config = member.config
        now_ms = member.clock.now_ms()
        with member.lock:  # checked again with poll()'s entry excluded
            waited_ms = now_ms - self._last_poll_ms
            if self._polling or waited_ms < config.max_poll_interval_ms:
                return
            if member.state is not MemberState.STABLE:
                return
            member_id = member.member_id
            member.rejoin_needed = True
            member.generation = p.NO_GENERATION
            member.member_id = ""
            member.state = MemberState.UNJOINED
        member.bump()
        member.record("poll_timeout", f"{waited_ms} ms since the last poll")
        log.warning("%s: consumer poll timeout has expired", config.client_id)
        if not config.is_static and member_id:
            # sent without waiting for the answer (as Kafka's maybeLeaveGroup): the thread goes
            # on, and heartbeats for the generation poll() may join meanwhile
            reason = "consumer poll timeout has expired"
            body = p.leave_body(config, member_id, reason)
            call = member.requester.start(Stream.GROUP, body, config.request_timeout_ms)
            self._leaves.append((reason, call))
