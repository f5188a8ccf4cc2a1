"""The configuration, re-read each micro-batch from the config file when it changed.

Workers call ``current()`` on every state-function call and every keying call; the file is
re-parsed only when its modification time or size changes. A file that no longer validates is
logged and the last good settings stay in force, so a bad edit cannot stop the fleet.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from controlplane.core.config import ConfigError, Settings, parse_settings

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
            return load_settings(self.path)
        except ConfigError as exc:
            log.error("config %s refused (%s); keeping the last good settings", self.path, exc)
            return self._settings
