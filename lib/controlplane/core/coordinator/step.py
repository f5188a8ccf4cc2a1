"""What one call of the machine returns."""

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


make_step = fast_constructor(Step)  # quick constructor (``frozen.py``)
