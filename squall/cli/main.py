"""``storm``'s parser and dispatch, and the verbs that run daemons on this machine.

``storm [--config FILE] [-c key=value ...] COMMAND [args] [--config FILE] [-c key=value ...]``; the conf
every command sees is built-in defaults < storm.yaml < ``-c`` overrides (see :mod:`squall.core.config`).
Storm's and JStorm's habits Squall cannot honour are refused first (:mod:`squall.cli.habits`).
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import signal
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog
from thriftpy2.thrift import TApplicationException
from thriftpy2.transport import TTransportException

from squall.cli import habits
from squall.cli.operate import add_arguments as operator_commands
from squall.cli.options import CommandLine, positive
from squall.compat.streamparse_project import is_project, source_path
from squall.core.config.validation import ConfigError
from squall.core.entry import interrupt, load_or_exit, warn_on_stderr
from squall.core.extras import MissingExtra, require
from squall.core.logs import configure_logging
from squall.core.nimbus_client import NoTlsListener
from squall.core.thrift import storm
from squall.core.thrift.client import NimbusUnavailable
from squall.dev.cluster import run_dev_cluster, stop_dev_cluster
from squall.dev.sparkconnect import DEFAULT_PORT, server_command
from squall.dev.zookeeper import LocalZooKeeper, ZooKeeperUnavailable

log = structlog.get_logger(__name__)

Command = Callable[[Mapping[str, Any], argparse.Namespace], int]


def dev_zookeeper(conf: Mapping[str, Any], _args: argparse.Namespace) -> int:
    """Run a standalone ZooKeeper in the foreground until Ctrl-C (Storm's ``storm dev-zookeeper``)."""
    data_dir = Path(conf["storm.local.dir"]) / "dev-zookeeper"
    data_dir.mkdir(parents=True, exist_ok=True)
    server = LocalZooKeeper(data_dir, conf["storm.zookeeper.port"], host="127.0.0.1")
    signal.signal(signal.SIGTERM, interrupt)
    try:
        server.start()
        print(f"ZooKeeper is serving on {server.connect_string} (data in {data_dir}); Ctrl-C stops it", flush=True)
        code = server.wait()
        log.error("zookeeper exited on its own", code=code)
        return code or 1
    except KeyboardInterrupt:
        return 0
    except ZooKeeperUnavailable as exc:
        print(f"storm dev-zookeeper: {exc}", file=sys.stderr)
        return 1
    finally:
        server.stop()


def dev_cluster(conf: Mapping[str, Any], args: argparse.Namespace) -> int:
    """``storm dev-cluster [--supervisors N]`` in the foreground, or ``storm dev-cluster stop``."""
    if args.action == "stop":
        return stop_dev_cluster(conf)
    require("ui", "the dev cluster (its UI and logviewer)")
    signal.signal(signal.SIGTERM, interrupt)
    return run_dev_cluster(conf, args.supervisors)


def _daemon(module: str, needs_extra: str | None = None) -> Command:
    """Daemons are their own packages (``python -m nimbus``): the CLI execs them rather than running them in-process,
    once the optional stack a daemon runs on (``needs_extra``) is known to be installed."""

    def run(_conf: Mapping[str, Any], args: argparse.Namespace) -> int:
        if needs_extra is not None:
            require(needs_extra, f"the {module} daemon")
        argv = [sys.executable, "-m", module, *(["--config", args.config] if args.config else [])]
        for override in args.overrides:
            argv += ["-c", override]
        os.execv(sys.executable, argv)
        return 1  # not reached

    return run


def spark_connect(conf: Mapping[str, Any], args: argparse.Namespace) -> int:
    """``storm spark-connect [--port N] [--master M]``: this host's Spark Connect server in the foreground
    (see :mod:`squall.dev.sparkconnect`); the conf's ``spark.*`` keys are its settings."""
    argv = server_command(args.port, args.master, conf)
    print(f"Spark Connect server starting: spark.remote is sc://localhost:{args.port}; Ctrl-C stops it", flush=True)
    os.execv(argv[0], argv)
    return 1  # not reached


def local(_conf: Mapping[str, Any], args: argparse.Namespace) -> int:
    """``storm local FILE [--local-ttl N]``: the topology in one process (see :mod:`squall.cli.local`).

    FILE may be a streamparse project directory: its ``src/`` then goes first on the PYTHONPATH that the
    shell subprocesses running its components inherit, as a worker on a cluster gives them the package's
    ``resources/``."""
    argv = [sys.executable, "-m", "squall.cli.local", *(["--config", args.config] if args.config else [])]
    for override in args.overrides:
        argv += ["-c", override]
    env = dict(os.environ)
    if (project := next((arg for arg in args.rest if is_project(arg)), None)) is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source_path(project)), env.get("PYTHONPATH")]))
    os.execve(sys.executable, [*argv, *args.rest], env)
    return 1  # not reached


#: Verbs that exec another entry point, which loads the conf (and warns about it) itself.
HANDS_OVER = {"nimbus", "supervisor", "ui", "logviewer", "local"}

COMMANDS: dict[str, tuple[Command, str]] = {
    "dev-zookeeper": (dev_zookeeper, "run a standalone ZooKeeper for development (port: storm.zookeeper.port)"),
    "dev-cluster": (
        dev_cluster,
        "run ZooKeeper, nimbus, supervisors, the UI and the logviewer on this machine until "
        "Ctrl-C; "
        "`storm dev-cluster stop` stops it from another shell",
    ),
    "nimbus": (_daemon("nimbus"), "run the nimbus daemon in the foreground"),
    "supervisor": (_daemon("supervisor"), "run the supervisor daemon in the foreground (its workers outlive it)"),
    "ui": (
        _daemon("ui", "ui"),
        "run the UI daemon in the foreground: the UI's pages (/) and Storm's UI REST API "
        "(/api/v1/...) on ui.host:ui.port",
    ),
    "logviewer": (
        _daemon("logviewer", "ui"),
        "run the logviewer daemon in the foreground: this host's worker and "
        "daemon logs over HTTP on logviewer.host:logviewer.port, where the UI's "
        "log links point",
    ),
    "spark-connect": (
        spark_connect,
        "run a Spark Connect server on this host for Spark bolts (spark.remote) until Ctrl-C",
    ),
    "local": (
        local,
        "run a topology file (or a streamparse project) in this process for development: "
        "storm local FILE|PROJECT [--local-ttl N]",
    ),
}


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Command]]:
    parser = CommandLine(
        prog="storm", description="Squall: a JStorm-style real-time cluster.", shared=[habits.refused_options()]
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    runs = {name: run for name, (run, _) in COMMANDS.items()}
    for name, (_, help_text) in COMMANDS.items():
        sub = commands.add_parser(name, help=help_text, description=help_text)
        if name == "local":
            sub.add_argument("rest", nargs=argparse.REMAINDER, help="FILE|PROJECT [--local-ttl N] [--topology NAME]")
        elif name == "spark-connect":
            sub.add_argument(
                "--port", type=positive, default=DEFAULT_PORT, help=f"the port it serves on (default {DEFAULT_PORT})"
            )
            sub.add_argument("--master", default="local[*]", help="where its jobs run (default local[*])")
        elif name == "dev-cluster":
            sub.add_argument(
                "action",
                nargs="?",
                choices=["start", "stop"],
                default="start",
                help="stop: stop the dev cluster running from this storm.local.dir",
            )
            sub.add_argument(
                "--supervisors",
                type=positive,
                default=2,
                metavar="N",
                help="supervisors to start, each with len(supervisor.slots.ports) slots (default 2)",
            )
            sub.add_argument(
                "--json",
                action="store_true",
                help="log JSON lines, for tools (default: readable lines, as a daemon that dies is shown)",
            )
    runs.update(operator_commands(commands))
    runs["help"] = _help(parser, commands)
    commands.add_parser("help", help="this help, or a command's: storm help COMMAND").add_argument(
        "verb", nargs="?", metavar="COMMAND", help="the command to explain (default: list the commands)"
    )
    habits.add_refused_verbs(commands)
    return parser, runs


def _help(parser: argparse.ArgumentParser, commands: argparse._SubParsersAction) -> Command:
    """``storm help [COMMAND]`` (JStorm's and Storm's form of ``--help``)."""

    def run(_conf: Mapping[str, Any], args: argparse.Namespace) -> int:
        known = [name for name in commands.choices if name not in habits.NO_SUCH_VERB]
        if args.verb is not None and args.verb not in known:
            print(
                f"storm help: {habits.NO_SUCH_VERB.get(args.verb) or unknown_verb([args.verb], known)}", file=sys.stderr
            )
            return 2
        print((commands.choices[args.verb] if args.verb else parser).format_help(), end="")
        return 0

    return run


#: Verbs that run until stopped and log as daemons do; the others are one-shot commands whose output is what
#: they print, so their logging shows warnings and errors only (unless squall.log.level asks for DEBUG).
RUNS_UNTIL_STOPPED = {"dev-zookeeper", "dev-cluster", "spark-connect", *HANDS_OVER}

#: What to do next about nimbus's typed refusals whose message alone does not say: Storm's bare ones, the name
#: (NotAliveException) or "topology 'wc' is already alive".
NEXT_STEP = {
    "NotAliveException": "no topology of that name is running (storm list shows those that are)",
    "AlreadyAliveException": "submit it under another --name, hot deploy over it with --replace, or storm kill it "
    "first",
}


def _next_step(exc: Any) -> str:
    """``": what to do"`` after a bare refusal of nimbus's, else ``""`` (its message says it already)."""
    kind = type(exc).__name__
    bare = (
        " " not in exc.msg
        if kind == "NotAliveException"
        else exc.msg.endswith("is already alive")
        if kind == "AlreadyAliveException"
        else False
    )
    return f": {NEXT_STEP[kind]}" if bare else ""


#: Exit status of a command whose output pipe was closed (``storm list | head -1``), as SIGPIPE's.
BROKEN_PIPE = 128 + signal.SIGPIPE


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """``"; did you mean list?"`` for a word close to one of ``choices``, else ``""``."""
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def unknown_verb(argv: Sequence[str], verbs: Sequence[str], refused: Collection[str] = ()) -> str | None:
    """The line refusing a command line whose first word is no verb (``storm lsit``), naming the closest one;
    None when the verb is known, one of Storm's ``refused`` ones (:mod:`squall.cli.habits` says why), or missing
    (argparse says so).

        >>> unknown_verb(["-c", "a=1", "lsit"], ["list", "kill"])
        "unknown command 'lsit'; did you mean list? (storm help lists the commands)"
    """
    words = iter(argv)
    for word in words:
        if word in ("-c", "--config", *habits.NO_SUCH_OPTION):  # options that take the next word
            next(words, None)
        elif not word.startswith("-"):
            return (
                None
                if word in verbs or word in refused
                else f"unknown command {word!r}{did_you_mean(word, verbs)} (storm help lists the commands)"
            )
    return None


def _verbs(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def _unrecognized(verb: argparse.ArgumentParser, command: str, unparsed: Sequence[str]) -> str:
    """The line refusing arguments ``command`` does not take, naming the option closest to the first."""
    options = [option for action in verb._actions for option in action.option_strings]
    first = next((word.split("=", 1)[0] for word in unparsed if word.startswith("-")), None)
    hint = did_you_mean(first, options) if first else ""
    return f"unrecognized arguments: {' '.join(unparsed)}{hint} (storm help {command})"


def _log_format(args: argparse.Namespace, fmt: str) -> str:
    """The dev cluster's terminal is for people whether or not it is a terminal (``storm dev-cluster > out``):
    readable lines unless ``--json`` or the conf says otherwise; the others as the conf says."""
    if args.command != "dev-cluster":
        return fmt
    return "json" if args.json else "console" if fmt == "auto" else fmt


def _log_level(command: str, level: str) -> str:
    if command in RUNS_UNTIL_STOPPED or logging.getLevelName(level.upper()) == logging.DEBUG:
        return level
    return "WARNING" if logging.getLevelName(level.upper()) < logging.WARNING else level


def main(argv: Sequence[str] | None = None) -> int:
    parser, runs = build_parser()
    verbs = _verbs(parser)
    argv = sys.argv[1:] if argv is None else list(argv)
    known = [verb for verb in verbs.choices if verb not in habits.NO_SUCH_VERB]
    if (unknown := unknown_verb(argv, known, habits.NO_SUCH_VERB)) is not None:
        print(f"storm: {unknown}", file=sys.stderr)
        return 2
    args, unparsed = parser.parse_known_args(argv)
    if (refused := habits.refusal(args, unparsed)) is not None:  # first: a habit is named among unknown arguments
        print(f"storm {args.command}: {refused}", file=sys.stderr)
        return 2
    if unparsed:
        print(
            f"storm {args.command}: {_unrecognized(verbs.choices[args.command], args.command, unparsed)}",
            file=sys.stderr,
        )
        return 2
    conf = load_or_exit(args, warn=(lambda _typo: None) if args.command in HANDS_OVER else warn_on_stderr)
    configure_logging(
        args.command,
        level=_log_level(args.command, conf["squall.log.level"]),
        fmt=_log_format(args, conf["squall.log.format"]),
    )
    try:
        code = runs[args.command](conf, args)
        sys.stdout.flush()  # here, where a closed pipe is caught, rather than at exit
        return code
    except ConfigError as exc:
        print(f"storm {args.command}: {exc}", file=sys.stderr)
        return 2
    except MissingExtra as exc:
        print(f"storm {args.command}: {exc}", file=sys.stderr)
    except (
        storm.NotAliveException,
        storm.AlreadyAliveException,
        storm.InvalidTopologyException,
        storm.TopologyAssignException,
        storm.AuthorizationException,
    ) as exc:
        print(f"storm {args.command}: {type(exc).__name__}: {exc.msg}{_next_step(exc)}", file=sys.stderr)
    except TApplicationException as exc:
        print(f"storm {args.command}: nimbus error: {exc.message}", file=sys.stderr)
    except BrokenPipeError:  # the reader went away: nothing to say, and nobody to say it to on stdout
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE
    except NimbusUnavailable as exc:
        nobody = all("Could not connect" in error for error in exc.errors.values())  # not a TLS or protocol error
        print(
            f"storm {args.command}: cannot reach nimbus: {exc}"
            + (
                "; is it running? (storm dev-cluster starts a cluster here; nimbus.seeds says where to look)"
                if nobody
                else ""
            ),
            file=sys.stderr,
        )
    except (NoTlsListener, TTransportException, OSError) as exc:
        print(f"storm {args.command}: cannot reach nimbus: {exc}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
