"""Storm's summary structs built from ZooKeeper records: pure functions, shared by leader and followers.

Status strings are Storm's upper-case names (``ACTIVE``, ``INACTIVE``, ``REBALANCING``, ``KILLED``)
plus JStorm's ``UPGRADING`` and ``ROLLBACK``, which is what Storm clients display (and compare with).
A topology some of whose workers keep dying, whose trees mostly fail, whose workers nimbus had to move, or
some of whose components keep raising, stays ``ACTIVE`` there; Storm's own ``sched_status`` says so
(:func:`health`), from the ports the supervisors report failing, the spouts' counts in the last 10 minutes, the
restarts nimbus made and the errors its tasks filed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from squall import STORM_VERSION
from squall.core.health import ERRORS_PREFIX, REASONS_SEP
from squall.core.stats import to_executor_stats
from squall.core.thrift import storm
from squall.core.zk.errors import error_summary
from squall.core.zk.records import (
    ERROR_DURATION_SECS,
    Assignment,
    ComponentType,
    NimbusMaster,
    NimbusSlave,
    StormBase,
    SupervisorInfo,
    TaskBeat,
    TaskError,
    TaskStats,
    TopologyTasks,
)

#: An error younger than this makes a topology unhealthy: JStorm's "has an error" duration (its ``TaskError``
#: default, 30 minutes), the age under which Storm's UI shows a component's last error in red.
RECENT_ERROR_SECS = ERROR_DURATION_SECS
#: The stats window whose spout counts say whether trees mostly fail: Storm's 10 minutes, as the UI shows it.
HEALTH_WINDOW = "600"
#: A worker nimbus moved for lack of heartbeats makes its topology unhealthy for this long.
RECENT_RESTART_SECS = 600


@dataclass(frozen=True)
class Signs:
    """What the leading nimbus saw of a running topology besides its records, for :func:`health`: each task's
    counts in :data:`HEALTH_WINDOW` (task → counts), when it moved dead workers, each task's newest error as a
    line (task → :func:`~squall.core.zk.errors.error_summary`)."""

    window: Mapping[int, TaskStats] = field(default_factory=dict)
    restarts: Sequence[int] = ()
    error_lines: Mapping[int, str] = field(default_factory=dict)


def _workers(assignment: Assignment | None) -> int:
    return len(assignment.workers) if assignment else 0


def health(
    assignment: Assignment | None,
    supervisors: Iterable[SupervisorInfo],
    *,
    tasks: TopologyTasks | None = None,
    error_times: Mapping[int, int] | None = None,
    now_secs: int = 0,
    error_lines: Mapping[int, str] | None = None,
    window: Mapping[int, TaskStats] | None = None,
    restarts: Sequence[int] = (),
) -> str | None:
    """``sched_status`` of a topology: its reasons for concern joined by ``"; "``, else None (unset, as Storm
    leaves it). Storm clients show it; its ``status`` stays Storm's. The reasons, each its own function:

    * :func:`workers_down`: ``"failing: 2 of 3 workers down"``;
    * :func:`short_of_slots`: ``"running 8 of 99 requested workers: no free slots"``;
    * :func:`failing_trees`: ``"failing: 12,034 of 14,100 trees timed out in 10 min"``, from each task's counts in
      :data:`HEALTH_WINDOW` (``window``);
    * :func:`restarted_workers`: ``"2 workers restarted by nimbus in 10 min: no heartbeat"``, from the times nimbus
      moved a dead worker (``restarts``);
    * :func:`recent_errors`: ``"errors: split (12 s ago): ZeroDivisionError: division by zero"``, always last.

        health(assignment, supervisors)   # "failing: 1 of 1 workers down"
        health(assignment, [], tasks=tasks, error_times={3: now - 12}, now_secs=now)   # "errors: split (12 s ago)"
    """
    reasons = [
        workers_down(assignment, supervisors),
        short_of_slots(assignment),
        failing_trees(tasks, window or {}),
        restarted_workers(restarts, now_secs),
        recent_errors(tasks, error_times or {}, now_secs, error_lines),
    ]
    return REASONS_SEP.join(r for r in reasons if r) or None


def workers_down(assignment: Assignment | None, supervisors: Iterable[SupervisorInfo]) -> str | None:
    """``"failing: 2 of 3 workers down"`` while some of the assigned workers died and have not come up again (their
    supervisors' ``failing_ports``: a crash in ``prepare``, on start, or later)."""
    failing = {(s.supervisor_id, port) for s in supervisors for port in s.failing_ports}
    workers = assignment.workers if assignment else []
    down = sum((w.supervisor_id, w.port) in failing for w in workers)
    return f"failing: {down} of {len(workers)} workers down" if down else None


def short_of_slots(assignment: Assignment | None) -> str | None:
    """``"running 8 of 99 requested workers: no free slots"`` while the topology runs on fewer workers than it
    wants because the cluster lacks the slots (Storm's rule: run on the slots there are); nimbus adds workers
    as slots free up. None otherwise."""
    running = _workers(assignment)
    if assignment is None or running >= assignment.wanted_workers:
        return None
    return f"running {running} of {assignment.wanted_workers} requested workers: no free slots"


def failing_trees(tasks: TopologyTasks | None, window: Mapping[int, TaskStats]) -> str | None:
    """``"failing: 12,034 of 14,100 trees timed out in 10 min"`` when the spouts failed more trees than they saw
    acked in :data:`HEALTH_WINDOW` (``window``: task → its counts there); ``"failed"`` with how many timed out when
    not all did. A topology that drops most of what it takes in is not well, whatever its status says.

    >>> from squall.core.zk.records import TaskInfo
    >>> tasks = TopologyTasks({1: TaskInfo("spout", ComponentType.SPOUT)})
    >>> failing_trees(tasks, {1: TaskStats(acked={"default": 2066}, failed={"default": 12034},
    ...                                    failed_by_reason={"timeout": 12034})})
    'failing: 12,034 of 14,100 trees timed out in 10 min'
    """
    info = tasks.tasks if tasks else {}
    spouts = [stats for task, stats in window.items() if task in info and info[task].type is ComponentType.SPOUT]
    acked = sum(n for s in spouts for n in s.acked.values())
    failed = sum(n for s in spouts for n in s.failed.values())
    if failed <= acked:
        return None
    timed_out = sum(s.failed_by_reason.get("timeout", 0) for s in spouts)
    how = "timed out" if timed_out == failed else f"failed ({timed_out:,} timed out)" if timed_out else "failed"
    return f"failing: {failed:,} of {failed + acked:,} trees {how} in {int(HEALTH_WINDOW) // 60} min"


def restarted_workers(restarts: Sequence[int], now_secs: int) -> str | None:
    """``"2 workers restarted by nimbus in 10 min: no heartbeat"``: the workers nimbus moved (at the times
    ``restarts``) within :data:`RECENT_RESTART_SECS` because their tasks stopped beating."""
    n = sum(now_secs - t < RECENT_RESTART_SECS for t in restarts)
    if not n:
        return None
    return f"{n} worker{'s' if n != 1 else ''} restarted by nimbus in {RECENT_RESTART_SECS // 60} min: no heartbeat"


def recent_errors(
    tasks: TopologyTasks | None,
    error_times: Mapping[int, int],
    now_secs: int,
    error_lines: Mapping[int, str] | None = None,
) -> str | None:
    """``"errors: split (12 s ago), count (40 s ago)"``: the components with an error newer than
    :data:`RECENT_ERROR_SECS`, newest first, each with the age of its newest, and that error's line when
    ``error_lines`` (task → its newest error's :func:`~squall.core.zk.errors.error_summary`) has it; None when
    there is none. ``error_times`` maps a task to its newest error's time (the name of its newest ``/taskerrors``
    node: a few seconds late at most, see :data:`squall.core.zk.errors.MAX_SAME_SECOND`, so ages are floored at 0).

        recent_errors(tasks, {3: 1_700_000_088}, 1_700_000_100)   # "errors: split (12 s ago)"
        recent_errors(tasks, {3: 1_700_000_088}, 1_700_000_100, {3: "ZeroDivisionError: division by zero"})
        # "errors: split (12 s ago): ZeroDivisionError: division by zero"
    """
    info, lines = (tasks.tasks if tasks else {}), error_lines or {}
    newest: dict[str, tuple[int, int]] = {}  # component -> (time, task) of its newest error
    for task, time_secs in error_times.items():
        component = info[task].component if task in info else "?"
        newest[component] = max(newest.get(component, (time_secs, task)), (time_secs, task))
    recent = sorted(
        (max(0, now_secs - t), c, task) for c, (t, task) in newest.items() if now_secs - t < RECENT_ERROR_SECS
    )
    shown = [f"{c} ({age} s ago)" + (f": {lines[task]}" if lines.get(task) else "") for age, c, task in recent]
    return ERRORS_PREFIX + ", ".join(shown) if shown else None


def topology_summary(
    topology_id: str,
    base: StormBase,
    tasks: TopologyTasks | None,
    assignment: Assignment | None,
    now_secs: int,
    supervisors: Iterable[SupervisorInfo] = (),
    error_times: Mapping[int, int] | None = None,
    signs: Signs = Signs(),
) -> Any:
    """``error_times``: each task's newest error time, for :func:`health`, with the ``signs`` nimbus saw."""
    count = len(tasks.tasks) if tasks else 0
    return storm.TopologySummary(
        id=topology_id,
        name=base.name,
        num_tasks=count,
        num_executors=count,  # one executor per task
        num_workers=_workers(assignment),
        uptime_secs=max(0, now_secs - base.launch_time_secs),
        status=base.status.value.upper(),
        owner=base.owner or None,
        sched_status=health(
            assignment,
            supervisors,
            tasks=tasks,
            error_times=error_times,
            now_secs=now_secs,
            error_lines=signs.error_lines,
            window=signs.window,
            restarts=signs.restarts,
        ),
    )


def supervisor_summary(info: SupervisorInfo, used_ports: int) -> Any:
    return storm.SupervisorSummary(
        host=info.host,
        uptime_secs=info.uptime_secs,
        num_workers=len(info.ports),
        num_used_workers=used_ports,
        supervisor_id=info.supervisor_id,
        version=info.version or "VERSION_NOT_PROVIDED",
    )


def nimbus_summaries(master: NimbusMaster | None, slaves: Iterable[NimbusSlave], now_secs: int) -> list[Any]:
    """Leader first, then followers sorted by address."""
    result = []
    if master is not None:
        result.append(
            storm.NimbusSummary(
                host=master.host,
                port=master.port,
                isLeader=True,
                version=STORM_VERSION,
                uptime_secs=max(0, now_secs - master.since_secs),
                tlsPort=master.tls_port or None,
            )
        )
    for slave in sorted(slaves, key=lambda s: (s.host, s.port)):
        result.append(
            storm.NimbusSummary(
                host=slave.host,
                port=slave.port,
                isLeader=False,
                version=STORM_VERSION,
                uptime_secs=slave.uptime_secs,
                tlsPort=slave.tls_port or None,
            )
        )
    return result


def cluster_summary(
    supervisors: Iterable[SupervisorInfo],
    topologies: Mapping[str, tuple[StormBase, TopologyTasks | None, Assignment | None]],
    master: NimbusMaster | None,
    slaves: Iterable[NimbusSlave],
    now_secs: int,
    error_times: Mapping[str, Mapping[int, int]] | None = None,
    signs: Mapping[str, Signs] | None = None,
) -> Any:
    """``error_times``: topology id → each task's newest error time
    (:func:`squall.core.zk.errors.newest_error_times`); ``signs``: topology id → what nimbus saw of it
    (:class:`Signs`)."""
    error_times, signs = error_times or {}, signs or {}
    supervisors = list(supervisors)
    used: dict[str, int] = {}
    for _, _, assignment in topologies.values():
        for w in assignment.workers if assignment else ():
            used[w.supervisor_id] = used.get(w.supervisor_id, 0) + 1
    nimbuses = nimbus_summaries(master, slaves, now_secs)
    return storm.ClusterSummary(
        supervisors=[
            supervisor_summary(s, used.get(s.supervisor_id, 0))
            for s in sorted(supervisors, key=lambda s: s.supervisor_id)
        ],
        topologies=[
            topology_summary(tid, *parts, now_secs, supervisors, error_times.get(tid), signs.get(tid, Signs()))
            for tid, parts in sorted(topologies.items())
        ],
        nimbuses=nimbuses,
        nimbus_uptime_secs=nimbuses[0].uptime_secs if nimbuses else 0,
    )


def topology_info(
    topology_id: str,
    base: StormBase,
    tasks: TopologyTasks | None,
    assignment: Assignment | None,
    errors: Mapping[int, Sequence[TaskError]],
    now_secs: int,
    beats: Mapping[int, TaskBeat] | None = None,
    supervisors: Iterable[SupervisorInfo] = (),
    windows: Mapping[int, Mapping[str, TaskStats]] | None = None,
    restarts: Sequence[int] = (),
) -> Any:
    """One executor per task, located by the assignment, with the stats of its latest beat as ``:all-time``
    and its ``windows`` (task → window key → counts, :mod:`nimbus.windows`); errors grouped by component,
    newest first. Uptime is the task's own while it beats, else since placed. ``restarts``: when nimbus moved
    dead workers of the topology, for :func:`health`."""
    info = tasks.tasks if tasks else {}
    beats, windows = beats or {}, windows or {}
    placed_secs = assignment.task_start_secs if assignment else {}
    executors = []
    for w in assignment.workers if assignment else ():
        for t in w.tasks:
            beat = beats.get(t)
            uptime = beat.uptime_secs if beat else now_secs - placed_secs.get(t, now_secs)
            stats = None
            if beat is not None and beat.stats is not None and t in info:
                stats = to_executor_stats(beat.stats, spout=info[t].type is ComponentType.SPOUT, windows=windows.get(t))
            executors.append(
                storm.ExecutorSummary(
                    executor_info=storm.ExecutorInfo(task_start=t, task_end=t),
                    component_id=info[t].component if t in info else "?",
                    host=w.host,
                    port=w.port,
                    uptime_secs=max(0, uptime),
                    stats=stats,
                    supervisor_id=w.supervisor_id or None,
                )
            )
    executors.sort(key=lambda e: e.executor_info.task_start)
    by_component: dict[str, list[Any]] = {}
    for task_id, task_errors in errors.items():
        for e in task_errors:
            by_component.setdefault(info[task_id].component if task_id in info else "?", []).append(
                storm.ErrorInfo(error=e.error, error_time_secs=e.time_secs, host=e.host or None, port=e.port or None)
            )
    for infos in by_component.values():
        infos.sort(key=lambda e: -e.error_time_secs)
    newest = {task: max(task_errors, key=lambda e: e.time_secs) for task, task_errors in errors.items() if task_errors}
    return storm.TopologyInfo(
        id=topology_id,
        name=base.name,
        uptime_secs=max(0, now_secs - base.launch_time_secs),
        executors=executors,
        status=base.status.value.upper(),
        errors=by_component,
        owner=base.owner or None,
        sched_status=health(
            assignment,
            supervisors,
            tasks=tasks,
            now_secs=now_secs,
            restarts=restarts,
            error_times={task: newest[task].time_secs for task in newest},
            error_lines={task: error_summary(newest[task].error) for task in newest},
            window={task: w[HEALTH_WINDOW] for task, w in windows.items() if HEALTH_WINDOW in w},
        ),
    )
