"""pyspark before 4.2 and pyarrow 26 cannot run applyInPandasWithState together (pyarrow 26
refuses the float offsets those pysparks pass to RecordBatch.slice: seen on the Spark 4.0 leg).
The package metadata cannot forbid the pair, so a local session refuses it in one line."""

from __future__ import annotations

import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from controlplane.engine.session import (
    CHECKPOINT_MANAGER_KEY,
    DAEMON_MODULE,
    DAEMON_MODULE_KEY,
    STATE_CODEC_KEY,
    IncompatibleVersions,
    arrow_incompatibility,
    build_local_session,
    checkpoint_manager_class,
    chosen_elsewhere,
    local_conf,
)


@pytest.mark.parametrize(
    ("pyspark_version", "pyarrow_version", "refused"),
    [
        ("4.0.0", "19.0.1", False),  # the Spark 4.0 leg
        ("4.0.0", "25.0.1", False),  # 25 still takes floats
        ("4.0.0", "26.0.1", True),
        ("4.1.4", "26.0.0", True),
        ("4.0.0.dev1", "26.0.1", True),
        ("4.2.0", "26.0.1", False),  # the main leg
        ("4.2.1", "27.0.0", False),
    ],
)
def test_pyspark_before_4_2_is_refused_with_pyarrow_26_and_later(
    pyspark_version: str, pyarrow_version: str, refused: bool
) -> None:
    problem = arrow_incompatibility(pyspark_version, pyarrow_version)
    assert (problem is not None) is refused
    if problem:
        assert f"pyspark {pyspark_version}" in problem
        assert "pyarrow<26" in problem


def test_a_local_session_refuses_the_pair_before_starting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pyarrow
    import pyspark

    monkeypatch.setattr(pyspark, "__version__", "4.0.0")
    monkeypatch.setattr(pyarrow, "__version__", "26.0.1")
    with pytest.raises(IncompatibleVersions, match=r"install pyarrow<26"):
        build_local_session("refused")


def test_the_installed_pair_is_accepted() -> None:
    import pyarrow
    import pyspark

    assert arrow_incompatibility(pyspark.__version__, pyarrow.__version__) is None


# Local sessions write checkpoints through Hadoop's FileSystem API (no chmod/readlink forks per
# file); the class moved into a `checkpointing` package in Spark 4.1, so it is looked up in the
# running pyspark's spark-sql jar.
SPARK_40_CLASS = "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager"
SPARK_41_CLASS = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


def _jar_with(folder: Path, *class_names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / "spark-sql_2.13-9.9.9.jar", "w") as jar:
        jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        for name in class_names:
            jar.writestr(name.replace(".", "/") + ".class", b"\xca\xfe\xba\xbe")
    return folder


@pytest.mark.parametrize(
    ("classes", "expected"),
    [
        ((SPARK_41_CLASS,), SPARK_41_CLASS),  # Spark 4.1 and 4.2
        ((SPARK_40_CLASS,), SPARK_40_CLASS),  # Spark 4.0 (Databricks Runtime 17.3 LTS)
        ((), None),  # neither: Spark's default manager stays
    ],
)
def test_the_checkpoint_manager_is_the_class_this_spark_ships(
    tmp_path: Path, classes: tuple[str, ...], expected: str | None
) -> None:
    assert checkpoint_manager_class(_jar_with(tmp_path / "jars", *classes)) == expected


def test_an_unreadable_jar_leaves_spark_s_default_manager(tmp_path: Path) -> None:
    (tmp_path / "spark-sql_2.13-9.9.9.jar").write_bytes(b"not a zip")
    assert checkpoint_manager_class(tmp_path) is None


def test_the_installed_pyspark_has_the_class_and_local_sessions_name_it() -> None:
    name = checkpoint_manager_class()
    assert name in (SPARK_40_CLASS, SPARK_41_CLASS)
    assert local_conf() == {
        CHECKPOINT_MANAGER_KEY: name,
        DAEMON_MODULE_KEY: DAEMON_MODULE,
        STATE_CODEC_KEY: "snappy",
    }


def test_the_daemon_is_named_only_when_the_workers_python_can_import_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from controlplane.engine.session import workers_import

    assert workers_import(DAEMON_MODULE)
    assert not workers_import("controlplane.engine.no_such_module")
    monkeypatch.setenv("PYSPARK_PYTHON", str(tmp_path / "no-python"))
    assert not workers_import(DAEMON_MODULE)
    assert DAEMON_MODULE_KEY not in local_conf()


@pytest.fixture
def no_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty SPARK_CONF_DIR and no spark-submit."""
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    return tmp_path


def test_local_sessions_write_their_state_with_snappy(no_defaults: Path) -> None:
    assert local_conf()[STATE_CODEC_KEY] == "snappy"


@pytest.mark.parametrize(
    "line", [f"{STATE_CODEC_KEY} lz4", f"{STATE_CODEC_KEY}=zstd", f"  {STATE_CODEC_KEY}  lzf"]
)
def test_a_codec_chosen_in_spark_defaults_is_left_alone(no_defaults: Path, line: str) -> None:
    (no_defaults / "spark-defaults.conf").write_text(f"# mine\n{line}\n", encoding="utf-8")
    assert STATE_CODEC_KEY not in local_conf()


def test_a_commented_codec_in_spark_defaults_is_not_a_choice(no_defaults: Path) -> None:
    (no_defaults / "spark-defaults.conf").write_text(f"# {STATE_CODEC_KEY} lz4\n")
    assert local_conf()[STATE_CODEC_KEY] == "snappy"


class FakeSystem:
    def __init__(self, properties: dict[str, str]) -> None:
        self.properties = properties

    def getProperty(self, key: str) -> str | None:
        return self.properties.get(key)


def submitted_jvm(properties: dict[str, str]) -> Any:
    """What ``_submitted_jvm`` gives, as far as ``chosen_elsewhere`` reads it."""
    java = SimpleNamespace(lang=SimpleNamespace(System=FakeSystem(properties)))
    return SimpleNamespace(java=java)


@pytest.mark.parametrize(
    ("properties", "chosen"),
    [({STATE_CODEC_KEY: "lz4"}, True), ({"spark.app.name": "job"}, False)],
)
def test_under_spark_submit_its_properties_say_whether_the_codec_is_chosen(
    no_defaults: Path,
    monkeypatch: pytest.MonkeyPatch,
    properties: dict[str, str],
    chosen: bool,
) -> None:
    from controlplane.engine import session

    (no_defaults / "spark-defaults.conf").write_text(f"{STATE_CODEC_KEY} lz4\n")  # not read
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "40000")
    monkeypatch.setattr(session, "_submitted_jvm", lambda: submitted_jvm(properties))
    assert chosen_elsewhere(STATE_CODEC_KEY) is chosen


def test_under_spark_submit_without_a_gateway_the_codec_stands(
    no_defaults: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from controlplane.engine import session

    def no_gateway() -> Any:
        raise ConnectionRefusedError("no gateway")

    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "40000")
    monkeypatch.setattr(session, "_submitted_jvm", no_gateway)
    assert not chosen_elsewhere(STATE_CODEC_KEY)
