"""What a worker knows about its topology: components, streams, subscribers, and where each task runs.

Pure values built from the system topology, ``/tasks/<id>`` and ``/assignments/<id>`` (or, in local
mode, from the compiled topology alone), so routing decisions need no lookup at emit time and a
refresh is "build a new layout, swap it in".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

from squall.api.tuple import Fields
from squall.core.thrift import storm
from squall.core.topology import component_tasks
from squall.core.zk.records import Assignment, ComponentType, TopologyTasks

Address = tuple[str, int]


class LayoutError(ValueError):
    """The topology, its tasks and its assignment do not fit together (e.g. a task of no component)."""


@dataclass(frozen=True)
class StreamSpec:
    fields: Fields
    direct: bool


@dataclass(frozen=True)
class Subscription:
    """``component`` subscribes to a stream with ``grouping``; its tasks are the possible targets."""

    component: str
    grouping: storm.Grouping
    tasks: tuple[int, ...]


@dataclass(frozen=True)
class ComponentSpec:
    id: str
    kind: ComponentType
    obj: storm.ComponentObject
    #: The component's effective conf: topology conf overlaid with its own json_conf.
    conf: Mapping[str, Any]
    streams: Mapping[str, StreamSpec]


@dataclass(frozen=True)
class TopologyLayout:
    topology_id: str
    name: str
    components: Mapping[str, ComponentSpec]
    component_tasks: Mapping[str, tuple[int, ...]]
    task_component: Mapping[int, str]
    #: (source component, stream) → who subscribes, in subscriber-id order.
    subscribers: Mapping[tuple[str, str], tuple[Subscription, ...]]

    def fields(self, component: str, stream: str) -> Fields | None:
        spec = self.components.get(component)
        info = spec.streams.get(stream) if spec else None
        return info.fields if info else None


class Origin(NamedTuple):
    """Who sends a stream: the source task's component and the stream's fields."""

    component: str
    fields: Fields


class Refused(NamedTuple):
    """Why no task of the topology sends a (source task, stream): the reason counted, and a detail for the log."""

    reason: str
    detail: str


class Origins(dict[tuple[int, str], "Origin | Refused"]):
    """(source task, stream) → its :class:`Origin` in ``layout``, or why there is none (:class:`Refused`): what a
    worker checks every batch from another worker against (:class:`worker.wire.Decoder`), looked up in the layout
    once per pair. Misses are not kept, so a peer naming made-up tasks or streams grows nothing.

        origins = Origins(layout)
        origins[(3, "default")]         # Origin(component='split', fields=Fields(('word',)))
        origins.reset(new_layout)       # a refresh: looked up afresh
    """

    def __init__(self, layout: TopologyLayout) -> None:
        super().__init__()
        self.layout = layout

    def reset(self, layout: TopologyLayout) -> None:
        self.layout = layout
        self.clear()

    def __missing__(self, key: tuple[int, str]) -> Origin | Refused:
        source, stream = key
        component = self.layout.task_component.get(source)
        if component is None:
            return Refused("unknown source task", "no task of the topology has this id")
        fields = self.layout.fields(component, stream)
        if fields is None:
            return Refused("undeclared stream", f"{component!r} declares no such stream")
        origin = self[key] = Origin(component, fields)
        return origin


@dataclass(frozen=True)
class Placement:
    """Which tasks run in this worker, and the worker address of every other task.

    The remote addresses are the only live routes: a worker sends only to its current :attr:`peers`,
    waits only for them at start-up, and drops what it held for a worker that left the assignment.

        >>> p = Placement(frozenset({1}), {2: ("h", 6700), 3: ("h", 6700), 4: ("g", 6701)})
        >>> sorted(p.peers)
        [('g', 6701), ('h', 6700)]
    """

    local: frozenset[int]
    remote: Mapping[int, Address]

    @cached_property
    def peers(self) -> frozenset[Address]:
        """The other workers of the assignment: the ones this worker connects to."""
        return frozenset(self.remote.values())


def build_layout(
    topology_id: str, system: storm.StormTopology, tasks: TopologyTasks, conf: Mapping[str, Any]
) -> TopologyLayout:
    """The layout of a system topology (see :func:`squall.core.topology.system_topology`) with its task ids."""
    by_component = {cid: tuple(ids) for cid, ids in component_tasks(tasks).items()}
    specs = {
        **{cid: (ComponentType.SPOUT, s.spout_object, s.common) for cid, s in system.spouts.items()},
        **{cid: (ComponentType.BOLT, b.bolt_object, b.common) for cid, b in system.bolts.items()},
    }
    unknown = sorted(set(by_component) - set(specs))
    if unknown:
        raise LayoutError(f"tasks of {unknown} belong to no component of the topology")
    components = {}
    subscribers: dict[tuple[str, str], list[Subscription]] = {}
    for cid, (kind, obj, common) in sorted(specs.items()):
        own = json.loads(common.json_conf or "{}")
        streams = {
            sid: StreamSpec(Fields(info.output_fields), bool(info.direct)) for sid, info in common.streams.items()
        }
        components[cid] = ComponentSpec(cid, kind, obj, {**conf, **own}, streams)
        for source, grouping in common.inputs.items():
            subscribers.setdefault((source.componentId, source.streamId), []).append(
                Subscription(cid, grouping, by_component.get(cid, ()))
            )
    return TopologyLayout(
        topology_id=topology_id,
        name=conf.get("topology.name") or topology_id,
        components=components,
        component_tasks={cid: by_component.get(cid, ()) for cid in components},
        task_component={task: info.component for task, info in tasks.tasks.items()},
        subscribers={key: tuple(subs) for key, subs in subscribers.items()},
    )


def place(assignment: Assignment, supervisor_id: str, port: int) -> Placement:
    """This worker's tasks (the slot ``supervisor_id:port``) and where the others run."""
    local: set[int] = set()
    remote: dict[int, Address] = {}
    for worker in assignment.workers:
        if worker.supervisor_id == supervisor_id and worker.port == port:
            local.update(worker.tasks)
        else:
            remote.update((task, (worker.host, worker.port)) for task in worker.tasks)
    return Placement(frozenset(local), remote)


def place_all(layout: TopologyLayout) -> Placement:
    """Local mode: every task in this one process."""
    return Placement(frozenset(layout.task_component), {})
