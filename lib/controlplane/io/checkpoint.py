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
import shutil
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


class RecordError(Exception):
    """A keying record that cannot be read or written as asked."""


def read_record(spark: Any, checkpoint: str) -> str | None:
    """The checkpoint's keying record (its one line); None when it has none."""
    here = _here(spark, checkpoint)
    if here is None:
        return _one_line(_read_through_spark(spark, _record_location(checkpoint)))
    path = here / KEYING_RECORD
    try:
        if path.is_dir():  # written through Spark: its part files
            lines = [line for part in _parts(path) for line in _lines(part)]
        else:
            lines = _lines(path)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordError(f"{path}: {exc}") from exc
    return _one_line(lines)


def write_record(spark: Any, checkpoint: str, text: str, *, replace: bool) -> None:
    """Write the checkpoint's keying record (one line). ``replace``: over a record already
    there; else a RecordError if one is. On this machine the file appears whole (written
    aside, then renamed or linked into place), the checkpoint's directory created if need be;
    elsewhere Spark's text writer writes it."""
    here = _here(spark, checkpoint)
    if here is None:
        location = _record_location(checkpoint)
        frame = spark.createDataFrame([(text,)], "value string").coalesce(1)
        try:
            frame.write.mode("overwrite" if replace else "errorifexists").text(location)
        except Exception as exc:  # Spark's errors, through py4j or Spark Connect
            raise RecordError(f"{location}: {_first_line(exc)}") from exc
        return
    target = here / KEYING_RECORD
    try:
        here.mkdir(parents=True, exist_ok=True)
        aside = here / f".{KEYING_RECORD}.{uuid.uuid4().hex}.tmp"
        aside.write_text(text + "\n", encoding="utf-8")
        if replace:
            if target.is_dir():  # an earlier start's record written through Spark
                shutil.rmtree(target)
            os.replace(aside, target)
            return
        try:
            os.link(aside, target)  # fails if a record is there
        finally:
            aside.unlink()
    except OSError as exc:
        raise RecordError(f"{target}: {exc}") from exc


def _here(spark: Any, checkpoint: str) -> Path | None:
    """The checkpoint as a path on this machine, when Spark's default file system is this
    machine's (a local session) and the checkpoint is a plain path or a ``file:`` URI; else
    None, and Spark reads and writes it (Databricks: DBFS or a volume; Spark Connect: a
    server elsewhere)."""
    root = local_path(checkpoint)
    if root is None or not _default_fs_is_local(spark):
        return None
    return root


def _default_fs_is_local(spark: Any) -> bool:
    """Whether Spark resolves a plain path on this machine's file system (``fs.defaultFS`` is
    ``file:``); False when it cannot be asked (Spark Connect has no JVM gateway)."""
    try:
        default_fs = spark.sparkContext._jsc.hadoopConfiguration().get("fs.defaultFS")
    except Exception:  # no py4j gateway (Spark Connect), or a session double without one
        return False
    return isinstance(default_fs, str) and default_fs.startswith("file:")


_GLOB: Final = frozenset("[]{}*?\\")


def _record_location(checkpoint: str) -> str:
    location = f"{checkpoint.rstrip('/')}/{KEYING_RECORD}"
    if _GLOB & set(location):
        # Spark's readers expand these as a glob: the record written at the literal path
        # would not be found, and a checkpoint without its record restarts as an old one
        raise RecordError(f"{location}: a path with any of []{{}}*?\\ in it cannot be read back")
    return location


def _read_through_spark(spark: Any, location: str) -> list[str] | None:
    try:
        rows = spark.read.text(location).collect()
    except Exception as exc:  # Spark's errors, through py4j or Spark Connect
        if _PATH_NOT_FOUND in str(exc):
            return None
        raise RecordError(f"{location}: {_first_line(exc)}") from exc
    return [str(row[0]) for row in rows]


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _one_line(lines: list[str] | None) -> str | None:
    """The record's line: a record written through Spark may hold it more than once (a task
    attempt's leftover part file), and never two different ones."""
    if lines is None:
        return None
    distinct = {line.strip() for line in lines if line.strip()}
    if len(distinct) > 1:
        raise RecordError(f"{len(distinct)} different records in one")
    return distinct.pop() if distinct else None


def _parts(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.startswith("part-"))


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
