"""Log lines as an operator sees them: JSON with context, stdlib loggers included."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import datetime

import pytest
import structlog

from squall.logs import bind, configure_logging


@pytest.fixture(autouse=True)
def reset_logging() -> Iterator[None]:
    yield
    structlog.contextvars.clear_contextvars()
    structlog.reset_defaults()
    for handler in list(logging.getLogger().handlers):
        logging.getLogger().removeHandler(handler)


def lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_time_level_event_and_bound_context() -> None:
    out = io.StringIO()
    configure_logging("nimbus", fmt="json", stream=out)
    bind(topology_id="wc-1-1700000000", task=7)
    structlog.get_logger("squall.test").info("task started", port=6700)

    (line,) = lines(out)
    assert line["event"] == "task started"
    assert line["level"] == "info"
    assert line["daemon"] == "nimbus"
    assert line["topology_id"] == "wc-1-1700000000"
    assert line["task"] == 7 and line["port"] == 6700
    assert line["logger"] == "squall.test"
    stamp = datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00"))
    assert stamp.utcoffset().total_seconds() == 0


def test_stdlib_loggers_come_out_as_json_with_context() -> None:
    out = io.StringIO()
    configure_logging("supervisor", fmt="json", stream=out)
    logging.getLogger("kazoo.client").warning("Connection dropped: %s", "socket closed")

    (line,) = lines(out)
    assert line["event"] == "Connection dropped: socket closed"
    assert line["level"] == "warning"
    assert line["logger"] == "kazoo.client"
    assert line["daemon"] == "supervisor"


def test_level_filters_and_noisy_libraries_are_held_at_warning() -> None:
    out = io.StringIO()
    configure_logging("worker", fmt="json", stream=out, level="INFO")
    log = structlog.get_logger("squall.test")
    log.debug("hidden")
    logging.getLogger("kazoo.protocol").info("chatty")
    log.info("shown")
    assert [line["event"] for line in lines(out)] == ["shown"]


def test_exceptions_are_structured_in_json() -> None:
    out = io.StringIO()
    configure_logging("nimbus", fmt="json", stream=out)
    try:
        raise ValueError("bad topology")
    except ValueError:
        structlog.get_logger("squall.test").exception("submit failed")
    (line,) = lines(out)
    assert line["event"] == "submit failed"
    assert line["exception"][0]["exc_type"] == "ValueError"
    assert line["exception"][0]["exc_value"] == "bad topology"


def test_console_format_is_human_readable() -> None:
    out = io.StringIO()
    configure_logging("nimbus", fmt="console", stream=out)
    structlog.get_logger("squall.test").info("leader elected", host="n1")
    text = out.getvalue()
    assert "leader elected" in text and "host=n1" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_bad_format_or_level_is_refused() -> None:
    with pytest.raises(ValueError, match="log format"):
        configure_logging(fmt="xml")
    with pytest.raises(ValueError, match="unknown log level"):
        configure_logging(fmt="json", level="LOUD")
