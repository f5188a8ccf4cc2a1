"""The files of a query's checkpoint that the engine reads before the query starts.

Only for a checkpoint on a local path (a plain path or a ``file:`` URI); a checkpoint on any
other file system is read through Spark (engine.checkpoints).
"""

from __future__ import annotations

from typing import Final

from controlplane.io.archive import local_path

# Where Spark keeps the state schema of a query's stateful operator (the engine's queries have
# one, operator 0), beside the store of its partition 0: written when the first batch is
# planned, checked against the query's schema at every start.
STATE_SCHEMA_FILE: Final = ("state", "0", "0", "_metadata", "schema")


def local_state_schema(checkpoint: str) -> bytes | None:
    """The state schema file of a local checkpoint (Spark's own format, the schemas as JSON
    inside); ``b""`` when it has none yet (a new query); None for a checkpoint that is not a
    local path."""
    root = local_path(checkpoint)
    if root is None:
        return None
    schema = root.joinpath(*STATE_SCHEMA_FILE)
    return schema.read_bytes() if schema.is_file() else b""
