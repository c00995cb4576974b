"""The assign thread against a real ZooKeeper: one writer, no shared slots, latches with timeouts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from nimbus.assign import AssignEvent, AssignFailed, TopologyAssigner
from nimbus.scheduler import AssignType, Component
from squall.core.clock import SimulatedClock
from squall.core.config.keys import default_config
from squall.core.zk import paths
from squall.core.zk.client import ZkClient
from squall.core.zk.records import (
    Assignment, AssignmentBak, Blacklist, ComponentType, SupervisorInfo, TaskInfo, TopologyTasks,
)
from support import wait_until

TOPOLOGIES = {
    "wc-1-1700000000": (Component("spout", (1, 2)), Component("count", (3, 4, 5, 6), frozenset({"spout"}))),
    "other-2-1700000000": (Component("spout", (1, 2, 3, 4)),),
}


def source(workers: int) -> Any:
    def topologies(topology_id: str) -> tuple[tuple[Component, ...], dict[str, Any], int]:
        return TOPOLOGIES[topology_id], default_config() | {"topology.workers": workers}, 1
    return topologies


def add_supervisor(zk: ZkClient, n: int, ports: list[int]) -> None:
    zk.write(paths.supervisor(f"sup-{n}"), SupervisorInfo(f"sup-{n}", f"host-{n}", ports))


def add_tasks(zk: ZkClient, topology_id: str) -> None:
    zk.write(paths.tasks(topology_id), TopologyTasks({t: TaskInfo(c.id, ComponentType.BOLT if c.inputs else ComponentType.SPOUT)
                                                      for c in TOPOLOGIES[topology_id] for t in c.tasks}))


@pytest.fixture
def clock() -> SimulatedClock:
    return SimulatedClock()


@pytest.fixture
def assigner(zk: ZkClient, clock: SimulatedClock) -> Iterator[TopologyAssigner]:
    assigner = TopologyAssigner(zk, clock, source(workers=2), code_dir=lambda tid: f"/code/{tid}").start()
    try:
        yield assigner
    finally:
        assigner.stop()


def test_new_topology_gets_an_assignment_and_a_backup(zk: ZkClient, assigner: TopologyAssigner,
                                                      clock: SimulatedClock) -> None:
    add_supervisor(zk, 1, [6700, 6701])
    add_tasks(zk, "wc-1-1700000000")
    assignment = assigner.push(AssignEvent("wc-1-1700000000", "wc")).wait(clock, 300)
    assert zk.read(paths.assignment("wc-1-1700000000"), Assignment) == assignment
    assert sorted(t for w in assignment.workers for t in w.tasks) == [1, 2, 3, 4, 5, 6]
    assert assignment.code_dir == "/code/wc-1-1700000000"
    assert set(assignment.task_start_secs.values()) == {int(clock.time())}
    bak = zk.read(paths.assignment_bak("wc"), AssignmentBak)
    assert bak is not None and bak.assignment == assignment and bak.component_tasks == {"spout": [1, 2], "count": [3, 4, 5, 6]}


def test_two_topologies_never_share_a_slot(zk: ZkClient, assigner: TopologyAssigner, clock: SimulatedClock) -> None:
    add_supervisor(zk, 1, [6700, 6701])
    add_supervisor(zk, 2, [6700, 6701])
    for topology_id in TOPOLOGIES:
        add_tasks(zk, topology_id)
    first = assigner.push(AssignEvent("wc-1-1700000000", "wc"))
    second = assigner.push(AssignEvent("other-2-1700000000", "other"))
    a, b = first.wait(clock, 300), second.wait(clock, 300)
    slots_a = {(w.supervisor_id, w.port) for w in a.workers}
    slots_b = {(w.supervisor_id, w.port) for w in b.workers}
    assert len(slots_a) == 2 and len(slots_b) == 2 and not slots_a & slots_b


def test_unchanged_assignment_is_not_rewritten(zk: ZkClient, assigner: TopologyAssigner, clock: SimulatedClock) -> None:
    add_supervisor(zk, 1, [6700, 6701])
    add_tasks(zk, "wc-1-1700000000")
    assigner.push(AssignEvent("wc-1-1700000000", "wc")).wait(clock, 300)
    version = zk.kazoo.exists(paths.assignment("wc-1-1700000000")).version
    clock.advance(60)
    assigner.push(AssignEvent("wc-1-1700000000", "wc", AssignType.MONITOR)).wait(clock, 300)
    assert zk.kazoo.exists(paths.assignment("wc-1-1700000000")).version == version


def test_monitor_moves_dead_worker_and_keeps_start_times_of_the_rest(
        zk: ZkClient, assigner: TopologyAssigner, clock: SimulatedClock) -> None:
    add_supervisor(zk, 1, [6700, 6701, 6702])
    add_tasks(zk, "wc-1-1700000000")
    before = assigner.push(AssignEvent("wc-1-1700000000", "wc")).wait(clock, 300)
    dead, healthy = before.workers
    clock.advance(100)
    after = assigner.push(AssignEvent("wc-1-1700000000", "wc", AssignType.MONITOR,
                                      dead_tasks=frozenset(dead.tasks[:1]))).wait(clock, 300)
    assert healthy in after.workers
    moved = next(w for w in after.workers if w != healthy)
    assert moved.tasks == dead.tasks and moved.port != dead.port
    assert {after.task_start_secs[t] for t in healthy.tasks} == {int(clock.time()) - 100}
    assert {after.task_start_secs[t] for t in moved.tasks} == {int(clock.time())}


def test_blacklisted_hosts_get_nothing(zk: ZkClient, assigner: TopologyAssigner, clock: SimulatedClock) -> None:
    add_supervisor(zk, 1, [6700, 6701])
    add_supervisor(zk, 2, [6700, 6701])
    zk.write(paths.BLACKLIST, Blacklist(["host-1"]))
    add_tasks(zk, "wc-1-1700000000")
    assignment = assigner.push(AssignEvent("wc-1-1700000000", "wc")).wait(clock, 300)
    assert {w.host for w in assignment.workers} == {"host-2"}


def test_scheduling_error_reaches_the_waiter_and_the_thread_keeps_serving(
        zk: ZkClient, assigner: TopologyAssigner, clock: SimulatedClock) -> None:
    add_tasks(zk, "wc-1-1700000000")
    with pytest.raises(AssignFailed, match="no free worker slot for topology wc-1-1700000000: needs 2, 0 free"):
        assigner.push(AssignEvent("wc-1-1700000000", "wc")).wait(clock, 300)
    add_supervisor(zk, 1, [6700, 6701])
    assert assigner.push(AssignEvent("wc-1-1700000000", "wc")).wait(clock, 300) is not None


def test_missing_tasks_fail_clearly(zk: ZkClient, assigner: TopologyAssigner, clock: SimulatedClock) -> None:
    with pytest.raises(AssignFailed, match="wc-1-1700000000 has no tasks in ZooKeeper"):
        assigner.push(AssignEvent("wc-1-1700000000", "wc")).wait(clock, 300)


def test_waiting_times_out_on_the_clock(zk: ZkClient, clock: SimulatedClock) -> None:
    """An event nobody handles (assigner not started) fails when the simulated timeout passes."""
    assigner = TopologyAssigner(zk, clock, source(workers=2), code_dir=str)
    event = assigner.push(AssignEvent("wc-1-1700000000", "wc"))
    failure: list[Exception] = []

    import threading

    def wait() -> None:
        try:
            event.wait(clock, 300)
        except AssignFailed as exc:
            failure.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    wait_until(lambda: clock.pending() == 1, what="the latch timer")
    clock.advance(299)
    assert not failure
    clock.advance(1)
    waiter.join(5)
    assert "not done within 300s (nimbus.assign.timeout.secs)" in str(failure[0])


def test_monitor_event_judged_on_an_older_assignment_is_dropped(
        zk: ZkClient, assigner: TopologyAssigner, clock: SimulatedClock) -> None:
    add_supervisor(zk, 1, [6700, 6701, 6702])
    add_tasks(zk, "wc-1-1700000000")
    before = assigner.push(AssignEvent("wc-1-1700000000", "wc")).wait(clock, 300)
    dead = frozenset(before.workers[0].tasks)
    clock.advance(10)
    first = assigner.push(AssignEvent("wc-1-1700000000", "wc", AssignType.MONITOR, dead_tasks=dead,
                                      based_on_ms=before.timestamp_ms))
    second = assigner.push(AssignEvent("wc-1-1700000000", "wc", AssignType.MONITOR, dead_tasks=dead,
                                       based_on_ms=before.timestamp_ms))
    moved = first.wait(clock, 300)
    assert second.wait(clock, 300) == moved, "the duplicate must not move the fresh worker again"
