"""``storm jar`` (``submit``) and ``update_topology``: package a topology's code (a Python file, a package
directory or a streamparse project), upload it to nimbus, and submit it or hand it to the running topology.

Each command is ``run(conf, args) -> exit code``, registered by :func:`squall.cli.operate.add_arguments`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from squall.api.dsl import Topology
from squall.api.submitter import submit_topology, upload_package
from squall.cli.options import command_line_overrides, conf_file_json, json_or_text, topology_typos
from squall.cli.submitcheck import SubmitCheckError, check_package, load_for_submit, load_user_code
from squall.compat.streamparse_project import build_project_package, is_project, load_project
from squall.core.entry import warn_on_stderr
from squall.core.nimbus_client import nimbus_client
from squall.core.package import build_package

#: Packages at least this big get a progress bar on upload.
PROGRESS_BYTES = 1 << 20


def _package(source: str, include: list[str], tmp: str, topology: str | None = None, env: str | None = None) -> Path:
    """The code package of a topology file, a package directory or a streamparse project (its src/ as
    resources/, its topology's virtualenv spec as requirements.txt)."""
    dest = Path(tmp) / f"{Path(source).resolve().name}.zip"
    if is_project(source):
        return build_project_package(source, dest, include, topology, env)
    return build_package([source, *include], dest)


def _progress(sent: int, total: int) -> None:
    if total >= PROGRESS_BYTES:
        width = 30
        done = width * sent // total
        print(
            f"\ruploading [{'#' * done}{'.' * (width - done)}] {sent / 2**20:.1f}/{total / 2**20:.1f} MiB",
            end="\n" if sent == total else "",
            file=sys.stderr,
            flush=True,
        )


def jar(conf: Mapping[str, Any], args: argparse.Namespace) -> int:
    """Package the topology's code, upload it and submit (Storm's ``storm jar``)."""
    with tempfile.TemporaryDirectory(prefix="squall-jar-") as tmp:
        try:
            topology = _load(args)
            typos = topology_typos(topology)
            package = _package(args.source, args.include, tmp, args.topology, args.environment)
            if not is_project(args.source):  # a project's components run from resources/, checked as it loads
                check_package(package, args.source, args.topology, topology)
        except (OSError, ValueError) as exc:
            print(f"storm {args.command}: cannot build the package: {exc}", file=sys.stderr)
            return 1
        except SubmitCheckError as exc:
            if args.verbose:
                print(exc.details, end="", file=sys.stderr)
            print(f"storm {args.command}: {exc.line}", file=sys.stderr)
            return 1
        for typo in typos:
            warn_on_stderr(typo)
        overrides = command_line_overrides(conf, args)
        given = (("topology.workers", args.workers), ("topology.acker.executors", args.ackers))
        overrides.update({key: value for key, value in given if value is not None})
        if args.replace:
            overrides["topology.hot.deploy.enable"] = True
        topology_id = submit_topology(
            conf,
            topology,
            package=package,
            conf_overrides=overrides,
            name=args.name,
            progress=_progress,
            active=not args.inactive,
        )
    name, submitted = args.name or topology.name, {**topology.build()[1], **overrides}
    if submitted.get("topology.upgrade") is True:
        print(upgrade_started(name, topology_id, submitted))
        return 0
    print(f"Finished submitting topology: {name} ({topology_id})")
    with nimbus_client(conf) as nimbus:
        requested = json.loads(nimbus.getTopologyConf(topology_id)).get("topology.workers") or 1
        note = capacity_note(nimbus.getClusterInfo(), name, int(requested))
    if note:
        print(note)
    return 0


def capacity_note(cluster: Any, name: str, requested: int) -> str | None:
    """Storm's rule, told by the command that meets it: with fewer free slots than the ``requested`` workers
    of topology ``name`` (its own slots count as free for it), it runs on the free ones and nimbus adds workers
    as slots free up; until then Health in ``storm list`` says so. None when the slots suffice (or its tasks
    are fewer than the slots: it needs no more)::

        capacity_note(nimbus.getClusterInfo(), "sensors", 99)
        # "sensors: 99 workers requested, 8 slots free: it runs on 8 and adds workers as slots free up"
    """
    mine = next((t for t in cluster.topologies if t.name == name), None)
    free = sum(max(0, s.num_workers - s.num_used_workers) for s in cluster.supervisors)
    free += mine.num_workers if mine is not None else 0
    if requested <= free or (mine is not None and mine.num_tasks <= free):
        return None
    return (
        f"{name}: {requested} workers requested, {free} slots free: it runs on {free} and adds workers as slots "
        "free up (storm list's Health shows it until then)"
    )


def upgrade_started(name: str, topology_id: str, submitted: Mapping[str, Any]) -> str:
    """What ``storm jar ... -c topology.upgrade=true`` says once nimbus took it: a gray upgrade of the running
    topology began, which workers take the new code first (``topology.upgrade.*``), and how to go on."""
    num, component = submitted.get("topology.upgrade.worker.num") or 0, submitted.get("topology.upgrade.component")
    workers = submitted.get("topology.upgrade.workers")
    first = (
        f"workers {workers if isinstance(workers, str) else ', '.join(workers)}"
        if workers
        else f"the workers running {component}" + (f" (at most {num})" if num else "")
        if component
        else f"{num} worker{'s' if num != 1 else ''}"
        if num
        else ""
    )
    return "\n".join(
        [
            f"Started a gray upgrade of topology {name} ({topology_id}) to the new code: "
            + (
                f"{first} first, the others on the old code until you go on."
                if first
                else "no worker yet; storm gray_upgrade starts the first batch."
            ),
            (
                f"  storm gray_upgrade {name} -n N      the next N workers "
                "(-p COMPONENT or -w HOST:PORT,... to choose them)"
            ),
            f"  storm complete_upgrade {name}       every remaining worker",
            f"  storm rollback {name}               the old code back on every upgraded worker",
            f"  storm list {name}                   UPGRADING while it lasts (topology.upgrade.ttl bounds it)",
        ]
    )


def _load(args: argparse.Namespace) -> Topology:
    """The topology ``storm jar`` submits: a streamparse project's (``--topology`` NAME, ``-e`` ENV) or a
    Python file's or package's (``--topology`` attribute, topology function ARGs)."""
    if is_project(args.source):
        if args.args:
            raise SubmitCheckError(
                f"a streamparse project takes no topology arguments (got {' '.join(args.args)}); "
                "its topology class is declarative"
            )
        return load_user_code(args.source, lambda: load_project(args.source, args.topology, args.environment)).topology
    if args.environment is not None:
        raise SubmitCheckError(
            f"-e/--environment names an env of a streamparse project's config.json; {args.source} "
            "is not a streamparse project"
        )
    return load_for_submit(args.source, args.topology, [json_or_text(a) for a in args.args])


def update_topology(conf: Mapping[str, Any], args: argparse.Namespace) -> int:
    """New code and/or conf for a running topology (JStorm's ``update_topology``)."""
    if args.jar is None and args.conf is None:
        print("storm update_topology: give --jar and/or --conf", file=sys.stderr)
        return 2
    with nimbus_client(conf) as nimbus, tempfile.TemporaryDirectory(prefix="squall-jar-") as tmp:
        location = ""
        if args.jar is not None:
            location = upload_package(conf, nimbus, _package(args.jar, args.include, tmp, args.name), _progress)
        nimbus.updateTopology(args.name, location, conf_file_json(args.conf))
    print(f"Updated topology: {args.name}")
    return 0
