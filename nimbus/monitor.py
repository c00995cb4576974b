"""Task liveness, judged on nimbus's own clock.

A task is alive while the beat it reports keeps *changing*; when each change happened is read from
nimbus's clock, never from the beat, so a worker with a skewed clock is judged like any other and a
zombie that repeats its last beat dies. Pure logic: the caller passes ``now`` (epoch seconds from
the nimbus clock) and does the I/O (receiving beats, persisting :meth:`HeartbeatTracker.snapshot` to
``/taskbeats/<id>``, pushing a monitor assign event for the dead workers).

Supervisor liveness is not judged here: that is the ephemeral ``/supervisors/<id>`` node. A worker
whose supervisor vanished stays alive as long as its tasks keep beating.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from squall.core.zk.records import Assignment, TaskBeat, TaskHeartbeats, WorkerAssignment


@dataclass(frozen=True)
class _Seen:
    beat: TaskBeat
    changed_secs: int  # nimbus time when ``beat`` was first seen


class HeartbeatTracker:
    """The last beat of every task and when, on nimbus's clock, it last changed."""

    def __init__(self) -> None:
        self._seen: dict[str, dict[int, _Seen]] = {}
        self._watched_from = 0  # nimbus time of the last pardon: no task is judged on time before it

    def record(self, topology_id: str, beats: Mapping[int, TaskBeat], now: int) -> None:
        """Take in reported beats; only a beat that differs from the last one seen refreshes its task."""
        seen = self._seen.setdefault(topology_id, {})
        for task, beat in beats.items():
            last = seen.get(task)
            if last is None or last.beat != beat:
                seen[task] = _Seen(beat, now)

    def dead_tasks(
        self, topology_id: str, assignment: Assignment, now: int, *, task_timeout_secs: int, launch_grace_secs: int
    ) -> frozenset[int]:
        """Assigned tasks that are dead at ``now``.

        Within ``launch_grace_secs`` of its start (``assignment.task_start_secs``, written on nimbus's
        clock whenever the task is placed or moved) a task is alive. After that it is dead if it was
        never heard from (call :meth:`forget_tasks` for moved tasks, so their old beat does not count)
        or if its beat has not changed for more than ``task_timeout_secs`` — counting from the last
        :meth:`pardon` at the earliest, heard from or not.
        """
        seen = self._seen.get(topology_id, {})
        fallback_start = assignment.timestamp_ms // 1000  # records without start times: the assignment's
        dead = set()
        for worker in assignment.workers:
            for task in worker.tasks:
                start = assignment.task_start_secs.get(task, fallback_start)
                if now - start <= launch_grace_secs:
                    continue
                last = seen.get(task)
                heard = self._watched_from if last is None else max(last.changed_secs, self._watched_from)
                if now - heard > task_timeout_secs:
                    dead.add(task)
        return frozenset(dead)

    def dead_workers(
        self, topology_id: str, assignment: Assignment, now: int, *, task_timeout_secs: int, launch_grace_secs: int
    ) -> tuple[WorkerAssignment, ...]:
        """Workers holding any dead task, in assignment order: one dead task makes its whole process suspect."""
        dead = self.dead_tasks(
            topology_id, assignment, now, task_timeout_secs=task_timeout_secs, launch_grace_secs=launch_grace_secs
        )
        return tuple(w for w in assignment.workers if dead.intersection(w.tasks))

    def knows(self, topology_id: str) -> bool:
        """Beats of ``topology_id`` were taken in (or restored) and it was not forgotten since: it is alive."""
        return topology_id in self._seen

    def pardon(self, now: int) -> None:
        """Every task counts as heard from at ``now``, also one this nimbus never heard (Storm starts each task
        at a new leader's first look): after a time nimbus did not watch (not leading, ZooKeeper unreachable),
        tasks get a full timeout to be heard instead of being judged on nimbus's blindness.

            tracker.pardon(now)  # no task is dead before now + task_timeout_secs
        """
        self._watched_from = max(self._watched_from, now)

    def forget(self, topology_id: str) -> None:
        """Drop a removed topology."""
        self._seen.pop(topology_id, None)

    def forget_tasks(self, topology_id: str, tasks: Iterable[int]) -> None:
        """Drop tasks that were moved or removed by a reassignment, so an old beat cannot vouch for them."""
        seen = self._seen.get(topology_id, {})
        for task in tasks:
            seen.pop(task, None)

    def snapshot(self, topology_id: str, topology_master_id: int) -> TaskHeartbeats:
        """The latest beats, for ``/taskbeats/<id>`` once per monitor cycle."""
        seen = self._seen.get(topology_id, {})
        return TaskHeartbeats(topology_master_id, {task: s.beat for task, s in sorted(seen.items())})

    def restore(self, topology_id: str, heartbeats: TaskHeartbeats, now: int) -> None:
        """Reload a snapshot after a restart or takeover; restored beats count as seen at ``now``.

        The snapshot does not say when beats last changed, so every restored task gets a full
        timeout from ``now`` rather than being judged on time this nimbus did not watch.
        """
        self._seen[topology_id] = {task: _Seen(beat, now) for task, beat in heartbeats.beats.items()}


class Restarts:
    """The workers nimbus moved because their tasks stopped beating, per topology, kept ``keep_secs`` for Health
    (:func:`nimbus.queries.restarted_workers`). A worker judged dead again while its move is still pending
    (the same assignment: no free slot yet, the assign thread behind) counts once.

        restarts = Restarts(keep_secs=600)
        restarts.record("wc-1-1", ["host-1:6700"], assignment_ms=1_700_000_000_000, now=1_700_000_100)
        # ["host-1:6700"]
        restarts.times("wc-1-1", now=1_700_000_160)   # [1700000100]
    """

    def __init__(self, keep_secs: int) -> None:
        self.keep_secs = keep_secs
        self._seen: dict[str, dict[tuple[str, int], int]] = {}  # topology → (worker, assignment ms) → when

    def record(self, topology_id: str, workers: Iterable[str], *, assignment_ms: int, now: int) -> list[str]:
        """Take in the workers (``host:port``) judged dead under the assignment of ``assignment_ms``; returns those
        not taken in before under it, which are the new restarts."""
        seen = self._seen[topology_id] = self._kept(topology_id, now)
        new = [w for w in workers if (w, assignment_ms) not in seen]
        for worker in new:
            seen[(worker, assignment_ms)] = now
        return new

    def times(self, topology_id: str, now: int) -> list[int]:
        """When each restart still kept happened, oldest first."""
        return sorted(self._kept(topology_id, now).values())

    def forget(self, topology_id: str) -> None:
        """Drop a removed topology."""
        self._seen.pop(topology_id, None)

    def _kept(self, topology_id: str, now: int) -> dict[tuple[str, int], int]:
        return {key: t for key, t in self._seen.get(topology_id, {}).items() if now - t < self.keep_secs}
