"""TopologyAssign: one thread, one queue, the only writer of ``/assignments``.

Submit, the heartbeat monitor and rebalance all push an :class:`AssignEvent` and wait on its latch.
The thread reads the cluster snapshot from ZooKeeper, asks the scheduler (a pure function) for
workers, and writes the assignment only when it changed, plus ``/assignments_bak/<name>`` for
``use.old.assignment``. Serialising every assignment through one thread means two topologies can
never be given the same slot.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from nimbus.scheduler import (
    AssignType,
    Component,
    ScheduleError,
    ScheduleRequest,
    Supervisor,
    schedule,
    wanted_workers,
)
from squall.core.clock import Clock
from squall.core.zk import paths
from squall.core.zk.client import ZkClient
from squall.core.zk.records import (
    Assignment,
    AssignmentBak,
    AssignmentType,
    Blacklist,
    SupervisorInfo,
    TopologyTasks,
    WorkerAssignment,
)

log = structlog.get_logger(__name__)

#: (components for the scheduler, merged topology conf, current code version) of a topology id, from the code store.
TopologySource = Callable[[str], tuple[tuple[Component, ...], Mapping[str, Any], int]]


class AssignFailed(Exception):
    """The assignment could not be made (or was not made in time); the message says why."""


@dataclass
class AssignEvent:
    topology_id: str
    topology_name: str
    assign_type: AssignType = AssignType.NEW
    reassign: bool = False
    dead_tasks: frozenset[int] = frozenset()
    #: SCALE (a rebalance changed parallelism) and UPDATE (new conf or code) are always written, so workers
    #: see a new timestamp and reload.
    writes: AssignmentType = AssignmentType.ASSIGN
    based_on_ms: int | None = None  # monitor: timestamp of the assignment the dead tasks were judged on
    #: Monitor: the topology runs on fewer workers than it wants; written only if it gets more workers now.
    grow: bool = False
    _done: threading.Event = field(default_factory=threading.Event, repr=False)
    _error: str | None = field(default=None, repr=False)
    assignment: Assignment | None = field(default=None, repr=False)

    def finish(self, assignment: Assignment | None = None, error: str | None = None) -> None:
        """First call wins: a late result after a timeout is ignored."""
        if not self._done.is_set():
            self.assignment, self._error = assignment, error
            self._done.set()

    def wait(self, clock: Clock, timeout_secs: float) -> Assignment | None:
        """Block until the event is handled; the timeout runs on ``clock`` so tests can simulate it."""
        timer = clock.call_later(
            timeout_secs,
            lambda: self.finish(
                error=f"assignment of {self.topology_id} not done within {timeout_secs:g}s (nimbus.assign.timeout.secs)"
            ),
        )
        self._done.wait()
        timer.cancel()
        if self._error is not None:
            raise AssignFailed(self._error)
        return self.assignment


class TopologyAssigner:
    """The assign thread. ``start()`` it once; ``push()`` events from any thread."""

    def __init__(self, zk: ZkClient, clock: Clock, topologies: TopologySource, code_dir: Callable[[str], str]) -> None:
        self._zk = zk
        self._clock = clock
        self._topologies = topologies
        self._code_dir = code_dir
        self._queue: queue.Queue[AssignEvent | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="topology-assign", daemon=True)

    def start(self) -> TopologyAssigner:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(10)

    def push(self, event: AssignEvent) -> AssignEvent:
        self._queue.put(event)
        return event

    def _run(self) -> None:
        while (event := self._queue.get()) is not None:
            with structlog.contextvars.bound_contextvars(topology_id=event.topology_id):
                try:
                    event.finish(self.assign(event))
                except (ScheduleError, AssignFailed) as exc:
                    log.warning("assignment failed", error=str(exc), type=event.assign_type.value)
                    event.finish(error=str(exc))
                except Exception as exc:  # keep the one assign thread alive whatever happens
                    log.exception("assignment crashed", type=event.assign_type.value)
                    event.finish(error=f"internal error while assigning {event.topology_id}: {exc!r}")

    def assign(self, event: AssignEvent) -> Assignment:
        """Schedule one topology and persist the result; runs on the assign thread only."""
        components, conf, code_version = self._topologies(event.topology_id)
        tasks = self._zk.read(paths.tasks(event.topology_id), TopologyTasks)
        if tasks is None or not tasks.tasks:
            raise AssignFailed(f"{event.topology_id} has no tasks in ZooKeeper")
        current = self._zk.read(paths.assignment(event.topology_id), Assignment)
        if event.based_on_ms is not None and current is not None and current.timestamp_ms != event.based_on_ms:
            log.info("stale monitor event dropped: the assignment changed since it was judged")
            return current
        assign_type = event.assign_type if current is not None else AssignType.NEW
        if current is not None:
            old_workers = tuple(current.workers)
        else:
            bak = self._zk.read(paths.assignment_bak(event.topology_name), AssignmentBak)
            old_workers = tuple(bak.assignment.workers) if bak is not None else ()
        request = ScheduleRequest(
            topology_id=event.topology_id,
            components=components,
            conf=conf,
            supervisors=self._supervisors(exclude=event.topology_id),
            assign_type=assign_type,
            reassign=event.reassign,
            old_workers=old_workers,
            dead_tasks=event.dead_tasks,
        )
        workers = schedule(request)
        if event.grow and current is not None and len(workers) <= len(current.workers):
            return current  # no slot freed up: moving tasks would gain nothing
        assignment = self._assignment(event, workers, current, code_version, wanted_workers(request))
        if (
            current is not None
            and current.workers == assignment.workers
            and event.writes is AssignmentType.ASSIGN
            and current.code_version == code_version
            and current.wanted_workers == assignment.wanted_workers
        ):
            log.info("assignment unchanged", workers=len(workers))
            return current
        self._zk.write(paths.assignment(event.topology_id), assignment)
        self._zk.write(
            paths.assignment_bak(event.topology_name),
            AssignmentBak(component_tasks={c.id: sorted(c.tasks) for c in components}, assignment=assignment),
        )
        log.info("assignment written", workers=len(workers), type=assign_type.value)
        return assignment

    def _supervisors(self, exclude: str) -> tuple[Supervisor, ...]:
        """Live, non-blacklisted supervisors; their used ports are those of *other* topologies."""
        blacklist = self._zk.read(paths.BLACKLIST, Blacklist) or Blacklist()
        used: dict[str, set[int]] = {}
        for topology_id in self._zk.children(paths.ASSIGNMENTS):
            if topology_id == exclude:
                continue
            other = self._zk.read(paths.assignment(topology_id), Assignment)
            for w in other.workers if other else ():
                used.setdefault(w.supervisor_id, set()).add(w.port)
        supervisors = []
        for supervisor_id in self._zk.children(paths.SUPERVISORS):
            info = self._zk.read(paths.supervisor(supervisor_id), SupervisorInfo)
            if info is None or info.host in blacklist.hosts:
                continue
            supervisors.append(
                Supervisor(
                    info.supervisor_id, info.host, tuple(info.ports), frozenset(used.get(info.supervisor_id, ()))
                )
            )
        return tuple(supervisors)

    def _assignment(
        self,
        event: AssignEvent,
        workers: list[WorkerAssignment],
        current: Assignment | None,
        code_version: int,
        wanted: int,
    ) -> Assignment:
        """Start times: kept for tasks that stay on their slot, now for tasks that moved or are new."""
        now = int(self._clock.time())
        old_slot = {t: (w.supervisor_id, w.port) for w in current.workers for t in w.tasks} if current else {}
        old_start = current.task_start_secs if current else {}
        start = {
            t: old_start.get(t, now) if old_slot.get(t) == (w.supervisor_id, w.port) else now
            for w in workers
            for t in w.tasks
        }
        return Assignment(
            code_dir=self._code_dir(event.topology_id),
            workers=workers,
            node_host={w.supervisor_id: w.host for w in workers},
            task_start_secs=start,
            timestamp_ms=int(self._clock.time() * 1000),
            type=event.writes,
            code_version=code_version,
            wanted_workers=wanted,
        )
