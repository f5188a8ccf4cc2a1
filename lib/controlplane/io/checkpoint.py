"""The files of a query's checkpoint that the engine reads before the query starts.

Which file system a checkpoint is on is Spark's to say: a plain path or a ``file:`` URI is on
this machine only when Spark's default file system is (a local session, ``here``). Then the
engine reads Spark's state schema and commits from the files, and reads and writes its own
records beside them (``KEYING_RECORD``, ``RUNS_RECORD``) directly. Anywhere else (Databricks,
whose default file system is DBFS; Spark Connect, whose server is elsewhere) it asks Spark
(engine.checkpoints, engine.runs), and Spark's text source and writer carry the records.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Any, Final

from controlplane.io.archive import local_path

# The keying a checkpoint's state is under (engine.checkpoints), one line of JSON: a file here,
# a directory of Spark's text output elsewhere. Spark ignores it.
KEYING_RECORD: Final = "controlplane_keying.json"
# When each run of the coordinator query started (engine.runs), a line of JSON a run, appended.
RUNS_RECORD: Final = "controlplane_runs.json"
_PATH_NOT_FOUND: Final = "PATH_NOT_FOUND"  # Spark's error class for a path that does not exist


def here(spark: Any, checkpoint: str) -> Path | None:
    """The checkpoint as a path on this machine, when Spark's default file system is this
    machine's and the checkpoint is a plain path or a ``file:`` URI; else None."""
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


def local_state_schema(root: Path, operator_id: int) -> bytes | None:
    """The state schema file Spark keeps for the stateful operator ``operator_id`` of a local
    checkpoint (beside the store of its partition 0: ``state/<id>/0/_metadata/schema``, Spark's
    own format with the schemas as JSON inside; written when the query's first batch is
    planned and checked against the query's schema at every start). ``b""`` when the
    checkpoint is here and has neither that file nor a committed batch (a new query, or one
    stopped before its first batch was planned); None when this cannot be read from here: a
    checkpoint that does not exist here, or one with committed batches but no such file, or a
    file that cannot be read. ``root``: the checkpoint ``here``."""
    schema = root / "state" / str(operator_id) / "0" / "_metadata" / "schema"
    try:
        if not root.is_dir():
            return None
        if schema.is_file():
            return schema.read_bytes()
        return None if has_commits(root) else b""
    except OSError:
        return None


def has_commits(root: Path) -> bool:
    """Whether the checkpoint ``here`` at ``root`` has a committed batch."""
    commits = root / "commits"
    try:
        return commits.is_dir() and any(entry.name.isdigit() for entry in commits.iterdir())
    except OSError:
        return False


class RecordError(Exception):
    """A record of the engine's that cannot be read or written as asked."""


def read_record(spark: Any, checkpoint: str) -> str | None:
    """The checkpoint's keying record (its one line); None when it has none, a RecordError
    for one that is there but empty or unreadable."""
    return _one_line(read_lines(spark, checkpoint, name=KEYING_RECORD))


def read_lines(spark: Any, checkpoint: str, *, name: str) -> list[str] | None:
    """The lines of the checkpoint's record ``name``, in no particular order when it was
    written through Spark; None when it has none, a RecordError for one that is unreadable."""
    root = here(spark, checkpoint)
    if root is None:
        values = _read_through_spark(spark, _glob_escaped(_inside(checkpoint, name)))
        return None if values is None else [str(value) for value in values]
    path = root / name
    try:
        if path.is_dir():  # written through Spark: its part files
            return [line for part in _parts(path) for line in _lines(part)]
        return _lines(path)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordError(f"{path}: {exc}") from exc


def append_line(spark: Any, checkpoint: str, text: str, *, name: str) -> None:
    """Add a line to the checkpoint's record ``name``, created if need be (with the
    checkpoint's directory): here appended to its file and synced; elsewhere a part file of
    its own, by Spark's text writer in append mode. Nothing is deleted or rewritten, so a
    crash leaves the lines written before it as they were."""
    root = here(spark, checkpoint)
    if root is None:
        _write_through_spark(spark, _inside(checkpoint, name), text, "append")
        return
    target = root / name
    try:
        root.mkdir(parents=True, exist_ok=True)
        _write_synced(target, text, os.O_APPEND)
    except OSError as exc:
        raise RecordError(f"{target}: {exc}") from exc


def latest_batch_time_ms(spark: Any, checkpoint: str) -> int | None:
    """The batch time Spark recorded for the last batch it planned (``batchTimestampMs`` in
    its offset log, ``offsets/<batch>``: a batch not committed is run again with it); None for
    a checkpoint that has planned none."""
    root = here(spark, checkpoint)
    if root is None:
        return _latest_batch_time_through_spark(spark, checkpoint)
    offsets = root / "offsets"
    try:
        batches = [int(p.name) for p in offsets.iterdir() if p.name.isdigit()]
        if not batches:
            return None
        lines = _lines(offsets / str(max(batches)))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordError(f"{offsets}: {exc}") from exc
    return _batch_time(lines, str(offsets))


def _batch_time(lines: list[str], where: str) -> int:
    """The ``batchTimestampMs`` of an offset log file's lines (a version, then the batch's
    metadata as JSON, then the sources' offsets)."""
    try:
        value = json.loads(lines[1])["batchTimestampMs"]
    except (IndexError, ValueError, TypeError, KeyError) as exc:
        raise RecordError(f"{where}: not Spark's offset log ({exc!r})") from exc
    if type(value) is not int:
        raise RecordError(f"{where}: batchTimestampMs {value!r}")
    return value


def _latest_batch_time_through_spark(spark: Any, checkpoint: str) -> int | None:
    """The largest ``batchTimestampMs`` of the offset log Spark keeps (the last batches'),
    read with one small job; batch times never go back, so it is the last planned batch's."""
    location = _glob_escaped(_inside(checkpoint, "offsets"))
    latest = "max(cast(get_json_object(value, '$.batchTimestampMs') as long))"
    values = _read_through_spark(spark, location, latest)
    value = values[0] if values else None
    return None if value is None else int(value)


def write_record(spark: Any, checkpoint: str, text: str, *, replace: bool) -> None:
    """Write the checkpoint's keying record (one line). ``replace``: over a record already
    there (written aside, synced, then renamed into place); else a RecordError if one is (an
    exclusive create). The checkpoint's directory is created if need be. Elsewhere than
    ``here`` Spark's text writer writes it, in either mode."""
    root = here(spark, checkpoint)
    if root is None:
        location = _inside(checkpoint, KEYING_RECORD)
        _write_through_spark(spark, location, text, "overwrite" if replace else "errorifexists")
        return
    target = root / KEYING_RECORD
    try:
        root.mkdir(parents=True, exist_ok=True)
        if not replace:
            _write_synced(target, text, os.O_EXCL)
            return
        aside = root / f".{KEYING_RECORD}.{uuid.uuid4().hex}.tmp"
        _write_synced(aside, text, os.O_EXCL)
        if target.is_dir():  # an earlier start's record, written through Spark
            shutil.rmtree(target)
        os.replace(aside, target)
    except OSError as exc:
        reason = "a record is there already" if exc.errno == errno.EEXIST else str(exc)
        raise RecordError(f"{target}: {reason}") from exc


def _write_synced(path: Path, text: str, flag: int) -> None:
    """``text`` and a newline written to ``path`` opened with ``flag`` (``os.O_EXCL``: a file
    that must not exist yet; ``os.O_APPEND``: after what it holds), synced before it is
    closed."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | flag, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text + "\n")
        out.flush()
        os.fsync(out.fileno())


def _write_through_spark(spark: Any, location: str, text: str, mode: str) -> None:
    """One line by Spark's text writer, in its save ``mode``."""
    try:
        frame = spark.createDataFrame([(text,)], "value string").coalesce(1)
        frame.write.mode(mode).text(location)
    except Exception as exc:  # Spark's errors, through py4j or Spark Connect
        raise RecordError(f"{location}: {first_line(exc)}") from exc


def _inside(checkpoint: str, name: str) -> str:
    """The location of ``name`` in the checkpoint, as Spark is given it."""
    return f"{checkpoint.rstrip('/')}/{name}"


def _glob_escaped(location: str) -> str:
    """``location`` for Spark's readers, which expand a glob (the writer takes the path as it
    is): each of ``\\[]{}*?`` escaped with a backslash."""
    return re.sub(r"([\\\[\]{}*?])", r"\\\1", location)


def _read_through_spark(
    spark: Any, location: str, expression: str | None = None
) -> list[Any] | None:
    """The lines of the text files at ``location`` (or the rows of ``expression`` over their
    ``value`` column), read by Spark; None when nothing is there."""
    try:
        frame = spark.read.text(location)
        if expression is not None:
            frame = frame.selectExpr(expression)
        rows = frame.collect()
    except Exception as exc:  # Spark's errors, through py4j or Spark Connect
        if _PATH_NOT_FOUND in str(exc):
            return None
        raise RecordError(f"{location}: {first_line(exc)}") from exc
    return [row[0] for row in rows]


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _one_line(lines: list[str] | None) -> str | None:
    """The record's line: a record written through Spark may hold it more than once (a task
    attempt's leftover part file), and never two different ones; a record with none is
    refused (a reader must not take it for no record)."""
    if lines is None:
        return None
    distinct = {line.strip() for line in lines if line.strip()}
    if len(distinct) != 1:
        raise RecordError(f"{len(distinct)} different records in one" if distinct else "empty")
    return distinct.pop()


def _parts(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.startswith("part-"))


def first_line(exc: Exception) -> str:
    """An error's first line (Spark's carry the JVM's stack after it), else its class."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
