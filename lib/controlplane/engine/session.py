"""The local SparkSession: RocksDB state store with changelog checkpointing, UI off.

Settings that the checkpoint freezes (state store provider, number of state partitions, the
state store's codec) are chosen here once; a checkpoint keeps the values it started with, so a
change reaches new checkpoints only (docs/engine.md, "State store"). The provider is Apache
Spark's RocksDB provider locally and Databricks' own on a Databricks cluster
(``apply_state_conf``), which the bundle's cluster configuration names too.

The project's pinned jars (``.venv/jars/spark``: delta-spark and Spark's Kafka connector, see
``controlplane.jvm``) go on ``spark.jars`` with Delta's SQL extension and catalog, so a local
session reads and writes ``format("delta")`` and ``format("kafka")`` like a Databricks one.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

from controlplane.engine import class_archive
from controlplane.jvm import SPARK_JARS, MissingJvm, jar_paths, jars_root

log = logging.getLogger(__name__)

PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
# Databricks documents its own provider class ("Configure RocksDB state store on Databricks");
# from Databricks Runtime 17.3 it is the default, with changelog checkpointing on.
DATABRICKS_ROCKSDB_PROVIDER = "com.databricks.sql.streaming.state.RocksDBStateStoreProvider"

STATE_CONF: dict[str, str] = {
    PROVIDER_CONF: ROCKSDB_PROVIDER,
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    # Rows in a key are handed to the function in Arrow chunks; keep them large.
    "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",
    "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "false",
    "spark.python.worker.faulthandler.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
}

# Local sessions only: checkpoint files (the offset and commit logs, each state partition's
# changelog) written through Hadoop's FileSystem API. The default FileContext manager creates
# and renames each file with shell commands (chmod, readlink) when Hadoop's native library is
# not there, as locally: several forks of the JVM per state partition per batch, most of an
# idle batch (docs/benchmarks/engine.md). A local rename is atomic either way. The class moved
# package in Spark 4.1; the one this pyspark ships is looked up in its spark-sql jar.
CHECKPOINT_MANAGER_KEY = "spark.sql.streaming.checkpointFileManagerClass"
CHECKPOINT_MANAGER_CLASSES = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager",
)


def checkpoint_manager_class(jars_dir: Path | None = None) -> str | None:
    """The FileSystem-based checkpoint manager's class in this pyspark's spark-sql jar, if any."""
    folder = jars_dir if jars_dir is not None else pyspark_jars_dir()
    for jar in sorted(folder.glob("spark-sql_*.jar")):
        try:
            with zipfile.ZipFile(jar) as archive:
                names = set(archive.namelist())
        except (OSError, zipfile.BadZipFile) as exc:
            log.warning("cannot read %s (%s): Spark's default checkpoint manager stays", jar, exc)
            continue
        for name in CHECKPOINT_MANAGER_CLASSES:
            if name.replace(".", "/") + ".class" in names:
                return name
    return None


def pyspark_jars_dir() -> Path:
    """The running pyspark's own jars (SPARK_HOME's when set, as spark-submit sets it)."""
    spark_home = os.environ.get("SPARK_HOME")
    if spark_home and Path(spark_home, "jars").is_dir():
        return Path(spark_home, "jars")
    return pyspark_home() / "jars"


DAEMON_MODULE_KEY = "spark.python.daemon.module"
DAEMON_MODULE = "controlplane.engine.pydaemon"

# Local sessions only: the codec of the state store's files, among them the changelog that each
# state partition writes every batch (an internal setting of Spark's SQL conf, lz4 by default).
# With 24 MB of state, the state round trip's addBatch was 458-504 ms with snappy against
# 536-691 ms with lz4, and the JVM used fewer cores; in the engine the difference did not show
# beyond the spread between runs (docs/benchmarks/engine.md, issue 14, tenth session). Spark
# records the codec in a checkpoint's offset log and a restarted query uses the recorded one,
# so a checkpoint keeps the codec it was started with: older ones stay lz4. A codec chosen in
# spark-defaults.conf or spark-submit's --conf is left as chosen.
STATE_CODEC_KEY = "spark.sql.streaming.stateStore.compression.codec"
LOCAL_STATE_CODEC = "snappy"


def local_conf() -> dict[str, str]:
    """What only local sessions set: the state store's codec unless it is chosen elsewhere, the
    checkpoint manager when this Spark has the class, and the Python workers' daemon that
    imports the installed pyspark instead of Spark's zip of it (engine/pydaemon.py), when the
    workers' Python can import it."""
    name = checkpoint_manager_class()
    conf = {} if chosen_elsewhere(STATE_CODEC_KEY) else {STATE_CODEC_KEY: LOCAL_STATE_CODEC}
    if workers_import(DAEMON_MODULE):
        conf[DAEMON_MODULE_KEY] = DAEMON_MODULE
    return {**conf, CHECKPOINT_MANAGER_KEY: name} if name else conf


def chosen_elsewhere(key: str) -> bool:
    """Whether ``key`` is set before the session's builder sees it: in spark-defaults.conf, or,
    when spark-submit started the JVM, in what it passed on (its --conf and its defaults file
    become the JVM's system properties). A builder's setting would replace either."""
    if not started_by_spark_submit():
        return key in spark_defaults()
    try:
        return _submitted_jvm().java.lang.System.getProperty(key) is not None
    except Exception:  # no gateway to ask: the builder's setting stands
        return False


def workers_import(module: str) -> bool:
    """Whether the Python the workers run (``PYSPARK_PYTHON``, else this one), with this
    process's environment (the workers inherit it), finds ``module``: a daemon it cannot
    import would fail every Python task of the session, not only the engine's. One process
    start, ~50 ms, per distinct interpreter and ``PYTHONPATH``."""
    python = os.environ.get("PYSPARK_PYTHON") or sys.executable
    return _finds(python, os.environ.get("PYTHONPATH", ""), module)


@functools.lru_cache(maxsize=8)
def _finds(python: str, pythonpath: str, module: str) -> bool:
    import subprocess

    check = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    try:
        env = {**os.environ, "PYTHONPATH": pythonpath}
        done = subprocess.run([python, "-c", check], env=env, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


DELTA_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"
LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
LOCAL_PARALLELISM = 2

# The local JVM's garbage collector: the parallel (throughput) collector instead of G1. On a
# 1 GB heap G1's regions are 1 MB, so every key's state value (about 0.5 MB of text a shard key
# at 34,000 groups, and its copies) is a "humongous" object whose allocation starts a
# concurrent cycle: G1 took 0.04-0.13 cores of two in saturated runs of 240 s or more, the
# parallel collector 0.02 (docs/benchmarks/engine.md, issue 14, eighth session).
LOCAL_JAVA_OPTIONS_KEY = "spark.driver.defaultJavaOptions"
LOCAL_JAVA_OPTIONS = "-XX:+UseParallelGC"
_COLLECTOR_FLAG = re.compile(r"-XX:\+Use(?:Serial|Parallel|G1|Z|Shenandoah|Epsilon)GC\b")
# Where a JVM's options can also come from, besides the environment
# (``class_archive.JAVA_OPTION_VARIABLES``): the driver's Java options in the session's own
# conf or in spark-defaults.conf.
_DRIVER_JAVA_OPTIONS = (LOCAL_JAVA_OPTIONS_KEY, "spark.driver.extraJavaOptions")


def local_java_options(extra_conf: dict[str, str] | None = None) -> dict[str, str]:
    """The driver's default Java options of a local session: the parallel collector and the
    class archive (``engine.class_archive``), before the default options spark-defaults.conf
    gives (a session's ``--conf`` replaces that file's value, so it is carried over, after
    ours). No collector when one is chosen anywhere else (the environment, spark-defaults.conf,
    the session's own conf): two collectors stop the JVM, and the one chosen there is meant;
    no archive when there is none for this JDK and class path, when class sharing is chosen
    there or when the driver's class path is extended. Nothing when spark-submit started the
    JVM."""
    if started_by_spark_submit():
        return {}
    defaults = spark_defaults()
    places = [os.environ.get(name, "") for name in class_archive.JAVA_OPTION_VARIABLES]
    places += [(extra_conf or {}).get(key, "") for key in _DRIVER_JAVA_OPTIONS]
    places += [defaults.get(key, "") for key in _DRIVER_JAVA_OPTIONS]
    ours = [] if any(_COLLECTOR_FLAG.search(place) for place in places) else [LOCAL_JAVA_OPTIONS]
    extended = any(
        conf.get(key)
        for conf in (extra_conf or {}, defaults)
        for key in class_archive.EXTRA_CLASS_PATH_KEYS
    )
    archive = class_archive.java_option(pyspark_jars_dir(), places, extra_class_path=extended)
    if archive is not None:
        ours.append(archive)
    if not ours:
        return {}
    theirs = defaults.get(LOCAL_JAVA_OPTIONS_KEY, "").strip()
    return {LOCAL_JAVA_OPTIONS_KEY: " ".join([*ours, theirs]).strip()}


_PROPERTY = re.compile(r"([^\s=:]+)(?:\s*[=:]\s*|\s+)(.*)$")


def spark_defaults() -> dict[str, str]:
    """The settings of the spark-defaults.conf spark-submit reads (``SPARK_CONF_DIR``, else
    ``SPARK_HOME/conf``, else the installed pyspark's ``conf``), in its ``key value`` and
    ``key=value`` lines; {} when there is none."""
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if not conf_dir:
        home = os.environ.get("SPARK_HOME") or str(pyspark_home())
        conf_dir = os.path.join(home, "conf")
    try:
        text = (Path(conf_dir) / "spark-defaults.conf").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    values: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        pair = _PROPERTY.match(line)
        if pair is not None:
            values[pair.group(1)] = pair.group(2).strip()
    return values


def pyspark_home() -> Path:
    """The installed pyspark's directory (what pyspark uses as SPARK_HOME when it is unset)."""
    import pyspark

    return Path(pyspark.__file__).parent


# pyspark before 4.2 hands applyInPandasWithState's chunk offsets to RecordBatch.slice as floats,
# which pyarrow 26 refuses ("'float' object cannot be interpreted as an integer"): the first
# micro-batch fails. Seen on pyspark 4.0.0 with pyarrow 26.0.1 (25.0.1 accepts floats); pyspark
# 4.2.0 passes integers. The spark extra's ranges cannot say "pyarrow<26 with pyspark<4.2".
STRICT_SLICE_PYARROW = 26
INTEGER_SLICE_PYSPARK = (4, 2)


class IncompatibleVersions(RuntimeError):
    """The installed pyspark and pyarrow are known not to run the stateful queries."""


def _release(version: str, parts: int) -> tuple[int, ...]:
    return tuple(int(number) for number in re.findall(r"\d+", version)[:parts])


def arrow_incompatibility(pyspark_version: str, pyarrow_version: str) -> str | None:
    """Why this pyspark cannot run the stateful queries with this pyarrow, or None."""
    if (
        _release(pyspark_version, 2) < INTEGER_SLICE_PYSPARK
        and _release(pyarrow_version, 1)[0] >= STRICT_SLICE_PYARROW
    ):
        return (
            f"pyspark {pyspark_version} cannot run applyInPandasWithState with pyarrow "
            f"{pyarrow_version}: pyarrow {STRICT_SLICE_PYARROW} refuses the float offsets pyspark "
            f"before 4.2 passes; install pyarrow<{STRICT_SLICE_PYARROW} (the Spark 4.0 test leg "
            "pins one in constraints/spark40.txt)"
        )
    return None


def started_by_spark_submit() -> bool:
    """spark-submit started the JVM and then this Python process (PythonRunner): jars named
    in the builder now reach the executors, not the driver's class path."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _submitted_jvm() -> Any:
    """The JVM spark-submit started (before any SparkContext)."""
    from pyspark import SparkContext

    context: Any = SparkContext
    context._ensure_initialized()  # connects to spark-submit's gateway
    return context._jvm


def _driver_has(class_name: str) -> bool:
    try:
        _submitted_jvm().java.lang.Class.forName(class_name)
    except Exception:
        return False
    return True


def jar_conf(require: bool) -> dict[str, str]:
    """``spark.jars`` and Delta's extension when the pinned jars are there. ``require`` turns
    their absence into an error (a test or a job that asked for native Delta or Kafka); else
    the session starts without them and says so once.

    Under spark-submit the driver's JVM already runs: Delta's extension is configured only
    when its classes are there (``--jars``); a session naming a catalog class the driver
    cannot load failed to start."""
    if started_by_spark_submit():
        if _driver_has(DELTA_EXTENSION):
            return dict(DELTA_CONF)
        message = (
            "spark-submit started the JVM without the pinned jars; pass them with "
            f"--jars {jars_root() / SPARK_JARS}/*.jar (comma-separated) for native Delta and Kafka"
        )
        if require:
            raise MissingJvm(message)
        log.info("%s (the delta-rs writer needs neither)", message)
        return {}
    jars = jar_paths(SPARK_JARS)
    if not jars:
        message = f"no Spark jars in {jars_root() / SPARK_JARS}: run `make setup`"
        if require:
            raise MissingJvm(f"this session needs Delta and Kafka for Spark; {message}")
        log.warning("%s (no native Delta, no Kafka source in this session)", message)
        return {}
    return {"spark.jars": ",".join(str(jar) for jar in jars), **DELTA_CONF}


def build_local_session(
    app_name: str = "controlplane",
    *,
    shuffle_partitions: int = 4,
    master: str = "local[2]",
    extra_conf: dict[str, str] | None = None,
    require_jars: bool = False,
) -> Any:
    """A local session for jobs, tests and benchmarks. Workers use this interpreter. A pyspark
    and pyarrow known not to run the stateful queries together are refused here, in one line,
    rather than at the first micro-batch (a Databricks runtime brings its own pair)."""
    import pyarrow
    import pyspark

    problem = arrow_incompatibility(pyspark.__version__, pyarrow.__version__)
    if problem:
        raise IncompatibleVersions(problem)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.default.parallelism", str(LOCAL_PARALLELISM))
        # Delta rebuilds a table's state (files, sizes) in a job of 50 tasks by default, sized
        # for a cluster: on two local cores, with code generated per task, that one job took
        # 20-30 s per table (a native writer's first batch over four tables, 340 s under load).
        .config(DELTA_SNAPSHOT_PARTITIONS, str(LOCAL_PARALLELISM))
        # VACUUM lists a table's files in a job of this many tasks (Spark's default: 10,000);
        # on two loaded cores that job ran past 15 minutes for a table of a few files.
        .config(LISTING_PARALLELISM, str(LOCAL_PARALLELISM))
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "true")
        # From the SparkContext's start: spark-submit's log4j profile logged its start at
        # INFO (forty lines) before setLogLevel could run.
        .config("spark.log.level", "WARN")
    )
    confs = {
        **local_java_options(extra_conf),
        **STATE_CONF,
        **local_conf(),
        **jar_conf(require_jars),
        **(extra_conf or {}),
    }
    for key, value in confs.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    log.info("spark session %s started (%s)", spark.version, master)
    return spark


def databricks_state_conf() -> dict[str, str]:
    """STATE_CONF with Databricks' RocksDB provider instead of Apache Spark's."""
    return {**STATE_CONF, PROVIDER_CONF: DATABRICKS_ROCKSDB_PROVIDER}


def on_databricks() -> bool:
    return "DATABRICKS_RUNTIME_VERSION" in os.environ


def command_session(app_name: str, *, master: str = "local[2]") -> Any:
    """The session of a command that runs Spark SQL (``sql --engine spark``, ``maintenance
    --engine spark``): the cluster's own on Databricks (a wheel task runs on the driver, which
    has no pinned jars to load), else a local one with the pinned jars (MissingJvm without)."""
    if on_databricks():
        from pyspark.sql import SparkSession

        return SparkSession.builder.getOrCreate()
    return build_local_session(app_name, master=master, require_jars=True)


def apply_state_conf(spark: Any, shuffle_partitions: int) -> None:
    """On a Databricks session set the state store settings before a query starts. A query
    restarted from a checkpoint keeps the provider its first run recorded there, whatever the
    session says (docs/engine.md, "State store")."""
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    for key, value in databricks_state_conf().items():
        try:
            spark.conf.set(key, value)
        except Exception as exc:  # a managed runtime may refuse a static conf
            log.warning("could not set %s: %s", key, exc)
