"""Settings re-read each micro-batch: new values apply, a bad edit keeps the last good ones."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

from controlplane.core.config import parse_settings
from controlplane.engine.reload import SettingsSource
from controlplane.settings import load_settings


def write(path: Path, text: str, stamp_ns: int) -> None:
    path.write_text(text)
    os.utime(path, ns=(stamp_ns, stamp_ns))


def test_an_edit_applies_and_a_bad_edit_keeps_the_last_good_settings(tmp_path: Path) -> None:
    path = tmp_path / "conf.yaml"
    write(path, "quotas:\n  - {user: alice, controller_mutation_rate: 10}\n", 1_000_000_000)
    source = SettingsSource(str(path))
    assert source.current().quota.quotas[0].controller_mutation_rate == 10.0
    write(path, "quotas:\n  - {user: alice, controller_mutation_rate: 2}\n", 2_000_000_000)
    assert source.current().quota.quotas[0].controller_mutation_rate == 2.0
    write(path, "quotas: [{user: alice, controller_mutation_rate: -1}]\n", 3_000_000_000)
    assert source.current().quota.quotas[0].controller_mutation_rate == 2.0
    path.unlink()
    assert source.current().quota.quotas[0].controller_mutation_rate == 2.0


def test_an_unchanged_file_is_not_parsed_again(tmp_path: Path) -> None:
    path = tmp_path / "conf.yaml"
    write(path, "group.max.size: 5\n", 1_000_000_000)
    source = SettingsSource(str(path))
    first = source.current()
    assert source.current() is first
    assert first.coordinator.group_max_size == 5


def test_without_a_file_the_initial_settings_hold() -> None:
    initial = parse_settings({"group.max.size": 3})
    assert SettingsSource(None, initial).current() is initial


def test_a_removed_quota_stays_tracked_as_a_rate_less_entry(tmp_path: Path) -> None:
    """Kafka never turns a quota level off once on: removing every entry leaves them unset."""
    path = tmp_path / "conf.yaml"
    write(path, "quotas:\n  - {user: alice, controller_mutation_rate: 10}\n", 1_000_000_000)
    source = SettingsSource(str(path))
    assert source.current().quota.quotas[0].controller_mutation_rate == 10.0
    write(path, "group.max.size: 5\n", 2_000_000_000)
    quotas = source.current().quota.quotas
    assert [(q.user, q.client_id, q.controller_mutation_rate) for q in quotas] == [
        ("alice", None, None)
    ]


def test_a_removed_quota_stays_tracked_across_tasks(tmp_path: Path) -> None:
    """Spark unpickles the state function for every task: each task's copy of the source must
    still know the entries earlier tasks of the worker read (they were forgotten each batch)."""
    path = tmp_path / "conf.yaml"
    write(path, "quotas:\n  - {user: alice, controller_mutation_rate: 10}\n", 1_000_000_000)
    pickled = pickle.dumps(SettingsSource(str(path)))
    assert pickle.loads(pickled).current().quota.quotas[0].controller_mutation_rate == 10.0
    write(path, "group.max.size: 5\n", 2_000_000_000)
    quotas = pickle.loads(pickled).current().quota.quotas  # the next batch's task
    assert [(q.user, q.controller_mutation_rate) for q in quotas] == [("alice", None)]


def test_a_fresh_worker_carries_the_entries_the_job_started_with(tmp_path: Path) -> None:
    path = tmp_path / "conf.yaml"
    write(path, "quotas:\n  - {user: alice, controller_mutation_rate: 10}\n", 1_000_000_000)
    started = load_settings(str(path))
    write(path, "quotas:\n  - {user: bob, controller_mutation_rate: 3}\n", 2_000_000_000)
    quotas = SettingsSource(str(path), started).current().quota.quotas  # never saw alice
    assert [(q.user, q.controller_mutation_rate) for q in quotas] == [
        ("bob", 3.0),
        ("alice", None),
    ]
