"""Storm's EvenScheduler, one test per rule (reference/storm.md §4.2, seed 001)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from nimbus.scheduler import schedule as schedule_by_conf
from nimbus.scheduler.even import schedule, sort_slots
from nimbus.scheduler.model import AssignType, Component, ScheduleError, ScheduleRequest, Supervisor
from squall.core.config.keys import default_config
from squall.core.system_ids import ACKER
from squall.core.zk.records import WorkerAssignment

TOPOLOGY_ID = "topo-1-1700000000"


def supervisors(spec: Mapping[str, Iterable[int]], used: Mapping[str, Iterable[int]] | None = None
                ) -> tuple[Supervisor, ...]:
    """Supervisors from {id: ports}; the host is the id, ``used`` are ports of other topologies."""
    used = used or {}
    return tuple(Supervisor(sid, sid, tuple(ports), frozenset(used.get(sid, ()))) for sid, ports in spec.items())


def components(*spec: tuple[str, int]) -> tuple[Component, ...]:
    """Components from (id, task count); task ids contiguous from 1 in the given order."""
    result, next_id = [], 1
    for component_id, n in spec:
        result.append(Component(component_id, tuple(range(next_id, next_id + n))))
        next_id += n
    return tuple(result)


def request(comps: tuple[Component, ...], sups: tuple[Supervisor, ...], workers: int, **kwargs: Any
            ) -> ScheduleRequest:
    conf = default_config() | {"storm.scheduler": "even", "topology.workers": workers} | kwargs.pop("conf", {})
    return ScheduleRequest(TOPOLOGY_ID, comps, conf, sups, **kwargs)


def layout(workers: list[WorkerAssignment]) -> dict[str, list[int]]:
    """``host:port -> tasks``, the shape the examples are written in."""
    return {w.host_port: w.tasks for w in workers}


# --- sort_slots -------------------------------------------------------------------------------------


def test_sort_slots_storm_example() -> None:
    """SchedulerModelTest.testSortSlots: biggest node first, ports ascending, then interleaved."""
    slots = [("s1", 6700), ("s1", 6701), ("s2", 6700), ("s2", 6701), ("s2", 6702),
             ("s3", 6700), ("s3", 6703), ("s3", 6702), ("s3", 6701)]
    assert sort_slots(slots) == [("s3", 6700), ("s2", 6700), ("s1", 6700), ("s3", 6701), ("s2", 6701),
                                 ("s1", 6701), ("s3", 6702), ("s2", 6702), ("s3", 6703)]


def test_sort_slots_ignores_input_order_and_breaks_ties_by_id() -> None:
    slots = [("b", 2), ("a", 2), ("b", 1), ("a", 1), ("c", 9)]
    assert sort_slots(slots) == sort_slots(reversed(slots)) == [("a", 1), ("b", 1), ("c", 9), ("a", 2), ("b", 2)]
    assert sort_slots([]) == []


# --- seed 001 and storm.md's worked example ----------------------------------------------------------


def test_seed_001_more_tasks_than_slots() -> None:
    """(a) tasks [1 2 3 4] over host1:port1, host2:port1: dealt round robin, 1,3 and 2,4."""
    sups = supervisors({"host1": [6700], "host2": [6700]})
    workers = schedule(request(components(("spout", 4)), sups, workers=2))
    assert layout(workers) == {"host1:6700": [1, 3], "host2:6700": [2, 4]}


def test_seed_001_fewer_tasks_than_slots() -> None:
    """(b) tasks [1 2] over 4 slots on 2 hosts: slots interleaved by host, so the tasks split hosts."""
    sups = supervisors({"host1": [6700, 6701], "host2": [6700, 6701]})
    workers = schedule(request(components(("spout", 2)), sups, workers=4))
    assert layout(workers) == {"host1:6700": [1], "host2:6700": [2]}


def test_storm_md_worked_example() -> None:
    """Host A 2 ports, host B 3 ports, 5 tasks, 3 workers: B:6700, A:6700, B:6701 are chosen."""
    sups = supervisors({"A": [6700, 6701], "B": [6700, 6701, 6702]})
    workers = schedule(request(components(("spout", 2), ("bolt", 3)), sups, workers=3))
    assert layout(workers) == {"A:6700": [2, 5], "B:6700": [1, 4], "B:6701": [3]}


def test_dispatch_by_storm_scheduler_conf() -> None:
    sups = supervisors({"A": [6700, 6701], "B": [6700, 6701, 6702]})
    req = request(components(("spout", 5)), sups, workers=3)
    assert schedule_by_conf(req) == schedule(req)


def test_output_is_sorted_and_carries_worker_resources() -> None:
    sups = supervisors({"b": [6701, 6700], "a": [6700]})
    workers = schedule(request(components(("spout", 7)), sups, workers=3,
                               conf={"worker.memory.size": 1 << 30, "worker.cpu.slot.num": 2}))
    assert [(w.supervisor_id, w.port) for w in workers] == [("a", 6700), ("b", 6700), ("b", 6701)]
    assert all(w.tasks == sorted(w.tasks) for w in workers)
    assert {(w.mem, w.cpu) for w in workers} == {(1 << 30, 2)}


def test_memory_and_cpu_default_when_conf_lacks_them() -> None:
    req = request(components(("spout", 1)), supervisors({"a": [6700]}), workers=1)
    bare = ScheduleRequest(TOPOLOGY_ID, req.components, {"topology.workers": 1}, req.supervisors)
    (worker,) = schedule(bare)
    assert (worker.mem, worker.cpu) == (2147483648, 1)


def test_system_components_are_dealt_like_any_other() -> None:
    comps = components((ACKER, 2), ("spout", 2))
    workers = schedule(request(comps, supervisors({"a": [1], "b": [1]}), workers=2))
    assert layout(workers) == {"a:1": [1, 3], "b:1": [2, 4]}


# --- slot accounting ---------------------------------------------------------------------------------


def test_ports_of_other_topologies_are_never_reused() -> None:
    sups = supervisors({"a": [6700, 6701], "b": [6700, 6701]}, used={"a": [6700], "b": [6700, 6701]})
    workers = schedule(request(components(("spout", 6)), sups, workers=4))
    assert layout(workers) == {"a:6701": [1, 2, 3, 4, 5, 6]}


def test_workers_are_capped_by_free_slots() -> None:
    sups = supervisors({"a": [1, 2], "b": [1]}, used={"a": [2]})
    workers = schedule(request(components(("spout", 9)), sups, workers=40))
    assert layout(workers) == {"a:1": [1, 3, 5, 7, 9], "b:1": [2, 4, 6, 8]}


def test_no_free_slot_error_says_what_was_needed_and_what_to_do() -> None:
    sups = supervisors({"a": [6700, 6701], "b": [6700]}, used={"a": [6700, 6701], "b": [6700]})
    with pytest.raises(ScheduleError) as err:
        schedule(request(components(("spout", 4)), sups, workers=2))
    message = str(err.value)
    assert TOPOLOGY_ID in message
    assert "needed 2 slot(s), 0 free" in message
    assert "3 slot(s): 3 used by other topologies" in message
    assert "add supervisors" in message


def test_no_supervisor_at_all_is_a_schedule_error() -> None:
    with pytest.raises(ScheduleError, match="0 free"):
        schedule(request(components(("spout", 1)), (), workers=1))


def test_topology_without_tasks_is_a_schedule_error() -> None:
    with pytest.raises(ScheduleError, match="no tasks"):
        schedule(request((Component("spout", ()),), supervisors({"a": [1]}), workers=1))


# --- assign types ------------------------------------------------------------------------------------


def initial(comps: tuple[Component, ...], sups: tuple[Supervisor, ...], workers: int) -> list[WorkerAssignment]:
    return schedule(request(comps, sups, workers))


def test_monitor_keeps_healthy_workers_and_redeals_only_dead_tasks() -> None:
    comps, sups = components(("spout", 6)), supervisors({"a": [1, 2], "b": [1, 2], "c": [1]})
    old = initial(comps, sups, workers=3)
    assert layout(old) == {"a:1": [1, 4], "b:1": [2, 5], "c:1": [3, 6]}
    workers = schedule(request(comps, sups, workers=3, assign_type=AssignType.MONITOR, old_workers=tuple(old),
                               dead_tasks=frozenset({5})))
    healthy = [w for w in old if not {5} & set(w.tasks)]
    assert all(w in workers for w in healthy), "healthy workers are untouched"
    # The dead worker's slot b:1 is avoided while another is free; a:2 is first in slot order.
    assert layout(workers) == {"a:1": [1, 4], "a:2": [2, 5], "c:1": [3, 6]}


def test_monitor_reuses_the_dead_slot_when_nothing_else_is_free() -> None:
    comps, sups = components(("spout", 4)), supervisors({"a": [1], "b": [1]})
    old = initial(comps, sups, workers=2)
    workers = schedule(request(comps, sups, workers=2, assign_type=AssignType.MONITOR, old_workers=tuple(old),
                               dead_tasks=frozenset({1})))
    assert workers == old


def test_monitor_moves_workers_off_a_lost_supervisor() -> None:
    comps = components(("spout", 4))
    old = initial(comps, supervisors({"a": [1], "b": [1], "c": [1]}), workers=2)
    assert layout(old) == {"a:1": [1, 3], "b:1": [2, 4]}
    workers = schedule(request(comps, supervisors({"b": [1], "c": [1]}), workers=2,
                               assign_type=AssignType.MONITOR, old_workers=tuple(old)))
    assert layout(workers) == {"b:1": [2, 4], "c:1": [1, 3]}


def test_monitor_drops_a_worker_whose_port_another_topology_now_holds() -> None:
    comps = components(("spout", 2))
    old = initial(comps, supervisors({"a": [1, 2]}), workers=2)
    workers = schedule(request(comps, supervisors({"a": [1, 2, 3]}, used={"a": [1]}), workers=2,
                               assign_type=AssignType.MONITOR, old_workers=tuple(old)))
    assert layout(workers) == {"a:2": [2], "a:3": [1]}


def test_monitor_with_nothing_to_place_returns_the_kept_workers() -> None:
    comps, sups = components(("spout", 3)), supervisors({"a": [1, 2]})
    old = initial(comps, sups, workers=2)
    full = supervisors({"a": [1, 2]})
    assert schedule(request(comps, full, workers=2, assign_type=AssignType.MONITOR, old_workers=tuple(old))) == old


def test_monitor_places_orphans_even_when_kept_workers_reach_topology_workers() -> None:
    comps, sups = components(("spout", 4)), supervisors({"a": [1, 2, 3]})
    old = [WorkerAssignment("a", "a", 1, [1, 2]), WorkerAssignment("a", "a", 2, [3])]
    workers = schedule(request(comps, sups, workers=2, assign_type=AssignType.MONITOR, old_workers=tuple(old)))
    assert layout(workers) == {"a:1": [1, 2], "a:2": [3], "a:3": [4]}


def test_monitor_with_no_free_slot_for_dead_tasks_raises() -> None:
    comps = components(("spout", 3))
    old = (WorkerAssignment("a", "a", 1, [1, 2]), WorkerAssignment("b", "b", 1, [3]))
    with pytest.raises(ScheduleError, match="needed 1 slot"):
        schedule(request(comps, supervisors({"a": [1]}), workers=2, assign_type=AssignType.MONITOR,
                         old_workers=old))


def test_rebalance_redeals_everything() -> None:
    comps, sups = components(("spout", 4)), supervisors({"a": [1, 2], "b": [1, 2]})
    old = (WorkerAssignment("a", "a", 2, [1, 2, 3, 4]),)
    workers = schedule(request(comps, sups, workers=4, assign_type=AssignType.REBALANCE, old_workers=old))
    assert layout(workers) == {"a:1": [1], "a:2": [3], "b:1": [2], "b:2": [4]}


def test_new_ignores_old_workers() -> None:
    comps, sups = components(("spout", 4)), supervisors({"a": [1, 2], "b": [1, 2]})
    old = (WorkerAssignment("a", "a", 2, [1, 2, 3, 4]),)
    assert schedule(request(comps, sups, workers=2, old_workers=old)) == initial(comps, sups, workers=2)
