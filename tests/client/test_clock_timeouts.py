"""The virtual clock, deadlines, attempt-then-check, the reaper and bounded retries."""

from __future__ import annotations

import pytest

from controlplane.client.clock import VirtualClock, VirtualClockDeadlock
from controlplane.client.timeouts import (
    CallTable,
    ClientClosedError,
    ClientTimeoutError,
    Deadline,
    RetriableError,
    with_retries,
)

START_MS = 1_000_000


def test_sleep_moves_virtual_time_by_exactly_the_duration() -> None:
    clock = VirtualClock(START_MS)
    clock.sleep(2_500)
    assert clock.now_ms() == START_MS + 2_500


def test_spawned_thread_wakes_at_its_own_deadline_while_main_sleeps() -> None:
    clock = VirtualClock(START_MS)
    woke_at: list[int] = []

    def worker() -> None:
        for _ in range(3):
            clock.sleep(1_000)
            woke_at.append(clock.now_ms())

    clock.spawn(worker, "worker")
    clock.sleep(10_000)
    assert woke_at == [START_MS + 1_000, START_MS + 2_000, START_MS + 3_000]
    assert clock.now_ms() == START_MS + 10_000


def test_condition_wait_returns_when_another_thread_changes_state() -> None:
    clock = VirtualClock(START_MS)
    box: list[int] = []

    def producer() -> None:
        clock.sleep(700)
        box.append(1)
        clock.notify()

    clock.spawn(producer, "producer")
    assert clock.wait_for(lambda: bool(box), 5_000) is True
    assert clock.now_ms() == START_MS + 700


def test_wait_with_zero_timeout_still_checks_once() -> None:
    clock = VirtualClock(START_MS)
    assert clock.wait_for(lambda: True, 0) is True
    assert clock.wait_for(lambda: False, 0) is False
    assert clock.now_ms() == START_MS


def test_waiting_forever_with_nobody_else_is_reported_not_hung() -> None:
    clock = VirtualClock(START_MS)
    with pytest.raises(VirtualClockDeadlock):
        clock.wait_for(lambda: False, None)


def test_manual_clock_does_not_jump() -> None:
    clock = VirtualClock(START_MS, auto_advance=False)
    clock.advance(50)
    assert clock.now_ms() == START_MS + 50
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_deadline_is_fixed_at_call_start_and_defaults_to_api_timeout() -> None:
    clock = VirtualClock(START_MS)
    deadline = Deadline.start(clock, None, default_api_timeout_ms=60_000)
    assert deadline.deadline_ms == START_MS + 60_000
    clock.sleep(45_000)
    assert deadline.remaining_ms(clock.now_ms()) == 15_000
    assert deadline.attempt_wait_ms(clock.now_ms(), request_timeout_ms=30_000) == 15_000
    assert Deadline.start(clock, 0, 60_000).expired(clock.now_ms())


def test_timeout_zero_answered_call_succeeds_and_unanswered_is_reaped() -> None:
    clock = VirtualClock(START_MS)
    table = CallTable(clock)
    answered = table.register("e1", deadline_ms=clock.now_ms())
    table.complete("e1", {"event_id": "e1", "error_code": 0})
    table.await_call(answered)
    assert answered.result()["error_code"] == 0
    silent = table.register("e2", deadline_ms=clock.now_ms())
    table.await_call(silent)
    with pytest.raises(ClientTimeoutError):
        silent.result()
    assert table.pending() == []


def test_late_answer_after_reaping_is_ignored() -> None:
    clock = VirtualClock(START_MS)
    table = CallTable(clock)
    call = table.register("e1", deadline_ms=START_MS + 100)
    table.await_call(call)
    assert clock.now_ms() == START_MS + 100
    assert table.complete("e1", {"event_id": "e1"}) is False
    with pytest.raises(ClientTimeoutError):
        call.result()


def test_close_completes_pending_calls_and_refuses_new_ones() -> None:
    clock = VirtualClock(START_MS)
    table = CallTable(clock)
    call = table.register("e1", deadline_ms=START_MS + 10_000)
    table.close()
    with pytest.raises(ClientClosedError):
        call.result()
    later = table.register("e2", deadline_ms=START_MS + 10_000)
    assert later.done
    with pytest.raises(ClientClosedError):
        later.result()


def test_retries_are_bounded_by_the_deadline_and_each_wait_by_request_timeout() -> None:
    clock = VirtualClock(START_MS)
    waits: list[int] = []

    def attempt(wait_ms: int) -> str:
        waits.append(wait_ms)
        clock.sleep(wait_ms)  # the request is never answered
        raise ClientTimeoutError("no answer")

    deadline = Deadline.start(clock, 70_000, default_api_timeout_ms=60_000)
    with pytest.raises(ClientTimeoutError, match="3 attempt"):
        with_retries(clock, deadline, 30_000, 100, attempt, "fetch")
    assert waits == [30_000, 30_000, 70_000 - 60_200]
    assert clock.now_ms() == START_MS + 70_000


def test_timeout_zero_attempts_once_and_returns_a_ready_answer() -> None:
    clock = VirtualClock(START_MS)
    calls: list[int] = []

    def attempt(wait_ms: int) -> str:
        calls.append(wait_ms)
        return "answered"

    assert with_retries(clock, Deadline.start(clock, 0, 60_000), 30_000, 100, attempt, "x") == (
        "answered"
    )
    assert calls == [0]


def test_timeout_zero_retriable_failure_is_not_retried() -> None:
    clock = VirtualClock(START_MS)
    calls: list[int] = []

    def attempt(wait_ms: int) -> str:
        calls.append(wait_ms)
        raise RetriableError("coordinator not available")

    with pytest.raises(ClientTimeoutError):
        with_retries(clock, Deadline.start(clock, 0, 60_000), 30_000, 100, attempt, "x")
    assert calls == [0]


def test_retriable_error_retried_after_backoff_until_success() -> None:
    clock = VirtualClock(START_MS)
    times: list[int] = []

    def attempt(wait_ms: int) -> str:
        times.append(clock.now_ms() - START_MS)
        if len(times) < 3:
            raise RetriableError("not yet")
        return "ok"

    result = with_retries(clock, Deadline.start(clock, 1_000, 60_000), 30_000, 100, attempt, "x")
    assert result == "ok"
    assert times == [0, 100, 200]
