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


def delta_artifact() -> str:
    """The Delta artifact that delta-spark's own pip helper names for the installed pyspark and
    delta-spark ("io.delta:delta-spark_4.2_2.13:4.4.0"; before Delta 4.1 no Spark version:
    "io.delta:delta-spark_2.13:4.0.0"). A builder that is never started holds the option."""
    from delta import configure_spark_with_delta_pip
    from pyspark.sql import SparkSession

    builder = configure_spark_with_delta_pip(SparkSession.Builder())
    [artifact] = builder._options["spark.jars.packages"].split(",")
    return str(artifact)


def leg_pom(spark: str) -> Path:
    """The pom of the test leg whose Spark this venv has (jvm/spark: 4.2, jvm/spark40: 4.0)."""
    poms = [
        pom
        for pom in sorted((ROOT / "jvm").glob("*/pom.xml"))
        if f"<spark.version>{spark}</spark.version>" in pom.read_text()
    ]
    assert len(poms) == 1, f"no single jvm/*/pom.xml for pyspark {spark}: {poms}"
    return poms[0]


def test_the_jvm_versions_are_the_python_ones() -> None:
    names = {jar.name for jar in jar_paths(SPARK_JARS)}
    spark = metadata.version("pyspark")
    delta = metadata.version("delta-spark")
    _, artifact, version = delta_artifact().split(":")
    assert version == delta
    assert f"{artifact}-{delta}.jar" in names
    assert f"spark-sql-kafka-0-10_2.13-{spark}.jar" in names
    pom = leg_pom(spark).read_text()
    assert f"<artifactId>{artifact}</artifactId>" in pom
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
