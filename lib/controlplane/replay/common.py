"""What every replay command shares: arguments, settings, streaming the input, writing rows.

``python -m controlplane replay KIND --events FILE --out DIR [--config FILE] [--summary]``

The input is read line by line (memory grows with the processor's keys, never with the number
of events). Each non-blank line becomes one :class:`TimedEvent`:

* a JSON object: ``time_ms`` is its ``event_time_ms`` when that is an integer (else None, and
  the core answers the bad field), ``line`` is ``"FILE:N"`` (N counts from 1);
* anything else (not UTF-8, not JSON, not an object): ``error`` says why, ``raw`` keeps the
  text and ``event`` is empty, so the core answers it with an INVALID_REQUEST row.

Blank lines carry no event and are skipped (they are counted in the summary on stderr).
Rows are written as they come to ``DIR/<table>.jsonl``, one JSON object a line. The exit code
is 0 when the input was read, 1 when the command cannot run (missing input, invalid
configuration, output directory not writable) and 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from controlplane.core.config import ConfigError, Settings
from controlplane.core.jsonwire import decode_event_text, long_or_none
from controlplane.core.runtime import TimedEvent
from controlplane.settings import load_settings

Rows = Mapping[str, Sequence[Mapping[str, Any]]]

EXIT_OK = 0
EXIT_CANNOT_RUN = 1
EXIT_USAGE = 2


class Processor(Protocol):
    """A core behind the replay: fed one event at a time, then finished once; ``summary`` is
    what ``--summary`` prints."""

    def feed(self, event: TimedEvent) -> Rows: ...

    def finish(self) -> Rows: ...

    def summary(self) -> str: ...


@dataclass(frozen=True, slots=True)
class ReplayArgs:
    events: Path
    out: Path
    config: Path | None
    summary: bool


@dataclass(slots=True)
class _Counts:
    lines: int = 0
    blank: int = 0
    unparsed: int = 0


def parse_args(argv: Sequence[str], kind: str) -> ReplayArgs:
    """Parse the command line; argparse exits with 2 (and a usage message) when it is wrong."""
    parser = argparse.ArgumentParser(
        prog=f"python -m controlplane replay {kind}",
        description=f"Replay {kind} events from a JSON Lines file through the {kind} core.",
    )
    parser.add_argument("--events", required=True, type=Path, help="JSON Lines input file")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--config", type=Path, default=None, help="YAML/JSON settings file")
    parser.add_argument(
        "--summary", action="store_true", help="print a summary of what happened to stdout"
    )
    ns = parser.parse_args(list(argv))
    return ReplayArgs(events=ns.events, out=ns.out, config=ns.config, summary=ns.summary)


def event_from_line(raw: bytes, name: str, number: int) -> TimedEvent | None:
    """One input line as a TimedEvent; None for a blank line."""
    line = f"{name}:{number}"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        shown = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        return TimedEvent({}, None, line=line, error=f"not UTF-8 text: {exc.reason}", raw=shown)
    text = text.rstrip("\r\n")
    if not text.strip():
        return None
    try:
        value = decode_event_text(text)
    except (ValueError, RecursionError) as exc:
        return TimedEvent({}, None, line=line, error=f"not valid JSON: {exc}", raw=text)
    if not isinstance(value, dict):
        kind = type(value).__name__
        error = f"not a JSON object (got a JSON {_json_kind(kind)})"
        return TimedEvent({}, None, line=line, error=error, raw=text)
    return TimedEvent(value, long_or_none(value.get("event_time_ms")), line=line)


def _json_kind(python_type: str) -> str:
    return {
        "list": "array",
        "str": "string",
        "int": "number",
        "float": "number",
        "bool": "boolean",
        "NoneType": "null",
    }.get(python_type, python_type)


def read_events(path: Path, counts: _Counts | None = None) -> Iterator[TimedEvent]:
    """Stream ``path`` as TimedEvents, line by line."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            event = event_from_line(raw, path.name, number)
            if counts is not None:
                counts.lines += 1
                if event is None:
                    counts.blank += 1
                elif event.error is not None:
                    counts.unparsed += 1
            if event is not None:
                yield event


class RowWriter:
    """Writes each table's rows to ``DIR/<table>.jsonl`` as they come, counting them."""

    def __init__(self, files: Mapping[str, IO[str]]) -> None:
        self._files = files
        self.counts = dict.fromkeys(files, 0)

    def write(self, rows: Rows) -> None:
        for table, table_rows in rows.items():
            handle = self._files.get(table)
            if handle is None:
                raise KeyError(f"the processor produced rows for an undeclared table {table!r}")
            for row in table_rows:
                handle.write(json.dumps(row, separators=(",", ":"), ensure_ascii=False))
                handle.write("\n")
            self.counts[table] += len(table_rows)


def replay_main(
    argv: list[str],
    *,
    kind: str,
    outputs: tuple[str, ...],
    make_processor: Callable[[Settings], Processor],
) -> int:
    """Run one replay command; returns the process exit code."""
    try:
        args = parse_args(argv, kind)
    except SystemExit as exc:  # argparse: usage errors (2) and --help (0)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        return _fail(kind, f"invalid configuration: {exc}")
    if not args.events.is_file():
        return _fail(kind, f"events file not found: {args.events}")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return _fail(kind, f"cannot create the output directory {args.out}: {exc}")
    processor = make_processor(settings)
    try:
        counts, written = _run(args, outputs, processor)
    except OSError as exc:
        return _fail(kind, f"cannot read {args.events} or write {args.out}: {exc}")
    tables = ", ".join(f"{written[t]} {t}" for t in outputs)
    print(
        f"replay {kind}: read {counts.lines} lines of {args.events} "
        f"({counts.blank} blank, {counts.unparsed} unparsable); wrote {tables} "
        f"to {args.out}",
        file=sys.stderr,
    )
    if args.summary:
        print(processor.summary())
    return EXIT_OK


def _run(
    args: ReplayArgs, outputs: tuple[str, ...], processor: Processor
) -> tuple[_Counts, dict[str, int]]:
    counts = _Counts()
    with ExitStack() as stack:
        files = {
            table: stack.enter_context((args.out / f"{table}.jsonl").open("w", encoding="utf-8"))
            for table in outputs
        }
        writer = RowWriter(files)
        for event in read_events(args.events, counts):
            writer.write(processor.feed(event))
        writer.write(processor.finish())
    return counts, writer.counts


def _fail(kind: str, message: str) -> int:
    print(f"replay {kind}: error: {message}", file=sys.stderr)
    return EXIT_CANNOT_RUN
