"""A real JVM maps the class archive a local session names (engine/class_archive.py): the
archive of this JDK and pyspark, which ``make test`` builds before the tests (``make
class-archive``), is accepted by the JVM of ``build_local_session``, whose class path it was
fingerprinted for. The JVM ignores a mismatched archive silently, so the test counts the
classes it loaded from the archive. Without an archive (its build failed, which make reports
and goes on) the test is skipped, saying so, and fails under CI (``CI`` set), where make has
just tried to build it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from controlplane.engine import class_archive
from controlplane.engine.session import pyspark_jars_dir

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]

SESSION = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from controlplane.engine import class_archive
    class_archive.archive_dir = lambda: Path(sys.argv[1])
    from controlplane.engine.session import build_local_session
    spark = build_local_session("class-archive-test", master="local[1]")
    assert spark.range(3).count() == 3
    spark.stop()
    """
)


def classes_by_source(log: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in log.read_text(errors="replace").splitlines():
        if "source: " in line:
            source = line.split("source: ", 1)[1]
            kind = source if source.startswith("shared objects file") else "elsewhere"
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def run_session(env: dict[str, str], archives: Path) -> None:
    command = [sys.executable, "-c", SESSION, str(archives)]
    done = subprocess.run(command, env=env, timeout=300, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_session_s_jvm_loads_its_classes_from_the_archive(tmp_path: Path) -> None:
    java = Path(class_archive.require_java("the test"))
    if not class_archive.archive_path(java, pyspark_jars_dir()).is_file():
        missing = "no class archive for this JDK and pyspark (python -m controlplane class-archive)"
        if os.environ.get("CI"):  # make test built it first: its build failed, which CI must see
            pytest.fail(f"{missing}: its build failed; the reason is in make's output")
        pytest.skip(missing)
    log = tmp_path / "classes.log"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "lib"), str(ROOT / "tests")]),
        "JAVA_TOOL_OPTIONS": f"-Xlog:class+load=info:file={log}",
    }
    env.pop(class_archive.SWITCH_ENV, None)
    run_session(env, class_archive.archive_dir())
    counts = classes_by_source(log)
    assert counts.get("shared objects file (top)", 0) > 5000, counts  # Spark's own classes
    assert counts["shared objects file (top)"] > counts.get("elsewhere", 0), counts
    log.unlink()
    run_session({**env, class_archive.SWITCH_ENV: "off"}, class_archive.archive_dir())
    counts = classes_by_source(log)
    assert counts.get("shared objects file (top)", 0) == 0, counts
    assert counts.get("elsewhere", 0) > 5000, counts
