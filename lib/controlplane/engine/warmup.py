"""Python workers started while a local query starts, so that its first batch finds them ready.

A job's first batch (after a restart, the batch the killed run had planned) ran its stateful
stage in Python workers it had to start first: PySpark's daemon forks one per task, and each
imported pandas, pyarrow and the engine (0.6 s a worker here) and froze what it holds
(``adapter.prepare_worker``) before its first row (docs/benchmarks/engine.md, issue 14). The
job now runs a small job of its own, on a thread of its own, right after the session starts:
one task per core, each doing exactly that. The query starts meanwhile (its checkpoint, its
source, the first batch's planning take the driver a few seconds); when the first batch's
tasks ask for a Python worker, PySpark gives them these idle ones: its daemon reuses a worker
for any job of the same Python and environment, an RDD's or a pandas UDF's alike (the
same process ids served both, in a local session of this build).

Nothing depends on it: a failure is a warning (at debug level when the job is stopping, as
the session's stop cancels it), and the first batch then starts its workers as before. The
warm-up's tasks hold the cores for 1-3 s while the query starts, so a job the start needs
waits for them; and PySpark stops a worker idle for about a minute, so a first batch planned
later than that finds none (measured: a start took 14-22 s to its first offsets, the warm-up
4-5 s of it). One task per slot of the session's default parallelism, which local sessions
fix at 2 (engine.session): the cores of ``local[2]``, the jobs' default. Local sessions only
(``launch``): on a cluster, a job's tasks are not placed on every executor.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

JOB_DESCRIPTION = "controlplane: start the Python workers"


# what a state function's first call imports, beyond what every PySpark worker has
MODULES = (
    "pandas",  # the frames of applyInPandasWithState
    "pyarrow",  # the envelopes
    "controlplane.core.coordinator.runner",
    "controlplane.core.quota.runner",
    "controlplane.engine.adapter",
    "controlplane.engine.reload",
)


@dataclass(frozen=True)
class Warmed:
    """What one warm-up task did, in its worker."""

    pid: int
    seconds: float
    frozen: int  # objects moved out of the cyclic collector's reach (gc.get_freeze_count)


def warm_worker(_: Iterable[Any]) -> Iterator[Warmed]:
    """Runs in a Python worker: import what the state functions import, then freeze."""
    import gc
    import importlib
    import os

    started = time.monotonic()
    for name in MODULES:
        importlib.import_module(name)
    from controlplane.engine import adapter

    adapter.prepare_worker()
    yield Warmed(os.getpid(), time.monotonic() - started, gc.get_freeze_count())


def run_warmup(spark: Any, tasks: int) -> list[Warmed]:
    """The warm-up job itself: ``tasks`` tasks at once, one per Python worker."""
    context = spark.sparkContext
    context.setJobDescription(JOB_DESCRIPTION)  # this thread's jobs only
    try:
        result: list[Warmed] = (
            context.parallelize(range(tasks), tasks).mapPartitions(warm_worker).collect()
        )
    finally:
        context.setJobDescription(None)
    return result


def warm_python_workers(
    spark: Any, tasks: int | None = None, stopping: Callable[[], bool] = lambda: False
) -> threading.Thread:
    """``run_warmup`` on a daemon thread, with ``tasks`` workers (by default the session's
    default parallelism); the thread ends when the workers are ready, or when the job failed:
    a warning of one line, or a debug line when ``stopping()`` says the job is stopping (its
    session's stop cancels the job)."""

    def run() -> None:
        started = time.monotonic()
        try:
            count = tasks if tasks is not None else spark.sparkContext.defaultParallelism
            warmed = run_warmup(spark, count)
        except Exception as exc:  # the session stopping, a worker failing: not the job's concern
            # a Py4J error's text is the whole Java stack: its first line says enough
            lines = str(exc).strip().splitlines()
            reason = f"{type(exc).__name__}: {lines[0] if lines else ''}"
            level = logging.DEBUG if stopping() else logging.WARNING
            log.log(
                level, "could not start the Python workers ahead (%s); the first batch will", reason
            )
            return
        log.info(
            "%d Python workers started ahead in %.1f s (imports %s s)",
            len({w.pid for w in warmed}),
            time.monotonic() - started,
            "/".join(f"{w.seconds:.1f}" for w in warmed),
        )

    thread = threading.Thread(target=run, name="warm-python-workers", daemon=True)
    thread.start()
    return thread
