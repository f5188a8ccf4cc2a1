"""A local session starts its JVM with the parallel collector (engine/session.py,
``local_java_options``) unless a collector is chosen anywhere else, maps the class archive when
there is one (engine/class_archive.py), and keeps the default Java options of
spark-defaults.conf, which its own ``--conf`` would otherwise replace."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.engine import class_archive
from controlplane.engine.session import (
    LOCAL_JAVA_OPTIONS,
    LOCAL_JAVA_OPTIONS_KEY,
    local_java_options,
    pyspark_jars_dir,
    spark_defaults,
)

ENVIRONMENT = ("SPARK_SUBMIT_OPTS", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS")


@pytest.fixture
def conf_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty SPARK_CONF_DIR, no JVM options in the environment, no spark-submit, no class
    archive."""
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.delenv(class_archive.SWITCH_ENV, raising=False)
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    archives = tmp_path / "archives"
    monkeypatch.setattr(class_archive, "archive_dir", lambda: archives)
    jdk = tmp_path / "jdk"
    (jdk / "bin").mkdir(parents=True)
    (jdk / "bin" / "java").write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(jdk))  # no JVM runs: a JDK's layout is enough
    return tmp_path


def an_archive() -> str:
    """The class archive of the fixture's JDK and this pyspark, in its folder; its option."""
    java = class_archive.require_java("the test")
    path = class_archive.archive_path(Path(java), pyspark_jars_dir())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"archive")
    return f"-XX:SharedArchiveFile={path}"


def defaults_file(conf_dir: Path, text: str) -> None:
    (conf_dir / "spark-defaults.conf").write_text(text, encoding="utf-8")


def test_the_parallel_collector_by_default(conf_dir: Path) -> None:
    assert local_java_options() == {LOCAL_JAVA_OPTIONS_KEY: "-XX:+UseParallelGC"}
    assert LOCAL_JAVA_OPTIONS == "-XX:+UseParallelGC"


def test_the_default_options_of_spark_defaults_come_after_ours(conf_dir: Path) -> None:
    defaults_file(conf_dir, "# admin\nspark.driver.defaultJavaOptions  -Dsite=1 -Xss4m\n")
    assert local_java_options() == {LOCAL_JAVA_OPTIONS_KEY: "-XX:+UseParallelGC -Dsite=1 -Xss4m"}


@pytest.mark.parametrize(
    "line",
    [
        "spark.driver.extraJavaOptions -XX:+UseG1GC",
        "spark.driver.defaultJavaOptions=-Dx=1 -XX:+UseZGC",
        "spark.driver.extraJavaOptions: -XX:+UseSerialGC",
    ],
)
def test_a_collector_chosen_in_spark_defaults_is_left_alone(conf_dir: Path, line: str) -> None:
    defaults_file(conf_dir, line + "\n")
    assert local_java_options() == {}


@pytest.mark.parametrize("variable", ENVIRONMENT)
def test_a_collector_chosen_in_the_environment_is_left_alone(
    conf_dir: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "-Xmx2g -XX:+UseG1GC")
    assert local_java_options() == {}


@pytest.mark.parametrize(
    "key", ["spark.driver.extraJavaOptions", "spark.driver.defaultJavaOptions"]
)
def test_a_collector_chosen_in_the_session_s_conf_is_left_alone(conf_dir: Path, key: str) -> None:
    assert local_java_options({key: "-XX:+UseShenandoahGC"}) == {}
    # options that choose no collector leave ours in place (the session's conf comes later)
    assert local_java_options({key: "-XX:TieredStopAtLevel=1"}) == {
        LOCAL_JAVA_OPTIONS_KEY: "-XX:+UseParallelGC"
    }


def test_a_switched_off_collector_is_not_a_choice(conf_dir: Path) -> None:
    defaults_file(conf_dir, "spark.driver.extraJavaOptions -XX:-UseG1GC -XX:+UseG1GCx\n")
    assert local_java_options() == {LOCAL_JAVA_OPTIONS_KEY: "-XX:+UseParallelGC"}


def test_nothing_when_spark_submit_started_the_jvm(
    conf_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "40000")
    assert local_java_options() == {}


def test_spark_defaults_reads_the_file_spark_submit_reads(
    conf_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    defaults_file(conf_dir, "! comment\n\n  a.b   1 2  \nc.d=3\ne.f : 4\nbare\n")
    assert spark_defaults() == {"a.b": "1 2", "c.d": "3", "e.f": "4"}
    home = tmp_path_factory.mktemp("spark-home")
    (home / "conf").mkdir()
    (home / "conf" / "spark-defaults.conf").write_text("g.h 5\n", encoding="utf-8")
    monkeypatch.delenv("SPARK_CONF_DIR")
    monkeypatch.setenv("SPARK_HOME", str(home))
    assert spark_defaults() == {"g.h": "5"}
    monkeypatch.setenv("SPARK_CONF_DIR", str(home / "nowhere"))
    assert spark_defaults() == {}


def test_the_class_archive_after_the_collector_and_before_spark_defaults(conf_dir: Path) -> None:
    defaults_file(conf_dir, "spark.driver.defaultJavaOptions -Dsite=1\n")
    archive = an_archive()
    assert local_java_options() == {
        LOCAL_JAVA_OPTIONS_KEY: f"-XX:+UseParallelGC {archive} -Dsite=1"
    }


def test_the_class_archive_without_the_collector_chosen_elsewhere(
    conf_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = an_archive()
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-XX:+UseG1GC")
    assert local_java_options() == {LOCAL_JAVA_OPTIONS_KEY: archive}
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-XX:+UseG1GC -Xshare:off")
    assert local_java_options() == {}


def test_no_class_archive_when_spark_submit_started_the_jvm(
    conf_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    an_archive()
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "40000")
    assert local_java_options() == {}


@pytest.mark.parametrize(
    "key", ["spark.driver.extraClassPath", "spark.driver.defaultExtraClassPath"]
)
def test_no_class_archive_when_the_driver_s_class_path_is_extended(
    conf_dir: Path, key: str
) -> None:
    an_archive()
    assert local_java_options({key: "/opt/site.jar"}) == {
        LOCAL_JAVA_OPTIONS_KEY: "-XX:+UseParallelGC"
    }
    defaults_file(conf_dir, f"{key} /opt/site.jar\n")
    assert local_java_options() == {LOCAL_JAVA_OPTIONS_KEY: "-XX:+UseParallelGC"}
