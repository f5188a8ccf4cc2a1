"""Where a local Spark job's CPU goes while a benchmark runs: the driver JVM (which is also the
executor in local mode) by kind of thread, the Python workers, and the benchmark's own process
(the driver's Python: foreachBatch and its Delta writes, the listener, the load generator).

Read from Linux's /proc (utime + stime of every thread); elsewhere ``CpuMeter.start`` returns
None and the benchmark prints no CPU line. Figures are cores: CPU seconds over wall seconds.
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

PROC = Path("/proc")
# JVM thread names (Linux keeps their first 15 bytes) -> the part they belong to
JVM_PARTS = (
    ("JIT", re.compile(r"C[12] CompilerThre")),
    ("tasks", re.compile(r"Executor task")),
    ("stream", re.compile(r"stream executio")),
    ("GC", re.compile(r"GC Thread|G1 |VM Thread")),
)
WORKER_MARKERS = ("pyspark.daemon", "pydaemon", "pyspark.worker")
DELTA_RS_THREAD = "tokio-rt-worker"


def _ticks(pid: int) -> dict[str, int]:
    """CPU ticks per thread name of one process (threads of a name summed)."""
    out: Counter[str] = Counter()
    try:
        tasks = list((PROC / str(pid) / "task").iterdir())
    except OSError:
        return {}
    for task in tasks:
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[name] += int(fields[11]) + int(fields[12])
    return dict(out)


def _machine_busy() -> int:
    """Ticks the whole machine was busy (every CPU, every process), from /proc/stat."""
    values = [int(v) for v in (PROC / "stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(values[:8]) - values[3] - values[4]  # all but idle and iowait (guest is in user)


def _workers(exclude: set[int]) -> list[int]:
    """The Python workers' processes: PySpark's daemon and the workers it forks (the JVM's
    command line names the daemon's module too: it is excluded)."""
    pids = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) in exclude:
            continue
        try:
            command = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if any(marker in command for marker in WORKER_MARKERS):
            pids.append(int(entry.name))
    return pids


class CpuMeter:
    """CPU used between ``start`` and ``stop`` by the JVM, the Python workers and this process."""

    def __init__(self, jvm_pid: int) -> None:
        self.jvm_pid = jvm_pid
        self.own_pid = os.getpid()
        self.started = time.time()
        self.busy_before = _machine_busy()
        self.before = self._snapshot()

    @classmethod
    def start(cls, spark: Any) -> CpuMeter | None:
        try:
            jvm_pid = int(spark.sparkContext._gateway.proc.pid)
        except Exception:  # not a gateway this process launched
            return None
        return cls(jvm_pid) if (PROC / str(jvm_pid)).exists() else None

    def _snapshot(self) -> dict[tuple[str, int], dict[str, int]]:
        snap = {("jvm", self.jvm_pid): _ticks(self.jvm_pid), ("driver", self.own_pid): {}}
        snap[("driver", self.own_pid)] = _ticks(self.own_pid)
        for pid in _workers({self.jvm_pid, self.own_pid}):
            snap[("worker", pid)] = _ticks(pid)
        return snap

    def stop(self) -> dict[str, float]:
        after, elapsed = self._snapshot(), time.time() - self.started
        hertz = os.sysconf("SC_CLK_TCK")
        cores: Counter[str] = Counter()
        cores["machine"] = (_machine_busy() - self.busy_before) / hertz / elapsed
        for (kind, pid), threads in after.items():
            was = self.before.get((kind, pid), {})
            for name, ticks in threads.items():
                used = (ticks - was.get(name, 0)) / hertz / elapsed
                cores[kind] += used
                if kind == "jvm":
                    part = next((p for p, pattern in JVM_PARTS if pattern.match(name)), "other")
                    cores[f"jvm {part}"] += used
                elif kind == "driver" and name == DELTA_RS_THREAD:
                    cores["driver delta-rs"] += used
        return dict(cores)


def describe(cores: dict[str, float]) -> str:
    jvm = ", ".join(
        f"{part} {cores.get(f'jvm {part}', 0.0):.2f}"
        for part in [name for name, _ in JVM_PARTS] + ["other"]
    )
    return (
        f"CPU while loaded (cores): machine {cores.get('machine', 0.0):.2f} of {os.cpu_count()}; "
        f"Python workers {cores.get('worker', 0.0):.2f}; "
        f"JVM {cores.get('jvm', 0.0):.2f} ({jvm}); "
        f"driver Python {cores.get('driver', 0.0):.2f} "
        f"(delta-rs threads {cores.get('driver delta-rs', 0.0):.2f})"
    )
