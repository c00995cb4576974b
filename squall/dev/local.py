"""Local mode: a whole topology in this process, with no daemon and no ZooKeeper (``storm local``).

It compiles the topology with nimbus's own functions (validation, normalization, system topology,
task ids) and runs it on the worker runtime with every task in one worker, so a topology behaves
here as it does on a cluster: same executors, same groupings, same acker.

    with LocalTopology(wordcount.topology(rounds=10)) as local:
        ...                                   # running, active

``storm local FILE`` (:mod:`squall.cli.local`) runs a topology file this way.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from squall.api.dsl import Topology
from squall.core.config.keys import default_config, without_secrets
from squall.core.thrift import storm
from squall.core.topology import make_tasks, normalize, system_topology, topology_id, validate_topology
from squall.core.zk.records import TaskBeat
from worker.executor.base import Executor
from worker.layout import TopologyLayout, build_layout, place_all
from worker.runtime import WorkerRuntime


class LocalTopology:
    """One topology running in this process until :meth:`stop` (or the ``with`` block) ends it: Storm's
    LocalCluster for one topology, for tests and development::

        with LocalTopology(wordcount.topology(rounds=10), {"topology.message.timeout.secs": 5}) as local:
            local.runtime.failed.wait(5)                  # let it run 5 s (returns early if a task fails)
            print(local.component("count").counts)        # a task's bolt object (its first task's)
            print(local.tasks("split")[0].stats.executed) # an executor and its counters

    ``topology`` is a DSL :class:`~squall.api.dsl.Topology` or a built ``(StormTopology, conf)`` pair;
    ``conf`` overrides cluster defaults and the topology's conf; ``resources`` is the working directory of
    its shell components (a cluster gives them the package's ``resources/``; default: this process's
    working directory). Bad topologies raise ``InvalidTopologyException`` here with nimbus's words.
    """

    def __init__(
        self,
        topology: Topology | tuple[storm.StormTopology, Mapping[str, Any]],
        conf: Mapping[str, Any] | None = None,
        *,
        active: bool = True,
        cluster: Mapping[str, Any] | None = None,
        resources: str | Path | None = None,
    ) -> None:
        self.layout, self.conf = compile_topology(topology, conf, cluster=cluster)
        self.topology_id = self.layout.topology_id
        self.errors: list[tuple[int, str]] = []
        self.beats: dict[int, TaskBeat] = {}
        self.runtime = WorkerRuntime(
            self.layout,
            place_all(self.layout),
            self.conf,
            report_error=lambda task, text: self.errors.append((task, text)),
            report_beats=self.beats.update,
            resources_dir=Path(resources) if resources is not None else None,
        )
        self._active = active

    def start(self) -> LocalTopology:
        """Start every task (``with`` does it), active unless built with ``active=False``."""
        self.runtime.start()
        self.runtime.set_active(self._active)
        return self

    def activate(self) -> None:
        """As ``storm activate``: spouts get ``activate`` and ``next_tuple`` calls resume."""
        self.runtime.set_active(True)

    def deactivate(self) -> None:
        """As ``storm deactivate``: spouts get ``deactivate`` and no ``next_tuple`` until activated."""
        self.runtime.set_active(False)

    def stop(self) -> None:
        """Stop every task (``close``/``cleanup`` called); the end of the ``with`` block does it."""
        self.runtime.stop()

    def __enter__(self) -> LocalTopology:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def tasks(self, component: str) -> list[Executor]:
        """The executors of ``component`` (for tests and benchmarks: stats, spout pending, component objects)."""
        return [self.runtime.executors[t] for t in self.layout.component_tasks[component]]

    def component(self, component: str, index: int = 0) -> Any:
        """The user object (spout or bolt) of one of ``component``'s tasks, once it has started."""
        executor = self.tasks(component)[index]
        return getattr(executor, "spout", None) or getattr(executor, "bolt", None)


def compile_topology(
    topology: Topology | tuple[storm.StormTopology, Mapping[str, Any]],
    conf: Mapping[str, Any] | None = None,
    *,
    cluster: Mapping[str, Any] | None = None,
) -> tuple[TopologyLayout, dict[str, Any]]:
    """What nimbus would make of a submission (validation, normalization, system topology, task ids),
    as a worker layout and the conf its tasks see: ``cluster`` (default: built-in defaults) < topology
    conf < ``conf``."""
    topology_conf: Mapping[str, Any]
    if isinstance(topology, Topology):
        name = topology.name
        thrift, topology_conf = topology.build()
    else:
        thrift, topology_conf = topology
        name = topology_conf.get("topology.name") or "local"
    cluster = dict(cluster) if cluster is not None else default_config()
    submitted = {**topology_conf, **(conf or {})}
    validate_topology(name, thrift, {**cluster, **submitted})
    normalized, normal_conf = normalize(thrift, submitted, name=name)
    normal_conf["topology.id"] = topology_id(name, 1, time.time())
    full = without_secrets({**cluster, **normal_conf})  # as a worker's tasks: no daemon credential
    system = system_topology(normalized, full)
    return build_layout(normal_conf["topology.id"], system, make_tasks(system), full), full
