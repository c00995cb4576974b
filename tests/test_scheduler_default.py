"""JStorm's default scheduler, one test per rule (reference/jstorm.md §5, seeds 000 and 002)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable
from typing import Any

import pytest

from nimbus.scheduler.default import schedule, wanted_workers
from nimbus.scheduler.model import AssignType, Component, ScheduleError, ScheduleRequest, Supervisor
from squall.core.config.keys import default_config
from squall.core.system_ids import ACKER, TOPOLOGY_MASTER
from squall.core.zk.records import WorkerAssignment

PORTS = (6700, 6701, 6702, 6703)


def cluster(n: int, ports: tuple[int, ...] = PORTS, used: dict[int, Iterable[int]] | None = None) -> tuple[Supervisor, ...]:
    used = used or {}
    return tuple(Supervisor(f"sup-{i}", f"host-{i}", ports, frozenset(used.get(i, ()))) for i in range(1, n + 1))


def topology(*spec: tuple[str, int, Iterable[str]], conf: dict[str, dict[str, Any]] | None = None
             ) -> tuple[Component, ...]:
    """Components from (id, task count, inputs); task ids contiguous from 1 in the given order."""
    components, next_id = [], 1
    for component_id, n, inputs in spec:
        tasks = tuple(range(next_id, next_id + n))
        next_id += n
        components.append(Component(component_id, tasks, frozenset(inputs), (conf or {}).get(component_id, {})))
    return tuple(components)


def request(components: tuple[Component, ...], supervisors: tuple[Supervisor, ...], **kwargs: Any) -> ScheduleRequest:
    conf = default_config() | kwargs.pop("conf", {})
    return ScheduleRequest("topo-1-1700000000", components, conf, supervisors, **kwargs)


def tasks_by_component(components: tuple[Component, ...], worker: WorkerAssignment) -> Counter[str]:
    owner = {t: c.id for c in components for t in c.tasks}
    return Counter(owner[t] for t in worker.tasks)


def test_seed_002_example() -> None:
    """6 supervisors x 4 ports, 24 workers; spout 10, bolt 18, ackers 12 (no topology master then)."""
    comps = topology(("spout", 10, ()), ("bolt", 18, ("spout",)), (ACKER, 12, ("spout", "bolt")))
    workers = schedule(request(comps, cluster(6), conf={"topology.workers": 24,
                                                        "topology.master.single.worker": False}))
    assert Counter(w.supervisor_id for w in workers) == {f"sup-{i}": 4 for i in range(1, 7)}
    per_worker = [tasks_by_component(comps, w) for w in workers]
    acker_workers = [w for w, c in zip(workers, per_worker) if c[ACKER]]
    assert len(acker_workers) == 12 and all(c[ACKER] <= 1 for c in per_worker)
    assert Counter(w.supervisor_id for w in acker_workers) == {f"sup-{i}": 2 for i in range(1, 7)}
    assert all(c["bolt"] <= 1 for c in per_worker), "18 bolt tasks over 24 workers: none doubles up"
    assert all(c["bolt"] for c in per_worker if c["spout"]), "every spout task sits beside a bolt it feeds"
    assert sorted(len(w.tasks) for w in workers) == [1] * 8 + [2] * 16


def test_worker_count_is_capped_by_tasks_and_defaults_to_one() -> None:
    comps = topology(("spout", 1, ()), ("bolt", 2, ("spout",)))
    assert len(schedule(request(comps, cluster(3), conf={"topology.workers": 10}))) == 3
    (only,) = schedule(request(comps, cluster(3)))
    assert only.tasks == [1, 2, 3]


def test_topology_master_gets_a_worker_of_its_own_at_ten_workers() -> None:
    comps = topology(("spout", 10, ()), ("bolt", 10, ("spout",)), (TOPOLOGY_MASTER, 1, ()))
    tm_task = comps[-1].tasks[0]
    workers = schedule(request(comps, cluster(3), conf={"topology.workers": 10}))
    assert len(workers) == 11
    assert [w.tasks for w in workers if tm_task in w.tasks] == [[tm_task]]

    shared = schedule(request(comps, cluster(3), conf={"topology.workers": 9}))
    assert len(shared) == 9 and all(w.tasks != [tm_task] for w in shared)

    forced = schedule(request(comps, cluster(3), conf={"topology.workers": 2, "topology.master.single.worker": True}))
    assert len(forced) == 3 and [tm_task] in [w.tasks for w in forced]

    off = schedule(request(comps, cluster(3), conf={"topology.workers": 10, "topology.master.single.worker": False}))
    assert len(off) == 10


def test_with_too_few_free_slots_the_topology_runs_on_those_there_are() -> None:
    # Storm's rule, not JStorm's refusal: nimbus adds workers up to wanted_workers as slots free up.
    comps = topology(("spout", 8, ()))
    workers = schedule(request(comps, cluster(1, used={1: [6700]}), conf={"topology.workers": 5}))
    assert len(workers) == 3 and sorted(t for w in workers for t in w.tasks) == list(range(1, 9))
    assert wanted_workers(request(comps, cluster(1), conf={"topology.workers": 5})) == 5


def test_tasks_and_the_topology_master_cap_the_wanted_workers() -> None:
    assert wanted_workers(request(topology(("spout", 3, ())), cluster(1), conf={"topology.workers": 99})) == 3
    comps = topology(("spout", 12, ()), (TOPOLOGY_MASTER, 1, ()))
    assert wanted_workers(request(comps, cluster(1), conf={"topology.workers": 10})) == 11


def test_short_of_slots_the_topology_master_is_alone_only_when_two_workers_or_more_fit() -> None:
    comps = topology(("spout", 12, ()), (TOPOLOGY_MASTER, 1, ()))
    tm_task = comps[1].tasks[0]
    two = schedule(request(comps, cluster(1, ports=(6700, 6701)), conf={"topology.workers": 10}))
    assert [tm_task] in [w.tasks for w in two]
    one = schedule(request(comps, cluster(1, ports=(6700,)), conf={"topology.workers": 10}))
    assert len(one) == 1 and len(one[0].tasks) == 13


def test_no_free_slot_at_all_is_refused_at_once_naming_the_free_slots() -> None:
    comps = topology(("spout", 8, ()))
    with pytest.raises(ScheduleError, match=r"no free worker slot for topology topo-1-1700000000: needs 5, 0 free "
                                            r"in the cluster; add supervisors"):
        schedule(request(comps, cluster(1, used={1: PORTS}), conf={"topology.workers": 5}))


def test_reserved_workers_are_kept_free() -> None:
    comps = topology(("spout", 8, ()))
    assert len(schedule(request(comps, cluster(2), conf={"topology.workers": 6, "jstorm.reserve.workers": 2}))) == 6
    assert len(schedule(request(comps, cluster(2), conf={"topology.workers": 7, "jstorm.reserve.workers": 2}))) == 6
    with pytest.raises(ScheduleError, match=r"needs 7, 2 free in the cluster, 2 reserved \(jstorm.reserve.workers\)"):
        schedule(request(comps, cluster(2, used={1: PORTS, 2: PORTS[:2]}),
                         conf={"topology.workers": 7, "jstorm.reserve.workers": 2}))


def test_isolation_confines_the_topology_and_counts_capacity_there() -> None:
    comps = topology(("spout", 6, ()))
    conf = {"topology.workers": 6, "isolation.scheduler.machines": ["host-2", "host-3"]}
    workers = schedule(request(comps, cluster(4), conf=conf))
    assert {w.host for w in workers} == {"host-2", "host-3"}
    nine = schedule(request(topology(("spout", 9, ())), cluster(4), conf=conf | {"topology.workers": 9}))
    assert len(nine) == 8 and {w.host for w in nine} == {"host-2", "host-3"}
    with pytest.raises(ScheduleError, match="needs 9, 0 free on its isolation hosts"):
        schedule(request(topology(("spout", 9, ())), cluster(4, used={2: PORTS, 3: PORTS}),
                         conf=conf | {"topology.workers": 9}))
    with pytest.raises(ScheduleError, match=r"no live supervisor on the isolation hosts \['host-9'\]"):
        schedule(request(comps, cluster(4), conf={"isolation.scheduler.machines": ["host-9"]}))


def test_user_defined_workers_come_first_where_asked() -> None:
    comps = topology(("spout", 4, ()), ("bolt", 4, ("spout",)))
    defined = [{"host": "host-3", "port": 6702, "components": {"spout": 2, "bolt": 1}, "mem": 1 << 30, "cpu": 2}]
    workers = schedule(request(comps, cluster(3), conf={"topology.workers": 3, "use.userdefine.assignment": defined}))
    mine = next(w for w in workers if (w.host, w.port) == ("host-3", 6702))
    assert (mine.tasks, mine.mem, mine.cpu) == ([1, 2, 5], 1 << 30, 2)
    assert sorted(t for w in workers for t in w.tasks) == list(range(1, 9))
    with pytest.raises(ScheduleError, match=r"use.userdefine.assignment\[0\]: unknown component 'nope'"):
        schedule(request(comps, cluster(3), conf={"use.userdefine.assignment": [{"components": {"nope": 1}}]}))


def test_old_assignment_of_the_same_name_is_reused() -> None:
    comps = topology(("spout", 4, ()), ("bolt", 4, ("spout",)))
    old = (WorkerAssignment("sup-3", "host-3", 6703, [1, 2, 3, 4]), WorkerAssignment("sup-1", "host-1", 6701, [5, 6, 7, 8]))
    workers = schedule(request(comps, cluster(3), old_workers=old,
                               conf={"topology.workers": 2, "use.old.assignment": True}))
    assert [(w.supervisor_id, w.port, w.tasks) for w in workers] == [("sup-1", 6701, [5, 6, 7, 8]),
                                                                     ("sup-3", 6703, [1, 2, 3, 4])]
    fresh = schedule(request(comps, cluster(3), old_workers=old, conf={"topology.workers": 2}))
    assert [(w.supervisor_id, w.port) for w in fresh] != [("sup-1", 6701), ("sup-3", 6703)]


def test_requested_port_taken_falls_back_to_another_port_on_the_same_host() -> None:
    comps = topology(("spout", 2, ()))
    defined = [{"host": "host-1", "port": 6700, "components": {"spout": 1}}]
    workers = schedule(request(comps, cluster(2, used={1: [6700]}), conf={"topology.workers": 2,
                                                                         "use.userdefine.assignment": defined}))
    mine = next(w for w in workers if w.tasks == [1])
    assert (mine.host, mine.port) == ("host-1", 6701)


def test_workers_go_to_less_loaded_supervisors_first() -> None:
    comps = topology(("spout", 4, ()))
    workers = schedule(request(comps, cluster(3, used={1: [6700, 6701, 6702]}), conf={"topology.workers": 4}))
    assert Counter(w.supervisor_id for w in workers) == {"sup-2": 2, "sup-3": 2}


def test_rebalance_without_reassign_keeps_slots_sticky() -> None:
    comps = topology(("spout", 4, ()), ("bolt", 4, ("spout",)))
    before = schedule(request(comps, cluster(2), conf={"topology.workers": 4}))
    bigger = cluster(4)  # two empty supervisors joined
    sticky = schedule(request(comps, bigger, assign_type=AssignType.REBALANCE, old_workers=tuple(before),
                              conf={"topology.workers": 4}))
    assert [(w.supervisor_id, w.port, w.tasks) for w in sticky] == [(w.supervisor_id, w.port, w.tasks) for w in before]
    moved = schedule(request(comps, bigger, assign_type=AssignType.REBALANCE, old_workers=tuple(before),
                             reassign=True, conf={"topology.workers": 4}))
    assert {w.supervisor_id for w in moved} == {"sup-1", "sup-2", "sup-3", "sup-4"}


def test_monitor_moves_only_workers_with_dead_tasks() -> None:
    comps = topology(("spout", 6, ()), ("bolt", 6, ("spout",)))
    before = schedule(request(comps, cluster(3), conf={"topology.workers": 6}))
    broken = before[2]
    after = schedule(request(comps, cluster(3), assign_type=AssignType.MONITOR, old_workers=tuple(before),
                             dead_tasks=frozenset(broken.tasks[:1]), conf={"topology.workers": 6}))
    assert [w for w in after if w != broken and w in before] == [w for w in before if w != broken]
    (replacement,) = [w for w in after if w not in before]
    assert replacement.tasks == broken.tasks, "the whole worker of a dead task moves"
    assert (replacement.supervisor_id, replacement.port) != (broken.supervisor_id, broken.port)


def test_monitor_keeps_workers_of_a_vanished_supervisor_that_still_heartbeat() -> None:
    comps = topology(("spout", 4, ()))
    before = schedule(request(comps, cluster(2), conf={"topology.workers": 4}))
    on_sup1 = [w for w in before if w.supervisor_id == "sup-1"]
    dead = next(w for w in before if w.supervisor_id == "sup-2")
    after = schedule(request(comps, cluster(2)[1:], assign_type=AssignType.MONITOR, old_workers=tuple(before),
                             dead_tasks=frozenset(dead.tasks), conf={"topology.workers": 4}))
    assert all(w in after for w in on_sup1), "unstopped workers are left running where they are"
    assert sorted(t for w in after for t in w.tasks) == [1, 2, 3, 4]


def test_task_on_differ_node_puts_each_task_on_its_own_node() -> None:
    comps = topology(("spout", 2, ()), ("db-writer", 3, ("spout",)), conf={"db-writer": {"task.on.differ.node": True}})
    workers = schedule(request(comps, cluster(3), conf={"topology.workers": 6}))
    hosts = [w.supervisor_id for w in workers for t in w.tasks if t in comps[1].tasks]
    assert len(set(hosts)) == 3
    with pytest.raises(ScheduleError, match="not enough supervisors to put the tasks of 'db-writer' on different nodes"):
        schedule(request(comps, cluster(2), conf={"topology.workers": 6}))


def test_every_worker_ends_with_average_or_one_more() -> None:
    comps = topology(("spout", 3, ()), ("split", 4, ("spout",)), ("count", 3, ("split",)))
    workers = schedule(request(comps, cluster(2), conf={"topology.workers": 4}))
    assert sorted(len(w.tasks) for w in workers) == [2, 2, 3, 3]


def test_same_input_same_output_whatever_the_supervisor_order() -> None:
    comps = topology(("spout", 7, ()), ("bolt", 13, ("spout",)), (ACKER, 3, ("spout", "bolt")))
    supervisors = list(cluster(5, used={2: [6701], 4: [6700, 6703]}))
    first = schedule(request(comps, tuple(supervisors), conf={"topology.workers": 9}))
    random.Random(7).shuffle(supervisors)
    assert schedule(request(comps, tuple(supervisors), conf={"topology.workers": 9})) == first


def test_sticky_rebalance_still_evens_out_task_counts() -> None:
    comps = topology(("spout", 6, ()))
    lopsided = (WorkerAssignment("sup-1", "host-1", 6700, [1, 2, 3, 4, 5]), WorkerAssignment("sup-2", "host-2", 6700, [6]))
    workers = schedule(request(comps, cluster(2), assign_type=AssignType.REBALANCE, old_workers=lopsided,
                               conf={"topology.workers": 2}))
    assert [(w.supervisor_id, w.port, len(w.tasks)) for w in workers] == [("sup-1", 6700, 3), ("sup-2", 6700, 3)]
    assert set(workers[0].tasks) < {1, 2, 3, 4, 5}, "tasks stay on their old slot while it has room"
