"""Storm's stats windows — the last 10 minutes, 3 hours and 1 day (window keys ``"600"``, ``"10800"``,
``"86400"``) beside ``:all-time`` — made by nimbus from the counters tasks already send it.

Storm keeps rolling windows in each executor and ships all four. Squall's tasks send their counters since
they started, exact, in every heartbeat, stamped with the task's uptime in the same tuple; the difference of
two such snapshots is exactly what the task did between them. So nimbus keeps, per task, a few past
snapshots, and a window's count is the latest counters minus the counters as they were one window earlier.
Nothing changes in the worker's hot path or on the wire; every window follows one rule; and the time axis is
the task's own uptime, so neither clock skew nor the topology master's reporting delay bends a window.

How a window is made (:meth:`TaskHistory.windows`):

* the counters one window before the latest snapshot are interpolated between the two kept snapshots around
  that moment, so a window spans its length (exact while a task's rate is steady between the two);
* a task younger than the window counts everything since it started, as Storm's windows do;
* a restarted task (its uptime or any counter went down) starts a new history: its windows count from the
  restart;
* before nimbus has watched a task for a window's length (just after a nimbus restart or a leader change,
  which start with no history), the task's start, counters zero at uptime 0, is the earlier point: the part
  of the window nimbus did not watch is estimated at the task's average rate since it started.

Memory is bounded per task (:data:`MAX_SNAPSHOTS`): snapshots are thinned to Storm's bucket sizes, 20 per
window (30 s for 10 min, 9 min for 3 h, 72 min for 1 day), keeping the first snapshot of each bucket while
it can still be needed. Latencies are averages; a window's is the difference of the total time (average ×
what it timed: a bolt's executed tuples, a spout's acked trees, a bolt's ``processed`` acks for its process
latency) over the difference of the count. A task of an older release sends no process latency: its windows
have none.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields
from typing import Any

from squall.core.zk.records import TaskBeat, TaskStats

#: Window key → (length, bucket) in seconds: Storm's rolling windows have 20 buckets each.
WINDOW_BUCKETS: dict[str, tuple[int, int]] = {"600": (600, 30), "10800": (10800, 540), "86400": (86400, 4320)}
#: Most snapshots one task's history holds: per window its buckets and two more, and the latest.
MAX_SNAPSHOTS = sum(length // bucket + 3 for length, bucket in WINDOW_BUCKETS.values()) + 1
_FINEST = min(bucket for _, bucket in WINDOW_BUCKETS.values())
#: The counters windows are made of: every stat but the latency averages and the user metrics (values as read
#: at the latest beat, served as they are: a gauge has no window, and a user counter is the user's own).
_COUNTS = tuple(
    f.name for f in fields(TaskStats) if f.name not in ("latency_ms", "process_ms", "user_counters", "user_gauges")
)

#: A snapshot's counters as numbers to subtract: per stat, per key; ``latency_ms`` and ``process_ms`` hold total
#: milliseconds.
Totals = dict[str, dict[str, float]]


@dataclass(frozen=True)
class Snapshot:
    """A task's counters since it started (``stats``) at ``uptime`` seconds of its life."""

    uptime: float
    stats: TaskStats


class TaskHistory:
    """One task's thinned past counters, and its windows from them: 10 per second over the last 600 s here.

    >>> history = TaskHistory()
    >>> history.add(30, TaskStats(emitted={"default": 300}))
    >>> history.add(700, TaskStats(emitted={"default": 7000}))
    >>> history.windows()["600"].emitted
    {'default': 6000}
    """

    def __init__(self) -> None:
        self._kept: list[Snapshot] = []
        self._latest: Snapshot | None = None

    def __len__(self) -> int:
        """How many snapshots it holds (the latest included)."""
        return len(self._kept) + bool(self._kept and self._kept[-1] is not self._latest)

    def add(self, uptime: float, stats: TaskStats) -> None:
        """Take in the task's counters at ``uptime``; a restart (uptime or a counter went down) starts over."""
        latest = self._latest
        if latest is not None and (uptime < latest.uptime or _went_down(latest.stats, stats)):
            self._kept.clear()
        snapshot = self._latest = Snapshot(uptime, stats)
        kept = self._kept
        if kept and kept[-1].uptime == uptime:  # the same beat again, or one more in the same second
            kept[-1] = snapshot
        elif not kept or uptime // _FINEST != kept[-1].uptime // _FINEST:
            kept.append(snapshot)
            self._thin()

    def windows(self, keys: Collection[str] = tuple(WINDOW_BUCKETS)) -> dict[str, TaskStats]:
        """The counts of each window of :data:`WINDOW_BUCKETS` (of ``keys`` only) up to the latest snapshot (none
        before any)."""
        latest = self._latest
        if latest is None:
            return {}
        points = [Snapshot(0.0, TaskStats()), *self._kept]
        if points[-1] is not latest:
            points.append(latest)
        times = [p.uptime for p in points]
        now = _totals(latest.stats)
        result = {}
        for window, (length, _) in WINDOW_BUCKETS.items():
            if window not in keys:
                continue
            start = latest.uptime - length
            if start <= 0:  # the task is younger than the window: all it did is in it
                result[window] = latest.stats
                continue
            i = bisect.bisect_right(times, start) - 1  # the last point at or before the window's start
            before, after = points[i], points[i + 1]
            share = (start - before.uptime) / (after.uptime - before.uptime)
            result[window] = _stats(now, _between(_totals(before.stats), _totals(after.stats), share))
        return result

    def _thin(self) -> None:
        """Keep the latest, and each snapshot that is the first of its bucket in a window that may still need
        it (younger than the window and two buckets). First-of-bucket is kept by thinning, as buckets nest."""
        end = self._kept[-1].uptime
        kept, previous = [], None
        for s in self._kept:
            if s is self._kept[-1] or any(
                s.uptime >= end - length - 2 * bucket
                and (previous is None or previous.uptime // bucket != s.uptime // bucket)
                for length, bucket in WINDOW_BUCKETS.values()
            ):
                kept.append(s)
            previous = s
        self._kept = kept


class StatsWindows:
    """Every task's :class:`TaskHistory`, by topology: what nimbus keeps to serve Storm's windows.

    >>> windows = StatsWindows()
    >>> windows.record("wc-1-1700000000", {3: TaskBeat(0, 42, TaskStats(emitted={"default": 7}))})
    >>> windows.windows("wc-1-1700000000")[3]["600"].emitted
    {'default': 7}
    """

    def __init__(self) -> None:
        self._histories: dict[str, dict[int, TaskHistory]] = {}

    def record(self, topology_id: str, beats: Mapping[int, TaskBeat]) -> None:
        """Take in a topology master's report (a beat without stats adds nothing)."""
        histories = self._histories.setdefault(topology_id, {})
        for task, beat in beats.items():
            if beat.stats is not None:
                histories.setdefault(task, TaskHistory()).add(beat.uptime_secs, beat.stats)

    def windows(
        self, topology_id: str, keys: Collection[str] = tuple(WINDOW_BUCKETS)
    ) -> dict[int, dict[str, TaskStats]]:
        """Task → window key (of ``keys``) → its counts in that window."""
        return {task: h.windows(keys) for task, h in self._histories.get(topology_id, {}).items()}

    def forget(self, topology_id: str) -> None:
        """Drop a removed topology."""
        self._histories.pop(topology_id, None)


def _went_down(before: TaskStats, after: TaskStats) -> bool:
    for name in _COUNTS:
        now = getattr(after, name)
        if any(now.get(key, 0) < n for key, n in getattr(before, name).items()):
            return True
    return False


def _totals(stats: TaskStats) -> Totals:
    """Counters as numbers to subtract; a latency average times what it timed (a bolt executes, a spout's
    latency is its acked trees': a spout executes nothing)."""
    totals: Totals = {name: dict(getattr(stats, name)) for name in _COUNTS}
    timed = stats.executed or stats.acked
    totals["latency_ms"] = {key: ms * timed.get(key, 0) for key, ms in stats.latency_ms.items()}
    totals["process_ms"] = {key: ms * stats.processed.get(key, 0) for key, ms in stats.process_ms.items()}
    return totals


def _between(before: Totals, after: Totals, share: float) -> Totals:
    """The totals ``share`` of the way from ``before`` to ``after``."""
    return {
        name: {
            key: before[name].get(key, 0) + (value - before[name].get(key, 0)) * share
            for key, value in after[name].items()
        }
        for name in after
    }


def _stats(now: Totals, base: Totals) -> TaskStats:
    """What was counted between ``base`` and ``now``; keys with nothing counted are left out, as in
    :class:`TaskStats`."""
    counts: dict[str, Any] = {  # keyword arguments by field name, which a checker cannot match to the fields
        name: {key: n for key, value in now[name].items() if (n := round(value - base[name].get(key, 0))) > 0}
        for name in _COUNTS
    }
    timed = "executed" if now["executed"] else "acked"
    return TaskStats(
        **counts,
        latency_ms=_average(now, base, "latency_ms", timed),
        process_ms=_average(now, base, "process_ms", "processed"),
    )


def _average(now: Totals, base: Totals, total: str, timed: str) -> dict[str, float]:
    """Per key, the average of ``total`` between ``base`` and ``now``: its difference over ``timed``'s."""
    averages = {}
    for key, value in now[total].items():
        count = now[timed].get(key, 0) - base[timed].get(key, 0)
        if count >= 0.5:
            averages[key] = max(0.0, (value - base[total].get(key, 0)) / count)
    return averages
