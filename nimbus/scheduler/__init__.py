"""Schedulers: pure functions from a cluster snapshot and a topology to worker assignments.

``storm.scheduler`` picks one: ``default`` (JStorm's topology scheduler) or ``even`` (Storm's
round robin over interleaved slots).
"""

from __future__ import annotations

from types import ModuleType

from nimbus.scheduler import default, even
from nimbus.scheduler.model import AssignType, Component, ScheduleError, ScheduleRequest, Supervisor
from squall.core.system_ids import ACKER, TOPOLOGY_MASTER
from squall.core.zk.records import WorkerAssignment

__all__ = [
    "ACKER",
    "TOPOLOGY_MASTER",
    "AssignType",
    "Component",
    "ScheduleError",
    "ScheduleRequest",
    "Supervisor",
    "WorkerAssignment",
    "schedule",
    "wanted_workers",
]


def schedule(request: ScheduleRequest) -> list[WorkerAssignment]:
    """The assignment of ``request.topology_id``, by the scheduler its conf names."""
    return _scheduler(request).schedule(request)


def wanted_workers(request: ScheduleRequest) -> int:
    """How many workers the scheduler its conf names gives ``request``'s topology when slots are free: with
    fewer free slots it runs on those (Storm's rule), and nimbus adds workers up to this as slots free up."""
    return _scheduler(request).wanted_workers(request)


def _scheduler(request: ScheduleRequest) -> ModuleType:
    name = request.conf.get("storm.scheduler", "default")
    schedulers = {"default": default, "even": even}
    if name not in schedulers:
        raise ScheduleError(f"unknown storm.scheduler {name!r}; use one of {sorted(schedulers)}")
    return schedulers[name]
