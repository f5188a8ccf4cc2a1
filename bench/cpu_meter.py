"""Where a local Spark job's CPU goes while a benchmark runs: the driver JVM (which is also the
executor in local mode) by kind of thread, the Python workers, and the benchmark's own process
(the driver's Python: foreachBatch and its Delta writes, the listener, the load generator).

Read from Linux's /proc (utime + stime); elsewhere ``CpuMeter.start`` returns None and the
benchmark prints no CPU line. Figures are cores: CPU seconds over wall seconds. A process's
figure is its own total (its threads that ended included); its parts are its threads that
lived through the window or started in it, by name, and ``other`` the rest. The Python
workers are the JVM's descendants (PySpark's daemon and the workers it forks), so another
job's workers on the machine are not counted.
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
DELTA_RS_THREAD = "tokio-rt-worker"

Stat = tuple[str, int, int]  # a process's or thread's name, parent pid, CPU ticks


def _stat(path: Path) -> Stat | None:
    try:
        text = (path / "stat").read_text()
    except OSError:
        return None
    name = text[text.index("(") + 1 : text.rindex(")")]  # a name may hold spaces and brackets
    fields = text[text.rindex(")") + 2 :].split()
    return name, int(fields[1]), int(fields[11]) + int(fields[12])


def _threads(pid: int) -> dict[int, tuple[str, int]]:
    """Each thread's name and CPU ticks, by thread id."""
    out = {}
    try:
        tasks = list((PROC / str(pid) / "task").iterdir())
    except OSError:
        return {}
    for task in tasks:
        stat = _stat(task)
        if stat is not None:
            out[int(task.name)] = (stat[0], stat[2])
    return out


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            stat = _stat(entry)
            if stat is not None:
                parents[int(entry.name)] = stat[1]
    found, frontier = [], {root}
    while frontier:
        children = {pid for pid, parent in parents.items() if parent in frontier}
        found += sorted(children)
        frontier = children
    return found


def _machine_busy() -> int:
    """Ticks the whole machine was busy (every CPU, every process), from /proc/stat: user,
    nice, system, irq and softirq (guest time is inside user; idle, iowait and steal are not
    this machine's work)."""
    values = [int(v) for v in (PROC / "stat").read_text().split("\n", 1)[0].split()[1:]]
    return values[0] + values[1] + values[2] + values[5] + values[6]


Snapshot = dict[tuple[str, int], tuple[int, dict[int, tuple[str, int]]]]


class CpuMeter:
    """CPU used between ``start`` and ``stop`` by the JVM, the Python workers and this process."""

    def __init__(self, jvm_pid: int, others: dict[str, int] | None = None) -> None:
        self.jvm_pid = jvm_pid
        self.others = dict(others or {})  # more processes by name (a Kafka broker), each whole
        self.own_pid = os.getpid()
        self.started = time.monotonic()
        self.busy_before = _machine_busy()
        self.before = self._snapshot()

    @classmethod
    def start(cls, spark: Any, others: dict[str, int] | None = None) -> CpuMeter | None:
        try:
            jvm_pid = int(spark.sparkContext._gateway.proc.pid)
        except Exception:  # not a gateway this process launched
            return None
        return cls(jvm_pid, others) if (PROC / str(jvm_pid) / "stat").exists() else None

    def _snapshot(self) -> Snapshot:
        kinds = [("jvm", self.jvm_pid), ("driver", self.own_pid)]
        kinds += [("worker", pid) for pid in _descendants(self.jvm_pid)]
        kinds += list(self.others.items())
        snap: Snapshot = {}
        for kind, pid in kinds:
            stat = _stat(PROC / str(pid))
            if stat is not None:
                snap[(kind, pid)] = (stat[2], _threads(pid))
        return snap

    def stop(self) -> dict[str, float]:
        after, elapsed = self._snapshot(), time.monotonic() - self.started
        per_second = os.sysconf("SC_CLK_TCK") * elapsed
        cores: Counter[str] = Counter()
        cores["machine"] = (_machine_busy() - self.busy_before) / per_second
        for (kind, pid), (total, threads) in after.items():
            was_total, was_threads = self.before.get((kind, pid), (0, {}))
            cores[kind] += (total - was_total) / per_second
            if kind == "worker" or kind in self.others:
                continue
            parts: Counter[str] = Counter()
            for tid, (name, ticks) in threads.items():
                used = (ticks - was_threads.get(tid, (name, 0))[1]) / per_second
                if kind == "jvm":
                    parts[next((p for p, pattern in JVM_PARTS if pattern.match(name)), "")] += used
                elif name == DELTA_RS_THREAD:
                    parts["delta-rs"] += used
            for part, used in parts.items():
                if part:
                    cores[f"{kind} {part}"] += used
        cores["jvm other"] = max(0.0, cores["jvm"] - sum(cores[f"jvm {p}"] for p, _ in JVM_PARTS))
        return dict(cores)


def describe(cores: dict[str, float]) -> str:
    jvm = ", ".join(
        f"{part} {cores.get(f'jvm {part}', 0.0):.2f}"
        for part in [name for name, _ in JVM_PARTS] + ["other"]
    )
    others = "".join(
        f"; {name} {used:.2f}"
        for name, used in cores.items()
        if name not in ("machine", "worker", "jvm", "driver") and " " not in name
    )
    return (
        f"CPU while loaded (cores): machine {cores.get('machine', 0.0):.2f} of "
        f"{len(os.sched_getaffinity(0))}; Python workers {cores.get('worker', 0.0):.2f}; "
        f"JVM {cores.get('jvm', 0.0):.2f} ({jvm}); "
        f"driver Python {cores.get('driver', 0.0):.2f} "
        f"(delta-rs threads {cores.get('driver delta-rs', 0.0):.2f}){others}"
    )
