"""One run of the demo: the engine, the fleet, the timeline, the story and the summary."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from controlplane.cli.demo_fleet import AdminTool, MemberApp, Producer
from controlplane.cli.demo_plan import GROUPS, DemoPlan, elapsed_s, log
from controlplane.cli.demo_summary import print_summary, run_sql
from controlplane.client.admin import AdminClient
from controlplane.client.assignors import TopicPartition
from controlplane.client.clock import RealClock
from controlplane.client.config import AdminConfig, consumer_config
from controlplane.client.records import InMemoryLog
from controlplane.client.transport import Requester, Stream, Transport
from controlplane.client.transport_files import FileTransport
from controlplane.core.config import Settings


class DemoRun:
    def __init__(
        self,
        settings: Settings,
        options: Any,
        plan: DemoPlan,
        client: dict[str, Any],
        config_path: str,
        *,
        broker: Any = None,
    ) -> None:
        self.settings = settings
        self.broker = broker  # a LocalBroker: the run is on Kafka
        self.options = options
        self.plan = plan
        self.client = client
        self.config_path = config_path
        self.clock = RealClock()
        self.log = InMemoryLog(self.clock)
        self.apps: dict[str, MemberApp] = {}
        self.retired: list[MemberApp] = []
        self.story: list[str] = []
        self.restart: dict[str, Any] = {}
        self.queries: list[Any] = []
        self.spark: Any = None
        self.transport: Transport | None = None
        self.started = time.monotonic()
        self.fleet_started: float | None = None
        self._events: list[tuple[int, Callable[[], None]]] = []

    # --- the run ---------------------------------------------------------------------------

    def execute(self) -> int:
        try:
            self._start_engine()
            self.transport = self._transport()
            if not self._await_engine():
                return 1
            self._run_fleet()
        except KeyboardInterrupt:
            print("interrupted: stopping")
        finally:
            self._stop_engine()
        self._tell_story()
        print_summary(self.options.tables_root, self.config_path, self.plan.admin_user)
        return 0

    def _start_engine(self) -> None:
        from controlplane.engine.launch import session_for
        from controlplane.engine.queries import (
            build_coordinator_query,
            build_quota_query,
            register_progress_listener,
        )

        self._say("starting Spark (local[2]) and the coordinator and quota queries")
        self.spark = session_for(self.options, "controlplane-demo")
        self.spark.sparkContext.setLogLevel("ERROR")  # batch-behind warnings are expected here
        register_progress_listener(self.spark, self.options)
        for build in (build_coordinator_query, build_quota_query):
            writer = build(
                self.spark, self.settings, config_path=self.config_path, options=self.options
            )
            self.queries.append(writer.start())

    def _transport(self) -> Transport:
        where = {
            Stream.GROUP: self.options.coordinator_source.path,
            Stream.QUOTA: self.options.quota_source.path,
        }
        if self.broker is None:
            return FileTransport(self.clock, where, self.options.tables_root)
        from controlplane.client.transport_kafka import KafkaTransport

        answers_topic = str(self.settings.sections["engine"]["answers_topic"])
        self._say(f"clients: requests to {', '.join(where.values())}, answers from {answers_topic}")
        return KafkaTransport(
            self.clock, self.broker.bootstrap_servers, where, answers_topic, client_id="demo"
        )

    def _await_engine(self) -> bool:
        """Send a describe and wait for its answer: the first micro-batch is the slowest."""
        assert self.transport is not None
        self._say("waiting for the first micro-batch (a describe request and its answer)")
        requester = Requester(self.transport, self.clock, "demo-ping")
        body = {"type": "describe", "group_id": "orders"}
        call = requester.start(Stream.GROUP, body, self.plan.engine_start_timeout_s * 1000)
        while not call.done:
            self.clock.wait_for(lambda: call.done, 5_000)
            requester.calls.reap(self.clock.now_ms())
            if self._failed_query():
                return False
            if not call.done:
                self._say("... engine warming up")
        try:
            call.result()
        except Exception as error:
            print(f"demo: the engine did not answer: {error}")
            return False
        self._say(f"engine answered its first request after {elapsed_s(self.started)} s")
        return True

    def _run_fleet(self) -> None:
        assert self.transport is not None
        for topic, partitions, _, _, _ in GROUPS.values():
            self.log.create_topic(topic, partitions)
        producer = Producer(self.clock, self.log, {t: n for t, n, *_ in GROUPS.values()})
        for group, (topic, _, count, static, assignor) in GROUPS.items():
            for index in range(1, count + 1):
                self._start_member(group, topic, index, static, assignor)
        admin = self._admin_tool()
        fleet_started = self.fleet_started = time.monotonic()
        self._say("fleet started: 7 members in 3 groups, a producer, an admin tool")
        timeline = self._events = self._timeline()
        next_progress = 0
        while (now_s := elapsed_s(fleet_started)) < self.plan.duration_s:
            while timeline and timeline[0][0] <= now_s:
                timeline.pop(0)[1]()
            if now_s >= next_progress:
                self._progress(now_s, admin, producer)
                next_progress = now_s + 5
            if self._failed_query():
                break
            self.clock.sleep(500)
        self._say("time is up: stopping the producer and the admin tool (its last burst may retry)")
        producer.stop()
        admin.stop(30_000)
        self._close_members()
        self.admin_totals = admin.totals
        self.admin_round_trips_ms = admin.admin.round_trips_ms()
        self.fleet_apps = list(self.apps.values()) + self.retired

    def _close_members(self, progress_every_ms: int = 5_000) -> None:
        """Close every member at once, as independent processes would (each commits, and a
        dynamic one sends LeaveGroup: a round trip or two through the engine), with a line
        every few seconds so the wait is not silent."""
        apps = list(self.apps.values())
        self._say(f"closing {len(apps)} members: each commits, dynamic ones send LeaveGroup")
        threads = [
            self.clock.spawn(partial(app.close, 20_000), f"close-{app.name}") for app in apps
        ]

        def all_closed() -> bool:
            return not any(thread.is_alive() for thread in threads)

        while not self.clock.wait_for(all_closed, progress_every_ms):
            open_apps = [a.name for a, t in zip(apps, threads, strict=True) if t.is_alive()]
            closed = len(apps) - len(open_apps)
            self._say(f"... {closed}/{len(apps)} closed, waiting for {', '.join(open_apps)}")
        self._say(f"all {len(apps)} members closed")

    def _timeline(self) -> list[tuple[int, Callable[[], None]]]:
        plan = self.plan
        events: list[tuple[int, Callable[[], None]]] = [
            (plan.crash_at_s, self._crash),
            (plan.stall_at_s, self._stall),
            (plan.restart_at_s, self._stop_static),  # schedules the restart when stopped
        ]
        return sorted(events, key=lambda e: e[0])

    # --- the fleet -------------------------------------------------------------------------

    def _start_member(
        self, group: str, topic: str, index: int, static: bool, assignor: str
    ) -> None:
        assert self.transport is not None
        name = f"{group}-{index}"
        props = {**self.client, "partition.assignment.strategy": [assignor]}
        config = replace(
            consumer_config(group, props),
            topics=(topic,),
            client_id=name,
            group_instance_id=f"inv-{index}" if static else None,
        )
        self.apps[name] = MemberApp(name, config, self.transport, self.clock, self.log).start()

    def _admin_tool(self) -> AdminTool:
        assert self.transport is not None
        config = AdminConfig(
            user=self.plan.admin_user,
            client_id="admin-tool",
            request_timeout_ms=int(self.client.get("request.timeout.ms", 30_000)),
            default_api_timeout_ms=int(self.client.get("default.api.timeout.ms", 60_000)),
        )
        return AdminTool(
            self.clock,
            AdminClient(config, self.transport, self.clock),
            bursts=self.plan.admin_bursts,
            topics_per_burst=self.plan.topics_per_burst,
            partitions=self.plan.partitions_per_topic,
            interval_ms=self.plan.admin_interval_s * 1000,
        )

    def _crash(self) -> None:
        app = self.apps["orders-3"]
        self.restart["crashed_id"] = app.member.member_id
        app.crash()
        self._say(f"orders-3 CRASHES (member {app.member.member_id}): no LeaveGroup, no commit")

    def _stall(self) -> None:
        app = self.apps["billing-2"]
        app.stall(self.plan.stall_s * 1000)
        self._say(
            f"billing-2 STALLS for {self.plan.stall_s} s (max.poll.interval.ms = "
            f"{app.member.config.max_poll_interval_ms} ms): it should leave, then rejoin"
        )

    def _stop_static(self) -> None:
        app = self.apps.pop("inventory-2")
        self._say("inventory-2 (static, inv-2) STOPS for a restart: commits, sends no LeaveGroup")
        self.restart.update(
            before_assignment=app.member.assignment(),
            before_generation=app.member.generation.generation_id,
        )
        app.close(20_000)
        self.restart["committed"] = dict(app.member.positions())
        self.retired.append(app)
        assert self.fleet_started is not None
        restart_at_s = elapsed_s(self.fleet_started) + self.plan.restart_pause_s
        self._events.append((restart_at_s, self._start_static))
        self._events.sort(key=lambda e: e[0])

    def _start_static(self) -> None:
        self._start_member("inventory", "inventory", 2, True, "range")
        self.restart["after"] = self.apps["inventory-2"]
        self._say("inventory-2 (static, inv-2) RESTARTS with the same group.instance.id")

    # --- progress and story ----------------------------------------------------------------

    def _progress(self, now_s: int, admin: AdminTool, producer: Producer) -> None:
        parts = []
        for group in GROUPS:
            apps = [a for n, a in self.apps.items() if n.startswith(group + "-")]
            generations = {a.member.generation.generation_id for a in apps if a.stable}
            stable = sum(1 for a in apps if a.stable)
            retired = [a for a in self.retired if a.name.startswith(group + "-")]
            consumed = sum(a.consumed for a in apps + retired)
            gen = ",".join(str(g) for g in sorted(generations)) or "-"
            parts.append(f"{group}: gen {gen} {stable}/{len(apps)} stable {consumed:,} rec")
        totals = admin.totals
        parts.append(
            f"admin: {totals.created}/{totals.requested} topics, {totals.retried_topics} retried"
        )
        print(f"[{now_s:4d}s] " + " | ".join(parts), flush=True)

    def _tell_story(self) -> None:
        apps = getattr(self, "fleet_apps", None)
        if apps is None:
            return
        print("\n=== What happened (client side, checked against the tables) ===")
        by_name: dict[str, list[MemberApp]] = {}
        for app in apps:
            by_name.setdefault(app.name, []).append(app)
        self._story_crash()
        self._story_stall(by_name.get("billing-2", []))
        self._story_restart()
        totals = self.admin_totals
        print(
            f"- admin tool: {totals.created} of {totals.requested} topics created, "
            f"{totals.retried_topics} needed a retry after THROTTLING_QUOTA_EXCEEDED, "
            f"{totals.failed} failed"
        )
        trips: list[int] = sorted(t for a in apps for t in a.member.round_trips_ms())
        if trips:

            def pct(q: float) -> int:
                return trips[min(len(trips) - 1, int(q * len(trips)))]

            read = "the answers topic" if self.broker is not None else "Delta"
            print(
                f"- request round trips (send -> answer read from {read}), {len(trips)} answers: "
                f"p50 {pct(0.5):,} ms, p90 {pct(0.9):,} ms, p99 {pct(0.99):,} ms, "
                f"max {trips[-1]:,} ms"
            )
        errors = [f"{a.name}: {a.error}" for a in apps if a.error]
        if errors:
            print("- client errors: " + "; ".join(errors))

    def latency_report(self) -> dict[str, Any]:
        """The clients' round trips (send to answer received, ms) and where the tables are."""
        apps = getattr(self, "fleet_apps", [])
        return {
            "trigger_interval_ms": self.options.trigger_interval_ms,
            "tables_root": str(self.options.tables_root),
            "member_round_trips_ms": [t for a in apps for t in a.member.round_trips_ms()],
            "admin_round_trips_ms": list(getattr(self, "admin_round_trips_ms", [])),
        }

    def _story_crash(self) -> None:
        crashed = self.restart.get("crashed_id")
        if not crashed:
            return
        rows = self._sql(
            "SELECT reason, at_ms FROM group_events WHERE kind = 'member_removed'"
            f" AND member_id = '{crashed}'"
        )
        reasons = ", ".join(str(r["reason"]) for r in rows) or "not removed (yet)"
        print(f"- orders-3 crashed: the coordinator removed it: {reasons}")

    def _story_stall(self, apps: list[MemberApp]) -> None:
        for app in apps:
            kinds = [e.kind for e in app.member.history]
            timeout = "poll_timeout" in kinds
            left = "left" in kinds[kinds.index("poll_timeout") :] if timeout else False
            rejoined = timeout and "assigned" in kinds[kinds.index("poll_timeout") :]
            print(
                f"- billing-2 stalled: poll timeout {_yes(timeout)}, sent LeaveGroup {_yes(left)},"
                f" rejoined on its next poll {_yes(rejoined)}"
            )

    def _story_restart(self) -> None:
        after: MemberApp | None = self.restart.get("after")
        if after is None or "before_assignment" not in self.restart:
            return
        same = tuple(after.member.assignment()) == tuple(self.restart["before_assignment"])
        committed: dict[TopicPartition, int] = self.restart["committed"]
        resumed = all(after.first_offsets.get(tp, off) == off for tp, off in committed.items())
        print(
            f"- inventory-2 restarted (static): same assignment {_yes(same)}, generation "
            f"{self.restart['before_generation']} -> {after.member.generation.generation_id}, "
            f"resumed from its committed offsets {_yes(resumed)}"
        )

    def _sql(self, sql: str) -> list[dict[str, Any]]:
        try:
            return run_sql(self.options.tables_root, sql)
        except Exception as error:
            log.warning("query failed: %s", error)
            return []

    # --- helpers ---------------------------------------------------------------------------

    def _failed_query(self) -> bool:
        for query in self.queries:
            if query.exception() is not None:
                print(f"demo: query {query.name} failed: {query.exception()}")
                return True
        return False

    def _stop_engine(self) -> None:
        if self.transport is not None:
            self._say("stopping the engine: the last answers, then the queries and Spark")
            self.clock.sleep(3 * self.options.trigger_interval_ms + 3_000)  # the last answers
            self.transport.close()
        self._await_idle(10.0)
        for query in self.queries:
            try:
                query.stop()
            except Exception as error:  # already failed: reported above
                log.warning("stopping %s: %s", query.name, error)
        if self.spark is not None:
            self.spark.stop()
        self._say("engine stopped")

    def _await_idle(self, limit_s: float) -> None:
        """Stop between batches where possible: a batch cancelled mid-way logs a long trace."""
        end = time.monotonic() + limit_s
        while time.monotonic() < end:
            if not any(q.isActive and q.status.get("isTriggerActive") for q in self.queries):
                return
            time.sleep(0.05)

    def _say(self, text: str) -> None:
        """Before the fleet starts: time since launch; after: time since the fleet started."""
        if self.fleet_started is None:
            print(f"[launch +{elapsed_s(self.started):3d}s] {text}", flush=True)
        else:
            print(f"[{elapsed_s(self.fleet_started):4d}s] {text}", flush=True)


def _yes(value: bool) -> str:
    return "yes" if value else "NO"
