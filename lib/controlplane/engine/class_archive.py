"""The local JVM's class archive: the classes a job loads, kept ready to map at its next start.

A local job's JVM loads and verifies some 14,000 classes, most of them from Spark's jars,
before its first batch can run: the session, the streaming query, the file source, the
shuffle, the stateful operator and its Python runner, the state store. Java's class-data
sharing (AppCDS) keeps them, parsed and verified, in an archive file the next JVM maps
instead: a restarted job answered its first request about 5 s sooner (docs/benchmarks/engine.md,
issue 14, twelfth session). Java 17 writes such an archive only when a JVM started with
``-XX:ArchiveClassesAtExit`` exits normally, so it is built ahead, by a short job of its own:
``python -m controlplane class-archive`` (``make setup`` runs it). That job
(``engine.class_archive_job``) runs both queries in event-time mode over a few requests, in a
scratch folder, and exits.

The archive is named by a fingerprint of what the JVM checks it against: the JDK (the ``java``
that runs, its ``release`` file) and the class path spark-submit gives the JVM (the conf folder,
the environment's other entries, Spark's jars by name, size and time), in
``<venv>/class-archive``. A local session (``engine.session``) names the one that matches; with
none it starts as before. The JVM checks the archive again itself and ignores one that does
not match, silently: never an error. No archive is named when ``CONTROLPLANE_CLASS_ARCHIVE`` is
``off``, when the JVM's options choose class sharing themselves (``-Xshare``,
``-XX:SharedArchiveFile``, ...), when the driver's class path is extended
(``spark.driver.extraClassPath``), when its path holds a space, or when spark-submit started
the JVM. The jars on ``spark.jars`` (Delta, Kafka) are loaded by Spark's own class loader,
which Java 17 does not archive: those load as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from controlplane.jvm import MissingJvm, require_java

log = logging.getLogger(__name__)

SWITCH_ENV = "CONTROLPLANE_CLASS_ARCHIVE"  # "off": never name an archive
FOLDER = "class-archive"
SUFFIX = ".jsa"
FAILED_SUFFIX = ".failed"  # beside an archive's name: the last build for it failed, and why
# A JVM option that decides class sharing itself: then the session names no archive.
SHARING_OPTION = re.compile(
    r"-Xshare:|-XX:[+-]UseSharedSpaces|-XX:SharedArchiveFile=|-XX:ArchiveClassesAtExit="
    r"|AutoCreateSharedArchive"
)
# Where a JVM's options come from in the environment (spark-submit and the JVM read them).
JAVA_OPTION_VARIABLES = (
    "SPARK_SUBMIT_OPTS",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
)
# What spark-submit puts on the JVM's class path besides the conf folder (``conf_dir``) and
# Spark's jars.
CLASS_PATH_ENV = ("HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_DIST_CLASSPATH")
# Driver settings that put entries before Spark's jars (the session's conf, spark-defaults.conf).
EXTRA_CLASS_PATH_KEYS = ("spark.driver.extraClassPath", "spark.driver.defaultExtraClassPath")
BUILD_TIMEOUT_S = 600
DUMP_PREFIX, DUMP_SUFFIX = ".dump-", f"{SUFFIX}.tmp"  # a dump being written: .dump-<pid>.jsa.tmp
KEPT = 2  # archives kept in the folder: the one just built and the newest before it


class ArchiveFailed(RuntimeError):
    """No archive could be built; the message says why."""


class JobTimedOut(ArchiveFailed):
    """The archive's job ran past its time (a busy machine): not kept as a failure."""


def archive_dir() -> Path:
    return Path(sys.prefix) / FOLDER


def conf_dir(spark_jars: Path) -> Path:
    """The folder spark-submit puts first on the JVM's class path."""
    return Path(os.environ.get("SPARK_CONF_DIR") or spark_jars.parent / "conf")


def fingerprint(java: Path, spark_jars: Path) -> str:
    """What the JVM checks an archive against: the JDK (its ``java``, resolved, and its
    ``release`` file: version and build) and the class path: the conf folder
    (``SPARK_CONF_DIR`` or ``SPARK_HOME/conf``), the environment's other entries, and Spark's
    jars in ``spark_jars`` (``SPARK_HOME/jars``) by name, size and modification time."""
    resolved = java.resolve()
    digest = hashlib.sha256(str(resolved).encode())
    release = resolved.parent.parent / "release"
    digest.update(release.read_bytes() if release.is_file() else b"no release file")
    digest.update(str(conf_dir(spark_jars)).encode())
    for name in CLASS_PATH_ENV:
        digest.update(f"\n{name}={os.environ.get(name, '')}".encode())
    jars = sorted(spark_jars.glob("*.jar")) if spark_jars.is_dir() else []
    for jar in jars:
        stat = jar.stat()
        digest.update(f"\n{jar.name} {stat.st_size} {stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def archive_path(java: Path, spark_jars: Path) -> Path:
    return archive_dir() / f"spark-{fingerprint(java, spark_jars)}{SUFFIX}"


def has_space(path: Path) -> bool:
    """Spark's launcher splits Java options at whitespace: such a path cannot be named."""
    return any(c.isspace() for c in str(path))


def sharing_chosen(places: Iterable[str]) -> bool:
    return any(SHARING_OPTION.search(place) for place in places)


def java_option(
    spark_jars: Path, places: Iterable[str], *, extra_class_path: bool = False
) -> str | None:
    """``-XX:SharedArchiveFile=...`` for a local session's JVM when the matching archive is
    there; None when there is none, when it is switched off, when ``places`` (the JVM's
    options from the environment and the confs) choose class sharing themselves, when the
    driver's class path is extended, or when the archive's path holds whitespace (Spark's
    launcher splits the Java options at it)."""
    if os.environ.get(SWITCH_ENV, "").strip().lower() == "off":
        return None
    if sharing_chosen(places) or extra_class_path:
        return None
    try:
        path = archive_path(Path(require_java("a local session")), spark_jars)
    except (MissingJvm, OSError):
        return None  # the session's own start says what is missing
    if not path.is_file() or has_space(path):
        log.debug("no usable JVM class archive at %s (python -m controlplane class-archive)", path)
        return None
    log.info("the session names its JVM's class archive %s", path)
    return f"-XX:SharedArchiveFile={path}"


# --- building one --------------------------------------------------------------------------


def build(spark_jars: Path, *, force: bool = False) -> Path:
    """The archive for this JDK and class path: the one there, else built now. What Java would
    refuse is said before the job runs (the environment, the class path's folders). A job
    that failed leaves its reason beside the archive's name, and the next call raises it again
    without running the job, unless ``force``; a job that ran past its time does not."""
    java = Path(require_java("the class archive"))
    target = archive_path(java, spark_jars)
    if target.is_file() and not force:
        log.info("JVM class archive already built: %s", target)
        return target
    check_buildable(spark_jars, target)
    failed = target.with_name(target.name + FAILED_SUFFIX)
    if failed.is_file() and not force:
        raise ArchiveFailed(f"{failed.read_text().strip()} (--force tries again)")
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_orphan_dumps(target.parent)
    try:
        seconds = run_job(target)
    except JobTimedOut:
        raise
    except ArchiveFailed as exc:
        failed.write_text(f"the last build failed: {exc}\n")
        raise
    failed.unlink(missing_ok=True)
    prune(target)
    size_mb = target.stat().st_size / 1e6
    log.info("JVM class archive built in %.0f s: %s (%.0f MB)", seconds, target, size_mb)
    return target


def check_buildable(spark_jars: Path, target: Path) -> None:
    """What makes Java 17 refuse the dump, or the launcher mangle it, said before the job."""
    if has_space(target):
        raise ArchiveFailed(f"{target}: Spark's launcher splits Java options at whitespace")
    for name in JAVA_OPTION_VARIABLES:
        if sharing_chosen([os.environ.get(name, "")]):
            raise ArchiveFailed(f"${name} chooses class sharing itself: {os.environ[name]!r}")
    for folder in class_path_folders(spark_jars):
        if folder.is_dir() and any(folder.iterdir()):
            raise ArchiveFailed(
                f"{folder} is on the JVM's class path and holds files: Java 17 archives no "
                "class path with a folder that is not empty"
            )


def class_path_folders(spark_jars: Path) -> list[Path]:
    """The entries spark-submit puts on the JVM's class path besides Spark's jars (the caller
    looks at the folders among them)."""
    entries = [str(conf_dir(spark_jars))]
    for name in CLASS_PATH_ENV:
        entries += os.environ.get(name, "").split(os.pathsep)
    return [Path(entry) for entry in entries if entry]


def run_job(target: Path) -> float:
    """Run the archive's job in a child process of its own process group; its JVM dumps
    beside ``target`` as it exits, and the complete dump is renamed into place (one file
    system: atomic). A job past its time, or interrupted, is killed with its JVM (a killed JVM
    writes nothing). Seconds taken."""
    dump = target.with_name(f"{DUMP_PREFIX}{os.getpid()}{DUMP_SUFFIX}")
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="controlplane-class-archive-") as scratch:
            command = [sys.executable, "-m", "controlplane.engine.class_archive_job", scratch]
            code = wait_for(
                subprocess.Popen(command, env=job_environment(dump), start_new_session=True)
            )
        if code != 0 or not dump.is_file() or dump.stat().st_size == 0:
            left = "an empty archive" if dump.is_file() else "no archive"
            raise ArchiveFailed(
                f"the archive's job exited with {code} and {left} (its output is above)"
            )
        os.replace(dump, target)
    finally:
        dump.unlink(missing_ok=True)
    return time.monotonic() - started


def wait_for(job: subprocess.Popen[bytes]) -> int:
    """The job's exit code; past ``BUILD_TIMEOUT_S``, or on an interrupt, its whole process
    group (the job, its JVM, its Python workers) is killed first."""
    try:
        return job.wait(timeout=BUILD_TIMEOUT_S)
    except BaseException as exc:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        if isinstance(exc, subprocess.TimeoutExpired):
            raise JobTimedOut(f"the archive's job ran past {BUILD_TIMEOUT_S} s") from exc
        raise


def remove_orphan_dumps(folder: Path) -> None:
    """Dumps a killed build left (its process is gone)."""
    for dump in folder.glob(f"{DUMP_PREFIX}*{DUMP_SUFFIX}"):
        pid = dump.name[len(DUMP_PREFIX) : -len(DUMP_SUFFIX)]
        if pid.isdigit() and not process_alive(int(pid)):
            dump.unlink(missing_ok=True)


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's
    return True


def job_environment(dump: Path) -> dict[str, str]:
    """The caller's environment, with the dump's options after its own ``SPARK_SUBMIT_OPTS``;
    the dump's warnings (the classes it cannot keep: generated, signed) at error level only."""
    env = dict(os.environ)
    options = f"-XX:ArchiveClassesAtExit={dump} -Xlog:cds*=error"
    env["SPARK_SUBMIT_OPTS"] = f"{env.get('SPARK_SUBMIT_OPTS', '')} {options}".strip()
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    return env


def prune(target: Path) -> None:
    """Keep ``target`` and the newest other archive (another JDK or class path in use beside
    this one); remove the rest, and the reasons of other fingerprints' failed builds."""
    others = sorted(
        (p for p in target.parent.glob(f"*{SUFFIX}") if p != target),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in others[KEPT - 1 :]:
        old.unlink(missing_ok=True)
    for reason in target.parent.glob(f"*{FAILED_SUFFIX}"):
        reason.unlink(missing_ok=True)
