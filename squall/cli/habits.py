"""Storm's and JStorm's command-line habits on Squall's ``storm``.

A habit is honoured where that is cheap and cannot be misread: JStorm's ``rebalance NAME SECS CONF.yaml``,
``update_topology -jar/-conf``, ``zktool read/list`` with full paths, ``-c key=a,b`` for a list
(:mod:`squall.core.config`), ``storm help VERB``. Any other is refused before anything runs, in one line naming the
Squall form, exit 2: never argparse's usage noise, and never a wrong action (``kill NAME 10`` must not kill a
topology named ``10``; ``zktool rm NAME`` must not remove some other node).

    >>> refusal(argparse.Namespace(command="kill", names=["wc", "10"], wait=None))
    "'10' looks like JStorm's wait in seconds: storm kill wc -w 10 (a topology named '10': storm kill 10)"
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from typing import Any

from squall.cli.options import conf_file_json
from squall.core.config.validation import ConfigError

_PYTHON_CODE = "Squall packages Python code: add modules and packages with storm jar FILE --include PATH"

#: Verbs of Storm's or JStorm's CLI that Squall has no counterpart for, and what to do instead.
NO_SUCH_VERB: dict[str, str] = {
    "metrics_monitor": "Squall always collects topology metrics: read them with storm monitor NAME "
    "or Thrift getTopologyInfo",
    "blobstore": "Squall has no blob store: nimbus keeps each topology's code versions "
    "(storm jar, storm update_topology --jar)",
    "classpath": f"Squall runs Python, there is no classpath: {_PYTHON_CODE}",
    "drpc": "Squall has no DRPC server",
    "drpc-client": "Squall has no DRPC server",
    "shell": "Squall runs Python topologies directly (storm jar FILE.py); "
    "other languages run as multilang components (Topology.shell_spout, Topology.shell_bolt)",
}

#: Options of Storm's or JStorm's CLI that have no Squall counterpart, and what to do instead.
NO_SUCH_OPTION: dict[str, str] = {
    "--include-jars": _PYTHON_CODE,
    "--exclude-jars": _PYTHON_CODE,
    "--jars": _PYTHON_CODE,
    "--artifacts": f"{_PYTHON_CODE}; libraries come from the workers' Python environment (pip install them there)",
    "--artifactRepositories": f"{_PYTHON_CODE}; libraries come from the workers' Python environment",
}

#: A Java class name as Storm's and JStorm's ``jar`` take it: ``com.example.WordCountTopology``.
_JAVA_CLASS = re.compile(r"^[a-z_$][\w$]*(\.[a-z_$][\w$]*)*\.[A-Z][\w$]*$")

_ZK_JSTORM = {"read": "get", "list": "ls"}  # JStorm's zktool actions with a Squall twin


class _Refused(argparse.Action):
    """An option Squall has no counterpart for: exit 2 with the Squall form, whatever follows it."""

    def __init__(self, option_strings: Sequence[str], dest: str, **_: Any) -> None:
        super().__init__(
            option_strings, dest=argparse.SUPPRESS, nargs="?", default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        parser.exit(2, f"{parser.prog}: {option_string} is not Squall's: {NO_SUCH_OPTION[option_string or '']}\n")


def refused_options() -> argparse.ArgumentParser:
    """A parent parser with the options of :data:`NO_SUCH_OPTION`, hidden from ``--help``, each refused when used."""
    parent = argparse.ArgumentParser(add_help=False)
    for option in NO_SUCH_OPTION:
        parent.add_argument(option, action=_Refused)
    return parent


def add_refused_verbs(verbs: argparse._SubParsersAction) -> None:
    """Register :data:`NO_SUCH_VERB` (not listed by ``storm --help``) so they reach :func:`refusal`."""
    for verb in NO_SUCH_VERB:
        verbs.add_parser(verb, add_help=False).add_argument("rest", nargs=argparse.REMAINDER)


class RebalancePositionals(argparse.Action):
    """JStorm's ``rebalance NAME [SECS] [CONF.yaml]``: the number is the wait (``-w``), the file holds conf
    overrides (``-t``; topology.workers, topology.spout.parallelism …). A later form of either wins."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        if len(values) > 2:
            parser.exit(
                2,
                f"{parser.prog}: JStorm's form takes at most SECS and CONF.yaml after the name, "
                f"got {' '.join(values)}\n",
            )
        for value in values:
            if value.isdigit():
                namespace.wait = int(value)
            elif value.endswith((".prop", ".properties")):
                parser.exit(
                    2,
                    f"{parser.prog}: JStorm's .prop conf files are not read here: give the conf as "
                    f"YAML (CONF.yaml) or as -t JSON\n",
                )
            elif value.endswith((".yaml", ".yml", ".json")):
                try:
                    namespace.topology_conf = conf_file_json(value)
                except ConfigError as exc:
                    parser.exit(2, f"{parser.prog}: {exc}\n")
            else:
                parser.exit(
                    2,
                    f"{parser.prog}: {value!r} is neither a wait in seconds nor a YAML conf file: "
                    "storm rebalance NAME [-w SECS] [-n WORKERS] [-e COMPONENT=N] [-t JSON]\n",
                )


def zktool_path(action: str, path: str, root: str) -> tuple[str, str]:
    """JStorm's ``zktool read|list /root/x`` as Squall's ``get|ls /x``: paths are under ``storm.zookeeper.root``."""
    root = root.rstrip("/")
    if root and (path == root or path.startswith(root + "/")):
        path = path[len(root) :]
    return _ZK_JSTORM.get(action, action), "/" + path.strip("/")


def _jar(args: argparse.Namespace) -> str | None:
    source, first = args.source, (args.args or [None])[0]
    if source.endswith(".jar") or (first is not None and _JAVA_CLASS.match(first)):
        return (
            "Squall runs Python topologies, not a .jar or a Java main class: "
            f"storm {args.command} FILE.py|PACKAGE [ARGS] [--topology ATTR]"
        )
    return None


def _local(args: argparse.Namespace) -> str | None:
    if args.rest and args.rest[0].endswith(".jar"):
        return "Squall runs Python topologies, not a .jar: storm local FILE.py [--local-ttl SECS]"
    return None


def _kill(args: argparse.Namespace) -> str | None:
    if len(args.names) == 2 and args.names[1].isdigit() and args.wait is None:
        name, secs = args.names
        return (
            f"{secs!r} looks like JStorm's wait in seconds: storm kill {name} -w {secs} "
            f"(a topology named {secs!r}: storm kill {secs})"
        )
    return None


def _zktool(args: argparse.Namespace) -> str | None:
    if args.action == "clean":
        return (
            "Squall removes a topology's state itself once it is killed (storm kill NAME); "
            "to remove a node by hand: storm zktool rm PATH"
        )
    if args.action == "rm" and not args.path.startswith("/"):
        return (
            f"rm takes a path under storm.zookeeper.root; JStorm's rm NAME (the assignment backup) is "
            f"storm zktool rm /assignments_bak/{args.path}"
        )
    if args.action == "rm" and not args.path.strip("/"):
        return "rm takes the node to remove: storm zktool rm PATH (not the whole root)"
    return None


_CHECKS: dict[str, Callable[[argparse.Namespace], str | None]] = {
    "jar": _jar,
    "submit": _jar,
    "local": _local,
    "kill": _kill,
    "zktool": _zktool,
}


#: Storm 2's ``rebalance NAME -r '{"comp": {"cpu.pcore.percent": 50}}'``: there ``-r`` takes resource overrides.
STORM_RESOURCES = (
    "-r is JStorm's reassign here (also move workers that could stay); Storm 2's -r JSON of resource "
    "overrides has no counterpart, Squall does not schedule by resources: storm rebalance NAME "
    "[-n WORKERS] [-e COMPONENT=N] [-t JSON]"
)


def refusal(args: argparse.Namespace, unparsed: Sequence[str] = ()) -> str | None:
    """Why this command line cannot run as the user meant it, in one line naming the Squall form; None if it can.
    ``unparsed`` are the words no option took (Storm's forms that argparse cannot place)."""
    if args.command in NO_SUCH_VERB:
        return NO_SUCH_VERB[args.command]
    if args.command == "rebalance" and args.reassign and any(word.startswith("{") for word in unparsed):
        return STORM_RESOURCES
    check = _CHECKS.get(args.command)
    return check(args) if check is not None else None
