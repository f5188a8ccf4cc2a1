"""The warm-up never stands in the job's way (engine.warmup)."""

from __future__ import annotations

import logging

import pytest

from controlplane.engine.warmup import warm_python_workers


class StoppedSession:
    @property
    def sparkContext(self) -> object:
        raise RuntimeError("the session was stopped")


def test_a_warm_up_that_fails_is_a_warning_and_its_thread_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="controlplane.engine.warmup"):
        thread = warm_python_workers(StoppedSession())
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert thread.daemon  # never keeps a stopping job alive
    [record] = caplog.records
    assert "could not start the Python workers ahead" in record.getMessage()
    assert "the session was stopped" in record.getMessage()
