"""Properties every scheduler must keep, checked on random clusters and topologies.

Both schedulers run through :func:`nimbus.scheduler.schedule`, chosen by ``storm.scheduler``.
Generated topologies have no topology master, so the default scheduler never adds a worker for it
and the worker-count bound is the same for both.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from nimbus.scheduler import schedule
from nimbus.scheduler.model import AssignType, Component, ScheduleError, ScheduleRequest, Supervisor
from squall.core.config.keys import default_config
from squall.core.system_ids import ACKER
from squall.core.zk.records import WorkerAssignment

SCHEDULERS = ["default", "even"]
PORTS = list(range(6700, 6710))
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def clusters(draw: st.DrawFn, full: bool = False) -> tuple[Supervisor, ...]:
    """1–30 supervisors with 1–6 ports each; some ports (all, if ``full``) held by other topologies.

    Ids are unique numbers rendered without padding, so id order ("s10" < "s2") differs from
    generation order, and ports come in random order.
    """
    numbers = draw(st.lists(st.integers(0, 999), min_size=1, max_size=30, unique=True))
    result = []
    for n in numbers:
        ports = draw(st.lists(st.sampled_from(PORTS), min_size=1, max_size=6, unique=True))
        used = set(ports) if full else draw(st.sets(st.sampled_from(ports)))
        result.append(Supervisor(f"s{n}", f"host-{n}", tuple(ports), frozenset(used)))
    return tuple(result)


@st.composite
def topologies(draw: st.DrawFn) -> tuple[Component, ...]:
    """1–6 user components of 1–20 tasks, each reading from some earlier ones; maybe ``__acker``.

    Task ids are contiguous from 1, handed out in component-id order as Storm does.
    """
    n = draw(st.integers(1, 6))
    sizes = {f"comp{i}": draw(st.integers(1, 20)) for i in range(n)}
    inputs = {f"comp{i}": frozenset(draw(st.sets(st.sampled_from([f"comp{j}" for j in range(i)]))) if i else ())
              for i in range(n)}
    if draw(st.booleans()):
        sizes[ACKER] = draw(st.integers(0, 4))
        inputs[ACKER] = frozenset(f"comp{i}" for i in range(n))
    components, next_id = [], 1
    for component_id in sorted(sizes):
        components.append(Component(component_id, tuple(range(next_id, next_id + sizes[component_id])),
                                    inputs[component_id]))
        next_id += sizes[component_id]
    return tuple(components)


def make_request(scheduler: str, components: tuple[Component, ...], supervisors: tuple[Supervisor, ...],
                 workers: int, **kwargs: Any) -> ScheduleRequest:
    conf = default_config() | {"storm.scheduler": scheduler, "topology.workers": workers}
    return ScheduleRequest("topo-1-1700000000", components, conf, supervisors, **kwargs)


def must_place(free: int) -> bool:
    """Whether the scheduler must succeed rather than raise ScheduleError.

    Both squeeze a topology onto whatever is free, as Storm does (JStorm's default refuses with "there's
    no enough worker" instead, reference/jstorm.md §5); both must raise when nothing is free.
    """
    return free >= 1


def free_slots(supervisors: tuple[Supervisor, ...]) -> set[tuple[str, int]]:
    return {(s.id, p) for s in supervisors for p in s.ports if p not in s.used_ports}


def all_tasks(components: tuple[Component, ...]) -> list[int]:
    return sorted(t for c in components for t in c.tasks)


def shuffled(supervisors: tuple[Supervisor, ...], seed: int) -> tuple[Supervisor, ...]:
    """The same cluster, supervisors and each one's ports listed in another order."""
    rng = random.Random(seed)
    result = [replace(s, ports=tuple(rng.sample(s.ports, len(s.ports)))) for s in supervisors]
    rng.shuffle(result)
    return tuple(result)


def check_valid(workers: list[WorkerAssignment], components: tuple[Component, ...],
                supervisors: tuple[Supervisor, ...]) -> None:
    """Every task once; each slot once, on a port its supervisor lists and no other topology holds."""
    assert sorted(t for w in workers for t in w.tasks) == all_tasks(components)
    slots = [(w.supervisor_id, w.port) for w in workers]
    assert len(slots) == len(set(slots)), f"slot used twice: {Counter(slots).most_common(1)}"
    by_id = {s.id: s for s in supervisors}
    for w in workers:
        s = by_id[w.supervisor_id]
        assert w.host == s.host
        assert w.port in s.ports, f"{w.host_port} is not a port of {s.id}"
        assert w.port not in s.used_ports, f"{w.host_port} belongs to another topology"
        assert w.tasks, f"{w.host_port} has no tasks"


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@FAST
@given(supervisors=clusters(), components=topologies(), workers=st.integers(1, 40), seed=st.integers(0, 2**32))
def test_new_assignment_properties(scheduler: str, supervisors: tuple[Supervisor, ...],
                                   components: tuple[Component, ...], workers: int, seed: int) -> None:
    request = make_request(scheduler, components, supervisors, workers)
    free = free_slots(supervisors)
    if not must_place(len(free)):
        event("refused: too few free slots")
        with pytest.raises(ScheduleError):
            schedule(request)
        return
    event("placed")
    result = schedule(request)
    check_valid(result, components, supervisors)
    assert len(result) <= min(workers, len(free))
    sizes = [len(w.tasks) for w in result]
    assert max(sizes) - min(sizes) <= 1, f"unbalanced workers: {sorted(sizes)}"
    assert [(w.supervisor_id, w.port) for w in result] == sorted((w.supervisor_id, w.port) for w in result)
    assert all(w.tasks == sorted(w.tasks) for w in result)
    assert schedule(request) == result, "same input, same output"
    assert schedule(replace(request, supervisors=shuffled(supervisors, seed))) == result, \
        "supervisor and port order must not matter"


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@FAST
@given(supervisors=clusters(full=True), components=topologies(), workers=st.integers(1, 40))
def test_full_cluster_raises_schedule_error(scheduler: str, supervisors: tuple[Supervisor, ...],
                                            components: tuple[Component, ...], workers: int) -> None:
    with pytest.raises(ScheduleError):
        schedule(make_request(scheduler, components, supervisors, workers))


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@FAST
@given(supervisors=clusters(), components=topologies(), workers=st.integers(1, 40), data=st.data())
def test_monitor_keeps_healthy_workers(scheduler: str, supervisors: tuple[Supervisor, ...],
                                       components: tuple[Component, ...], workers: int, data: st.DataObject) -> None:
    """After some tasks die, workers without a dead task stay as they were; the rest is still valid."""
    if not must_place(len(free_slots(supervisors))):
        return
    old = schedule(make_request(scheduler, components, supervisors, workers))
    dead = frozenset(data.draw(st.sets(st.sampled_from(all_tasks(components)), min_size=1, max_size=5)))
    request = make_request(scheduler, components, supervisors, workers, assign_type=AssignType.MONITOR,
                           old_workers=tuple(old), dead_tasks=dead)
    result = schedule(request)
    check_valid(result, components, supervisors)
    for w in old:
        if not dead.intersection(w.tasks):
            assert w in result, f"healthy worker {w.host_port} was touched"
    assert schedule(request) == result
