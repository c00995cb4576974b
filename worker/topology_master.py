"""The ``__topology_master`` task: every task's heartbeat (with its stats) comes here, and one report per
period goes to nimbus (``updateTaskHeartbeat``), so nimbus's load grows with topologies, not with tasks (JStorm).
A task's first beat (new, or restarted: its uptime went down) is reported at once, so nimbus sees a new
or restarted worker running without waiting a period."""

from __future__ import annotations

import time
from typing import Any

from squall.core.stats import task_stats
from squall.core.system_ids import MASTER_HEARTBEAT_STREAM
from squall.core.zk.records import TaskBeat
from worker.executor.base import Executor


class TopologyMaster(Executor):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The latest beat of every task of the topology, stamped with this worker's clock on arrival.
        self.beats: dict[int, TaskBeat] = {}
        self._next_report = 0.0

    def step(self, now: float) -> float:
        self._heartbeat(now)
        take, beats = self.inbox.take, self.beats
        received = started = False
        while (batch := take()) is not None:
            received = True
            wall = int(time.time())
            if batch.stream != MASTER_HEARTBEAT_STREAM:
                continue
            for values in batch.rows:
                task, uptime, *stats = values  # a worker of an older Squall sends no stats
                last = beats.get(task)
                started = started or last is None or uptime < last.uptime_secs  # new, or restarted
                beats[task] = TaskBeat(wall, uptime, task_stats(stats[0]) if stats else None)
        if started or (now >= self._next_report and (received or beats)):
            self._next_report = now + self._beat_every
            self.env.report_beats(dict(beats))
        return max(0.0, min(self._next_beat, self._next_report) - now)
