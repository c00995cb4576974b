"""Logging, configured once per process: structlog for our code, stdlib loggers routed through it.

JSON lines (ISO UTC time, level, event, logger, bound context such as daemon, topology id, worker,
task) when the output is not a terminal, readable console lines when it is. kazoo, thriftpy2 and
py4j log through the stdlib and come out in the same format. A daemon also writes its lines to its log file
(:class:`DaemonLogFile`, ``<storm.log.dir>/nimbus.log``), which its host's logviewer serves.
"""

from __future__ import annotations

import fcntl
import logging
import logging.handlers
import os
import sys
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

    def shouldRollover(self, record: logging.LogRecord) -> bool:  # noqa: N802 (logging's name)
        self._follow()
        return os.fstat(self.stream.fileno()).st_size >= self.maxBytes

    def doRollover(self) -> None:  # noqa: N802
        directory = os.open(Path(self.baseFilename).parent, os.O_RDONLY)
        try:
            fcntl.flock(directory, fcntl.LOCK_EX)
            if not self._follow() or os.fstat(self.stream.fileno()).st_size >= self.maxBytes:
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


def _formatter(fmt: str, colors: bool) -> logging.Formatter:
    """The stdlib formatter rendering every line, ours and the stdlib loggers', as ``fmt`` (json, console)."""
    renderer: Any = (structlog.processors.JSONRenderer() if fmt == "json"
                     else structlog.dev.ConsoleRenderer(colors=colors))
    final = [structlog.processors.dict_tracebacks] if fmt == "json" else []
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*_SHARED, structlog.stdlib.ExtraAdder()],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *final, renderer],
    )


def configure_logging(daemon: str | None = None, *, level: str = "INFO", fmt: str = "auto",
                      stream: TextIO | None = None, log_file: Path | None = None, **context: Any) -> None:
    """Set up logging for this process; call again to reconfigure (e.g. in tests).

    ``fmt`` is ``json``, ``console`` or ``auto`` (console on a TTY). ``daemon`` and ``context`` are
    bound to every line logged by this process, including the stdlib loggers. With ``log_file`` every line
    also goes to that :class:`DaemonLogFile` (JSON unless ``fmt`` is ``console``; never coloured).
    """
    stream = stream or sys.stderr
    if fmt not in ("json", "console", "auto"):
        raise ValueError(f"log format must be json, console or auto, not {fmt!r}")
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    shown = ("console" if stream.isatty() else "json") if fmt == "auto" else fmt
    handlers: list[logging.Handler] = [logging.StreamHandler(stream)]
    handlers[0].setFormatter(_formatter(shown, colors=stream.isatty()))
    if log_file is not None:
        handlers.append(DaemonLogFile(log_file))
        handlers[1].setFormatter(_formatter("console" if fmt == "console" else "json", colors=False))
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
        processors=[structlog.stdlib.filter_by_level, *_SHARED,
                    structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    structlog.contextvars.clear_contextvars()
    bound = {"daemon": daemon, **context} if daemon else context
    if bound:
        structlog.contextvars.bind_contextvars(**bound)


def bind(**context: Any) -> None:
    """Add context (topology_id, worker, task…) to every later line from this thread or task."""
    structlog.contextvars.bind_contextvars(**context)
