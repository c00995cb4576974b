"""squall.core.topology: validation messages, normalization, the system topology, task ids, topology ids."""

from __future__ import annotations

import copy
import json
import string
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nimbus.scheduler.model import Component, scheduler_components
from squall.core.thrift import storm
from squall.core.topology import (
    component_tasks,
    make_tasks,
    rescale_tasks,
    name_of,
    normalize,
    system_topology,
    topology_id,
    topology_master_task,
    validate_name,
    validate_topology,
)
from squall.core.zk.records import ComponentType, TaskInfo

SPOUT, BOLT = ComponentType.SPOUT, ComponentType.BOLT
RULE = "use 1 to 128 characters from A-Z a-z 0-9 . _ -"
BASE_CONF = {"topology.workers": 2}

# ------------------------------------------------------------------------------------------------
# Builders
# ------------------------------------------------------------------------------------------------


def shell() -> storm.ComponentObject:
    return storm.ComponentObject(shell=storm.ShellComponent(execution_command="python", script="sentences.py"))


def python(module: str = "wordcount.bolts", cls: str = "Split", **extra: Any) -> storm.ComponentObject:
    return storm.ComponentObject(python_object=storm.PythonComponent(module_name=module, class_name=cls, **extra))


def shuffle() -> storm.Grouping:
    return storm.Grouping(shuffle=storm.NullStruct())


def by_fields(*names: str) -> storm.Grouping:
    return storm.Grouping(fields=list(names))


def direct() -> storm.Grouping:
    return storm.Grouping(direct=storm.NullStruct())


def common(inputs: dict[tuple[str, str], storm.Grouping] | None = None,
           streams: dict[str, list[str]] | None = None, direct_streams: tuple[str, ...] = (),
           hint: int | None = None, json_conf: str | None = None) -> storm.ComponentCommon:
    return storm.ComponentCommon(
        inputs={storm.GlobalStreamId(c, s): g for (c, s), g in (inputs or {}).items()},
        streams={sid: storm.StreamInfo(output_fields=f, direct=sid in direct_streams)
                 for sid, f in (streams or {}).items()},
        parallelism_hint=hint,
        json_conf=json_conf,
    )


def spout(fields: tuple[str, ...] = ("sentence",), obj: storm.ComponentObject | None = None,
          **kw: Any) -> storm.SpoutSpec:
    return storm.SpoutSpec(spout_object=obj or shell(), common=common(streams={"default": list(fields)}, **kw))


def bolt(inputs: dict[tuple[str, str], storm.Grouping], fields: tuple[str, ...] = ("word",),
         obj: storm.ComponentObject | None = None, **kw: Any) -> storm.Bolt:
    return storm.Bolt(bolt_object=obj or python(), common=common(inputs, {"default": list(fields)}, **kw))


def word_count(sentences: int | None = 2, split: int | None = 3, count: int | None = 2) -> storm.StormTopology:
    return storm.StormTopology(
        spouts={"sentences": spout(hint=sentences)},
        bolts={
            "split": bolt({("sentences", "default"): shuffle()}, hint=split),
            "count": bolt({("split", "default"): by_fields("word")}, fields=("word", "count"),
                          obj=python(cls="Count"), hint=count),
        },
        state_spouts={},
    )


def prepared(conf: dict[str, Any] | None = None, **hints: int | None) -> tuple[storm.StormTopology, dict[str, Any]]:
    """Word count, normalized, as submit would store it."""
    return normalize(word_count(**hints), {**BASE_CONF, **(conf or {})}, name="wc")


def component(t: storm.StormTopology, cid: str) -> Any:
    return t.spouts.get(cid) or t.bolts[cid]


# Edits applied to a fresh word count, one per validation rule.
Edit = Callable[[storm.StormTopology], None]


def add_spout(cid: str, spec: Any = None) -> Edit:
    return lambda t: t.spouts.__setitem__(cid, spec or spout())


def add_bolt(cid: str, spec: Any = None) -> Edit:
    return lambda t: t.bolts.__setitem__(cid, spec or bolt({("sentences", "default"): shuffle()}))


def set_common(cid: str, **attrs: Any) -> Edit:
    return lambda t: [setattr(component(t, cid).common, k, v) for k, v in attrs.items()]


def set_object(cid: str, obj: storm.ComponentObject | None) -> Edit:
    def edit(t: storm.StormTopology) -> None:
        spec = component(t, cid)
        setattr(spec, "spout_object" if cid in t.spouts else "bolt_object", obj)
    return edit


def add_stream(cid: str, sid: str, fields: list[str] | None = None, is_direct: bool = False) -> Edit:
    return lambda t: component(t, cid).common.streams.__setitem__(sid, storm.StreamInfo(fields, is_direct))


def subscribe(cid: str, source: str, stream: str, grouping: storm.Grouping) -> Edit:
    return lambda t: component(t, cid).common.inputs.__setitem__(storm.GlobalStreamId(source, stream), grouping)


def remove(field: str, cid: str) -> Edit:
    return lambda t: getattr(t, field).pop(cid)


def invalid(topology: storm.StormTopology, conf: Any = None, name: str = "wc") -> str:
    with pytest.raises(storm.InvalidTopologyException) as info:
        validate_topology(name, topology, BASE_CONF if conf is None else conf)
    return info.value.msg


# ------------------------------------------------------------------------------------------------
# Validation
# ------------------------------------------------------------------------------------------------


def test_word_count_is_valid() -> None:
    validate_topology("word-count_v1.2", word_count(), BASE_CONF)
    validate_topology("wc", word_count(None, None, None), {})


@pytest.mark.parametrize("name, message", [
    ("", f'topology name "" is invalid: {RULE} (it is empty)'),
    ("a" * 129, f'topology name "{"a" * 80}…" is invalid: {RULE} (it is 129 characters long)'),
    ("my topo/x", f'topology name "my topo/x" is invalid: {RULE} (it contains " ", "/")'),
    ("a:b\n", f'topology name "a:b\\n" is invalid: {RULE} (it contains ":", "\\n")'),
    ("wörd", f'topology name "wörd" is invalid: {RULE} (it contains "ö")'),
    ("12345", 'topology name "12345" is all digits: add a letter, numeric names are not allowed'),
    ("NuLL", 'topology name "NuLL" is reserved: choose another name'),
    ("..", 'topology name ".." is reserved ("." and ".." are path elements): choose another name'),
    (None, "the topology name must be a string, got NoneType"),
])
def test_invalid_names(name: Any, message: str) -> None:
    with pytest.raises(storm.InvalidTopologyException) as info:
        validate_name(name)
    assert info.value.msg == message


@pytest.mark.parametrize("name", ["a", "a" * 128, "word-count", "1-2-3a", "v1.0_final", "null1", "..."])
def test_valid_names(name: str) -> None:
    validate_name(name)


RULES: list[tuple[str, Edit, str]] = [
    # ids
    ("component id chars", add_spout("my spout"), f'spout id "my spout" is invalid: {RULE} (it contains " ")'),
    ("component id dangerous", add_bolt("a$b:c"), f'bolt id "a$b:c" is invalid: {RULE} (it contains "$", ":")'),
    ("component id empty", add_bolt(""), f'bolt id "" is invalid: {RULE} (it is empty)'),
    ("component id long", add_bolt("b" * 129),
     f'bolt id "{"b" * 80}…" is invalid: {RULE} (it is 129 characters long)'),
    ("reserved component id", add_bolt("__acker"),
     'bolt id "__acker" is reserved: ids starting with "__" belong to Squall\'s system components and streams'),
    ("duplicate ids", add_bolt("sentences"),
     'duplicate component ids: "sentences" (spout and bolt); ids must be unique across spouts and bolts'),
    ("state spouts", lambda t: t.state_spouts.__setitem__("state", storm.StateSpoutSpec(shell(), common())),
     'state spouts are not supported: Squall does not run state spouts ("state"); use a spout'),
    ("no spouts", remove("spouts", "sentences"),
     "the topology has no spouts: at least one spout is needed to emit tuples"),
    # one component
    ("no common", lambda t: setattr(t.bolts["split"], "common", None),
     'bolt "split" has no common section: a ComponentCommon with inputs and streams maps is required'),
    ("no implementation", set_object("split", None),
     'bolt "split" has no implementation: set python_object (a Python class) or shell (a command)'),
    ("several implementations", set_object("split", storm.ComponentObject(
        shell=storm.ShellComponent("python", "x.py"), python_object=storm.PythonComponent("m", "C"))),
     'bolt "split" sets several implementations (shell, python_object): set exactly one'),
    ("serialized java", set_object("sentences", storm.ComponentObject(serialized_java=b"\xac\xed")),
     'spout "sentences" is a Java component (serialized_java): Squall runs Python (python_object) and shell '
     "(multilang) components only"),
    ("java object", set_object("split", storm.ComponentObject(java_object=storm.JavaObject("a.B", []))),
     'bolt "split" is a Java component (java_object): Squall runs Python (python_object) and shell '
     "(multilang) components only"),
    ("shell without command",
     set_object("sentences", storm.ComponentObject(shell=storm.ShellComponent(script="s.py"))),
     'spout "sentences" shell component has no execution_command'),
    ("python module", set_object("split", python(module="word count.bolts")),
     'bolt "split" python_object.module_name "word count.bolts" is not an importable module path'),
    ("python class", set_object("split", python(cls="")),
     'bolt "split" python_object.class_name "" is not a Python identifier'),
    ("python args not json", set_object("split", python(args_json="[1,")),
     'bolt "split" python_object.args_json is not valid JSON (Expecting value: line 1 column 4 (char 3))'),
    ("python args not array", set_object("split", python(args_json='{"a": 1}')),
     'bolt "split" python_object.args_json must be a JSON array of constructor arguments'),
    ("python kwargs not object", set_object("split", python(kwargs_json="[1]")),
     'bolt "split" python_object.kwargs_json must be a JSON object of keyword arguments'),
    ("spout inputs", subscribe("sentences", "split", "default", shuffle()),
     'spout "sentences" declares inputs: spouts may not declare inputs (only bolts subscribe to streams)'),
    ("parallelism zero", set_common("count", parallelism_hint=0),
     'bolt "count" has parallelism_hint 0: it must be >= 1 when set'),
    ("json_conf not json", set_common("split", json_conf="{topology.debug: true}"),
     'bolt "split" json_conf is not valid JSON (Expecting property name enclosed in double quotes: '
     "line 1 column 2 (char 1))"),
    ("json_conf not object", set_common("split", json_conf="[1, 2]"),
     'bolt "split" json_conf must be a JSON object, got an array'),
    ("json_conf key type", set_common("split", json_conf='{"topology.tasks": "4"}'),
     "invalid configuration:\n  bolt \"split\" json_conf: config key 'topology.tasks' expects int >= 1 or null, "
     "got '4' (str)"),
    ("json_conf cap type", set_common("sentences", json_conf='{"topology.max.task.parallelism": 0}'),
     "invalid configuration:\n  spout \"sentences\" json_conf: config key 'topology.max.task.parallelism' "
     "expects int >= 1 or null, got 0 (int)"),
    ("reserved stream id", add_stream("split", "__ack_ack", ["id"]),
     'stream id "__ack_ack" of bolt "split" is reserved: ids starting with "__" belong to Squall\'s system '
     "components and streams"),
    ("stream id chars", add_stream("sentences", "a/b", ["x"]),
     f'stream id "a/b" of spout "sentences" is invalid: {RULE} (it contains "/")'),
    ("stream without fields", add_stream("split", "words", None),
     'stream "words" of bolt "split" has no output_fields list'),
    # groupings
    ("unknown component", subscribe("count", "splitter", "default", shuffle()),
     'bolt "count" subscribes to unknown component "splitter" (the topology has "count", "sentences", "split")'),
    ("unknown stream", subscribe("count", "split", "words", shuffle()),
     'bolt "count" subscribes to stream "words" of "split", which "split" does not declare (it declares: "default")'),
    ("empty grouping", subscribe("count", "sentences", "default", storm.Grouping()),
     'bolt "count": the grouping of stream "default" of "sentences" must set exactly one type (got none)'),
    ("unknown fields", subscribe("count", "sentences", "default", by_fields("sentence", "word", "lang")),
     'bolt "count" groups stream "default" of "sentences" by unknown fields "word", "lang" '
     '(the stream declares: "sentence")'),
    ("unknown partial key fields", subscribe("count", "sentences", "default", storm.Grouping(partial_key=["word"])),
     'bolt "count" groups stream "default" of "sentences" by unknown fields "word" (the stream declares: "sentence")'),
    ("partial key without fields", subscribe("count", "sentences", "default", storm.Grouping(partial_key=[])),
     'bolt "count": the partial_key grouping of stream "default" of "sentences" names no fields'),
    ("direct on plain stream", subscribe("count", "sentences", "default", direct()),
     'bolt "count" uses direct grouping on stream "default" of "sentences", which is not declared direct'),
    ("plain on direct stream",
     lambda t: (add_stream("split", "pairs", ["word"], is_direct=True)(t),
                subscribe("count", "split", "pairs", shuffle())(t)),
     'bolt "count" uses shuffle grouping on stream "pairs" of "split", which is direct: use direct grouping'),
    ("custom grouping not JSON", subscribe("count", "sentences", "default",
                                           storm.Grouping(custom_serialized=b"\xac\xed\x00\x05sr")),
     'bolt "count": the custom grouping of stream "default" of "sentences" must be JSON {"module": ..., '
     '"class": ..., "args": [...]} naming a Python grouping class (serialized Java groupings cannot run here)'),
    ("custom grouping names no class", subscribe("count", "sentences", "default",
                                                 storm.Grouping(custom_serialized=b'{"module": "os"}')),
     'bolt "count": the custom grouping of stream "default" of "sentences" must be JSON {"module": ..., '
     '"class": ..., "args": [...]} naming a Python grouping class (serialized Java groupings cannot run here)'),
]


@pytest.mark.parametrize("edit, message", [r[1:] for r in RULES], ids=[r[0] for r in RULES])
def test_topology_rules(edit: Edit, message: str) -> None:
    topology = word_count()
    edit(topology)
    assert invalid(topology) == message


def test_valid_variants_pass() -> None:
    """The positive side of the rules above: what they must not reject."""
    topology = word_count()
    add_stream("split", "pairs", ["word"], is_direct=True)(topology)
    subscribe("count", "split", "pairs", direct())(topology)
    subscribe("count", "sentences", "default", by_fields())(topology)  # empty fields: global grouping
    subscribe("count", "count", "default", by_fields("count"))(topology)  # a bolt may read itself
    subscribe("split", "split", "default", storm.Grouping(partial_key=["word"]))(topology)
    set_object("split", python(module="a.b_c.d", cls="Split_2", args_json="[1]", kwargs_json='{"k": 2}'))(topology)
    set_common("split", json_conf='{"topology.tasks": 4, "my.own.key": [1]}')(topology)
    validate_topology("wc", topology, BASE_CONF)


CONF_RULES: list[tuple[str, Any, str]] = [
    ("not a map", ["topology.workers", 2], "the topology conf must be a JSON object, got an array"),
    ("workers zero", {"topology.workers": 0}, "topology.workers must be an int >= 1 (worker processes), got 0"),
    ("workers string", {"topology.workers": "2"}, "topology.workers must be an int >= 1 (worker processes), got '2'"),
    ("workers null", {"topology.workers": None}, "topology.workers must be an int >= 1 (worker processes), got None"),
    ("workers bool", {"topology.workers": True}, "topology.workers must be an int >= 1 (worker processes), got True"),
    ("key type", {"topology.debug": "yes", "topology.acker.executors": -1},
     "invalid configuration:\n  topology conf: config key 'topology.acker.executors' expects int >= 0 or null, "
     "got -1 (int)\n  topology conf: config key 'topology.debug' expects bool, got 'yes' (str)"),
    ("override type", {"topology.bolt.parallelism": {"split": "2"}},
     "invalid configuration:\n  topology conf: config key 'topology.bolt.parallelism' expects map of str to int "
     "or null, got {'split': '2'} (dict)"),
    ("override unknown", {"topology.spout.parallelism": {"split": 2}},
     'topology.spout.parallelism names "split", which is not a spout of this topology'),
    ("override low", {"topology.bolt.parallelism": {"split": 2, "count": 0}},
     'topology.bolt.parallelism gives "count" 0: parallelism must be >= 1'),
]


@pytest.mark.parametrize("conf, message", [r[1:] for r in CONF_RULES], ids=[r[0] for r in CONF_RULES])
def test_conf_rules(conf: Any, message: str) -> None:
    assert invalid(word_count(), conf) == message


def test_most_fundamental_problem_first() -> None:
    topology = word_count()
    add_bolt("__x")(topology)
    set_common("count", parallelism_hint=0)(topology)
    subscribe("split", "nope", "default", shuffle())(topology)
    bad_conf = {"topology.workers": 0}
    assert invalid(topology, bad_conf, name="").startswith('topology name "" is invalid')
    assert invalid(topology, bad_conf).startswith('bolt id "__x" is reserved')
    remove("bolts", "__x")(topology)
    assert invalid(topology, bad_conf).startswith('bolt "count" has parallelism_hint 0')
    set_common("count", parallelism_hint=1)(topology)
    assert invalid(topology, bad_conf).startswith('bolt "split" subscribes to unknown component "nope"')
    remove("bolts", "split")(topology)
    subscribe("count", "sentences", "default", shuffle())(topology)
    topology.bolts["count"].common.inputs.pop(storm.GlobalStreamId("split", "default"))
    assert invalid(topology, bad_conf).startswith("topology.workers must be")


@given(st.permutations(["b1", "b2", "b3"]))
def test_first_problem_does_not_depend_on_map_order(order: list[str]) -> None:
    topology = word_count()
    for cid in order:
        add_bolt(cid, bolt({("sentences", "default"): shuffle()}, hint=0))(topology)
    assert invalid(topology) == 'bolt "b1" has parallelism_hint 0: it must be >= 1 when set'


# ------------------------------------------------------------------------------------------------
# Normalization
# ------------------------------------------------------------------------------------------------


def tasks_of(t: storm.StormTopology) -> dict[str, tuple[int | None, int]]:
    """component → (parallelism_hint, json_conf topology.tasks)."""
    return {cid: (spec.common.parallelism_hint, json.loads(spec.common.json_conf)["topology.tasks"])
            for cid, spec in {**t.spouts, **t.bolts}.items()}


def test_normalize_word_count() -> None:
    topology, conf = normalize(word_count(sentences=None), BASE_CONF, name="wc")
    assert tasks_of(topology) == {"sentences": (1, 1), "split": (3, 3), "count": (2, 2)}
    assert conf == {"topology.workers": 2, "topology.acker.executors": 1, "topology.name": "wc"}


def test_normalize_does_not_mutate_its_inputs() -> None:
    topology = word_count()
    set_common("split", json_conf='{"topology.tasks": 9}')(topology)
    conf = {**BASE_CONF, "topology.bolt.parallelism": {"count": 4}, "topology.acker.executors": None}
    before = (copy.deepcopy(topology), copy.deepcopy(conf))
    new_topology, new_conf = normalize(topology, conf, name="wc")
    assert (topology, conf) == before
    assert new_topology is not topology and new_conf is not conf
    assert new_topology.bolts["count"].common is not topology.bolts["count"].common
    new_conf["topology.bolt.parallelism"]["count"] = 7
    assert conf["topology.bolt.parallelism"] == {"count": 4}


@pytest.mark.parametrize("conf, json_confs, expected", [
    ({"topology.bolt.parallelism": {"count": 5}, "topology.spout.parallelism": {"sentences": 4}}, {},
     {"sentences": (4, 4), "split": (3, 3), "count": (5, 5)}),
    ({"topology.max.task.parallelism": 2}, {}, {"sentences": (2, 2), "split": (2, 2), "count": (2, 2)}),
    ({"topology.max.task.parallelism": 2, "topology.bolt.parallelism": {"split": 6}}, {},
     {"sentences": (2, 2), "split": (2, 2), "count": (2, 2)}),
    ({"topology.max.task.parallelism": 1}, {"split": {"topology.max.task.parallelism": 5}},
     {"sentences": (1, 1), "split": (3, 3), "count": (1, 1)}),
    ({}, {"count": {"topology.max.task.parallelism": 1}}, {"sentences": (2, 2), "split": (3, 3), "count": (1, 1)}),
    ({}, {"split": {"topology.tasks": 8}}, {"sentences": (2, 2), "split": (3, 3), "count": (2, 2)}),
])
def test_overrides_and_caps(conf: dict[str, Any], json_confs: dict[str, dict[str, Any]],
                            expected: dict[str, tuple[int, int]]) -> None:
    topology = word_count()
    for cid, extra in json_confs.items():
        set_common(cid, json_conf=json.dumps(extra))(topology)
    validate_topology("wc", topology, {**BASE_CONF, **conf})
    assert tasks_of(normalize(topology, {**BASE_CONF, **conf}, name="wc")[0]) == expected


def test_normalize_keeps_component_conf_and_acker_count() -> None:
    topology = word_count()
    set_common("split", json_conf='{"task.on.differ.node": true}')(topology)
    normalized, conf = normalize(topology, {"topology.acker.executors": 0}, name="wc")
    assert json.loads(normalized.bolts["split"].common.json_conf) == {"task.on.differ.node": True, "topology.tasks": 3}
    assert conf["topology.acker.executors"] == 0


def test_normalize_is_idempotent() -> None:
    once = prepared({"topology.max.task.parallelism": 2})
    assert normalize(*once, name="wc") == once


# ------------------------------------------------------------------------------------------------
# System topology
# ------------------------------------------------------------------------------------------------


def streams(t: storm.StormTopology, cid: str) -> dict[str, tuple[list[str], bool]]:
    return {sid: (s.output_fields, s.direct) for sid, s in component(t, cid).common.streams.items()}


def inputs(t: storm.StormTopology, cid: str) -> dict[tuple[str, str], storm.Grouping]:
    return {(g.componentId, g.streamId): grouping for g, grouping in component(t, cid).common.inputs.items()}


HEARTBEAT = ("__master_task_heartbeat", (["task-id", "uptime-secs", "stats"], False))


def test_system_topology_adds_acker_and_master() -> None:
    user, conf = prepared({"topology.acker.executors": 2})
    system = system_topology(user, conf)
    assert user == prepared({"topology.acker.executors": 2})[0]  # the user topology is left alone
    assert sorted(system.bolts) == ["__acker", "__topology_master", "count", "split"]
    assert list(system.spouts) == ["sentences"]

    assert streams(system, "sentences") == {
        "default": (["sentence"], False), "__ack_init": (["id", "init-val", "spout-task"], False), **dict([HEARTBEAT])}
    for cid in ("split", "count"):
        assert {k: v for k, v in streams(system, cid).items() if k != "default"} == {
            "__ack_ack": (["id", "ack-val"], False), "__ack_fail": (["id"], False),
            "__ack_reset_timeout": (["id"], False), **dict([HEARTBEAT])}

    acker = system.bolts["__acker"]
    assert acker.bolt_object == python("worker.acker", "Acker")
    assert (acker.common.parallelism_hint, json.loads(acker.common.json_conf)) == (2, {"topology.tasks": 2})
    assert inputs(system, "__acker") == {
        ("sentences", "__ack_init"): by_fields("id"),
        **{(cid, stream): by_fields("id") for cid in ("split", "count")
           for stream in ("__ack_ack", "__ack_fail", "__ack_reset_timeout")},
    }
    assert streams(system, "__acker") == {
        "__ack_ack": (["id"], True), "__ack_fail": (["id"], True), "__ack_reset_timeout": (["id"], True),
        **dict([HEARTBEAT])}

    master = system.bolts["__topology_master"]
    assert master.bolt_object == python("worker.topology_master", "TopologyMaster")
    assert master.common.parallelism_hint == 1
    everyone = ["sentences", "split", "count", "__acker", "__topology_master"]
    assert inputs(system, "__topology_master") == {
        (c, "__master_task_heartbeat"): storm.Grouping(all=storm.NullStruct()) for c in everyone}
    assert streams(system, "__topology_master") == dict([HEARTBEAT])


def test_no_acker_when_acker_executors_is_zero() -> None:
    system = system_topology(*prepared({"topology.acker.executors": 0}))
    assert sorted(system.bolts) == ["__topology_master", "count", "split"]
    for cid in ("sentences", "split", "count"):
        assert not {"__ack_init", "__ack_ack", "__ack_fail", "__ack_reset_timeout"} & set(streams(system, cid))
        assert "__master_task_heartbeat" in streams(system, cid)
    assert {c for c, _ in inputs(system, "__topology_master")} == {"sentences", "split", "count", "__topology_master"}


def test_system_topology_is_structurally_valid() -> None:
    """Every subscription of the system topology names a declared stream and fits its grouping."""
    system = system_topology(*prepared())
    for cid, spec in system.bolts.items():
        for source, grouping in spec.common.inputs.items():
            info = component(system, source.componentId).common.streams[source.streamId]
            assert set(grouping.fields or ()) <= set(info.output_fields), (cid, source)
            assert (grouping.direct is not None) == info.direct, (cid, source)


# ------------------------------------------------------------------------------------------------
# Tasks and the scheduler's view
# ------------------------------------------------------------------------------------------------


def expected_tasks(*blocks: tuple[str, ComponentType, int]) -> dict[int, TaskInfo]:
    ids = iter(range(1, 1000))
    return {next(ids): TaskInfo(cid, kind) for cid, kind, n in blocks for _ in range(n)}


def test_word_count_tasks() -> None:
    tasks = make_tasks(system_topology(*prepared()))
    assert tasks.tasks == expected_tasks(
        ("sentences", SPOUT, 2), ("count", BOLT, 2), ("split", BOLT, 3), ("__acker", BOLT, 1),
        ("__topology_master", BOLT, 1))
    assert topology_master_task(tasks) == 9
    assert component_tasks(tasks) == {"__acker": [8], "__topology_master": [9], "count": [3, 4],
                                      "sentences": [1, 2], "split": [5, 6, 7]}


def test_acker_and_master_blocks() -> None:
    three = make_tasks(system_topology(*prepared({"topology.acker.executors": 3})))
    assert component_tasks(three)["__acker"] == [8, 9, 10]
    assert topology_master_task(three) == 11
    none = make_tasks(system_topology(*prepared({"topology.acker.executors": 0})))
    assert "__acker" not in component_tasks(none)
    assert topology_master_task(none) == 8
    assert topology_master_task(make_tasks(prepared()[0])) is None  # the user topology has no master


def test_a_rescale_keeps_running_task_ids_adds_fresh_ones_and_drops_the_highest() -> None:
    before = make_tasks(system_topology(*prepared()))  # count [3, 4], split [5, 6, 7], acker 8, master 9
    grown = rescale_tasks(before, system_topology(*prepared({"topology.bolt.parallelism": {"count": 4}})))
    assert component_tasks(grown) == {**component_tasks(before), "count": [3, 4, 10, 11]}
    shrunk = rescale_tasks(grown, system_topology(*prepared({"topology.bolt.parallelism": {"count": 1, "split": 2},
                                                             "topology.acker.executors": 2})))
    assert component_tasks(shrunk) == {"sentences": [1, 2], "count": [3], "split": [5, 6], "__acker": [8, 12],
                                       "__topology_master": [9]}
    again = rescale_tasks(shrunk, system_topology(*prepared({"topology.bolt.parallelism": {"count": 2}})))
    assert component_tasks(again)["count"] == [3, 13], "new ids start above every id in use"
    assert rescale_tasks(again, system_topology(*prepared({"topology.bolt.parallelism": {"count": 2}}))) == again


def test_scheduler_components() -> None:
    system = system_topology(*prepared())
    components = scheduler_components(system, make_tasks(system))
    assert [c.id for c in components] == ["__acker", "__topology_master", "count", "sentences", "split"]
    by_id = {c.id: c for c in components}
    assert by_id["count"] == Component("count", (3, 4), frozenset({"split"}), {"topology.tasks": 2})
    assert by_id["sentences"] == Component("sentences", (1, 2), frozenset(), {"topology.tasks": 2})
    assert by_id["split"].inputs == frozenset({"sentences"})
    assert by_id["__acker"].inputs == frozenset({"sentences", "split", "count"})
    assert by_id["__topology_master"] == Component(
        "__topology_master", (9,), frozenset({"sentences", "split", "count", "__acker", "__topology_master"}),
        {"topology.tasks": 1})


def reordered(topology: storm.StormTopology, spout_order: list[str], bolt_order: list[str]) -> storm.StormTopology:
    return storm.StormTopology(spouts={c: topology.spouts[c] for c in spout_order},
                               bolts={c: topology.bolts[c] for c in bolt_order}, state_spouts={})


@settings(max_examples=30, deadline=None)
@given(st.permutations(["s1", "s2", "s3"]), st.permutations(["b1", "b2", "b3", "b4"]))
def test_tasks_do_not_depend_on_map_order(spout_order: list[str], bolt_order: list[str]) -> None:
    source = storm.StormTopology(
        spouts={c: spout(hint=i + 1) for i, c in enumerate(["s1", "s2", "s3"])},
        bolts={c: bolt({("s1", "default"): shuffle(), (f"s{i % 3 + 1}", "default"): shuffle()}, hint=i + 1)
               for i, c in enumerate(["b1", "b2", "b3", "b4"])},
        state_spouts={})

    def pipeline(t: storm.StormTopology) -> tuple[Any, ...]:
        system = system_topology(*normalize(t, BASE_CONF, name="x"))
        tasks = make_tasks(system)
        return tasks, scheduler_components(system, tasks)

    assert pipeline(reordered(source, spout_order, bolt_order)) == pipeline(source)
    assert component_tasks(pipeline(source)[0])["b1"] == [7]  # s1 s2 s2 s3 s3 s3, then b1


# ------------------------------------------------------------------------------------------------
# Topology ids
# ------------------------------------------------------------------------------------------------


def is_valid_name(name: str) -> bool:
    try:
        validate_name(name)
    except storm.InvalidTopologyException:
        return False
    return True


@given(st.text(string.ascii_letters + string.digits + "._-", min_size=1, max_size=128).filter(is_valid_name),
       st.integers(0, 10**6), st.integers(0, 2**40))
def test_topology_id_round_trip(name: str, counter: int, secs: int) -> None:
    tid = topology_id(name, counter, secs)
    assert tid == f"{name}-{counter}-{secs}"
    assert name_of(tid) == name


def test_topology_id_uses_whole_seconds() -> None:
    assert topology_id("word-count", 3, 1_700_000_000.9) == "word-count-3-1700000000"
    assert name_of("word-count-3-1700000000") == "word-count"


@pytest.mark.parametrize("counter, secs", [(-1, 5), (0, -5)])
def test_topology_id_rejects_negative_parts(counter: int, secs: float) -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        topology_id("wc", counter, secs)


@pytest.mark.parametrize("bad", ["", "wc", "wc-1", "wc-1-x", "wc-x-1", "-1-2", "wc-1-2-", "wc-1-2\n", "wc-1--2"])
def test_name_of_rejects_malformed_ids(bad: str) -> None:
    with pytest.raises(ValueError, match="is not a topology id"):
        name_of(bad)
