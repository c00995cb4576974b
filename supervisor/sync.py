"""Supervisor sync as a pure function: (assignments, local workers, now) → actions.

The adapter gathers the inputs (``/assignments`` from ZooKeeper, worker processes and their local
heartbeats, the code on disk), calls :func:`plan` on every watch event and timer tick, and carries
out the actions in order. Nothing here touches a process or a file, so every rule — when a worker is
dead, when it is restarted, how fast a crash loop may retry — is tested on plain values.

Gray upgrade plugs in here: each port runs a code version — the assignment's ``code_version``, or the
upgrade's new version for ports under ``/gray_upgrade/<id>/upgrading_workers`` or ``upgraded_workers``
(none while rolling back). A worker running another version than its port's is stopped and relaunched
on the right one (each version has its own code directory), and a port under ``upgrading_workers`` is
confirmed (:class:`ConfirmSwitch`) only once the new process has beaten — the same "came up" test that
clears the crash backoff — so a crash-looping new version never counts as upgraded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from squall.core.restarts import restart_delay_secs
from squall.core.zk.records import Assignment, AssignmentType
from supervisor.code import CodeKey


@dataclass(frozen=True)
class WorkerSpec:
    """What should run on a port."""

    topology_id: str
    tasks: tuple[int, ...]
    version: int = 1  # the topology's code version

    @property
    def code(self) -> CodeKey:
        return self.topology_id, self.version


@dataclass(frozen=True)
class UpgradePorts:
    """A topology's gray upgrade, as one supervisor sees it: its own ports only."""

    version: int  # the new code version
    rollback: bool = False
    upgrading: frozenset[int] = frozenset()
    upgraded: frozenset[int] = frozenset()


@dataclass(frozen=True)
class LocalWorker:
    """A worker process this supervisor started (or found from its previous life)."""

    spec: WorkerSpec
    worker_id: str
    alive: bool  # the pid still runs
    started_secs: float
    last_beat_secs: float | None = None  # from the worker's local heartbeat file
    stop_requested: bool = False  # an operator stopped it (storm kill_workers): a restart, not a failure


@dataclass(frozen=True)
class Backoff:
    failures: int = 0
    not_before_secs: float = 0.0


@dataclass(frozen=True)
class Download:
    topology_id: str
    version: int = 1


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
    version: int = 1


@dataclass(frozen=True)
class ConfirmSwitch:
    """The worker on ``port`` runs its new code version and has beaten: move the port from
    ``upgrading_workers`` to ``upgraded_workers`` (or, rolling back, just clear it)."""

    topology_id: str
    port: int
    rollback: bool


Action = Download | Launch | Kill | ReportError | RemoveCode | ConfirmSwitch


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    #: port → retry state, fed back next time: exactly the assigned ports whose worker died and none has
    #: come up (beaten) since, which the supervisor publishes as its ``failing_ports``.
    backoff: Mapping[int, Backoff] = field(default_factory=dict)


def desired_workers(
    supervisor_id: str, assignments: Mapping[str, Assignment], upgrades: Mapping[str, UpgradePorts] | None = None
) -> dict[int, WorkerSpec]:
    """Port → what nimbus wants running there (topology, tasks, code version), from every assignment."""
    wanted = {}
    for topology_id, assignment in sorted(assignments.items()):
        upgrade = (upgrades or {}).get(topology_id)
        moved = upgrade.upgrading | upgrade.upgraded if upgrade is not None and not upgrade.rollback else frozenset()
        for w in assignment.workers:
            if w.supervisor_id == supervisor_id:
                version = upgrade.version if upgrade is not None and w.port in moved else assignment.code_version
                wanted[w.port] = WorkerSpec(topology_id, tuple(sorted(w.tasks)), version)
    return wanted


def plan(
    supervisor_id: str,
    assignments: Mapping[str, Assignment],
    workers: Mapping[int, LocalWorker],
    code: Mapping[CodeKey, int],
    backoff: Mapping[int, Backoff],
    now: float,
    *,
    start_timeout_secs: float,
    worker_timeout_secs: float,
    upgrades: Mapping[str, UpgradePorts] | None = None,
    unprepared: frozenset[CodeKey] = frozenset(),
) -> Plan:
    """Converge local workers on the assignments.

    A worker is dead when its process exited, when it never beat within ``start_timeout_secs``, or
    when its last beat is older than ``worker_timeout_secs``; dead workers are killed, reported and
    relaunched at once; a port whose worker keeps dying then waits 1, 2, 4 … 60 s between launches. A
    worker an operator stopped (``storm kill_workers``) is relaunched at once and is no failure.
    A worker whose tasks changed within the same topology is left running: it refreshes its tasks
    itself from the assignment (JStorm's RefreshConnections). A worker on another code version than its
    port's is replaced at once when a gray upgrade marks the port (a switch, not a failure: no backoff);
    otherwise (``storm update_topology`` gave new code) it keeps running and takes the new version when it
    next starts.

    ``unprepared`` are code versions whose code or Python environment is not ready yet: a gray upgrade's port
    keeps its old worker until its new version is ready (downloaded, environment built), so a slow or failing
    build never leaves the port without a worker.

    ``code`` maps the code versions on disk to the assignment timestamp they were fetched for; an
    ``update`` assignment newer than that fetches its version (new code and/or conf), which the
    topology's workers here read the new conf from.
    """
    upgrades = upgrades or {}
    wanted = desired_workers(supervisor_id, assignments, upgrades)
    switching = {t: u.upgrading for t, u in upgrades.items()}
    actions: list[Action] = []
    next_backoff = {port: retry for port, retry in backoff.items() if port in wanted}
    running: dict[int, WorkerSpec] = {}
    preparing: set[CodeKey] = set()  # new versions a switching port waits for
    for port, worker in sorted(workers.items()):
        spec = wanted.get(port)
        if spec is None or spec.topology_id != worker.spec.topology_id:
            actions.append(Kill(port, worker.worker_id, "no longer assigned"))
            next_backoff.pop(port, None)
            continue
        if spec.version != worker.spec.version:
            if port in switching.get(spec.topology_id, ()) and spec.code in unprepared:
                preparing.add(spec.code)
                spec = replace(spec, version=worker.spec.version)
            elif port in switching.get(spec.topology_id, ()):
                actions.append(
                    Kill(port, worker.worker_id, f"switching from code version {worker.spec.version} to {spec.version}")
                )
                next_backoff.pop(port, None)
                continue
            else:
                spec = replace(spec, version=worker.spec.version)  # updated code: taken at its next start
        if worker.stop_requested and not worker.alive:
            actions.append(Kill(port, worker.worker_id, "stopped on request"))  # no report, no back-off
            next_backoff.pop(port, None)
            continue
        problem = _health(worker, now, start_timeout_secs, worker_timeout_secs)
        if problem is None:
            running[port] = spec
            if worker.last_beat_secs is not None:
                next_backoff.pop(port, None)  # it came up: forget earlier failures
            continue
        failures = backoff.get(port, Backoff()).failures + 1
        delay = restart_delay_secs(failures)
        next_backoff[port] = Backoff(failures, now + delay)
        when = f"in {delay:g}s ({failures} failures in a row)" if delay else "now"
        actions += [
            Kill(port, worker.worker_id, problem),
            ReportError(
                worker.spec.topology_id,
                worker.spec.tasks,
                f"worker {worker.worker_id} on port {port} (code version {worker.spec.version}) "
                f"{problem}; restarting it {when}",
            ),
        ]

    needed = {spec.code for port, spec in wanted.items() if port not in running} | preparing
    updated = {
        (t, a.code_version)
        for t, a in assignments.items()
        if a.type is AssignmentType.UPDATE and any(spec.topology_id == t for spec in wanted.values())
    }
    stale = {key for key in updated if code.get(key, 0) < assignments[key[0]].timestamp_ms}
    actions += [Download(*key) for key in sorted((needed - set(code)) | stale)]
    for port, spec in sorted(wanted.items()):
        if port not in running and now >= next_backoff.get(port, Backoff()).not_before_secs:
            actions.append(Launch(port, spec))
    for topology_id, upgrade in sorted(upgrades.items()):
        for port in sorted(upgrade.upgrading):
            if port in running and running[port] == wanted[port] and workers[port].last_beat_secs:
                actions.append(ConfirmSwitch(topology_id, port, upgrade.rollback))
    in_use = (
        {spec.code for spec in wanted.values()}
        | {w.spec.code for w in workers.values()}
        | {(t, a.code_version) for t, a in assignments.items()}
    )
    actions += [RemoveCode(*key) for key in sorted(set(code) - in_use)]
    return Plan(tuple(actions), next_backoff)


def _health(worker: LocalWorker, now: float, start_timeout_secs: float, worker_timeout_secs: float) -> str | None:
    if not worker.alive:
        return "exited"
    if worker.last_beat_secs is None:
        late = now - worker.started_secs > start_timeout_secs
        return f"did not start within {start_timeout_secs:g}s" if late else None
    if now - worker.last_beat_secs > worker_timeout_secs:
        return f"stopped heartbeating for more than {worker_timeout_secs:g}s"
    return None
