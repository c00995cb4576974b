"""What a scheduler sees and what it returns: plain immutable values, no I/O.

Nimbus builds a :class:`ScheduleRequest` from ZooKeeper (supervisors, tasks, old assignment) and its
heartbeat monitor (dead tasks); a scheduler turns it into a list of
:class:`~squall.core.zk.records.WorkerAssignment` or raises :class:`ScheduleError`.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from squall.core.thrift import storm
from squall.core.topology import component_tasks
from squall.core.zk.records import TopologyTasks, WorkerAssignment


class ScheduleError(Exception):
    """The topology cannot be placed; the message says why and what would fix it."""


class AssignType(enum.Enum):
    NEW = "new"  # first assignment of a topology id
    REBALANCE = "rebalance"  # operator asked; everything but unstopped workers may move
    MONITOR = "monitor"  # after failures: only workers with dead tasks move


@dataclass(frozen=True)
class Supervisor:
    """A live supervisor; ``used_ports`` are the ports held by *other* topologies."""

    id: str
    host: str
    ports: tuple[int, ...]
    used_ports: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Component:
    """A component as the scheduler needs it: its tasks, whom it talks to, its own conf."""

    id: str
    tasks: tuple[int, ...]
    inputs: frozenset[str] = frozenset()  # components this one reads from
    conf: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_system(self) -> bool:
        return self.id.startswith("__")


@dataclass(frozen=True)
class ScheduleRequest:
    topology_id: str
    components: tuple[Component, ...]
    conf: Mapping[str, Any]  # cluster conf merged with the topology conf
    supervisors: tuple[Supervisor, ...]
    assign_type: AssignType = AssignType.NEW
    reassign: bool = False  # rebalance -r: also move workers that could stay put
    old_workers: tuple[WorkerAssignment, ...] = ()  # current assignment, or the last one of this name for NEW
    dead_tasks: frozenset[int] = frozenset()


def scheduler_components(system: storm.StormTopology, tasks: TopologyTasks) -> tuple[Component, ...]:
    """The system topology as the scheduler sees it: tasks, source components, json_conf; sorted by id."""
    by_component = component_tasks(tasks)
    commons = {cid: spec.common for specs in (system.spouts, system.bolts) for cid, spec in specs.items()}
    return tuple(
        Component(
            id=cid,
            tasks=tuple(by_component.get(cid, ())),
            inputs=frozenset(source.componentId for source in commons[cid].inputs),
            conf=json.loads(commons[cid].json_conf or "{}"),
        )
        for cid in sorted(commons)
    )
