"""``python -m controlplane quotas describe USER [--tables-root DIR] [--config FILE]``

In the spirit of ``kafka-configs --describe --entity-type users``: the configured
``controller_mutation_rate`` entries that can apply to the user (from the settings file), then
what the engine decided for the user's requests: per quota key and client id, the requests,
the throttled ones, the total and largest throttle time, and rejected topics.
"""

from __future__ import annotations

import argparse
from typing import Any

from controlplane.cli.tables import CommandError, Tables, add_location_args, locate, query, render
from controlplane.core.config import DEFAULT_ENTITY

PROG = "python -m controlplane quotas"


def configured_entries(config_path: str | None, user: str) -> list[str]:
    if not config_path:
        return []
    from controlplane.settings import load_settings

    lines = []
    for entry in load_settings(config_path).quota.quotas:
        if entry.user not in (user, DEFAULT_ENTITY, None):
            continue
        entity = ", ".join(
            f"{kind}={name}"
            for kind, name in (("user", entry.user), ("client-id", entry.client_id))
            if name
        )
        rate = entry.controller_mutation_rate
        lines.append(f"Quota configs for {entity} are controller_mutation_rate={rate}")
    return lines


def usage_by_key(tables: Tables, user: str) -> Any:
    quoted = "'" + user.replace("'", "''") + "'"
    sql = (
        "SELECT quota_key, client_id, max(quota_entity) AS quota_entity,"
        " max(rate_per_s) AS rate_per_s,"
        " count(*) AS requests, sum(CASE WHEN throttle_time_ms > 0 THEN 1 ELSE 0 END) AS throttled,"
        " sum(throttle_time_ms) AS throttle_ms_total, max(throttle_time_ms) AS throttle_ms_max,"
        " sum(CASE WHEN error_code <> 0 THEN 1 ELSE 0 END) AS errors"
        f" FROM quota_decisions WHERE user = {quoted} GROUP BY quota_key, client_id"
        " ORDER BY quota_key, client_id"
    )
    return query(tables, sql)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[1])
    sub = parser.add_subparsers(dest="command", required=True)
    describe = sub.add_parser("describe", help="a user's quota configuration and throttling")
    describe.add_argument("user")
    add_location_args(describe)
    args = parser.parse_args(argv)
    try:
        tables = locate(args)
        for line in configured_entries(tables.config, args.user):
            print(line)
        usage = usage_by_key(tables, args.user)
    except CommandError as error:
        return error.report(PROG)
    if usage.num_rows == 0:
        print(f"No mutation requests recorded for user '{args.user}'.")
        return 0
    print(render(usage))
    return 0
