"""Generated member ids (docs/reference/events.md §5): deterministic, so the same input gives the
same rows."""

from __future__ import annotations

import uuid


def new_member_id(
    group_id: str, event_id: str, group_instance_id: str | None, client_id: str
) -> str:
    """``{prefix}-{uuid5(NAMESPACE_URL, group_id + "/" + event_id)}``; the prefix is the instance
    id of a static member, else the client id, else ``member``."""
    prefix = group_instance_id if group_instance_id is not None else (client_id or "member")
    return f"{prefix}-{uuid.uuid5(uuid.NAMESPACE_URL, group_id + '/' + event_id)}"
