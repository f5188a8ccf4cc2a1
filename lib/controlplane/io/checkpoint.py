"""The files of a query's checkpoint that the engine reads before the query starts.

Spark's state schema only for a checkpoint on a local path (a plain path or a ``file:`` URI)
that exists on this machine; for any other (another file system, or a plain path that Spark
resolves to another default file system, as on Databricks) the engine asks Spark
(engine.checkpoints). The engine's own record beside Spark's files (``KEYING_RECORD``) is
read and written directly on a local path, and through Spark's text source and writer on any
other, which reach every file system Spark does, Spark Connect included.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any, Final

from controlplane.io.archive import local_path

# The keying a checkpoint's state is under (engine.checkpoints), one JSON object; a file on a
# local path, a directory of Spark's text output elsewhere. Spark ignores it.
KEYING_RECORD: Final = "controlplane_keying.json"
_PATH_NOT_FOUND: Final = "PATH_NOT_FOUND"  # Spark's error class for a path that does not exist


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


def read_record(spark: Any, checkpoint: str) -> str | None:
    """The checkpoint's keying record as text; None when it has none."""
    here = _here(spark, checkpoint)
    if here is None:
        return _read_through_spark(spark, _record_location(checkpoint))
    path = here / KEYING_RECORD
    try:
        if path.is_dir():  # written through Spark (a new checkpoint at a plain path)
            parts = (part.read_text(encoding="utf-8").splitlines() for part in _parts(path))
            return "\n".join(line for lines in parts for line in lines)
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def write_record(spark: Any, checkpoint: str, text: str) -> None:
    """Write the checkpoint's keying record (one line of text). On this machine the file
    appears whole (written aside, then renamed), the checkpoint's directory created if need
    be; elsewhere Spark writes it, as its text output."""
    here = _here(spark, checkpoint)
    if here is None:
        frame = spark.createDataFrame([(text,)], "value string").coalesce(1)
        frame.write.mode("overwrite").text(_record_location(checkpoint))
        return
    here.mkdir(parents=True, exist_ok=True)
    aside = here / f".{KEYING_RECORD}.{uuid.uuid4().hex}.tmp"
    aside.write_text(text, encoding="utf-8")
    os.replace(aside, here / KEYING_RECORD)


def _here(spark: Any, checkpoint: str) -> Path | None:
    """The checkpoint as a path on this machine: a ``file:`` URI, a plain path that exists
    here, or one that does not yet when Spark's default file system is this machine's (a local
    session). Any other plain path is Spark's to resolve (DBFS on Databricks)."""
    root = local_path(checkpoint)
    if root is None:
        return None
    if checkpoint.startswith("file:") or root.is_dir() or _default_fs_is_local(spark):
        return root
    return None


def _default_fs_is_local(spark: Any) -> bool:
    """Whether Spark resolves a plain path on this machine's file system (``fs.defaultFS`` is
    ``file:``); False when it cannot be asked (Spark Connect has no JVM gateway)."""
    try:
        default_fs = spark.sparkContext._jsc.hadoopConfiguration().get("fs.defaultFS")
    except Exception:  # no py4j gateway (Spark Connect), or a session double without one
        return False
    return isinstance(default_fs, str) and default_fs.startswith("file:")


def _record_location(checkpoint: str) -> str:
    return f"{checkpoint.rstrip('/')}/{KEYING_RECORD}"


def _read_through_spark(spark: Any, location: str) -> str | None:
    try:
        lines = spark.read.text(location).collect()
    except Exception as exc:  # Spark's errors, through py4j or Spark Connect
        if _PATH_NOT_FOUND in str(exc):
            return None
        raise
    return "\n".join(row[0] for row in lines)


def _parts(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.startswith("part-"))
