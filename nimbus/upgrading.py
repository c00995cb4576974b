"""The adapter of :mod:`nimbus.upgrade`: JStorm's gray upgrade carried out, from its start (a new code version
beside the running one) through its batches to its end, complete or rolled back.

The decisions (what batch is next, when the upgrade is done or must roll back) are the pure module's; this one reads
the topology's records and the workers' marks from ZooKeeper, asks it, and writes what it answers: the marks the
supervisors act on, ``/gray_upgrade/<id>``'s conf, the code version the assignment names. Leader only.
"""

from __future__ import annotations

from typing import Any

import structlog

from nimbus import lifecycle, upgrade
from nimbus.assign import AssignEvent
from nimbus.scheduler import AssignType
from nimbus.state import NimbusState
from nimbus.submission import Submission, submitted_conf, without_submit_flags
from nimbus.transitions import Transitions
from squall.core import topology as topo
from squall.core.zk import paths
from squall.core.zk.records import Assignment, GrayUpgradeConf, TopologyStatus, TopologyTasks, WorkerMark

log = structlog.get_logger(__name__)


class Upgrading:
    """Starts, continues, coordinates and rolls back the gray upgrades of one nimbus's
    :class:`~nimbus.state.NimbusState`; code versions are stored by its :class:`~nimbus.submission.Submission`."""

    def __init__(self, state: NimbusState, transitions: Transitions, submission: Submission) -> None:
        self.state = state
        self.transitions = transitions
        self.submission = submission

    def gray_submit(
        self,
        name: str,
        location: str | None,
        json_conf: str,
        user_topology: Any,
        request: upgrade.BatchRequest,
        ttl_ms: int | None = None,
    ) -> str:
        """Store new code as the next version of the running topology ``name`` and start upgrading to it."""
        state, submission = self.state, self.submission
        state.require_leader()
        topology_id = state.find_id(name)
        submitted = submitted_conf(json_conf)
        topo.validate_topology(
            name, user_topology, {**state.conf, **submitted} if isinstance(submitted, dict) else submitted
        )
        with state.lock:
            status = state.base(topology_id).status
            existing = state.zk.read(paths.gray_upgrade_conf(topology_id), GrayUpgradeConf)
            now_ms = int(state.clock.time() * 1000)
            version = submission.next_version(topology_id)
            conf = upgrade.start(
                existing,
                name,
                request,
                version=version,
                now_ms=now_ms,
                ttl_ms=ttl_ms or int({**state.conf, **submitted}["topology.upgrade.ttl"]),
            )
            if status is not TopologyStatus.ACTIVE:
                raise upgrade.UpgradeRefused(
                    f"only an active topology can start a gray upgrade; {name!r} is {status.value}"
                )
            old_conf = state.code.conf(topology_id)
            normalized, topology_conf = topo.normalize(
                user_topology,
                {**without_submit_flags(submitted), "topology.workers": old_conf["topology.workers"]},
                name=name,
            )
            topology_conf["topology.id"] = topology_id
            topology_conf.update(submission.topology_secrets(topology_id, topology_conf))
            system = topo.system_topology(normalized, {**state.conf, **topology_conf})
            self._check_workers_known(topology_id, request)
            changed = upgrade.shape_differences(
                upgrade.shape(state.code.system_topology(topology_id)), upgrade.shape(system)
            )
            if changed:
                raise upgrade.UpgradeRefused(
                    "a gray upgrade runs old and new code side by side, so the topology's shape must stay the same: "
                    + "; ".join(changed)
                    + ". Change it with storm rebalance, or replace the topology "
                    "(topology.hot.deploy.enable=true)"
                )
            submission.put_version(
                topology_id,
                location,
                conf=topology_conf,
                topology=normalized,
                system=system,
                version=version,
                make_current=False,
            )
            self._clear_marks(topology_id)
            state.zk.write(paths.gray_upgrade_conf(topology_id), conf)
            self.transitions.transition(topology_id, lifecycle.StartUpgrade())
            log.info("gray upgrade started", topology_id=topology_id, version=version, batch=request.describe())
            self.coordinate_upgrade(topology_id)
        return topology_id

    def _clear_marks(self, topology_id: str) -> None:
        """The marks of an earlier upgrade go; their parents stay, as the supervisors watch them (a children watch
        ends with its node: a parent deleted and made again left the supervisors to their periodic sync)."""
        zk = self.state.zk
        for marks in (paths.upgrading_workers(topology_id), paths.upgraded_workers(topology_id)):
            for mark in zk.children(marks):
                zk.delete(f"{marks}/{mark}")

    def gray_continue(self, name: str, request: upgrade.BatchRequest) -> None:
        """The operator asks for the next batch (or, with ``all_remaining``, the last one)."""
        state = self.state
        state.require_leader()
        topology_id = state.find_id(name)
        with state.lock:
            existing = state.zk.read(paths.gray_upgrade_conf(topology_id), GrayUpgradeConf)
            conf = upgrade.next_batch(existing, name, request, now_ms=int(state.clock.time() * 1000))
            self._check_workers_known(topology_id, request)
            state.zk.write(paths.gray_upgrade_conf(topology_id), conf)
            log.info("gray upgrade continues", topology_id=topology_id, batch=request.describe())
            self.coordinate_upgrade(topology_id)

    def _check_workers_known(self, topology_id: str, request: upgrade.BatchRequest) -> None:
        assignment = self.state.zk.read(paths.assignment(topology_id), Assignment)
        system = self.state.code.system_topology(topology_id)
        upgrade.check_request(
            request,
            [w.host_port for w in assignment.workers] if assignment else [],
            [*(system.bolts or {}), *(system.spouts or {})],
        )

    def rollback_upgrade(self, topology_id: str, reason: str) -> None:
        """Put every worker back on the assignment's code version: upgraded ports become pending again."""
        state = self.state
        with state.lock:
            conf = state.zk.read(paths.gray_upgrade_conf(topology_id), GrayUpgradeConf)
            if not upgrade.in_progress(conf):
                raise upgrade.UpgradeRefused(f"{topology_id} has no gray upgrade in progress to roll back")
            if conf.rollback:
                return
            state.zk.write(paths.gray_upgrade_conf(topology_id), upgrade.start_rollback(conf, reason))
            self.transitions.transition(topology_id, lifecycle.Rollback())
            state.record_error(topology_id, f"gray upgrade to code version {conf.version} rolled back: {reason}")
            self.coordinate_upgrade(topology_id)

    def coordinate_upgrade(self, topology_id: str) -> None:
        """One coordinator round (the monitor's cycle, and right after each operator call)."""
        state, zk = self.state, self.state.zk
        with state.lock:
            conf = zk.read(paths.gray_upgrade_conf(topology_id), GrayUpgradeConf)
            assignment = zk.read(paths.assignment(topology_id), Assignment)
            tasks = zk.read(paths.tasks(topology_id), TopologyTasks)
            if conf is None or assignment is None or tasks is None:
                return
            master = topo.topology_master_task(tasks)
            workers = tuple(
                w.host_port for w in sorted(assignment.workers, key=lambda w: (master in w.tasks, w.host_port))
            )
            hosting: dict[str, set[str]] = {}
            for w in assignment.workers:
                for task in w.tasks:
                    if task in tasks.tasks:
                        hosting.setdefault(tasks.tasks[task].component, set()).add(w.host_port)
            view = upgrade.UpgradeView(
                conf,
                workers,
                {c: frozenset(hp) for c, hp in hosting.items()},
                frozenset(zk.children(paths.upgrading_workers(topology_id))),
                frozenset(zk.children(paths.upgraded_workers(topology_id))),
            )
            now_ms = int(state.clock.time() * 1000)
            step = upgrade.next_step(view, now_ms)
            if step.rollback:
                self.rollback_upgrade(topology_id, step.rollback)
            elif step.complete:
                self._finish_upgrade(topology_id, conf, now_ms, keep=conf.version, drop=assignment.code_version)
            elif step.rolled_back:
                self._finish_upgrade(topology_id, conf, now_ms, keep=assignment.code_version, drop=conf.version)
            elif step.back:
                for host_port in step.back:
                    zk.write(paths.upgrading_worker(topology_id, host_port), WorkerMark(now_ms // 1000))
                    zk.delete(paths.upgraded_worker(topology_id, host_port))
            elif step.conf is not None:
                for host_port in step.batch:
                    zk.write(paths.upgrading_worker(topology_id, host_port), WorkerMark(now_ms // 1000))
                zk.write(paths.gray_upgrade_conf(topology_id), step.conf)
                log.info("gray upgrade batch", topology_id=topology_id, workers=list(step.batch))

    def _finish_upgrade(self, topology_id: str, conf: GrayUpgradeConf, now_ms: int, *, keep: int, drop: int) -> None:
        """Make ``keep`` the version every worker runs (assignment first, so no worker switches), drop the other."""
        state = self.state
        state.code.set_current(topology_id, keep)
        state.assign(AssignEvent(topology_id, topo.name_of(topology_id), AssignType.MONITOR))
        state.code.drop(topology_id, drop)
        state.replication.publish(topology_id)
        self._clear_marks(topology_id)
        state.zk.write(paths.gray_upgrade_conf(topology_id), upgrade.ended(conf, now_ms))
        self.transitions.transition(topology_id, lifecycle.CompleteUpgrade())
        log.info(
            "gray upgrade rolled back" if conf.rollback else "gray upgrade complete",
            topology_id=topology_id,
            version=keep,
        )
