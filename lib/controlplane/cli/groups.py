"""``python -m controlplane groups list|describe GROUP [--tables-root DIR] [--config FILE]``

In the spirit of ``kafka-consumer-groups --list`` / ``--describe``: reads the ``groups`` table
(kept current by MERGE) and, for describe, the members and the latest committed offsets.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from controlplane.cli.tables import CommandError, Tables, add_location_args, locate, query, render

PROG = "python -m controlplane groups"


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def list_groups(tables: Tables) -> str:
    sql = (
        "SELECT group_id, group_state AS state, generation_id AS generation, protocol_name,"
        " array_length(members) AS members FROM groups ORDER BY group_id"
    )
    return render(query(tables, sql))


def describe_group(tables: Tables, group_id: str) -> str | None:
    rows = query(tables, f"SELECT * FROM groups WHERE group_id = {_quote(group_id)}").to_pylist()
    if not rows:
        return None
    group = rows[0]
    lines = [
        f"GROUP {group['group_id']}  STATE {group['group_state']}  GENERATION "
        f"{group['generation_id']}  PROTOCOL {group['protocol_type'] or '-'}/"
        f"{group['protocol_name'] or '-'}  LEADER {group['leader_id'] or '-'}",
        "",
    ]
    import pyarrow as pa

    members = group["members"] or []
    table = pa.Table.from_pylist(
        [
            {
                "member_id": m["member_id"],
                "group_instance_id": m["group_instance_id"],
                "client_id": m["client_id"],
                "host": m["client_host"],
                "offline": m["offline"],
            }
            for m in members
        ]
    )
    lines.append(render(table) if members else "(no members)")
    offsets = _offsets(tables, group_id)
    if offsets:
        lines += ["", render(pa.Table.from_pylist(offsets))]
    return "\n".join(lines)


def _offsets(tables: Tables, group_id: str) -> list[dict[str, Any]]:
    """The latest successful commit per partition, from the decisions' offset_commit rows."""
    sql = (
        "SELECT decided_at_ms, offsets FROM decisions WHERE type = 'offset_commit' AND"
        f" error_code = 0 AND group_id = {_quote(group_id)} ORDER BY decided_at_ms"
    )
    try:
        rows = query(tables, sql).to_pylist()
    except CommandError:  # no decisions table yet: no offsets to show
        return []
    latest: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        for item in row["offsets"] or []:
            if item["error_code"] == 0:
                key = (item["topic"], item["partition"])
                latest[key] = {
                    "topic": item["topic"],
                    "partition": item["partition"],
                    "offset": item["offset"],
                }
    return [latest[k] for k in sorted(latest)]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[1])
    sub = parser.add_subparsers(dest="command", required=True)
    add_location_args(sub.add_parser("list", help="every group with its state"))
    describe = sub.add_parser("describe", help="one group: state, members, committed offsets")
    describe.add_argument("group")
    add_location_args(describe)
    args = parser.parse_args(argv)
    try:
        tables = locate(args)
        if args.command == "list":
            print(list_groups(tables))
            return 0
        text = describe_group(tables, args.group)
    except CommandError as error:
        return error.report(PROG)
    if text is None:
        print(f"Consumer group '{args.group}' does not exist.", file=sys.stderr)
        return 1
    print(text)
    return 0
