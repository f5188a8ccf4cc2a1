"""``python -m controlplane demo --config conf/demo.yaml``: the main job, locally.

Starts the coordinator and quota streaming queries on a local Spark session, then a fleet of
real clients talking to them through the landing directories and the Delta tables:

* ``orders`` (3 dynamic members, range) and ``billing`` (2 dynamic members, round-robin);
* ``inventory`` (2 static members, ``group.instance.id`` inv-1 and inv-2);
* ``orders-3`` crashes: removed after its session timeout, the group rebalances;
* ``billing-2`` stalls longer than ``max.poll.interval.ms``: it leaves, then rejoins on poll;
* ``inv-2`` restarts: no rebalance, same assignment, resumes from its committed offsets;
* an admin tool creates topics in bursts: some are throttled (KIP-599) and retried.

It prints progress while it runs, stops by itself, and ends with a summary from SQL over the
Delta outputs. Timeouts come from the ``client`` section, the story's timing from ``demo``.

``--transport kafka`` runs the same fleet over Kafka instead (cli/demo_kafka.py): a local
broker, Kafka sources and an answers topic for the engine, a KafkaTransport for the clients.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from controlplane.cli.demo_plan import DEMO_CLIENT_DEFAULTS, DemoPlan, log, parse_plan
from controlplane.cli.demo_run import DemoRun
from controlplane.core.config import ConfigError


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m controlplane demo", description=__doc__)
    parser.add_argument("--config", default="conf/demo.yaml")
    parser.add_argument("--duration-s", type=int, help="override demo.duration_s")
    parser.add_argument("--keep", action="store_true", help="keep earlier output (no wipe)")
    parser.add_argument("--verbose", action="store_true", help="log every micro-batch")
    parser.add_argument(
        "--latency-report",
        metavar="FILE",
        help="write the clients' round trips (ms) and the tables' location to FILE as JSON"
        " (bench/client_latency_bench.py)",
    )
    parser.add_argument(
        "--transport",
        choices=("files", "kafka"),
        default="files",
        help="files: landing directories and Delta reads (default); kafka: a local broker,"
        " request topics and an answers topic",
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = _args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    os.environ.setdefault(
        "PYSPARK_SUBMIT_ARGS", "--conf spark.ui.showConsoleProgress=false pyspark-shell"
    )
    noisy_loggers = ("controlplane.engine", "controlplane.io", "controlplane.progress", "py4j")
    for noisy in (*noisy_loggers, "controlplane.client"):
        logging.getLogger(noisy).setLevel(logging.INFO if args.verbose else logging.WARNING)
    # kafka-python logs every connection at INFO, a slow event-loop task (a loaded machine) as a
    # WARNING and a broker going away (the broker stops after the run) as an ERROR; the demo
    # reports what matters to it (answers that do not come) itself.
    logging.getLogger("kafka").setLevel(logging.INFO if args.verbose else logging.CRITICAL)
    from controlplane.client.config import ClientConfigError, consumer_config
    from controlplane.engine.options import parse_engine_options
    from controlplane.settings import load_settings

    try:
        settings = load_settings(args.config)
        options = parse_engine_options(settings, args.config)
        plan = parse_plan(settings.sections.get("demo"))
        client = {**DEMO_CLIENT_DEFAULTS, **(settings.sections.get("client") or {})}
        consumer_config("check", client)
    except (ConfigError, ClientConfigError) as error:
        print(f"demo: {error}", file=sys.stderr)
        return 2
    if args.duration_s is not None:
        plan = replace(plan, duration_s=args.duration_s)
    if options.coordinator_source is None or options.quota_source is None:
        print(
            "demo: the configuration needs sources.coordinator and sources.quota", file=sys.stderr
        )
        return 2
    if args.transport == "kafka":
        return _on_kafka(args, settings, plan, client)
    if not args.keep:
        _wipe(options)
    run = DemoRun(settings, options, plan, client, args.config)
    return _finish(run, args)


def _on_kafka(args: argparse.Namespace, settings: Any, plan: DemoPlan, client: Any) -> int:
    """Start a local broker and its topics, then run the demo with Kafka sources, the answers
    topic and a KafkaTransport; the broker stops with the run."""
    from controlplane.cli.demo_kafka import kafka_settings, start_broker
    from controlplane.engine.options import parse_engine_options
    from controlplane.io.broker import BrokerError
    from controlplane.jvm import MissingJvm

    try:  # before starting anything: can this engine run on Kafka with an answers topic?
        parse_engine_options(kafka_settings(settings, "127.0.0.1:9092"), args.config)
    except ConfigError as error:
        print(f"demo: this build's engine cannot run the demo on Kafka: {error}", file=sys.stderr)
        return 2
    print("demo: starting a local Kafka broker and the demo's topics", flush=True)
    try:
        broker = start_broker()
    except (MissingJvm, BrokerError) as error:
        print(f"demo: {error}", file=sys.stderr)
        return 2
    try:
        print(f"demo: Kafka {broker.kafka_version} at {broker.bootstrap_servers}", flush=True)
        settings = kafka_settings(settings, broker.bootstrap_servers)
        options = parse_engine_options(settings, args.config)
        if not args.keep:
            _wipe(options)
        run = DemoRun(settings, options, plan, client, args.config, broker=broker)
        return _finish(run, args)
    finally:
        broker.stop()


def _finish(run: Any, args: argparse.Namespace) -> int:
    code: int = run.execute()
    if args.latency_report:
        report = {"transport": args.transport, **run.latency_report()}
        Path(args.latency_report).write_text(json.dumps(report), encoding="utf-8")
    return code


def _wipe(options: Any) -> None:
    """Start from nothing: remove the demo's own directories (only relative paths under out/)."""
    paths = [options.tables_root, options.checkpoint_root]
    for source in (options.coordinator_source, options.quota_source):
        if source.format == "kafka":  # a topic, on a broker started for this run
            continue
        paths += [source.path, source.archive_dir or f"{source.path.rstrip('/')}-archive"]
    for text in paths:
        path = Path(text)
        if path.is_absolute() or not path.parts or path.parts[0] != "out":
            log.warning("not wiping %s (only relative paths under out/ are wiped)", path)
            continue
        if path.exists():
            print(f"demo: starting fresh, removing {path} (--keep to keep it)")
        shutil.rmtree(path, ignore_errors=True)
