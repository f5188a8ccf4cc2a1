"""The workers' daemon drops Spark's pyspark.zip only when the pyspark imported without it is
the installed package the zip lies in, with the same version."""

from __future__ import annotations

import zipfile
from pathlib import Path

from controlplane.engine.pydaemon import VERSION_FILE, ZIP_IN_PACKAGE, without_pyspark_zip

V1 = '__version__: str = "4.2.0"\n'
V2 = '__version__: str = "4.1.1"\n'


def write_zip(path: Path, version: str | None) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("pyspark/__init__.py", "")
        if version is not None:
            archive.writestr(VERSION_FILE, version)
    return str(path)


def installed(root: Path, version: str | None, zip_version: str | None = None) -> tuple[str, str]:
    """A site directory with a pyspark package (``version``) and Spark's zip inside it."""
    package = root / "pyspark"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    if version is not None:
        (root / VERSION_FILE).write_text(version)
    zipped = write_zip(
        package.joinpath(*ZIP_IN_PACKAGE), version if zip_version is None else zip_version
    )
    return str(root), zipped


def test_the_zip_goes_when_its_own_installed_package_is_what_imports(tmp_path: Path) -> None:
    site, zipped = installed(tmp_path / "site-packages", V1)
    py4j = str(tmp_path / "py4j-0.10.9.9-src.zip")
    assert without_pyspark_zip([zipped, py4j, site]) == [py4j, site]


def test_the_path_stays_as_spark_made_it_in_any_other_case(tmp_path: Path) -> None:
    site, zipped = installed(tmp_path / "site", V1)
    other_site, other_zip = installed(tmp_path / "other", V2, zip_version=V1)
    bare_site, bare_zip = installed(tmp_path / "bare", None)
    elsewhere = write_zip(tmp_path / "spark-home" / "python" / "lib" / "pyspark.zip", V1)
    stray = tmp_path / "stray"
    (stray / "pyspark").mkdir(parents=True)
    (stray / "pyspark" / "__init__.py").write_text("")
    broken = tmp_path / "broken" / "pyspark" / "python" / "lib" / "pyspark.zip"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"not a zip")
    (tmp_path / "broken" / VERSION_FILE).write_text(V1)
    for path in (
        [other_zip, other_site],  # the zip says another version than the package it lies in
        [bare_zip, bare_site],  # no version to compare
        [elsewhere, site],  # a SPARK_HOME of its own: the zip is that Spark's, not the package's
        [zipped, str(stray), site],  # the pyspark imported without the zip would be another one
        [zipped, str(tmp_path / "nowhere")],  # nothing installed
        [str(broken), str(tmp_path / "broken")],  # an unreadable zip
        [site],  # no zip at all
    ):
        assert without_pyspark_zip(path) == path, path
