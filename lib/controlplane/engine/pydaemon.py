"""PySpark's worker daemon, importing pyspark from the installed package (local sessions).

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on every Python worker's path. With
pyspark installed from PyPI, ``SPARK_HOME`` is that installed package, so the zip holds the
same version of the same files; but Python cannot cache compiled bytecode for modules it
imports from a zip, so every new worker compiled pyspark's modules from source: importing what
a worker needs took 2.2-2.4 s from the zip against 0.9-1.2 s from the installed package
(measured on the project's VM). A restarted job pays it for its first workers, on the way to
its first answer, and a running job for every worker Spark starts later.

``spark.python.daemon.module`` names this module for local sessions (engine/session.py). It
drops the zip from the path when the pyspark imported without it is the installed package the
zip lies in, with the same version (anything else, or any doubt, keeps Spark's path as it is),
then runs PySpark's own daemon, which forks the workers. It imports nothing else (no thread
may start before the daemon forks); ``python -m`` imports only this package's two ``__init__``
modules before it. The workers' Python must import ``controlplane`` for the daemon to start:
the session builder sets the module only when it does (engine/session.py).
"""

from __future__ import annotations

import sys
import zipfile
from importlib.machinery import PathFinder
from pathlib import Path

VERSION_FILE = "pyspark/version.py"
ZIP_IN_PACKAGE = ("python", "lib", "pyspark.zip")  # where a PyPI pyspark keeps Spark's zip


def _version_text(entry: str) -> str | None:
    """``pyspark/version.py`` of a path entry (a directory or a zip), or None."""
    try:
        if entry.endswith(".zip"):
            with zipfile.ZipFile(entry) as archive:
                return archive.read(VERSION_FILE).decode("utf-8")
        return Path(entry, VERSION_FILE).read_text(encoding="utf-8")
    except Exception:  # unreadable in any way: no version, and the path stays as it is
        return None


def without_pyspark_zip(path: list[str]) -> list[str]:
    """``path`` less Spark's ``pyspark.zip`` when the pyspark that is imported without it is
    the installed package the zip came with: the zip lies inside that package
    (``pyspark/python/lib/pyspark.zip``, as pip installs it) and both have the same
    ``version.py``. Unchanged in any other case."""
    zips = [entry for entry in path if Path(entry).name == "pyspark.zip"]
    if not zips:
        return path
    rest = [entry for entry in path if entry not in zips]
    spec = PathFinder.find_spec("pyspark", rest)  # what ``import pyspark`` finds without them
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if len(locations) != 1:
        return path
    package = Path(locations[0])
    installed = _version_text(str(package.parent))
    for entry in zips:
        inside = Path(entry).resolve() == package.joinpath(*ZIP_IN_PACKAGE).resolve()
        if not inside or installed is None or _version_text(entry) != installed:
            return path
    return rest


def main() -> None:
    spark_path = list(sys.path)
    try:
        sys.path[:] = without_pyspark_zip(spark_path)
        from pyspark import daemon
    except Exception:  # any doubt: PySpark's daemon on the path Spark made
        sys.path[:] = spark_path
        for name in [name for name in sys.modules if name.split(".")[0] == "pyspark"]:
            del sys.modules[name]
        from pyspark import daemon
    daemon.manager()


if __name__ == "__main__":
    main()
