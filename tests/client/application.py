"""An application loop for member tests: polls a member in a clock thread until halted."""

from __future__ import annotations

import threading

from controlplane.client.clock import VirtualClock
from controlplane.client.member import GroupMember
from controlplane.client.records import Record


class Runner:
    """Polls a member in a clock thread until stopped, as an application loop would."""

    def __init__(self, clock: VirtualClock, member: GroupMember, poll_ms: int = 500) -> None:
        self.member = member
        self.records: list[Record] = []
        self.stop = threading.Event()
        self._poll_ms = poll_ms
        self.thread = clock.spawn(self._run, f"app-{member.config.client_id}")

    def halt(self, clock: VirtualClock) -> None:
        self.stop.set()
        assert clock.wait_for(lambda: not self.thread.is_alive(), 5_000)

    def _run(self) -> None:
        while not self.stop.is_set():
            self.records.extend(self.member.poll(self._poll_ms))
