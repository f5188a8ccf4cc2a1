"""The configuration, re-read each micro-batch from the config file when it changed.

Workers call ``current()`` on every state-function call and every keying call; the file is
re-parsed only when its modification time or size changes. A file that no longer validates is
logged and the last good settings stay in force, so a bad edit cannot stop the fleet.

Each new reading is folded over the last one with ``carry_removed_quotas``: a quota entry that
disappears from the file stays as a rate-less entry, so its level type stays tracked, as Kafka
never turns a quota level off once it was on (docs/reference/mutation-quota.md §4.3).

Spark unpickles the state function (and so this object) afresh for every task, so the last
reading cannot live in the object: it lives in the Python worker process, by path, and the first
reading of a process is folded over ``initial``, the settings the job started with (they travel
with the pickle). So an entry present at the job's start stays tracked everywhere; one added
and removed while the job runs is remembered by the worker processes that read it while it was
there. Like Kafka's broker, a restarted job starts from the file.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field, replace

from controlplane.core.config import ConfigError, Settings, parse_settings
from controlplane.core.quota.resolution import carry_removed_quotas

log = logging.getLogger(__name__)


@dataclass
class _Reading:
    stamp: tuple[int, int] | None = None
    settings: Settings | None = None


_LOCK = threading.Lock()
_READINGS: dict[str, _Reading] = {}  # per process, by path: outlives the per-task unpickling


def _reading(path: str) -> _Reading:
    with _LOCK:
        return _READINGS.setdefault(path, _Reading())


@dataclass
class SettingsSource:
    path: str | None
    initial: Settings = field(default_factory=lambda: parse_settings({}))

    def current(self) -> Settings:
        if self.path is None:
            return self.initial
        reading = _reading(self.path)
        with _LOCK:
            try:
                stat = os.stat(self.path)
            except OSError as exc:
                log.warning(
                    "config %s unreadable (%s); keeping the last good settings", self.path, exc
                )
                return reading.settings or self.initial
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp != reading.stamp:
                reading.stamp = stamp
                reading.settings = self._load(reading.settings)
            return reading.settings or self.initial

    def _load(self, last: Settings | None) -> Settings | None:
        from controlplane.settings import load_settings

        try:
            loaded = load_settings(self.path)
        except ConfigError as exc:
            log.error("config %s refused (%s); keeping the last good settings", self.path, exc)
            return last
        quota = carry_removed_quotas((last or self.initial).quota, loaded.quota)
        return loaded if quota is loaded.quota else replace(loaded, quota=quota)
