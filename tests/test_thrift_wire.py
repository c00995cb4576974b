"""Our IDL against Storm 1.x's own (as shipped inside streamparse): same structs, same bytes.

Wire compatibility is the whole point of keeping Storm's ids, so these tests compare the two
IDLs field by field and byte for byte, in both directions, with both thriftpy2 codecs.
"""

from __future__ import annotations

import inspect

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streamparse.thrift import storm_thrift as sp
from thriftpy2.protocol import TBinaryProtocolFactory as CyBinaryProtocolFactory
from thriftpy2.protocol.binary import TBinaryProtocolFactory as PyBinaryProtocolFactory
from thriftpy2.utils import deserialize, serialize

from squall.core.thrift import storm

CODECS = {"cybin": CyBinaryProtocolFactory(), "pure": PyBinaryProtocolFactory()}

# The Storm structs our contract shares; each must exist in both IDLs.
SHARED_STRUCTS = [
    "JavaObjectArg", "JavaObject", "NullStruct", "GlobalStreamId", "Grouping", "StreamInfo",
    "ShellComponent", "ComponentObject", "ComponentCommon", "SpoutSpec", "Bolt",
    "StateSpoutSpec", "StormTopology", "AlreadyAliveException", "NotAliveException",
    "AuthorizationException", "InvalidTopologyException", "TopologySummary",
    "SupervisorSummary", "NimbusSummary", "ClusterSummary", "ErrorInfo", "ExecutorInfo",
    "BoltStats", "SpoutStats", "ExecutorSpecificStats", "ExecutorStats", "ExecutorSummary",
    "DebugOptions", "TopologyInfo", "Credentials", "SubmitOptions", "KillOptions",
    "RebalanceOptions", "LogLevel", "LogConfig",
]
STORM_METHODS = [
    "submitTopology", "submitTopologyWithOpts", "killTopology", "killTopologyWithOpts",
    "activate", "deactivate", "rebalance", "beginFileUpload", "uploadChunk", "finishFileUpload",
    "beginFileDownload", "downloadChunk", "getNimbusConf", "getClusterInfo", "getLeader",
    "isTopologyNameAllowed", "getTopologyInfo", "getTopologyConf", "getTopology",
    "getUserTopology", "setLogConfig", "getLogConfig",
]
# Fields below 100 that we add on purpose, with the Storm release that defines them.
ALLOWED_LOW_ADDITIONS = {("RebalanceOptions", 5),  # Storm 2.x topology_conf_overrides
                         ("NimbusSummary", 6)}  # Storm 2.7 tlsPort (nimbus.thrift.tls.port)


def _norm(value):
    """A thrift_spec entry with class references replaced by names, so two IDLs compare."""
    if inspect.isclass(value):
        return value.__name__
    if isinstance(value, tuple):
        return tuple(_norm(v) for v in value)
    return value


def _spec(cls) -> list:
    return [(fid, _norm(entry)) for fid, entry in cls.thrift_spec.items()]


# ------------------------------------------------------------------------------------------------
# Declarations
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SHARED_STRUCTS)
def test_shared_struct_matches_storm(name):
    ours, theirs = getattr(storm, name), getattr(sp, name)
    assert issubclass(ours, Exception) == issubclass(theirs, Exception)
    our_spec, storm_spec = dict(_spec(ours)), dict(_spec(theirs))

    missing = set(storm_spec) - set(our_spec)
    assert not missing, f"{name}: Storm fields {sorted(missing)} are not declared"
    for fid, entry in storm_spec.items():
        assert our_spec[fid] == entry, f"{name} field {fid}"
    for fid in set(our_spec) - set(storm_spec):
        assert fid >= 100 or (name, fid) in ALLOWED_LOW_ADDITIONS, (
            f"{name} field {fid}: Squall additions to Storm structs take ids >= 100"
        )

    # thriftpy2 writes fields in declaration order: Storm's fields must come in Storm's order.
    our_order = [fid for fid in ours.thrift_spec if fid in storm_spec]
    assert our_order == list(theirs.thrift_spec)

    # Defaults are written when a field is left unset, so they are part of the bytes too.
    storm_defaults = dict(theirs.default_spec)
    for field, default in ours.default_spec:
        if field in storm_defaults:
            assert default == storm_defaults[field], f"{name}.{field} default"


@pytest.mark.parametrize("enum", ["TopologyInitialStatus", "LogLevelAction"])
def test_enums_match_storm(enum):
    assert getattr(storm, enum)._VALUES_TO_NAMES == getattr(sp, enum)._VALUES_TO_NAMES


@pytest.mark.parametrize("method", STORM_METHODS)
def test_storm_method_signature_matches_storm(method):
    for suffix in ("_args", "_result"):
        ours = getattr(storm.Nimbus, method + suffix)
        theirs = getattr(sp.Nimbus, method + suffix)
        assert _spec(ours) == _spec(theirs), method + suffix


# method -> ([(argument id, name, Thrift type)], [declared exceptions in id order])
JSTORM_AND_SQUALL_METHODS = {
    "grayUpgrade": (
        [(1, "topologyName", 11), (2, "component", 11), (3, "workers", (15, 11)),
         (4, "workerNum", 8)],
        ["NotAliveException", "InvalidTopologyException", "AuthorizationException"],
    ),
    "rollbackTopology": (
        [(1, "topologyName", 11)],
        ["NotAliveException", "InvalidTopologyException", "AuthorizationException"],
    ),
    "completeUpgrade": (
        [(1, "topologyName", 11)],
        ["NotAliveException", "InvalidTopologyException", "AuthorizationException"],
    ),
    "updateTopology": (
        [(1, "name", 11), (2, "uploadedLocation", 11), (3, "updateConf", 11)],
        ["NotAliveException", "InvalidTopologyException", "AuthorizationException"],
    ),
    "restart": (
        [(1, "name", 11), (2, "jsonConf", 11)],
        ["NotAliveException", "InvalidTopologyException", "TopologyAssignException",
         "AuthorizationException"],
    ),
    "graySubmit": (
        [(1, "name", 11), (2, "uploadedJarLocation", 11), (3, "jsonConf", 11),
         (4, "topology", (12, "StormTopology")), (5, "options", (12, "GrayUpgradeOptions"))],
        ["NotAliveException", "InvalidTopologyException", "TopologyAssignException",
         "AuthorizationException"],
    ),
    "updateTaskHeartbeat": (
        [(1, "taskHbs", (12, "TopologyTaskHbInfo"))],
        ["NotAliveException", "AuthorizationException"],
    ),
    "setHostInBlackList": ([(1, "host", 11)], ["AuthorizationException"]),
    "removeHostOutBlackList": ([(1, "host", 11)], ["AuthorizationException"]),
    "getBlacklist": ([], ["AuthorizationException"]),
    "beginCodeDownload": (
        [(1, "topologyId", 11), (2, "artifact", 11)],
        ["NotAliveException", "AuthorizationException"],
    ),
}


@pytest.mark.parametrize("method", sorted(JSTORM_AND_SQUALL_METHODS))
def test_extension_method_signatures(method):
    expected_args, expected_excs = JSTORM_AND_SQUALL_METHODS[method]
    args = getattr(storm.Nimbus, method + "_args").thrift_spec
    got_args = []
    for fid, entry in args.items():
        ttype = entry[0] if len(entry) == 3 else (entry[0], _norm(entry[2]))
        got_args.append((fid, entry[1], ttype))
    assert got_args == expected_args
    result = getattr(storm.Nimbus, method + "_result").thrift_spec
    excs = [_norm(entry[2]) for fid, entry in sorted(result.items()) if fid != 0]
    assert excs == expected_excs


def test_squall_records_shape():
    assert _spec(storm.TopologyAssignException) == [(1, (11, "msg", True))]
    assert _spec(storm.TaskHeartbeat) == [
        (1, (10, "time_secs", True)),
        (2, (8, "uptime_secs", True)),
        (100, (12, "stats", "ExecutorStats", False)),
    ]
    assert _spec(storm.TopologyTaskHbInfo) == [
        (1, (11, "topologyId", True)),
        (2, (8, "topologyMasterId", True)),
        (3, (13, "taskHbs", (8, (12, "TaskHeartbeat")), False)),
    ]
    assert dict(_spec(storm.RebalanceOptions))[100] == (2, "reassign", False)
    python_object = dict(_spec(storm.ComponentObject))[100]
    assert python_object == (12, "python_object", "PythonComponent", False)
    assert dict(_spec(storm.Grouping))[100] == (15, "partial_key", 11, False)


# ------------------------------------------------------------------------------------------------
# Representative values, built the same way against either IDL
# ------------------------------------------------------------------------------------------------


def _shell(m, script):
    return m.ComponentObject(shell=m.ShellComponent(execution_command="python3", script=script))


def _stream(m, fields, direct=False):
    return m.StreamInfo(output_fields=list(fields), direct=direct)


def build_topology(m):
    null = m.NullStruct
    gid = m.GlobalStreamId
    java_args = [
        m.JavaObjectArg(int_arg=-7),
        m.JavaObjectArg(long_arg=2**40),
        m.JavaObjectArg(string_arg="zone-ä"),
        m.JavaObjectArg(bool_arg=True),
        m.JavaObjectArg(binary_arg=b"\x00\xff\x10"),
        m.JavaObjectArg(double_arg=0.25),
    ]
    spouts = {
        "sentences": m.SpoutSpec(
            spout_object=_shell(m, "sentences.py"),
            common=m.ComponentCommon(
                inputs={},
                streams={
                    "default": _stream(m, ["sentence"]),
                    "errors": _stream(m, ["line", "reason"]),
                    "pinned": _stream(m, ["sentence"], direct=True),
                },
                parallelism_hint=2,
                json_conf='{"topology.max.spout.pending": 500}',
            ),
        ),
    }

    def bolt(obj, inputs, streams, par=None, conf=None):
        return m.Bolt(
            bolt_object=obj,
            common=m.ComponentCommon(
                inputs=inputs, streams=streams, parallelism_hint=par, json_conf=conf
            ),
        )

    words = {"default": _stream(m, ["word"])}
    bolts = {
        "split": bolt(_shell(m, "split.py"),
                      {gid(componentId="sentences", streamId="default"):
                       m.Grouping(shuffle=null())},
                      words, par=4, conf='{"topology.tasks": 8}'),
        "count": bolt(_shell(m, "count.py"),
                      {gid(componentId="split", streamId="default"): m.Grouping(fields=["word"])},
                      {"default": _stream(m, ["word", "count"])}, par=3),
        "total": bolt(_shell(m, "total.py"),
                      {gid(componentId="count", streamId="default"): m.Grouping(fields=[])},
                      {}),
        "audit": bolt(_shell(m, "audit.py"),
                      {gid(componentId="sentences", streamId="errors"): m.Grouping(all=null()),
                       gid(componentId="split", streamId="default"): m.Grouping(none=null())},
                      {}),
        "pinned": bolt(_shell(m, "pinned.py"),
                       {gid(componentId="sentences", streamId="pinned"): m.Grouping(direct=null())},
                       {}),
        "nearby": bolt(_shell(m, "nearby.py"),
                       {gid(componentId="split", streamId="default"):
                        m.Grouping(local_or_shuffle=null())},
                       {}),
        "custom": bolt(m.ComponentObject(java_object=m.JavaObject(
                           full_class_name="org.example.Sink", args_list=[])),
                       {gid(componentId="count", streamId="default"): m.Grouping(
                           custom_object=m.JavaObject(
                               full_class_name="org.example.ZonePartitioner",
                               args_list=java_args)),
                        gid(componentId="split", streamId="default"): m.Grouping(
                           custom_serialized=b"\xac\xed\x00\x05sr\x00")},
                       {}),
        "legacy": bolt(m.ComponentObject(serialized_java=b"\xac\xed\x00\x05t\x00\x03abc"),
                       {gid(componentId="total", streamId="default"): m.Grouping(shuffle=null())},
                       {}),
    }
    return m.StormTopology(
        spouts=spouts,
        bolts=bolts,
        state_spouts={},
        dependency_jars=["lib/a.jar"],
        storm_version="1.2.4",
    )


def build_cluster_summary(m):
    return m.ClusterSummary(
        supervisors=[
            m.SupervisorSummary(host="sup-1", uptime_secs=3600, num_workers=4,
                                num_used_workers=2, supervisor_id="a1b2"),
            m.SupervisorSummary(host="sup-2", uptime_secs=12, num_workers=8, num_used_workers=0,
                                supervisor_id="c3d4", version="0.1.0",
                                total_resources={"cpu.pcore.percent": 400.0}, used_mem=512.5,
                                used_cpu=12.0),
        ],
        topologies=[
            m.TopologySummary(id="wordcount-1-1700000000", name="wordcount", num_tasks=17,
                              num_executors=17, num_workers=3, uptime_secs=99, status="ACTIVE"),
            m.TopologySummary(id="etl-2-1700000100", name="etl", num_tasks=5, num_executors=5,
                              num_workers=1, uptime_secs=5, status="INACTIVE", owner="ops",
                              sched_status="fully scheduled", replication_count=1,
                              requested_cpu=20.0),
        ],
        nimbuses=[
            m.NimbusSummary(host="nimbus-1", port=6627, uptime_secs=4000, isLeader=True,
                            version="2.6.0"),
            m.NimbusSummary(host="nimbus-2", port=6627, uptime_secs=10, isLeader=False,
                            version="2.6.0"),
        ],
    )


def build_topology_info(m):
    gid = m.GlobalStreamId
    bolt_stats = m.BoltStats(
        acked={"600": {gid(componentId="split", streamId="default"): 120}},
        failed={"600": {gid(componentId="split", streamId="default"): 3}},
        process_ms_avg={"600": {gid(componentId="split", streamId="default"): 0.75}},
        executed={"600": {gid(componentId="split", streamId="default"): 123},
                  ":all-time": {gid(componentId="split", streamId="default"): 9000}},
        execute_ms_avg={"600": {gid(componentId="split", streamId="default"): 0.5}},
    )
    spout_stats = m.SpoutStats(
        acked={"600": {"default": 40}},
        failed={"600": {"default": 1}},
        complete_ms_avg={"600": {"default": 12.5}},
    )
    return m.TopologyInfo(
        id="wordcount-1-1700000000",
        name="wordcount",
        uptime_secs=99,
        executors=[
            m.ExecutorSummary(
                executor_info=m.ExecutorInfo(task_start=1, task_end=1), component_id="sentences",
                host="sup-1", port=6700, uptime_secs=98,
                stats=m.ExecutorStats(
                    emitted={"600": {"default": 41}}, transferred={"600": {"default": 41}},
                    specific=m.ExecutorSpecificStats(spout=spout_stats), rate=0.9)),
            m.ExecutorSummary(
                executor_info=m.ExecutorInfo(task_start=2, task_end=3), component_id="count",
                host="sup-2", port=6701, uptime_secs=97,
                stats=m.ExecutorStats(
                    emitted={"600": {"default": 120}}, transferred={"600": {"default": 0}},
                    specific=m.ExecutorSpecificStats(bolt=bolt_stats), rate=1.0)),
            m.ExecutorSummary(
                executor_info=m.ExecutorInfo(task_start=4, task_end=4), component_id="__acker",
                host="sup-2", port=6701, uptime_secs=97),
        ],
        status="ACTIVE",
        errors={
            "count": [m.ErrorInfo(error="Traceback: KeyError 'word'", error_time_secs=1700000050,
                                  host="sup-2", port=6701)],
            "split": [],
        },
        component_debug={"count": m.DebugOptions(enable=True, samplingpct=10.0)},
        owner="ops",
    )


def build_submit_options(m):
    return m.SubmitOptions(initial_status=m.TopologyInitialStatus.INACTIVE,
                           creds=m.Credentials(creds={"user": "ops"}))


def build_kill_options(m):
    return m.KillOptions(wait_secs=30)


def build_rebalance_options(m):
    return m.RebalanceOptions(wait_secs=0, num_workers=4, num_executors={"count": 6, "split": 2})


def build_log_config(m):
    return m.LogConfig(named_logger_level={
        "ROOT": m.LogLevel(action=m.LogLevelAction.UPDATE, target_log_level="DEBUG", reset_log_level_timeout_secs=30,
                           reset_log_level_timeout_epoch=1_700_000_030_000, reset_log_level="INFO"),
        "kazoo": m.LogLevel(action=m.LogLevelAction.REMOVE),
    })


VALUES = {
    "LogConfig": build_log_config,
    "StormTopology": build_topology,
    "ClusterSummary": build_cluster_summary,
    "TopologyInfo": build_topology_info,
    "SubmitOptions": build_submit_options,
    "KillOptions": build_kill_options,
    "RebalanceOptions": build_rebalance_options,
}


def _assert_same_wire(type_name, ours, theirs, codec):
    our_bytes = serialize(ours, codec)
    storm_bytes = serialize(theirs, codec)
    assert our_bytes == storm_bytes
    assert deserialize(getattr(storm, type_name)(), storm_bytes, codec) == ours
    assert deserialize(getattr(sp, type_name)(), our_bytes, codec) == theirs


@pytest.mark.parametrize("codec_name", sorted(CODECS))
@pytest.mark.parametrize("type_name", sorted(VALUES))
def test_values_encode_identically(type_name, codec_name):
    build = VALUES[type_name]
    _assert_same_wire(type_name, build(storm), build(sp), CODECS[codec_name])


def test_codecs_agree():
    # The Cython and pure-Python writers must not differ either, or "identical" depends on which
    # one a peer happens to load.
    value = build_topology_info(storm)
    assert serialize(value, CODECS["cybin"]) == serialize(value, CODECS["pure"])


def test_defaults_encode_identically():
    # Unset fields with IDL defaults are still written; both sides must write the same ones.
    for type_name in ("ClusterSummary", "SupervisorSummary", "RebalanceOptions", "StormTopology"):
        assert serialize(getattr(storm, type_name)()) == serialize(getattr(sp, type_name)())


# ------------------------------------------------------------------------------------------------
# Squall additions
# ------------------------------------------------------------------------------------------------


def _python_topology():
    topology = build_topology(storm)
    topology.bolts["score"] = storm.Bolt(
        bolt_object=storm.ComponentObject(python_object=storm.PythonComponent(
            module_name="pipeline.bolts", class_name="ScoreBolt",
            args_json='[3, "eu"]', kwargs_json='{"threshold": 0.5}')),
        common=storm.ComponentCommon(
            inputs={storm.GlobalStreamId(componentId="count", streamId="default"):
                    storm.Grouping(fields=["word"])},
            streams={"default": storm.StreamInfo(output_fields=["word", "score"], direct=False)},
            parallelism_hint=2),
    )
    return topology


@pytest.mark.parametrize("codec_name", sorted(CODECS))
def test_python_component_round_trips(codec_name):
    codec = CODECS[codec_name]
    topology = _python_topology()
    decoded = deserialize(storm.StormTopology(), serialize(topology, codec), codec)
    assert decoded == topology
    python_object = decoded.bolts["score"].bolt_object.python_object
    assert (python_object.module_name, python_object.class_name) == ("pipeline.bolts", "ScoreBolt")


@pytest.mark.parametrize("codec_name", sorted(CODECS))
def test_storm_skips_our_python_component(codec_name):
    codec = CODECS[codec_name]
    data = serialize(_python_topology(), codec)
    assert b"ScoreBolt" in data  # the field really is on the wire

    decoded = deserialize(sp.StormTopology(), data, codec)
    score = decoded.bolts["score"]
    # Storm sees a component object with no member it knows, and everything else intact.
    assert score.bolt_object == sp.ComponentObject()
    assert score.common.streams["default"].output_fields == ["word", "score"]
    assert score.common.parallelism_hint == 2
    # The Storm-only part of the topology decodes to exactly what Storm would have sent.
    del decoded.bolts["score"]
    assert decoded == build_topology(sp)


@pytest.mark.parametrize("codec_name", sorted(CODECS))
def test_partial_key_grouping_round_trips_and_storm_skips_it(codec_name):
    codec = CODECS[codec_name]
    common = storm.ComponentCommon(inputs={storm.GlobalStreamId("words", "default"): storm.Grouping(
        partial_key=["word"])}, streams={}, parallelism_hint=4)
    data = serialize(common, codec)
    assert deserialize(storm.ComponentCommon(), data, codec) == common
    decoded = deserialize(sp.ComponentCommon(), data, codec)
    assert decoded.inputs == {sp.GlobalStreamId("words", "default"): sp.Grouping()}, "a grouping with no member"
    assert decoded.parallelism_hint == 4


def test_storm_skips_our_rebalance_fields():
    ours = storm.RebalanceOptions(wait_secs=5, num_workers=2, topology_conf_overrides='{"a": 1}',
                                  reassign=True)
    decoded = deserialize(sp.RebalanceOptions(), serialize(ours))
    assert decoded == sp.RebalanceOptions(wait_secs=5, num_workers=2)


def test_gray_and_heartbeat_records_round_trip():
    options = storm.GrayUpgradeOptions(component="count", workers=["sup-1:6700"], worker_num=1,
                                       ttl_ms=86_400_000)
    assert deserialize(storm.GrayUpgradeOptions(), serialize(options)) == options
    hbs = storm.TopologyTaskHbInfo(
        topologyId="wordcount-1-1700000000", topologyMasterId=5,
        taskHbs={1: storm.TaskHeartbeat(time_secs=2**33, uptime_secs=40)},  # past 2038
    )
    assert deserialize(storm.TopologyTaskHbInfo(), serialize(hbs)) == hbs


# ------------------------------------------------------------------------------------------------
# Generated topologies
# ------------------------------------------------------------------------------------------------

_ids = st.text(min_size=1, max_size=6)
_java_arg = st.one_of(
    st.builds(lambda v: ("int_arg", v), st.integers(-(2**31), 2**31 - 1)),
    st.builds(lambda v: ("long_arg", v), st.integers(-(2**63), 2**63 - 1)),
    st.builds(lambda v: ("string_arg", v), st.text(max_size=8)),
    st.builds(lambda v: ("bool_arg", v), st.booleans()),
    st.builds(lambda v: ("binary_arg", v), st.binary(max_size=8)),
    st.builds(lambda v: ("double_arg", v), st.floats(allow_nan=False)),
)
_grouping = st.one_of(
    st.builds(lambda f: ("fields", f), st.lists(_ids, max_size=3)),
    st.sampled_from([("shuffle", None), ("all", None), ("none", None), ("direct", None),
                     ("local_or_shuffle", None)]),
    st.builds(lambda b: ("custom_serialized", b), st.binary(max_size=12)),
    st.builds(lambda c, a: ("custom_object", (c, a)), _ids, st.lists(_java_arg, max_size=3)),
)
_component = st.fixed_dictionaries({
    "script": _ids,
    "inputs": st.dictionaries(st.tuples(_ids, _ids), _grouping, max_size=3),
    "streams": st.dictionaries(_ids, st.tuples(st.lists(_ids, max_size=3), st.booleans()),
                               max_size=3),
    "par": st.none() | st.integers(1, 256),
    "conf": st.none() | st.sampled_from(['{}', '{"topology.tasks": 4}']),
})
_topology = st.tuples(st.dictionaries(_ids, _component, min_size=1, max_size=3),
                      st.dictionaries(_ids, _component, max_size=4))


def _materialize(m, spec):
    def grouping(kind, value):
        if kind == "fields":
            return m.Grouping(fields=list(value))
        if kind == "custom_serialized":
            return m.Grouping(custom_serialized=value)
        if kind == "custom_object":
            cls, args = value
            return m.Grouping(custom_object=m.JavaObject(
                full_class_name=cls, args_list=[m.JavaObjectArg(**{k: v}) for k, v in args]))
        return m.Grouping(**{kind: m.NullStruct()})

    def common(c):
        return m.ComponentCommon(
            inputs={m.GlobalStreamId(componentId=a, streamId=b): grouping(*g)
                    for (a, b), g in c["inputs"].items()},
            streams={s: m.StreamInfo(output_fields=list(f), direct=d)
                     for s, (f, d) in c["streams"].items()},
            parallelism_hint=c["par"], json_conf=c["conf"])

    spouts, bolts = spec
    return m.StormTopology(
        spouts={k: m.SpoutSpec(spout_object=_shell(m, c["script"]), common=common(c))
                for k, c in spouts.items()},
        bolts={k: m.Bolt(bolt_object=_shell(m, c["script"]), common=common(c))
               for k, c in bolts.items()},
        state_spouts={},
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_topology)
def test_generated_topologies_encode_identically(spec):
    for codec in CODECS.values():
        _assert_same_wire("StormTopology", _materialize(storm, spec), _materialize(sp, spec), codec)
