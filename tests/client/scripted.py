"""A scripted responder: a Transport whose answers a test writes (a fake, not a mock)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from controlplane.client.clock import Clock
from controlplane.client.transport import AnswerCallback, AnswerRoutes, Stream

Responder = Callable[[Stream, Mapping[str, Any]], Mapping[str, Any] | None]


class ScriptedTransport:
    """Records every request; ``responder`` answers at once (a row) or leaves it pending (None),
    to be answered later with ``answer``."""

    def __init__(self, clock: Clock, responder: Responder) -> None:
        self.clock = clock
        self.responder = responder
        self.sent: list[tuple[Stream, dict[str, Any]]] = []
        self.routes = AnswerRoutes()

    def send(self, stream: Stream, request: Mapping[str, Any], on_answer: AnswerCallback) -> None:
        self.sent.append((stream, dict(request)))
        self.routes.add(str(request["event_id"]), on_answer)
        row = self.responder(stream, request)
        if row is not None:
            self.answer(str(request["event_id"]), row)

    def answer(self, event_id: str, row: Mapping[str, Any]) -> bool:
        return self.routes.deliver({**row, "event_id": event_id})

    def forget(self, event_id: str) -> None:
        self.routes.forget(event_id)

    def close(self) -> None:
        pass

    def requests(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [r for _, r in self.sent if kind is None or r.get("type") == kind]
