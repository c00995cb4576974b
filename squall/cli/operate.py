"""Operator commands of ``storm`` that talk to a running cluster: Storm's verbs and output formats.

Each command is ``run(conf, args) -> exit code``; typed Thrift errors become one clear line on
stderr and a non-zero exit (see :func:`squall.cli.main.main`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kazoo.exceptions import NoAuthError

from squall import STORM_VERSION, __version__
from squall.cli import logs, monitor
from squall.cli.habits import RebalancePositionals, zktool_path
from squall.cli.options import (
    conf_file_json,
    non_negative,
    parse_executor,
    positive,
)
from squall.cli.submit import capacity_note, jar, update_topology
from squall.core import loglevels
from squall.core.config.validation import likely_typo
from squall.core.local_state import workers_dir
from squall.core.nimbus_client import nimbus_client
from squall.core.thrift import storm
from squall.core.worker_records import WorkerRecords
from squall.core.zk.client import ZkClient
from squall.dev.cluster import dev_cluster_root

#: Storm 1.x's `storm list` columns, then Squall's Health (so whitespace-split fields keep Storm's positions):
#: "ok", or nimbus's sched_status: "failing: 1 of 2 workers down" while workers keep dying, "running 8 of 99 requested
#: workers: no free slots" while the cluster lacks the slots, "errors: split (12 s ago)" while a component reported
#: errors in the last 30 minutes ("; "-joined, in that order); last the Owner
#: (Storm 2's last column: who submitted it, as its client certificate names it; blank without authentication).
LIST_ROW = "{:<20} {:<10} {:<10} {:<12} {:<12} {:<10} {}"


def list_topologies(conf: Mapping[str, Any], args: argparse.Namespace) -> int:
    """Storm's table of running topologies; ``storm list NAME`` shows only that one (exit 1 if none runs)."""
    with nimbus_client(conf) as nimbus:
        topologies = sorted(nimbus.getClusterInfo().topologies, key=lambda t: t.name)
    if args.name is not None:
        topologies = [t for t in topologies if t.name == args.name]
        if not topologies:
            print(f"storm list: no topology named {args.name!r} is running", file=sys.stderr)
            return 1
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "name": t.name,
                        "id": t.id,
                        "status": t.status,
                        "num_tasks": t.num_tasks,
                        "num_workers": t.num_workers,
                        "uptime_secs": t.uptime_secs,
                        "health": t.sched_status or "ok",
                        "owner": t.owner or None,
                    }
                    for t in topologies
                ]
            )
        )
    elif not topologies:
        print("No topologies running.")
    else:
        header = LIST_ROW.format(
            "Topology_name", "Status", "Num_tasks", "Num_workers", "Uptime_secs", "Health", "Owner"
        )
        print(header)
        print("-" * len(header))
        for t in topologies:
            print(
                LIST_ROW.format(
                    t.name, t.status, t.num_tasks, t.num_workers, t.uptime_secs, t.sched_status or "ok", t.owner or ""
                ).rstrip()
            )
    return 0


def kill(conf: Mapping[str, Any], args: argparse.Namespace) -> int:
    with nimbus_client(conf) as nimbus:
        for name in args.names:
            nimbus.killTopologyWithOpts(name, storm.KillOptions(wait_secs=args.wait))
            print(f"Killed topology: {name}")
    return 0


def by_name(call: str, done: str) -> Any:
    """A command that makes one nimbus call with the topology name, then prints ``done`` (``{name}`` filled)."""

    def run(conf: Mapping[str, Any], args: argparse.Namespace) -> int:
        with nimbus_client(conf) as nimbus:
            getattr(nimbus, call)(args.name)
        print(done.format(name=args.name))
        return 0

    return run


activate = by_name("activate", "Activated topology: {name}")
deactivate = by_name("deactivate", "Deactivated topology: {name}")
complete_upgrade = by_name("completeUpgrade", "Upgrading every remaining worker of {name}")
rollback = by_name("rollbackTopology", "Rolling back {name}")


def rebalance(conf: Mapping[str, Any], args: argparse.Namespace) -> int:
    options = storm.RebalanceOptions(
        wait_secs=args.wait,
        num_workers=args.workers,
        num_executors=dict(args.executors) or None,
        reassign=args.reassign,
        topology_conf_overrides=args.topology_conf,
    )
    with nimbus_client(conf) as nimbus:
        nimbus.rebalance(args.name, options)
        note = capacity_note(nimbus.getClusterInfo(), args.name, args.workers) if args.workers else None
    print(f"Topology {args.name} is rebalancing")
    if note:
        print(note)
    return 0


def get_errors(conf: Mapping[str, Any], args: argparse.Namespace) -> int:
    """Storm's JSON: the latest error of each component."""
    with nimbus_client(conf) as nimbus:
        try:
            info = nimbus.getTopologyInfoByName(args.name)
        except storm.NotAliveException:
            print(json.dumps({"Failure": f"No topologies running with name {args.name}"}))
            return 1
    latest = {
        component: max(errors, key=lambda e: e.error_time_secs).error
        for component, errors in sorted(info.errors.items())
        if errors
    }
    print(json.dumps({"Topology Name": args.name, "Comp-Errors": latest}))
    return 0


def blacklist(conf: Mapping[str, Any], args: argparse.Namespace) -> int:
    """JStorm's ``blacklist add|remove HOST``, plus ``list``: hosts that get no new workers."""
    if (args.action == "list") == bool(args.hosts):
        print("storm blacklist: add and remove take HOST..., list takes none", file=sys.stderr)
        return 2
    with nimbus_client(conf) as nimbus:
        if args.action == "list":
            print("\n".join(nimbus.getBlacklist()) or "No hosts blacklisted.")
            return 0
        for host in args.hosts:
            (nimbus.setHostInBlackList if args.action == "add" else nimbus.removeHostOutBlackList)(host)
            print(
                f"Blacklisted host {host}: nimbus places no new workers there (those running stay; storm blacklist "
                f"remove {host} undoes it)"
                if args.action == "add"
                else f"Removed host {host} from the blacklist: nimbus places new workers there again"
            )
    return 0


def kill_workers(conf: Mapping[str, Any], _args: argparse.Namespace) -> int:
    """Storm's ``kill_workers``: stop this host's workers so their supervisor starts them afresh.

    The workers are those recorded under ``storm.local.dir`` (and under each supervisor of a dev cluster
    started from it); each is marked as stopped on request, signalled by its recorded pid, checked against
    its command line (SIGTERM, SIGKILL after ``supervisor.worker.shutdown.sleep.secs``); its record and mark stay
    for the supervisor, which launches a new worker on the slot at once, with no error report or back-off.
    """
    dirs = [d for d in (workers_dir(conf), *sorted(dev_cluster_root(conf).glob("*/workers"))) if d.is_dir()]
    grace = float(conf["supervisor.worker.shutdown.sleep.secs"])
    killed = 0
    for directory in dirs:
        processes = WorkerRecords(directory)
        for record in processes.records():
            processes.stop_on_request(record, grace)
            killed += 1
            print(f"Killed worker {record.worker_id} of {record.topology_id} on port {record.port} (pid {record.pid})")
    if not killed:
        print(f"No workers to kill under {Path(conf['storm.local.dir']).resolve()}")
    return 0


def _log_setting(text: str) -> tuple[str, str, int]:
    try:
        return loglevels.parse_setting(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def set_log_level(conf: Mapping[str, Any], args: argparse.Namespace) -> int:
    """Storm's ``set_log_level``: logger levels for a running topology's workers, optionally for a while.

    ``-l LOGGER=LEVEL[:TIMEOUT_SECS]`` sets (0 or no timeout: until removed), ``-r LOGGER`` puts a logger
    back as it was; ``ROOT`` is the root logger. See :mod:`squall.core.loglevels`.
    """
    if not args.set and not args.remove:
        print("storm set_log_level: give -l LOGGER=LEVEL[:TIMEOUT_SECS] and/or -r LOGGER", file=sys.stderr)
        return 2
    update, remove = storm.LogLevelAction.UPDATE, storm.LogLevelAction.REMOVE
    named = {
        logger: storm.LogLevel(action=update, target_log_level=level, reset_log_level_timeout_secs=secs)
        for logger, level, secs in args.set
    }
    named.update({logger: storm.LogLevel(action=remove) for logger in args.remove})
    with nimbus_client(conf) as nimbus:
        nimbus.setLogConfig(nimbus.getTopologyId(args.name), storm.LogConfig(named_logger_level=named))
    shown = [f"{logger}={level}" + (f":{secs}" if secs else "") for logger, level, secs in args.set]
    shown += [f"{logger}=REMOVE" for logger in args.remove]
    print(f"Log config {{{', '.join(shown)}}} is sent for topology {args.name}")  # Storm's line
    return 0


def gray_upgrade(conf: Mapping[str, Any], args: argparse.Namespace) -> int:
    """Upgrade the next batch of workers (JStorm's ``gray_upgrade``)."""
    by_count = args.worker_num or args.component
    if not (by_count or args.workers) or (args.workers and by_count):
        print("storm gray_upgrade: give -n N, -p COMPONENT (optionally with -n), or -w HOST:PORT,...", file=sys.stderr)
        return 2
    with nimbus_client(conf) as nimbus:
        nimbus.grayUpgrade(args.name, args.component, args.workers, args.worker_num)
    print(f"Upgrading the next workers of {args.name}")
    return 0


def restart(conf: Mapping[str, Any], args: argparse.Namespace) -> int:
    """Kill and resubmit from the stored code with a new id, the conf file merged in (JStorm's ``restart``)."""
    with nimbus_client(conf) as nimbus:
        nimbus.restart(args.name, conf_file_json(args.conf))
    print(f"Restarted topology: {args.name}")
    return 0


def _show_conf_value(conf: Mapping[str, Any], key: str, command: str) -> int:
    """``KEY: VALUE`` as Storm prints it (a list space-separated, null for none); a key the conf does not hold
    is one line on stderr, naming the known key it looks like a typo of."""
    if key not in conf:
        typo = likely_typo(key)
        print(
            f"storm {command}: {key} is not set"
            + (f"; did you mean {typo}?" if typo else " (not a key Squall knows: set your own in storm.yaml or -c)"),
            file=sys.stderr,
        )
        return 1
    value = conf[key]
    shown = " ".join(map(str, value)) if isinstance(value, list) else "null" if value is None else str(value)
    print(f"{key}: {shown}")
    return 0


def localconfvalue(conf: Mapping[str, Any], args: argparse.Namespace) -> int:
    return _show_conf_value(conf, args.key, args.command)


def remoteconfvalue(conf: Mapping[str, Any], args: argparse.Namespace) -> int:
    with nimbus_client(conf) as nimbus:
        remote = json.loads(nimbus.getNimbusConf())
    return _show_conf_value(remote, args.key, args.command)


def version(_conf: Mapping[str, Any], _args: argparse.Namespace) -> int:
    """Storm's line first (tools such as streamparse read ``Storm x.y.z``), then Squall's own."""
    print(f"Storm {STORM_VERSION}\nSquall {__version__}")
    return 0


def zktool(conf: Mapping[str, Any], args: argparse.Namespace) -> int:
    """Look at (or remove) Squall's ZooKeeper state, values pretty-printed, paths under the root."""
    action, path = zktool_path(args.action, args.path, conf["storm.zookeeper.root"])
    with ZkClient(conf) as zk:
        if not zk.exists(path):
            print(f"storm zktool: no node {conf['storm.zookeeper.root'].rstrip('/')}{path}", file=sys.stderr)
            return 1
        try:
            _zktool(zk, action, path, conf["storm.zookeeper.root"].rstrip("/"))
        except NoAuthError:
            print(
                f"storm zktool {action} {conf['storm.zookeeper.root'].rstrip('/')}{path}: refused by ZooKeeper "
                "(NoAuth). With ZooKeeper auth only the daemons read Squall's nodes: run it with their "
                "storm.zookeeper.auth.scheme and storm.zookeeper.auth.payload (their storm.yaml)",
                file=sys.stderr,
            )
            return 1
    return 0


def _zktool(zk: ZkClient, action: str, path: str, root: str) -> None:
    if action == "ls":
        print("\n".join(zk.children(path)))
    elif action == "get":
        raw, _ = zk.kazoo.get(path)
        print(_pretty(raw))
    elif action == "tree":
        _tree(zk, path, 0)
    elif action == "rm":
        zk.delete(path)
        print(f"removed {root}{path}")


def _pretty(raw: bytes) -> str:
    try:
        return json.dumps(json.loads(raw), indent=2, sort_keys=True)
    except (ValueError, UnicodeDecodeError):
        return raw.decode(errors="replace")


def _tree(zk: ZkClient, path: str, depth: int) -> None:
    print("  " * depth + (path.rsplit("/", 1)[-1] or "/"))
    for child in zk.children(path):
        _tree(zk, f"{path.rstrip('/')}/{child}", depth + 1)


#: The help of the NAME most commands take, and of a config KEY.
TOPOLOGY_NAME = "the topology's name (as storm list shows it)"
CONFIG_KEY = "a config key, e.g. topology.workers"


def add_arguments(commands: argparse._SubParsersAction) -> dict[str, Any]:
    """Register the operator commands on ``storm``'s sub-parsers; returns name → run function."""
    runs: dict[str, Any] = {}

    def command(name: str, run: Any, help_text: str, aliases: tuple[str, ...] = ()) -> argparse.ArgumentParser:
        runs.update(dict.fromkeys([name, *aliases], run))
        return commands.add_parser(name, help=help_text, description=help_text, aliases=list(aliases))

    p = command("jar", jar, "package a topology's code, upload it to nimbus and submit it", aliases=("submit",))
    p.add_argument(
        "source",
        metavar="FILE|PACKAGE|PROJECT",
        help="a .py file or a package directory defining the topology, or a streamparse project directory",
    )
    p.add_argument("args", nargs="*", metavar="ARG", help="arguments for a topology function (JSON when they parse)")
    p.add_argument(
        "--topology",
        default="topology",
        metavar="ATTR",
        help="attribute holding the Topology or a function returning one; in a package, module:attr; in a "
        "streamparse project, NAME of topologies/NAME.py (default: the only one)",
    )
    p.add_argument(
        "-e",
        "--environment",
        metavar="ENV",
        help="streamparse project: the config.json env whose options and serializer to use (default: the only one)",
    )
    p.add_argument("-w", "--workers", type=positive, metavar="N", help="topology.workers (as sparse submit -w)")
    p.add_argument(
        "-a", "--ackers", type=non_negative, metavar="N", help="topology.acker.executors (as sparse submit -a)"
    )
    p.add_argument("--name", help="submit under this name instead of the topology's own")
    p.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="PATH",
        help="another module or package the workers need, or a resources/ directory (the scripts "
        "of shell components) (repeatable)",
    )
    p.add_argument("--inactive", action="store_true", help="submit deactivated (spouts paused)")
    p.add_argument(
        "--replace",
        action="store_true",
        help="hot deploy: replace the running topology of that name (topology.hot.deploy.enable)",
    )
    p.add_argument("--verbose", action="store_true", help="with a load or import error, its full traceback")

    p = command("list", list_topologies, "list running topologies (or only NAME)")
    p.add_argument("name", nargs="?", metavar="NAME", help="show only this topology")
    p.add_argument("--json", action="store_true", help="print JSON instead of Storm's table")
    p = command("kill", kill, "kill topologies (removed after the wait)")
    p.add_argument("names", nargs="+", metavar="NAME", help="the topologies to kill")
    p.add_argument(
        "-w",
        "--wait-time-secs",
        dest="wait",
        type=non_negative,
        help="seconds before removal (default: the topology's message timeout)",
    )
    command("activate", activate, "activate a topology (spouts run)").add_argument("name", help=TOPOLOGY_NAME)
    command("deactivate", deactivate, "deactivate a topology (spouts pause)").add_argument("name", help=TOPOLOGY_NAME)
    p = command("rebalance", rebalance, "re-place a topology, optionally with new worker and task counts")
    p.add_argument("name", help=TOPOLOGY_NAME)
    p.add_argument(
        "-w",
        "--wait-time-secs",
        dest="wait",
        type=non_negative,
        help="seconds before re-placing it (default: the topology's message timeout)",
    )
    p.add_argument("-n", "--num-workers", dest="workers", type=positive, help="new topology.workers")
    p.add_argument(
        "-e",
        "--executor",
        dest="executors",
        type=parse_executor,
        action="append",
        default=[],
        metavar="COMPONENT=N",
        help="new task count of a component (repeatable)",
    )
    p.add_argument("-r", "--reassign", action="store_true", help="also move workers that could stay (JStorm -r)")
    p.add_argument("-t", "--topology-conf", dest="topology_conf", metavar="JSON", help="conf overrides, a JSON object")
    p.add_argument(
        "jstorm",
        nargs="*",
        action=RebalancePositionals,
        metavar="SECS|CONF.yaml",
        help="JStorm's form: the wait (as -w) and a YAML file of conf overrides (as -t)",
    )
    command("get-errors", get_errors, "latest error of each component, as JSON").add_argument(
        "name", help=TOPOLOGY_NAME
    )
    command("localconfvalue", localconfvalue, "a config value as this machine sees it").add_argument(
        "key", help=CONFIG_KEY
    )
    command("remoteconfvalue", remoteconfvalue, "a config value as nimbus sees it").add_argument("key", help=CONFIG_KEY)
    command("version", version, "print the Storm version Squall is compatible with, then Squall's")
    p = command("gray_upgrade", gray_upgrade, "upgrade the next batch of workers of a gray upgrade (JStorm)")
    p.add_argument("name", help=TOPOLOGY_NAME)
    p.add_argument(
        "-n",
        "--num-workers",
        dest="worker_num",
        type=positive,
        default=0,
        help="upgrade N more workers (with -p: at most N of that component's)",
    )
    p.add_argument("-p", "--component", help="upgrade the workers hosting this component")
    p.add_argument(
        "-w",
        "--workers",
        type=lambda text: [w for w in text.split(",") if w],
        metavar="HOST:PORT,...",
        help="upgrade exactly these workers",
    )
    command(
        "complete_upgrade", complete_upgrade, "upgrade every remaining worker of a gray upgrade in one batch"
    ).add_argument("name", help=TOPOLOGY_NAME)
    command("rollback", rollback, "put the old code back on every upgraded worker (JStorm)").add_argument(
        "name", help=TOPOLOGY_NAME
    )
    p = command("restart", restart, "kill and resubmit a topology from its stored code, with a new id (JStorm)")
    p.add_argument("name", help=TOPOLOGY_NAME)
    p.add_argument("conf", nargs="?", metavar="CONF.yaml", help="config to merge into the topology's")
    p = command("update_topology", update_topology, "give a running topology new code and/or conf (JStorm)")
    p.add_argument("name", help=TOPOLOGY_NAME)
    p.add_argument(
        "--jar",
        "-jar",
        metavar="FILE|PACKAGE|PROJECT",
        help="new code: a .py file, a package directory or a streamparse project",
    )
    p.add_argument("--include", action="append", default=[], metavar="PATH", help="more code (repeatable)")
    p.add_argument("--conf", "-conf", metavar="CONF.yaml", help="config to merge into the topology's")
    p = command("set_log_level", set_log_level, "change logger levels in a running topology's workers (Storm)")
    p.add_argument("name", metavar="NAME", help=TOPOLOGY_NAME)
    p.add_argument(
        "-l",
        dest="set",
        type=_log_setting,
        action="append",
        default=[],
        metavar="LOGGER=LEVEL[:TIMEOUT_SECS]",
        help="set a level, for TIMEOUT_SECS if given (repeatable; ROOT is the root logger)",
    )
    p.add_argument(
        "-r",
        dest="remove",
        action="append",
        default=[],
        metavar="LOGGER",
        help="put a logger back as it was (repeatable)",
    )
    command("kill_workers", kill_workers, "kill this host's workers (storm.local.dir); their supervisor restarts them")
    p = command("blacklist", blacklist, "keep new workers off hosts (JStorm): add HOST..., remove HOST..., list")
    p.add_argument(
        "action", choices=["add", "remove", "list"], help="add or remove hosts, or list the blacklisted ones"
    )
    p.add_argument("hosts", nargs="*", metavar="HOST", help="as its supervisor registers it (storm.local.hostname)")
    monitor.add_arguments(
        command(
            "monitor",
            monitor.monitor,
            "a topology's throughput per component, refreshed (Storm's view of one stream with -m)",
        )
    )
    logs.add_arguments(
        command(
            "logs",
            logs.logs,
            "print a topology's worker logs (or a component's workers') through each host's logviewer; -f follows them",
        )
    )
    p = command("zktool", zktool, "inspect Squall's ZooKeeper state (paths relative to storm.zookeeper.root)")
    p.add_argument(
        "action",
        choices=["ls", "get", "tree", "rm", "read", "list", "clean"],
        metavar="{ls,get,tree,rm}",
        help="JStorm's read and list are get and ls",
    )
    p.add_argument("path", nargs="?", default="/", help="a node under storm.zookeeper.root (default: the root)")
    return runs
