"""``python -m controlplane kafka-broker [--port N] [--sasl-port N] [--data DIR] [--topic T[:P]]``

A real single-node Kafka broker in the foreground, for running the jobs on Kafka locally (the
one the tests start, lib/controlplane/io/broker.py): Kafka 4.x from the pinned jars of
``make setup``, KRaft, loopback only. Prints the bootstrap addresses and the settings that point
the jobs at it; Ctrl-C or SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from types import FrameType

from controlplane.io.broker import LocalBroker


class _Stop(Exception):
    """SIGTERM, turned into an exception like Ctrl-C's KeyboardInterrupt."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def _topic(text: str) -> tuple[str, int]:
    name, _, partitions = text.partition(":")
    if not name or (partitions and not partitions.isdigit()) or partitions == "0":
        raise argparse.ArgumentTypeError(f"expected NAME or NAME:PARTITIONS, got {text!r}")
    return name, int(partitions or 1)


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not key or not sep:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m controlplane kafka-broker", description=__doc__.split("\n\n")[1]
    )
    parser.add_argument("--port", type=int, default=0, help="PLAINTEXT port (default: a free one)")
    parser.add_argument(
        "--sasl-port", type=int, default=0, help="SASL_PLAINTEXT port (default: a free one)"
    )
    parser.add_argument(
        "--data",
        metavar="DIR",
        help="keep configuration, data and logs in DIR across runs (default: a temporary"
        " directory, removed on stop)",
    )
    parser.add_argument(
        "--topic",
        type=_topic,
        action="append",
        default=[],
        metavar="NAME[:PARTITIONS]",
        help="create this topic (with LogAppendTime timestamps, as the engine needs) once the"
        " broker is up (repeatable; topics are not auto-created)",
    )
    parser.add_argument(
        "--set",
        type=_setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another broker setting, e.g. group.initial.rebalance.delay.ms=0 (repeatable)",
    )
    return parser.parse_args(argv)


def banner(broker: LocalBroker) -> str:
    users = ", ".join(f"{name}/{password}" for name, password in broker.users.items())
    return "\n".join(
        [
            f"Kafka {broker.kafka_version} is up (KRaft, broker+controller, node 1)"
            f" in {broker.started_in_s or 0:.1f} s.",
            f"  PLAINTEXT       {broker.bootstrap_servers}   (every client is User:ANONYMOUS)",
            f"  SASL_PLAINTEXT  {broker.sasl_bootstrap_servers}   SASL/PLAIN users: {users}",
            f"  data and logs   {broker.directory}  (broker log: {broker.log_file})",
            "",
            "Point the jobs at it: in the config file, for each source",
            "  sources:",
            "    coordinator:",
            "      format: kafka",
            "      path: <topic>",
            f"      kafka_bootstrap_servers: {broker.bootstrap_servers}",
            "Topics are not auto-created: start with --topic NAME[:PARTITIONS] to create them.",
            "Ctrl-C stops the broker.",
        ]
    )


def main(argv: list[str]) -> int:
    args = _args(argv)
    from controlplane.jvm import MissingJvm

    broker = LocalBroker(
        port=args.port, sasl_port=args.sasl_port, data_dir=args.data, extra_config=dict(args.set)
    )
    previous = signal.signal(signal.SIGTERM, _on_sigterm), signal.getsignal(signal.SIGINT)
    try:
        print("kafka-broker: starting a local Kafka broker ...", flush=True)
        broker.start()
        for name, partitions in args.topic:
            # the engine reads request topics only with the broker's timestamps
            broker.create_topic(name, partitions, {"message.timestamp.type": "LogAppendTime"})
            print(
                f"kafka-broker: created topic {name} ({partitions} partitions, LogAppendTime)",
                flush=True,
            )
        print(banner(broker), flush=True)
        while broker.running:
            time.sleep(0.5)
        print(f"kafka-broker: the broker exited on its own\n{broker.log_tails()}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, _Stop):
        # A second Ctrl-C must not interrupt the stop (the JVM has its own session: it gets
        # only the SIGTERM that stop() sends).
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        broker.stop()
        print("kafka-broker: stopped", flush=True)
        return 0
    except MissingJvm as exc:
        print(f"kafka-broker: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        print(f"kafka-broker: {exc}", file=sys.stderr)
        return 1
    finally:
        broker.stop()
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
