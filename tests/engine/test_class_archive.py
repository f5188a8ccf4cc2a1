"""The local JVM's class archive (engine/class_archive.py): which archive a local session maps,
when it maps none, and how one is built and put in place."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from controlplane.engine import class_archive
from controlplane.engine.class_archive import (
    CLASS_PATH_ENV,
    JAVA_OPTION_VARIABLES,
    ArchiveFailed,
    archive_path,
    build,
    java_option,
)


@pytest.fixture
def jdk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A JDK's layout (bin/java, release), Spark's jars, an empty archive folder, and an
    environment that puts nothing else on the class path."""
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text("#!/bin/sh\n")
    (home / "bin" / "java").chmod(0o755)
    (home / "release").write_text('JAVA_VERSION="17.0.9"\n')
    monkeypatch.setenv("JAVA_HOME", str(home))
    for name in (
        "SPARK_CONF_DIR",
        *CLASS_PATH_ENV,
        *JAVA_OPTION_VARIABLES,
        class_archive.SWITCH_ENV,
    ):
        monkeypatch.delenv(name, raising=False)
    archives = tmp_path / "archives"
    monkeypatch.setattr(class_archive, "archive_dir", lambda: archives)
    return home


@pytest.fixture
def spark_jars(tmp_path: Path) -> Path:
    jars = tmp_path / "pyspark" / "jars"
    jars.mkdir(parents=True)
    for name in ("spark-core_2.13-4.2.0.jar", "spark-sql_2.13-4.2.0.jar"):
        (jars / name).write_bytes(b"jar")
    return jars


def java(jdk: Path) -> Path:
    return jdk / "bin" / "java"


def place_archive(jdk: Path, spark_jars: Path) -> Path:
    path = archive_path(java(jdk), spark_jars)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"archive")
    return path


def test_a_session_maps_the_archive_built_for_its_jdk_and_jars(jdk: Path, spark_jars: Path) -> None:
    path = place_archive(jdk, spark_jars)
    assert java_option(spark_jars, []) == f"-XX:SharedArchiveFile={path}"


def test_without_an_archive_a_session_maps_none(jdk: Path, spark_jars: Path) -> None:
    assert java_option(spark_jars, []) is None


@pytest.mark.parametrize(
    "change",
    [
        "another JDK build",
        "another jar",
        "a jar of another size",
        "a jar written again",
        "a conf folder",
        "a Hadoop conf folder",
    ],
)
def test_an_archive_is_for_one_jdk_and_one_class_path(
    jdk: Path, spark_jars: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    before = archive_path(java(jdk), spark_jars)
    if change == "another JDK build":
        (jdk / "release").write_text('JAVA_VERSION="17.0.10"\n')
    elif change == "another jar":
        (spark_jars / "extra.jar").write_bytes(b"jar")
    elif change == "a jar of another size":
        (spark_jars / "spark-core_2.13-4.2.0.jar").write_bytes(b"a bigger jar")
    elif change == "a jar written again":  # same size (a reinstall): the JVM checks its time
        jar = spark_jars / "spark-core_2.13-4.2.0.jar"
        stat = jar.stat()
        os.utime(jar, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    elif change == "a conf folder":
        monkeypatch.setenv("SPARK_CONF_DIR", "/etc/spark")
    else:
        monkeypatch.setenv("HADOOP_CONF_DIR", "/etc/hadoop")
    assert archive_path(java(jdk), spark_jars) != before


@pytest.mark.parametrize(
    "option",
    [
        "-Xshare:off",
        "-XX:SharedArchiveFile=/their.jsa",
        "-XX:ArchiveClassesAtExit=/dump.jsa",
        "-XX:+AutoCreateSharedArchive",
        "-XX:-UseSharedSpaces",
    ],
)
def test_class_sharing_chosen_elsewhere_is_left_alone(
    jdk: Path, spark_jars: Path, option: str
) -> None:
    place_archive(jdk, spark_jars)
    assert java_option(spark_jars, ["-Xmx2g", f"-Dx=1 {option}"]) is None
    assert java_option(spark_jars, ["-Xmx2g -XX:+UseG1GC"]) is not None


@pytest.mark.parametrize("extended", [False, True])
def test_an_extended_driver_class_path_gets_none(
    jdk: Path, spark_jars: Path, extended: bool
) -> None:
    place_archive(jdk, spark_jars)
    option = java_option(spark_jars, [], extra_class_path=extended)
    assert (option is None) is extended


def test_an_archive_path_with_a_space_is_not_named(
    jdk: Path, spark_jars: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    spaced = tmp_path / "my archives"
    monkeypatch.setattr(class_archive, "archive_dir", lambda: spaced)
    place_archive(jdk, spark_jars)
    assert java_option(spark_jars, []) is None  # the launcher would split the option


def test_the_switch_turns_it_off(
    jdk: Path, spark_jars: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    place_archive(jdk, spark_jars)
    monkeypatch.setenv(class_archive.SWITCH_ENV, "off")
    assert java_option(spark_jars, []) is None
    monkeypatch.setenv(class_archive.SWITCH_ENV, "on")
    assert java_option(spark_jars, []) is not None


def test_without_java_a_session_maps_none(
    jdk: Path, spark_jars: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    place_archive(jdk, spark_jars)
    monkeypatch.setenv("JAVA_HOME", str(jdk.parent / "nowhere"))
    monkeypatch.setenv("PATH", str(jdk.parent / "nowhere"))
    assert java_option(spark_jars, []) is None


class FakeJob:
    """subprocess.Popen for the archive's child job: records the call and, as the JVM does
    when it exits, writes the dump; a job that ``hangs`` (or is ``interrupted``) writes none."""

    def __init__(
        self,
        returncode: int = 0,
        dump: bytes | None = b"classes",
        *,
        hangs: bool = False,
        interrupted: bool = False,
    ) -> None:
        self.returncode = returncode
        self.dump = dump
        self.hangs = hangs
        self.interrupted = interrupted
        self.env: dict[str, str] = {}
        self.calls = 0
        self.own_session = False

    def __call__(
        self, command: list[str], *, env: dict[str, str], start_new_session: bool = False
    ) -> FakeProcess:
        self.env = env
        self.calls += 1
        self.own_session = start_new_session
        option = next(o for o in env["SPARK_SUBMIT_OPTS"].split() if "ArchiveClassesAtExit" in o)
        if self.dump is not None and not (self.hangs or self.interrupted):
            Path(option.split("=", 1)[1]).write_bytes(self.dump)
        return FakeProcess(self, command)


class FakeProcess:
    pid = 4_000_000  # a process group that the tests' killpg double records, never signals

    def __init__(self, job: FakeJob, command: list[str]) -> None:
        self.job = job
        self.command = command
        self.waits = 0

    def wait(self, timeout: float | None = None) -> int:
        self.waits += 1
        if self.waits == 1 and self.job.hangs:
            raise subprocess.TimeoutExpired(self.command, timeout or 0)
        if self.waits == 1 and self.job.interrupted:
            raise KeyboardInterrupt
        return self.job.returncode


@pytest.fixture
def killed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The process groups the build kills (recorded, not sent)."""
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(class_archive.os, "killpg", lambda pid, sig: calls.append((pid, sig)))
    return calls


def test_a_build_puts_the_dump_in_place_and_keeps_one_other_archive(
    jdk: Path, spark_jars: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = FakeJob()
    monkeypatch.setattr(subprocess, "Popen", job)
    folder = class_archive.archive_dir()
    folder.mkdir(parents=True)
    older, newer = folder / "spark-0000000000000000.jsa", folder / "spark-1111111111111111.jsa"
    for age, old in ((200, older), (100, newer)):
        old.write_bytes(b"old")
        os.utime(old, (time.time() - age, time.time() - age))
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-Dtheirs=1")
    path = build(spark_jars)
    assert path == archive_path(java(jdk), spark_jars)
    assert path.read_bytes() == b"classes"
    assert newer.exists()  # another JDK's or class path's, in use beside this one
    assert not older.exists()
    assert sorted(p.name for p in folder.iterdir()) == sorted([path.name, newer.name])
    assert job.env["SPARK_SUBMIT_OPTS"].startswith("-Dtheirs=1 -XX:ArchiveClassesAtExit=")
    assert java_option(spark_jars, []) == f"-XX:SharedArchiveFile={path}"


def test_a_built_archive_is_kept_unless_forced(
    jdk: Path, spark_jars: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = place_archive(jdk, spark_jars)
    job = FakeJob(dump=b"new classes")
    monkeypatch.setattr(subprocess, "Popen", job)
    assert build(spark_jars) == path
    assert path.read_bytes() == b"archive"
    assert build(spark_jars, force=True) == path
    assert path.read_bytes() == b"new classes"


@pytest.mark.parametrize(
    "job",
    [FakeJob(1, b"classes"), FakeJob(0, None), FakeJob(0, b"")],
    ids=["fails", "none", "empty"],
)
def test_a_job_that_leaves_no_archive_fails_the_build_and_places_nothing(
    jdk: Path, spark_jars: Path, monkeypatch: pytest.MonkeyPatch, job: FakeJob
) -> None:
    monkeypatch.setattr(subprocess, "Popen", job)
    with pytest.raises(ArchiveFailed):
        build(spark_jars)
    assert java_option(spark_jars, []) is None
    assert [p.suffix for p in class_archive.archive_dir().iterdir()] == [".failed"]
    assert job.own_session  # a process group of its own, the JVM in it


def test_a_job_past_its_time_is_killed_with_its_jvm_and_tried_again_next_time(
    jdk: Path, spark_jars: Path, monkeypatch: pytest.MonkeyPatch, killed: list[tuple[int, int]]
) -> None:
    monkeypatch.setattr(subprocess, "Popen", FakeJob(hangs=True))
    with pytest.raises(class_archive.JobTimedOut, match="ran past"):
        build(spark_jars)
    assert killed == [(FakeProcess.pid, signal.SIGKILL)]
    assert list(class_archive.archive_dir().iterdir()) == []  # no reason kept: a busy machine
    job = FakeJob()
    monkeypatch.setattr(subprocess, "Popen", job)
    assert build(spark_jars).read_bytes() == b"classes"


def test_an_interrupted_build_kills_its_job_and_leaves_nothing(
    jdk: Path, spark_jars: Path, monkeypatch: pytest.MonkeyPatch, killed: list[tuple[int, int]]
) -> None:
    monkeypatch.setattr(subprocess, "Popen", FakeJob(interrupted=True))
    with pytest.raises(KeyboardInterrupt):
        build(spark_jars)
    assert killed == [(FakeProcess.pid, signal.SIGKILL)]
    assert list(class_archive.archive_dir().iterdir()) == []


def test_a_dump_whose_build_is_gone_is_removed(
    jdk: Path, spark_jars: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    folder = class_archive.archive_dir()
    folder.mkdir(parents=True)
    orphan = folder / f".dump-{gone.pid}.jsa.tmp"
    running = folder / f".dump-{os.getppid()}.jsa.tmp"  # a build still writing its dump
    for dump in (orphan, running):
        dump.write_bytes(b"partial")
    monkeypatch.setattr(subprocess, "Popen", FakeJob())
    build(spark_jars)
    assert not orphan.exists()
    assert running.exists()


def test_a_failed_build_is_not_run_again_until_forced(
    jdk: Path, spark_jars: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = FakeJob(1)
    monkeypatch.setattr(subprocess, "Popen", failing)
    with pytest.raises(ArchiveFailed, match="exited with 1"):
        build(spark_jars)
    with pytest.raises(ArchiveFailed, match=r"the last build failed: .*exited with 1.*--force"):
        build(spark_jars)
    assert failing.calls == 1
    working = FakeJob()
    monkeypatch.setattr(subprocess, "Popen", working)
    path = build(spark_jars, force=True)
    assert working.calls == 1
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # the reason is gone too


@pytest.mark.parametrize("variable", JAVA_OPTION_VARIABLES)
def test_class_sharing_chosen_in_the_environment_fails_before_the_job(
    jdk: Path, spark_jars: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    job = FakeJob()
    monkeypatch.setattr(subprocess, "Popen", job)
    monkeypatch.setenv(variable, "-Xmx1g -Xshare:off")
    with pytest.raises(ArchiveFailed, match=variable):
        build(spark_jars)
    assert job.calls == 0
    monkeypatch.delenv(variable)  # the cause removed: the next build runs, without --force
    assert build(spark_jars).read_bytes() == b"classes"
    assert job.calls == 1


@pytest.mark.parametrize("variable", ["SPARK_CONF_DIR", "HADOOP_CONF_DIR", "SPARK_DIST_CLASSPATH"])
def test_a_class_path_folder_with_files_cannot_be_archived(
    jdk: Path, spark_jars: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str
) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    job = FakeJob()
    monkeypatch.setattr(subprocess, "Popen", job)
    entries = [str(conf)] if variable == "SPARK_CONF_DIR" else ["/opt/lib/*", str(conf)]
    monkeypatch.setenv(variable, os.pathsep.join(entries))
    build(spark_jars, force=True)  # an empty folder is fine
    (conf / "site.xml").write_text("<configuration/>\n")
    with pytest.raises(ArchiveFailed, match="not empty"):
        build(spark_jars, force=True)
    assert job.calls == 1
