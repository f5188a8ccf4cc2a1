"""The keying a checkpoint's state is under (engine.checkpoints.checkpoint_keys): recorded
when a query first starts, kept at every restart, and a changed keying or shard count refused
before the query starts; the record's file (io.checkpoint). On a local path, without Spark;
read and written through Spark, and a real restart, in tests/spark/test_shard_partitions.py."""

from __future__ import annotations

import base64
import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from controlplane.core.config import ConfigError
from controlplane.core.coordinator.runner import CoordinatorShard
from controlplane.engine import checkpoints
from controlplane.engine.adapter import StateFormat
from controlplane.engine.checkpoints import (
    STRAYS_TOLERATED,
    check_routed,
    checkpoint_keys,
    state_blobs,
    state_keys,
    tally_routing,
)
from controlplane.engine.keying import ShardNames, SparkKeys, balanced_names
from controlplane.engine.options import Keying
from controlplane.engine.queries import coordinator_routing_keys
from controlplane.io.checkpoint import KEYING_RECORD, RecordError, read_record, write_record
from coordinator.test_runner import CONFIG as COORDINATOR
from coordinator.test_runner import stable_member
from engine.test_checkpoints import NoSpark, OneSetting, Session


class LocalSpark(NoSpark):
    """A local session as the record sees it: its shuffle partitions, and a default file
    system on this machine, so the checkpoint's files are read and written directly (NoSpark
    refuses a read through Spark)."""

    def __init__(self, partitions: Any = "8") -> None:
        self.conf = OneSetting("spark.sql.shuffle.partitions", partitions)


def record(checkpoint: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((checkpoint / KEYING_RECORD).read_text())
    return loaded


def keys_of(checkpoint: Path, keying: Keying, shards: int, *, has_state: bool, **kw: Any) -> Any:
    """The keys of a local checkpoint with (``has_state``: a committed batch) or without state."""
    if has_state:
        (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
        (checkpoint / "commits" / "0").write_text("v1\n{}")
    existing = StateFormat.TEXT if has_state else None
    return checkpoint_keys(LocalSpark(**kw), str(checkpoint), keying, shards, existing=existing)


def test_a_new_checkpoint_gets_balanced_names_over_the_sessions_partitions(
    tmp_path: Path,
) -> None:
    checkpoint = tmp_path / "coordinator"  # not even created yet
    keys = keys_of(checkpoint, Keying.SHARD, 64, has_state=False, partitions="8")
    assert keys == SparkKeys(Keying.SHARD, 64, ShardNames.BALANCED, 8)
    assert record(checkpoint) == {
        "version": 1,
        "keying": "shard",
        "shards": 64,
        "shard_names": "balanced",
        "partitions": 8,
        "names": list(balanced_names(64, 8)),
    }


def test_a_restart_keeps_the_recorded_names_whatever_the_session_says_now(
    tmp_path: Path,
) -> None:
    """Spark keeps a checkpoint's state partitions too, so the names stay balanced."""
    first = keys_of(tmp_path, Keying.SHARD, 64, has_state=False, partitions="8")
    again = keys_of(tmp_path, Keying.SHARD, 64, has_state=True, partitions="2")
    assert again == first


@pytest.mark.parametrize("names", ["balanced", "plain"])
def test_the_recorded_names_are_used_as_written(tmp_path: Path, names: str) -> None:
    """A later build that found names another way must not rename a checkpoint's shards."""
    keys_of(tmp_path, Keying.SHARD, 4, has_state=False, partitions="2")
    written = record(tmp_path) | {"shard_names": names, "names": ["a", "b", "c", "d"]}
    (tmp_path / KEYING_RECORD).write_text(json.dumps(written))
    keys = keys_of(tmp_path, Keying.SHARD, 4, has_state=True)
    assert keys.shard_names == ("a", "b", "c", "d")
    assert keys.of("orders") == "abcd"[3845127662 % 4]


@pytest.mark.parametrize(
    ("keying", "shards", "said"),
    [
        (Keying.SHARD, 32, "shard keying with 32 shards"),
        (Keying.GROUP, 64, "group keying"),
    ],
)
def test_a_changed_keying_or_shard_count_is_refused_before_the_query_starts(
    tmp_path: Path, keying: Keying, shards: int, said: str
) -> None:
    keys_of(tmp_path, Keying.SHARD, 64, has_state=False)
    with pytest.raises(ConfigError, match="holds state under shard keying with 64 shards") as err:
        keys_of(tmp_path, keying, shards, has_state=True)
    assert f"the configuration says {said}" in str(err.value)
    assert "configure shard keying with 64 shards to restart this checkpoint" in str(err.value)


def test_group_keying_ignores_the_shard_count_and_the_partitions(tmp_path: Path) -> None:
    first = keys_of(tmp_path, Keying.GROUP, 64, has_state=False, partitions="auto")
    assert keys_of(tmp_path, Keying.GROUP, 16, has_state=True) == first
    with pytest.raises(ConfigError, match="holds state under group keying"):
        keys_of(tmp_path, Keying.SHARD, 64, has_state=True)


def test_state_without_a_record_keeps_the_plain_names_and_is_recorded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint started before the record was kept: its shards are under shard-<n>."""
    held = ["shard-3", "shard-17"]
    monkeypatch.setattr(checkpoints, "state_keys", held_keys(held))
    with caplog.at_level(logging.WARNING):
        keys = keys_of(tmp_path, Keying.SHARD, 64, has_state=True)
    assert keys == SparkKeys(Keying.SHARD, 64, ShardNames.PLAIN)
    assert keys.of("orders") == f"shard-{3845127662 % 64}"
    assert record(tmp_path)["shard_names"] == "plain"
    assert "no keying record" in caplog.text
    with pytest.raises(ConfigError, match="with 64 shards"):  # recorded from now on
        keys_of(tmp_path, Keying.SHARD, 8, has_state=True)


def held_keys(held: list[str]) -> Any:
    """checkpoints.state_keys over a state that holds ``held``."""

    def state_keys(
        _spark: Any,
        _checkpoint: str,
        *,
        outside: tuple[str, ...] = (),
        not_matching: str | None = None,
        limit: int = 3,
    ) -> list[str]:
        found = [k for k in held if k not in outside]
        if not_matching is not None:
            found = [k for k in found if not re.match(not_matching, k)]
        return sorted(found)[:limit]

    return state_keys


@pytest.mark.parametrize(
    ("held", "named"),
    [
        (["shard-3", "shard-64"], "shard-64"),  # more shards than configured
        (["shard-3.2"], "shard-3.2"),  # balanced names whose record is gone
        (["orders", "payments"], "orders, payments"),  # group keying
    ],
)
def test_state_without_a_record_under_other_names_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: list[str], named: str
) -> None:
    """No guess is recorded; the message says what the state holds."""
    monkeypatch.setattr(checkpoints, "state_keys", held_keys(held))
    with pytest.raises(ConfigError, match="not under the plain names of 64 shards") as err:
        keys_of(tmp_path, Keying.SHARD, 64, has_state=True)
    assert f"it holds {named}" in str(err.value)
    assert not (tmp_path / KEYING_RECORD).exists()


def test_group_keying_of_a_state_without_a_record_under_shard_names_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checkpoints, "state_keys", held_keys(["shard-0", "shard-1.5"]))
    with pytest.raises(ConfigError, match="it was started with shard keying"):
        keys_of(tmp_path, Keying.GROUP, 64, has_state=True)
    monkeypatch.setattr(checkpoints, "state_keys", held_keys(["shard-0", "orders"]))
    assert keys_of(tmp_path, Keying.GROUP, 64, has_state=True) == SparkKeys(Keying.GROUP, 64)


def shards_holding(groups: list[str], shards: int) -> list[tuple[str, Any]]:
    """checkpoints.state_blobs of a state started with ``shards`` plain shards holding
    ``groups``: a blob a shard, the base64 text of its group ids (see ``listed``)."""
    held: dict[str, list[str]] = {}
    for group in groups:
        held.setdefault(SparkKeys(Keying.SHARD, shards).of(group), []).append(group)
    return [(key, base64.b64encode(json.dumps(ids).encode()).decode()) for key, ids in held.items()]


def listed(data: bytes) -> list[str]:
    """The routing keys of a blob of ``shards_holding``."""
    ids = json.loads(data)
    if not isinstance(ids, list):
        raise ValueError("not a list")
    return ids


GROUPS = [f"group-{i}" for i in range(40)]


def before_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, blobs: list[tuple[str, Any]], shards: int
) -> SparkKeys:
    """The keys of a checkpoint started before the record, whose state holds ``blobs``,
    restarted with ``shards`` shards."""
    monkeypatch.setattr(checkpoints, "state_keys", held_keys([key for key, _ in blobs]))
    monkeypatch.setattr(checkpoints, "state_blobs", lambda _spark, _cp: iter(blobs))
    (tmp_path / "commits").mkdir(parents=True, exist_ok=True)
    (tmp_path / "commits" / "0").write_text("v1\n{}")
    return checkpoint_keys(
        LocalSpark(),
        str(tmp_path),
        Keying.SHARD,
        shards,
        existing=StateFormat.TEXT,
        routing_keys=listed,
    )


def test_a_raised_shard_count_over_a_checkpoint_without_a_record_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """16 shards' state holds only shard-0 ... shard-15, all among the plain names of 32:
    the groups themselves show that 32 would look for half of them under other shards."""
    blobs = shards_holding(GROUPS, 16)
    assert {key for key, _ in blobs} <= set(SparkKeys(Keying.SHARD, 16).shard_names)
    with pytest.raises(ConfigError, match="not under the shard 32 shards put them in") as err:
        before_the_record(tmp_path, monkeypatch, blobs, 32)
    message = str(err.value)
    moved = [
        g for g in GROUPS if SparkKeys(Keying.SHARD, 32).of(g) != SparkKeys(Keying.SHARD, 16).of(g)
    ]
    assert f"{len(moved)} of the {len(GROUPS)} groups" in message
    assert "it was started with 16 shards" in message
    assert not (tmp_path / KEYING_RECORD).exists()


def test_the_shard_count_a_checkpoint_was_started_with_passes_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every group under its shard; a state this build cannot read is left out, with a warning."""
    unreadable = [("shard-3", "not base64!"), ("shard-4", "e30="), ("shard-5", text_of([7]))]
    blobs = [*shards_holding(GROUPS, 16), *unreadable]
    with caplog.at_level(logging.WARNING):
        keys = before_the_record(tmp_path, monkeypatch, blobs, 16)
    assert keys == SparkKeys(Keying.SHARD, 16, ShardNames.PLAIN)
    assert record(tmp_path)["shards"] == 16
    assert "the state under shard-3 cannot be read" in caplog.text
    assert "the state under shard-4 cannot be read (not a list)" in caplog.text
    assert "the state under shard-5 cannot be read (a key that is not a text: 7)" in caplog.text


def text_of(ids: list[Any]) -> str:
    return base64.b64encode(json.dumps(ids).encode()).decode()


def test_strays_under_the_key_of_a_misread_line_are_kept_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A build before the misrouted check kept a line Spark read no group_id from under the
    key of "" (shard-0), in a group of its own: no sign of another shard count, however few
    the groups. The checkpoint restarts, and the warning names the stray."""
    stray = ("shard-0", text_of(["orders"]))  # 16 shards put "orders" in shard-14
    assert SparkKeys(Keying.SHARD, 16).of("") == "shard-0"
    for groups in (GROUPS, GROUPS[:2]):
        caplog.clear()
        (tmp_path / KEYING_RECORD).unlink(missing_ok=True)
        with caplog.at_level(logging.WARNING):
            keys = before_the_record(
                tmp_path, monkeypatch, [*shards_holding(groups, 16), stray], 16
            )
        assert keys == SparkKeys(Keying.SHARD, 16, ShardNames.PLAIN)
        assert f"1 of the {len(groups) + 1} groups" in caplog.text
        assert "'orders' is under shard-0, not shard-14" in caplog.text


def test_a_few_strays_elsewhere_no_shard_count_explains_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Under another key than "" (a line naming group_id twice, before such lines were
    refused), one stray among forty groups."""
    stray = ("shard-3", text_of(["orders"]))
    with caplog.at_level(logging.WARNING):
        keys = before_the_record(tmp_path, monkeypatch, [*shards_holding(GROUPS, 16), stray], 16)
    assert keys == SparkKeys(Keying.SHARD, 16, ShardNames.PLAIN)
    assert "'orders' is under shard-3, not shard-14" in caplog.text


def test_a_raised_count_whose_moved_groups_are_all_in_shard_0_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every group in shard-0, where strays are: many of them elsewhere with 32 shards, and 16
    puts every one where it is."""
    sixteen, thirty_two = SparkKeys(Keying.SHARD, 16), SparkKeys(Keying.SHARD, 32)
    zeros = [f"g{i}" for i in range(2000) if sixteen.of(f"g{i}") == "shard-0"][:30]
    moved = [g for g in zeros if thirty_two.of(g) != "shard-0"]
    assert len(moved) >= STRAYS_TOLERATED * len(zeros)
    with pytest.raises(ConfigError, match="it was started with 1 or 2 or 4 or 8 or 16 shards"):
        before_the_record(tmp_path, monkeypatch, shards_holding(zeros, 16), 32)


def test_a_few_groups_elsewhere_that_another_count_explains_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Of groups written with 16 shards, those 32 would find in the same shard pass; the one
    it would not (not in shard-0, where strays are) is enough when 16 puts every group where
    it is."""
    sixteen, thirty_two = SparkKeys(Keying.SHARD, 16), SparkKeys(Keying.SHARD, 32)
    same = [g for g in GROUPS if thirty_two.of(g) == sixteen.of(g)]
    moved = next(g for g in GROUPS if g not in same and sixteen.of(g) != "shard-0")
    blobs = shards_holding([*same, moved], 16)
    assert STRAYS_TOLERATED * (len(same) + 1) > 1  # fewer than strays may be
    with pytest.raises(ConfigError, match="it was started with 16 shards"):
        before_the_record(tmp_path, monkeypatch, blobs, 32)


def test_real_coordinator_state_is_read_by_the_check() -> None:
    """The check on a coordinator shard's groups, written with 4 shards and checked against 8."""
    four, eight = SparkKeys(Keying.SHARD, 4), SparkKeys(Keying.SHARD, 8)
    names = [f"group-{i}" for i in range(12)]
    shards: dict[str, CoordinatorShard] = {}
    for i, name in enumerate(names):
        shard = shards.setdefault(four.of(name), CoordinatorShard(COORDINATOR))
        stable_member(shard, name, 0, f"j{i}")
    assert sorted(g for s in shards.values() for g in s.group_ids) == sorted(names)
    blobs = [(key, base64.b64encode(s.encode() or b"").decode()) for key, s in shards.items()]
    check_routed("cp", four, blobs, coordinator_routing_keys)  # where 4 shards put every one
    assert any(four.of(n) != eight.of(n) for n in names)
    with pytest.raises(ConfigError, match="it was started with 4 "):
        check_routed("cp", eight, blobs, coordinator_routing_keys)


@pytest.mark.parametrize(
    ("placed", "counts"),
    [
        ([("shard-0", "a")], [1, 3, 9]),  # crc32("a") = 3904355907 = 3 * 3 * ...
        ([("shard-2", "orders")], [3, 4, 5]),  # crc32("orders") = 3845127662
        ([("shard-14", "orders"), ("shard-3", "x")], [16, 24, 32]),  # crc32("x") = 2363233923
        ([("shard-4095", "a")], []),  # 4096 shards would put it in shard 3651
    ],
)
def test_the_shard_counts_a_state_is_consistent_with(
    placed: list[tuple[str, str]], counts: list[int]
) -> None:
    assert tally_routing(SparkKeys(Keying.SHARD, 1), placed).fitting[:3] == counts


def test_a_checkpoint_without_state_is_recorded_afresh(tmp_path: Path) -> None:
    """A start that never committed a batch left no group under any key: the next start may
    change the keying, and its record says the new one; one that agrees is kept as it was
    (its names made for the partitions Spark recorded with its first batch)."""
    first = keys_of(tmp_path, Keying.SHARD, 64, has_state=False, partitions="8")
    assert keys_of(tmp_path, Keying.SHARD, 64, has_state=False, partitions="2") == first
    keys = keys_of(tmp_path, Keying.SHARD, 32, has_state=False, partitions="4")
    assert keys == SparkKeys(Keying.SHARD, 32, ShardNames.BALANCED, 4)
    assert record(tmp_path)["shards"] == 32
    (tmp_path / KEYING_RECORD).write_text("{damaged")
    assert keys_of(tmp_path, Keying.SHARD, 32, has_state=False, partitions="4") == keys


def test_a_planned_batch_is_not_state(tmp_path: Path) -> None:
    """Here a checkpoint has state once its commit log has a batch, not once Spark wrote its
    state schema while planning the first one."""
    keys_of(tmp_path, Keying.SHARD, 64, has_state=False)
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text("v1")
    keys = checkpoint_keys(LocalSpark(), str(tmp_path), Keying.SHARD, 16, existing=StateFormat.TEXT)
    assert keys.shards == 16


def good_record(**changes: Any) -> str:
    base = {"version": 1, "keying": "shard", "shards": 2, "shard_names": "plain"}
    return json.dumps(base | {"partitions": None, "names": ["shard-0", "shard-1"]} | changes)


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[]",
        good_record(version=2),
        good_record(keying="hash"),
        good_record(shards="2"),
        good_record(shards=0),
        good_record(shards=3),
        good_record(shard_names="balanced"),
        good_record(names=["shard-0", "shard-0"]),
        good_record(names="shard-0,shard-1"),
        good_record(names=[0, 1]),
        json.dumps({"version": 1, "keying": "shard", "shards": 2, "shard_names": "plain"}),
    ],
)
def test_an_unreadable_record_stops_the_job(tmp_path: Path, text: str) -> None:
    (tmp_path / KEYING_RECORD).write_text(good_record())
    assert keys_of(tmp_path, Keying.SHARD, 2, has_state=True) == SparkKeys(Keying.SHARD, 2)
    (tmp_path / KEYING_RECORD).write_text(text)
    with pytest.raises(ConfigError, match="its keying record is unreadable"):
        keys_of(tmp_path, Keying.SHARD, 2, has_state=True)


@pytest.mark.parametrize("partitions", ["auto", "0", None])
def test_a_new_checkpoint_needs_a_number_of_state_partitions(
    tmp_path: Path, partitions: Any
) -> None:
    with pytest.raises(ConfigError, match=r"spark\.sql\.shuffle\.partitions"):
        keys_of(tmp_path, Keying.SHARD, 64, has_state=False, partitions=partitions)
    assert not (tmp_path / KEYING_RECORD).exists()


# --- the record's file -----------------------------------------------------------------------


def test_a_record_is_not_written_over_unless_asked(tmp_path: Path) -> None:
    spark = LocalSpark()
    write_record(spark, str(tmp_path), "one", replace=False)
    with pytest.raises(RecordError, match="a record is there already"):
        write_record(spark, str(tmp_path), "two", replace=False)
    assert read_record(spark, str(tmp_path)) == "one"
    write_record(spark, str(tmp_path), "two", replace=True)
    assert read_record(spark, str(tmp_path)) == "two"
    assert [p.name for p in tmp_path.iterdir()] == [KEYING_RECORD]  # nothing left aside


def test_a_record_written_through_spark_is_read_from_its_parts(tmp_path: Path) -> None:
    """A task attempt may leave its part file beside the committed one: the same line twice
    is the record; two different lines are refused. A new record replaces the directory."""
    spark = LocalSpark()
    folder = tmp_path / KEYING_RECORD
    folder.mkdir()
    (folder / "part-00000-a.txt").write_text("one\n")
    (folder / "part-00000-b.txt").write_text("one\n")
    (folder / "_SUCCESS").write_text("")
    assert read_record(spark, str(tmp_path)) == "one"
    (folder / "part-00001-c.txt").write_text("two\n")
    with pytest.raises(RecordError, match="2 different records"):
        read_record(spark, str(tmp_path))
    for part in folder.glob("part-*"):
        part.write_text("")
    with pytest.raises(RecordError, match="empty"):  # not "no record"
        read_record(spark, str(tmp_path))
    write_record(spark, str(tmp_path), "three", replace=True)
    assert read_record(spark, str(tmp_path)) == "three"


class RemoteSpark:
    """A session whose default file system is not this machine's (or Spark Connect's, with no
    JVM gateway): the record goes through its text source and writer."""

    def __init__(self, error: str | None = None, lines: list[str] | None = None) -> None:
        self.error, self.lines, self.asked = error, lines or [], []

    @property
    def read(self) -> Any:
        return self

    def text(self, location: str) -> Any:
        self.asked.append(location)
        if self.error is not None:
            raise RuntimeError(self.error)
        return self

    def collect(self) -> list[tuple[str]]:
        return [(line,) for line in self.lines]


def test_a_checkpoint_elsewhere_is_read_through_spark(tmp_path: Path) -> None:
    """Also a local-looking path or file: URI: with no JVM here (Spark Connect) it is the
    server's. Spark's reader would expand glob characters: they are escaped."""
    spark = RemoteSpark(lines=["one", "one"])
    assert read_record(spark, str(tmp_path)) == "one"
    assert read_record(spark, tmp_path.as_uri()) == "one"
    assert read_record(spark, "s3://b/run[1]") == "one"
    assert spark.asked == [
        f"{tmp_path}/{KEYING_RECORD}",
        f"{tmp_path.as_uri()}/{KEYING_RECORD}",
        f"s3://b/run\\[1\\]/{KEYING_RECORD}",
    ]
    missing = "[PATH_NOT_FOUND] Path does not exist: s3://b/c/controlplane_keying.json."
    assert read_record(RemoteSpark(error=missing), "s3://b/c") is None
    with pytest.raises(RecordError, match="Access Denied"):
        read_record(RemoteSpark(error="Access Denied\n\tat org.apache..."), "s3://b/c")
    with pytest.raises(RecordError, match="empty"):
        read_record(RemoteSpark(lines=[""]), "s3://b/c")


def test_the_keys_of_a_state_not_yet_committed_are_none() -> None:
    error = "[STDS_COMMITTED_BATCH_UNAVAILABLE] No committed batch found"
    assert state_keys(Session(error=error), "s3://b/c") == []
    with pytest.raises(ConfigError, match="its state's keys cannot be read: no access"):
        state_keys(Session(error="no access\nat org.apache..."), "s3://b/c")


def test_the_state_of_a_checkpoint_not_yet_committed_holds_no_blob() -> None:
    error = "[STDS_COMMITTED_BATCH_UNAVAILABLE] No committed batch found"
    assert list(state_blobs(Session(error=error), "s3://b/c")) == []
    with pytest.raises(ConfigError, match="its state cannot be read: no access"):
        list(state_blobs(Session(error="no access\nat org.apache..."), "s3://b/c"))
