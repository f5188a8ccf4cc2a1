"""Which Python Kafka client for KafkaTransport: the request/answer round trip through the
local broker with kafka-python and with confluent-kafka, everything else equal. Prints
figures; asserts nothing.

    PYTHONPATH=lib .venv/bin/python bench/kafka_clients_bench.py [--requests 500]
        [--in-flight 1,8]

A responder thread (kafka-python, the same in every run) reads a request topic and produces
each request back to an answers topic at once, keyed as the engine does. The client under test
does what KafkaTransport does: one producer (acks=all, linger 0), one consumer with a manual
assignment of the answers partition positioned at its end, sends a request, and waits for the
answer with its event_id; ``--in-flight`` requests are kept outstanding at a time (1: strictly
one after the other; 8: about the demo's fleet). Figures: round trip p50/p90/p99/max, requests
per second, and the client process's CPU per request.

confluent-kafka is not a dependency of the project: install it into the environment to
compare (``pip install confluent-kafka==2.16.1``); without it only kafka-python runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

from controlplane.io.broker import LocalBroker  # noqa: E402

KEY = b"orders"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Responder:
    """Reads requests, produces each back to the answers topic (kafka-python, fixed)."""

    def __init__(self, bootstrap: str, requests: str, answers: str) -> None:
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition

        self._producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
        self._consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100
        )
        tp = TopicPartition(requests, 0)
        self._consumer.assign([tp])
        self._consumer.seek(tp, 0)  # a fresh topic; seek_to_end() would resolve lazily, late
        self._answers = answers
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for records in self._consumer.poll(timeout_ms=100).values():
                for record in records:
                    self._producer.send(self._answers, key=record.key, value=record.value)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()
        self._producer.close()


Send = Callable[[bytes], None]
Receive = Callable[[], list[bytes]]


def kafka_python_client(bootstrap: str, requests: str, answers: str) -> tuple[Send, Receive, Any]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100
    )
    tp = TopicPartition(answers, 0)
    consumer.assign([tp])
    consumer.seek(tp, consumer.end_offsets([tp])[tp])

    def send(value: bytes) -> None:
        producer.send(requests, key=KEY, value=value)

    def receive() -> list[bytes]:
        return [r.value for rs in consumer.poll(timeout_ms=100).values() for r in rs]

    def close() -> None:
        consumer.close()
        producer.close()

    return send, receive, close


def confluent_client(bootstrap: str, requests: str, answers: str) -> tuple[Send, Receive, Any]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "partitioner": "murmur2"}
    )
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"unused-{uuid.uuid4().hex[:6]}",  # required, never joined (assign)
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    _, high = consumer.get_watermark_offsets(TopicPartition(answers, 0), timeout=10)
    consumer.assign([TopicPartition(answers, 0, high)])

    def send(value: bytes) -> None:
        producer.produce(requests, key=KEY, value=value)
        producer.poll(0)

    def receive() -> list[bytes]:
        first = consumer.poll(0.1)  # returns with the first message (consume() waits it out)
        if first is None:
            return []
        rest = consumer.consume(num_messages=100, timeout=0)
        return [m.value() for m in [first, *rest] if not m.error()]

    def close() -> None:
        consumer.close()
        producer.flush(5)

    return send, receive, close


CLIENTS = {"kafka-python": kafka_python_client, "confluent-kafka": confluent_client}


def _run(
    client: str, bootstrap: str, request_topic: str, answer_topic: str, total: int, in_flight: int
) -> dict[str, float]:
    send, receive, close = CLIENTS[client](bootstrap, request_topic, answer_topic)
    sent_at: dict[str, float] = {}
    trips: list[float] = []
    next_id = 0
    cpu0, wall0 = time.process_time(), time.monotonic()
    try:
        while len(trips) < total:
            while next_id < total and len(sent_at) < in_flight:
                event_id = f"e{next_id}"
                next_id += 1
                sent_at[event_id] = time.monotonic()
                send(json.dumps({"event_id": event_id}).encode())
            for value in receive():
                started = sent_at.pop(json.loads(value)["event_id"], None)
                if started is not None:
                    trips.append((time.monotonic() - started) * 1000)
    finally:
        close()
    wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
    return {
        "p50": percentile(trips, 0.5),
        "p90": percentile(trips, 0.9),
        "p99": percentile(trips, 0.99),
        "max": max(trips),
        "per_s": total / wall,
        "cpu_ms": cpu * 1000 / total,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--in-flight", default="1,8")
    args = parser.parse_args()
    clients = ["kafka-python"]
    try:
        import confluent_kafka

        clients.append("confluent-kafka")
        versions = confluent_kafka.__version__, confluent_kafka.libversion()[0]
        print("confluent-kafka {}, librdkafka {}".format(*versions))
    except ImportError:
        print("confluent-kafka is not installed: kafka-python only")
    import kafka

    print(f"kafka-python {kafka.__version__}")
    with LocalBroker() as broker:
        print(f"local Kafka {broker.kafka_version} at {broker.bootstrap_servers}")
        for in_flight in (int(n) for n in args.in_flight.split(",")):
            for client in clients:
                suffix = uuid.uuid4().hex[:6]
                req, ans = f"bench-req-{suffix}", f"bench-ans-{suffix}"
                broker.create_topic(req)
                broker.create_topic(ans)
                responder = Responder(broker.bootstrap_servers, req, ans)
                try:
                    _run(client, broker.bootstrap_servers, req, ans, 50, in_flight)  # warm up
                    f = _run(client, broker.bootstrap_servers, req, ans, args.requests, in_flight)
                finally:
                    responder.stop()
                print(
                    f"{client:16s} in flight {in_flight}: p50 {f['p50']:.1f} ms, p90"
                    f" {f['p90']:.1f} ms, p99 {f['p99']:.1f} ms, max {f['max']:.1f} ms;"
                    f" {f['per_s']:.0f} req/s; client CPU {f['cpu_ms']:.2f} ms/request",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
