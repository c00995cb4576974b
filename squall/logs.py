"""Logging, configured once per process: structlog for our code, stdlib loggers routed through it.

JSON lines (ISO UTC time, level, event, logger, bound context such as daemon, topology id, worker,
task) when the output is not a terminal, readable console lines when it is. kazoo, thriftpy2 and
py4j log through the stdlib and come out in the same format.
"""

from __future__ import annotations

import logging
import sys
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


def configure_logging(daemon: str | None = None, *, level: str = "INFO", fmt: str = "auto",
                      stream: TextIO | None = None, **context: Any) -> None:
    """Set up logging for this process; call again to reconfigure (e.g. in tests).

    ``fmt`` is ``json``, ``console`` or ``auto`` (console on a TTY). ``daemon`` and ``context`` are
    bound to every line logged by this process, including the stdlib loggers.
    """
    stream = stream or sys.stderr
    if fmt == "auto":
        fmt = "console" if stream.isatty() else "json"
    if fmt not in ("json", "console"):
        raise ValueError(f"log format must be json, console or auto, not {fmt!r}")
    renderer: Any = (structlog.processors.JSONRenderer() if fmt == "json"
                     else structlog.dev.ConsoleRenderer(colors=stream.isatty()))
    final = [structlog.processors.dict_tracebacks] if fmt == "json" else []

    handler = logging.StreamHandler(stream)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*_SHARED, structlog.stdlib.ExtraAdder()],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *final, renderer],
    ))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
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
