"""Every record round-trips through a real ZooKeeper and reads back as readable, versioned JSON."""

from __future__ import annotations

import dataclasses
import inspect
import json
from typing import Any

import pytest

from squall.core.zk import paths, records
from squall.core.zk.client import ZkClient
from squall.core.zk.records import (
    Assignment, AssignmentBak, AssignmentType, Blacklist, CodeHolder, CodeManifest, ComponentType, ErrorLevel,
    GrayUpgradeConf, LoggerLevel,
    LoggerLevels, NimbusMaster, NimbusSlave, PendingAction, RecordError, StormBase, SupervisorInfo, TaskBeat, TaskError,
    TaskStats, TaskHeartbeats, TaskInfo, TopologyStatus, TopologyTasks, ValueTooLarge, WorkerAssignment, WorkerMark,
)

TID = "wordcount-1-1700000000"
WORKER = WorkerAssignment(supervisor_id="sup-a", host="host-a", port=6700, tasks=[1, 2, 5], mem=2 << 30, cpu=100)
ASSIGNMENT = Assignment(
    code_dir="/var/squall/nimbus/stormdist/" + TID,
    workers=[WORKER, WorkerAssignment("sup-b", "host-b", 6701, [3, 4])],
    node_host={"sup-a": "host-a", "sup-b": "host-b"},
    task_start_secs={1: 1_700_000_001, 3: 1_700_000_002},
    timestamp_ms=1_700_000_003_000,
    type=AssignmentType.SCALE,
    code_version=3,
)

#: (path, record) for every record type: a new record type must be added here to be covered.
EXAMPLES: list[tuple[str, Any]] = [
    (paths.supervisor("sup-a"), SupervisorInfo("sup-a", "host-a", [6700, 6701], [6700], 1_700_000_000, 12, "0.1.0")),
    (paths.NIMBUS_MASTER, NimbusMaster("nimbus-1", 6627, 1_700_000_000)),
    (paths.nimbus_slave("nimbus-2:6627"), NimbusSlave("nimbus-2", 6627, 30)),
    (paths.topology(TID), StormBase(
        name="wordcount", status=TopologyStatus.REBALANCING, launch_time_secs=1_700_000_000, num_workers=3,
        owner="alice", prev_status=TopologyStatus.INACTIVE,
        pending=PendingAction("rebalance", 30, 1_700_000_030, num_workers=4, num_executors={"split": 8},
                              reassign=True, conf_json='{"topology.workers": 4}'),
        component_executors={"split": 4, "count": 2})),
    (paths.tasks(TID), TopologyTasks({1: TaskInfo("sentences", ComponentType.SPOUT),
                                      2: TaskInfo("split", ComponentType.BOLT)})),
    (paths.assignment(TID), ASSIGNMENT),
    (paths.assignment_bak("wordcount"), AssignmentBak({"sentences": [1], "split": [2, 3]}, ASSIGNMENT)),
    (paths.taskbeats(TID), TaskHeartbeats(7, {1: TaskBeat(1_700_000_010, 10), 2: TaskBeat(1_700_000_011, 11, TaskStats(
        emitted={"default": 5}, transferred={"default": 10}, acked={"spout:default": 4},
        executed={"spout:default": 5}, latency_ms={"spout:default": 0.25}))})),
    (paths.task_error(TID, 2, 1_700_000_012), TaskError("Traceback …\nValueError: bad tuple ✗", 1_700_000_012,
                                                        ErrorLevel.FATAL, 3, 600, "host-a", 6700)),
    (paths.gray_upgrade_conf(TID), GrayUpgradeConf(1_700_086_400_000, 2, 1, "split", ["host-a:6700"], False, 0, True, False, "")),
    (paths.upgrading_worker(TID, "host-a:6700"), WorkerMark(1_700_000_020)),
    (paths.BLACKLIST, Blacklist(["bad-host"])),
    (paths.log_config(TID), LoggerLevels({"ROOT": LoggerLevel("DEBUG", 30, 1_700_000_030_000),
                                          "kazoo": LoggerLevel("WARN")})),
    (paths.code(TID), CodeManifest(2, {1: "9f" * 32, 2: "a0" * 32})),
    (paths.code_holder("nimbus-2:6627"), CodeHolder("nimbus-2", 6627, {TID: {1: "9f" * 32}})),
]


def test_examples_cover_every_record_type() -> None:
    record_types = {cls for _, cls in inspect.getmembers(records, inspect.isclass)
                    if dataclasses.is_dataclass(cls) and cls.__module__ == records.__name__}
    covered = {type(r) for _, r in EXAMPLES} | {PendingAction, TaskInfo, TaskBeat, TaskStats, WorkerAssignment,
                                                  LoggerLevel}
    assert record_types == covered


@pytest.mark.parametrize("path,record", EXAMPLES, ids=[type(r).__name__ for _, r in EXAMPLES])
def test_record_round_trips_through_zookeeper_as_readable_json(zk: ZkClient, path: str, record: Any) -> None:
    zk.write(path, record)
    assert zk.read(path, type(record)) == record

    raw, _ = zk.kazoo.get(path)  # what `zkCli.sh get` prints
    shown = json.loads(raw.decode("utf-8"))
    assert shown["v"] == type(record).schema
    assert set(shown) == {"v"} | {f.name for f in dataclasses.fields(record)}


def test_enums_and_int_keys_are_plain_json(zk: ZkClient) -> None:
    zk.write(paths.assignment(TID), ASSIGNMENT)
    shown = json.loads(zk.kazoo.get(paths.assignment(TID))[0])
    assert shown["type"] == "scale"
    assert shown["task_start_secs"] == {"1": 1_700_000_001, "3": 1_700_000_002}
    assert shown["workers"][0] == {"supervisor_id": "sup-a", "host": "host-a", "port": 6700, "tasks": [1, 2, 5],
                                   "mem": 2 << 30, "cpu": 100}


def test_missing_node_reads_as_none(zk: ZkClient) -> None:
    assert zk.read(paths.topology("nope-1-1"), StormBase) is None


def test_oversized_value_is_refused_before_reaching_zookeeper(zk: ZkClient) -> None:
    huge = TopologyTasks({i: TaskInfo("component-with-a-long-name-" * 3, ComponentType.BOLT) for i in range(20_000)})
    with pytest.raises(ValueTooLarge, match="over the 819200-byte ZooKeeper value limit"):
        zk.write(paths.tasks(TID), huge)
    assert not zk.exists(paths.tasks(TID))


def test_value_from_newer_squall_is_refused_with_a_clear_error(zk: ZkClient) -> None:
    zk.kazoo.create(paths.NIMBUS_MASTER, b'{"v": 99, "host": "h", "port": 1}')
    with pytest.raises(RecordError, match="/nimbus_master: NimbusMaster: schema version 99 is newer"):
        zk.read(paths.NIMBUS_MASTER, NimbusMaster)


def test_unknown_fields_are_ignored_and_missing_optional_fields_defaulted() -> None:
    raw = b'{"v": 1, "host": "h", "port": 6627, "added_by_a_later_version": [1, 2]}'
    assert records.decode(NimbusMaster, raw) == NimbusMaster("h", 6627, 0)


@pytest.mark.parametrize("raw,message", [
    (b"\x80\x03pickle", "not UTF-8 JSON"),
    (b"[1, 2]", "expected a JSON object"),
    (b'{"host": "h", "port": 1}', "missing schema version"),
    (b'{"v": 1, "host": "h"}', "missing field 'port'"),
    (b'{"v": 1, "host": "h", "port": "6627"}', "NimbusMaster.port: expected int"),
    (b'{"v": 1, "host": "h", "port": true}', "NimbusMaster.port: expected int"),
])
def test_malformed_values_raise_record_error(raw: bytes, message: str) -> None:
    with pytest.raises(RecordError, match=message):
        records.decode(NimbusMaster, raw)


def test_bad_enum_value_names_the_choices() -> None:
    raw = b'{"v": 1, "name": "t", "status": "dancing", "launch_time_secs": 1, "num_workers": 1}'
    with pytest.raises(RecordError, match=r"StormBase.status: 'dancing' is not one of \['active'"):
        records.decode(StormBase, raw)


@pytest.mark.parametrize("bad", ["", "a/b", "..", "."])
def test_path_helpers_refuse_names_that_escape_their_parent(bad: str) -> None:
    with pytest.raises(ValueError):
        paths.topology(bad)
