"""The demo's closing summary: SQL (DataFusion, through deltalake) over the Delta outputs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

TABLES = ("decisions", "group_events", "groups", "quota_decisions", "throttle_events")

QUERIES: tuple[tuple[str, str], ...] = (
    (
        "Rebalances and generations per group",
        "SELECT group_id,"
        " SUM(CASE WHEN kind = 'rebalance_started' THEN 1 ELSE 0 END) AS rebalances,"
        " SUM(CASE WHEN kind = 'generation_completed' THEN 1 ELSE 0 END) AS generations"
        " FROM group_events GROUP BY group_id ORDER BY group_id",
    ),
    (
        "Members removed, by reason",
        "SELECT group_id, reason, COUNT(*) AS members FROM group_events"
        " WHERE kind = 'member_removed' GROUP BY group_id, reason ORDER BY group_id, reason",
    ),
    (
        "Static membership events",
        "SELECT group_id, kind, group_instance_id, COUNT(*) AS events FROM group_events"
        " WHERE group_instance_id IS NOT NULL AND kind <> 'state_changed'"
        " GROUP BY group_id, kind, group_instance_id ORDER BY group_id, group_instance_id, kind",
    ),
    (
        "Answers by request type and error",
        "SELECT type, error, COUNT(*) AS answers,"
        " CAST(AVG(decided_at_ms - event_time_ms) AS BIGINT) AS avg_wait_ms"
        " FROM decisions GROUP BY type, error ORDER BY type, error",
    ),
    (
        "Throttled principals (KIP-599)",
        "SELECT user, client_id, COUNT(*) AS throttled_requests,"
        " SUM(throttle_time_ms) AS throttle_ms_total, MAX(throttle_time_ms) AS throttle_ms_max"
        " FROM throttle_events GROUP BY user, client_id ORDER BY user, client_id",
    ),
    (
        "Mutation requests by outcome",
        "SELECT user, error, COUNT(*) AS requests,"
        " SUM(CASE WHEN throttle_time_ms > 0 THEN 1 ELSE 0 END) AS with_throttle"
        " FROM quota_decisions GROUP BY user, error ORDER BY user, error",
    ),
    (
        "Groups now (the `groups` table, kept by MERGE)",
        "SELECT group_id, group_state, generation_id, leader_id FROM groups ORDER BY group_id",
    ),
)


def run_sql(tables_root: str | Path, sql: str) -> list[dict[str, Any]]:
    """Run one SQL text over every output table that exists under ``tables_root``."""
    from deltalake import DeltaTable, QueryBuilder

    builder = QueryBuilder()
    for name in TABLES:
        path = Path(tables_root) / name
        if DeltaTable.is_deltatable(str(path)):
            builder = builder.register(name, DeltaTable(str(path)))
    result = builder.execute(sql)
    import pyarrow as pa

    rows: list[dict[str, Any]] = pa.table(result).to_pylist()
    return rows


def format_rows(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "  (no rows)"
    columns = list(rows[0])
    cells = [[_text(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  " + "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def _text(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return "-" if value is None else str(value)


def print_summary(tables_root: str | Path, config_path: str, admin_user: str = "admin") -> None:
    print("\n=== Summary: SQL over the Delta outputs in", tables_root, "===")
    for title, sql in QUERIES:
        print(f"\n{title}:")
        try:
            print(format_rows(run_sql(tables_root, sql)))
        except Exception as error:  # a table the run never wrote: say so, go on
            print(f"  (not available: {str(error).splitlines()[0]})")
    python = _python()
    print(
        "\nQuery further (from this directory; DataFusion SQL over the same tables):\n"
        f'  {python} -m controlplane sql "SELECT kind, COUNT(*) AS n FROM group_events'
        f' GROUP BY kind" --config {config_path}\n'
        f"  {python} -m controlplane groups describe orders --config {config_path}\n"
        f"  {python} -m controlplane quotas describe {admin_user} --config {config_path}"
    )


def _python() -> str:
    """This interpreter as the reader can type it: relative when it lives under the current
    directory (``.venv/bin/python`` after ``make demo``), else its full path."""
    executable = Path(sys.executable)
    try:
        return str(executable.relative_to(Path.cwd()))
    except ValueError:
        return str(executable)
