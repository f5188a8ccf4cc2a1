"""Bad input to `python -m controlplane ...` gets one clear line on stderr and a non-zero exit,
never a traceback: 2 when the command line is wrong (unknown command, missing or invalid
--config, SQL that does not parse), 1 when there is nothing to answer from (no tables where the
configuration points; the line says where it looked, why there, and where tables do exist)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from controlplane.__main__ import main
from controlplane.io.sinks import DeltaRsWriter

ROOT = Path(__file__).resolve().parents[1]

READ_COMMANDS = [
    ["sql", "SELECT count(*) FROM groups"],
    ["groups", "list"],
    ["groups", "describe", "orders"],
    ["quotas", "describe", "alice"],
    ["maintenance"],
]


def error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line the command wrote to stderr (and nothing on stdout)."""
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def write_config(path: Path, tables_root: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"engine:\n  tables_root: {tables_root}\n", encoding="utf-8")
    return path


def write_groups_table(root: Path) -> None:
    DeltaRsWriter(root, "test").write(
        "groups", [{"group_id": "orders", "group_state": "Stable", "generation_id": 1}], 0
    )


@pytest.mark.parametrize("command", READ_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_missing_config_file_is_one_line_and_status_2(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.yaml"
    assert main([*command, "--config", str(missing)]) == 2
    assert error_line(capsys) == (
        f"python -m controlplane {command[0]}: configuration file not found: {missing}"
    )


@pytest.mark.parametrize("command", READ_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_an_invalid_config_file_names_the_key(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("engine:\n  tables_rot: out/x\n", encoding="utf-8")
    assert main([*command, "--config", str(config)]) == 2
    line = error_line(capsys)
    assert line == (
        f"python -m controlplane {command[0]}: {config}: engine: unknown key(s) ['tables_rot']"
    )


def test_a_config_that_is_not_yaml_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """PyYAML's messages span several lines (the mark, the context)."""
    config = tmp_path / "broken.yaml"
    config.write_text("engine: [tables_root\n", encoding="utf-8")
    assert main(["groups", "list", "--config", str(config)]) == 2
    assert error_line(capsys).startswith(
        f"python -m controlplane groups: {config}: not valid YAML: "
    )


def test_a_config_named_with_tables_root_is_still_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_groups_table(tmp_path / "tables")
    args = ["--tables-root", str(tmp_path / "tables"), "--config", str(tmp_path / "nope.yaml")]
    assert main(["groups", "list", *args]) == 2
    assert "configuration file not found" in error_line(capsys)


def test_sql_that_does_not_parse_says_so_and_not_run_the_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_groups_table(tmp_path)
    assert main(["sql", "SELEC * FROM groups", "--tables-root", str(tmp_path)]) == 2
    line = error_line(capsys)
    assert line.startswith("python -m controlplane sql: SQL syntax error: ")
    assert "SELEC" in line
    assert "engine" not in line


def test_a_missing_table_names_the_tables_that_are_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_groups_table(tmp_path)
    assert main(["sql", "SELECT * FROM decisions", "--tables-root", str(tmp_path)]) == 1
    assert error_line(capsys) == (
        f"python -m controlplane sql: no table 'decisions' under {tmp_path} (--tables-root);"
        " it has groups"
    )


def test_a_query_that_fails_is_one_line_even_when_datafusion_writes_several(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """DataFusion lists the valid fields on further lines after "No field named"."""
    write_groups_table(tmp_path)
    assert main(["sql", "SELECT nocol FROM groups", "--tables-root", str(tmp_path)]) == 1
    line = error_line(capsys)
    assert line.startswith("python -m controlplane sql: query failed: Schema error: No field")
    assert "groups.group_id" in line


def test_a_missing_sql_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sql", "nothing.sql", "--tables-root", str(tmp_path)]) == 2
    assert error_line(capsys) == "python -m controlplane sql: no such file: nothing.sql"


@pytest.mark.parametrize("command", READ_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_no_tables_where_the_default_config_points_names_the_config_that_has_them(
    command: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The README's commands right after `make demo`, without --config: they read
    conf/local.yaml's tables, which nothing wrote, while the demo's are elsewhere."""
    monkeypatch.chdir(tmp_path)
    write_config(tmp_path / "conf" / "local.yaml", "out/local/tables")
    write_config(tmp_path / "conf" / "demo.yaml", "out/demo/tables")
    write_groups_table(tmp_path / "out" / "demo" / "tables")
    assert main(command) == 1
    assert error_line(capsys) == (
        f"python -m controlplane {command[0]}: no Delta tables under out/local/tables"
        " (engine.tables_root of conf/local.yaml); out/demo/tables has tables:"
        " add --config conf/demo.yaml"
    )


@pytest.mark.parametrize("command", READ_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_tables_by_name_are_not_read_by_delta_rs(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A settings file naming the tables by name (engine.tables_schema, the Databricks
    configs): the delta-rs commands say to use Spark, before any JVM starts."""
    config = tmp_path / "names.yaml"
    config.write_text("engine:\n  tables_schema: main.controlplane\n", encoding="utf-8")
    assert main([*command, "--config", str(config)]) == 2
    line = error_line(capsys)
    assert line.startswith(f"python -m controlplane {command[0]}: the tables are by name in")
    assert f"main.controlplane (engine.tables_schema of {config})" in line
    assert "--engine spark" in line


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--tables-schema", "main"], "--tables-schema: expected catalog.schema"),
        (
            ["--tables-schema", "main.cp", "--tables-root", "t"],
            "--tables-root and --tables-schema: give one",
        ),
    ],
)
@pytest.mark.parametrize("command", [["sql", "SELECT 1", "--engine", "spark"], ["maintenance"]])
def test_a_bad_tables_schema_argument_is_a_usage_error(
    command: list[str], arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*command, *arguments]) == 2
    assert error_line(capsys) == f"python -m controlplane {command[0]}: {message}" + (
        " (two names of letters, digits, _ or -), got 'main'" if "expected" in message else ""
    )


def test_no_tables_anywhere_says_how_to_get_some(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    write_config(tmp_path / "conf" / "local.yaml", "out/local/tables")
    assert main(["groups", "list"]) == 1
    line = error_line(capsys)
    assert line.startswith(
        "python -m controlplane groups: no Delta tables under out/local/tables"
        " (engine.tables_root of conf/local.yaml); run the engine with --config conf/local.yaml"
    )
    assert "--tables-root DIR" in line


def test_the_configured_tables_are_read_when_they_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    config = write_config(tmp_path / "conf" / "demo.yaml", "out/demo/tables")
    write_groups_table(tmp_path / "out" / "demo" / "tables")
    assert main(["groups", "list", "--config", str(config)]) == 0
    assert "orders" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["bogus"], "unknown command 'bogus'"),
        (["groupz", "list"], "unknown command 'groupz'"),
        ([], "no command given"),
        (["replay"], "'replay' needs one of: group, quota"),
        (["replay", "groups"], "'replay' needs one of: group, quota (not 'groups')"),
    ],
)
def test_a_wrong_command_says_what_was_wrong_after_the_usage(
    argv: list[str], problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    *usage, last = err.splitlines()
    assert usage[0] == "usage: python -m controlplane COMMAND [ARGS]"
    assert last == f"python -m controlplane: error: {problem}"


def test_help_is_not_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("usage: python -m controlplane COMMAND")
    assert err == ""


def test_the_real_entry_point_prints_no_traceback(tmp_path: Path) -> None:
    """As a person runs it: a process, its stderr and its status."""
    done = subprocess.run(
        [sys.executable, "-m", "controlplane", "sql", "SELECT 1", "--config", "missing.yaml"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT / "lib"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        "python -m controlplane sql: configuration file not found: missing.yaml\n"
    )
