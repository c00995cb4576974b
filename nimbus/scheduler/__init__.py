"""Schedulers: pure functions from a cluster snapshot and a topology to worker assignments.

``storm.scheduler`` picks one: ``default`` (JStorm's topology scheduler) or ``even`` (Storm's
round robin over interleaved slots).
"""

from __future__ import annotations

from nimbus.scheduler import default, even
from nimbus.scheduler.model import AssignType, Component, ScheduleError, ScheduleRequest, Supervisor
from squall.topology import ACKER, TOPOLOGY_MASTER
from squall.zk.records import WorkerAssignment

__all__ = ["ACKER", "TOPOLOGY_MASTER", "AssignType", "Component", "ScheduleError", "ScheduleRequest",
           "Supervisor", "WorkerAssignment", "schedule"]


def schedule(request: ScheduleRequest) -> list[WorkerAssignment]:
    """The assignment of ``request.topology_id``, by the scheduler its conf names."""
    name = request.conf.get("storm.scheduler", "default")
    schedulers = {"default": default.schedule, "even": even.schedule}
    if name not in schedulers:
        raise ScheduleError(f"unknown storm.scheduler {name!r}; use one of {sorted(schedulers)}")
    return schedulers[name](request)
