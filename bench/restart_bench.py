"""Restart to first answer: the coordinator job killed with SIGKILL and started again. Prints
figures; asserts nothing about speed.

    PYTHONPATH=lib .venv/bin/python bench/restart_bench.py [--groups 30000] [--restarts 2]
        [--out out/bench/restart] [--config conf/local.yaml]

The job runs as users run it (``python -m controlplane job coordinator --config conf/local.yaml``
with its roots under ``--out``), in a process group of its own. First ``--groups`` groups join
and sync (bench/engine_bench.py's idle workload: every member Stable, every timer 25 minutes
away) and the job answers all of them. Then, ``--restarts`` times: the job's whole process group
is killed with SIGKILL, started again, and one request (a DescribeGroup of a group in state) is
dropped into the landing directory the moment the new process is spawned. Printed per restart,
in seconds from the spawn:

* ``planned``: the new run's first offsets file (JVM and session start, the query started, the
  source listed: everything before a batch runs);
* ``committed``: that batch's commit file (the batch: state loaded, the function run, the Delta
  commits);
* ``answer``: the probe's row readable in the decisions table (what a client waits for);

and the first batch's ``duration_ms`` from the query_progress table. The first start (no
checkpoint yet, the probe dropped at spawn too) is printed as ``cold`` for comparison.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
sys.path.insert(0, str(ROOT / "bench"))

from engine_bench import _drop, class_archive_named, count, idle_workload, read  # noqa: E402


def spawn(config: Path, out: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "lib"), str(ROOT / "tests")])}
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    command = [sys.executable, "-m", "controlplane", "job", "coordinator", "--config", str(config)]
    command += ["--tables-root", str(out / "tables"), "--checkpoint-root", str(out / "checkpoints")]
    command += ["--landing-root", str(out / "landing")]
    with log.open("ab") as sink:
        return subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # one process group: SIGKILL reaches the JVM and workers
        )


def kill(job: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(job.pid, signal.SIGKILL)
    job.wait()


def log_files(out: Path, kind: str) -> dict[int, float]:
    """Batch id -> mtime of the checkpoint's offsets or commits files."""
    found: dict[int, float] = {}
    for folder in out.glob(f"checkpoints/**/{kind}"):
        for path in folder.iterdir():
            if path.name.isdigit():
                found[int(path.name)] = path.stat().st_mtime
    return found


def answered(out: Path, event_id: str) -> bool:
    import pyarrow.compute as pc

    return count(out / "tables" / "decisions", pc.field("event_id") == event_id) > 0


def wait(check: Any, deadline_s: float, job: subprocess.Popen[bytes], what: str) -> float:
    end = time.time() + deadline_s
    while time.time() < end:
        if job.poll() is not None:
            raise RuntimeError(f"the job exited ({job.returncode}) before {what}: see its log")
        if check():
            return time.time()
        time.sleep(0.1)
    raise TimeoutError(f"no {what} within {deadline_s:.0f} s")


def probe(landing: Path, number: int) -> str:
    event_id = f"probe-{number}"
    describe = {"event_id": event_id, "type": "describe", "group_id": "g00000"}
    _drop(landing, [{**describe, "event_time_ms": int(time.time() * 1000)}], event_id)
    return event_id


def start_and_probe(
    config: Path, out: Path, log: Path, number: int
) -> tuple[subprocess.Popen[bytes], dict[str, float]]:
    """Spawn the job, drop a probe at once, time the first batch and the answer."""
    before_offsets, before_commits = log_files(out, "offsets"), log_files(out, "commits")
    spawned = time.time()
    job = spawn(config, out, log)
    event_id = probe(out / "landing" / "coordinator", number)

    def new(kind: str, before: dict[int, float]) -> Any:
        return lambda: [b for b in log_files(out, kind) if b not in before]

    planned = wait(new("offsets", before_offsets), 900, job, "a new offsets file")
    committed = wait(new("commits", before_commits), 900, job, "a new commit file")
    answer = wait(lambda: answered(out, event_id), 900, job, f"the answer to {event_id}")
    first_batch = min(b for b in log_files(out, "commits") if b not in before_commits)
    return job, {
        "planned": planned - spawned,
        "committed": committed - spawned,
        "answer": answer - spawned,
        "first_batch": float(first_batch),
    }


def batch_ms(out: Path, batch_id: float) -> float:
    """The batch's duration from the query_progress table (written after the batch)."""
    for _ in range(100):
        rows = [
            r
            for r in read(out / "tables" / "query_progress")
            if r["query"] == "coordinator" and r["batch_id"] == batch_id
        ]
        if rows:
            return float(rows[-1]["duration_ms"])
        time.sleep(0.1)
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=30000)
    parser.add_argument("--restarts", type=int, default=2)
    parser.add_argument("--out", default="out/bench/restart")
    parser.add_argument("--config", default=str(ROOT / "conf" / "local.yaml"))
    args = parser.parse_args()
    out, config = Path(args.out).resolve(), Path(args.config).resolve()
    shutil.rmtree(out, ignore_errors=True)
    landing = out / "landing" / "coordinator"
    landing.mkdir(parents=True)
    log = out / "job.log"
    from controlplane.engine.session import LOCAL_JAVA_OPTIONS_KEY, local_java_options

    options = local_java_options().get(LOCAL_JAVA_OPTIONS_KEY, "")  # as the job's session does
    print(f"JVM class archive: {class_archive_named(options)}", flush=True)
    print("run      planned_s  committed_s  answer_s  first_batch_ms", flush=True)

    def report(name: str, f: dict[str, float]) -> None:
        f["first_batch_ms"] = batch_ms(out, f["first_batch"])
        print(
            f"{name:8s} {f['planned']:9.1f} {f['committed']:12.1f} {f['answer']:9.1f}"
            f" {f['first_batch_ms']:15.0f}",
            flush=True,
        )

    job, figures = start_and_probe(config, out, log, 0)
    report("cold", figures)
    try:
        for number, events in enumerate(idle_workload(args.groups)):
            now_ms = int(time.time() * 1000)
            _drop(landing, [{**e, "event_time_ms": now_ms} for e in events], f"s{number}")
            time.sleep(1.0)
        wait(
            lambda: count(out / "tables" / "decisions") >= 2 * args.groups + 1,
            1800,
            job,
            f"answers for {args.groups} groups",
        )
        time.sleep(5.0)  # a few idle batches after the last answers
        for number in range(1, args.restarts + 1):
            kill(job)
            job, figures = start_and_probe(config, out, log, number)
            report(f"restart{number}", figures)
            time.sleep(5.0)
    finally:
        kill(job)
    print(f"{args.groups} groups in state; the job's output: {log}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
