"""Summaries a Storm client reads: built from records, valid on the wire for Storm's own IDL."""

from __future__ import annotations

import doctest
from typing import Any

import pytest
from streamparse.thrift import storm_thrift as storm_idl
from thriftpy2.protocol import TBinaryProtocolFactory
from thriftpy2.utils import deserialize, serialize

import nimbus.queries
from nimbus.queries import (
    RECENT_ERROR_SECS, RECENT_RESTART_SECS, Signs, cluster_summary, failing_trees, health, recent_errors,
    restarted_workers, topology_info,
)
import squall.core.zk.errors
from squall.core.health import split_health
from squall.core.zk.records import (
    Assignment, ComponentType, NimbusMaster, NimbusSlave, StormBase, SupervisorInfo, TaskBeat, TaskError, TaskInfo,
    TaskStats, TopologyStatus, TopologyTasks, WorkerAssignment,
)

NOW = 1_700_000_100
BASE = StormBase("wc", TopologyStatus.REBALANCING, launch_time_secs=NOW - 100, num_workers=2, owner="alice")
TASKS = TopologyTasks({1: TaskInfo("spout", ComponentType.SPOUT), 2: TaskInfo("count", ComponentType.BOLT),
                       3: TaskInfo("count", ComponentType.BOLT)})
ASSIGNMENT = Assignment("/code", [WorkerAssignment("sup-1", "host-1", 6700, [1, 3]),
                                  WorkerAssignment("sup-2", "host-2", 6701, [2])],
                        task_start_secs={1: NOW - 50, 2: NOW - 10, 3: NOW - 50})


def as_storm(value: object, struct: type) -> object:
    """What a Storm 1.x client decodes from our bytes."""
    return deserialize(struct(), serialize(value, TBinaryProtocolFactory()), TBinaryProtocolFactory())


def test_cluster_summary_as_a_storm_client_sees_it() -> None:
    summary = cluster_summary(
        supervisors=[SupervisorInfo("sup-2", "host-2", [6700, 6701], uptime_secs=7),
                     SupervisorInfo("sup-1", "host-1", [6700], uptime_secs=9, version="0.1.0")],
        topologies={"wc-1-1700000000": (BASE, TASKS, ASSIGNMENT)},
        master=NimbusMaster("nimbus-1", 6627, since_secs=NOW - 30), slaves=[NimbusSlave("nimbus-2", 6627, 12)],
        now_secs=NOW)
    seen = as_storm(summary, storm_idl.ClusterSummary)
    assert [(s.supervisor_id, s.num_workers, s.num_used_workers, s.version) for s in seen.supervisors] == [
        ("sup-1", 1, 1, "0.1.0"), ("sup-2", 2, 1, "VERSION_NOT_PROVIDED")]
    (topology,) = seen.topologies
    assert (topology.id, topology.name, topology.status, topology.num_tasks, topology.num_workers,
            topology.uptime_secs, topology.owner) == ("wc-1-1700000000", "wc", "REBALANCING", 3, 2, 100, "alice")
    assert [(n.host, n.isLeader, n.uptime_secs) for n in seen.nimbuses] == [("nimbus-1", True, 30),
                                                                          ("nimbus-2", False, 12)]
    assert topology.sched_status is None, "nothing failing: left unset, as Storm leaves it"


def test_workers_that_keep_dying_show_in_sched_status_while_the_status_stays_storm_s() -> None:
    """Storm clients compare ``status`` with "ACTIVE"; the failing workers (the ports their supervisors
    report) are in Storm's ``sched_status``, of the summary and the info alike."""
    active = StormBase("wc", TopologyStatus.ACTIVE, launch_time_secs=NOW - 100, num_workers=2)
    supervisors = [SupervisorInfo("sup-1", "host-1", [6700, 6701], failing_ports=[6700, 6701]),
                   SupervisorInfo("sup-2", "host-2", [6700, 6701])]  # 6701 of sup-1 is another topology's
    summary = cluster_summary(supervisors, {"wc-1-1700000000": (active, TASKS, ASSIGNMENT)}, None, [], NOW)
    (topology,) = as_storm(summary, storm_idl.ClusterSummary).topologies
    assert (topology.status, topology.sched_status) == ("ACTIVE", "failing: 1 of 2 workers down")
    info = as_storm(topology_info("wc-1-1700000000", active, TASKS, ASSIGNMENT, {}, NOW, supervisors=supervisors),
                    storm_idl.TopologyInfo)
    assert (info.status, info.sched_status) == ("ACTIVE", "failing: 1 of 2 workers down")
    healthy = [SupervisorInfo("sup-1", "host-1", [6700], failing_ports=[6701])]
    assert cluster_summary(healthy, {"wc-1-1700000000": (active, TASKS, ASSIGNMENT)}, None, [], NOW) \
        .topologies[0].sched_status is None


def test_recent_errors_name_each_component_newest_first_with_its_age() -> None:
    """A bolt raising on every tuple: its component and how long ago, per component (not per task)."""
    assert recent_errors(TASKS, {2: NOW - 40, 3: NOW - 12, 1: NOW - 90}, NOW) == \
        "errors: count (12 s ago), spout (90 s ago)"
    assert recent_errors(TASKS, {}, NOW) is None
    assert recent_errors(None, {7: NOW}, NOW) == "errors: ? (0 s ago)", "a task nimbus no longer knows still counts"
    assert recent_errors(TASKS, {2: NOW + 3}, NOW) == "errors: count (0 s ago)", "a node named a second or two late"


def test_errors_older_than_the_window_leave_a_topology_healthy() -> None:
    """Storm's UI stops showing a last error in red, and JStorm stops saying "has an error", after 30 minutes."""
    assert RECENT_ERROR_SECS == 1800
    assert recent_errors(TASKS, {2: NOW - RECENT_ERROR_SECS + 1}, NOW) == "errors: count (1799 s ago)"
    assert recent_errors(TASKS, {2: NOW - RECENT_ERROR_SECS}, NOW) is None


def test_health_says_workers_down_first_then_recent_errors() -> None:
    supervisors = [SupervisorInfo("sup-2", "host-2", [6701], failing_ports=[6701])]
    assert health(ASSIGNMENT, supervisors, tasks=TASKS, error_times={3: NOW - 12}, now_secs=NOW) == \
        "failing: 1 of 2 workers down; errors: count (12 s ago)"
    assert health(ASSIGNMENT, [], tasks=TASKS, error_times={3: NOW - 12}, now_secs=NOW) == "errors: count (12 s ago)"
    assert health(ASSIGNMENT, supervisors) == "failing: 1 of 2 workers down"


def test_a_component_raising_shows_in_sched_status_of_the_summary_and_the_info() -> None:
    """What ``storm list`` prints in its Health column and the UI in its summary, from the errors nimbus read."""
    active = StormBase("wc", TopologyStatus.ACTIVE, launch_time_secs=NOW - 100, num_workers=2)
    summary = cluster_summary([], {"wc-1-1700000000": (active, TASKS, ASSIGNMENT)}, None, [], NOW,
                              error_times={"wc-1-1700000000": {3: NOW - 12}})
    (topology,) = as_storm(summary, storm_idl.ClusterSummary).topologies
    assert (topology.status, topology.sched_status) == ("ACTIVE", "errors: count (12 s ago)")
    errors = {3: [TaskError("ZeroDivisionError", NOW - 30), TaskError("ZeroDivisionError", NOW - 12)]}
    info = as_storm(topology_info("wc-1-1700000000", active, TASKS, ASSIGNMENT, errors, NOW), storm_idl.TopologyInfo)
    assert info.sched_status == "errors: count (12 s ago): ZeroDivisionError", "the info has the errors: their line too"


def test_topology_info_lists_executors_and_errors_by_component() -> None:
    errors = {3: [TaskError("old", NOW - 20, host="host-1", port=6700), TaskError("new", NOW - 5)]}
    info = as_storm(topology_info("wc-1-1700000000", BASE, TASKS, ASSIGNMENT, errors, NOW), storm_idl.TopologyInfo)
    assert [(e.executor_info.task_start, e.component_id, e.host, e.port, e.uptime_secs) for e in info.executors] == [
        (1, "spout", "host-1", 6700, 50), (2, "count", "host-2", 6701, 10), (3, "count", "host-1", 6700, 50)]
    assert [(e.error, e.host) for e in info.errors["count"]] == [("new", None), ("old", "host-1")]
    assert info.status == "REBALANCING" and info.uptime_secs == 100


def test_topology_without_assignment_yet() -> None:
    info = topology_info("wc-1-1700000000", BASE, None, None, {}, NOW)
    assert info.executors == [] and info.errors == {}


TRACEBACK = 'Traceback (most recent call last):\n  File "count.py", line 9, in process\n    1 / 0\n' \
            'ZeroDivisionError: division by zero'


def spout_counts(acked: int, failed: int, **by_reason: int) -> TaskStats:
    return TaskStats(acked={"default": acked} if acked else {}, failed={"default": failed} if failed else {},
                     failed_by_reason=by_reason)


def test_trees_failing_more_than_acked_in_the_window_make_a_topology_unhealthy() -> None:
    """The spouts' counts in the last 10 minutes: more trees failed than acked is a topology in trouble, whatever
    its status; bolts' counts are not trees."""
    bolt = TaskStats(executed={"spout:default": 9}, failed={"spout:default": 99})
    assert failing_trees(TASKS, {1: spout_counts(2066, 12034, timeout=12034), 2: bolt}) == \
        "failing: 12,034 of 14,100 trees timed out in 10 min"
    assert failing_trees(TASKS, {1: spout_counts(10, 30, timeout=20, explicit=10)}) == \
        "failing: 30 of 40 trees failed (20 timed out) in 10 min"
    assert failing_trees(TASKS, {1: spout_counts(0, 3, explicit=3)}) == "failing: 3 of 3 trees failed in 10 min"
    assert failing_trees(TASKS, {1: spout_counts(50, 50, timeout=50)}) is None, "as many acked: not outnumbered"
    assert failing_trees(TASKS, {2: bolt}) is None and failing_trees(None, {1: spout_counts(0, 5)}) is None


def test_workers_nimbus_restarted_recently_make_a_topology_unhealthy() -> None:
    assert restarted_workers([NOW - 30, NOW - 5], NOW) == "2 workers restarted by nimbus in 10 min: no heartbeat"
    assert restarted_workers([NOW - RECENT_RESTART_SECS, NOW - 5], NOW) == \
        "1 worker restarted by nimbus in 10 min: no heartbeat"
    assert restarted_workers([NOW - RECENT_RESTART_SECS], NOW) is None and restarted_workers([], NOW) is None


def test_recent_errors_say_each_components_newest_error_by_its_line() -> None:
    assert recent_errors(TASKS, {2: NOW - 40, 3: NOW - 12}, NOW, {2: "KeyError: 'x'", 3: "ValueError: y"}) == \
        "errors: count (12 s ago): ValueError: y"
    assert recent_errors(TASKS, {3: NOW - 12, 1: NOW - 90}, NOW, {1: "OSError: gone"}) == \
        "errors: count (12 s ago), spout (90 s ago): OSError: gone", "a line not read yet is left out"


def test_health_lists_every_reason_errors_last_and_a_page_can_show_errors_apart() -> None:
    supervisors = [SupervisorInfo("sup-2", "host-2", [6701], failing_ports=[6701])]
    status = health(ASSIGNMENT, supervisors, tasks=TASKS, error_times={3: NOW - 12}, now_secs=NOW,
                    error_lines={3: "ZeroDivisionError: division by zero"}, restarts=[NOW - 60],
                    window={1: spout_counts(1, 9, timeout=9)})
    assert status == ("failing: 1 of 2 workers down; failing: 9 of 10 trees timed out in 10 min; "
                      "1 worker restarted by nimbus in 10 min: no heartbeat; "
                      "errors: count (12 s ago): ZeroDivisionError: division by zero")
    assert split_health(status) == (status.split("; errors: ")[0],
                                    "errors: count (12 s ago): ZeroDivisionError: division by zero")
    only_errors = "errors: count (1 s ago): ValueError: a; b"
    assert split_health(only_errors) == (None, only_errors)
    assert split_health("failing: 1 of 2 workers down") == ("failing: 1 of 2 workers down", None)
    assert split_health(None) == (None, None)


def test_the_summary_and_the_info_say_what_nimbus_saw_of_a_topology_in_trouble() -> None:
    """``storm list`` (the summary) and the UI's topology page (the info) alike: trees timing out in the window
    nimbus makes from the beats, the workers it moved, and errors by their line."""
    active = StormBase("wc", TopologyStatus.ACTIVE, launch_time_secs=NOW - 100, num_workers=2)
    window = {1: spout_counts(0, 120, timeout=120)}
    signs = Signs(window=window, restarts=[NOW - 20], error_lines={3: "ZeroDivisionError: division by zero"})
    summary = cluster_summary([], {"wc-1-1700000000": (active, TASKS, ASSIGNMENT)}, None, [], NOW,
                              error_times={"wc-1-1700000000": {3: NOW - 12}}, signs={"wc-1-1700000000": signs})
    (topology,) = as_storm(summary, storm_idl.ClusterSummary).topologies
    expected = ("failing: 120 of 120 trees timed out in 10 min; 1 worker restarted by nimbus in 10 min: no heartbeat; "
                "errors: count (12 s ago): ZeroDivisionError: division by zero")
    assert (topology.status, topology.sched_status) == ("ACTIVE", expected)
    beats = {1: TaskBeat(NOW, 100, window[1])}
    info = topology_info("wc-1-1700000000", active, TASKS, ASSIGNMENT, {3: [TaskError(TRACEBACK, NOW - 12)]}, NOW,
                         beats=beats, windows={1: {"600": window[1], "10800": window[1]}}, restarts=[NOW - 20])
    assert as_storm(info, storm_idl.TopologyInfo).sched_status == expected


@pytest.mark.parametrize("module", [nimbus.queries, squall.core.zk.errors])
def test_the_examples_in_the_docstrings_hold(module: Any) -> None:
    result = doctest.testmod(module)
    assert result.failed == 0 and result.attempted > 0
