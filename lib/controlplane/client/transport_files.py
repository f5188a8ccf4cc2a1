"""FileTransport: requests into the engine's landing directories, answers from its Delta tables.

* Sending: requests are buffered for ``linger_ms`` and written as one JSON Lines file per stream
  and flush, atomically: a hidden temporary file (``.name.tmp``, ignored by the engine's
  ``*.jsonl`` glob) is written, flushed to disk, then renamed into place, so the engine never
  reads half a file.
* Receiving: one reader thread polls the ``decisions`` and ``quota_decisions`` tables every
  ``poll_interval_ms``; when a table has a new version it loads only that (``update_incremental``)
  and reads only the data files it has not read before (the tables are append-only), then
  routes each row to the caller waiting for its ``event_id``. Rows nobody waits for (other
  clients, late answers) are dropped.

Latency: an answer needs the file to be picked up by a micro-batch, the batch to commit its
Delta version, and the next table poll: about one trigger interval plus one batch time plus
``poll_interval_ms`` (docs/client.md).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from controlplane.client.clock import Clock
from controlplane.client.transport import AnswerCallback, AnswerRoutes, Stream

log = logging.getLogger(__name__)

ANSWER_TABLES = {Stream.GROUP: "decisions", Stream.QUOTA: "quota_decisions"}


class _TableFollower:
    """Reads the rows of the data files a Delta table added since the last look."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._table: Any = None
        self._version: int | None = None
        self._seen_files: set[str] = set()

    def new_rows(self) -> list[dict[str, Any]]:
        from deltalake import DeltaTable

        if self._table is None:
            if not DeltaTable.is_deltatable(str(self.path)):
                return []
            self._table = DeltaTable(str(self.path))
        else:
            self._table.update_incremental()
        version = self._table.version()
        if version == self._version:
            return []
        self._version = version
        current = self._table.file_uris()
        self._seen_files.intersection_update(current)  # bounded by the table's live files
        files = [uri for uri in current if uri not in self._seen_files]
        if not files:
            return []
        import pyarrow.parquet as pq

        rows: list[dict[str, Any]] = []
        for uri in files:
            rows.extend(pq.read_table(uri).to_pylist())
            self._seen_files.add(uri)
        return rows


class FileTransport:
    def __init__(
        self,
        clock: Clock,
        landing: Mapping[Stream, str | Path],
        tables_root: str | Path,
        *,
        poll_interval_ms: int = 200,
        linger_ms: int = 50,
    ) -> None:
        self.clock = clock
        self.routes = AnswerRoutes()
        self._landing = {stream: Path(path) for stream, path in landing.items()}
        for path in self._landing.values():
            path.mkdir(parents=True, exist_ok=True)
        root = Path(tables_root)
        self._followers = {s: _TableFollower(root / name) for s, name in ANSWER_TABLES.items()}
        self._poll_interval_ms = poll_interval_ms
        self._linger_ms = linger_ms
        self._lock = threading.Lock()
        self._buffers: dict[Stream, list[str]] = {stream: [] for stream in self._landing}
        self._closed = False
        self._sequence = itertools.count()
        self._prefix = uuid.uuid4().hex[:8]
        self.files_written = 0
        self.rows_read = 0
        self._writer = clock.spawn(self._write_loop, "landing-writer")
        self._reader = clock.spawn(self._read_loop, "answer-reader")

    def send(self, stream: Stream, request: Mapping[str, Any], on_answer: AnswerCallback) -> None:
        if stream not in self._landing:
            raise ValueError(f"no landing directory configured for the {stream} stream")
        line = json.dumps(request, separators=(",", ":"))
        self.routes.add(str(request["event_id"]), on_answer)
        with self._lock:
            if self._closed:
                raise RuntimeError("the transport is closed")
            self._buffers[stream].append(line)
        self.clock.notify()

    def forget(self, event_id: str) -> None:
        self.routes.forget(event_id)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self.clock.notify()
        for thread in (self._writer, self._reader):
            self.clock.join(thread, 5_000)
        self._flush()

    def _pending(self) -> bool:
        return self._closed or any(self._buffers.values())

    def _write_loop(self) -> None:
        while not self._closed:
            self.clock.wait_for(self._pending, None if self._closed else 1_000)
            if self._closed:
                return
            self.clock.sleep(self._linger_ms)  # gather what arrives meanwhile into one file
            self._flush()

    def _flush(self) -> None:
        with self._lock:
            batches = {s: lines for s, lines in self._buffers.items() if lines}
            self._buffers = {stream: [] for stream in self._landing}
        for stream, lines in batches.items():
            self._write_file(self._landing[stream], lines)
        if batches:
            self.clock.notify()

    def _write_file(self, directory: Path, lines: list[str]) -> None:
        name = f"{self.clock.now_ms()}-{self._prefix}-{next(self._sequence):08d}.jsonl"
        temporary = directory / f".{name}.tmp"
        with open(temporary, "w", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, directory / name)
        self.files_written += 1

    def _read_loop(self) -> None:
        while not self._closed:
            for follower in self._followers.values():
                try:
                    rows = follower.new_rows()
                except Exception as error:  # a table being written or vacuumed: try again
                    log.warning("reading %s failed: %s", follower.path, error)
                    continue
                self.rows_read += len(rows)
                for row in rows:
                    self.routes.deliver(row)
            self.clock.wait_for(lambda: self._closed, self._poll_interval_ms)
