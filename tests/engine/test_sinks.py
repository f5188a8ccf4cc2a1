"""delta-rs sinks: exactly once per (app id, batch id), appends and the groups MERGE."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from controlplane.io.sinks import (
    DeltaRsWriter,
    UnportableTable,
    check_portable,
    is_delta_conflict,
    merge_retrying,
    protocol_of,
    to_arrow,
)


def decision(event_id: str, batch_id: int) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "group_id": "g",
        "type": "heartbeat",
        "member_id": "m",
        "error_code": 0,
        "error": "NONE",
        "offsets": [{"topic": "t", "partition": 0, "offset": 5, "metadata": None, "error_code": 0}],
        "decided_at_ms": 10,
        "batch_id": batch_id,
        "processed_at_ms": 99,
    }


def group(
    group_id: str, state: str, *, deleted: bool = False, generation: int = 1
) -> dict[str, Any]:
    return {
        "group_id": group_id,
        "group_state": state,
        "generation_id": generation,
        "members": [{"member_id": "m", "client_id": "c", "client_host": "h", "offline": False}],
        "updated_at_ms": 5,
        "deleted": deleted,
        "batch_id": 0,
        "processed_at_ms": 0,
    }


def rows(path: Path) -> list[dict[str, Any]]:
    return DeltaTable(str(path)).to_pyarrow_table().to_pylist()


def test_a_replayed_batch_is_skipped(tmp_path: Path) -> None:
    writer = DeltaRsWriter(tmp_path, "app-1")
    assert writer.write("decisions", [decision("a", 0)], 0)
    assert writer.write("decisions", [decision("b", 1)], 1)
    assert not writer.write("decisions", [decision("b", 1)], 1)  # replay after a crash
    assert not writer.write("decisions", [decision("a", 0)], 0)
    assert sorted(r["event_id"] for r in rows(tmp_path / "decisions")) == ["a", "b"]
    assert writer.committed_version("decisions") == 1


def test_another_app_id_is_not_deduplicated_against(tmp_path: Path) -> None:
    DeltaRsWriter(tmp_path, "app-1").write("decisions", [decision("a", 0)], 0)
    assert DeltaRsWriter(tmp_path, "app-2").write("decisions", [decision("a2", 0)], 0)
    assert len(rows(tmp_path / "decisions")) == 2


def test_nested_fields_round_trip_with_the_schema(tmp_path: Path) -> None:
    DeltaRsWriter(tmp_path, "app").write("decisions", [decision("a", 0)], 0)
    (row,) = rows(tmp_path / "decisions")
    assert row["offsets"] == [
        {"topic": "t", "partition": 0, "offset": 5, "metadata": None, "error_code": 0}
    ]
    assert row["leader_id"] is None


def test_append_tables_are_append_only(tmp_path: Path) -> None:
    DeltaRsWriter(tmp_path, "app").write("decisions", [decision("a", 0)], 0)
    table = DeltaTable(str(tmp_path / "decisions"))
    assert table.metadata().configuration.get("delta.appendOnly") == "true"
    with pytest.raises(Exception, match=r"(?i)append"):
        table.delete("event_id = 'a'")


def test_groups_merge_inserts_updates_and_deletes(tmp_path: Path) -> None:
    writer = DeltaRsWriter(tmp_path, "app")
    writer.write("groups", [group("g1", "Stable"), group("g2", "Empty")], 0)
    writer.write(
        "groups",
        [
            group("g1", "PreparingRebalance", generation=2),
            group("g2", "Dead", deleted=True),
            group("g3", "Empty"),
        ],
        1,
    )
    assert not writer.write("groups", [group("g1", "Dead", deleted=True)], 1)  # replay
    got = {r["group_id"]: (r["group_state"], r["generation_id"]) for r in rows(tmp_path / "groups")}
    assert got == {"g1": ("PreparingRebalance", 2), "g3": ("Empty", 1)}


def test_the_last_row_of_a_group_in_a_batch_wins(tmp_path: Path) -> None:
    writer = DeltaRsWriter(tmp_path, "app")
    writer.write("groups", [group("g", "Empty"), group("g", "Stable", generation=3)], 0)
    assert [(r["group_state"], r["generation_id"]) for r in rows(tmp_path / "groups")] == [
        ("Stable", 3)
    ]


def test_a_deleted_group_never_seen_is_not_inserted(tmp_path: Path) -> None:
    writer = DeltaRsWriter(tmp_path, "app")
    writer.write("groups", [group("a", "Empty")], 0)
    writer.write("groups", [group("b", "Dead", deleted=True)], 1)
    assert [r["group_id"] for r in rows(tmp_path / "groups")] == ["a"]


def test_empty_batches_commit_nothing(tmp_path: Path) -> None:
    assert not DeltaRsWriter(tmp_path, "app").write("decisions", [], 0)
    assert not (tmp_path / "decisions").exists()


def test_ints_widen_to_double_columns() -> None:
    table = to_arrow(
        "quota_decisions", [{"event_id": "e", "rate_per_s": 10, "throttle_time_ms": 0}]
    )
    assert table.column("rate_per_s").to_pylist() == [10.0]


class CountingOpens:
    """Counts the tables opened, by whatever name delta-rs or the writer opens them (each open
    replays the log): ``deltalake.table.DeltaTable`` is what ``write_deltalake`` opens a path
    with."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from deltalake.table import DeltaTable as Table

        self.opened: list[str] = []
        real, opened = Table.__init__, self.opened

        def counted(table: Any, uri: Any, *args: Any, **kwargs: Any) -> None:
            opened.append(Path(str(uri)).name)
            real(table, uri, *args, **kwargs)

        monkeypatch.setattr(Table, "__init__", counted)


def test_a_writer_opens_each_table_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    counting = CountingOpens(monkeypatch)
    writer = DeltaRsWriter(tmp_path, "app")
    for batch in range(4):
        assert writer.write("decisions", [decision(f"e{batch}", batch)], batch)
        assert writer.write("groups", [group(f"g{batch}", "Stable")], batch)
    assert not writer.write("decisions", [decision("e3", 3)], 3)  # a replay still skips
    # per table: the first write looks for it (and creates it), the second opens it, no other
    assert sorted(counting.opened) == ["decisions", "decisions", "groups", "groups"]
    assert len(rows(tmp_path / "decisions")) == 4
    assert sorted(r["group_id"] for r in rows(tmp_path / "groups")) == ["g0", "g1", "g2", "g3"]


def test_a_kept_table_sees_what_others_committed(tmp_path: Path) -> None:
    writer = DeltaRsWriter(tmp_path, "app")
    writer.write("groups", [group("g1", "Stable")], 0)
    writer.write("groups", [group("g2", "Stable")], 1)  # now kept open
    DeltaRsWriter(tmp_path, "other").write("groups", [group("x", "Empty")], 0)
    DeltaTable(str(tmp_path / "groups")).optimize.compact()  # the maintenance job
    writer.write("groups", [group("g1", "Dead", deleted=True), group("x", "Stable")], 2)
    got = {r["group_id"]: r["group_state"] for r in rows(tmp_path / "groups")}
    assert got == {"g2": "Stable", "x": "Stable"}
    # the same app id in another writer (a restarted query) skips what this one wrote, and
    # this one, kept open, skips what that one wrote
    restarted = DeltaRsWriter(tmp_path, "app")
    assert not restarted.write("groups", [group("g9", "Empty")], 2)
    assert writer.write("decisions", [decision("d1", 1)], 1)
    assert writer.write("decisions", [decision("d2", 2)], 2)  # now kept open
    assert restarted.write("decisions", [decision("d3", 3)], 3)
    assert not writer.write("decisions", [decision("d3", 3)], 3)
    assert sorted(r["batch_id"] for r in rows(tmp_path / "decisions")) == [1, 2, 3]
    assert writer.committed_version("groups") == 2


def test_a_failed_write_opens_the_table_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import deltalake

    writer = DeltaRsWriter(tmp_path, "app")
    writer.write("decisions", [decision("a", 0)], 0)
    writer.write("decisions", [decision("b", 1)], 1)
    real = deltalake.write_deltalake

    def failing(*args: Any, **kwargs: Any) -> None:
        raise OSError("the store went away")

    monkeypatch.setattr(deltalake, "write_deltalake", failing)
    with pytest.raises(OSError, match="went away"):
        writer.write("decisions", [decision("c", 2)], 2)
    monkeypatch.setattr(deltalake, "write_deltalake", real)
    counting = CountingOpens(monkeypatch)
    assert writer.write("decisions", [decision("c", 2)], 2)  # the Spark retry of the batch
    assert counting.opened == ["decisions"]
    assert sorted(r["event_id"] for r in rows(tmp_path / "decisions")) == ["a", "b", "c"]


class CommitsUnderTheMerge(DeltaRsWriter):
    """Another writer commits (a row, then a compaction, as the maintenance job does) after the
    MERGE read its snapshot, ``races`` times: a real delta-rs commit conflict."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, "app")
        self.races = 0
        self.opened = 0
        self.other = DeltaRsWriter(root, "other")

    def _open(self, table: str) -> Any:
        snapshot = super()._open(table)
        self.opened += 1
        if self.races:
            self.races -= 1
            self.other.write("groups", [group(f"x{self.opened}", "Empty")], self.opened)
            DeltaTable(self.path(table)).optimize.compact()
        return snapshot


def test_a_merge_that_loses_a_commit_race_runs_again_on_the_new_snapshot(tmp_path: Path) -> None:
    writer = CommitsUnderTheMerge(tmp_path)
    writer.write("groups", [group("g1", "Stable")], 0)
    writer.write("groups", [group("g2", "Stable")], 1)
    writer.races, writer.opened = 2, 0
    assert writer.write("groups", [group("g1", "Dead", deleted=True)], 2)
    assert writer.opened == 3  # lost twice, then committed
    assert sorted(r["group_id"] for r in rows(tmp_path / "groups")) == ["g2", "x1", "x2"]
    assert writer.committed_version("groups") == 2


def test_a_merge_that_keeps_losing_fails_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deltalake.exceptions import CommitFailedError

    monkeypatch.setattr("controlplane.io.sinks.MERGE_RETRY_BACKOFF_S", 0.0)
    writer = CommitsUnderTheMerge(tmp_path)
    writer.write("groups", [group("g1", "Stable")], 0)
    writer.races = 100
    with pytest.raises(CommitFailedError):
        writer.write("groups", [group("g1", "Dead", deleted=True)], 1)
    assert writer.opened == 5
    assert writer.committed_version("groups") == 0  # nothing of batch 1: the restart redoes it


LEGACY = {"delta.minReaderVersion": "1"}


@pytest.mark.parametrize(
    ("properties", "features", "reader", "portable"),
    [
        # a legacy protocol lists no features: its writer version implies them
        ({**LEGACY, "delta.minWriterVersion": "2"}, ["appendOnly", "invariants"], 1, True),
        (
            {**LEGACY, "delta.minWriterVersion": "4"},
            ["appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"],
            1,
            True,
        ),
        (
            {"delta.minReaderVersion": "2", "delta.minWriterVersion": "5"},
            [
                "appendOnly",
                "invariants",
                "checkConstraints",
                "changeDataFeed",
                "generatedColumns",
                "columnMapping",
            ],
            2,
            False,
        ),
        (
            {"delta.minReaderVersion": "2", "delta.minWriterVersion": "6"},
            [
                "appendOnly",
                "invariants",
                "checkConstraints",
                "changeDataFeed",
                "generatedColumns",
                "columnMapping",
                "identityColumns",
            ],
            2,
            False,
        ),
        # a table-features protocol lists each one
        (
            {
                **LEGACY,
                "delta.minWriterVersion": "7",
                "delta.feature.appendOnly": "supported",
                "delta.feature.changeDataFeed": "supported",
                "delta.enableChangeDataFeed": "true",
            },
            ["appendOnly", "changeDataFeed"],
            1,
            True,
        ),
        (
            {
                "delta.minReaderVersion": "3",
                "delta.minWriterVersion": "7",
                "delta.feature.deletionVectors": "supported",
            },
            ["deletionVectors"],
            3,
            False,
        ),
        ({**LEGACY, "delta.minWriterVersion": "7"}, [], 1, True),
    ],
)
def test_a_tables_features_are_read_from_its_properties(
    properties: dict[str, str], features: list[str], reader: int, portable: bool
) -> None:
    found, found_reader = protocol_of(properties)
    assert sorted(found) == sorted(features)
    assert found_reader == reader
    if portable:
        check_portable("t", found, found_reader)
    else:
        with pytest.raises(UnportableTable):
            check_portable("t", found, found_reader)


# -- which failures of the native writer's MERGE are commit conflicts -------------------------
# delta-spark's Python package turns Delta's JVM exceptions into delta.exceptions classes; where
# it cannot (delta-spark 4.0.0 ships without that module), Spark raises a Py4JJavaError around
# the JVM exception. A conflict is recognised either way, and nothing else is.


class JavaClass:
    """A JVM class as Py4J shows it: a name and a superclass."""

    def __init__(self, names: list[str]) -> None:
        self.names = names

    def getName(self) -> str:
        return self.names[0]

    def getSuperclass(self) -> JavaClass | None:
        return JavaClass(self.names[1:]) if len(self.names) > 1 else None


class JavaThrowable:
    """A JVM exception as Py4J shows it (what Py4JJavaError holds)."""

    _target_id = "o42"

    def __init__(self, *names: str) -> None:
        self.kind = JavaClass([*names, "java.lang.RuntimeException", "java.lang.Object"])

    def getClass(self) -> JavaClass:
        return self.kind


def py4j_error(*java_names: str) -> Exception:
    from py4j.protocol import Py4JJavaError

    return Py4JJavaError(
        "An error occurred while calling o123.execute.\n", JavaThrowable(*java_names)
    )


DELTA_APPEND_CONFLICT = (
    "io.delta.exceptions.ConcurrentAppendException",
    "org.apache.spark.sql.delta.ConcurrentAppendException",
    "org.apache.spark.sql.delta.DeltaConcurrentModificationException",
    "java.util.ConcurrentModificationException",
)


@pytest.mark.parametrize(
    ("java_names", "conflict"),
    [
        (DELTA_APPEND_CONFLICT, True),
        (("io.delta.exceptions.ProtocolChangedException",), True),
        (("org.apache.spark.sql.delta.MetadataChangedException",), True),
        (("org.apache.spark.sql.AnalysisException",), False),
        (("java.util.ConcurrentModificationException",), False),
        (("com.example.ConcurrentAppendException",), False),  # Delta's name, not Delta's class
    ],
)
def test_a_jvm_exception_is_a_conflict_by_its_delta_class(
    java_names: tuple[str, ...], conflict: bool
) -> None:
    assert is_delta_conflict(py4j_error(*java_names)) is conflict


def test_a_converted_delta_exception_is_a_conflict_by_its_python_class() -> None:
    # What delta-spark 4.4's delta.exceptions raises: a class of that module (or a subclass).
    converted = type("ConcurrentAppendException", (Exception,), {})
    converted.__module__ = "delta.exceptions.captured"
    subclass = type("Specific", (converted,), {})
    assert is_delta_conflict(converted("Files were added"))
    assert is_delta_conflict(subclass("Files were added"))
    elsewhere = type("ConcurrentAppendException", (Exception,), {})
    assert not is_delta_conflict(elsewhere("not Delta's"))
    assert not is_delta_conflict(ValueError("ConcurrentAppendException"))


def test_a_merge_runs_again_after_a_conflict_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("controlplane.io.sinks.MERGE_RETRY_BACKOFF_S", 0.0)
    failures = [py4j_error(*DELTA_APPEND_CONFLICT), py4j_error(*DELTA_APPEND_CONFLICT)]
    calls: list[int] = []

    def merge() -> None:
        calls.append(1)
        if failures:
            raise failures.pop()

    merge_retrying(merge, is_delta_conflict, "groups", 7)
    assert len(calls) == 3  # lost twice, then committed

    def broken() -> None:
        calls.append(1)
        raise py4j_error("org.apache.spark.sql.AnalysisException")

    from py4j.protocol import Py4JJavaError

    calls.clear()
    with pytest.raises(Py4JJavaError):
        merge_retrying(broken, is_delta_conflict, "groups", 8)
    assert len(calls) == 1  # not a conflict: the batch fails at once
