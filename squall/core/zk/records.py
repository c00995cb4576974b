"""Typed records for every ZooKeeper node, and their JSON codec.

Values are UTF-8 JSON objects carrying ``"v"`` (the record's schema version) so ``zkCli.sh get`` is
readable and a daemon can refuse data written by a newer Squall instead of misreading it. Decoding
is driven by the dataclass type hints: unknown fields are ignored (an older reader tolerates newer
optional fields) and missing ones take their defaults.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

#: ZooKeeper's default jute.maxbuffer is 1 MiB; stay well under it (JStorm refuses > 800 KB).
MAX_VALUE_BYTES = 800 * 1024


class RecordError(ValueError):
    """A znode value that cannot be encoded or decoded as the expected record."""


class ValueTooLarge(RecordError):
    def __init__(self, what: str, size: int, limit: int = MAX_VALUE_BYTES) -> None:
        super().__init__(
            f"{what} encodes to {size} bytes, over the {limit}-byte ZooKeeper value limit; "
            "store big data outside ZooKeeper (code store) or split it"
        )
        self.what = what
        self.size = size
        self.limit = limit


class TopologyStatus(str, enum.Enum):
    """JStorm's statuses; Storm's four (ACTIVE, INACTIVE, REBALANCING, KILLED) are a subset."""

    ACTIVE = "active"
    INACTIVE = "inactive"
    REBALANCING = "rebalancing"
    KILLED = "killed"
    UPGRADING = "upgrading"
    ROLLBACK = "rollback"


class AssignmentType(str, enum.Enum):
    ASSIGN = "assign"
    UPDATE = "update"  # conf pushed to running workers, no moves
    SCALE = "scale"  # parallelism changed by a rebalance


class ComponentType(str, enum.Enum):
    SPOUT = "spout"
    BOLT = "bolt"


class ErrorLevel(str, enum.Enum):
    WARN = "warn"
    ERROR = "error"
    FATAL = "fatal"


@dataclass(frozen=True)
class SupervisorInfo:
    """``/supervisors/<id>`` (ephemeral): a live supervisor and its slots."""

    schema: ClassVar[int] = 1
    supervisor_id: str
    host: str
    ports: list[int]
    used_ports: list[int] = field(default_factory=list)
    time_secs: int = 0  # last heartbeat, supervisor's clock
    uptime_secs: int = 0
    version: str = ""
    #: Assigned ports whose worker died (exited, never beat, or stopped beating) and none has come up since:
    #: the supervisor's crash-loop back-off, which nimbus reports as a topology's failing workers.
    failing_ports: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class NimbusMaster:
    """``/nimbus_master`` (ephemeral): where clients find the leader (``tls_port``: its TLS listener, 0 for none)."""

    schema: ClassVar[int] = 1
    host: str
    port: int
    since_secs: int = 0
    tls_port: int = 0

    @property
    def host_port(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class NimbusSlave:
    """``/nimbus_slave/<host:port>`` (ephemeral): a follower nimbus."""

    schema: ClassVar[int] = 1
    host: str
    port: int
    uptime_secs: int = 0
    tls_port: int = 0


@dataclass(frozen=True)
class PendingAction:
    """A delayed kill or rebalance, kept in StormBase so a restarted nimbus re-arms it."""

    schema: ClassVar[int] = 1
    action: str  # "kill" | "rebalance"
    delay_secs: int
    due_secs: int  # epoch seconds when the action fires
    num_workers: int | None = None
    num_executors: dict[str, int] = field(default_factory=dict)
    reassign: bool = False
    conf_json: str | None = None


@dataclass(frozen=True)
class StormBase:
    """``/topology/<id>``: a topology is alive while this node exists; written last at submit."""

    schema: ClassVar[int] = 1
    name: str
    status: TopologyStatus
    launch_time_secs: int
    num_workers: int
    owner: str = ""
    prev_status: TopologyStatus | None = None
    pending: PendingAction | None = None
    component_executors: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskInfo:
    schema: ClassVar[int] = 1
    component: str
    type: ComponentType


@dataclass(frozen=True)
class TopologyTasks:
    """``/tasks/<id>``: one node for all tasks (not one per task) keeps the znode count flat."""

    schema: ClassVar[int] = 1
    tasks: dict[int, TaskInfo]


@dataclass(frozen=True)
class WorkerAssignment:
    """One worker slot of an assignment: which tasks run in the process on ``host:port``."""

    schema: ClassVar[int] = 1
    supervisor_id: str
    host: str
    port: int
    tasks: list[int]
    mem: int = 0  # bytes
    cpu: int = 0  # CPU weight, worker.cpu.slot.num

    @property
    def host_port(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Assignment:
    """``/assignments/<id>``: written only by nimbus's assign thread."""

    schema: ClassVar[int] = 1
    code_dir: str
    workers: list[WorkerAssignment]
    node_host: dict[str, str] = field(default_factory=dict)  # supervisor id -> host
    task_start_secs: dict[int, int] = field(default_factory=dict)
    timestamp_ms: int = 0
    type: AssignmentType = AssignmentType.ASSIGN
    code_version: int = 1  # the code every worker runs, except those a gray upgrade moved on
    #: Workers the topology runs on when slots are free; more than ``workers`` while the cluster lacks the slots
    #: (nimbus adds workers as they free up). 0: not known (written by an older nimbus).
    wanted_workers: int = 0


@dataclass(frozen=True)
class AssignmentBak:
    """``/assignments_bak/<name>``: the last assignment of a name, for ``use.old.assignment``."""

    schema: ClassVar[int] = 1
    component_tasks: dict[str, list[int]]
    assignment: Assignment


@dataclass(frozen=True)
class TaskStats:
    """A task's counters since it started (Storm's ``:all-time`` window), exact.

    ``emitted``/``transferred`` are keyed by output stream. ``acked``/``failed``/``latency_ms`` are keyed by
    output stream for spouts (latency: average complete latency) and by input ``component:stream`` for
    bolts (latency: average execute latency); ``executed`` is a bolt's, by input ``component:stream``, and so
    are ``process_ms`` (average process latency: execute's start to the ack) and ``processed`` (how many acks
    that average holds: it is sampled, and windows weigh it by this count).
    ``failed_by_reason`` splits the failures by why (:data:`squall.core.stats.FAIL_REASONS`). ``user_counters`` and
    ``user_gauges`` are the task's user metrics (:mod:`squall.api.metrics`) as read at the beat: values, not
    windowed counts.
    """

    schema: ClassVar[int] = 1
    emitted: dict[str, int] = field(default_factory=dict)
    transferred: dict[str, int] = field(default_factory=dict)
    acked: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    executed: dict[str, int] = field(default_factory=dict)
    latency_ms: dict[str, float] = field(default_factory=dict)
    process_ms: dict[str, float] = field(default_factory=dict)
    processed: dict[str, int] = field(default_factory=dict)
    failed_by_reason: dict[str, int] = field(default_factory=dict)
    user_counters: dict[str, int] = field(default_factory=dict)
    user_gauges: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskBeat:
    schema: ClassVar[int] = 1
    time_secs: int
    uptime_secs: int
    stats: TaskStats | None = None


@dataclass(frozen=True)
class TaskHeartbeats:
    """``/taskbeats/<id>``: the topology master's task id and the latest beat of each task."""

    schema: ClassVar[int] = 1
    topology_master_id: int
    beats: dict[int, TaskBeat] = field(default_factory=dict)


#: How long a topology counts as "has an error" after one (JStorm's default ``TaskError`` duration, 30 minutes).
ERROR_DURATION_SECS = 1800


@dataclass(frozen=True)
class TaskError:
    """``/taskerrors/<id>/<task>/<time>``: one of the last few errors of a task."""

    schema: ClassVar[int] = 1
    error: str
    time_secs: int
    level: ErrorLevel = ErrorLevel.ERROR
    code: int = 0
    duration_secs: int = ERROR_DURATION_SECS  # how long the topology counts as "has an error"
    host: str = ""
    port: int = 0


@dataclass(frozen=True)
class GrayUpgradeConf:
    """``/gray_upgrade/<id>/conf``: one gray upgrade, from start to its end (kept after, to answer "why").

    The next batch is picked from ``workers`` > ``component`` > ``worker_num`` > ``all_remaining`` when
    ``continue_upgrade`` is set (see :mod:`nimbus.upgrade`). It ended when ``complete_ms`` is set: rolled
    back if ``rollback``, else completed.
    """

    schema: ClassVar[int] = 1
    expire_ms: int
    version: int = 0  # the code version being rolled out; the assignment's ``code_version`` is the old one
    worker_num: int = 0
    component: str | None = None
    workers: list[str] = field(default_factory=list)  # host:port
    all_remaining: bool = False
    complete_ms: int = 0
    continue_upgrade: bool = False
    rollback: bool = False
    reason: str = ""  # why it rolled back


@dataclass(frozen=True)
class WorkerMark:
    """``/gray_upgrade/<id>/upgrading_workers|upgraded_workers/<host:port>``."""

    schema: ClassVar[int] = 1
    time_secs: int


@dataclass(frozen=True)
class Blacklist:
    """``/blacklist``: hosts nimbus must not schedule on."""

    schema: ClassVar[int] = 1
    hosts: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class LoggerLevel:
    """One logger's level as ``storm set_log_level`` set it."""

    level: str  # Storm's level name: ALL, TRACE, DEBUG, INFO, WARN, ERROR, FATAL, OFF
    timeout_secs: int = 0  # as asked; 0: until removed
    expires_ms: int = 0  # epoch ms at which workers put the logger back; 0: never


@dataclass(frozen=True)
class LoggerLevels:
    """``/logconfigs/<topology-id>``: logger name ("ROOT": the root logger) → level, for every worker of it."""

    schema: ClassVar[int] = 1
    loggers: dict[str, LoggerLevel] = field(default_factory=dict)


@dataclass(frozen=True)
class CodeManifest:
    """``/code/<topology-id>``, written by the leader: each stored code version's digest, and the current one.

    A digest, not just a version number, because a rebalance rewrites the current version's conf in place.
    """

    schema: ClassVar[int] = 1
    current: int
    versions: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CodeHolder:
    """``/code_holders/<host:port>`` (ephemeral), one per nimbus: topology id → version → digest of the code
    it holds, so the leader counts replicas and supervisors find another nimbus to download from."""

    schema: ClassVar[int] = 1
    host: str
    port: int
    code: dict[str, dict[int, str]] = field(default_factory=dict)
    tls_port: int = 0

    @property
    def host_port(self) -> str:
        return f"{self.host}:{self.port}"

    def holds(self, topology_id: str, version: int, digest: str | None = None) -> bool:
        """True when this nimbus holds ``version`` of ``topology_id`` (with that digest, when one is given).

        >>> CodeHolder("h", 6627, {"t-1-2": {1: "ab"}}).holds("t-1-2", 1, "ab")
        True
        """
        held = self.code.get(topology_id, {}).get(version)
        return held is not None and (digest is None or held == digest)


class _Versioned(Protocol):
    """A record type: its values carry this schema version."""

    schema: ClassVar[int]


R = TypeVar("R", bound=_Versioned)


def encode(record: Any) -> bytes:
    """Record → compact UTF-8 JSON with its schema version, refusing values ZooKeeper would choke on."""
    if isinstance(record, type) or not dataclasses.is_dataclass(type(record)):
        raise RecordError(f"not a record: {record!r}")
    data = json.dumps({"v": type(record).schema, **_to_json(record)}, separators=(",", ":"), sort_keys=True)
    raw = data.encode("utf-8")
    if len(raw) > MAX_VALUE_BYTES:
        raise ValueTooLarge(type(record).__name__, len(raw))
    return raw


def decode(cls: type[R], raw: bytes) -> R:
    """Bytes written by :func:`encode` → ``cls``; a clear :class:`RecordError` for anything else."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordError(f"{cls.__name__}: value is not UTF-8 JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RecordError(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
    version = data.pop("v", None)
    if not isinstance(version, int):
        raise RecordError(f"{cls.__name__}: missing schema version 'v'")
    if version > cls.schema:
        raise RecordError(
            f"{cls.__name__}: schema version {version} is newer than this Squall's {cls.schema}; upgrade this daemon"
        )
    return _from_json(cls, data, cls.__name__)


def _to_json(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: _to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_to_json(v) for v in value]
    return value


def _from_json(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        (inner,) = [o for o in options if o is not type(None)]
        return _from_json(inner, value, where)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise RecordError(f"{where}: expected an object")
        hints = typing.get_type_hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in value:
                kwargs[f.name] = _from_json(hints[f.name], value[f.name], f"{where}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise RecordError(f"{where}: missing field {f.name!r}")
        return tp(**kwargs)
    if origin is list:
        if not isinstance(value, list):
            raise RecordError(f"{where}: expected a list")
        (item,) = typing.get_args(tp)
        return [_from_json(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise RecordError(f"{where}: expected an object")
        key_tp, val_tp = typing.get_args(tp)
        try:
            return {key_tp(k): _from_json(val_tp, v, f"{where}[{k}]") for k, v in value.items()}
        except ValueError as exc:
            raise RecordError(f"{where}: bad key ({exc})") from None
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise RecordError(f"{where}: {value!r} is not one of {[m.value for m in tp]}") from None
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp in (int, float, str, bool) and type(value) is not tp:
        raise RecordError(f"{where}: expected {tp.__name__}, got {value!r}")
    return value
