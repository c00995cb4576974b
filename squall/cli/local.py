"""``storm local FILE``: a topology file's topology run in this process for ``--local-ttl`` seconds (local mode,
:class:`squall.dev.local.LocalTopology`), its mistakes told as ``storm jar`` tells them.

    python -m squall.cli.local examples/wordcount.py --local-ttl 10
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import structlog

from squall.cli.options import command_line_overrides, topology_typos
from squall.cli.submitcheck import SubmitCheckError, load_for_submit
from squall.core.entry import common_options, interrupt, load_or_exit, warn_on_stderr
from squall.core.logs import configure_logging
from squall.core.package import RESOURCES
from squall.core.thrift import storm
from squall.dev.local import LocalTopology

log = structlog.get_logger(__name__)


def main(argv: list[str] | None = None) -> int:
    """``storm local FILE``: run the file's topology here for ``--local-ttl`` seconds; 1 if it fails. Shell
    components run in the ``resources/`` directory beside FILE when there is one."""
    parser = common_options(
        "storm local",
        "Run a topology in this process, for development: no daemons, no "
        "ZooKeeper, the same executors and acker as a cluster.",
    )
    parser.add_argument("file", help="a Python file defining `topology` (a Topology or a function returning one)")
    parser.add_argument("--local-ttl", type=float, default=20.0, help="seconds to run before stopping (default 20)")
    parser.add_argument("--topology", default="topology", help="the attribute holding the topology")
    parser.add_argument("--verbose", action="store_true", help="with a load error, its full traceback")
    parser.add_argument("--json", action="store_true", help="log JSON lines, for tools (default: readable lines)")
    args = parser.parse_args(argv)
    conf = load_or_exit(args)
    fmt = "json" if args.json else "console" if conf["squall.log.format"] == "auto" else conf["squall.log.format"]
    configure_logging("local", level=conf["squall.log.level"], fmt=fmt)
    try:
        topology = load_for_submit(args.file, args.topology)  # a mistake is told as storm jar tells it
        for typo in topology_typos(topology):
            warn_on_stderr(typo)
        resources = Path(args.file).resolve().parent / RESOURCES
        local = LocalTopology(
            topology,
            command_line_overrides(conf, args),
            cluster=conf,
            resources=resources if resources.is_dir() else None,
        )
    except SubmitCheckError as exc:
        print(f"{exc.details}storm local: {exc.line}" if args.verbose else f"storm local: {exc.line}", file=sys.stderr)
        return 1
    except storm.InvalidTopologyException as exc:
        print(f"storm local: InvalidTopologyException: {exc.msg}", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, interrupt)
    with local:
        log.info(
            "local topology running",
            topology_id=local.topology_id,
            ttl_secs=args.local_ttl,
            tasks=len(local.layout.task_component),
        )
        try:
            local.runtime.failed.wait(args.local_ttl)
        except KeyboardInterrupt:
            pass
    if local.runtime.failure is not None:
        print(f"storm local: the topology failed: {local.runtime.failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
