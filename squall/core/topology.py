"""What a submitted topology becomes before it runs: shared by nimbus (submit), workers and local mode.

Submit runs, in order: :func:`validate_topology` → :func:`normalize` → :func:`topology_id` →
(code store: the normalized *user* topology, served by ``getUserTopology``) →
:func:`system_topology` (served by ``getTopology``) → :func:`make_tasks` (``/tasks/<id>``). Local mode and
workers rebuild the system topology with the same functions, so every runtime sees the same streams and ids.

Everything here is a pure function over the Thrift structs of ``idl/storm.thrift``: no I/O, no
clock, and arguments are never mutated (callers keep the submitted objects as they came). Errors a
user can fix are ``InvalidTopologyException`` with a message that names the component, stream,
field or key at fault and says what is allowed; checks run over sorted ids so the same bad
topology always gets the same message.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any

from squall.core.config.keys import KEY_BY_NAME
from squall.core.config.validation import ConfigError, validate_conf
from squall.core.names import MAX_ID_LENGTH, id_problem, quote
from squall.core.system_ids import (
    ACK_ACK_STREAM,
    ACK_FAIL_STREAM,
    ACK_INIT_STREAM,
    ACK_RESET_TIMEOUT_STREAM,
    ACKER,
    CHECKPOINT_FIELDS,
    CHECKPOINT_SPOUT,
    CHECKPOINT_STREAM,
    MASTER_HEARTBEAT_STREAM,
    RESERVED_PREFIX,
    STATEFUL_KEY,
    TOPOLOGY_MASTER,
)
from squall.core.thrift import storm
from squall.core.windowconf import window_of, window_problem
from squall.core.zk.records import ComponentType, TaskInfo, TopologyTasks

__all__ = [
    "MAX_ID_LENGTH",
    "component_tasks",
    "make_tasks",
    "rescale_tasks",
    "name_of",
    "stateful_bolts",
    "normalize",
    "system_topology",
    "topology_id",
    "topology_master_task",
    "validate_name",
    "validate_topology",
]


_ACK_INIT_FIELDS = ["id", "init-val", "spout-task"]
_ACK_ACK_FIELDS = ["id", "ack-val"]
_ACK_FAIL_FIELDS = ["id"]
_ACK_RESET_TIMEOUT_FIELDS = ["id"]
_ACKER_OUT_FIELDS = ["id"]
_HEARTBEAT_FIELDS = ["task-id", "uptime-secs", "stats"]

_ACKER_CLASS = ("worker.acker", "Acker")
_TOPOLOGY_MASTER_CLASS = ("worker.topology_master", "TopologyMaster")  # executors built in, by component id
_CHECKPOINT_SPOUT_CLASS = ("worker.checkpointspout", "CheckpointSpout")  # a spout class, run as any spout
_SYSTEM_BOLTS = (ACKER, TOPOLOGY_MASTER)  # task-id order after the user bolts
#: Storm's floor of topology.state.checkpoint.interval.ms (CheckpointSpout).
MIN_CHECKPOINT_INTERVAL_MS = 100

# (kind used in messages, StormTopology field, implementation field of its specs)
_KINDS = (
    ("spout", "spouts", "spout_object"),
    ("bolt", "bolts", "bolt_object"),
    ("state spout", "state_spouts", "state_spout_object"),
)
_OBJECT_FIELD = {kind: obj for kind, _, obj in _KINDS}
_RUNNABLE = ("python_object", "shell")
_OVERRIDES = (("topology.spout.parallelism", "spouts", "spout"), ("topology.bolt.parallelism", "bolts", "bolt"))

_TOPOLOGY_ID = re.compile(r"(.+)-([0-9]+)-([0-9]+)")


# ------------------------------------------------------------------------------------------------
# Validation
# ------------------------------------------------------------------------------------------------


def validate_name(name: str) -> None:
    """Reject names that would break ZooKeeper paths, topology ids or the CLI (JStorm's rules + a cap)."""
    if not isinstance(name, str):
        raise _invalid(f"the topology name must be a string, got {type(name).__name__}")
    if problem := id_problem(name):
        raise _invalid(f"topology name {quote(name)} is invalid: {problem}")
    if name.isdecimal():
        raise _invalid(f"topology name {quote(name)} is all digits: add a letter, numeric names are not allowed")
    if name.lower() == "null":
        raise _invalid(f"topology name {quote(name)} is reserved: choose another name")
    if name in (".", ".."):
        raise _invalid(f'topology name {quote(name)} is reserved ("." and ".." are path elements): choose another name')


def validate_topology(name: str, topology: storm.StormTopology, conf: Mapping[str, Any]) -> None:
    """Raise ``InvalidTopologyException`` for the most fundamental problem of a submission, if any.

    Order: name; component ids, duplicates, state spouts, no spouts; each component (shape,
    implementation, spout inputs, parallelism, json_conf, stream ids); groupings; topology conf.
    ``conf`` is the topology conf as submitted: keys it leaves out take the cluster defaults.
    """
    validate_name(name)
    if not isinstance(topology, storm.StormTopology):
        raise _invalid(f"no topology was sent: expected a StormTopology, got {type(topology).__name__}")
    members = _members(topology)
    for kind, cid, _ in members:
        _check_id(f"{kind} id {quote(cid)}", cid)
    _check_unique(members)
    if topology.state_spouts:
        ids = ", ".join(quote(c) for c in sorted(topology.state_spouts))
        raise _invalid(f"state spouts are not supported: Squall does not run state spouts ({ids}); use a spout")
    if not topology.spouts:
        raise _invalid("the topology has no spouts: at least one spout is needed to emit tuples")
    for kind, cid, spec in members:
        _check_component(kind, cid, spec)
    _check_groupings(topology)
    _check_conf(topology, conf)
    _check_stateful(topology, conf)
    _check_windows(topology, conf)


def _members(topology: storm.StormTopology) -> list[tuple[str, str, Any]]:
    """(kind, id, spec) of every component, spouts then bolts then state spouts, each sorted by id."""
    members: list[tuple[str, str, Any]] = []
    for kind, field, _ in _KINDS:
        specs = getattr(topology, field) or {}
        members.extend((kind, cid, specs[cid]) for cid in sorted(specs))
    return members


def _check_id(what: str, ident: str) -> None:
    if ident.startswith(RESERVED_PREFIX):
        raise _invalid(f'{what} is reserved: ids starting with "__" belong to Squall\'s system components and streams')
    if problem := id_problem(ident):
        raise _invalid(f"{what} is invalid: {problem}")


def _check_unique(members: list[tuple[str, str, Any]]) -> None:
    seen: dict[str, list[str]] = {}
    for kind, cid, _ in members:
        seen.setdefault(cid, []).append(kind)
    dups = [f"{quote(cid)} ({' and '.join(kinds)})" for cid, kinds in sorted(seen.items()) if len(kinds) > 1]
    if dups:
        raise _invalid(f"duplicate component ids: {', '.join(dups)}; ids must be unique across spouts and bolts")


def _check_component(kind: str, cid: str, spec: Any) -> None:
    label = f"{kind} {quote(cid)}"
    common = spec.common
    if not isinstance(common, storm.ComponentCommon) or common.inputs is None or common.streams is None:
        raise _invalid(f"{label} has no common section: a ComponentCommon with inputs and streams maps is required")
    _check_object(label, getattr(spec, _OBJECT_FIELD[kind]))
    if kind == "spout" and common.inputs:
        raise _invalid(f"{label} declares inputs: spouts may not declare inputs (only bolts subscribe to streams)")
    if common.parallelism_hint is not None and common.parallelism_hint < 1:
        raise _invalid(f"{label} has parallelism_hint {common.parallelism_hint}: it must be >= 1 when set")
    component_conf = _json_value(f"{label} json_conf", common.json_conf or "{}")
    if not isinstance(component_conf, dict):
        raise _invalid(f"{label} json_conf must be a JSON object, got {_json_type(component_conf)}")
    _check_conf_types(component_conf, f"{label} json_conf")
    for sid in sorted(common.streams):
        _check_id(f"stream id {quote(sid)} of {label}", sid)
        info = common.streams[sid]
        if not isinstance(info, storm.StreamInfo) or not isinstance(info.output_fields, list):
            raise _invalid(f"stream {quote(sid)} of {label} has no output_fields list")


def _check_object(label: str, obj: Any) -> None:
    """Only Python classes and multilang commands can run in a Squall worker."""
    kinds = _set_members(obj)
    if not kinds:
        raise _invalid(f"{label} has no implementation: set python_object (a Python class) or shell (a command)")
    if len(kinds) > 1:
        raise _invalid(f"{label} sets several implementations ({', '.join(kinds)}): set exactly one")
    (kind,) = kinds
    if kind not in _RUNNABLE:
        raise _invalid(
            f"{label} is a Java component ({kind}): Squall runs Python (python_object) and shell "
            "(multilang) components only"
        )
    if kind == "shell":
        if not obj.shell.execution_command:
            raise _invalid(f"{label} shell component has no execution_command")
        return
    py = obj.python_object
    if not _is_module_path(py.module_name):
        raise _invalid(f"{label} python_object.module_name {quote(py.module_name)} is not an importable module path")
    if not (isinstance(py.class_name, str) and py.class_name.isidentifier()):
        raise _invalid(f"{label} python_object.class_name {quote(py.class_name)} is not a Python identifier")
    if py.args_json is not None and not isinstance(_json_value(f"{label} python_object.args_json", py.args_json), list):
        raise _invalid(f"{label} python_object.args_json must be a JSON array of constructor arguments")
    if py.kwargs_json is not None and not isinstance(
        _json_value(f"{label} python_object.kwargs_json", py.kwargs_json), dict
    ):
        raise _invalid(f"{label} python_object.kwargs_json must be a JSON object of keyword arguments")


def _check_groupings(topology: storm.StormTopology) -> None:
    """Every subscription names a declared stream, known fields, and a grouping that fits the stream."""
    streams = {cid: spec.common.streams for specs in (topology.spouts, topology.bolts) for cid, spec in specs.items()}
    for cid in sorted(topology.bolts):
        label = f"bolt {quote(cid)}"
        inputs = topology.bolts[cid].common.inputs
        for source in sorted(inputs, key=lambda g: (g.componentId, g.streamId)):
            src, sid = source.componentId, source.streamId
            if src not in streams:
                known = ", ".join(quote(c) for c in sorted(streams))
                raise _invalid(f"{label} subscribes to unknown component {quote(src)} (the topology has {known})")
            if sid not in streams[src]:
                declared = ", ".join(quote(s) for s in sorted(streams[src])) or "none"
                raise _invalid(
                    f"{label} subscribes to stream {quote(sid)} of {quote(src)}, which {quote(src)} does not declare "
                    f"(it declares: {declared})"
                )
            where = f"stream {quote(sid)} of {quote(src)}"
            grouping = inputs[source]
            kinds = _set_members(grouping)
            if len(kinds) != 1:
                got = ", ".join(kinds) or "none"
                raise _invalid(f"{label}: the grouping of {where} must set exactly one type (got {got})")
            (kind,) = kinds
            info = streams[src][sid]
            if kind in ("fields", "partial_key"):
                names = getattr(grouping, kind)
                unknown = [f for f in names if f not in info.output_fields]
                if unknown:
                    have = ", ".join(quote(f) for f in info.output_fields) or "none"
                    raise _invalid(
                        f"{label} groups {where} by unknown fields {', '.join(quote(f) for f in unknown)} "
                        f"(the stream declares: {have})"
                    )
                if kind == "partial_key" and not names:
                    raise _invalid(f"{label}: the partial_key grouping of {where} names no fields")
            if kind == "custom_serialized":
                _check_custom(label, where, grouping.custom_serialized or b"")
            if kind == "direct" and not info.direct:
                raise _invalid(f"{label} uses direct grouping on {where}, which is not declared direct")
            if kind != "direct" and info.direct:
                raise _invalid(f"{label} uses {kind} grouping on {where}, which is direct: use direct grouping")


def _check_custom(label: str, where: str, spec: bytes) -> None:
    """A custom grouping is a Python class named in JSON (``worker.grouping.custom_grouping_spec``), never
    serialized objects (Storm's Java groupings), so every reader can tell what it names."""
    try:
        decoded = json.loads(spec)
    except ValueError:  # UnicodeDecodeError included
        decoded = None
    if not (
        isinstance(decoded, dict)
        and _is_module_path(decoded.get("module"))
        and isinstance(decoded.get("class"), str)
        and decoded["class"].isidentifier()
        and isinstance(decoded.get("args", []), list)
    ):
        raise _invalid(
            f'{label}: the custom grouping of {where} must be JSON {{"module": ..., "class": ..., '
            '"args": [...]} naming a Python grouping class (serialized Java groupings cannot run here)'
        )


def _check_conf(topology: storm.StormTopology, conf: Mapping[str, Any]) -> None:
    if not isinstance(conf, Mapping):
        raise _invalid(f"the topology conf must be a JSON object, got {_json_type(conf)}")
    workers = conf.get("topology.workers", 1)
    if not (isinstance(workers, int) and not isinstance(workers, bool) and workers >= 1):
        raise _invalid(f"topology.workers must be an int >= 1 (worker processes), got {workers!r}")
    _check_conf_types(conf, "topology conf")
    for key, field, kind in _OVERRIDES:
        overrides = conf.get(key) or {}
        unknown = sorted(set(overrides) - set(getattr(topology, field)))
        if unknown:
            raise _invalid(
                f"{key} names {', '.join(quote(c) for c in unknown)}, which is not a {kind} of this topology"
            )
        low = sorted(c for c, n in overrides.items() if n < 1)
        if low:
            raise _invalid(f"{key} gives {quote(low[0])} {overrides[low[0]]}: parallelism must be >= 1")


def _check_stateful(topology: storm.StormTopology, conf: Mapping[str, Any]) -> None:
    """A stateful bolt acks its inputs once their state commits, and the checkpoint spout learns that every
    stateful task took a step from the acker: so it needs a Python bolt, ackers, and a checkpoint interval
    shorter than the message timeout (else every held input times out and replays)."""
    stateful = stateful_bolts(topology)
    if not stateful:
        return
    for cid in stateful:
        if topology.bolts[cid].bolt_object.python_object is None:
            raise _invalid(f"bolt {quote(cid)} is stateful but not a Python bolt: only a StatefulBolt can keep state")
    first = quote(stateful[0])
    if _ackers(conf) == 0:
        raise _invalid(
            f"bolt {first} is stateful, and topology.acker.executors is 0: checkpoints and the acks a stateful "
            "bolt holds until its state commits need ackers; set it to 1 or more (or leave it unset)"
        )
    interval = max(MIN_CHECKPOINT_INTERVAL_MS, _conf(conf, "topology.state.checkpoint.interval.ms"))
    timeout_secs = _conf(conf, "topology.message.timeout.secs")
    if _conf(conf, "topology.enable.message.timeouts") and interval >= timeout_secs * 1000:
        raise _invalid(
            f"bolt {first} is stateful, and topology.state.checkpoint.interval.ms ({interval}) is not below "
            f"topology.message.timeout.secs ({timeout_secs} s): inputs held until their state commits would time "
            "out and replay; shorten the interval or lengthen the timeout"
        )
    provider_conf = conf.get("topology.state.provider.config")
    if isinstance(provider_conf, str) and not isinstance(
        _json_value("topology.state.provider.config", provider_conf), dict
    ):
        raise _invalid("topology.state.provider.config must be a JSON object (a map of the provider's settings)")


def stateful_bolts(topology: storm.StormTopology) -> list[str]:
    """The ids of the bolts whose component conf marks them stateful (``squall.stateful``), sorted."""
    return [
        cid
        for cid in sorted(topology.bolts)
        if json.loads(topology.bolts[cid].common.json_conf or "{}").get(STATEFUL_KEY)
    ]


def _conf(conf: Mapping[str, Any], key: str) -> Any:
    """``conf[key]``, or the key's default when the conf leaves it out."""
    return conf[key] if key in conf else KEY_BY_NAME[key].default


def _check_windows(topology: storm.StormTopology, conf: Mapping[str, Any]) -> None:
    """Each windowed bolt's window fits its message timeout and spout pending cap (Storm's rule, which Storm
    checks only when the bolt starts): its component conf over the topology's, as the bolt sees it."""
    for cid in sorted(topology.bolts):
        component_conf = json.loads(topology.bolts[cid].common.json_conf or "{}")
        effective = {**conf, **component_conf}
        window = window_of(effective)
        if window is not None and (problem := window_problem(window, effective)):
            raise _invalid(f"bolt {quote(cid)}: {problem}")


def _check_conf_types(conf: Mapping[str, Any], source: str) -> None:
    try:
        validate_conf(conf, source)
    except ConfigError as exc:
        raise _invalid(str(exc)) from None


# ------------------------------------------------------------------------------------------------
# Normalization and the system topology
# ------------------------------------------------------------------------------------------------


def normalize(
    topology: storm.StormTopology, conf: Mapping[str, Any], *, name: str
) -> tuple[storm.StormTopology, dict[str, Any]]:
    """Fix every component's task count and fill conf defaults, on copies of a validated submission.

    Task count = conf override map (``topology.spout.parallelism`` / ``topology.bolt.parallelism``)
    > ``parallelism_hint`` > 1, capped by ``topology.max.task.parallelism`` (the component's
    json_conf beats the topology conf). As in JStorm, executors == tasks: the count becomes both
    ``parallelism_hint`` and json_conf ``topology.tasks`` (a user ``topology.tasks`` is replaced).
    """
    topology = copy.deepcopy(topology)
    full: dict[str, Any] = copy.deepcopy(dict(conf))
    for key, field, _ in _OVERRIDES:
        overrides = full.get(key) or {}
        for cid, spec in getattr(topology, field).items():
            common = spec.common
            component_conf = json.loads(common.json_conf or "{}")
            tasks = overrides.get(cid, _hint(common))
            cap = component_conf.get("topology.max.task.parallelism")
            cap = full.get("topology.max.task.parallelism") if cap is None else cap
            if cap is not None:
                tasks = min(tasks, cap)
            component_conf["topology.tasks"] = tasks
            common.json_conf = json.dumps(component_conf)
            common.parallelism_hint = tasks
    full["topology.acker.executors"] = _ackers(full)
    full["topology.name"] = name
    return topology, full


def system_topology(normalized: storm.StormTopology, conf: Mapping[str, Any]) -> storm.StormTopology:
    """The normalized topology plus ``__acker`` and ``__topology_master`` and the streams they use; with
    stateful bolts also ``$checkpointspout``, whose ``$checkpoint`` stream every stateful bolt subscribes to
    (all grouping).

    With ``topology.acker.executors`` = 0 there is no acker and no ack streams. Every component,
    system ones included, emits ``__master_task_heartbeat`` to the topology master (all grouping),
    because every task's liveness is judged from its heartbeats.

    Storm routes ``$checkpoint`` through every bolt of a stateful topology, each forwarding it once it came
    from all its inputs; here it goes from the spout straight to the stateful bolts. Storm does not align
    inputs on it either, so the guarantee is the same (at least once), and the other bolts never see it.
    """
    system = copy.deepcopy(normalized)
    ackers = _ackers(conf)
    stateful = stateful_bolts(system)
    if stateful:
        system.spouts[CHECKPOINT_SPOUT] = _checkpoint_spout()
        for cid in stateful:
            system.bolts[cid].common.inputs[storm.GlobalStreamId(CHECKPOINT_SPOUT, CHECKPOINT_STREAM)] = storm.Grouping(
                all=storm.NullStruct()
            )
    spouts, bolts = sorted(system.spouts), sorted(system.bolts)
    for cid in spouts:
        streams = system.spouts[cid].common.streams
        if ackers:
            streams[ACK_INIT_STREAM] = _stream(_ACK_INIT_FIELDS)
        streams[MASTER_HEARTBEAT_STREAM] = _stream(_HEARTBEAT_FIELDS)
    for cid in bolts:
        streams = system.bolts[cid].common.streams
        if ackers:
            streams[ACK_ACK_STREAM] = _stream(_ACK_ACK_FIELDS)
            streams[ACK_FAIL_STREAM] = _stream(_ACK_FAIL_FIELDS)
            streams[ACK_RESET_TIMEOUT_STREAM] = _stream(_ACK_RESET_TIMEOUT_FIELDS)
        streams[MASTER_HEARTBEAT_STREAM] = _stream(_HEARTBEAT_FIELDS)
    if ackers:
        ack_sources = [(s, ACK_INIT_STREAM) for s in spouts]
        ack_sources += [
            (b, stream) for b in bolts for stream in (ACK_ACK_STREAM, ACK_FAIL_STREAM, ACK_RESET_TIMEOUT_STREAM)
        ]
        acker_inputs = {storm.GlobalStreamId(c, s): storm.Grouping(fields=["id"]) for c, s in ack_sources}
        acker_streams = {
            ACK_ACK_STREAM: _stream(_ACKER_OUT_FIELDS, direct=True),
            ACK_FAIL_STREAM: _stream(_ACKER_OUT_FIELDS, direct=True),
            ACK_RESET_TIMEOUT_STREAM: _stream(_ACKER_OUT_FIELDS, direct=True),
        }
        system.bolts[ACKER] = _system_bolt(_ACKER_CLASS, acker_inputs, acker_streams, ackers)
    every = [*spouts, *bolts, *([ACKER] if ackers else []), TOPOLOGY_MASTER]
    master_inputs = {
        storm.GlobalStreamId(c, MASTER_HEARTBEAT_STREAM): storm.Grouping(all=storm.NullStruct()) for c in every
    }
    system.bolts[TOPOLOGY_MASTER] = _system_bolt(_TOPOLOGY_MASTER_CLASS, master_inputs, {}, 1)
    return system


def _system_bolt(cls: tuple[str, str], inputs: dict[Any, Any], streams: dict[str, Any], tasks: int) -> storm.Bolt:
    streams = {**streams, MASTER_HEARTBEAT_STREAM: _stream(_HEARTBEAT_FIELDS)}
    return storm.Bolt(bolt_object=_system_object(cls), common=_system_common(inputs, streams, tasks))


def _checkpoint_spout() -> storm.SpoutSpec:
    """``$checkpointspout``: one task; the heartbeat and ack streams are added as to every spout."""
    streams = {CHECKPOINT_STREAM: _stream(list(CHECKPOINT_FIELDS))}
    return storm.SpoutSpec(spout_object=_system_object(_CHECKPOINT_SPOUT_CLASS), common=_system_common({}, streams, 1))


def _system_common(inputs: dict[Any, Any], streams: dict[str, Any], tasks: int) -> storm.ComponentCommon:
    return storm.ComponentCommon(
        inputs=inputs, streams=streams, parallelism_hint=tasks, json_conf=json.dumps({"topology.tasks": tasks})
    )


def _system_object(cls: tuple[str, str]) -> storm.ComponentObject:
    module, class_name = cls
    return storm.ComponentObject(python_object=storm.PythonComponent(module_name=module, class_name=class_name))


def _stream(fields: list[str], direct: bool = False) -> storm.StreamInfo:
    return storm.StreamInfo(output_fields=list(fields), direct=direct)


# ------------------------------------------------------------------------------------------------
# Task ids and the scheduler's view
# ------------------------------------------------------------------------------------------------


def make_tasks(system: storm.StormTopology) -> TopologyTasks:
    """Contiguous task ids from 1: spouts, user bolts (each sorted by id), ``__acker``, ``__topology_master``.
    ``$checkpointspout`` sorts first (as in Storm), so its task is 1 whatever the parallelism of the others, and
    the namespace of its state (``$checkpointspout-1``) stays the same when a topology is submitted again.

    Sorted rather than in dict order so the same topology gets the same ids whatever order the
    client built its maps in; a block of ``parallelism_hint`` ids per component.
    """
    return rescale_tasks(TopologyTasks(tasks={}), system)


def rescale_tasks(old: TopologyTasks, system: storm.StormTopology) -> TopologyTasks:
    """Task ids for a new parallelism (rebalance ``-e``): each component keeps its lowest ids up to its
    new task count, so running tasks keep their identity and state; tasks beyond it go away; new tasks
    get ids above every id in use (in :func:`make_tasks` order), so no running task's id changes meaning.
    """
    user_bolts = sorted(b for b in system.bolts if b not in _SYSTEM_BOLTS)
    order = [
        *((cid, ComponentType.SPOUT, system.spouts[cid].common) for cid in sorted(system.spouts)),
        *((cid, ComponentType.BOLT, system.bolts[cid].common) for cid in user_bolts),
        *((cid, ComponentType.BOLT, system.bolts[cid].common) for cid in _SYSTEM_BOLTS if cid in system.bolts),
    ]
    had: dict[str, list[int]] = {}
    for task, info in sorted(old.tasks.items()):
        had.setdefault(info.component, []).append(task)
    tasks: dict[int, TaskInfo] = {}
    fresh = max(old.tasks, default=0) + 1
    for cid, kind, common in order:
        kept = had.get(cid, [])[: _hint(common)]
        added = range(fresh, fresh + _hint(common) - len(kept))
        fresh = added.stop
        for task in (*kept, *added):
            tasks[task] = TaskInfo(component=cid, type=kind)
    return TopologyTasks(tasks=dict(sorted(tasks.items())))


def topology_master_task(tasks: TopologyTasks) -> int | None:
    """The topology master's task id (its lowest, as JStorm), or None when there is none."""
    return min((t for t, info in tasks.tasks.items() if info.component == TOPOLOGY_MASTER), default=None)


def component_tasks(tasks: TopologyTasks) -> dict[str, list[int]]:
    """Component id → its sorted task ids, keyed in component-id order."""
    by_component: dict[str, list[int]] = {}
    for task in sorted(tasks.tasks):
        by_component.setdefault(tasks.tasks[task].component, []).append(task)
    return dict(sorted(by_component.items()))


# ------------------------------------------------------------------------------------------------
# Topology ids
# ------------------------------------------------------------------------------------------------


def topology_id(name: str, counter: int, now_secs: float) -> str:
    """``<name>-<counter>-<epoch secs>``: the counter restarts with nimbus, the seconds keep ids unique."""
    if counter < 0 or now_secs < 0:
        raise ValueError(f"counter and now_secs must be >= 0, got {counter} and {now_secs}")
    return f"{name}-{counter}-{int(now_secs)}"


def name_of(topology_id: str) -> str:
    """The name inside a topology id: all but the last two ``-`` segments (names may contain ``-``)."""
    match = _TOPOLOGY_ID.fullmatch(topology_id)
    if match is None:
        raise ValueError(f"{topology_id!r} is not a topology id: expected <name>-<counter>-<epoch secs>")
    return match.group(1)


# ------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------


def _invalid(msg: str) -> storm.InvalidTopologyException:
    return storm.InvalidTopologyException(msg=msg)


def _json_value(what: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise _invalid(f"{what} is not valid JSON ({exc})") from None


def _json_type(value: Any) -> str:
    """A value's JSON type name, for messages that expect an object or array."""
    kinds = (
        (bool, "a boolean"),
        (int, "a number"),
        (float, "a number"),
        (str, "a string"),
        (list, "an array"),
        (dict, "an object"),
        (type(None), "null"),
    )
    return next((label for kind, label in kinds if isinstance(value, kind)), type(value).__name__)


def _set_members(union: Any) -> list[str]:
    """Names of the members set in a Thrift union (ComponentObject, Grouping); [] for None."""
    if union is None:
        return []
    return [spec[1] for _, spec in sorted(union.thrift_spec.items()) if getattr(union, spec[1]) is not None]


def _is_module_path(module: Any) -> bool:
    return isinstance(module, str) and all(part.isidentifier() for part in module.split("."))


def _hint(common: storm.ComponentCommon) -> int:
    """Unset parallelism means 1 (the IDL's rule)."""
    return 1 if common.parallelism_hint is None else common.parallelism_hint


def _ackers(conf: Mapping[str, Any]) -> int:
    """``topology.acker.executors``: null means 1 (JStorm); 0 turns acking off."""
    ackers = conf.get("topology.acker.executors")
    return 1 if ackers is None else ackers
