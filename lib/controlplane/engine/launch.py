"""What the jobs share: argument parsing, the session (local or the cluster's), starting the
queries and waiting. The jobs themselves are a few lines each (jobs/*.py)."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence
from typing import Any

from controlplane.core.config import ConfigError
from controlplane.engine.options import EngineOptions, TimeMode, parse_engine_options
from controlplane.settings import load_settings

log = logging.getLogger("controlplane.job")


def parse_args(argv: Sequence[str], description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--config", default="conf/local.yaml", help="YAML settings file")
    parser.add_argument("--tables-root", help="override engine.tables_root (e.g. a Volume path)")
    parser.add_argument("--checkpoint-root", help="override engine.checkpoint_root")
    parser.add_argument(
        "--available-now",
        action="store_true",
        help="engine.mode event_time only: process what the sources hold, then stop (replays)",
    )
    return parser.parse_args(list(argv))


def on_databricks() -> bool:
    return "DATABRICKS_RUNTIME_VERSION" in os.environ


def session_for(options: EngineOptions, app_name: str) -> Any:
    if on_databricks():  # pragma: no cover - cluster only
        from pyspark.sql import SparkSession

        from controlplane.engine.session import apply_state_conf

        spark = SparkSession.builder.getOrCreate()
        apply_state_conf(spark, options.shuffle_partitions)
        return spark
    from pathlib import Path

    from controlplane.engine.session import build_local_session

    lib = str(Path(__file__).resolve().parents[2])  # Python workers import the adapter by name
    paths = [lib, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return build_local_session(app_name, shuffle_partitions=options.shuffle_partitions)


def run(argv: Sequence[str], queries: Sequence[str], description: str) -> int:
    """Parse, build the session, start the named queries ("coordinator", "quota"), await."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    args = parse_args(argv, description)
    try:
        settings = load_settings(args.config)
        options = parse_engine_options(settings, args.config)
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    missing = [name for name in queries if getattr(options, f"{name}_source") is None]
    if missing:  # before any session or query starts
        log.error("%s: sources.%s is not configured", args.config, ", sources.".join(missing))
        return 2
    if args.available_now and options.mode is not TimeMode.EVENT_TIME:
        log.error("--available-now needs engine.mode: event_time (timeouts never let it end)")
        return 2
    overrides = {"tables_root": args.tables_root, "checkpoint_root": args.checkpoint_root}
    from dataclasses import replace

    options = replace(options, **{k: v for k, v in overrides.items() if v})
    from controlplane.engine.queries import (
        build_coordinator_query,
        build_quota_query,
        register_progress_listener,
    )
    from controlplane.io.kafka_clients import KafkaSetupError

    spark = session_for(options, "controlplane-" + "-".join(queries))
    register_progress_listener(spark, options)
    builders = {"coordinator": build_coordinator_query, "quota": build_quota_query}
    started = []
    try:
        for name in queries:
            try:
                writer = builders[name](
                    spark,
                    settings,
                    config_path=args.config,
                    options=options,
                    available_now=args.available_now,
                )
            except (ConfigError, KafkaSetupError) as exc:  # secrets, topics: before any start
                log.error("%s: %s", name, exc)
                return 2
            started.append(writer.start())
            log.info("started %s", name)
        if args.available_now:  # each query stops by itself: wait for all, not the first
            for query in started:
                query.awaitTermination()
        else:
            spark.streams.awaitAnyTermination()
    except KeyboardInterrupt:
        log.info("stopping")
    finally:
        for query in started:
            query.stop()
    failed = [q for q in started if q.exception() is not None]
    return 1 if failed else 0
