"""The types of the Thrift module :mod:`squall.core.thrift` loads from idl/storm.thrift at run time.

thriftpy2 builds these classes when the IDL is loaded, so no checker can see them; this stub declares them
for mypy and IDEs. tests/test_thrift_stub.py keeps it equal to the IDL (names, fields, field types).
"""

from types import ModuleType
from typing import ClassVar

class AlreadyAliveException(Exception):
    msg: str
    def __init__(self, msg: str | None = None) -> None: ...

class AuthorizationException(Exception):
    msg: str
    def __init__(self, msg: str | None = None) -> None: ...

class Bolt:
    bolt_object: ComponentObject
    common: ComponentCommon
    def __init__(self, bolt_object: ComponentObject | None = None, common: ComponentCommon | None = None) -> None: ...

class BoltStats:
    acked: dict[str, dict[GlobalStreamId, int]]
    failed: dict[str, dict[GlobalStreamId, int]]
    process_ms_avg: dict[str, dict[GlobalStreamId, float]]
    executed: dict[str, dict[GlobalStreamId, int]]
    execute_ms_avg: dict[str, dict[GlobalStreamId, float]]
    processed: dict[str, dict[GlobalStreamId, int]] | None
    def __init__(
        self,
        acked: dict[str, dict[GlobalStreamId, int]] | None = None,
        failed: dict[str, dict[GlobalStreamId, int]] | None = None,
        process_ms_avg: dict[str, dict[GlobalStreamId, float]] | None = None,
        executed: dict[str, dict[GlobalStreamId, int]] | None = None,
        execute_ms_avg: dict[str, dict[GlobalStreamId, float]] | None = None,
        processed: dict[str, dict[GlobalStreamId, int]] | None = None,
    ) -> None: ...

class ClusterSummary:
    supervisors: list[SupervisorSummary]
    nimbus_uptime_secs: int | None
    topologies: list[TopologySummary]
    nimbuses: list[NimbusSummary]
    def __init__(
        self,
        supervisors: list[SupervisorSummary] | None = None,
        nimbus_uptime_secs: int | None = None,
        topologies: list[TopologySummary] | None = None,
        nimbuses: list[NimbusSummary] | None = None,
    ) -> None: ...

class ComponentCommon:
    inputs: dict[GlobalStreamId, Grouping]
    streams: dict[str, StreamInfo]
    parallelism_hint: int | None
    json_conf: str | None
    def __init__(
        self,
        inputs: dict[GlobalStreamId, Grouping] | None = None,
        streams: dict[str, StreamInfo] | None = None,
        parallelism_hint: int | None = None,
        json_conf: str | None = None,
    ) -> None: ...

class ComponentObject:
    serialized_java: bytes | None
    shell: ShellComponent | None
    java_object: JavaObject | None
    python_object: PythonComponent | None
    def __init__(
        self,
        serialized_java: bytes | None = None,
        shell: ShellComponent | None = None,
        java_object: JavaObject | None = None,
        python_object: PythonComponent | None = None,
    ) -> None: ...

class Credentials:
    creds: dict[str, str]
    def __init__(self, creds: dict[str, str] | None = None) -> None: ...

class DebugOptions:
    enable: bool | None
    samplingpct: float | None
    def __init__(self, enable: bool | None = None, samplingpct: float | None = None) -> None: ...

class ErrorInfo:
    error: str
    error_time_secs: int
    host: str | None
    port: int | None
    def __init__(
        self,
        error: str | None = None,
        error_time_secs: int | None = None,
        host: str | None = None,
        port: int | None = None,
    ) -> None: ...

class ExecutorInfo:
    task_start: int
    task_end: int
    def __init__(self, task_start: int | None = None, task_end: int | None = None) -> None: ...

class ExecutorSpecificStats:
    bolt: BoltStats | None
    spout: SpoutStats | None
    def __init__(self, bolt: BoltStats | None = None, spout: SpoutStats | None = None) -> None: ...

class ExecutorStats:
    emitted: dict[str, dict[str, int]]
    transferred: dict[str, dict[str, int]]
    specific: ExecutorSpecificStats
    rate: float
    failed_by_reason: dict[str, dict[str, int]] | None
    user_counters: dict[str, int] | None
    user_gauges: dict[str, float] | None
    def __init__(
        self,
        emitted: dict[str, dict[str, int]] | None = None,
        transferred: dict[str, dict[str, int]] | None = None,
        specific: ExecutorSpecificStats | None = None,
        rate: float | None = None,
        failed_by_reason: dict[str, dict[str, int]] | None = None,
        user_counters: dict[str, int] | None = None,
        user_gauges: dict[str, float] | None = None,
    ) -> None: ...

class ExecutorSummary:
    executor_info: ExecutorInfo
    component_id: str
    host: str
    port: int
    uptime_secs: int
    stats: ExecutorStats | None
    supervisor_id: str | None
    def __init__(
        self,
        executor_info: ExecutorInfo | None = None,
        component_id: str | None = None,
        host: str | None = None,
        port: int | None = None,
        uptime_secs: int | None = None,
        stats: ExecutorStats | None = None,
        supervisor_id: str | None = None,
    ) -> None: ...

class GlobalStreamId:
    componentId: str
    streamId: str
    def __init__(self, componentId: str | None = None, streamId: str | None = None) -> None: ...

class GrayUpgradeOptions:
    component: str | None
    workers: list[str] | None
    worker_num: int | None
    ttl_ms: int | None
    def __init__(
        self,
        component: str | None = None,
        workers: list[str] | None = None,
        worker_num: int | None = None,
        ttl_ms: int | None = None,
    ) -> None: ...

class Grouping:
    fields: list[str] | None
    shuffle: NullStruct | None
    all: NullStruct | None
    none: NullStruct | None
    direct: NullStruct | None
    custom_object: JavaObject | None
    custom_serialized: bytes | None
    local_or_shuffle: NullStruct | None
    partial_key: list[str] | None
    def __init__(
        self,
        fields: list[str] | None = None,
        shuffle: NullStruct | None = None,
        all: NullStruct | None = None,
        none: NullStruct | None = None,
        direct: NullStruct | None = None,
        custom_object: JavaObject | None = None,
        custom_serialized: bytes | None = None,
        local_or_shuffle: NullStruct | None = None,
        partial_key: list[str] | None = None,
    ) -> None: ...

class InvalidTopologyException(Exception):
    msg: str
    def __init__(self, msg: str | None = None) -> None: ...

class JavaObject:
    full_class_name: str
    args_list: list[JavaObjectArg]
    def __init__(self, full_class_name: str | None = None, args_list: list[JavaObjectArg] | None = None) -> None: ...

class JavaObjectArg:
    int_arg: int | None
    long_arg: int | None
    string_arg: str | None
    bool_arg: bool | None
    binary_arg: bytes | None
    double_arg: float | None
    def __init__(
        self,
        int_arg: int | None = None,
        long_arg: int | None = None,
        string_arg: str | None = None,
        bool_arg: bool | None = None,
        binary_arg: bytes | None = None,
        double_arg: float | None = None,
    ) -> None: ...

class KillOptions:
    wait_secs: int | None
    def __init__(self, wait_secs: int | None = None) -> None: ...

class LogConfig:
    named_logger_level: dict[str, LogLevel] | None
    def __init__(self, named_logger_level: dict[str, LogLevel] | None = None) -> None: ...

class LogLevel:
    action: int
    target_log_level: str | None
    reset_log_level_timeout_secs: int | None
    reset_log_level_timeout_epoch: int | None
    reset_log_level: str | None
    def __init__(
        self,
        action: int | None = None,
        target_log_level: str | None = None,
        reset_log_level_timeout_secs: int | None = None,
        reset_log_level_timeout_epoch: int | None = None,
        reset_log_level: str | None = None,
    ) -> None: ...

class LogLevelAction:
    UNCHANGED: ClassVar[int] = 1
    UPDATE: ClassVar[int] = 2
    REMOVE: ClassVar[int] = 3
    _VALUES_TO_NAMES: ClassVar[dict[int, str]]
    _NAMES_TO_VALUES: ClassVar[dict[str, int]]

# The service, given to thriftpy2's client and processor, which annotate it as a module (a class at run time).
Nimbus: ModuleType

class NimbusSummary:
    host: str
    port: int
    uptime_secs: int
    isLeader: bool
    version: str
    tlsPort: int | None
    def __init__(
        self,
        host: str | None = None,
        port: int | None = None,
        uptime_secs: int | None = None,
        isLeader: bool | None = None,
        version: str | None = None,
        tlsPort: int | None = None,
    ) -> None: ...

class NotAliveException(Exception):
    msg: str
    def __init__(self, msg: str | None = None) -> None: ...

class NullStruct:
    def __init__(self) -> None: ...

class PythonComponent:
    module_name: str
    class_name: str
    args_json: str | None
    kwargs_json: str | None
    def __init__(
        self,
        module_name: str | None = None,
        class_name: str | None = None,
        args_json: str | None = None,
        kwargs_json: str | None = None,
    ) -> None: ...

class RebalanceOptions:
    wait_secs: int | None
    num_workers: int | None
    num_executors: dict[str, int] | None
    topology_conf_overrides: str | None
    reassign: bool | None
    def __init__(
        self,
        wait_secs: int | None = None,
        num_workers: int | None = None,
        num_executors: dict[str, int] | None = None,
        topology_conf_overrides: str | None = None,
        reassign: bool | None = None,
    ) -> None: ...

class ShellComponent:
    execution_command: str | None
    script: str | None
    def __init__(self, execution_command: str | None = None, script: str | None = None) -> None: ...

class SpoutSpec:
    spout_object: ComponentObject
    common: ComponentCommon
    def __init__(self, spout_object: ComponentObject | None = None, common: ComponentCommon | None = None) -> None: ...

class SpoutStats:
    acked: dict[str, dict[str, int]]
    failed: dict[str, dict[str, int]]
    complete_ms_avg: dict[str, dict[str, float]]
    def __init__(
        self,
        acked: dict[str, dict[str, int]] | None = None,
        failed: dict[str, dict[str, int]] | None = None,
        complete_ms_avg: dict[str, dict[str, float]] | None = None,
    ) -> None: ...

class StateSpoutSpec:
    state_spout_object: ComponentObject
    common: ComponentCommon
    def __init__(
        self, state_spout_object: ComponentObject | None = None, common: ComponentCommon | None = None
    ) -> None: ...

class StormTopology:
    spouts: dict[str, SpoutSpec]
    bolts: dict[str, Bolt]
    state_spouts: dict[str, StateSpoutSpec]
    worker_hooks: list[bytes] | None
    dependency_jars: list[str] | None
    dependency_artifacts: list[str] | None
    storm_version: str | None
    jdk_version: str | None
    def __init__(
        self,
        spouts: dict[str, SpoutSpec] | None = None,
        bolts: dict[str, Bolt] | None = None,
        state_spouts: dict[str, StateSpoutSpec] | None = None,
        worker_hooks: list[bytes] | None = None,
        dependency_jars: list[str] | None = None,
        dependency_artifacts: list[str] | None = None,
        storm_version: str | None = None,
        jdk_version: str | None = None,
    ) -> None: ...

class StreamInfo:
    output_fields: list[str]
    direct: bool
    def __init__(self, output_fields: list[str] | None = None, direct: bool | None = None) -> None: ...

class SubmitOptions:
    initial_status: int
    creds: Credentials | None
    def __init__(self, initial_status: int | None = None, creds: Credentials | None = None) -> None: ...

class SupervisorSummary:
    host: str
    uptime_secs: int
    num_workers: int
    num_used_workers: int
    supervisor_id: str
    version: str | None
    total_resources: dict[str, float] | None
    used_mem: float | None
    used_cpu: float | None
    def __init__(
        self,
        host: str | None = None,
        uptime_secs: int | None = None,
        num_workers: int | None = None,
        num_used_workers: int | None = None,
        supervisor_id: str | None = None,
        version: str | None = None,
        total_resources: dict[str, float] | None = None,
        used_mem: float | None = None,
        used_cpu: float | None = None,
    ) -> None: ...

class TaskHeartbeat:
    time_secs: int
    uptime_secs: int
    stats: ExecutorStats | None
    def __init__(
        self, time_secs: int | None = None, uptime_secs: int | None = None, stats: ExecutorStats | None = None
    ) -> None: ...

class TopologyAssignException(Exception):
    msg: str
    def __init__(self, msg: str | None = None) -> None: ...

class TopologyInfo:
    id: str
    name: str
    uptime_secs: int
    executors: list[ExecutorSummary]
    status: str
    errors: dict[str, list[ErrorInfo]]
    component_debug: dict[str, DebugOptions] | None
    sched_status: str | None
    owner: str | None
    replication_count: int | None
    requested_memonheap: float | None
    requested_memoffheap: float | None
    requested_cpu: float | None
    assigned_memonheap: float | None
    assigned_memoffheap: float | None
    assigned_cpu: float | None
    def __init__(
        self,
        id: str | None = None,
        name: str | None = None,
        uptime_secs: int | None = None,
        executors: list[ExecutorSummary] | None = None,
        status: str | None = None,
        errors: dict[str, list[ErrorInfo]] | None = None,
        component_debug: dict[str, DebugOptions] | None = None,
        sched_status: str | None = None,
        owner: str | None = None,
        replication_count: int | None = None,
        requested_memonheap: float | None = None,
        requested_memoffheap: float | None = None,
        requested_cpu: float | None = None,
        assigned_memonheap: float | None = None,
        assigned_memoffheap: float | None = None,
        assigned_cpu: float | None = None,
    ) -> None: ...

class TopologyInitialStatus:
    ACTIVE: ClassVar[int] = 1
    INACTIVE: ClassVar[int] = 2
    _VALUES_TO_NAMES: ClassVar[dict[int, str]]
    _NAMES_TO_VALUES: ClassVar[dict[str, int]]

class TopologySummary:
    id: str
    name: str
    num_tasks: int
    num_executors: int
    num_workers: int
    uptime_secs: int
    status: str
    sched_status: str | None
    owner: str | None
    replication_count: int | None
    requested_memonheap: float | None
    requested_memoffheap: float | None
    requested_cpu: float | None
    assigned_memonheap: float | None
    assigned_memoffheap: float | None
    assigned_cpu: float | None
    def __init__(
        self,
        id: str | None = None,
        name: str | None = None,
        num_tasks: int | None = None,
        num_executors: int | None = None,
        num_workers: int | None = None,
        uptime_secs: int | None = None,
        status: str | None = None,
        sched_status: str | None = None,
        owner: str | None = None,
        replication_count: int | None = None,
        requested_memonheap: float | None = None,
        requested_memoffheap: float | None = None,
        requested_cpu: float | None = None,
        assigned_memonheap: float | None = None,
        assigned_memoffheap: float | None = None,
        assigned_cpu: float | None = None,
    ) -> None: ...

class TopologyTaskHbInfo:
    topologyId: str
    topologyMasterId: int
    taskHbs: dict[int, TaskHeartbeat] | None
    def __init__(
        self,
        topologyId: str | None = None,
        topologyMasterId: int | None = None,
        taskHbs: dict[int, TaskHeartbeat] | None = None,
    ) -> None: ...
