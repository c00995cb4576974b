"""The ZooKeeper path layout, in one place.

Paths are relative to ``storm.zookeeper.root`` (the client connects with that root as its chroot),
so ``zkCli.sh`` users see ``<root>/topology/<id>`` and code sees ``/topology/<id>``. Each node has one
writer; see ARCHITECTURE.md for who writes what.
"""

from __future__ import annotations

SUPERVISORS = "/supervisors"
NIMBUS_MASTER = "/nimbus_master"
NIMBUS_SLAVES = "/nimbus_slave"
TOPOLOGIES = "/topology"
TASKS = "/tasks"
ASSIGNMENTS = "/assignments"
ASSIGNMENTS_BAK = "/assignments_bak"
TASKBEATS = "/taskbeats"
TASKERRORS = "/taskerrors"
GRAY_UPGRADE = "/gray_upgrade"
BLACKLIST = "/blacklist"
LOG_CONFIGS = "/logconfigs"
CODE = "/code"
CODE_HOLDERS = "/code_holders"

#: Parents created when a daemon first connects, so watches on their children always have a node.
PERSISTENT_ROOTS = (
    SUPERVISORS,
    NIMBUS_SLAVES,
    TOPOLOGIES,
    TASKS,
    ASSIGNMENTS,
    ASSIGNMENTS_BAK,
    TASKBEATS,
    TASKERRORS,
    GRAY_UPGRADE,
    LOG_CONFIGS,
    CODE,
    CODE_HOLDERS,
)

#: Per-topology subtrees removed when a topology is cleaned up; ``/topology/<id>`` goes last.
TOPOLOGY_SUBTREES = (ASSIGNMENTS, TASKS, TASKBEATS, TASKERRORS, GRAY_UPGRADE, LOG_CONFIGS, CODE)


def _child(parent: str, name: str | int) -> str:
    name = str(name)
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"invalid ZooKeeper node name {name!r} under {parent}")
    return f"{parent}/{name}"


def supervisor(supervisor_id: str) -> str:
    return _child(SUPERVISORS, supervisor_id)


def nimbus_slave(host_port: str) -> str:
    return _child(NIMBUS_SLAVES, host_port)


def topology(topology_id: str) -> str:
    return _child(TOPOLOGIES, topology_id)


def tasks(topology_id: str) -> str:
    return _child(TASKS, topology_id)


def assignment(topology_id: str) -> str:
    return _child(ASSIGNMENTS, topology_id)


def assignment_bak(topology_name: str) -> str:
    """Keyed by topology *name*: the last assignment of a name outlives its topology ids."""
    return _child(ASSIGNMENTS_BAK, topology_name)


def taskbeats(topology_id: str) -> str:
    return _child(TASKBEATS, topology_id)


def task_errors_root(topology_id: str) -> str:
    return _child(TASKERRORS, topology_id)


def task_errors(topology_id: str, task_id: int) -> str:
    return _child(task_errors_root(topology_id), task_id)


def task_error(topology_id: str, task_id: int, time_secs: int) -> str:
    return _child(task_errors(topology_id, task_id), time_secs)


def gray_upgrade(topology_id: str) -> str:
    return _child(GRAY_UPGRADE, topology_id)


def gray_upgrade_conf(topology_id: str) -> str:
    return _child(gray_upgrade(topology_id), "conf")


def upgrading_workers(topology_id: str) -> str:
    return _child(gray_upgrade(topology_id), "upgrading_workers")


def upgrading_worker(topology_id: str, host_port: str) -> str:
    return _child(upgrading_workers(topology_id), host_port)


def upgraded_workers(topology_id: str) -> str:
    return _child(gray_upgrade(topology_id), "upgraded_workers")


def upgraded_worker(topology_id: str, host_port: str) -> str:
    return _child(upgraded_workers(topology_id), host_port)


def log_config(topology_id: str) -> str:
    """Storm's ``/logconfigs/<id>``: the logger levels ``storm set_log_level`` gave the topology's workers."""
    return _child(LOG_CONFIGS, topology_id)


def code(topology_id: str) -> str:
    """``/code/<id>``: the code versions the leader stores for a topology, which followers copy."""
    return _child(CODE, topology_id)


def code_holder(host_port: str) -> str:
    """``/code_holders/<host:port>`` (ephemeral): which code versions that nimbus holds and serves."""
    return _child(CODE_HOLDERS, host_port)
