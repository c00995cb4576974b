"""Supervisor sync as a pure function: (assignments, local workers, now) → actions.

The adapter gathers the inputs (``/assignments`` from ZooKeeper, worker processes and their local
heartbeats, the code on disk), calls :func:`plan` on every watch event and timer tick, and carries
out the actions in order. Nothing here touches a process or a file, so every rule — when a worker is
dead, when it is restarted, how fast a crash loop may retry — is tested on plain values.

Gray upgrade plugs in here: the ports named under ``/gray_upgrade/<id>/upgrading_workers`` become one
more input, a worker running older code than its port should have is killed and relaunched like a dead
one (on the new code, kept in a code dir per version), and the port is reported upgraded only once the
new process has beaten — the same "came up" test that clears the crash backoff — so a crash-looping
new version never counts as upgraded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from squall.zk.records import Assignment, AssignmentType

#: Retry delay after the second consecutive death of a port's worker (the first restart is immediate),
#: doubled per further failure up to the cap.
BACKOFF_FIRST_SECS = 1.0
BACKOFF_MAX_SECS = 60.0


@dataclass(frozen=True)
class WorkerSpec:
    """What should run on a port."""

    topology_id: str
    tasks: tuple[int, ...]


@dataclass(frozen=True)
class LocalWorker:
    """A worker process this supervisor started (or found from its previous life)."""

    spec: WorkerSpec
    worker_id: str
    alive: bool  # the pid still runs
    started_secs: float
    last_beat_secs: float | None = None  # from the worker's local heartbeat file


@dataclass(frozen=True)
class Backoff:
    failures: int = 0
    not_before_secs: float = 0.0


@dataclass(frozen=True)
class Download:
    topology_id: str


@dataclass(frozen=True)
class Launch:
    port: int
    spec: WorkerSpec


@dataclass(frozen=True)
class Kill:
    port: int
    worker_id: str
    reason: str


@dataclass(frozen=True)
class ReportError:
    """Goes to ``/taskerrors`` of the worker's tasks and to the log."""

    topology_id: str
    tasks: tuple[int, ...]
    message: str


@dataclass(frozen=True)
class RemoveCode:
    topology_id: str


Action = Download | Launch | Kill | ReportError | RemoveCode


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    backoff: Mapping[int, Backoff] = field(default_factory=dict)  # port → retry state, fed back next time


def desired_workers(supervisor_id: str, assignments: Mapping[str, Assignment]) -> dict[int, WorkerSpec]:
    """Port → what nimbus wants running there, from every topology's assignment."""
    wanted = {}
    for topology_id, assignment in sorted(assignments.items()):
        for w in assignment.workers:
            if w.supervisor_id == supervisor_id:
                wanted[w.port] = WorkerSpec(topology_id, tuple(sorted(w.tasks)))
    return wanted


def plan(supervisor_id: str, assignments: Mapping[str, Assignment], workers: Mapping[int, LocalWorker],
         code: Mapping[str, int], backoff: Mapping[int, Backoff], now: float, *,
         start_timeout_secs: float, worker_timeout_secs: float) -> Plan:
    """Converge local workers on the assignments.

    A worker is dead when its process exited, when it never beat within ``start_timeout_secs``, or
    when its last beat is older than ``worker_timeout_secs``; dead workers are killed, reported and
    relaunched at once; a port whose worker keeps dying then waits 1, 2, 4 … 60 s between launches.
    A worker whose tasks changed within the same topology is left running: it refreshes its tasks
    itself from the assignment (JStorm's RefreshConnections).

    ``code`` maps the topologies whose code is on disk to the assignment timestamp it was fetched
    for; an ``update`` assignment newer than that (new code or conf from nimbus) fetches it again.
    """
    wanted = desired_workers(supervisor_id, assignments)
    actions: list[Action] = []
    next_backoff = dict(backoff)
    running: dict[int, WorkerSpec] = {}
    for port, worker in sorted(workers.items()):
        spec = wanted.get(port)
        if spec is None or spec.topology_id != worker.spec.topology_id:
            actions.append(Kill(port, worker.worker_id, "no longer assigned"))
            next_backoff.pop(port, None)
            continue
        problem = _health(worker, now, start_timeout_secs, worker_timeout_secs)
        if problem is None:
            running[port] = spec
            if worker.last_beat_secs is not None:
                next_backoff.pop(port, None)  # it came up: forget earlier failures
            continue
        failures = backoff.get(port, Backoff()).failures + 1
        delay = 0.0 if failures == 1 else min(BACKOFF_FIRST_SECS * 2 ** (failures - 2), BACKOFF_MAX_SECS)
        next_backoff[port] = Backoff(failures, now + delay)
        when = f"in {delay:g}s ({failures} failures in a row)" if delay else "now"
        actions += [Kill(port, worker.worker_id, problem),
                    ReportError(worker.spec.topology_id, worker.spec.tasks,
                                f"worker {worker.worker_id} on port {port} {problem}; restarting it {when}")]

    needed = {spec.topology_id for port, spec in wanted.items() if port not in running}
    stale = {t for t in {spec.topology_id for spec in wanted.values()} & set(code)
             if assignments[t].type is AssignmentType.UPDATE and assignments[t].timestamp_ms > code[t]}
    actions += [Download(t) for t in sorted((needed - set(code)) | stale)]
    for port, spec in sorted(wanted.items()):
        if port not in running and now >= next_backoff.get(port, Backoff()).not_before_secs:
            actions.append(Launch(port, spec))
    in_use = {spec.topology_id for spec in wanted.values()} | {w.spec.topology_id for w in workers.values()}
    actions += [RemoveCode(t) for t in sorted(set(code) - in_use)]
    return Plan(tuple(actions), next_backoff)


def _health(worker: LocalWorker, now: float, start_timeout_secs: float, worker_timeout_secs: float) -> str | None:
    if not worker.alive:
        return "exited"
    if worker.last_beat_secs is None:
        return f"did not start within {start_timeout_secs:g}s" if now - worker.started_secs > start_timeout_secs else None
    if now - worker.last_beat_secs > worker_timeout_secs:
        return f"stopped heartbeating for more than {worker_timeout_secs:g}s"
    return None
