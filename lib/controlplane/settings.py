"""Loads a configuration file (YAML; JSON is valid YAML) and validates it once."""

from __future__ import annotations

from pathlib import Path

import yaml

from controlplane.core.config import ConfigError, Settings, parse_settings


def load_settings(path: str | Path | None) -> Settings:
    """Read and validate ``path``; None gives the defaults of docs/reference/events.md §7."""
    if path is None:
        return parse_settings({})
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"configuration file not found: {file}")
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: not valid YAML: {exc}") from exc
    try:
        return parse_settings(raw)
    except ConfigError as exc:
        raise ConfigError(f"{file}: {exc}") from exc
