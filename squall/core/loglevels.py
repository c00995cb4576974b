"""Dynamic log levels (Storm's ``storm set_log_level``): a topology's logger levels, changed while it runs.

``storm set_log_level NAME -l LOGGER=LEVEL[:TIMEOUT_SECS] -r LOGGER`` reaches nimbus as Storm's
``setLogConfig``; nimbus keeps the result in ``/logconfigs/<topology-id>`` (a
:class:`~squall.core.zk.records.LoggerLevels`, each setting with its expiry time) and every worker of the
topology watches that node and applies it here. Squall's logs are structlog over stdlib logging
(:mod:`squall.core.logs`), and structlog asks the stdlib logger of the same name whether a level is enabled,
so setting a stdlib logger's level is all it takes: ``wordcount=DEBUG`` turns on the debug lines of
components defined in ``wordcount.py`` (a component logs under its module's name), ``ROOT=DEBUG``
everything's. When a setting expires or is removed the logger gets back the level it had before.

Level names are Storm's (log4j's) — ALL, TRACE, DEBUG, INFO, WARN, ERROR, FATAL, OFF — and Python's
WARNING and CRITICAL are accepted too.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

import structlog

from squall.core.clock import Clock, Timer
from squall.core.zk.records import LoggerLevels

log = structlog.get_logger(__name__)

#: Storm's level names (and Python's spellings) → stdlib numeric levels. TRACE sits below DEBUG (kazoo's
#: BLATHER is 5), ALL lets everything through, OFF nothing.
LEVELS: Mapping[str, int] = {
    "ALL": 1,
    "TRACE": 5,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
    "CRITICAL": logging.CRITICAL,
    "OFF": logging.CRITICAL + 10,
}
#: Storm's name for the root logger.
ROOT = "ROOT"


def level_number(name: str) -> int:
    """``"debug"`` → 10; ``ValueError`` naming the known levels for anything else."""
    try:
        return LEVELS[name.upper()]
    except KeyError:
        raise ValueError(f"unknown log level {name!r}; use one of {', '.join(LEVELS)}") from None


def parse_setting(text: str) -> tuple[str, str, int]:
    """Storm's ``-l`` value: ``LOGGER=LEVEL[:TIMEOUT_SECS]`` → (logger, LEVEL, seconds; 0 = no timeout).

    >>> parse_setting("wordcount=debug:30")
    ('wordcount', 'DEBUG', 30)
    """
    logger, sep, rest = text.partition("=")
    level, _, timeout = rest.partition(":")
    if not sep or not logger or "=" in rest:
        raise ValueError(f"expected LOGGER=LEVEL[:TIMEOUT_SECS], e.g. ROOT=DEBUG:30, got {text!r}")
    level_number(level)
    if timeout and not timeout.isdigit():
        raise ValueError(f"the timeout in {text!r} must be whole seconds >= 0")
    return logger, level.upper(), int(timeout or 0)


def canonical(logger: str) -> str:
    """One name per logger: the root logger is ``ROOT`` however it is spelled."""
    return ROOT if logger.upper() == ROOT else logger


def levels_in_force(config: LoggerLevels | None, now_ms: int) -> dict[str, int]:
    """Logger → numeric level for every setting of ``config`` not expired at ``now_ms`` (pure).

    >>> from squall.core.zk.records import LoggerLevel
    >>> levels_in_force(LoggerLevels({"a": LoggerLevel("DEBUG", 30, 5_000), "b": LoggerLevel("WARN")}), 5_000)
    {'b': 30}
    """
    return {
        canonical(name): level_number(setting.level)
        for name, setting in (config.loggers if config else {}).items()
        if not setting.expires_ms or setting.expires_ms > now_ms
    }


def next_expiry_ms(config: LoggerLevels | None, now_ms: int) -> int | None:
    """The earliest expiry still ahead of ``now_ms``, if any (pure)."""
    return min(
        (s.expires_ms for s in (config.loggers if config else {}).values() if s.expires_ms > now_ms), default=None
    )


def _logger(name: str) -> logging.Logger:
    return logging.getLogger() if name == ROOT else logging.getLogger(name)


class LogLevelOverrides:
    """Keeps this process's stdlib loggers at the levels of the latest :class:`LoggerLevels`, reverting each
    logger to its own earlier level when its setting expires (on ``clock``) or is removed.

    Example (a worker does this with a ZooKeeper watch and its real clock)::

        clock = SimulatedClock()
        overrides = LogLevelOverrides(clock)
        expires_ms = int(clock.time() * 1000) + 30_000
        overrides.apply(LoggerLevels({"wordcount": LoggerLevel("DEBUG", 30, expires_ms)}))
        logging.getLogger("wordcount").level   # 10 (DEBUG)
        clock.advance(30)
        logging.getLogger("wordcount").level   # 0 again (NOTSET: as before)
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._config: LoggerLevels | None = None
        self._before: dict[str, int] = {}  # logger → its level before we first changed it
        self._timer: Timer | None = None

    def apply(self, config: LoggerLevels | None) -> None:
        """Follow ``config`` from now on (None: nothing set); a ZooKeeper watch calls this on every change."""
        with self._lock:
            self._config = config
            self._enforce()

    def _expired(self) -> None:
        with self._lock:
            self._enforce()

    def _enforce(self) -> None:
        now_ms = int(self._clock.time() * 1000)
        wanted = levels_in_force(self._config, now_ms)
        for name in sorted(set(self._before) - set(wanted)):
            _logger(name).setLevel(self._before.pop(name))
            log.info("log level reverted", logger_name=name, level=logging.getLevelName(_logger(name).level))
        for name, level in sorted(wanted.items()):
            logger = _logger(name)
            self._before.setdefault(name, logger.level)
            if logger.level != level:
                logger.setLevel(level)
                log.info("log level set", logger_name=name, level=logging.getLevelName(level))
        if self._timer is not None:
            self._timer.cancel()
        due = next_expiry_ms(self._config, now_ms)
        self._timer = self._clock.call_later((due - now_ms) / 1000, self._expired) if due is not None else None
