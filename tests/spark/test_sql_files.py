"""Every question in sql/ answered the same by the Spark-free CLI (DataFusion) and by Spark SQL
over the same tables, through ``python -m controlplane sql`` with and without
``--engine spark`` (which reads the sql/spark/ twin where there is one)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from controlplane.cli import sql
from engine.test_cli_sql import write_read_side_tables

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = sorted(path.name for path in (ROOT / "sql").glob("*.sql"))


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_read_side_tables(tmp_path_factory.mktemp("read-side"))


def answer(
    tables: Path, question: str, engine: str, capsys: pytest.CaptureFixture[str]
) -> list[dict[str, Any]]:
    argv = [str(ROOT / "sql" / question), "--tables-root", str(tables), "--json"]
    assert sql.main([*argv, "--engine", engine]) == 0, capsys.readouterr().err
    lines = capsys.readouterr().out.splitlines()
    # Spark's timestamps carry the session zone (UTC), DataFusion's are naive UTC.
    return [json.loads(line.replace("+00:00", "")) for line in lines]


def test_there_are_questions() -> None:
    assert len(QUESTIONS) >= 5


def same(spark_value: Any, datafusion_value: Any) -> bool:
    """Equal, but for DataFusion's percentile_cont, which interpolates on a digest (2918.9973
    where Spark's exact percentile says 2919.0): floats within 0.1 %."""
    if isinstance(spark_value, float) and isinstance(datafusion_value, float):
        return math.isclose(spark_value, datafusion_value, rel_tol=1e-3)
    return bool(spark_value == datafusion_value)


@pytest.mark.parametrize("question", QUESTIONS)
def test_both_engines_give_the_same_answer(
    spark: Any, tables: Path, question: str, capsys: pytest.CaptureFixture[str]
) -> None:
    datafusion = answer(tables, question, "datafusion", capsys)
    assert datafusion, f"{question} has no rows over the sample tables: it would test nothing"
    spark_rows = answer(tables, question, "spark", capsys)
    assert [list(row) for row in spark_rows] == [list(row) for row in datafusion]  # columns
    assert len(spark_rows) == len(datafusion), (spark_rows, datafusion)
    for spark_row, datafusion_row in zip(spark_rows, datafusion, strict=True):
        assert all(same(spark_row[k], datafusion_row[k]) for k in spark_row), (
            spark_row,
            datafusion_row,
        )


def test_spark_sql_errors_are_one_line(
    spark: Any, tables: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--tables-root", str(tables), "--engine", "spark"]
    assert sql.main(["SELEC 1", *base]) == 2
    assert capsys.readouterr().err.startswith("python -m controlplane sql: SQL syntax error")
    assert sql.main(["SELECT * FROM nowhere", *base]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "nowhere" in err
    assert "decisions" in err  # the tables that are there


def test_maintenance_with_spark_compacts_and_vacuums(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from controlplane.cli import maintenance
    from controlplane.io.sinks import DeltaRsWriter

    root = tmp_path / "tables"
    DeltaRsWriter(root, "one").write("decisions", [{"event_id": "early"}], 0)
    DeltaRsWriter(root, "more").write("decisions", [{"event_id": "late"}], 1)
    argv = ["--tables-root", str(root), "--engine", "spark"]
    assert maintenance.main([*argv, "--retention-hours", "0", "--force"]) == 0
    report = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())
    assert report["decisions"] == "2 files compacted into 1; vacuum removed 2 files"
    assert (
        sql.main(
            ["SELECT event_id FROM decisions ORDER BY 1", "--tables-root", str(root), "--json"]
        )
        == 0
    )
    assert capsys.readouterr().out.split() == [
        '{"event_id":',
        '"early"}',
        '{"event_id":',
        '"late"}',
    ]
    assert maintenance.main([*argv, "--retention-hours", "0"]) == 1  # below the table's: refused
    assert "retention" in capsys.readouterr().err.lower()
