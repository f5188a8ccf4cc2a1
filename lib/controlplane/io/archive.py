"""Archive (or delete) the landing directory's files once their micro-batch is committed.

Spark's own ``cleanSource`` does this in ``FileStreamSource.commit(end)``, which Spark calls,
while it plans each batch, with the end offset of the batch before. That offset only moves
when a batch reads files: a batch that reads nothing (with processing-time timeouts Spark
runs one every trigger, idle or not) commits the last data batch's offset again, and the
source archives that batch's files again. They are gone, so each idle batch logged
``WARN FileStreamSource$SourceFileArchiver: Fail to move ... / skip moving file`` once per file
of the last data batch, forever (127 lines in two minutes), although every file had been
archived; ``delete`` warns the same way ("Failed to remove").

So the engine archives the files itself, each once: the progress listener calls
``LandingArchiver.after_commit`` when Spark reports a batch's progress, which comes after
the batch's commit, with the file source's end offset; the archiver reads which files that
offset covers from the source's log in the checkpoint (``sources/<n>/<offset>``, and the
``.compact`` files Spark folds them into) and moves the ones it has not moved yet. After a
restart, its first call goes through the whole log: the files of a batch committed just
before a stop, whose progress came too late, are archived then; a file already gone is
skipped silently, a move that fails is a warning. Files of a batch that is not committed are
never touched: a restart replays that batch from them.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from controlplane.io.options import CleanSource, SourceOptions

log = logging.getLogger(__name__)

COMPACT = ".compact"


def local_path(location: str) -> Path | None:
    """A plain path or a ``file:`` URI as a local path; None for any other scheme."""
    parsed = urlparse(location)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    return Path(location) if parsed.scheme == "" else None


def archive_dir_of(source: SourceOptions) -> Path:
    return Path(source.archive_dir or f"{source.path.rstrip('/')}-archive")


def log_entries(directory: Path, first: int, last: int) -> list[tuple[int, str]]:
    """(offset, file path) of the files Spark's file source log lists for the offsets
    ``first..last``: from the plain file of each offset, or from the compact file that holds
    it once Spark has folded the plain files in (a compact file ``N.compact`` holds every
    entry up to N)."""
    if last < first:
        return []
    names = {p.name for p in directory.iterdir()} if directory.is_dir() else set()
    compacts = sorted(int(n[: -len(COMPACT)]) for n in names if _is_offset(n, COMPACT))
    entries: list[tuple[int, str]] = []
    missing = []
    for offset in range(first, last + 1):
        if str(offset) in names:
            entries.extend(_read(directory / str(offset), offset, offset))
        elif f"{offset}{COMPACT}" in names:
            entries.extend(_read(directory / f"{offset}{COMPACT}", offset, offset))
        else:
            missing.append(offset)
    if missing:  # folded into a later compact file
        holder = next((c for c in compacts if c >= missing[-1]), None)
        if holder is None:
            raise FileNotFoundError(f"{directory}: no log file for offsets {missing}")
        wanted = set(missing)
        folded = _read(directory / f"{holder}{COMPACT}", missing[0], missing[-1])
        entries.extend(entry for entry in folded if entry[0] in wanted)
    return sorted(entries)


def _is_offset(name: str, suffix: str = "") -> bool:
    return name.endswith(suffix) and name[: len(name) - len(suffix)].isdigit()


def _read(path: Path, first: int, last: int) -> Iterator[tuple[int, str]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    for line in lines[1:]:  # the first line is the log's version, "v1"
        if not line.strip():
            continue
        entry = json.loads(line)
        offset = int(entry["batchId"])
        if first <= offset <= last:
            yield offset, str(entry["path"])


class LandingArchiver:
    """Moves (``archive``) or deletes (``delete``) the files of committed batches, once."""

    def __init__(self, source: SourceOptions, checkpoint: Path) -> None:
        self.source = source
        self.checkpoint = checkpoint
        self.archive_dir = archive_dir_of(source)
        self.done = -1  # the highest offset whose files are handled; -1: none yet this run

    @classmethod
    def for_source(cls, source: SourceOptions, checkpoint: str) -> LandingArchiver | None:
        """The archiver of a landing directory with ``clean_source`` archive or delete, when the
        checkpoint is a local path; else None (Spark's cleanSource then, see sources.py)."""
        if source.format != "jsonl" or CleanSource(source.clean_source) is CleanSource.OFF:
            return None
        local = local_path(checkpoint)
        return None if local is None else cls(source, local)

    def after_commit(self, progress: Any) -> None:
        """Handle the files up to the file source's end offset of a committed batch."""
        for index, source in enumerate(progress.sources or []):
            if not str(source.description).startswith("FileStreamSource"):
                continue
            offset = _log_offset(source.endOffset)
            if offset is not None:
                self.handle_through(index, offset)

    def handle_through(self, source_index: int, offset: int) -> int:
        """Archive or delete the files of offsets up to ``offset``; returns how many moved."""
        if offset <= self.done:
            return 0
        directory = self.checkpoint / "sources" / str(source_index)
        entries = log_entries(directory, self.done + 1, offset)
        moved = sum(self._handle(number, location) for number, location in entries)
        self.done = offset
        return moved

    def _handle(self, offset: int, location: str) -> bool:
        path = local_path(location)
        if path is None or not path.exists():
            return False  # handled before (a restart goes through the whole log) or removed
        try:
            if CleanSource(self.source.clean_source) is CleanSource.DELETE:
                path.unlink()
                return True
            self.archive_dir.mkdir(parents=True, exist_ok=True)
            target = self.archive_dir / path.name
            if target.exists():  # a name used twice: keep both
                target = self.archive_dir / f"{path.name}.{offset}"
            os.rename(path, target)
            return True
        except FileNotFoundError:
            return False
        except OSError as exc:
            log.warning("could not %s %s: %s", CleanSource(self.source.clean_source), path, exc)
            return False


def _log_offset(text: Any) -> int | None:
    if not text:
        return None
    try:
        value = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return None
    if isinstance(value, dict) and isinstance(value.get("logOffset"), int):
        return int(value["logOffset"])
    return None
