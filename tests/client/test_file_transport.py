"""FileTransport without Spark: atomic landing files, incremental answers from a Delta table."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from controlplane.client.clock import RealClock
from controlplane.client.timeouts import ClientTimeoutError
from controlplane.client.transport import Requester, Stream
from controlplane.client.transport_files import FileTransport


def _answer_table(root: Path, rows: list[dict[str, object]]) -> None:
    table = pa.Table.from_pylist(
        rows,
        schema=pa.schema(
            [("event_id", pa.string()), ("error", pa.string()), ("batch_id", pa.int64())]
        ),
    )
    write_deltalake(str(root / "decisions"), table, mode="append")


def test_requests_land_atomically_and_answers_come_back_by_event_id(tmp_path: Path) -> None:
    clock = RealClock()
    landing = {Stream.GROUP: tmp_path / "landing" / "coordinator", Stream.QUOTA: tmp_path / "q"}
    transport = FileTransport(clock, landing, tmp_path / "tables", poll_interval_ms=20)
    requester = Requester(transport, clock, "c1")
    try:
        call = requester.start(Stream.GROUP, {"type": "describe", "group_id": "g"}, 10_000)
        assert clock.wait_for(lambda: any(landing[Stream.GROUP].glob("*.jsonl")), 5_000)
        files = list(landing[Stream.GROUP].iterdir())
        assert [f.suffix for f in files] == [".jsonl"]  # no temporary file left behind
        sent = json.loads(files[0].read_text())
        assert sent["event_id"] == call.event_id
        assert sent["type"] == "describe"
        _answer_table(
            tmp_path / "tables", [{"event_id": "someone-else", "error": "NONE", "batch_id": 0}]
        )
        _answer_table(
            tmp_path / "tables", [{"event_id": call.event_id, "error": "NONE", "batch_id": 1}]
        )
        requester.wait(call)
        assert call.result()["error"] == "NONE"
        assert transport.rows_read == 2  # each data file read once
    finally:
        transport.close()


def test_unanswered_request_times_out_and_many_requests_share_a_file(tmp_path: Path) -> None:
    clock = RealClock()
    landing = {Stream.GROUP: tmp_path / "c"}
    transport = FileTransport(
        clock, landing, tmp_path / "tables", poll_interval_ms=20, linger_ms=200
    )
    requester = Requester(transport, clock, "c1")
    try:
        threads = [
            threading.Thread(
                target=requester.call,
                args=(Stream.GROUP, {"type": "describe", "group_id": "g"}, 300),
            )
            for _ in range(5)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        def landed() -> list[str]:
            return [
                line
                for f in landing[Stream.GROUP].glob("*.jsonl")
                for line in f.read_text().splitlines()
            ]

        # The writer lingers 200 ms, then writes and syncs: on a loaded machine that can end
        # after the callers' 300 ms have run out, so wait for it (bounded) rather than race it.
        deadline = time.monotonic() + 10
        while len(landed()) < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(landed()) == 5
        assert transport.files_written < 5
        call = requester.call(Stream.GROUP, {"type": "describe", "group_id": "g"}, 50)
        try:
            call.result()
            raise AssertionError("expected a timeout")
        except ClientTimeoutError:
            pass
    finally:
        transport.close()
