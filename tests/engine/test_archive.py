"""The landing directory's archiver: each committed batch's files are moved (or deleted)
once, from the list Spark's file source keeps in the checkpoint; files of a batch not yet
committed stay, so a restart can replay it.

Spark's own cleanSource archived again, at every batch that read nothing, the files of the
last batch that read some: they were gone, and each idle batch warned "Fail to move" once
per file (FileStreamSource.commit is called with the same end offset again)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from controlplane.io.archive import LandingArchiver, local_path, log_entries
from controlplane.io.options import CleanSource, SourceOptions


class Landing:
    """A landing directory, its archive and the file source log of a checkpoint, written the
    way Spark writes it: ``sources/0/<offset>`` ("v1", then one JSON entry per file), and
    every tenth offset a ``<offset>.compact`` file holding every entry so far."""

    def __init__(self, root: Path, clean_source: CleanSource = CleanSource.ARCHIVE) -> None:
        self.landing = root / "landing"
        self.landing.mkdir()
        self.checkpoint = root / "checkpoint"
        self.log = self.checkpoint / "sources" / "0"
        self.log.mkdir(parents=True)
        self.source = SourceOptions(
            format="jsonl",
            path=str(self.landing),
            clean_source=clean_source,
            archive_dir=str(root / "archive"),
        )
        self.entries: list[dict[str, Any]] = []

    def drop(self, name: str) -> Path:
        path = self.landing / name
        path.write_text('{"event_id": "e"}\n')
        return path

    def read_by_spark(self, offset: int, *names: str, compact: bool = False) -> None:
        new = [
            {"path": (self.landing / n).as_uri(), "timestamp": 1, "batchId": offset} for n in names
        ]
        self.entries += new
        rows = self.entries if compact else new
        suffix = ".compact" if compact else ""
        text = "v1\n" + "\n".join(json.dumps(row) for row in rows)
        (self.log / f"{offset}{suffix}").write_text(text)

    def archiver(self) -> LandingArchiver:
        archiver = LandingArchiver.for_source(self.source, str(self.checkpoint))
        assert archiver is not None
        return archiver

    def archived(self) -> list[str]:
        archive = Path(str(self.source.archive_dir))
        return sorted(p.name for p in archive.iterdir()) if archive.is_dir() else []

    def waiting(self) -> list[str]:
        return sorted(p.name for p in self.landing.iterdir())


def progress(end_offset: int | None, description: str = "FileStreamSource[file:/x]") -> Any:
    """What the listener gets for a committed batch (StreamingQueryProgress)."""
    end = None if end_offset is None else json.dumps({"logOffset": end_offset})
    return SimpleNamespace(sources=[SimpleNamespace(description=description, endOffset=end)])


def test_each_committed_file_is_archived_once_and_idle_batches_do_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    landing = Landing(tmp_path)
    for name in ("a.jsonl", "b.jsonl", "c.jsonl"):
        landing.drop(name)
    landing.read_by_spark(0, "a.jsonl", "b.jsonl")
    archiver = landing.archiver()
    archiver.after_commit(progress(0))
    assert landing.archived() == ["a.jsonl", "b.jsonl"]
    assert landing.waiting() == ["c.jsonl"]  # not read yet
    for _ in range(100):  # idle batches report the same end offset again
        archiver.after_commit(progress(0))
    assert not caplog.records
    landing.read_by_spark(1, "c.jsonl")
    assert landing.waiting() == ["c.jsonl"]  # read, but its batch is not committed yet
    archiver.after_commit(progress(1))
    assert landing.archived() == ["a.jsonl", "b.jsonl", "c.jsonl"]
    assert landing.waiting() == []


def test_offsets_folded_into_a_compact_file_are_found(tmp_path: Path) -> None:
    landing = Landing(tmp_path)
    for offset in range(10):
        landing.drop(f"f{offset}.jsonl")
        landing.read_by_spark(offset, f"f{offset}.jsonl", compact=offset == 9)
    for offset in range(9):  # Spark deletes the plain files once compacted
        (landing.log / str(offset)).unlink()
    assert [offset for offset, _ in log_entries(landing.log, 3, 9)] == list(range(3, 10))
    landing.archiver().after_commit(progress(9))
    assert landing.archived() == [f"f{n}.jsonl" for n in range(10)]


def test_after_a_restart_the_whole_log_is_swept_silently(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch committed just before a stop, whose progress came too late for the listener,
    has its files archived by the next run's first batch; files archived before are skipped
    without a word."""
    landing = Landing(tmp_path)
    landing.drop("old.jsonl")
    landing.read_by_spark(0, "old.jsonl")
    landing.archiver().after_commit(progress(0))
    landing.drop("late.jsonl")
    landing.read_by_spark(1, "late.jsonl")  # committed, the job stopped before archiving it
    landing.drop("next.jsonl")
    landing.read_by_spark(2, "next.jsonl")
    restarted = landing.archiver()
    restarted.after_commit(progress(2))
    assert landing.archived() == ["late.jsonl", "next.jsonl", "old.jsonl"]
    assert not caplog.records


def test_delete_removes_committed_files(tmp_path: Path) -> None:
    landing = Landing(tmp_path, CleanSource.DELETE)
    landing.drop("a.jsonl")
    landing.drop("b.jsonl")
    landing.read_by_spark(0, "a.jsonl")
    landing.archiver().after_commit(progress(0))
    assert landing.waiting() == ["b.jsonl"]
    assert landing.archived() == []


def test_a_name_used_twice_keeps_both_archived_files(tmp_path: Path) -> None:
    landing = Landing(tmp_path)
    archiver = landing.archiver()
    landing.drop("same.jsonl")
    landing.read_by_spark(0, "same.jsonl")
    archiver.after_commit(progress(0))
    landing.drop("same.jsonl")
    landing.read_by_spark(1, "same.jsonl")
    archiver.after_commit(progress(1))
    assert landing.archived() == ["same.jsonl", "same.jsonl.1"]


def test_a_move_that_fails_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    landing = Landing(tmp_path)
    landing.drop("a.jsonl")
    landing.read_by_spark(0, "a.jsonl")

    def refuse(source: object, target: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "rename", refuse)
    landing.archiver().after_commit(progress(0))
    assert landing.waiting() == ["a.jsonl"]
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "could not archive" in caplog.text
    assert "a.jsonl" in caplog.text


def test_only_landing_directories_with_a_local_checkpoint_get_an_archiver(
    tmp_path: Path,
) -> None:
    """Other checkpoints (dbfs:/, s3://) keep Spark's cleanSource (sources.py)."""
    source = SourceOptions(format="jsonl", path=str(tmp_path))
    assert LandingArchiver.for_source(source, str(tmp_path / "ck")) is not None
    assert LandingArchiver.for_source(source, (tmp_path / "ck").as_uri()) is not None
    assert LandingArchiver.for_source(source, "dbfs:/checkpoints/coordinator") is None
    assert LandingArchiver.for_source(replace(source, clean_source=CleanSource.OFF), "ck") is None
    assert LandingArchiver.for_source(replace(source, format="kafka"), "ck") is None
    assert local_path("file:///tmp/a%20b/c.jsonl") == Path("/tmp/a b/c.jsonl")


def test_progress_without_a_file_source_offset_is_ignored(tmp_path: Path) -> None:
    landing = Landing(tmp_path)
    landing.drop("a.jsonl")
    archiver = landing.archiver()
    archiver.after_commit(progress(None))  # no file read yet
    archiver.after_commit(progress(0, description="KafkaV2[Subscribe[t]]"))
    assert landing.waiting() == ["a.jsonl"]
