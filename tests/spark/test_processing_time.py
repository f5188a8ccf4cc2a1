"""The coordinator in processing-time mode on the real runner: sessions really expire, a restart
from the checkpoint loses and duplicates nothing (between batches and mid-batch), and a
restart longer than the failover gap resets sessions instead of expiring a healthy member."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from controlplane.core.config import parse_settings
from controlplane.engine import queries
from controlplane.engine.adapter import StateFormat
from controlplane.engine.checkpoints import state_format_from_spark, state_format_of
from controlplane.engine.keying import shard_of
from controlplane.engine.options import EngineOptions, Keying
from controlplane.engine.queries import build_coordinator_query
from controlplane.engine.runs import parse_runs, plan_run_start, record_run_start
from controlplane.engine.session import STATE_CODEC_KEY
from controlplane.io import checkpoint as checkpoint_files
from controlplane.io import sinks
from controlplane.io.checkpoint import RUNS_RECORD
from controlplane.io.options import CleanSource, SourceOptions
from spark.conftest import drop_events, read_table, wait_for

pytestmark = pytest.mark.spark

PROTOCOLS = [{"name": "range", "metadata": "AAEAAAABAAZvcmRlcnM="}]
SETTINGS = parse_settings({"group.initial.rebalance.delay.ms": 0})


def join(event_id: str, group: str, session_ms: int = 6000) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "event_time_ms": int(time.time() * 1000),
        "type": "join",
        "group_id": group,
        "member_id": "",
        "client_id": "app",
        "session_timeout_ms": session_ms,
        "rebalance_timeout_ms": session_ms,
        "protocol_type": "consumer",
        "protocols": PROTOCOLS,
        "request_version": 3,
    }


def request(kind: str, event_id: str, group: str, member: str, generation: int) -> dict[str, Any]:
    event: dict[str, Any] = {
        "event_id": event_id,
        "event_time_ms": int(time.time() * 1000),
        "type": kind,
        "group_id": group,
        "member_id": member,
        "generation_id": generation,
    }
    if kind == "sync":
        event["assignments"] = [{"member_id": member, "assignment": "AAEAAAABAAZvcmRlcnM="}]
    return event


def options_for(
    tmp_path: Path, *, failover_gap_ms: int = 30_000, writer: str = "delta-rs"
) -> EngineOptions:
    return EngineOptions(
        trigger_interval_ms=500,
        keying=Keying.SHARD,
        shards=4,
        failover_gap_ms=failover_gap_ms,
        checkpoint_root=str(tmp_path / "checkpoints"),
        tables_root=str(tmp_path / "tables"),
        writer=writer,
        coordinator_source=SourceOptions(
            format="jsonl", path=str(tmp_path / "landing"), clean_source=CleanSource.DELETE
        ),
    )


def decision(tables: Path, event_id: str, query: Any) -> dict[str, Any]:
    rows = wait_for(
        lambda: [r for r in read_table(tables / "decisions") if r["event_id"] == event_id],
        query,
        what=f"the answer to {event_id}",
    )
    assert len(rows) == 1, f"{event_id} answered {len(rows)} times"
    return rows[0]


def start(spark: Any, options: EngineOptions) -> Any:
    return build_coordinator_query(spark, SETTINGS, options=options).start()


def warm_up(tables: Path, landing: Path, query: Any) -> None:
    """The first stateful batch of a query takes many seconds: let it pass before timing."""
    drop_events(
        landing, [{"event_id": "warm-up", "event_time_ms": 1, "type": "describe", "group_id": "w"}]
    )
    decision(tables, "warm-up", query)


def stable_member(tables: Path, landing: Path, query: Any, group: str, session_ms: int) -> str:
    warm_up(tables, landing, query)
    drop_events(landing, [join(f"{group}-j1", group, session_ms)])
    joined = decision(tables, f"{group}-j1", query)
    assert joined["error"] == "NONE"
    member = str(joined["member_id"])
    drop_events(landing, [request("sync", f"{group}-s1", group, member, joined["generation_id"])])
    assert decision(tables, f"{group}-s1", query)["error"] == "NONE"
    return member


def test_a_silent_member_is_removed_and_the_group_rebalances(spark: Any, tmp_path: Path) -> None:
    options = options_for(tmp_path)
    tables, landing = Path(options.tables_root), tmp_path / "landing"
    query = start(spark, options)
    try:
        member = stable_member(tables, landing, query, "silent", 6000)
        removed = wait_for(
            lambda: [
                r
                for r in read_table(tables / "group_events")
                if r["kind"] == "member_removed" and r["member_id"] == member
            ],
            query,
            what="the session timeout",
        )
        assert [r["reason"] for r in removed] == ["session_timeout"]
        kinds = [
            r["kind"]
            for r in read_table(tables / "group_events")
            if r["at_ms"] >= removed[0]["at_ms"]
        ]
        assert "rebalance_started" in kinds
        group = wait_for(
            lambda: [
                r
                for r in read_table(tables / "groups")
                if r["group_id"] == "silent" and not r["members"]
            ],
            query,
            what="the groups table to show the empty group",
        )
        assert group[0]["group_state"] == "Empty"
    finally:
        query.stop()


WRITERS = {"delta-rs": sinks.DeltaRsWriter, "native": sinks.NativeDeltaWriter}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_restart_between_batches_and_mid_batch_loses_and_duplicates_nothing(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    options = options_for(tmp_path, writer=writer)
    writer_class: Any = WRITERS[writer]
    tables, landing = Path(options.tables_root), tmp_path / "landing"
    query = start(spark, options)
    try:
        drop_events(landing, [join("a1", "ga"), join("a2", "gb")])
        decision(tables, "a1", query)
        decision(tables, "a2", query)
    finally:
        query.stop()
    # Between batches: events land while the job is down.
    drop_events(landing, [join("b1", "gc")])
    # Mid-batch: the next batch's group_events write fails, after decisions (native Delta,
    # one table at a time) or beside decisions and groups (delta-rs, side by side).
    real_write = writer_class.write
    crashed: list[int] = []

    def crash_once(self: Any, table: str, rows: Any, batch_id: int) -> bool:
        if table == "group_events" and rows and not crashed:
            crashed.append(batch_id)
            raise RuntimeError("simulated crash mid-batch")
        return real_write(self, table, rows, batch_id)

    monkeypatch.setattr(writer_class, "write", crash_once)
    query = start(spark, options)
    with pytest.raises(Exception, match="simulated crash"):
        query.awaitTermination(300)
    assert crashed
    monkeypatch.setattr(writer_class, "write", real_write)
    query = start(spark, options)
    try:
        decision(tables, "b1", query)
        events = wait_for(
            lambda: [r for r in read_table(tables / "group_events") if r["event_id"] == "b1"],
            query,
            what="b1's group events after the replayed batch",
        )
        assert events
    finally:
        query.stop()
    answered = [r["event_id"] for r in read_table(tables / "decisions")]
    assert sorted(answered) == ["a1", "a2", "b1"]  # nothing lost, nothing twice
    audit = [
        tuple(sorted((k, str(v)) for k, v in r.items() if k != "processed_at_ms"))
        for r in read_table(tables / "group_events")
    ]
    assert len(audit) == len(set(audit))  # the replayed batch did not write its rows twice
    assert {r["event_id"] for r in read_table(tables / "group_events")} >= {"a1", "a2", "b1"}


def test_a_restart_longer_than_the_failover_gap_resets_sessions(spark: Any, tmp_path: Path) -> None:
    options = options_for(tmp_path, failover_gap_ms=6_000)
    tables, landing = Path(options.tables_root), tmp_path / "landing"
    query = start(spark, options)
    try:
        member = stable_member(tables, landing, query, "fleet", 10_000)
        generation = decision(tables, "fleet-j1", query)["generation_id"]
    finally:
        query.stop()
    # Down until the member's session deadline is overdue by more than the gap: a running
    # engine would have fired it then, so the first batch after the restart resets sessions.
    time.sleep(24)
    query = start(spark, options)
    try:
        wait_for(lambda: query.recentProgress, query, what="a batch after the restart")
        drop_events(landing, [request("heartbeat", "fleet-h1", "fleet", member, generation)])
        assert decision(tables, "fleet-h1", query)["error"] == "NONE"
    finally:
        query.stop()
    removals = [r for r in read_table(tables / "group_events") if r["kind"] == "member_removed"]
    assert removals == []
    resets = [
        r for r in read_table(tables / "group_events") if r["reason"] == "coordinator_failover"
    ]
    assert resets, "the failover reset leaves a trace in the audit"


def capped_stable_member(
    spark: Any, tmp_path: Path, group: str, failover_gap_ms: int
) -> tuple[EngineOptions, str, int]:
    """A query whose source reads one file a batch (``max_files_per_trigger`` 1, the source's
    cap) makes a stable member of ``group`` (a 6-s session) and stops: its options, the member,
    and a time at or after the group's clock."""
    base = options_for(tmp_path, failover_gap_ms=failover_gap_ms)
    source = replace(base.coordinator_source, max_files_per_trigger=1)
    options = replace(base, coordinator_source=source)
    query = start(spark, options)
    try:
        member = stable_member(Path(options.tables_root), tmp_path / "landing", query, group, 6_000)
        return options, member, int(time.time() * 1000)
    finally:
        query.stop()


def arrived(landing: Path, event: dict[str, Any], arrival_ms: int) -> None:
    """``event`` dropped in a file that arrived at ``arrival_ms`` (while the job was down)."""
    path = drop_events(landing, [event])
    os.utime(path, ns=(arrival_ms * 1_000_000,) * 2)


def test_a_backlog_read_in_capped_batches_keeps_a_member_that_heartbeat_through_the_stop(
    spark: Any, tmp_path: Path
) -> None:
    """The member heartbeats every 2 s while the job is down; back, the job reads the waiting
    files one a batch (``max_files_per_trigger`` 1, the source's cap). Each batch ticks to the
    arrival of the file it read, not past the files still waiting: every heartbeat is answered.
    A tick at the batch time would have found the 6-s session over after the first file
    (adapter.processing_tick)."""
    options, member, synced_ms = capped_stable_member(spark, tmp_path, "backlog", 30_000)
    tables, landing = Path(options.tables_root), tmp_path / "landing"
    arrivals_ms = [synced_ms + 2_000 * n for n in range(1, 6)]  # to 10 s after the sync
    time.sleep(max(0.0, arrivals_ms[-1] / 1000 + 1 - time.time()))
    for n, arrival_ms in enumerate(arrivals_ms):
        beat = request("heartbeat", f"backlog-h{n}", "backlog", member, 1)
        arrived(landing, beat, arrival_ms)
    query = start(spark, options)
    try:
        answers = [decision(tables, f"backlog-h{n}", query) for n in range(len(arrivals_ms))]
    finally:
        query.stop()
    assert [a["error"] for a in answers] == ["NONE"] * len(arrivals_ms)
    assert [a["decided_at_ms"] for a in answers] == arrivals_ms
    audit = read_table(tables / "group_events")
    early = [r for r in audit if r["kind"] == "member_removed" and r["at_ms"] < arrivals_ms[-1]]
    assert early == []
    assert [r for r in audit if r["reason"] == "coordinator_failover"] == []


def test_a_restart_shorter_than_the_gap_loads_a_group_whose_heartbeats_wait_in_the_backlog(
    spark: Any, tmp_path: Path
) -> None:
    """Down about ten seconds (the gap set to ten minutes, so that only the new run's load can
    keep the member): the member's 6-s session ran out while the job was down, and its
    heartbeats wait in files a capped batch reads one at a time. The first batch after the
    restart that reads a file reads another group's, and calls the member's shard by its
    timeout with nothing to read: the new run loads the group (its sessions restart) rather
    than expiring the member, and every waiting heartbeat is answered. Before runs were
    recorded the member expired there (overdue by less than the gap) and all were refused."""
    options, member, synced_ms = capped_stable_member(spark, tmp_path, "reload", 600_000)
    tables, landing = Path(options.tables_root), tmp_path / "landing"
    other = next(
        g for g in (f"other-{n}" for n in range(99)) if shard_of(g, 4) != shard_of("reload", 4)
    )
    describe = {"event_id": "other-d", "event_time_ms": 0, "type": "describe", "group_id": other}
    arrived(landing, describe, synced_ms + 1_000)  # read first, alone
    arrivals_ms = [synced_ms + 2_000 * n for n in range(1, 5)]  # to 8 s after the sync
    time.sleep(max(0.0, arrivals_ms[-1] / 1000 + 1 - time.time()))
    for n, arrival_ms in enumerate(arrivals_ms):
        arrived(landing, request("heartbeat", f"reload-h{n}", "reload", member, 1), arrival_ms)
    query = start(spark, options)
    try:
        answers = [decision(tables, f"reload-h{n}", query) for n in range(len(arrivals_ms))]
    finally:
        query.stop()
    assert [a["error"] for a in answers] == ["NONE"] * len(arrivals_ms)
    audit = [r for r in read_table(tables / "group_events") if r["group_id"] == "reload"]
    [loaded] = [r for r in audit if r["reason"] == "coordinator_failover"]
    assert loaded["at_ms"] > synced_ms + 6_000  # the session had run out
    # the session the load gave may run out before the query stops (the member sent no more)
    early = [
        r for r in audit if r["kind"] == "member_removed" and r["at_ms"] < loaded["at_ms"] + 6_000
    ]
    assert early == []
    record = Path(options.checkpoint("coordinator")) / RUNS_RECORD
    first, second = parse_runs(record.read_text().splitlines())
    assert first < synced_ms < second <= loaded["at_ms"]  # loaded in the second run


def test_the_record_of_runs_of_a_checkpoint_spark_resolves_goes_through_spark(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a file system that is not Spark's local default (DBFS on Databricks) the record of
    runs is read with Spark's text source and appended to with its writer, and the last planned
    batch's time is read from Spark's offset log (glob characters in the path escaped)."""
    checkpoint = str(tmp_path / "run[1]")
    offsets = tmp_path / "run[1]" / "offsets"
    with monkeypatch.context() as elsewhere:
        elsewhere.setattr(checkpoint_files, "_default_fs_is_local", lambda _spark: False)
        assert plan_run_start(spark, checkpoint, 1_000) == (1_000,)
        record_run_start(spark, checkpoint, 1_000)
        offsets.mkdir()
        for batch, batch_ms in ((4, 8_000), (5, 9_500)):
            meta = {"batchWatermarkMs": 0, "batchTimestampMs": batch_ms, "conf": {}}
            (offsets / str(batch)).write_text(f"v1\n{json.dumps(meta)}\n{{}}\n")
        assert plan_run_start(spark, checkpoint, 2_000) == (1_000, 9_501)
        record_run_start(spark, checkpoint, 9_501)
        assert plan_run_start(spark, checkpoint, 20_000) == (1_000, 9_501, 20_000)
    assert (tmp_path / "run[1]" / RUNS_RECORD).is_dir()  # Spark's output, a part file a run
    assert plan_run_start(spark, checkpoint, 20_000) == (1_000, 9_501, 20_000)  # read here too


def test_sessions_survive_a_restart_shorter_than_the_failover_gap(
    spark: Any, tmp_path: Path
) -> None:
    options = options_for(tmp_path, failover_gap_ms=60_000)
    tables, landing = Path(options.tables_root), tmp_path / "landing"
    query = start(spark, options)
    try:
        member = stable_member(tables, landing, query, "steady", 30_000)
        generation = decision(tables, "steady-j1", query)["generation_id"]
    finally:
        query.stop()
    query = start(spark, options)  # back well within the 30 s session
    try:
        drop_events(landing, [request("heartbeat", "steady-h1", "steady", member, generation)])
        assert decision(tables, "steady-h1", query)["error"] == "NONE"
    finally:
        query.stop()
    audit = read_table(tables / "group_events")
    assert [r for r in audit if r["kind"] == "member_removed"] == []
    assert [r for r in audit if r["reason"] == "coordinator_failover"] == []  # no reset needed


def recorded_conf(checkpoint_root: str, key: str) -> str:
    """A setting as the checkpoint's offset log records it for the batch that ran last."""
    [offsets] = list(Path(checkpoint_root).glob("**/offsets"))
    last = max((p for p in offsets.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    return str(json.loads(last.read_text().splitlines()[1])["conf"][key])


@contextmanager
def session_setting(spark: Any, key: str, value: str) -> Iterator[None]:
    """``key`` set to ``value`` in the shared session, then back to what it was."""
    before = spark.conf.get(key)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        spark.conf.set(key, before)


def started_with(spark: Any, options: EngineOptions, key: str, value: str, group: str) -> str:
    """A stable member of ``group``, from a query started with ``key`` set to ``value``."""
    landing = Path(options.coordinator_source.path)
    with session_setting(spark, key, value):
        query = start(spark, options)
        try:
            return stable_member(Path(options.tables_root), landing, query, group, 60_000)
        finally:
            query.stop()


def known_after_a_restart(spark: Any, options: EngineOptions, group: str, member: str) -> None:
    """The query started again on its checkpoint answers ``member``'s heartbeat."""
    query = start(spark, options)
    try:
        drop_events(
            Path(options.coordinator_source.path),
            [request("heartbeat", f"{group}-h1", group, member, 1)],
        )
        tables = Path(options.tables_root)
        assert decision(tables, f"{group}-h1", query)["error"] == "NONE"  # the member is known
    finally:
        query.stop()


def test_a_checkpoint_keeps_its_state_partitions_when_the_setting_changes(
    spark: Any, tmp_path: Path
) -> None:
    # Spark records spark.sql.shuffle.partitions in the checkpoint's offset log and a restarted
    # query takes the recorded value: lowering engine.shuffle_partitions (conf/local.yaml went
    # from 4 to 2) leaves existing checkpoints as they were, and their state where it was.
    options = options_for(tmp_path)
    member = started_with(spark, options, "spark.sql.shuffle.partitions", "4", "kept")
    known_after_a_restart(spark, options, "kept", member)
    assert recorded_conf(options.checkpoint_root, "spark.sql.shuffle.partitions") == "4"


def test_a_checkpoint_keeps_the_state_codec_it_was_started_with(spark: Any, tmp_path: Path) -> None:
    # Local sessions write the state store's files with snappy (engine.session); a checkpoint
    # started with Spark's default, lz4, keeps reading and writing lz4 after the change, as
    # Spark records the codec in the offset log, and keeps its groups.
    assert spark.conf.get(STATE_CODEC_KEY) == "snappy"
    older = options_for(tmp_path / "older")
    member = started_with(spark, older, STATE_CODEC_KEY, "lz4", "lz4")
    known_after_a_restart(spark, older, "lz4", member)
    assert recorded_conf(older.checkpoint_root, STATE_CODEC_KEY) == "lz4"
    newer = options_for(tmp_path / "newer")
    query = start(spark, newer)
    try:
        drop_events(tmp_path / "newer" / "landing", [join("new-j1", "snappy")])
        decision(Path(newer.tables_root), "new-j1", query)
    finally:
        query.stop()
    assert recorded_conf(newer.checkpoint_root, STATE_CODEC_KEY) == "snappy"


def formats(spark: Any, checkpoint: str) -> tuple[StateFormat, StateFormat]:
    """The checkpoint's state format, read from its schema file and through Spark."""
    return state_format_of(spark, checkpoint), state_format_from_spark(spark, checkpoint)


def test_a_checkpoint_keeps_the_state_format_it_was_started_with(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint written before the state's text format (its blob a ``binary``) restarts
    with that format and its groups; a new one is started with the text format."""
    options = options_for(tmp_path)
    tables, landing = Path(options.tables_root), tmp_path / "landing"
    checkpoint = options.checkpoint("coordinator")
    text, binary = (StateFormat.TEXT,) * 2, (StateFormat.BINARY,) * 2
    assert formats(spark, checkpoint) == text  # nothing there yet
    with monkeypatch.context() as before:  # the build before: bytes in a binary
        before.setattr(queries, "existing_state_format", lambda *_args: StateFormat.BINARY)
        query = start(spark, options)
        try:
            member = stable_member(tables, landing, query, "older", 60_000)
        finally:
            query.stop()
    assert formats(spark, checkpoint) == binary
    query = start(spark, options)
    try:
        drop_events(landing, [request("heartbeat", "older-h1", "older", member, 1)])
        assert decision(tables, "older-h1", query)["error"] == "NONE"  # the member is known
    finally:
        query.stop()
    assert formats(spark, checkpoint) == binary
    fresh = options_for(tmp_path / "fresh")
    query = start(spark, fresh)
    try:
        warm_up(Path(fresh.tables_root), tmp_path / "fresh" / "landing", query)
    finally:
        query.stop()
    assert formats(spark, fresh.checkpoint("coordinator")) == text
