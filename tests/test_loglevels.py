"""Dynamic log levels in a process: what ``storm set_log_level`` makes a worker do, on a simulated clock."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from squall.core.clock import SimulatedClock
from squall.core.loglevels import LogLevelOverrides, level_number, parse_setting
from squall.core.logs import configure_logging
from squall.core.zk.records import LoggerLevel, LoggerLevels


@pytest.fixture
def output() -> Iterator[io.StringIO]:
    """This process's log lines (JSON, root at INFO, as a worker starts); the root level restored after."""
    stream = io.StringIO()
    root_level = logging.getLogger().level
    configure_logging("worker", level="INFO", fmt="json", stream=stream)
    yield stream
    logging.getLogger().setLevel(root_level)


def debug_lines(stream: io.StringIO, logger: str) -> list[str]:
    structlog.get_logger(logger).debug("detail", n=1)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    stream.seek(0)
    stream.truncate()
    return [line["event"] for line in lines if line.get("logger") == logger and line["level"] == "debug"]


def setting(level: str, clock: SimulatedClock, secs: int = 0) -> LoggerLevel:
    """As nimbus stores it: expiry in epoch ms on nimbus's clock (the same clock here)."""
    return LoggerLevel(level, secs, int(clock.time() * 1000) + secs * 1000 if secs else 0)


def test_debug_lines_appear_while_set_and_stop_when_the_timeout_passes(output: io.StringIO) -> None:
    clock = SimulatedClock()
    overrides = LogLevelOverrides(clock)
    assert debug_lines(output, "loglevels.a") == []
    overrides.apply(LoggerLevels({"loglevels.a": setting("DEBUG", clock, secs=30)}))
    assert debug_lines(output, "loglevels.a") == ["detail"]
    assert debug_lines(output, "loglevels.other") == [], "only the named logger"
    clock.advance(29.9)
    assert debug_lines(output, "loglevels.a") == ["detail"]
    clock.advance(0.1)
    assert debug_lines(output, "loglevels.a") == []
    assert logging.getLogger("loglevels.a").level == logging.NOTSET, "back to what it was: inheriting"
    assert clock.pending() == 0, "no timer left once nothing can expire"


def test_removal_and_updates_put_back_the_level_from_before_the_first_change(output: io.StringIO) -> None:
    clock = SimulatedClock()
    overrides = LogLevelOverrides(clock)
    logging.getLogger("loglevels.b").setLevel(logging.WARNING)
    overrides.apply(LoggerLevels({"loglevels.b": setting("DEBUG", clock)}))
    overrides.apply(LoggerLevels({"loglevels.b": setting("ERROR", clock)}))
    assert logging.getLogger("loglevels.b").level == logging.ERROR
    overrides.apply(LoggerLevels({}))
    assert logging.getLogger("loglevels.b").level == logging.WARNING
    overrides.apply(LoggerLevels({"loglevels.b": setting("TRACE", clock)}))
    overrides.apply(None)  # the topology's node deleted
    assert logging.getLogger("loglevels.b").level == logging.WARNING


def test_root_is_storms_root_logger_in_any_case(output: io.StringIO) -> None:
    clock = SimulatedClock()
    overrides = LogLevelOverrides(clock)
    overrides.apply(LoggerLevels({"root": setting("DEBUG", clock, secs=5)}))
    assert logging.getLogger().level == logging.DEBUG
    assert debug_lines(output, "loglevels.anything") == ["detail"]
    overrides.apply(LoggerLevels({"ROOT": setting("DEBUG", clock, secs=10)}))  # same logger, later expiry
    clock.advance(5)
    assert logging.getLogger().level == logging.DEBUG
    clock.advance(5)
    assert logging.getLogger().level == logging.INFO


def test_an_expired_setting_is_not_applied_and_each_expiry_is_its_own() -> None:
    clock = SimulatedClock()
    overrides = LogLevelOverrides(clock)
    expired = LoggerLevel("DEBUG", 1, int(clock.time() * 1000) - 1)
    overrides.apply(LoggerLevels({"loglevels.c": expired, "loglevels.d": setting("DEBUG", clock, secs=10),
                                  "loglevels.e": setting("INFO", clock, secs=20)}))
    levels = lambda: [logging.getLogger(f"loglevels.{n}").level for n in "cde"]  # noqa: E731
    assert levels() == [logging.NOTSET, logging.DEBUG, logging.INFO]
    clock.advance(10)
    assert levels() == [logging.NOTSET, logging.NOTSET, logging.INFO]
    clock.advance(10)
    assert levels() == [logging.NOTSET] * 3


def test_storms_setting_syntax_and_level_names() -> None:
    assert parse_setting("ROOT=DEBUG") == ("ROOT", "DEBUG", 0)
    assert parse_setting("my.module=warn:60") == ("my.module", "WARN", 60)
    assert level_number("fatal") == logging.CRITICAL and level_number("TRACE") < logging.DEBUG
    for bad, problem in (("ROOT", "LOGGER=LEVEL"), ("=DEBUG", "LOGGER=LEVEL"), ("a=b=DEBUG", "LOGGER=LEVEL"),
                         ("a=LOUD", "unknown log level 'LOUD'; use one of ALL, TRACE, DEBUG"),
                         ("a=DEBUG:-1", "whole seconds"), ("a=DEBUG:soon", "whole seconds")):
        with pytest.raises(ValueError, match=problem):
            parse_setting(bad)
