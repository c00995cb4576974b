"""What every ``storm`` entry point shares: ``--config`` / ``-c``, loading the conf, argument types, and
the foreground-daemon loop used by ``storm nimbus``, ``storm supervisor`` and ``python -m worker``."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import structlog

from squall.config import ConfigError, load_config
from squall.logs import configure_logging

log = structlog.get_logger(__name__)


def interrupt(*_: object) -> None:
    """SIGTERM (``docker stop``, ``kill``) ends a foreground daemon the way Ctrl-C does."""
    raise KeyboardInterrupt


def parse_executor(text: str) -> tuple[str, int]:
    """``-e comp=3`` → ("comp", 3); split at the last ``=`` as Storm does."""
    component, sep, count = text.rpartition("=")
    if not sep or not component or not count.isdigit() or int(count) < 1:
        raise argparse.ArgumentTypeError(f"expected COMPONENT=N with N >= 1, got {text!r}")
    return component, int(count)


def non_negative(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return int(text)


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {text!r}")
    return int(text)


def json_or_text(text: str) -> Any:
    """Topology function arguments, like ``-c`` values: JSON when they parse, else the string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def command_line_overrides(conf: Mapping[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The ``-c key=value`` settings of this command line (parsed and checked by the conf loader)."""
    return {key: conf[key] for key in (o.split("=", 1)[0] for o in args.overrides)}


def common_options(prog: str, description: str) -> argparse.ArgumentParser:
    """``--config`` and ``-c``, shared by ``storm`` and the daemons' own entry points."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--config", metavar="FILE", help="storm.yaml to use instead of $STORM_CONF_DIR or ~/.storm")
    parser.add_argument("-c", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
                        help="override a config key; the value is parsed as JSON when it parses")
    return parser


def load_or_exit(args: argparse.Namespace) -> dict[str, Any]:
    try:
        return load_config(args.config, args.overrides)
    except ConfigError as exc:
        print(f"storm: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


class Daemon(Protocol):
    def stop(self) -> None: ...


def run_daemon(name: str, start: Callable[[dict[str, Any]], Daemon], argv: Sequence[str] | None = None) -> int:
    """A daemon's ``main``: config, logging, ``start(conf)``, then serve until Ctrl-C or SIGTERM, then stop."""
    args = common_options(f"storm {name}", f"Run the {name} daemon.").parse_args(argv)
    conf = load_or_exit(args)
    configure_logging(name, level=conf["squall.log.level"], fmt=conf["squall.log.format"])
    signal.signal(signal.SIGTERM, interrupt)
    daemon = start(conf)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        log.info(f"{name} stopping")
    finally:
        daemon.stop()
    return 0
