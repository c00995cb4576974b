"""Logging, configured once per process: structlog for our code, stdlib loggers routed through it.

JSON lines (ISO UTC time, level, event, logger, bound context such as daemon, topology id, worker,
task) when the output is not a terminal, readable lines when it is. kazoo, thriftpy2 and
py4j log through the stdlib and come out in the same format. A daemon also writes its lines to its log file
(:class:`DaemonLogFile`, ``<storm.log.dir>/nimbus.log``), which its host's logviewer serves.

Files keep JSON lines, for machines; every view for people (a terminal, ``storm logs``, ``storm local``, the
logviewer's page) renders a record with :func:`readable`, so a line reads the same wherever it is shown::

    2024-05-01T12:00:00.123Z INFO  nimbus.submission  topology submitted  topology_id=wc-1-1714564800 daemon=nimbus
"""

from __future__ import annotations

import fcntl
import json
import logging
import logging.handlers
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import structlog

_SHARED: list[Any] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    structlog.processors.StackInfoRenderer(),
]

#: Chatty third-party loggers, held at WARNING unless our level is DEBUG.
_NOISY = ("kazoo", "thriftpy2", "py4j", "urllib3", "docker")

#: A daemon's log file rolls when it reaches this size, and this many rolled files are kept (Storm's
#: cluster.xml: 100 MB, nine files); Storm has no config key for them, nor does Squall.
DAEMON_LOG_BYTES = 100 << 20
DAEMON_LOG_BACKUPS = 9


class DaemonLogFile(logging.handlers.RotatingFileHandler):
    """A daemon's log file, rolled by size as Storm's are: ``nimbus.log`` becomes ``nimbus.log.1`` (the older ones
    ``.2`` … up to ``backups``, the oldest dropped) once it holds ``max_bytes``; so a file is at most ``max_bytes``
    and one line, and the daemon's log on disk is bounded::

        logging.getLogger().addHandler(DaemonLogFile(Path("/var/log/squall/nimbus.log")))

    Several processes may write one file (a dev cluster's supervisors share their host's ``supervisor.log``): each
    appends whole lines, follows a file another one rolled, and rolls only under a lock on the directory, once.
    """

    def __init__(self, path: Path, *, max_bytes: int = DAEMON_LOG_BYTES, backups: int = DAEMON_LOG_BACKUPS) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        super().__init__(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")

    def shouldRollover(self, record: logging.LogRecord) -> bool:
        self._follow()
        return self._size() >= self.maxBytes

    def doRollover(self) -> None:
        directory = os.open(Path(self.baseFilename).parent, os.O_RDONLY)
        try:
            fcntl.flock(directory, fcntl.LOCK_EX)
            if not self._follow() or self._size() >= self.maxBytes:
                super().doRollover()
        finally:
            os.close(directory)

    def _follow(self) -> bool:
        """Reopen the file when another process rolled it (the name is another file now, or none); whether it did."""
        if self.stream is None:
            self.stream = self._open()
        try:
            same = os.stat(self.baseFilename).st_ino == os.fstat(self.stream.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            self.stream.close()
            self.stream = self._open()
        return not same

    def _size(self) -> int:
        assert self.stream is not None, "_follow opens the file first"
        return os.fstat(self.stream.fileno()).st_size


#: A record's keys shown in a readable line's own places; every other key is context, shown as ``key=value``.
_PLACED = ("timestamp", "level", "logger", "event", "exception", "stack")


def readable(record: Mapping[str, Any]) -> str:
    """One log record (a parsed JSON line, or an event dict on its way out) as a person reads it: time, level,
    logger, message, then the context fields; an exception or stack follows on the next lines, as Python prints
    it. Pure, so every human view renders alike::

        >>> readable({"event": "task started", "level": "info", "logger": "worker.executor", "task": 7,
        ...           "timestamp": "2024-05-01T12:00:00.123456Z", "component": "split count"})
        '2024-05-01T12:00:00.123Z INFO  worker.executor  task started  task=7 component="split count"'
    """
    stamp = str(record.get("timestamp", ""))
    if len(stamp) == 27 and stamp.endswith("Z"):  # ISO with microseconds: milliseconds are enough to read
        stamp = stamp[:23] + "Z"
    head = [
        stamp,
        f"{str(record.get('level', '')).upper():<5}",
        str(record.get("logger", "")),
        f" {record.get('event', '')}",
    ]
    context = " ".join(f"{key}={_value(value)}" for key, value in record.items() if key not in _PLACED)
    line = " ".join(part for part in head if part) + (f"  {context}" if context else "")
    trailer = [text for key in ("stack", "exception") if (text := _trace(record.get(key)))]
    return "\n".join([line, *trailer])


def _value(value: Any) -> str:
    """A context value: a plain word as it is, anything else as JSON (quoted, so spaces cannot mislead)."""
    if isinstance(value, str) and value and not any(c.isspace() or c in '"=' for c in value):
        return value
    return json.dumps(value, default=str, ensure_ascii=False)


def _trace(value: Any) -> str:
    """A record's exception or stack as text: as given (the console's), or from structlog's dict tracebacks (the
    JSON files'), innermost cause first, as Python prints a chain."""
    if not value:
        return ""
    if not isinstance(value, list):
        return str(value).rstrip("\n")
    if not all(isinstance(stack, Mapping) for stack in value):
        return json.dumps(value)
    text = ""
    for stack in reversed(value):  # the raised exception first, then what caused it
        frames = [
            f'  File "{f.get("filename")}", line {f.get("lineno")}, in {f.get("name")}'
            for f in stack.get("frames", [])
            if isinstance(f, Mapping)
        ]
        message = f"{stack.get('exc_type')}: {stack['exc_value']}" if stack.get("exc_value") else stack.get("exc_type")
        text += "\n".join(["Traceback (most recent call last):", *frames, str(message)])
        if stack.get("is_cause") is not None and stack is not value[0]:
            text += (
                "\n\nThe above exception was the direct cause of the following exception:\n\n"
                if stack["is_cause"]
                else "\n\nDuring handling of the above exception, another exception occurred:\n\n"
            )
    return text


def readable_line(line: str) -> str:
    """A line of a log file as :func:`readable` shows it; a line that is no JSON record (a user's print, a
    traceback, a half line) as it is."""
    stripped = line.strip()
    if not stripped.startswith("{"):
        return line
    try:
        record = json.loads(stripped)
    except ValueError:
        return line
    return readable(record) if isinstance(record, dict) and "event" in record else line


def readable_text(text: str) -> str:
    """Every line of ``text`` (a log file's, or part of one) through :func:`readable_line`, line ends kept."""
    return "".join(
        readable_line(line[:-1]) + "\n" if line.endswith("\n") else readable_line(line)
        for line in text.splitlines(keepends=True)
    )


def _render_readable(_logger: Any, _method: str, event_dict: dict[str, Any]) -> str:
    """structlog's last processor for a readable view: :func:`readable` of the event, its exception formatted."""
    return readable(structlog.processors.format_exc_info(_logger, _method, event_dict))


def _formatter(fmt: str) -> logging.Formatter:
    """The stdlib formatter rendering every line, ours and the stdlib loggers', as ``fmt`` (json, console)."""
    final = (
        [structlog.processors.dict_tracebacks, structlog.processors.JSONRenderer()]
        if fmt == "json"
        else [_render_readable]
    )
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*_SHARED, structlog.stdlib.ExtraAdder()],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *final],
    )


def configure_logging(
    daemon: str | None = None,
    *,
    level: str = "INFO",
    fmt: str = "auto",
    stream: TextIO | None = None,
    log_file: Path | None = None,
    **context: Any,
) -> None:
    """Set up logging for this process; call again to reconfigure (e.g. in tests).

    ``fmt`` is ``json``, ``console`` (:func:`readable` lines) or ``auto`` (console on a TTY). ``daemon`` and
    ``context`` are bound to every line logged by this process, including the stdlib loggers. With ``log_file``
    every line also goes to that :class:`DaemonLogFile` (JSON unless ``fmt`` is ``console``), and only there when
    ``stream`` already is that file (a dev cluster sends a daemon's output to its log), so no line is written twice.
    """
    stream = stream or sys.stderr
    if fmt not in ("json", "console", "auto"):
        raise ValueError(f"log format must be json, console or auto, not {fmt!r}")
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    shown = ("console" if stream.isatty() else "json") if fmt == "auto" else fmt
    handlers: list[logging.Handler] = []
    if log_file is not None:
        handlers.append(DaemonLogFile(log_file))
        handlers[0].setFormatter(_formatter("console" if fmt == "console" else "json"))
    if log_file is None or not _is_file(stream, log_file):
        handlers.append(logging.StreamHandler(stream))
        handlers[-1].setFormatter(_formatter(shown))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(numeric)
    for name in _NOISY:
        logging.getLogger(name).setLevel(numeric if numeric <= logging.DEBUG else max(numeric, logging.WARNING))

    structlog.configure(
        processors=[structlog.stdlib.filter_by_level, *_SHARED, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    structlog.contextvars.clear_contextvars()
    bound = {"daemon": daemon, **context} if daemon else context
    if bound:
        structlog.contextvars.bind_contextvars(**bound)


def _is_file(stream: TextIO, path: Path) -> bool:
    """Whether ``stream`` writes to the file ``path``."""
    try:
        mine, theirs = os.fstat(stream.fileno()), os.stat(path)
    except (OSError, ValueError):  # no descriptor (a StringIO), or no such file yet
        return False
    return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)


def bind(**context: Any) -> None:
    """Add context (topology_id, worker, task…) to every later line from this thread or task."""
    structlog.contextvars.bind_contextvars(**context)
