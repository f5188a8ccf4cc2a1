"""The job that builds the JVM's class archive (``engine.class_archive``), run as a child process
by ``class_archive.build`` with ``-XX:ArchiveClassesAtExit`` in ``SPARK_SUBMIT_OPTS``: both
queries, as a local job runs them (shard keying, the delta-rs writer), in event-time mode over
a member's join, sync and heartbeat and one mutation request, to the end of that input; then
the JVM exits, which writes the archive, and the job waits for it.

    python -m controlplane.engine.class_archive_job SCRATCH_FOLDER
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

TIMEOUT_S = 120  # the JVM writes its archive as it exits: about 10 s here


def _requests(now_ms: int) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """A member's join (v3: no MEMBER_ID_REQUIRED round), sync and heartbeat, a second apart,
    and one mutation request."""
    from controlplane.core.coordinator.ids import new_member_id

    group, client = "class-archive", "class-archive"
    member = new_member_id(group, "join", None, client)
    join = {
        "event_id": "join",
        "type": "join",
        "member_id": "",
        "client_id": client,
        "protocol_type": "consumer",
        "session_timeout_ms": 10000,
        "rebalance_timeout_ms": 10000,
        "protocols": [{"name": "range", "metadata": ""}],
        "request_version": 3,
    }
    sync = {
        "event_id": "sync",
        "type": "sync",
        "member_id": member,
        "generation_id": 1,
        "assignments": [{"member_id": member, "assignment": ""}],
    }
    heartbeat = {
        "event_id": "heartbeat",
        "type": "heartbeat",
        "member_id": member,
        "generation_id": 1,
    }
    requests = [
        {**request, "group_id": group, "event_time_ms": now_ms + 1000 * n}
        for n, request in enumerate((join, sync, heartbeat))
    ]
    mutation = {
        "event_id": "create",
        "event_time_ms": now_ms,
        "type": "create_topics",
        "user": client,
        "client_id": client,
        "topics": [{"name": "t", "partitions": 1}],
    }
    return requests, [mutation]


def _train(scratch: Path) -> int:
    """In the child: run both queries over a few requests to the end of their input, then
    let the JVM exit (its exit writes the archive) and wait for it."""
    from controlplane.engine.launch import run

    now_ms = int(time.time() * 1000)
    landing = scratch / "landing"
    coordinator, quota = _requests(now_ms)
    for name, rows in (("coordinator", coordinator), ("quota", quota)):
        folder = landing / name
        folder.mkdir(parents=True)
        (folder / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = scratch / "config.yaml"  # JSON is YAML
    config.write_text(json.dumps(_config(landing)))
    argv = ["--config", str(config), "--available-now"]
    argv += ["--tables-root", str(scratch / "tables")]
    argv += ["--checkpoint-root", str(scratch / "checkpoints")]
    code = run(argv, ("coordinator", "quota"), "the class archive's job")
    _exit_jvm()
    return code


def _config(landing: Path) -> dict[str, object]:
    source = {"format": "jsonl", "clean_source": "off"}
    return {
        "group.initial.rebalance.delay.ms": 0,
        "quotas": [{"user": "<default>", "controller_mutation_rate": 10}],
        "engine": {
            "mode": "event_time",
            "keying": "shard",
            "shards": 64,
            "shuffle_partitions": 2,
            "writer": "delta-rs",  # a local job's (conf/local.yaml)
        },
        "sources": {
            "coordinator": {**source, "path": str(landing / "coordinator")},
            "quota": {**source, "path": str(landing / "quota")},
        },
    }


def _exit_jvm() -> None:
    """Close the JVM's stdin (PySpark's gateway exits at its end) and wait for it to exit."""
    from pyspark import SparkContext

    process = getattr(SparkContext._gateway, "proc", None)
    if process is None:
        return
    if process.stdin is not None:
        process.stdin.close()
    process.wait(timeout=TIMEOUT_S)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    sys.exit(_train(Path(sys.argv[1])))
