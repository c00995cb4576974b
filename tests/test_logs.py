"""Log lines as an operator sees them: JSON with context, stdlib loggers included."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
import structlog

from squall.core.entry import run_daemon
from squall.core.logs import (DAEMON_LOG_BACKUPS, DAEMON_LOG_BYTES, DaemonLogFile, bind, configure_logging, readable,
                         readable_line, readable_text)


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


def test_a_daemon_s_lines_also_go_to_its_log_file_as_json_whatever_its_terminal_shows(tmp_path: Path) -> None:
    out = io.StringIO()
    configure_logging("nimbus", fmt="auto", stream=out, log_file=tmp_path / "logs" / "nimbus.log")
    structlog.get_logger("squall.test").info("leader elected", host="n1")
    logging.getLogger("kazoo.client").warning("Connection dropped")
    written = [json.loads(line) for line in (tmp_path / "logs" / "nimbus.log").read_text().splitlines()]
    assert [(line["event"], line["daemon"]) for line in written] == [("leader elected", "nimbus"),
                                                                     ("Connection dropped", "nimbus")]
    assert [line["event"] for line in lines(out)] == [line["event"] for line in written], "stderr keeps them too"
    configure_logging("nimbus", fmt="console", stream=out, log_file=tmp_path / "logs" / "nimbus.log")
    structlog.get_logger("squall.test").info("console now")
    last = (tmp_path / "logs" / "nimbus.log").read_text().splitlines()[-1]
    assert "console now" in last and "\x1b[" not in last, "console lines in a file, never coloured"


def written_lines(directory: Path, name: str) -> list[str]:
    """Every line of ``name`` and its rolled files, oldest first."""
    files = sorted(directory.glob(f"{name}*"), key=lambda p: -int(p.suffix[1:]) if p.suffix != ".log" else 0)
    return [line for f in files for line in f.read_text().splitlines()]


def test_a_daemon_log_rolls_by_size_and_keeps_a_bounded_number_of_files(tmp_path: Path) -> None:
    handler = DaemonLogFile(tmp_path / "ui.log", max_bytes=1000, backups=2)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log = logging.getLogger("squall.test.rolled")
    log.addHandler(handler)
    try:
        for i in range(500):
            log.warning("line %04d", i)  # 10 bytes each
    finally:
        log.removeHandler(handler)
        handler.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ui.log", "ui.log.1", "ui.log.2"]
    assert all(p.stat().st_size <= 1000 + 10 for p in tmp_path.iterdir()), "a file holds max_bytes and one line"
    kept = written_lines(tmp_path, "ui.log")
    assert kept == [f"line {i:04d}" for i in range(500 - len(kept), 500)] and len(kept) > 200, \
        "the newest lines, in order, none lost between files"
    assert DAEMON_LOG_BYTES == 100 << 20 and DAEMON_LOG_BACKUPS == 9, "Storm's cluster.xml: 100 MB, 9 files"


def test_processes_sharing_a_daemon_log_follow_each_other_s_rolls(tmp_path: Path) -> None:
    """Two supervisors of one host (a dev cluster) write one supervisor.log: a file one rolled is not written to
    by the other, and it is rolled once, not once by each."""
    first, second = (DaemonLogFile(tmp_path / "supervisor.log", max_bytes=100, backups=3) for _ in range(2))
    try:
        for i in range(30):
            for n, handler in enumerate((first, second)):
                handler.handle(logging.makeLogRecord({"msg": f"s{n} {i:03d}"}))  # 7 bytes each
    finally:
        first.close()
        second.close()
    kept = written_lines(tmp_path, "supervisor.log")
    assert kept == [f"s{n} {i:03d}" for i in range(30) for n in (0, 1)][-len(kept):], "in order, none lost"
    assert len(kept) > 40 and sorted(p.name for p in tmp_path.iterdir())[-1] == "supervisor.log.3"
    assert all(p.stat().st_size <= 100 + 7 for p in tmp_path.iterdir()), "each roll filled a file: none twice"


def test_a_daemon_that_cannot_write_its_log_says_which_key_to_set(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a-file").write_text("")
    started: list[dict] = []
    code = run_daemon("ui", started.append, ["-c", f"storm.log.dir={tmp_path / 'a-file'}",
                                             "-c", f"storm.local.dir={tmp_path}"])
    assert (code, started) == (2, [])
    err = capsys.readouterr().err
    assert f"storm ui: cannot write its log {tmp_path / 'a-file' / 'ui.log'}" in err and "set storm.log.dir" in err


def test_a_daemon_whose_output_is_its_log_file_writes_each_line_once(tmp_path: Path) -> None:
    """A dev cluster sends a daemon's output to its log file: its lines must not be written there twice."""
    log_file = tmp_path / "logs" / "nimbus.log"
    log_file.parent.mkdir()
    with open(log_file, "a") as output:
        configure_logging("nimbus", fmt="auto", stream=output, log_file=log_file)
        structlog.get_logger("squall.test").info("leader elected", host="n1")
    assert [json.loads(line)["event"] for line in log_file.read_text().splitlines()] == ["leader elected"]


def test_a_record_reads_as_time_level_logger_message_then_context() -> None:
    """The one rendering of every view for people; lines that are no record pass through as they are."""
    record = {"topology_id": "wc-1-1700000000", "event": "worker launched", "daemon": "supervisor", "level": "info",
              "logger": "supervisor.daemon", "timestamp": "2024-05-01T12:00:00.123456Z", "port": 6700,
              "command": "python -m worker", "tasks": [1, 2]}
    assert readable(record) == ('2024-05-01T12:00:00.123Z INFO  supervisor.daemon  worker launched  '
                                'topology_id=wc-1-1700000000 daemon=supervisor port=6700 command="python -m worker" '
                                'tasks=[1, 2]')
    assert readable_line(json.dumps(record)) == readable(record)
    for line in ("Traceback (most recent call last):", "  print from a bolt", '{"not": "a record"}', "{half a",
                 "[1, 2]", ""):
        assert readable_line(line) == line
    assert readable_text(f"{json.dumps(record)}\nplain\n{{cut") == f"{readable(record)}\nplain\n{{cut"


def test_an_exception_reads_as_python_prints_it_from_the_console_or_a_json_file() -> None:
    def logged(fmt: str) -> str:
        out = io.StringIO()
        configure_logging("nimbus", fmt=fmt, stream=out)
        try:
            try:
                {}["topology"]
            except KeyError as exc:
                raise ValueError("bad topology") from exc
        except ValueError:
            structlog.get_logger("squall.test").exception("submit failed", name="wc")
        return out.getvalue()

    console, stored = logged("console").splitlines(), readable_text(logged("json")).splitlines()
    for shown in (console, stored):
        assert shown[0].endswith(" ERROR squall.test  submit failed  name=wc daemon=nimbus"), shown
        assert shown[1] == "Traceback (most recent call last):" and shown[-1] == "ValueError: bad topology"
        assert "KeyError: 'topology'" in shown and \
            "The above exception was the direct cause of the following exception:" in shown
