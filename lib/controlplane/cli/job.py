"""``python -m controlplane job QUERY [--config FILE] [--tables-root DIR] [--checkpoint-root DIR]
[--landing-root DIR] [--available-now]``: run streaming queries until they are stopped.

QUERY is ``coordinator``, ``quota`` or ``all`` (both in one session). The Databricks jobs run
this command from the installed wheel (``controlplane-task job coordinator ...``,
conf/bundle/resources/streaming.job.yml); ``jobs/*.py`` run it from a checkout or under
spark-submit. docs/engine.md, "Operations" and "Deploying on Databricks".
"""

from __future__ import annotations

import sys

from controlplane.engine.launch import run

PROG = "python -m controlplane job"

QUERIES: dict[str, tuple[str, ...]] = {
    "coordinator": ("coordinator",),
    "quota": ("quota",),
    "all": ("coordinator", "quota"),
}


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if not argv or argv[0] not in QUERIES:
        given = f" (not {argv[0]!r})" if argv else ""
        print(f"{PROG}: error: QUERY is one of {', '.join(QUERIES)}{given}", file=sys.stderr)
        return 2
    query = argv[0]
    description = f"the {query} streaming quer{'ies' if query == 'all' else 'y'}"
    return run(argv[1:], QUERIES[query], description, prog=f"{PROG} {query}")
