"""The workers' daemon drops Spark's pyspark.zip only when the installed pyspark is the same."""

from __future__ import annotations

import zipfile
from pathlib import Path

from controlplane.engine.pydaemon import VERSION_FILE, without_pyspark_zip

V1 = '__version__: str = "4.2.0"\n'
V2 = '__version__: str = "4.1.1"\n'


def spark_zip(tmp_path: Path, version: str | None) -> str:
    path = tmp_path / "python" / "lib" / "pyspark.zip"
    path.parent.mkdir(parents=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("pyspark/__init__.py", "")
        if version is not None:
            archive.writestr(VERSION_FILE, version)
    return str(path)


def installed(tmp_path: Path, name: str, version: str | None) -> str:
    root = tmp_path / name
    (root / "pyspark").mkdir(parents=True)
    if version is not None:
        (root / VERSION_FILE).write_text(version)
    return str(root)


def test_the_zip_goes_when_the_installed_pyspark_is_the_same_version(tmp_path: Path) -> None:
    zipped = spark_zip(tmp_path, V1)
    py4j = str(tmp_path / "py4j-0.10.9.9-src.zip")
    site = installed(tmp_path, "site-packages", V1)
    assert without_pyspark_zip(["", zipped, py4j, site]) == ["", py4j, site]


def test_the_path_stays_as_spark_made_it_in_any_other_case(tmp_path: Path) -> None:
    zipped = spark_zip(tmp_path, V1)
    other = installed(tmp_path, "other", V2)
    bare = installed(tmp_path, "bare", None)
    for path in (
        [zipped, other],  # another version installed: the zip is the JVM's own
        [zipped, bare],  # no version to compare
        [zipped, str(tmp_path / "nowhere")],  # nothing installed
        [str(tmp_path / "site")],  # no zip at all
    ):
        assert without_pyspark_zip(path) == path


def test_the_first_installed_pyspark_on_the_path_is_the_one_compared(tmp_path: Path) -> None:
    zipped = spark_zip(tmp_path, V1)
    first, second = installed(tmp_path, "a", V2), installed(tmp_path, "b", V1)
    assert without_pyspark_zip([zipped, first, second]) == [zipped, first, second]


def test_an_unreadable_zip_is_kept(tmp_path: Path) -> None:
    broken = tmp_path / "lib" / "pyspark.zip"
    broken.parent.mkdir()
    broken.write_bytes(b"not a zip")
    site = installed(tmp_path, "site-packages", V1)
    assert without_pyspark_zip([str(broken), site]) == [str(broken), site]
