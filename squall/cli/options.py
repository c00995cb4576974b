"""What every ``storm`` entry point shares: ``--config`` / ``-c``, loading the conf, argument types, and
the foreground-daemon loop used by ``storm nimbus``, ``storm supervisor`` and ``python -m worker``."""

from __future__ import annotations

import argparse
import functools
import json
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import structlog
import yaml

from squall.config import ConfigError, load_config, typo_warnings
from squall.local_state import daemon_log_name, log_dir
from squall.logs import configure_logging

if TYPE_CHECKING:  # workers import this module: keep the topology DSL off their start-up
    from squall.dsl import Topology

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


def warn_on_stderr(line: str) -> None:
    print(f"storm: warning: {line}", file=sys.stderr)


def conf_file_json(path: str | None, warn: Callable[[str], None] = warn_on_stderr) -> str:
    """A YAML (or JSON) conf file as the JSON string nimbus takes (restart, update, rebalance); empty without one.

    A file that cannot be read, or holds no mapping, is a ConfigError naming it; keys that look like typos of
    known ones go to ``warn``.
    """
    if path is None:
        return ""
    try:
        loaded = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read the conf file {path}: {exc}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path} must hold a mapping of config keys")
    for line in typo_warnings(loaded, path):
        warn(line)
    return json.dumps(loaded)


def topology_typos(topology: Topology) -> list[str]:
    """Keys of a topology's conf, and of each component's, that look like typos of known keys (one line each)."""
    thrift, conf = topology.build()
    lines = typo_warnings(conf, f"topology {topology.name} conf")
    for component, spec in sorted({**thrift.spouts, **thrift.bolts}.items()):
        lines += typo_warnings(json.loads(spec.common.json_conf or "{}"), f"component {component} conf")
    return lines


def command_line_overrides(conf: Mapping[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The ``-c key=value`` settings of this command line (parsed and checked by the conf loader)."""
    return {key: conf[key] for key in (o.split("=", 1)[0] for o in args.overrides)}


#: Where the copies of ``--config`` and ``-c`` given after the verb land until :class:`CommandLine` merges them.
_AFTER_VERB = {"config": "config_after_verb", "overrides": "overrides_after_verb"}


def config_options(*, after_verb: bool = False) -> argparse.ArgumentParser:
    """``--config FILE`` and ``-c key=value`` as a parent parser (``parents=[config_options()]``).

    Storm takes both before and after the verb. argparse parses a verb's arguments into a namespace of
    their own and copies it over the top level's, so ``-c`` after the verb would drop those before it:
    with ``after_verb`` the options store under names of their own, absent unless given, for
    :class:`CommandLine` to merge.
    """
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--config", dest=_AFTER_VERB["config"] if after_verb else "config", metavar="FILE",
                        default=argparse.SUPPRESS if after_verb else None,
                        help="storm.yaml to use instead of $STORM_CONF_DIR or ~/.storm")
    parent.add_argument("-c", dest=_AFTER_VERB["overrides"] if after_verb else "overrides", metavar="KEY=VALUE",
                        action="append", default=argparse.SUPPRESS if after_verb else [],
                        help="override a config key (repeatable; the value is parsed as JSON when it parses)")
    return parent


def common_options(prog: str, description: str) -> argparse.ArgumentParser:
    """A parser with ``--config`` and ``-c``: the daemons' and the worker's own entry points (``python -m worker``)."""
    return argparse.ArgumentParser(prog=prog, description=description, parents=[config_options()])


class VerbParser(argparse.ArgumentParser):
    """The parser of one ``storm`` verb: it takes ``--config`` and ``-c`` too, whoever adds the verb."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{**kwargs, "parents": [*kwargs.get("parents", ()), config_options(after_verb=True)]})


class CommandLine(argparse.ArgumentParser):
    """``storm``'s parser: ``--config`` and ``-c`` before the verb and after it, as Storm takes them.

    Every ``-c`` applies, in command-line order (a later one for the same key wins); a ``--config`` after
    the verb wins over one before it. ``shared`` parent parsers go to the top level and every verb alike::

        parser = CommandLine(prog="storm")
        verbs = parser.add_subparsers(dest="command")
        verbs.add_parser("list")        # a VerbParser
        parser.parse_args(["-c", "a=1", "list", "-c", "a=2"]).overrides   # ['a=1', 'a=2']
    """

    def __init__(self, *, shared: Sequence[argparse.ArgumentParser] = (), **kwargs: Any) -> None:
        self._shared = list(shared)
        super().__init__(**{**kwargs, "parents": [*kwargs.get("parents", ()), *shared, config_options()]})

    def add_subparsers(self, **kwargs: Any) -> Any:
        return super().add_subparsers(parser_class=functools.partial(VerbParser, parents=self._shared), **kwargs)

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        after = vars(parsed)
        parsed.overrides = [*parsed.overrides, *after.pop(_AFTER_VERB["overrides"], [])]
        parsed.config = after.pop(_AFTER_VERB["config"], parsed.config)
        return parsed, extras


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
        print(f"storm {name}: cannot write its log {log_file}: {exc.strerror}; set storm.log.dir to a directory "
              "it may write", file=sys.stderr)
        return 2
    for typo in typos:
        log.warning("config key looks mistyped", detail=typo)
    signal.signal(signal.SIGTERM, interrupt)
    try:
        daemon = start(conf)
    except (OSError, ConfigError) as exc:  # a port taken, a bad key file: one line, not a traceback
        print(f"storm {name}: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}",
              file=sys.stderr)
        return 1
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        log.info(f"{name} stopping")
    finally:
        daemon.stop()
    return 0
