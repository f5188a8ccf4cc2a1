"""The jobs' common entry point: configuration errors end the job before Spark starts."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from controlplane.engine import launch, warmup
from engine.fakes import FakeSpark


def no_spark(*args: Any) -> Any:
    raise AssertionError("a session was started for a job that cannot run")


def test_a_job_whose_source_is_not_configured_ends_before_any_query_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """control_plane.py with a file naming only the coordinator's source used to start the
    coordinator query, then fail with a traceback building the quota one."""
    config = tmp_path / "conf.yaml"
    config.write_text("sources:\n  coordinator: {format: jsonl, path: in}\n")
    monkeypatch.setattr(launch, "session_for", no_spark)
    assert launch.run(["--config", str(config)], ["coordinator", "quota"], "") == 2
    assert "sources.quota is not configured" in caplog.text


def test_a_bad_configuration_file_ends_the_job_with_status_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launch, "session_for", no_spark)
    assert launch.run(["--config", str(tmp_path / "missing.yaml")], ["coordinator"], "") == 2


@pytest.mark.parametrize(
    ("engine", "arguments", "message"),
    [
        ("writer: delta-rs", ["--tables-schema", "main.cp"], "need the native writer"),
        ("writer: native", ["--tables-schema", "cp"], "--tables-schema: expected catalog.schema"),
        ("writer: native", ["--tables-schema", "main.cp", "--tables-root", "t"], "give one"),
    ],
)
def test_tables_by_name_are_checked_before_the_session_starts(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    engine: str,
    arguments: list[str],
    message: str,
) -> None:
    config = tmp_path / "conf.yaml"
    config.write_text(f"engine: {{{engine}}}\nsources:\n  coordinator: {{path: in}}\n")
    monkeypatch.setattr(launch, "session_for", no_spark)
    assert launch.run(["--config", str(config), *arguments], ["coordinator"], "") == 2
    assert message in caplog.text


class FakeQuery:
    """A started query that ends by itself after ``polls`` looks at ``isActive`` (None:
    never), and runs ``on_poll`` at each look (e.g. a signal arriving while the job waits)."""

    def __init__(
        self, log: list[str], name: str, polls: int | None = None, on_poll: Any = None
    ) -> None:
        self.log, self.name, self.polls, self.on_poll = log, name, polls, on_poll
        self.active = True
        self.status = {"isTriggerActive": False}

    @property
    def isActive(self) -> bool:
        if self.on_poll is not None:
            self.on_poll()
        if self.active and self.polls is not None:
            self.polls -= 1
            if self.polls < 0:
                self.active = False
                self.log.append(f"{self.name} ended")
        return self.active

    def awaitTermination(self, timeout: float | None = None) -> bool:
        return not self.active

    def stop(self) -> None:
        self.active = False
        self.log.append(f"{self.name} stopped")

    def exception(self) -> None:
        return None


def fake_builder(log: list[str], name: str, **query: Any) -> Any:
    class Writer:
        def start(self) -> FakeQuery:
            return FakeQuery(log, name, **query)

    def build(spark: Any, settings: Any, **kwargs: Any) -> Writer:
        log.append(f"{name} available_now={kwargs['available_now']}")
        return Writer()

    return build


def fake_job(monkeypatch: pytest.MonkeyPatch, log: list[str], **queries: dict[str, Any]) -> None:
    from controlplane.engine import queries as engine_queries

    def session_for(*args: Any) -> FakeSpark:
        def pyspark_handler(signum: int, frame: object) -> None:
            raise KeyboardInterrupt  # what PySpark's SparkContext installs for SIGINT

        signal.signal(signal.SIGINT, pyspark_handler)
        return FakeSpark(log)

    monkeypatch.setattr(launch, "session_for", session_for)
    monkeypatch.setattr(engine_queries, "register_progress_listener", lambda *args: None)
    monkeypatch.setattr(warmup, "warm_python_workers", lambda *args, **kwargs: None)
    for name, query in queries.items():
        builder = fake_builder(log, name, **query)
        monkeypatch.setattr(engine_queries, f"build_{name}_query", builder)


def test_available_now_replays_wait_for_every_query_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/engine.md's event-time replays: the jobs could not ask for availableNow, and
    awaitAnyTermination would have stopped the other query when the first one ended."""
    config = tmp_path / "conf.yaml"
    config.write_text(
        "engine: {mode: event_time}\nsources:\n  coordinator: {path: a}\n  quota: {path: b}\n"
    )
    log: list[str] = []
    fake_job(monkeypatch, log, coordinator={"polls": 1}, quota={"polls": 5})
    argv = ["--config", str(config), "--available-now"]
    assert launch.run(argv, ["coordinator", "quota"], "") == 0
    assert log == [
        "coordinator available_now=True",
        "quota available_now=True",
        "coordinator ended",
        "quota ended",
        "session stopped",
    ]


@pytest.mark.parametrize("databricks", [False, True])
def test_a_local_job_starts_its_python_workers_ahead_and_a_databricks_one_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, databricks: bool
) -> None:
    config = tmp_path / "conf.yaml"
    config.write_text("engine: {mode: event_time}\nsources:\n  coordinator: {path: a}\n")
    log: list[str] = []
    fake_job(monkeypatch, log, coordinator={"polls": 1})
    calls: list[tuple[Any, Any]] = []

    def record(spark: Any, *, stopping: Any) -> None:
        calls.append((spark, stopping()))

    monkeypatch.setattr(warmup, "warm_python_workers", record)
    if databricks:
        monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "17.3")
    else:
        monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    assert launch.run(["--config", str(config), "--available-now"], ["coordinator"], "") == 0
    if databricks:
        assert calls == []
    else:
        [(spark, stopping)] = calls
        assert isinstance(spark, FakeSpark)
        assert stopping is False
    assert log[-1] == "session stopped"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_every_query_with_one_line_and_status_0(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    signum: signal.Signals,
) -> None:
    """SIGTERM or Ctrl-C while the job waits: the handler only records it; the main thread
    stops the queries and the session, logs one line and the job ends with status 0. (The
    default SIGINT handler raised KeyboardInterrupt wherever the main thread was, and PySpark's
    cancelled every job first: tracebacks, "RuntimeError: reentrant call".)"""
    config = tmp_path / "conf.yaml"
    config.write_text("sources:\n  coordinator: {path: a}\n  quota: {path: b}\n")
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    sent: list[int] = []

    def signal_once() -> None:
        if not sent:
            sent.append(signum)
            os.kill(os.getpid(), signum)

    log: list[str] = []
    fake_job(monkeypatch, log, coordinator={}, quota={"on_poll": signal_once})
    with caplog.at_level(logging.INFO, logger="controlplane.job"):
        assert launch.run(["--config", str(config)], ["coordinator", "quota"], "") == 0
    assert log == [
        "coordinator available_now=False",
        "quota available_now=False",
        "coordinator stopped",
        "quota stopped",
        "session stopped",
    ]
    name = signal.Signals(signum).name
    stops = [r.getMessage() for r in caplog.records if "stopped on" in r.getMessage()]
    assert stops == [f"stopped on {name} (coordinator, quota)"]
    assert {s: signal.getsignal(s) for s in before} == before  # handlers given back


def test_a_second_signal_ends_the_process_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    exits: list[int] = []
    monkeypatch.setattr(os, "_exit", exits.append)
    stop = launch.StopRequest()
    stop.handle(signal.SIGINT)
    assert stop.event.is_set()
    assert stop.signal_name == "SIGINT"
    assert exits == []
    stop.handle(signal.SIGINT)
    assert exits == [128 + signal.SIGINT]


def test_a_signal_forwarded_by_the_jvm_asks_for_the_stop_but_never_forces_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under spark-submit a terminal's Ctrl-C reaches both the JVM (which forwards it) and
    Python: one Ctrl-C must not count twice and end the process without a stop."""
    exits: list[int] = []
    monkeypatch.setattr(os, "_exit", exits.append)
    stop = launch.StopRequest()
    launch._JvmSignalHandler(stop).handle(type("Sig", (), {"getName": lambda self: "INT"})())
    stop.handle(signal.SIGINT)
    assert stop.signal_name == "SIGINT"
    assert exits == []


def test_available_now_is_refused_in_processing_time_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "conf.yaml"
    config.write_text("sources:\n  coordinator: {path: a}\n")
    monkeypatch.setattr(launch, "session_for", no_spark)
    assert launch.run(["--config", str(config), "--available-now"], ["coordinator"], "") == 2


def test_the_landing_root_moves_the_landing_directories_of_a_deployment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundle gives each deployment (each developer, in dev) its own landing directories:
    --landing-root ROOT reads ROOT/<query> and archives to ROOT/archive/<query>; a Kafka
    source is left as it is."""
    from controlplane.engine import queries as engine_queries

    config = tmp_path / "conf.yaml"
    config.write_text(
        "sources:\n"
        "  coordinator: {path: /Volumes/main/shared/landing/coordinator}\n"
        "  quota: {format: kafka, path: requests, kafka_bootstrap_servers: 'k:9092'}\n"
    )
    seen: dict[str, Any] = {}
    log: list[str] = []
    fake_job(monkeypatch, log, coordinator={"polls": 0}, quota={"polls": 0})
    for name in ("coordinator", "quota"):
        build = getattr(engine_queries, f"build_{name}_query")

        def capture(spark: Any, settings: Any, _build: Any = build, **kwargs: Any) -> Any:
            seen["options"] = kwargs["options"]
            return _build(spark, settings, **kwargs)

        monkeypatch.setattr(engine_queries, f"build_{name}_query", capture)
    argv = ["--config", str(config), "--landing-root", "/Volumes/main/dev_alice/landing/"]
    assert launch.run(argv, ["coordinator", "quota"], "") == 0
    coordinator, quota = seen["options"].coordinator_source, seen["options"].quota_source
    assert coordinator.path == "/Volumes/main/dev_alice/landing/coordinator"
    assert coordinator.archive_dir == "/Volumes/main/dev_alice/landing/archive/coordinator"
    assert (quota.format, quota.path) == ("kafka", "requests")


def test_outside_the_main_thread_the_job_runs_without_signal_handlers() -> None:
    """A runtime may call the entry point from a thread of its own, where Python refuses
    signal handlers (ValueError): the job must start all the same."""
    import threading

    outcome: list[object] = []

    def start() -> None:
        try:
            restore = launch.StopRequest().install()
            restore()
            outcome.append("started")
        except Exception as exc:
            outcome.append(exc)

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    assert outcome == ["started"]
    assert signal.getsignal(signal.SIGTERM) == before


def test_the_job_command_runs_the_named_queries(monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m controlplane job QUERY ...`, the Databricks jobs' entry point."""
    from controlplane.__main__ import main
    from controlplane.cli import job

    calls: list[tuple[list[str], tuple[str, ...]]] = []
    monkeypatch.setattr(
        job, "run", lambda argv, queries, description, prog: calls.append((argv, queries)) or 0
    )
    assert main(["job", "all", "--config", "c.yaml"]) == 0
    assert main(["job", "quota"]) == 0
    assert calls == [(["--config", "c.yaml"], ("coordinator", "quota")), ([], ("quota",))]
    assert main(["job", "everything"]) == 2


def test_a_stopping_job_commits_the_progress_rows_it_held_before_the_listener_goes() -> None:
    """query_progress rows are committed a group per interval: what the listener holds when
    the job stops is committed first, then the listener and the session go."""
    log: list[str] = []

    class Listener:
        def flush(self) -> None:
            log.append("progress committed")

    class Streams:
        def removeListener(self, listener: Any) -> None:
            log.append("listener removed")

    spark = FakeSpark(log)
    spark.streams = Streams()  # type: ignore[assignment]
    assert launch.stop_gracefully(spark, Listener(), []) == []
    assert log == ["progress committed", "listener removed", "session stopped"]
