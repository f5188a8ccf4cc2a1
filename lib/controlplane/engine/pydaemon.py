"""PySpark's worker daemon, importing pyspark from the installed package (local sessions).

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on every Python worker's path. With
pyspark installed from PyPI, ``SPARK_HOME`` is that installed package, so the zip holds the
same version of the same files; but Python cannot cache compiled bytecode for modules it
imports from a zip, so every new worker compiled pyspark's modules from source: importing what
a worker needs took 2.2-2.4 s from the zip against 0.9-1.2 s from the installed package
(measured on the project's VM). A restarted job pays it for its first workers, on the way to
its first answer, and a running job for every worker Spark starts later.

``spark.python.daemon.module`` names this module for local sessions (engine/session.py). It
drops the zip from the path when the installed package beside it is the same pyspark version
(anything else, or any doubt, keeps Spark's path as it is), then runs PySpark's own daemon,
which forks the workers. It imports nothing else (no thread may start before the daemon
forks); ``python -m`` imports only this package's two ``__init__`` modules before it.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

VERSION_FILE = "pyspark/version.py"


def _version_text(entry: str) -> str | None:
    """``pyspark/version.py`` of a path entry (a directory or a zip), or None."""
    try:
        if entry.endswith(".zip"):
            with zipfile.ZipFile(entry) as archive:
                return archive.read(VERSION_FILE).decode("utf-8")
        return Path(entry, VERSION_FILE).read_text(encoding="utf-8")
    except (OSError, KeyError, UnicodeDecodeError, zipfile.BadZipFile):
        return None


def without_pyspark_zip(path: list[str]) -> list[str]:
    """``path`` less the pyspark zips that an installed pyspark later on it duplicates (the
    same ``version.py``); unchanged otherwise."""
    zips = [entry for entry in path if Path(entry).name == "pyspark.zip"]
    if not zips:
        return path
    rest = [entry for entry in path if entry not in zips]
    installed = next((text for text in map(_version_text, rest) if text is not None), None)
    if installed is None or any(_version_text(entry) != installed for entry in zips):
        return path
    return rest


def main() -> None:
    sys.path[:] = without_pyspark_zip(sys.path)
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
