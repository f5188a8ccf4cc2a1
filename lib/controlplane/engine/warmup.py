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

Nothing waits for it and nothing depends on it: a failure is a warning, and the first batch
then starts its workers as before. Local sessions only (``launch``): on a cluster, a job's
tasks are not placed on every executor.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator
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
    imported: tuple[str, ...]  # of MODULES, those the worker holds afterwards
    frozen: int  # objects moved out of the cyclic collector's reach (gc.get_freeze_count)


def warm_worker(_: Iterable[Any]) -> Iterator[Warmed]:
    """Runs in a Python worker: import what the state functions import, then freeze."""
    import gc
    import importlib
    import os
    import sys

    started = time.monotonic()
    for name in MODULES:
        importlib.import_module(name)
    from controlplane.engine import adapter

    adapter.prepare_worker()
    imported = tuple(name for name in MODULES if name in sys.modules)
    yield Warmed(os.getpid(), time.monotonic() - started, imported, gc.get_freeze_count())


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


def warm_python_workers(spark: Any, tasks: int | None = None) -> threading.Thread:
    """``run_warmup`` on a daemon thread, with ``tasks`` workers (by default the session's
    default parallelism: locally, the cores it runs tasks on); the thread ends when the workers
    are ready (or when the job failed, with a warning)."""

    def run() -> None:
        started = time.monotonic()
        try:
            count = tasks if tasks is not None else spark.sparkContext.defaultParallelism
            warmed = run_warmup(spark, count)
        except Exception as exc:  # the session stopping, a worker failing: not the job's concern
            log.warning("could not start the Python workers ahead (%s); the first batch will", exc)
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
