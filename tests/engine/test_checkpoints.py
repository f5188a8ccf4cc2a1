"""Which state format a checkpoint holds (engine.checkpoints): from the schema file of a local
checkpoint, or from the schema Spark's state data source gives for any other; both read from a
real checkpoint in tests/spark/test_processing_time.py."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from controlplane.core.config import ConfigError
from controlplane.engine.adapter import StateFormat
from controlplane.engine.checkpoints import blob_type_name, state_format_of

# where Spark keeps the state schema of operator 0 (io.checkpoint), relative to the checkpoint
STATE_SCHEMA_FILE = ("state", "0", "0", "_metadata", "schema")

REMOTE = "s3://bucket/checkpoints/coordinator"


def reader_schema(blob: str) -> dict[str, Any]:
    """The state data source's schema of an applyInPandasWithState checkpoint, as JSON."""
    group_state = {
        "type": "struct",
        "fields": [
            {"name": "version", "type": "integer", "nullable": True, "metadata": {}},
            {"name": "deadline_ms", "type": "long", "nullable": True, "metadata": {}},
            {"name": "blob", "type": blob, "nullable": True, "metadata": {}},
        ],
    }
    value = {
        "type": "struct",
        "fields": [{"name": "groupState", "type": group_state, "nullable": True, "metadata": {}}],
    }
    key = {"type": "struct", "fields": [{"name": "key", "type": "string", "nullable": True}]}
    return {
        "type": "struct",
        "fields": [
            {"name": "key", "type": key, "nullable": True, "metadata": {}},
            {"name": "value", "type": value, "nullable": True, "metadata": {}},
            {"name": "partition_id", "type": "integer", "nullable": True, "metadata": {}},
        ],
    }


class Schema:
    def __init__(self, value: dict[str, Any]) -> None:
        self.value = value

    def jsonValue(self) -> dict[str, Any]:
        return self.value


class Session:
    """What state_format_of uses of a SparkSession: read.format(...).load(path).schema."""

    def __init__(self, schema: dict[str, Any] | None = None, error: str | None = None) -> None:
        self.schema, self.error = schema, error
        self.read = self

    def format(self, name: str) -> Session:
        assert name == "statestore"
        return self

    def load(self, path: str) -> Any:
        if self.error is not None:
            raise RuntimeError(self.error)
        return type("Frame", (), {"schema": Schema(self.schema or {})})()


def test_the_blob_type_is_read_from_the_value_schema() -> None:
    assert blob_type_name(reader_schema("binary")) == "binary"
    assert blob_type_name(reader_schema("string")) == "string"
    assert blob_type_name({"type": "struct", "fields": []}) is None
    assert blob_type_name(reader_schema({"type": "array"})) is None  # type: ignore[arg-type]


def test_a_remote_checkpoint_keeps_the_format_its_schema_names() -> None:
    assert state_format_of(Session(reader_schema("binary")), REMOTE) is StateFormat.BINARY
    assert state_format_of(Session(reader_schema("string")), REMOTE) is StateFormat.TEXT


def test_a_remote_checkpoint_with_no_committed_batch_gets_the_text_format() -> None:
    error = f"[STDS_COMMITTED_BATCH_UNAVAILABLE] No committed batch found, location: {REMOTE}."
    assert state_format_of(Session(error=error), REMOTE) is StateFormat.TEXT


def test_a_remote_checkpoint_that_cannot_be_read_or_is_not_the_engines_is_a_config_error() -> None:
    with pytest.raises(
        ConfigError, match=rf"checkpoint {REMOTE}: its state schema cannot be read: no"
    ):
        state_format_of(Session(error="no access\nat org.apache..."), REMOTE)
    with pytest.raises(ConfigError, match=f"checkpoint {REMOTE}: its state is not this engine's"):
        state_format_of(Session(reader_schema("long")), REMOTE)


def spark_schema_file(checkpoint: Path, blob: str) -> None:
    """The state schema file as Spark writes it: "v2", then each schema's JSON in chunks
    (Java's writeUTF: a 2-byte length, the bytes; a 4-byte chunk count before each schema)."""

    def utf(text: str) -> bytes:
        data = text.encode()
        return struct.pack(">H", len(data)) + data

    key, value = (
        json.dumps(field["type"], separators=(",", ":"))
        for field in reader_schema(blob)["fields"][:2]
    )
    path = checkpoint.joinpath(*STATE_SCHEMA_FILE)
    path.parent.mkdir(parents=True)
    path.write_bytes(
        utf("v2") + struct.pack(">i", 1) + utf(key) + struct.pack(">i", 1) + utf(value)
    )


class OneSetting:
    """A configuration asked for one setting only (a session's conf, Hadoop's)."""

    def __init__(self, name: str, value: Any) -> None:
        self.name, self.value = name, value

    def get(self, name: str) -> Any:
        assert name == self.name
        return self.value


class Context:
    """A SparkContext as io.checkpoint asks it for Spark's default file system."""

    def __init__(self, default_fs: str = "file:///") -> None:
        self._jsc = self
        self.hadoop = OneSetting("fs.defaultFS", default_fs)

    def hadoopConfiguration(self) -> OneSetting:
        return self.hadoop


class NoSpark:
    """A local session (its default file system this machine's) that must not be asked to
    read: a checkpoint here is read from its files."""

    sparkContext = Context()

    @property
    def read(self) -> Any:
        raise AssertionError("a local checkpoint is read from its file, not through Spark")


@pytest.mark.parametrize(
    ("blob", "expected"), [("binary", StateFormat.BINARY), ("string", StateFormat.TEXT)]
)
def test_a_local_checkpoint_is_read_from_its_schema_file(
    blob: str, expected: StateFormat, tmp_path: Path
) -> None:
    spark_schema_file(tmp_path / "coordinator", blob)
    assert state_format_of(NoSpark(), str(tmp_path / "coordinator")) is expected
    assert state_format_of(NoSpark(), (tmp_path / "coordinator").as_uri()) is expected


def test_a_local_checkpoint_without_a_schema_file_or_a_commit_gets_the_text_format(
    tmp_path: Path,
) -> None:
    (tmp_path / "new").mkdir()
    assert state_format_of(NoSpark(), str(tmp_path / "new")) is StateFormat.TEXT
    (tmp_path / "started" / "offsets").mkdir(parents=True)  # started, no batch planned yet
    (tmp_path / "started" / "commits").mkdir()
    assert state_format_of(NoSpark(), str(tmp_path / "started")) is StateFormat.TEXT


def test_what_this_machine_cannot_tell_is_asked_of_spark(tmp_path: Path) -> None:
    """A plain path that is not here may be on Spark's default file system (Databricks), and
    a checkpoint with a committed batch but no schema file here is not what this reads."""
    binary = Session(reader_schema("binary"))
    assert state_format_of(binary, str(tmp_path / "elsewhere")) is StateFormat.BINARY
    committed = tmp_path / "committed"
    (committed / "commits").mkdir(parents=True)
    (committed / "commits" / "0").write_text("v1\n{}")
    assert state_format_of(binary, str(committed)) is StateFormat.BINARY
    with pytest.raises(ConfigError, match="cannot be read"):  # NoSpark refuses: it was asked
        state_format_of(NoSpark(), str(committed))


def test_a_local_checkpoint_whose_state_is_not_the_engines_is_a_config_error(
    tmp_path: Path,
) -> None:
    spark_schema_file(tmp_path / "other", "long")
    with pytest.raises(ConfigError, match="its state is not this engine's"):
        state_format_of(NoSpark(), str(tmp_path / "other"))


def test_a_checkpoint_path_is_this_machines_only_in_a_local_session(tmp_path: Path) -> None:
    """A plain path or a file: URI that exists here is still Spark's to read when its default
    file system is elsewhere (DBFS) or the session has no JVM here (Spark Connect)."""
    spark_schema_file(tmp_path / "coordinator", "string")  # a look-alike here
    elsewhere = Session(reader_schema("binary"))
    for checkpoint in (str(tmp_path / "coordinator"), (tmp_path / "coordinator").as_uri()):
        assert state_format_of(elsewhere, checkpoint) is StateFormat.BINARY
        elsewhere.sparkContext = Context("dbfs:/")  # type: ignore[attr-defined]
        assert state_format_of(elsewhere, checkpoint) is StateFormat.BINARY
        del elsewhere.sparkContext  # type: ignore[attr-defined]
