"""Code in: a topology's submission, its restart, JStorm's hot deploy (a replacement) and ``update_topology`` (new
code or conf as the next version), and the code versions and secrets they store.

A submission validates before it touches anything, then stores code, ``/tasks``, replicas and the assignment, and
writes ``/topology/<id>`` last: a nimbus that dies half-way leaves no topology, only state the monitor removes as an
orphan. Leader only.
"""

from __future__ import annotations

import itertools
import json
import secrets
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from nimbus import lifecycle, upgrade
from nimbus.assign import AssignEvent
from nimbus.codestore import MissingTopology
from nimbus.namedclasses import check_named_classes
from nimbus.scheduler import AssignType
from nimbus.state import NimbusState
from nimbus.transitions import Transitions
from squall.core import topology as topo
from squall.core.thrift import storm
from squall.core.zk import paths
from squall.core.zk.records import (
    Assignment,
    AssignmentType,
    GrayUpgradeConf,
    StormBase,
    SupervisorInfo,
    TaskHeartbeats,
    TopologyStatus,
)

log = structlog.get_logger(__name__)

#: Conf keys that decide tasks and workers: changed by a rebalance, never by an update.
LAYOUT_KEYS = frozenset(
    {
        "topology.workers",
        "topology.acker.executors",
        "topology.spout.parallelism",
        "topology.bolt.parallelism",
        "topology.max.task.parallelism",
    }
)


def without_submit_flags(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A submitted conf minus what only instructs this submission (gray upgrade, hot deploy), never stored."""
    return {k: v for k, v in conf.items() if not k.startswith("topology.upgrade") and k != "topology.hot.deploy.enable"}


def submitted_conf(json_conf: str) -> Any:
    """The conf a client sent, parsed; what it must be (an object) is for the caller to check."""
    try:
        return json.loads(json_conf or "{}")
    except json.JSONDecodeError as exc:
        raise storm.InvalidTopologyException(msg=f"topology conf is not valid JSON: {exc}") from None


class Submission:
    """Submits, restarts, replaces and updates the topologies of one nimbus's :class:`~nimbus.state.NimbusState`."""

    def __init__(self, state: NimbusState, transitions: Transitions) -> None:
        self.state = state
        self.transitions = transitions
        self._counter = itertools.count(1)

    def submit(
        self,
        name: str,
        location: str | None,
        json_conf: str,
        user_topology: Any,
        initial_status: TopologyStatus = TopologyStatus.ACTIVE,
        *,
        replace: bool = False,
        owner: str = "",
    ) -> str:
        """Validate, store, number the tasks, assign, and write ``/topology/<id>`` last.

        ``replace`` is JStorm's hot deploy: the running topology of that name is removed (no kill wait)
        once the new one is known to be valid, and the new one starts once the old workers stopped; the new one
        keeps the old one's owner. ``owner`` is the submitter's principal (none without authentication).
        """
        state = self.state
        state.require_leader()
        topo.validate_name(name)
        conf = submitted_conf(json_conf)
        merged = {**state.conf, **conf} if isinstance(conf, dict) else conf
        topo.validate_topology(name, user_topology, merged)  # also refuses a conf that is not an object
        replaced = state.find_id(name) if replace else None
        if replaced is not None:
            owner = state.base(replaced).owner
        package = state.inbox.claim(location) if location else None
        try:
            check_named_classes(package, user_topology)  # before the topology it replaces is removed
            if replaced is not None:
                self._remove_for_replacement(replaced)
            with state.lock:
                if name in state.alive_names() or name in state.submitting:
                    raise storm.AlreadyAliveException(msg=self._name_taken(name))
                topology_id = topo.topology_id(name, next(self._counter), state.clock.time())
                state.submitting[name] = topology_id
            try:
                self._store_and_start(topology_id, name, package, user_topology, conf, initial_status, owner)
            except Exception:
                self.transitions.remove_state(topology_id)
                raise
            finally:
                with state.lock:
                    state.submitting.pop(name, None)
        finally:
            if package is not None:
                package.unlink(missing_ok=True)  # the code store has its own copy
        return topology_id

    def _name_taken(self, name: str) -> str:
        """Why ``name`` cannot be submitted now: alive, or killed and not yet removed (the kill's wait)."""
        try:
            killed = self.state.base(self.state.find_id(name)).status is TopologyStatus.KILLED
        except storm.NotAliveException:  # still being submitted by another call
            killed = False
        if killed:
            return (
                f"topology {name!r} is being killed: submit it again once storm list no longer shows it (after "
                "the kill's wait, storm kill -w), or now under another --name"
            )
        return f"topology {name!r} is already alive"

    def _store_and_start(
        self,
        topology_id: str,
        name: str,
        package: Path | None,
        user_topology: Any,
        conf: Mapping[str, Any],
        initial_status: TopologyStatus,
        owner: str,
    ) -> None:
        """Submit's steps once the topology is checked: code, ``/tasks``, replicas, assignment, ``/topology`` last."""
        state, zk = self.state, self.state.zk
        normalized, topology_conf = topo.normalize(user_topology, without_submit_flags(conf), name=name)
        topology_conf["topology.id"] = topology_id
        topology_conf.update(self.topology_secrets(topology_id, topology_conf))
        system = topo.system_topology(normalized, {**state.conf, **topology_conf})
        tasks = topo.make_tasks(system)
        state.code.put(topology_id, package=package, conf=topology_conf, topology=normalized, system=system)
        zk.write(paths.tasks(topology_id), tasks)
        zk.write(paths.taskbeats(topology_id), TaskHeartbeats(topo.topology_master_task(tasks) or 0))
        zk.create(paths.task_errors_root(topology_id))
        zk.create(paths.upgrading_workers(topology_id))
        zk.create(paths.upgraded_workers(topology_id))
        self._await_replicas(topology_id, topology_conf)
        state.assign(AssignEvent(topology_id, name))
        state.require_leader()  # demoted while waiting: the new leader will clean up, not us
        now = int(state.clock.time())
        workers = int(state.merged_conf(topology_id)["topology.workers"])
        zk.write(paths.topology(topology_id), StormBase(name, initial_status, now, workers, owner))
        log.info("topology submitted", topology_id=topology_id, tasks=len(tasks.tasks))

    def restart(self, name: str, json_conf: str) -> str:
        """Resubmit the running topology's current code under a new id, ``json_conf`` merged into its conf."""
        state = self.state
        state.require_leader()
        topology_id = state.find_id(name)
        overrides = submitted_conf(json_conf)
        if not isinstance(overrides, dict):
            raise storm.InvalidTopologyException(msg="the restart conf must be a JSON object")
        try:
            stored = state.code.conf(topology_id)
            user_topology, package = state.code.topology(topology_id), state.code.package(topology_id)
        except MissingTopology:
            raise storm.InvalidTopologyException(msg=state.no_code(topology_id)) from None
        conf = without_submit_flags({**stored, **overrides})
        conf.pop("topology.id", None)
        location = state.inbox.add(package) if package is not None else None
        status = state.base(topology_id).status
        return self.submit(
            name,
            location,
            json.dumps(conf),
            user_topology,
            replace=True,
            initial_status=TopologyStatus.INACTIVE if status is TopologyStatus.INACTIVE else TopologyStatus.ACTIVE,
        )

    def _remove_for_replacement(self, topology_id: str) -> None:
        """Remove the topology now, then wait (up to ``task.cleanup.timeout.sec``) for its workers to stop,
        as their supervisors report by freeing the ports."""
        state = self.state
        assignment = state.zk.read(paths.assignment(topology_id), Assignment)
        timeout = float(state.topology_conf_or_cluster(topology_id)["task.cleanup.timeout.sec"])
        with state.lock:
            self.transitions.transition(topology_id, lifecycle.Kill(0))
            pending = state.base(topology_id).pending
            assert pending is not None, "a kill leaves the topology's removal pending"
            self.transitions.transition(topology_id, lifecycle.Remove(pending.due_secs))
        started = time.monotonic()
        slots = {(w.supervisor_id, w.port) for w in assignment.workers} if assignment else set()
        while slots and time.monotonic() - started < timeout:
            slots = {
                (sid, port)
                for sid, port in slots
                if (info := state.zk.read(paths.supervisor(sid), SupervisorInfo)) is not None
                and port in info.used_ports
            }
            if slots:
                time.sleep(0.05)  # other processes' doings, seen in ZooKeeper: nothing to wait on
        log.info(
            "topology removed for its replacement",
            topology_id=topology_id,
            workers_stopped=not slots,
            waited_secs=round(time.monotonic() - started, 3),
        )

    def topology_secrets(self, topology_id: str, topology_conf: Mapping[str, Any]) -> dict[str, str]:
        """The topology's own secrets, each the one it came with or kept from its earlier version (a gray upgrade's
        old and new workers must share them), else a new one: its transfer secret (``topology.transfer.secret``,
        which authenticates its workers to each other) and, when the daemons authenticate to ZooKeeper, its own
        ZooKeeper credential (Storm's ``storm.zookeeper.topology.auth.*``), used by its workers instead of the
        daemons' credential, which they never get."""
        try:
            earlier = self.state.code.conf(topology_id)
        except MissingTopology:
            earlier = {}

        def kept(keys: tuple[str, ...], new: dict[str, str]) -> dict[str, str]:
            for source in (topology_conf, earlier):
                if source.get(keys[-1]):
                    return {key: source[key] for key in keys}
            return new

        found = kept(("topology.transfer.secret",), {"topology.transfer.secret": secrets.token_urlsafe(32)})
        if self.state.conf.get("storm.zookeeper.auth.payload"):
            found |= kept(
                ("storm.zookeeper.topology.auth.scheme", "storm.zookeeper.topology.auth.payload"),
                {
                    "storm.zookeeper.topology.auth.scheme": "digest",
                    "storm.zookeeper.topology.auth.payload": f"{topology_id}:{secrets.token_urlsafe(24)}",
                },
            )
        return found

    def _await_replicas(self, topology_id: str, topology_conf: Mapping[str, Any]) -> None:
        """Publish the new code, then wait for ``topology.min.replication.count`` nimbuses to hold it, at most
        ``topology.max.replication.wait.time.sec`` (Storm's submit): a topology is scheduled only once losing
        this host would not lose its code, or once the operator's patience ran out."""
        state = self.state
        state.replication.publish(topology_id)
        conf = {**state.conf, **topology_conf}
        wanted = int(conf["topology.min.replication.count"])
        max_wait = float(conf["topology.max.replication.wait.time.sec"])
        if wanted <= 1:
            return
        started = state.clock.monotonic()
        held = state.replication.wait_for_replicas(
            topology_id, state.code.current_version(topology_id), wanted=wanted, max_wait_secs=max_wait
        )
        (log.info if held >= wanted else log.warning)(
            "code replicated" if held >= wanted else "scheduling with fewer code replicas than wanted",
            topology_id=topology_id,
            replicas=held,
            wanted=wanted,
            waited_secs=round(state.clock.monotonic() - started, 3),
        )

    # -- code versions --------------------------------------------------------------------------

    def update_topology(self, name: str, location: str | None, json_conf: str) -> None:
        """New code and/or conf as the next code version (JStorm's ``update_topology``). Workers reload the conf
        in place (``Component.update``); the code is taken by each worker at its next start."""
        state = self.state
        state.require_leader()
        topology_id = state.find_id(name)
        overrides = submitted_conf(json_conf)
        if not isinstance(overrides, dict):
            raise storm.InvalidTopologyException(msg="the update conf must be a JSON object")
        layout = sorted(set(overrides) & LAYOUT_KEYS)
        if layout:
            raise storm.InvalidTopologyException(
                msg=f"{layout} change how the topology is laid out; use storm rebalance for those"
            )
        with state.lock:
            status = state.base(topology_id).status
            if status not in (TopologyStatus.ACTIVE, TopologyStatus.INACTIVE):
                raise upgrade.UpgradeRefused(f"cannot update {name!r} while it is {status.value}")
            current = state.code.current_version(topology_id)
            conf = {**state.code.conf(topology_id), **overrides, "topology.id": topology_id}
            user_topology = state.code.topology(topology_id)
            topo.validate_topology(name, user_topology, {**state.conf, **conf})
            self.put_version(
                topology_id,
                location,
                conf=conf,
                topology=user_topology,
                system=state.code.system_topology(topology_id),
                version=self.next_version(topology_id),
            )
            state.assign(AssignEvent(topology_id, name, AssignType.MONITOR, writes=AssignmentType.UPDATE))
            state.code.drop(topology_id, current)
            state.replication.publish(topology_id)
        log.info("topology updated", topology_id=topology_id, new_code=bool(location), conf=sorted(overrides))

    def put_version(self, topology_id: str, location: str | None, **put: Any) -> None:
        """Store a code version from the upload at ``location`` (without one: the current version's package)."""
        state = self.state
        package = state.inbox.claim(location) if location else None
        try:
            stored = package or state.code.package(topology_id)
            check_named_classes(stored, put["topology"])
            state.code.put(topology_id, package=stored, **put)
            state.replication.publish(topology_id)
        finally:
            if package is not None:
                package.unlink(missing_ok=True)  # the code store has its own copy

    def next_version(self, topology_id: str) -> int:
        """Above every version stored or last upgraded to, so a supervisor never mistakes old code for new."""
        last = self.state.zk.read(paths.gray_upgrade_conf(topology_id), GrayUpgradeConf)
        return max([*self.state.code.versions(topology_id), last.version if last else 0]) + 1
