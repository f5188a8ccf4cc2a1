"""The files of a query's checkpoint that the engine reads before the query starts.

Only for a checkpoint on a local path (a plain path or a ``file:`` URI) that exists on this
machine; for any other (another file system, or a plain path that Spark resolves to another
default file system, as on Databricks) the engine asks Spark (engine.checkpoints).
"""

from __future__ import annotations

from pathlib import Path

from controlplane.io.archive import local_path


def local_state_schema(checkpoint: str, operator_id: int) -> bytes | None:
    """The state schema file Spark keeps for the stateful operator ``operator_id`` of a local
    checkpoint (beside the store of its partition 0: ``state/<id>/0/_metadata/schema``, Spark's
    own format with the schemas as JSON inside; written when the query's first batch is
    planned and checked against the query's schema at every start). ``b""`` when the
    checkpoint is here and has neither that file nor a committed batch (a new query, or one
    stopped before its first batch was planned); None when this cannot be read from here: a
    checkpoint that is not a local path or not on this machine, or one with committed batches
    but no such file, or a file that cannot be read."""
    root = local_path(checkpoint)
    if root is None:
        return None
    schema = root / "state" / str(operator_id) / "0" / "_metadata" / "schema"
    try:
        if not root.is_dir():
            return None
        if schema.is_file():
            return schema.read_bytes()
        return None if _has_commits(root / "commits") else b""
    except OSError:
        return None


def _has_commits(commits: Path) -> bool:
    return commits.is_dir() and any(entry.name.isdigit() for entry in commits.iterdir())
