"""How every Squall process starts: ``--config`` / ``-c``, loading the conf, and the foreground-daemon loop used
by ``storm nimbus``, ``storm supervisor``, ``storm ui``, ``storm logviewer`` and ``python -m worker``.

The ``storm`` command's own parser (:mod:`squall.cli.options`) builds on these.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import structlog

from squall.core.config.loading import load_config
from squall.core.config.validation import ConfigError
from squall.core.local_state import daemon_log_name, log_dir
from squall.core.logs import configure_logging

log = structlog.get_logger(__name__)


def interrupt(*_: object) -> None:
    """SIGTERM (``docker stop``, ``kill``) ends a foreground daemon the way Ctrl-C does."""
    raise KeyboardInterrupt


def warn_on_stderr(line: str) -> None:
    print(f"storm: warning: {line}", file=sys.stderr)


#: Where the copies of ``--config`` and ``-c`` given after the verb land until the ``storm`` command's parser
#: (:class:`squall.cli.options.CommandLine`) merges them.
AFTER_VERB = {"config": "config_after_verb", "overrides": "overrides_after_verb"}


def config_options(*, after_verb: bool = False) -> argparse.ArgumentParser:
    """``--config FILE`` and ``-c key=value`` as a parent parser (``parents=[config_options()]``).

    Storm takes both before and after the verb. argparse parses a verb's arguments into a namespace of
    their own and copies it over the top level's, so ``-c`` after the verb would drop those before it:
    with ``after_verb`` the options store under names of their own, absent unless given, for
    :class:`squall.cli.options.CommandLine` to merge.
    """
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--config",
        dest=AFTER_VERB["config"] if after_verb else "config",
        metavar="FILE",
        default=argparse.SUPPRESS if after_verb else None,
        help="storm.yaml to use instead of $STORM_CONF_DIR or ~/.storm",
    )
    parent.add_argument(
        "-c",
        dest=AFTER_VERB["overrides"] if after_verb else "overrides",
        metavar="KEY=VALUE",
        action="append",
        default=argparse.SUPPRESS if after_verb else [],
        help="override a config key (repeatable; the value is parsed as JSON when it parses)",
    )
    return parent


def common_options(prog: str, description: str) -> argparse.ArgumentParser:
    """A parser with ``--config`` and ``-c``: the daemons' and the worker's own entry points (``python -m worker``)."""
    return argparse.ArgumentParser(prog=prog, description=description, parents=[config_options()])


def load_or_exit(args: argparse.Namespace, warn: Callable[[str], None] = warn_on_stderr) -> dict[str, Any]:
    """The conf of this command line; a bad one exits 2 with its message. Keys that look like typos of
    known ones go to ``warn``, one line each."""
    try:
        return load_config(args.config, args.overrides, warn=warn)
    except ConfigError as exc:
        print(f"storm: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


class Daemon(Protocol):
    def stop(self) -> None: ...


def run_daemon(name: str, start: Callable[[dict[str, Any]], Daemon], argv: Sequence[str] | None = None) -> int:
    """A daemon's ``main``: config, logging (to stderr and to ``<storm.log.dir>/<name>.log``, which the host's
    logviewer serves), ``start(conf)``, then serve until Ctrl-C or SIGTERM, then stop."""
    args = common_options(f"storm {name}", f"Run the {name} daemon.").parse_args(argv)
    typos: list[str] = []
    conf = load_or_exit(args, warn=typos.append)
    log_file = log_dir(conf) / daemon_log_name(name)
    try:
        configure_logging(name, level=conf["squall.log.level"], fmt=conf["squall.log.format"], log_file=log_file)
    except OSError as exc:
        print(
            f"storm {name}: cannot write its log {log_file}: {exc.strerror}; set storm.log.dir to a directory "
            "it may write",
            file=sys.stderr,
        )
        return 2
    for typo in typos:
        log.warning("config key looks mistyped", detail=typo)
    signal.signal(signal.SIGTERM, interrupt)
    try:
        daemon = start(conf)
    except (OSError, ConfigError) as exc:  # a port taken, a bad key file: one line, not a traceback
        print(f"storm {name}: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}", file=sys.stderr)
        return 1
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        log.info(f"{name} stopping")
    finally:
        daemon.stop()
    return 0
