"""The configuration, re-read each micro-batch from the config file when it changed.

Workers call ``current()`` on every state-function call and every keying call; the file is
re-parsed only when its modification time or size changes. A file that no longer validates is
logged and the last good settings stay in force, so a bad edit cannot stop the fleet.

Each new reading is folded over the last one with ``carry_removed_quotas``: a quota entry that
disappears from the file stays as a rate-less entry, so its level type stays tracked, as Kafka
never turns a quota level off once it was on (mutation-quota.md §4.3). Like Kafka's broker, a
worker keeps that memory only while it lives: a restarted job starts from the file.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, replace

from controlplane.core.config import ConfigError, Settings, parse_settings
from controlplane.core.quota.resolution import carry_removed_quotas

log = logging.getLogger(__name__)


@dataclass
class SettingsSource:
    path: str | None
    initial: Settings = field(default_factory=lambda: parse_settings({}))
    _stamp: tuple[int, int] | None = field(default=None, init=False)
    _settings: Settings | None = field(default=None, init=False)

    def current(self) -> Settings:
        if self.path is None:
            return self.initial
        try:
            stat = os.stat(self.path)
        except OSError as exc:
            log.warning("config %s unreadable (%s); keeping the last good settings", self.path, exc)
            return self._settings or self.initial
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp != self._stamp:
            self._stamp = stamp
            self._settings = self._load()
        return self._settings or self.initial

    def _load(self) -> Settings | None:
        from controlplane.settings import load_settings

        try:
            loaded = load_settings(self.path)
        except ConfigError as exc:
            log.error("config %s refused (%s); keeping the last good settings", self.path, exc)
            return self._settings
        if self._settings is None:
            return loaded
        quota = carry_removed_quotas(self._settings.quota, loaded.quota)
        return replace(loaded, quota=quota)
