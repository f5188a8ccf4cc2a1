"""A real single-node Apache Kafka broker for tests and local runs: no Docker, no download.

``LocalBroker`` runs Kafka 4.x from the pinned jars of ``jvm/broker/pom.xml`` (``make setup``
copies them into ``.venv/jars/broker``) in KRaft mode, one JVM that is both broker and
controller (``node.id=1``), listening on loopback only:

- ``PLAINTEXT`` (also the inter-broker listener): every client is ``User:ANONYMOUS``;
- ``SASL_PLAINTEXT`` with SASL/PLAIN users ``admin``, ``alice`` and ``bob`` (``SASL_USERS``) and
  any ``extra_users``, so that per-user quotas such as ``controller_mutation_rate`` have a
  principal to apply to (the users are static settings: fixed when the broker starts);
- ``CONTROLLER`` (the KRaft quorum, a static voter set of one), not advertised to clients.

Ports are free ones unless given. Configuration, data and logs live in one directory, a temporary
one removed on exit unless ``data_dir`` is given: ``server.properties``, ``log4j2.properties``,
``data/`` (``log.dirs``), ``logs/server.log`` (the broker's log4j output, INFO and up) and
``logs/console.log`` (the JVM's own stdout and stderr). Nothing goes to the terminal.

Starting formats the storage (``kafka.tools.StorageTool format``), starts ``kafka.Kafka`` and
waits until both client listeners answer a metadata request naming the broker, within
``start_timeout_s``; a broker that exits or never answers fails the start with the tail of its
logs. Stopping sends SIGTERM (a controlled shutdown) and SIGKILL after ``stop_grace_s``. Missing
Java or jars fail before anything starts, with ``MissingJvm`` and one line naming the fix. The
JVM maps a class-data archive of the broker's classes (``ClassArchive``, in ``.venv/jars/cds``),
which roughly halves the CPU a start takes.

The ``group.*`` settings are static broker settings: scenarios that need other values need
another broker (``extra_config`` takes any other broker setting too).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from controlplane.jvm import BROKER_JARS, jar_paths, jars_root, require_jars, require_java

HOST = "127.0.0.1"
NODE_ID = 1
SASL_MECHANISM = "PLAIN"
ADMIN_USER = "admin"
# Local test credentials, not secrets: the broker listens on loopback only.
SASL_USERS: Mapping[str, str] = {
    "admin": "admin-secret",
    "alice": "alice-secret",
    "bob": "bob-secret",
}
HEAP = "512m"
# C1 only and the serial collector: the broker starts in about half the time and takes less CPU
# from the rest of a 2-core machine; a local broker never carries the load that C2's code or
# G1's short pauses pay off for.
JVM_OPTIONS = (
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-Djava.awt.headless=true",
)
# Kafka's defaults for the static group settings a scenario may need to change.
KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS = 3000
KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS = 6000
KAFKA_GROUP_MAX_SIZE = 2**31 - 1
LOG_TAIL_LINES = 40
# The first start writes the JVM's class-data archive at exit, which takes a while.
ARCHIVE_DUMP_GRACE_S = 120.0
READY_POLL_S = 0.1


class BrokerError(RuntimeError):
    """The local broker did not start (or its ports are taken)."""


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports that were free on loopback a moment ago (all held at once, so
    they differ; another process may still take one before the broker binds it)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((HOST, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _check_port_free(port: int, what: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError as exc:
            raise BrokerError(f"the {what} port {HOST}:{port} is not free: {exc}") from None


def new_cluster_id() -> str:
    """A Kafka ``Uuid`` as ``kafka-storage random-uuid`` prints it (URL-safe base64 of 16 random
    bytes, never starting with ``-``), without starting a JVM for it."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not text.startswith("-"):
            return text


def plain_jaas_config(users: Mapping[str, str], login_user: str) -> str:
    """The broker side of SASL/PLAIN: ``user_NAME="PASSWORD"`` for each user who may log in, and
    the broker's own login (unused while the inter-broker listener is PLAINTEXT)."""
    entries = [f'username="{login_user}"', f'password="{users[login_user]}"']
    entries += [f'user_{name}="{password}"' for name, password in users.items()]
    return "org.apache.kafka.common.security.plain.PlainLoginModule required " + (
        " ".join(entries) + ";"
    )


def properties_text(values: Mapping[str, str]) -> str:
    """A Java properties file: one ``key=value`` a line, backslashes and line breaks escaped."""

    def escape(text: str) -> str:
        return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")

    lines = []
    for key, value in values.items():
        escaped_key = escape(key).replace("=", "\\=").replace(":", "\\:").replace(" ", "\\ ")
        lines.append(f"{escaped_key}={escape(value)}")
    return "\n".join(lines) + "\n"


def log4j2_text(log_file: Path) -> str:
    """Everything from INFO up into one file, nothing on the console; the per-request log off."""
    return properties_text(
        {
            "status": "warn",
            "appender.file.type": "File",
            "appender.file.name": "FILE",
            "appender.file.fileName": str(log_file),
            "appender.file.layout.type": "PatternLayout",
            "appender.file.layout.pattern": "[%d] %p %m (%c)%n",
            "rootLogger.level": "INFO",
            "rootLogger.appenderRef.file.ref": "FILE",
            "logger.request.name": "kafka.request.logger",
            "logger.request.level": "WARN",
        }
    )


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    if not path.is_file():
        return f"({path} does not exist)"
    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(text[-lines:]) if text else f"({path} is empty)"


class ClassArchive:
    """The broker JVM's class-data archive (AppCDS): half the CPU of a start goes to loading
    and verifying classes, and an archive of them roughly halves that (measured: 4.8 s of CPU
    to ready without, 2.6 s with). The first broker started for a set of jars and a Java writes
    it when it exits (``-XX:ArchiveClassesAtExit``); later starts, and the format step, map it
    (``-XX:SharedArchiveFile``). The JVM itself refuses an archive that does not match its jars
    or its build and then loads the classes as usual, so a stale archive costs only time.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.dumping = path.with_name(f"{path.stem}.{uuid.uuid4().hex[:8]}.tmp.jsa")
        self.dumps = False

    @classmethod
    def for_jvm(cls, java: str, jars: Sequence[Path], directory: Path) -> ClassArchive | None:
        """The archive for this Java and these jars; None if ``directory`` is not writable."""
        digest = hashlib.sha256()
        for file in (Path(java).resolve(), *jars):
            stat = file.stat()
            digest.update(f"{file}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None
        if not os.access(directory, os.W_OK):
            return None
        return cls(directory / f"broker-{digest.hexdigest()[:16]}.jsa")

    def options(self, *, server: bool) -> list[str]:
        """Map the archive if there is one, else have the server JVM write it at exit."""
        if self.path.is_file():
            return [f"-XX:SharedArchiveFile={self.path}"]
        if not server:
            return []
        self.dumps = True
        return [f"-XX:ArchiveClassesAtExit={self.dumping}"]

    def finish(self, clean_exit: bool) -> None:
        """Keep a freshly written archive if the JVM exited cleanly; drop archives of other jars."""
        if not self.dumping.is_file():
            return
        if not clean_exit or self.dumping.stat().st_size == 0:
            self.dumping.unlink(missing_ok=True)
            return
        os.replace(self.dumping, self.path)
        for old in self.path.parent.iterdir():
            if old != self.path and re.fullmatch(r"broker-[0-9a-f]{16}\.jsa", old.name):
                old.unlink(missing_ok=True)


class LocalBroker:
    """A single-node KRaft broker on loopback (see the module docstring); a context manager.

    ``with LocalBroker() as broker:`` starts it and always stops it. ``bootstrap_servers`` is
    the PLAINTEXT listener, ``sasl_bootstrap_servers`` the SASL_PLAINTEXT one (``SASL_USERS``);
    ``client_config(user)`` gives the matching kafka-python keyword arguments.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        sasl_port: int = 0,
        controller_port: int = 0,
        data_dir: str | Path | None = None,
        group_initial_rebalance_delay_ms: int = KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS,
        group_min_session_timeout_ms: int = KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS,
        group_max_size: int = KAFKA_GROUP_MAX_SIZE,
        extra_config: Mapping[str, str] | None = None,
        extra_users: Mapping[str, str] | None = None,
        heap: str = HEAP,
        start_timeout_s: float = 90.0,
        stop_grace_s: float = 15.0,
        class_archive: bool = True,
    ) -> None:
        self._requested_ports = {"PLAINTEXT": port, "SASL_PLAINTEXT": sasl_port}
        self._requested_controller_port = controller_port
        self._data_dir_arg = Path(data_dir) if data_dir is not None else None
        self.group_initial_rebalance_delay_ms = group_initial_rebalance_delay_ms
        self.group_min_session_timeout_ms = group_min_session_timeout_ms
        self.group_max_size = group_max_size
        self.extra_config: dict[str, str] = dict(extra_config or {})
        self.heap = heap
        self.start_timeout_s = start_timeout_s
        self.stop_grace_s = stop_grace_s
        self.class_archive = class_archive
        self._archive: ClassArchive | None = None
        self.users: Mapping[str, str] = {**SASL_USERS, **(extra_users or {})}
        self.port = 0
        self.sasl_port = 0
        self.controller_port = 0
        self.cluster_id = ""
        self.directory: Path | None = None
        self.started_in_s: float | None = None
        self._owns_directory = False
        self._process: subprocess.Popen[bytes] | None = None
        self._console: IO[bytes] | None = None

    # -- addresses and clients -------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def sasl_bootstrap_servers(self) -> str:
        return f"{HOST}:{self.sasl_port}"

    def client_config(self, user: str | None = None) -> dict[str, Any]:
        """kafka-python keyword arguments: PLAINTEXT (``User:ANONYMOUS``) without a user, else
        SASL/PLAIN as that user with its password (``SASL_USERS`` or ``extra_users``)."""
        if user is None:
            return {"bootstrap_servers": self.bootstrap_servers}
        if user not in self.users:
            raise KeyError(f"no SASL user {user!r} on the local broker (users: {list(self.users)})")
        return {
            "bootstrap_servers": self.sasl_bootstrap_servers,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": SASL_MECHANISM,
            "sasl_plain_username": user,
            "sasl_plain_password": self.users[user],
        }

    def admin(self, user: str | None = None) -> Any:
        """A kafka-python ``KafkaAdminClient`` on this broker (the caller closes it)."""
        from kafka.admin import KafkaAdminClient

        return KafkaAdminClient(**self.client_config(user), client_id="controlplane-local-admin")

    def create_topic(
        self, name: str, partitions: int = 1, config: Mapping[str, str] | None = None
    ) -> None:
        """Create a topic (replication factor 1) and wait until it has a leader."""
        admin = self.admin()
        try:
            admin.create_topics(
                {
                    name: {
                        "num_partitions": partitions,
                        "replication_factor": 1,
                        "configs": config or {},
                    }
                },
                wait_for_metadata=True,
            )
        finally:
            admin.close()

    @property
    def kafka_version(self) -> str:
        """The Kafka version of the broker's jars (from ``kafka-clients-VERSION.jar``)."""
        for jar in jar_paths(BROKER_JARS):
            match = re.fullmatch(r"kafka-clients-(.+)\.jar", jar.name)
            if match:
                return match.group(1)
        return "unknown"

    # -- files -----------------------------------------------------------------------------

    def _path(self, *parts: str) -> Path:
        if self.directory is None:
            raise BrokerError("the local broker has not been started")
        return self.directory.joinpath(*parts)

    @property
    def properties_file(self) -> Path:
        return self._path("server.properties")

    @property
    def log_file(self) -> Path:
        return self._path("logs", "server.log")

    @property
    def console_file(self) -> Path:
        return self._path("logs", "console.log")

    @property
    def log_dir(self) -> Path:
        return self._path("data")

    def properties(self) -> dict[str, str]:
        """The broker's ``server.properties`` (after ports and directory are chosen)."""
        controller = f"CONTROLLER://{HOST}:{self.controller_port}"
        plaintext = f"PLAINTEXT://{HOST}:{self.port}"
        sasl = f"SASL_PLAINTEXT://{HOST}:{self.sasl_port}"
        config = {
            "process.roles": "broker,controller",
            "node.id": str(NODE_ID),
            "controller.quorum.voters": f"{NODE_ID}@{HOST}:{self.controller_port}",
            "controller.listener.names": "CONTROLLER",
            "listeners": f"{plaintext},{sasl},{controller}",
            "advertised.listeners": f"{plaintext},{sasl}",
            "listener.security.protocol.map": (
                "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
            ),
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": SASL_MECHANISM,
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas_config(
                self.users, ADMIN_USER
            ),
            "log.dirs": str(self.log_dir),
            "num.partitions": "1",
            "default.replication.factor": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "auto.create.topics.enable": "false",
            "group.initial.rebalance.delay.ms": str(self.group_initial_rebalance_delay_ms),
            "group.min.session.timeout.ms": str(self.group_min_session_timeout_ms),
            "group.max.size": str(self.group_max_size),
            # The cleaner's dedupe buffer (128 MiB by default) would take a quarter of the heap.
            "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
        }
        config.update(self.extra_config)
        return config

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> LocalBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> LocalBroker:
        """Format, start and wait until ready; on any failure the broker is stopped again."""
        if self._process is not None:
            raise BrokerError("the local broker is already started")
        java = require_java("The local Kafka broker")
        jars = require_jars(BROKER_JARS, "The local Kafka broker")
        began = time.monotonic()
        if self.class_archive:
            self._archive = ClassArchive.for_jvm(java, jars, jars_root() / "cds")
        try:
            self._prepare()
            classpath = os.pathsep.join(str(jar) for jar in jars)
            self._format(java, classpath)
            self._launch(java, classpath)
            self._wait_ready(began + self.start_timeout_s)
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - began
        return self

    def _prepare(self) -> None:
        requested = dict(self._requested_ports)
        requested["CONTROLLER"] = self._requested_controller_port
        for name, port in requested.items():
            if port:
                _check_port_free(port, name)
        fresh = iter(free_ports(3))
        chosen = {name: port or next(fresh) for name, port in requested.items()}
        if len(set(chosen.values())) != len(chosen):
            raise BrokerError(f"the broker's listeners need distinct ports, got {chosen}")
        self.port = chosen["PLAINTEXT"]
        self.sasl_port = chosen["SASL_PLAINTEXT"]
        self.controller_port = chosen["CONTROLLER"]
        if self._data_dir_arg is None:
            self.directory = Path(tempfile.mkdtemp(prefix="controlplane-kafka-"))
            self._owns_directory = True
        else:
            self.directory = self._data_dir_arg.resolve()
            self.directory.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        self.log_file.parent.mkdir(exist_ok=True)
        self.properties_file.write_text(properties_text(self.properties()), encoding="utf-8")
        self._path("log4j2.properties").write_text(log4j2_text(self.log_file), encoding="utf-8")

    def _jvm(self, java: str, classpath: str, *, server: bool) -> list[str]:
        log4j = self._path("log4j2.properties")
        archive = self._archive.options(server=server) if self._archive is not None else []
        return [
            java,
            f"-Xmx{self.heap}",
            *JVM_OPTIONS,
            *archive,
            f"-Dlog4j2.configurationFile={log4j}",
            f"-Dkafka.logs.dir={self.log_file.parent}",
            "-cp",
            classpath,
        ]

    def _format(self, java: str, classpath: str) -> None:
        """Format the log directory (a directory formatted by an earlier run is kept as is)."""
        meta = self.log_dir / "meta.properties"
        self.cluster_id = _read_cluster_id(meta) or new_cluster_id()
        command = [
            *self._jvm(java, classpath, server=False),
            "kafka.tools.StorageTool",
            "format",
            "--cluster-id",
            self.cluster_id,
            "--config",
            str(self.properties_file),
            "--ignore-formatted",
        ]
        result = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=self.start_timeout_s,
            check=False,
        )
        if result.returncode != 0:
            output = (result.stdout + result.stderr).decode("utf-8", errors="replace").strip()
            raise BrokerError(
                f"formatting the Kafka log directory {self.log_dir} failed"
                f" (exit {result.returncode}):\n{output}"
            )

    def _launch(self, java: str, classpath: str) -> None:
        command = [
            *self._jvm(java, classpath, server=True),
            "kafka.Kafka",
            str(self.properties_file),
        ]
        self._console = self.console_file.open("ab")
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._console,
            stderr=subprocess.STDOUT,
            # Its own session: a Ctrl-C in the terminal reaches Python, which stops the broker
            # in order, instead of the JVM directly.
            start_new_session=True,
            preexec_fn=_die_with_parent if _PRCTL is not None else None,
        )

    def _wait_ready(self, deadline: float) -> None:
        """Until both client listeners answer a metadata request that names this broker."""
        from kafka.admin import KafkaAdminClient  # imported while the JVM boots

        last_error = "no answer yet"
        for user in (None, ADMIN_USER):
            while True:
                self._check_alive()
                remaining_s = deadline - time.monotonic()
                if remaining_s <= 0:
                    raise BrokerError(
                        f"the local Kafka broker was not ready within {self.start_timeout_s:.0f} s"
                        f" ({last_error})\n{self.log_tails()}"
                    )
                try:
                    if self._answers(KafkaAdminClient, user, remaining_s):
                        break
                    last_error = "the broker is not in its own metadata yet"
                except Exception as exc:
                    last_error = f"{type(exc).__name__}: {exc}"
                time.sleep(READY_POLL_S)

    def _answers(self, admin_client: Any, user: str | None, remaining_s: float) -> bool:
        config = self.client_config(user)
        host, port = config["bootstrap_servers"].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=min(remaining_s, 2.0)):
            pass  # refused until the listener is bound: cheaper than a client
        timeout_ms = max(int(min(remaining_s, 10.0) * 1000), 1)
        admin = admin_client(
            **config,
            client_id="controlplane-broker-ready",
            bootstrap_timeout_ms=timeout_ms,
            request_timeout_ms=timeout_ms,
        )
        try:
            cluster = admin.describe_cluster()
        finally:
            admin.close()
        return any(b.get("broker_id") == NODE_ID for b in cluster.get("brokers", []))

    def _check_alive(self) -> None:
        process = self._process
        if process is not None and process.poll() is not None:
            raise BrokerError(
                f"the local Kafka broker exited with code {process.returncode} before it was"
                f" ready\n{self.log_tails()}"
            )

    def log_tails(self) -> str:
        """The last lines of the broker's log and of the JVM's console output."""
        return "\n".join(
            f"--- last lines of {path} ---\n{tail(path)}"
            for path in (self.log_file, self.console_file)
        )

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after ``stop_grace_s``; remove the temporary directory."""
        process, self._process = self._process, None
        archive, self._archive = self._archive, None
        grace_s = self.stop_grace_s
        if archive is not None and archive.dumps:
            grace_s = max(grace_s, ARCHIVE_DUMP_GRACE_S)
        killed = False
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                process.wait()
                killed = True
        if archive is not None:
            archive.finish(clean_exit=process is not None and not killed)
        if self._console is not None:
            self._console.close()
            self._console = None
        if self._owns_directory and self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self._owns_directory = False


def _read_cluster_id(meta: Path) -> str | None:
    if not meta.is_file():
        return None
    for line in meta.read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "cluster.id":
            return value.strip()
    return None


def _load_prctl() -> Any:
    if sys.platform != "linux":
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


# Resolved in the parent: the child between fork and exec only calls it.
_PRCTL = _load_prctl()
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Ask Linux to SIGTERM the broker when the thread that started it dies (a test run killed
    with SIGKILL must not leave a 512 MiB JVM behind). Best effort."""
    _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
