"""What the jobs share: argument parsing, the session (local or the cluster's), starting the
queries and waiting. The jobs themselves are a few lines each (jobs/*.py)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from controlplane.core.config import ConfigError
from controlplane.engine.options import (
    EngineOptions,
    TimeMode,
    parse_engine_options,
    with_landing_root,
    with_tables,
)
from controlplane.engine.session import on_databricks, started_by_spark_submit
from controlplane.settings import load_settings

log = logging.getLogger("controlplane.job")


def parse_args(
    argv: Sequence[str], description: str, prog: str | None = None
) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--config", default="conf/local.yaml", help="YAML settings file")
    parser.add_argument("--tables-root", help="override engine.tables_root (e.g. a Volume path)")
    parser.add_argument(
        "--tables-schema",
        metavar="CATALOG.SCHEMA",
        help="override engine.tables_schema: the tables by name in that schema (native writer)",
    )
    parser.add_argument("--checkpoint-root", help="override engine.checkpoint_root")
    parser.add_argument(
        "--landing-root",
        help="jsonl sources only: read ROOT/<query>, archive to ROOT/archive/<query>",
    )
    parser.add_argument(
        "--available-now",
        action="store_true",
        help="engine.mode event_time only: process what the sources hold, then stop (replays)",
    )
    return parser.parse_args(list(argv))


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


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

# Python loggers that log every py4j call at INFO (one line per listener callback, per batch).
QUIET_PYTHON_LOGGERS = ("py4j", "pyspark")

# Spark's "Current batch is falling behind. The trigger interval is 1000 milliseconds, but
# spent 1733 milliseconds" (ProcessingTimeExecutor, WARN): with processing-time timeouts
# Spark runs a batch every trigger even when idle, and locally an idle batch takes 1.1-1.3 s
# against a 1 s trigger, so it fired every batch and said nothing useful. The job's own
# progress line counts the batches over the trigger and the timer lateness, which is what a
# slow batch costs, and turns into a warning when timers fire later than the failover gap.
# (The class moved to the .runtime package in Spark 4.1.)
QUIET_JVM_LOGGERS = (
    "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor",
    "org.apache.spark.sql.execution.streaming.ProcessingTimeExecutor",
)


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    for name in QUIET_PYTHON_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def quiet_jvm_loggers(spark: Any) -> None:
    try:
        jvm = spark.sparkContext._jvm
        configurator = jvm.org.apache.logging.log4j.core.config.Configurator
        error = jvm.org.apache.logging.log4j.Level.ERROR
        for name in QUIET_JVM_LOGGERS:
            configurator.setLevel(name, error)
    except Exception as exc:  # another logging backend: keep Spark's warnings
        log.debug("could not set the JVM log levels: %s", exc)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequest:
    """SIGTERM or SIGINT asks the job to stop; the handlers only record it.

    The main thread stops the queries: a handler runs between two bytecodes of the main
    thread, which may be inside a py4j call or a write to stderr, so a handler that raised
    (KeyboardInterrupt) or logged broke that call ("RuntimeError: reentrant call", py4j
    errors). A second signal ends the process at once (exit status 128 + signal).
    """

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signal_name: str | None = None
        self.signals = 0

    def handle(self, signum: int, frame: object = None) -> None:
        self.signals += 1
        if self.signals > 1:
            os.write(2, b"controlplane: second signal, exiting now\n")
            os._exit(128 + signum)
        self.request(signal.Signals(signum).name)

    def request(self, name: str) -> None:
        if self.signal_name is None:
            self.signal_name = name
        self.event.set()

    def install(self) -> Callable[[], None]:
        """Handle SIGTERM and SIGINT; returns what puts the previous handlers back. Outside the
        main thread (a runtime that calls the entry point from a thread of its own) Python
        refuses handlers: the job then runs without them, and stops when its run is cancelled
        (its batches are idempotent, docs/engine.md, "Sinks")."""
        if threading.current_thread() is not threading.main_thread():
            log.debug("not the main thread: no SIGTERM/SIGINT handlers")
            return lambda: None
        previous = {signum: signal.signal(signum, self.handle) for signum in STOP_SIGNALS}

        def restore() -> None:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

        return restore

    def forward_jvm_signals(self, spark: Any) -> None:
        """Under spark-submit the JVM is the parent process: SIGTERM goes to it, and Ctrl-C to
        both. Its default handlers shut Spark down under the running queries; replace them
        with a request to stop, handled like Python's."""
        try:
            from pyspark.java_gateway import ensure_callback_server_started

            gateway = spark.sparkContext._gateway
            ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
            jvm = spark.sparkContext._jvm
            for name in ("TERM", "INT"):
                jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal(name), _JvmSignalHandler(self))
        except Exception as exc:
            log.warning("SIGTERM to the JVM will not stop the queries gracefully: %s", exc)

    def wait(self, queries: Sequence[Any], every_query: bool) -> None:
        """Until a stop is requested, or the first query (``every_query``: the last) ends."""
        while not self.event.is_set():
            ended = [not query.isActive for query in queries]
            if all(ended) if every_query else any(ended):
                return
            self.event.wait(1.0)


class _JvmSignalHandler:
    """sun.misc.SignalHandler, called by the JVM through py4j's callback server."""

    def __init__(self, stop: StopRequest) -> None:
        self.stop = stop

    def handle(self, sig: Any) -> None:
        self.stop.request(f"SIG{sig.getName()}")

    class Java:
        implements: ClassVar[list[str]] = ["sun.misc.SignalHandler"]


STOP_TIMEOUT_S = 60.0  # for the running batches to finish before the queries are interrupted
BETWEEN_BATCHES_WAIT_S = 5.0  # for a moment between two batches, to end a query there

# Spark's StreamExecution state object meaning "stopped" (Spark 4.1 moved it to .runtime).
_TERMINATED = (
    "org.apache.spark.sql.execution.streaming.runtime.TERMINATED$",
    "org.apache.spark.sql.execution.streaming.TERMINATED$",
)


def finish_current_batch(spark: Any, query: Any) -> bool:
    """Ask the query to stop after its running batch, without interrupting it.

    ``query.stop()`` interrupts the stream thread, and a batch interrupted in its
    foreachBatch (a Spark job cancelled under the sink's ``toArrow``) printed a Python
    traceback through py4j, TaskKilled warnings and, from Spark's stream thread, a
    StackOverflowError of a thousand Java lines (Spark matches the Python error's text with a
    recursive regular expression). Spark's trigger loop runs a batch only while the query's
    state is not TERMINATED and ends after a batch once it is: setting that state (what
    ``stop()`` does before it interrupts) lets the running batch finish and commit, and a
    query waiting for its next trigger end at that trigger. Internal API: False when this
    Spark has no such state (the caller then stops the query the usual way)."""
    try:
        jvm = spark.sparkContext._jvm
        for name in _TERMINATED:
            try:
                terminated = jvm.java.lang.Class.forName(name).getField("MODULE$").get(None)
            except Exception:
                continue
            query._jsq.streamingQuery().state().set(terminated)
            return True
    except Exception as exc:
        log.debug("cannot end %s after its batch: %s", query.name, exc)
    return False


def quiet_for_stop(spark: Any) -> None:
    """While the job stops, Spark's log goes quiet: a batch still ends, rarely, interrupted
    (Spark interrupts some stream threads whose query is stopping), and what Spark then says
    (an interrupted broadcast or file write, a Python callback error with its traceback, an
    uncaught StackOverflowError from its own error matching) is noise: the batch is not
    committed and replays on restart. The job's own line says how the stop went."""
    logging.getLogger("py4j").setLevel(logging.CRITICAL + 1)
    try:
        jvm = spark.sparkContext._jvm
        handler = jvm.org.apache.spark.util.SparkUncaughtExceptionHandler(False)  # to log4j
        jvm.java.lang.Thread.setDefaultUncaughtExceptionHandler(handler)
        configurator = jvm.org.apache.logging.log4j.core.config.Configurator
        configurator.setRootLevel(jvm.org.apache.logging.log4j.Level.OFF)
    except Exception as exc:
        log.debug("could not quiet Spark for the stop: %s", exc)


def stop_gracefully(
    spark: Any, listener: Any, queries: Sequence[Any], timeout_s: float = STOP_TIMEOUT_S
) -> list[str]:
    """Each query ends between two batches when it has such a moment within
    ``BETWEEN_BATCHES_WAIT_S``, else after its running batch (``finish_current_batch``);
    ``stop()``, which interrupts, for one still running after ``timeout_s``. Then the listener
    goes (a callback into a stopping Python process raised Py4JExceptions with Java stacks on
    stderr), then the session. Returns the names of the queries that had to be interrupted."""
    import time

    quiet_for_stop(spark)
    start = time.monotonic()
    pending = [query for query in queries if query.isActive]
    while pending:
        waited = time.monotonic() - start
        for query in list(pending):
            between = not query.isActive or not query.status["isTriggerActive"]
            if between or waited >= BETWEEN_BATCHES_WAIT_S:
                if not finish_current_batch(spark, query):
                    query.stop()
                pending.remove(query)
        time.sleep(0.02)
    interrupted = []
    for query in queries:
        remaining = timeout_s - (time.monotonic() - start)
        if remaining > 0 and _ended(query, remaining):
            continue
        interrupted.append(str(query.name))
        query.stop()
    if listener is not None:
        flush = getattr(listener, "flush", None)
        if flush is not None:  # the query_progress rows not committed yet
            flush()
        spark.streams.removeListener(listener)
    spark.stop()
    return interrupted


def _ended(query: Any, timeout_s: float) -> bool:
    try:
        return bool(query.awaitTermination(timeout_s))
    except Exception:  # it had failed: awaitTermination raises its error
        return True


def run(
    argv: Sequence[str], queries: Sequence[str], description: str, prog: str | None = None
) -> int:
    """Parse, build the session, start the named queries ("coordinator", "quota"), wait until
    they end or SIGTERM/SIGINT asks them to stop (docs/engine.md, "Operations")."""
    configure_logging()
    args = parse_args(argv, description, prog)
    try:
        settings = load_settings(args.config)
        options = parse_engine_options(settings, args.config)
        options = with_tables(options, root=args.tables_root, schema=args.tables_schema)
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
    if args.checkpoint_root:
        from dataclasses import replace

        options = replace(options, checkpoint_root=args.checkpoint_root)
    if args.landing_root:
        options = with_landing_root(options, args.landing_root)
    stop = StopRequest()
    restore = stop.install()  # before the JVM starts: a signal while it starts is a request too
    try:
        return _run_queries(args, settings, options, queries, stop)
    finally:
        restore()


def _run_queries(
    args: argparse.Namespace,
    settings: Any,
    options: EngineOptions,
    queries: Sequence[str],
    stop: StopRequest,
) -> int:
    from controlplane.engine.queries import (
        build_coordinator_query,
        build_quota_query,
        register_progress_listener,
    )
    from controlplane.engine.warmup import warm_python_workers
    from controlplane.io.kafka_clients import KafkaSetupError

    spark_submit = started_by_spark_submit() and not on_databricks()
    spark = session_for(options, "controlplane-" + "-".join(queries))
    # PySpark's SparkContext installs its own SIGINT handler (cancel every job, then raise
    # KeyboardInterrupt wherever the main thread is): the tracebacks of a Ctrl-C. Ours again.
    stop.install()
    quiet_jvm_loggers(spark)
    if spark_submit:
        stop.forward_jvm_signals(spark)
    # Spark turns adaptive execution off in streaming queries anyway, and said so in a warning
    # per query (ResolveWriteToStream; MicroBatchExecution still says it for stateful ones).
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    listener = register_progress_listener(spark, options)
    ending = threading.Event()  # set before the session stops (which cancels its jobs)
    if not on_databricks():  # one worker per core, ready before the first batch's tasks
        warm_python_workers(spark, stopping=ending.is_set)
    interval_s = options.progress_log_interval_ms / 1000
    log.info(
        "%s, checkpoints in %s; a progress line per query %s; SIGTERM or Ctrl-C stops the job",
        options.tables_description(),
        options.checkpoint_root,
        f"every {interval_s:g} s" if interval_s else "per batch",
    )
    builders = {"coordinator": build_coordinator_query, "quota": build_quota_query}
    started: list[Any] = []
    for name in queries:
        if stop.event.is_set():
            break
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
            ending.set()
            stop_gracefully(spark, listener, started)
            return 2
        started.append(writer.start())
    stop.wait(started, every_query=args.available_now)
    failed = [q for q in started if not q.isActive and q.exception() is not None]
    ending.set()
    interrupted = stop_gracefully(spark, listener, started)
    if stop.signal_name is not None:
        how = (
            f"; interrupted {', '.join(interrupted)} after {STOP_TIMEOUT_S:.0f} s"
            if interrupted
            else ""
        )
        log.info("stopped on %s (%s)%s", stop.signal_name, ", ".join(queries), how)
    return 1 if failed else 0
