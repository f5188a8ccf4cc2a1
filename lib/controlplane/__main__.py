"""``python -m controlplane COMMAND ...``: dispatches to the module that owns each command.

Every command module exposes ``main(argv: list[str]) -> int``. Imports are lazy so that the
replay commands load no Spark and no pandas.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[tuple[str, ...], tuple[str, str]] = {
    ("replay", "group"): (
        "controlplane.replay.group",
        "replay coordinator events from a JSON Lines file",
    ),
    ("replay", "quota"): (
        "controlplane.replay.quota",
        "replay mutation events from a JSON Lines file",
    ),
    ("sql",): ("controlplane.cli.sql", "run a SQL file or text over the local Delta tables"),
    ("groups",): ("controlplane.cli.groups", "list or describe groups (kafka-consumer-groups)"),
    ("quotas",): ("controlplane.cli.quotas", "describe a principal's quota (kafka-configs)"),
    ("maintenance",): ("controlplane.cli.maintenance", "compact and vacuum the Delta tables"),
    ("job",): ("controlplane.cli.job", "run the streaming queries (coordinator, quota or all)"),
    ("demo",): ("controlplane.cli.demo", "the main job: engine + a fleet of real clients, locally"),
    ("class-archive",): (
        "controlplane.cli.class_archive",
        "build the local JVM's class archive (a quicker job start; make setup runs it)",
    ),
    ("kafka-broker",): (
        "controlplane.cli.kafka_broker",
        "a local single-node Kafka broker for the jobs (Ctrl-C stops it)",
    ),
}


def _usage() -> str:
    lines = ["usage: python -m controlplane COMMAND [ARGS]", "", "commands:"]
    for words, (_, text) in COMMANDS.items():
        lines.append(f"  {' '.join(words):<14} {text}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    for size in (2, 1):
        words = tuple(args[:size])
        if words in COMMANDS:
            module = importlib.import_module(COMMANDS[words][0])
            result: int = module.main(args[size:])
            return result
    if args[:1] in (["-h"], ["--help"]):
        print(_usage())
        return 0
    print(_usage(), file=sys.stderr)
    print(f"python -m controlplane: error: {_what_is_wrong(args)}", file=sys.stderr)
    return 2


def _what_is_wrong(args: list[str]) -> str:
    if not args:
        return "no command given"
    following = sorted(words[1] for words in COMMANDS if len(words) == 2 and words[0] == args[0])
    if following:
        return f"{args[0]!r} needs one of: {', '.join(following)}" + (
            f" (not {args[1]!r})" if len(args) > 1 else ""
        )
    return f"unknown command {args[0]!r}"


def task() -> None:
    """The entry point of Databricks wheel tasks (``controlplane-task``): the task may call it
    in-process and ignore a returned status, so a failing command raises ``SystemExit``, which
    fails the task whether it runs as a process or not."""
    code = main()
    if code:
        raise SystemExit(code)


if __name__ == "__main__":
    sys.exit(main())
