"""The local JVM's class archive: the classes a job loads, kept ready to map at its next start.

A local job's JVM loads and verifies some 20,000 classes from Spark's jars before its first
batch can run: the session, the streaming query, the file source, the shuffle, the stateful
operator and its Python runner, the state store. Java's class-data sharing (AppCDS) keeps
them, parsed and verified, in an archive file the next JVM maps instead: a restarted job
answered its first request 4-5 s sooner (docs/benchmarks/engine.md, issue 14, twelfth
session). Java 17 writes such an archive only when a JVM started with
``-XX:ArchiveClassesAtExit`` exits normally, so it is built ahead, by a short job of its own:
``python -m controlplane class-archive`` (``make setup`` runs it). That job
(``engine.class_archive_job``) runs both queries in event-time mode over a few requests, in a
scratch folder, and exits.

The archive is named by a fingerprint of what it was built from (the ``java`` that runs,
its JDK's ``release`` file, and the names and sizes of the running pyspark's jars), in
``<venv>/class-archive``. A local session (``engine.session``) maps the one that matches; with
none it starts as before. The JVM checks the archive again itself (its JDK build and class
path) and ignores one that does not match, silently: never an error. No archive is added when
``CONTROLPLANE_CLASS_ARCHIVE`` is ``off``, when the JVM's options choose class sharing
themselves (``-Xshare``, ``-XX:SharedArchiveFile``, ``-XX:ArchiveClassesAtExit``), or when
spark-submit started the JVM. The jars on ``spark.jars`` (Delta, Kafka) are loaded by Spark's
own class loader, which Java 17 does not archive: those load as before.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from controlplane.jvm import MissingJvm, require_java

log = logging.getLogger(__name__)

SWITCH_ENV = "CONTROLPLANE_CLASS_ARCHIVE"  # "off": never map an archive
FOLDER = "class-archive"
SUFFIX = ".jsa"
# a JVM option that decides class sharing itself: then the session adds none
CHOSEN = re.compile(r"-Xshare:|-XX:SharedArchiveFile=|-XX:ArchiveClassesAtExit=|AutoCreateShared")
BUILD_TIMEOUT_S = 600


def archive_dir() -> Path:
    return Path(sys.prefix) / FOLDER


# what spark-submit puts on the JVM's class path besides Spark's jars
_CLASS_PATH_ENV = ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_DIST_CLASSPATH")


def fingerprint(java: Path, spark_jars: Path) -> str:
    """What an archive is valid for: the JDK (its ``java``, resolved, and its ``release``
    file: version and build) and the JVM's class path: the jars of Spark (names and sizes, in
    ``spark_jars``, ``SPARK_HOME/jars``) and what spark-submit adds before them (the conf
    folder, ``SPARK_CONF_DIR`` or ``SPARK_HOME/conf``, and the environment's other entries)."""
    resolved = java.resolve()
    digest = hashlib.sha256(str(resolved).encode())
    release = resolved.parent.parent / "release"
    digest.update(release.read_bytes() if release.is_file() else b"no release file")
    digest.update(str(conf_dir(spark_jars)).encode())
    for name in _CLASS_PATH_ENV:
        digest.update(f"\n{name}={os.environ.get(name, '')}".encode())
    jars = sorted(spark_jars.glob("*.jar")) if spark_jars.is_dir() else []
    for jar in jars:
        digest.update(f"\n{jar.name} {jar.stat().st_size}".encode())
    return digest.hexdigest()[:16]


def conf_dir(spark_jars: Path) -> Path:
    """The folder spark-submit puts first on the JVM's class path."""
    return Path(os.environ.get("SPARK_CONF_DIR") or spark_jars.parent / "conf")


def archive_path(java: Path, spark_jars: Path) -> Path:
    return archive_dir() / f"spark-{fingerprint(java, spark_jars)}{SUFFIX}"


def chosen_elsewhere(places: Iterable[str]) -> bool:
    return any(CHOSEN.search(place) for place in places)


def java_option(spark_jars: Path, places: Iterable[str]) -> str | None:
    """``-XX:SharedArchiveFile=...`` for a local session's JVM when the matching archive is
    there; None when there is none, when it is switched off or when ``places`` (the JVM's
    options from the environment and the confs) choose class sharing themselves."""
    if os.environ.get(SWITCH_ENV, "").strip().lower() == "off" or chosen_elsewhere(places):
        return None
    try:
        path = archive_path(Path(require_java("a local session")), spark_jars)
    except (MissingJvm, OSError):
        return None  # the session's own start says what is missing
    if not path.is_file():
        log.debug("no JVM class archive at %s (python -m controlplane class-archive)", path)
        return None
    log.info("the JVM maps its class archive %s", path)
    return f"-XX:SharedArchiveFile={path}"


# --- building one --------------------------------------------------------------------------


def build(spark_jars: Path, *, force: bool = False) -> Path:
    """Build the archive for this JDK and pyspark, unless it is there (``force``: again).
    The job runs in a child process, whose JVM writes the archive as it exits; it is moved
    into place only once complete, and archives of other fingerprints are removed."""
    java = Path(require_java("the class archive"))
    target = archive_path(java, spark_jars)
    conf = conf_dir(spark_jars)
    if conf.is_dir() and any(conf.iterdir()):
        raise ArchiveFailed(
            f"{conf} is on the JVM's class path and holds files: Java 17 archives no class path "
            "with a folder that is not empty, so a local session starts without an archive"
        )
    if target.is_file() and not force:
        log.info("JVM class archive already built: %s", target)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="controlplane-class-archive-") as scratch:
        dump = Path(scratch) / f"dump{SUFFIX}"
        # the dump's warnings (classes it cannot keep: generated, signed) only at error level
        options = f"-XX:ArchiveClassesAtExit={dump} -Xlog:cds*=error"
        env = {**os.environ, "SPARK_SUBMIT_OPTS": options}
        env.pop("JAVA_TOOL_OPTIONS", None)  # a sharing option there would fight the dump
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        started = time.monotonic()
        command = [sys.executable, "-m", "controlplane.engine.class_archive_job", scratch]
        done = subprocess.run(command, env=env, timeout=BUILD_TIMEOUT_S, check=False)
        if done.returncode != 0 or not dump.is_file() or dump.stat().st_size == 0:
            raise ArchiveFailed(
                f"the class archive's job exited with {done.returncode} and "
                f"{'an empty' if dump.is_file() else 'no'} archive (its output is above)"
            )
        partial = target.with_suffix(".partial")
        shutil.move(str(dump), partial)
        os.replace(partial, target)
    for old in target.parent.glob(f"*{SUFFIX}"):
        if old != target:
            old.unlink(missing_ok=True)
    size_mb = target.stat().st_size / 1e6
    log.info(
        "JVM class archive built in %.0f s: %s (%.0f MB)",
        time.monotonic() - started,
        target,
        size_mb,
    )
    return target


class ArchiveFailed(RuntimeError):
    """The archive's job did not leave an archive."""
