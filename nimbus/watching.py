"""The leader's watch over running topologies: takes in the topology masters' heartbeats, and on every monitor cycle
persists them, moves dead workers, coordinates gray upgrades, grows topologies short of slots and removes orphans.

The decisions (which workers are dead, which restarts are new) are :mod:`nimbus.monitor`'s, on plain values; the
stats windows are :mod:`nimbus.windows`'. This module reads ZooKeeper, asks them under the state's beats lock, and
carries out what they answer.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import structlog

from nimbus.assign import AssignEvent
from nimbus.scheduler import AssignType
from nimbus.state import NimbusState
from nimbus.transitions import Transitions
from nimbus.upgrading import Upgrading
from nimbus.windows import WINDOW_BUCKETS
from squall.core import topology as topo
from squall.core.thrift import storm
from squall.core.zk import paths
from squall.core.zk.records import (
    Assignment,
    StormBase,
    TaskBeat,
    TaskHeartbeats,
    TaskStats,
    TopologyStatus,
    TopologyTasks,
    WorkerAssignment,
)

log = structlog.get_logger(__name__)


class Watching:
    """The heartbeats and monitor of one nimbus's :class:`~nimbus.state.NimbusState`."""

    def __init__(self, state: NimbusState, transitions: Transitions, upgrading: Upgrading) -> None:
        self.state = state
        self.transitions = transitions
        self.upgrading = upgrading
        # Bumped whenever this nimbus may have stopped watching (leadership changed with a takeover or a lost
        # session, a monitor read that failed through its retries): a monitor cycle judges only within one
        # watch, and the first cycle of a new watch pardons every task. A SUSPENDED connection alone does not
        # bump it: known topologies' beats arrive without ZooKeeper, and pardoning on every blip of a flapping
        # connection would keep dead tasks from ever being judged.
        self._watch = 0
        self._pardoned_watch = -1

    # -- heartbeats -----------------------------------------------------------------------------

    def heartbeat(self, topology_id: str, beats: Mapping[int, TaskBeat]) -> None:
        """Take in a topology master's beats. A topology already beating is known without a ZooKeeper read, so
        beats keep arriving through a ZooKeeper outage and nobody is judged dead on the time it was away.
        Only the elected leader takes them (SUSPENDED too): beats kept by a follower, or by a leader deposed while
        its workers stayed connected, never reach the leader, which then judges every task dead."""
        state = self.state
        if not state.elected:
            state.require_leader()  # not leading: NotLeader names the leader, and the worker looks it up again
        if (
            not state.tracker.knows(topology_id)
            and not state.zk.exists(paths.topology(topology_id))
            and topology_id not in state.ids_submitting()
        ):
            raise storm.NotAliveException(msg=topology_id)
        with state.beats_lock:
            state.tracker.record(topology_id, beats, int(state.clock.time()))
            state.windows.record(topology_id, beats)

    def latest_beats(self, topology_id: str) -> dict[int, TaskBeat]:
        """The leader's live view of task beats; a follower reads the leader's last ``/taskbeats`` snapshot."""
        state = self.state
        if state.is_leader:
            with state.beats_lock:
                return dict(state.tracker.snapshot(topology_id, 0).beats)
        stored = state.zk.read(paths.taskbeats(topology_id), TaskHeartbeats)
        return dict(stored.beats) if stored else {}

    def stats_windows(
        self, topology_id: str, keys: Collection[str] = tuple(WINDOW_BUCKETS)
    ) -> dict[int, dict[str, TaskStats]]:
        """Task → Storm's window key (of ``keys``) → its counts in the window, from the beats this nimbus took in as
        leader (a follower has none: the leader serves the windows, as the UI asks it)."""
        with self.state.beats_lock:
            return self.state.windows.windows(topology_id, keys)

    def restart_times(self, topology_id: str) -> list[int]:
        """When this nimbus, leading, moved dead workers of ``topology_id`` lately
        (:class:`~nimbus.monitor.Restarts`)."""
        with self.state.beats_lock:
            return self.state.restarts.times(topology_id, int(self.state.clock.time()))

    # -- the monitor ----------------------------------------------------------------------------

    def stop_watching(self) -> None:
        """What happens from now until the next monitor cycle's look is not held against any task."""
        self._watch += 1

    def _watching(self, watch: int) -> bool:
        """Still leading, connected and in the same watch as a cycle that started in ``watch``."""
        return self._watch == watch and self.state.is_leader

    def monitor(self) -> None:
        """One monitor cycle: persist beats, reassign dead workers, clean up orphans. Leader only.

        Storm's rule: a leader judges no task on time it was not watching. The first cycle after a takeover,
        a lost session or a read that failed through an outage gives every task a full
        ``nimbus.task.timeout.secs`` from its look; a cycle that straddles such a change (its ZooKeeper calls
        waited out a re-election) judges nothing, and one that waited out a shorter outage judges on a ``now``
        taken after its calls, against the beats that kept arriving meanwhile."""
        state = self.state
        if not state.is_leader:
            return
        watch = self._watch
        try:
            alive = set(state.zk.children(paths.TOPOLOGIES))
        except Exception:
            self.stop_watching()
            raise
        with state.beats_lock:
            if not self._watching(watch):
                return
            if self._pardoned_watch != watch:
                self._pardoned_watch = watch
                state.tracker.pardon(int(state.clock.time()))
                log.info("monitor watching from now: every task has a full timeout from now")
        for topology_id in sorted(alive):
            try:
                self._check_topology(topology_id, watch)
            except Exception:
                log.exception("monitor failed for topology", topology_id=topology_id)
        self._cleanup_orphans()

    def _check_topology(self, topology_id: str, watch: int) -> None:
        state, zk = self.state, self.state.zk
        base = zk.read(paths.topology(topology_id), StormBase)
        assignment = zk.read(paths.assignment(topology_id), Assignment)
        tasks = zk.read(paths.tasks(topology_id), TopologyTasks)
        if base is None or assignment is None or tasks is None:
            return
        conf = state.merged_conf(topology_id)
        with state.beats_lock:
            snapshot = state.tracker.snapshot(topology_id, topo.topology_master_task(tasks) or 0)
        if not self._watching(watch):
            return
        zk.write(paths.taskbeats(topology_id), snapshot)  # beats are not held up while ZooKeeper is slow
        with state.beats_lock:
            if not self._watching(watch):  # leadership changed while the write waited: judge nothing
                return
            dead = state.tracker.dead_workers(
                topology_id,
                assignment,
                int(state.clock.time()),
                task_timeout_secs=int(conf["nimbus.task.timeout.secs"]),
                launch_grace_secs=int(conf["nimbus.task.launch.secs"]),
            )
        if base.status in (TopologyStatus.UPGRADING, TopologyStatus.ROLLBACK):
            if dead and base.status is TopologyStatus.UPGRADING:
                self.upgrading.rollback_upgrade(
                    topology_id, f"tasks died during the upgrade, on {[w.host_port for w in dead]}"
                )
                return  # reassigned on a later cycle if still dead: the rollback may be all they need
            self.upgrading.coordinate_upgrade(topology_id)
        if dead and base.status in (TopologyStatus.ACTIVE, TopologyStatus.INACTIVE, TopologyStatus.ROLLBACK):
            dead_tasks = frozenset(t for w in dead for t in w.tasks)
            log.warning(
                "reassigning dead workers",
                topology_id=topology_id,
                workers=[w.host_port for w in dead],
                tasks=sorted(dead_tasks),
            )
            state.assigner.push(
                AssignEvent(
                    topology_id,
                    base.name,
                    AssignType.MONITOR,
                    dead_tasks=dead_tasks,
                    based_on_ms=assignment.timestamp_ms,
                )
            )
            self._report_restarts(topology_id, dead, assignment, int(conf["nimbus.task.timeout.secs"]))
        elif base.status in (TopologyStatus.ACTIVE, TopologyStatus.INACTIVE) and (
            len(assignment.workers) < assignment.wanted_workers
        ):  # short of slots: take those freed since
            state.assigner.push(
                AssignEvent(
                    topology_id, base.name, AssignType.REBALANCE, grow=True, based_on_ms=assignment.timestamp_ms
                )
            )

    def _report_restarts(
        self, topology_id: str, dead: tuple[WorkerAssignment, ...], assignment: Assignment, timeout_secs: int
    ) -> None:
        """File each worker moved for the first time under ``assignment`` as an error of the topology, so
        ``storm get-errors`` and the UI say why its tasks started over; Health counts them
        (:class:`~nimbus.monitor.Restarts`)."""
        state = self.state
        with state.beats_lock:
            new = set(
                state.restarts.record(
                    topology_id,
                    [w.host_port for w in dead],
                    assignment_ms=assignment.timestamp_ms,
                    now=int(state.clock.time()),
                )
            )
        for worker in (w for w in dead if w.host_port in new):
            state.record_error(
                topology_id,
                f"worker {worker.host_port} restarted by nimbus: no heartbeat from its "
                f"tasks {sorted(worker.tasks)} for over {timeout_secs} s "
                "(nimbus.task.timeout.secs)",
            )

    def _cleanup_orphans(self) -> None:
        """State left by a nimbus that died mid-submit or mid-removal: no ``/topology`` node, no submit running.

        Read in this order — state, then submissions in flight, then ``/topology`` — so a submission that
        finishes meanwhile is seen either as in flight or as alive, never as an orphan.
        """
        state = self.state
        leftovers = {t for parent in paths.TOPOLOGY_SUBTREES for t in state.zk.children(parent)} | set(state.code.ids())
        submitting = state.ids_submitting()
        alive = set(state.zk.children(paths.TOPOLOGIES))
        for topology_id in sorted(leftovers - alive - submitting):
            log.warning("removing orphaned topology state", topology_id=topology_id)
            self.transitions.remove_state(topology_id)
