"""The pinned JVM jars (jvm/*/pom.xml, fetched by `make setup`): none duplicates a class that
pyspark already ships, the versions match the Python packages, and a missing folder or Java
is one clear error."""

from __future__ import annotations

import re
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from controlplane.engine.session import jar_conf
from controlplane.jvm import (
    BROKER_JARS,
    JARS_ENV,
    SPARK_JARS,
    MissingJvm,
    jar_paths,
    require_jars,
    require_java,
)

ROOT = Path(__file__).resolve().parents[2]


# Every Spark module carries the same empty stub (Spark's build shades it in); not a clash.
SPARK_STUB = "org/apache/spark/unused/UnusedStubClass.class"


def classes(jar: Path) -> set[str]:
    with zipfile.ZipFile(jar) as archive:
        return {
            name
            for name in archive.namelist()
            if name.endswith(".class")
            and not name.startswith("META-INF/")
            and not name.endswith("module-info.class")
            and name != SPARK_STUB
        }


def test_no_jar_of_ours_duplicates_a_class_pyspark_ships() -> None:
    import pyspark

    ours = jar_paths(SPARK_JARS)
    assert ours, "run `make setup`: the Spark jars are missing"
    shipped: dict[str, str] = {}
    for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar"):
        for name in classes(jar):
            shipped.setdefault(name, jar.name)
    clashes = {
        jar.name: sorted({shipped[name] for name in classes(jar) if name in shipped})
        for jar in ours
    }
    assert {jar: pyspark_jars for jar, pyspark_jars in clashes.items() if pyspark_jars} == {}


def test_the_jvm_versions_are_the_python_ones() -> None:
    names = {jar.name for jar in jar_paths(SPARK_JARS)}
    spark = metadata.version("pyspark")
    delta = metadata.version("delta-spark")
    minor = ".".join(spark.split(".")[:2])
    assert f"delta-spark_{minor}_2.13-{delta}.jar" in names
    assert f"spark-sql-kafka-0-10_2.13-{spark}.jar" in names
    pom = (ROOT / "jvm" / "spark" / "pom.xml").read_text()
    assert re.search(rf"<delta.version>{re.escape(delta)}</delta.version>", pom)


def test_the_broker_has_its_own_folder() -> None:
    broker = {jar.name for jar in jar_paths(BROKER_JARS)}
    assert any(name.startswith("kafka_2.13-4.") for name in broker)
    assert not broker & {jar.name for jar in jar_paths(SPARK_JARS)}


def test_missing_jars_are_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(JARS_ENV, str(tmp_path))
    with pytest.raises(MissingJvm, match=r"make setup"):
        require_jars(BROKER_JARS, "the local Kafka broker")
    with pytest.raises(MissingJvm, match=r"make setup"):
        jar_conf(require=True)
    assert jar_conf(require=False) == {}


def test_a_session_with_the_jars_gets_delta(monkeypatch: pytest.MonkeyPatch) -> None:
    conf = jar_conf(require=True)
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert all(Path(jar).is_file() for jar in conf["spark.jars"].split(","))


def test_missing_java_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MissingJvm, match=r"needs Java 17"):
        require_java("the local Kafka broker")
