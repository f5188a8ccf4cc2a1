"""The project's JVM half: where its pinned jars are, and whether Java is there.

``make setup`` copies the jars listed in ``jvm/<folder>/pom.xml`` into ``<venv>/jars/<folder>``
(``.venv/jars/spark`` for Delta and Spark's Kafka connector, ``.venv/jars/broker`` for a local
Kafka broker). Nothing here downloads anything: a missing folder is a clear error that names the
command to run. ``CONTROLPLANE_JARS`` points at another root (a shared cache, a CI image).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

JARS_ENV = "CONTROLPLANE_JARS"
SPARK_JARS = "spark"
BROKER_JARS = "broker"
SETUP_HINT = "run `make setup` (it fetches the pinned jars of jvm/*/pom.xml with mvn)"


class MissingJvm(RuntimeError):
    """Java or the project's jars are not there."""


def jars_root() -> Path:
    """``$CONTROLPLANE_JARS``, else ``jars/`` inside the running virtual environment."""
    override = os.environ.get(JARS_ENV)
    return Path(override) if override else Path(sys.prefix) / "jars"


def jar_paths(folder: str) -> list[Path]:
    """The jars of one folder, sorted; empty when the folder is missing."""
    directory = jars_root() / folder
    return sorted(directory.glob("*.jar")) if directory.is_dir() else []


def require_jars(folder: str, what: str) -> list[Path]:
    jars = jar_paths(folder)
    if not jars:
        raise MissingJvm(f"{what} needs the jars in {jars_root() / folder}: {SETUP_HINT}")
    return jars


def require_java(what: str) -> str:
    """The ``java`` to run: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    candidate = Path(home) / "bin" / "java" if home else None
    if candidate is not None and candidate.is_file():
        return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise MissingJvm(f"{what} needs Java 17 or later: no `java` on PATH and no JAVA_HOME")
    return found
