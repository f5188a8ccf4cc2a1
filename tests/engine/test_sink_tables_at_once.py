"""The sink writes a batch's tables side by side when its writer's tables are independent
(delta-rs), one at a time in a fixed order otherwise (native Delta), and a batch with a failed
table fails only after every other table's write has ended."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from controlplane.engine import batch, envelope, progress
from controlplane.engine.batch import BatchSink
from controlplane.io.sinks import DeltaRsWriter, NativeDeltaWriter
from engine.fakes import BatchFrame

TABLES = ("decisions", "group_events", "groups")


def a_batch() -> BatchFrame:
    """One row for each of TABLES."""
    return BatchFrame(
        envelope.envelope_table(
            [
                ("decisions", {"event_id": "e", "group_id": "g"}),
                ("group_events", {"group_id": "g", "at_ms": 1, "kind": "member_added"}),
                ("groups", {"group_id": "g", "group_state": "Stable", "deleted": False}),
            ]
        )
    )


class Writer:
    """Records each write's table and thread; ``meet`` makes the writes wait for each other."""

    kind = "test"

    def __init__(
        self, at_once: bool, meet: int = 0, fail: str | None = None, slow: str | None = None
    ) -> None:
        self.tables_at_once = at_once
        self.meeting = threading.Barrier(meet, timeout=10) if meet else None
        self.fail = fail
        self.slow = slow
        self.lock = threading.Lock()
        self.started: list[str] = []
        self.ended: list[str] = []
        self.threads: set[int] = set()

    def write(self, table: str, rows: Any, batch_id: int) -> bool:
        if not len(rows):
            return False
        with self.lock:
            self.started.append(table)
            self.threads.add(threading.get_ident())
        if self.meeting is not None:
            self.meeting.wait()  # broken (an error) unless all the writes run at once
        if table == self.fail:
            raise RuntimeError(f"{table}: simulated failure")
        if table == self.slow:
            time.sleep(0.5)  # still writing when the failure is known
        with self.lock:
            self.ended.append(table)
        return True


def sink_with(writer: Writer, name: str) -> BatchSink:
    sink = BatchSink(name, TABLES, "/nowhere", "/nowhere")
    sink.writer = lambda spark: writer  # type: ignore[method-assign]
    return sink


def test_independent_tables_are_written_side_by_side() -> None:
    writer = Writer(at_once=True, meet=len(TABLES))
    sink_with(writer, "at-once")(a_batch(), 1)
    assert sorted(writer.ended) == sorted(TABLES)
    assert len(writer.threads) == len(TABLES)
    assert progress.take("at-once", 1) != {}


def test_tables_of_a_writer_without_that_promise_are_written_one_at_a_time_in_order() -> None:
    writer = Writer(at_once=False)
    sink_with(writer, "in-order")(a_batch(), 2)
    assert writer.started == writer.ended == list(TABLES)
    assert writer.threads == {threading.get_ident()}  # the sink's own thread, no pool
    progress.take("in-order", 2)


def test_a_failed_table_fails_the_batch_after_the_others_are_written() -> None:
    writer = Writer(at_once=True, meet=len(TABLES), fail="group_events", slow="groups")
    with pytest.raises(RuntimeError, match="group_events: simulated failure"):
        sink_with(writer, "failing")(a_batch(), 3)
    assert sorted(writer.ended) == ["decisions", "groups"]
    assert progress.take("failing", 3) == {}  # the figures wait for the replayed batch


def test_the_writers_say_whether_their_tables_are_independent() -> None:
    assert DeltaRsWriter.tables_at_once is True
    # the native MERGE's transaction is set in the writer session's confs
    assert NativeDeltaWriter.tables_at_once is False


def test_sinks_built_again_reuse_the_process_s_writer_threads() -> None:
    """A driver that builds its query again (a notebook, a test) gets a new sink each time,
    and Spark holds each old one until the JVM lets its callback go; the writes of every sink
    run on the same threads, so none is left idle per sink."""
    threads: set[int] = set()
    sinks = []  # held, as Spark's foreachBatch holds them
    for attempt in range(len(TABLES) + 2):
        writer = Writer(at_once=True, meet=len(TABLES))
        name = f"rebuilt-{attempt}"
        sinks.append(sink_with(writer, name))
        sinks[-1](a_batch(), 1)
        assert len(writer.threads) == len(TABLES)  # still side by side
        threads |= writer.threads
        progress.take(name, 1)
    assert len(threads) <= batch._POOL_SIZES[batch.WRITE_THREADS]
    alive = [t for t in threading.enumerate() if t.name.startswith(batch.WRITE_THREADS)]
    assert len(alive) <= batch._POOL_SIZES[batch.WRITE_THREADS]
