"""Clocks for the clients: one protocol, a real clock, and a virtual clock for tests.

Every wait of the client library goes through ``Clock.wait_for(predicate, timeout_ms)``, and
every state change another thread may wait for is announced with ``Clock.notify()``. With the
real clock these are a ``threading.Condition``; with ``VirtualClock`` time stands still while
any participating thread runs, and jumps to the earliest deadline once every participant is
waiting and has re-checked its condition (a discrete-event simulation of the threads). Threads
take part by being started with ``Clock.spawn``; the thread that creates a VirtualClock takes part
too. Rule for callers: evaluate predicates without taking locks that are held while calling
``notify()`` (predicates run under the clock's lock).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...

    def wait_for(self, predicate: Callable[[], bool], timeout_ms: int | None) -> bool:
        """Block until ``predicate()`` holds (True) or ``timeout_ms`` passed (False).

        The predicate is checked first, so a zero timeout still looks once."""
        ...

    def sleep(self, duration_ms: int) -> None: ...

    def notify(self) -> None:
        """Wake every waiter so it re-checks its predicate."""
        ...

    def spawn(self, target: Callable[[], None], name: str) -> threading.Thread:
        """Start a daemon thread that takes part in this clock's waits."""
        ...

    def join(self, thread: threading.Thread, timeout_ms: int | None) -> bool:
        """Wait for a spawned thread to end; False if it is still running at the timeout."""
        ...


class RealClock:
    """Wall-clock time and one condition variable shared by every waiter of this clock."""

    def __init__(self) -> None:
        self._cv = threading.Condition()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def wait_for(self, predicate: Callable[[], bool], timeout_ms: int | None) -> bool:
        timeout_s = None if timeout_ms is None else max(0, timeout_ms) / 1000.0
        with self._cv:
            return bool(self._cv.wait_for(predicate, timeout_s))

    def sleep(self, duration_ms: int) -> None:
        self.wait_for(lambda: False, duration_ms)

    def notify(self) -> None:
        with self._cv:
            self._cv.notify_all()

    def spawn(self, target: Callable[[], None], name: str) -> threading.Thread:
        def run() -> None:
            try:
                target()
            finally:
                self.notify()  # wake whoever waits for this thread to end

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        return thread

    def join(self, thread: threading.Thread, timeout_ms: int | None) -> bool:
        thread.join(None if timeout_ms is None else max(0, timeout_ms) / 1000.0)
        return not thread.is_alive()


class VirtualClockDeadlock(RuntimeError):
    """Every participant waits without a deadline: virtual time can never move again."""


@dataclass(slots=True)
class _Waiter:
    deadline_ms: int | None
    seen_epoch: int


_GUARD_S = 0.05  # real-time re-check interval, a guard against a missed wake-up


class VirtualClock:
    """Virtual time for tests: ``advance(ms)`` moves it by hand; with ``auto_advance`` it also
    jumps to the next deadline whenever every participating thread is waiting."""

    def __init__(self, start_ms: int = 1_700_000_000_000, *, auto_advance: bool = True) -> None:
        self._cv = threading.Condition()
        self._now_ms = start_ms
        self._epoch = 0
        self._auto_advance = auto_advance
        self._participants: set[threading.Thread] = {threading.current_thread()}
        self._waiters: dict[threading.Thread, _Waiter] = {}

    def now_ms(self) -> int:
        return self._now_ms

    def advance(self, duration_ms: int) -> None:
        if duration_ms < 0:
            raise ValueError("a clock never goes back")
        with self._cv:
            self._now_ms += duration_ms
            self._bump()

    def notify(self) -> None:
        with self._cv:
            self._bump()

    def sleep(self, duration_ms: int) -> None:
        self.wait_for(lambda: False, duration_ms)

    def wait_for(self, predicate: Callable[[], bool], timeout_ms: int | None) -> bool:
        me = threading.current_thread()
        with self._cv:
            deadline_ms = None if timeout_ms is None else self._now_ms + max(0, timeout_ms)
            try:
                return self._wait_loop(me, predicate, deadline_ms)
            finally:
                self._waiters.pop(me, None)
                self._bump()

    def spawn(self, target: Callable[[], None], name: str) -> threading.Thread:
        def run() -> None:
            try:
                target()
            finally:
                with self._cv:
                    self._participants.discard(thread)
                    self._bump()

        thread = threading.Thread(target=run, name=name, daemon=True)
        with self._cv:
            self._participants.add(thread)
        thread.start()
        return thread

    def join(self, thread: threading.Thread, timeout_ms: int | None) -> bool:
        return self.wait_for(lambda: not thread.is_alive(), timeout_ms)

    def _wait_loop(
        self, me: threading.Thread, predicate: Callable[[], bool], deadline_ms: int | None
    ) -> bool:
        while True:
            if predicate():
                return True
            if deadline_ms is not None and self._now_ms >= deadline_ms:
                return False
            self._waiters[me] = _Waiter(deadline_ms, self._epoch)
            if self._maybe_jump():
                continue
            self._cv.wait(_GUARD_S)

    def _bump(self) -> None:
        self._epoch += 1
        self._cv.notify_all()

    def _settled(self) -> bool:
        waiting = self._waiters
        if any(thread not in waiting for thread in self._participants):
            return False
        return all(waiter.seen_epoch == self._epoch for waiter in waiting.values())

    def _maybe_jump(self) -> bool:
        """Called with the lock held: jump to the earliest deadline when all are waiting."""
        if not self._auto_advance or not self._settled():
            return False
        deadlines = [w.deadline_ms for w in self._waiters.values() if w.deadline_ms is not None]
        if not deadlines:
            raise VirtualClockDeadlock(
                f"all {len(self._waiters)} waiting thread(s) wait without a deadline"
            )
        self._now_ms = max(self._now_ms, min(deadlines))
        self._bump()
        return True
