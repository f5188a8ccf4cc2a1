"""The warm-up never stands in the job's way (engine.warmup)."""

from __future__ import annotations

import logging

import pytest

from controlplane.engine.warmup import warm_python_workers

# what a Py4J error says: one line, then the Java stack
JAVA_ERROR = "An error occurred while calling o42.collectAndServe.\n" + "\tat org.apache.x\n" * 60


class FailingSession:
    @property
    def sparkContext(self) -> object:
        raise RuntimeError(JAVA_ERROR)


def _warm(caplog: pytest.LogCaptureFixture, stopping: bool) -> list[logging.LogRecord]:
    with caplog.at_level(logging.DEBUG, logger="controlplane.engine.warmup"):
        thread = warm_python_workers(FailingSession(), stopping=lambda: stopping)
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert thread.daemon  # never keeps a stopping job alive
    return [r for r in caplog.records if r.name == "controlplane.engine.warmup"]


def test_a_warm_up_that_fails_is_a_warning_of_one_line_and_its_thread_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    [record] = _warm(caplog, stopping=False)
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        "could not start the Python workers ahead (RuntimeError: An error occurred while "
        "calling o42.collectAndServe.); the first batch will"
    )


def test_a_warm_up_cancelled_by_the_job_stopping_is_a_debug_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    [record] = _warm(caplog, stopping=True)
    assert record.levelno == logging.DEBUG
