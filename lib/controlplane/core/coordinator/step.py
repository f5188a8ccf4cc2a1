"""What one call of the machine returns: the group afterwards, the rows, the next deadline."""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.core.coordinator.records import Decision, GroupEvent
from controlplane.core.coordinator.state import Group
from controlplane.core.frozen import fast_constructor


@dataclass(frozen=True, slots=True)
class Step:
    group: Group | None  # None: the group does not exist (never created, deleted, expired)
    decisions: tuple[Decision, ...]  # the request's own answer first, then released answers
    events: tuple[GroupEvent, ...]

    @property
    def next_deadline_ms(self) -> int | None:
        """When the group's next timer is due (None: no group, or no timer)."""
        return None if self.group is None else self.group.next_deadline_ms


make_step = fast_constructor(Step)  # quick constructor (``frozen.py``)
