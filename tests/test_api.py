"""The user-facing API: Tuple, Spout/Bolt, the topology DSL, the component test helper, the word count example."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from examples.wordcount import SENTENCES, SentenceSpout, SplitSentence, WordCount, topology
from squall.api.component import Bolt, Spout, Stream, TopologyContext, parse_outputs
from squall.api.dsl import BoltRef, SpoutRef, Topology, TopologyError, mistyped_argument
from squall.api.testing import Emit, make_context, make_tuple, run_bolt, run_spout
from squall.api.tuple import Fields, Tuple, tick_tuple
from squall.core.thrift import storm
from squall.core.topology import make_tasks, normalize, system_topology, validate_topology
from worker.grouping import make_grouper

NULL = storm.NullStruct()


class Words(Spout):
    outputs = {"default": ["word", "lang"], "control": Stream(["cmd"], direct=True)}

    def next_tuple(self) -> None:
        self.emit(["hello", "en"])


class Sink(Bolt):
    outputs = ["word"]

    def __init__(self, prefix: str = "", *, upper: bool = False) -> None:
        self.prefix, self.upper = prefix, upper

    def execute(self, tup: Tuple) -> None:
        self.emit([self.prefix + tup[0]])


class FirstTask:
    """A custom grouping: everything to the first target, or to ``pick`` when given."""

    def __init__(self, pick: int | None = None) -> None:
        self.pick = pick

    def prepare(self, output_fields: list[str], targets: list[int]) -> None:
        self.targets = targets

    def choose_tasks(self, values: Any) -> list[int]:
        return [self.pick or self.targets[0]]


# ------------------------------------------------------------------------------------------------
# Tuple
# ------------------------------------------------------------------------------------------------


def test_tuple_values_by_index_and_field_name() -> None:
    fields = Fields(["word", "count"])
    t = Tuple(("cat", 3), fields, "count", "default", 4, id=9, anchors={11: 12})
    assert (t[0], t[-1], t["word"], t["count"], t.get("count"), t.get("lang"), t.get("lang", "-")) == (
        "cat", 3, "cat", 3, 3, None, "-")
    word, n = t
    assert (word, n, len(t), t.values) == ("cat", 3, 2, ("cat", 3))
    assert (t.component, t.stream, t.task, t.id, dict(t.anchors), t.is_tick) == ("count", "default", 4, 9,
                                                                                  {11: 12}, False)
    with pytest.raises(KeyError, match=r"no field 'lang' in stream 'default' of 'count' \(fields: \['word', 'count'"):
        t["lang"]
    with pytest.raises(AttributeError):
        t.values = ("dog", 1)  # type: ignore[misc]


def test_tuples_share_their_stream_fields_and_carry_no_dict() -> None:
    fields = Fields(["word"])
    a, b = Tuple(("a",), fields, "split", "default", 1), Tuple(("b",), fields, "split", "default", 2)
    assert not hasattr(a, "__dict__") and set(Tuple.__slots__) == {
        "_values", "_fields", "_component", "_stream", "_task", "_id", "_anchors", "_ack_val"}
    assert a.fields is b.fields and a.fields.positions is b.fields.positions == {"word": 0}
    assert a.anchors is b.anchors and not a.anchors, "unanchored tuples share one empty map"
    assert fields == ("word",) and list(fields) == ["word"]


def test_fields_reject_duplicates_and_non_strings() -> None:
    with pytest.raises(ValueError, match=r"duplicate field names \['a'\]"):
        Fields(["a", "b", "a"])
    with pytest.raises(TypeError, match="field names must be strings"):
        Fields(["a", 1])  # type: ignore[list-item]


def test_tick_tuples() -> None:
    tick = tick_tuple(5)
    assert tick.is_tick and (tick.component, tick.stream, tick.task, tick["rate_secs"]) == ("__system", "__tick",
                                                                                            -1, 5)
    assert not make_tuple([5], ["rate_secs"], component="__system").is_tick


# ------------------------------------------------------------------------------------------------
# Components
# ------------------------------------------------------------------------------------------------


def test_outputs_are_parsed_when_the_class_is_defined() -> None:
    assert dict(Sink.streams) == {"default": Stream(("word",))}
    assert dict(Words.streams) == {"default": Stream(("word", "lang")), "control": Stream(("cmd",), direct=True)}
    assert dict(parse_outputs([])) == {}
    with pytest.raises(TypeError, match=r"Bad.outputs: outputs must be a list of field names .* not the string 'word'"):
        class Bad(Bolt):
            outputs = "word"
    with pytest.raises(TypeError, match=r"Twice.outputs: duplicate field names \['w'\]"):
        class Twice(Bolt):
            outputs = {"default": ["w", "w"]}


def test_a_component_needs_a_runtime_before_it_can_emit() -> None:
    with pytest.raises(RuntimeError, match=r"emit\(\) needs a running component"):
        Sink().emit(["x"])


def test_context_knows_this_tasks_place_among_its_components_tasks() -> None:
    context = TopologyContext("t-1-0", "t", "split", 7, {"split": (5, 6, 7), "count": (8,)})
    assert (context.tasks, context.task_index) == ((5, 6, 7), 2)


# ------------------------------------------------------------------------------------------------
# DSL
# ------------------------------------------------------------------------------------------------


def every_grouping() -> Topology:
    t = Topology("groupings", conf={"topology.workers": 2})
    words = t.spout("words", Words, parallelism=2)
    lines = t.shell_spout("lines", command="python3", script="lines.py", outputs=["line"])
    t.bolt("shuffled", Sink, parallelism=3).shuffle(words).shuffle(lines)
    t.bolt("by-lang", Sink, args=["w:"], kwargs={"upper": True}).fields(words, "lang", "word")
    t.bolt("everywhere", Sink).all(words)
    t.bolt("one", Sink).global_(words)
    t.bolt("none", Sink).none(words)
    t.bolt("near", Sink).local_or_shuffle(words)
    t.bolt("spread", Sink, parallelism=2).partial_key(words, "word")
    t.bolt("custom", Sink).custom(words, FirstTask, 2)
    t.bolt("control", Sink, conf={"topology.tick.tuple.freq.secs": 5}).direct(words, stream="control")
    t.shell_bolt("shell", command="node", script="count.js", outputs={"counts": ["word", "n"]}).shuffle(lines)
    return t


def python(cls: str, args: str | None = None, kwargs: str | None = None) -> storm.ComponentObject:
    return storm.ComponentObject(python_object=storm.PythonComponent(
        module_name=__name__, class_name=cls, args_json=args, kwargs_json=kwargs))


def common(inputs: dict[tuple[str, str], storm.Grouping], streams: dict[str, storm.StreamInfo], n: int = 1,
           conf: str = "{}") -> storm.ComponentCommon:
    return storm.ComponentCommon(inputs={storm.GlobalStreamId(c, s): g for (c, s), g in inputs.items()},
                                 streams=streams, parallelism_hint=n, json_conf=conf)


def test_the_dsl_builds_the_exact_thrift_topology() -> None:
    built, conf = every_grouping().build()
    word = {"default": storm.StreamInfo(["word"], False)}
    words = ("words", "default")
    custom = json.dumps({"args": [2], "class": "FirstTask", "module": __name__}).encode()
    assert conf == {"topology.workers": 2}
    assert built == storm.StormTopology(
        spouts={
            "lines": storm.SpoutSpec(
                storm.ComponentObject(shell=storm.ShellComponent("python3", "lines.py")),
                common({}, {"default": storm.StreamInfo(["line"], False)})),
            "words": storm.SpoutSpec(python("Words"), common({}, {
                "control": storm.StreamInfo(["cmd"], True),
                "default": storm.StreamInfo(["word", "lang"], False)}, n=2)),
        },
        bolts={
            "by-lang": storm.Bolt(python("Sink", '["w:"]', '{"upper": true}'),
                                  common({words: storm.Grouping(fields=["lang", "word"])}, word)),
            "control": storm.Bolt(python("Sink"), common({("words", "control"): storm.Grouping(direct=NULL)}, word,
                                                         conf='{"topology.tick.tuple.freq.secs": 5}')),
            "custom": storm.Bolt(python("Sink"), common({words: storm.Grouping(custom_serialized=custom)}, word)),
            "everywhere": storm.Bolt(python("Sink"), common({words: storm.Grouping(all=NULL)}, word)),
            "near": storm.Bolt(python("Sink"), common({words: storm.Grouping(local_or_shuffle=NULL)}, word)),
            "none": storm.Bolt(python("Sink"), common({words: storm.Grouping(none=NULL)}, word)),
            "one": storm.Bolt(python("Sink"), common({words: storm.Grouping(fields=[])}, word)),
            "shell": storm.Bolt(storm.ComponentObject(shell=storm.ShellComponent("node", "count.js")),
                                common({("lines", "default"): storm.Grouping(shuffle=NULL)},
                                       {"counts": storm.StreamInfo(["word", "n"], False)})),
            "spread": storm.Bolt(python("Sink"), common({words: storm.Grouping(partial_key=["word"])}, word, n=2)),
            "shuffled": storm.Bolt(python("Sink"), common({("lines", "default"): storm.Grouping(shuffle=NULL),
                                                           words: storm.Grouping(shuffle=NULL)}, word, n=3)),
        },
        state_spouts={})
    assert list(built.bolts) == sorted(built.bolts), "maps are built in id order: same declaration, same bytes"


def test_what_the_dsl_builds_passes_nimbus() -> None:
    for t in (every_grouping(), topology(rounds=1)):
        built, conf = t.build()
        validate_topology(t.name, built, conf)
        normalized, conf = normalize(built, conf, name=t.name)
        assert make_tasks(system_topology(normalized, conf)).tasks


def test_build_returns_fresh_objects() -> None:
    t = every_grouping()
    first, conf = t.build()
    first.bolts.clear()
    conf["topology.workers"] = 9
    assert t.build() == (every_grouping().build()[0], {"topology.workers": 2})


def test_the_custom_grouping_encoding_is_what_the_worker_loads() -> None:
    built, _ = every_grouping().build()
    grouping = built.bolts["custom"].common.inputs[storm.GlobalStreamId("words", "default")]
    route = make_grouper(grouping, output_fields=["word", "lang"], targets=[4, 2, 3])
    assert list(route(["hello", "en"])) == [2]


def test_spouts_cannot_subscribe() -> None:
    assert isinstance(Topology("t").spout("s", Words), SpoutRef) and not hasattr(SpoutRef, "shuffle")
    assert {"shuffle", "fields", "all", "global_", "none", "direct", "local_or_shuffle", "custom"} <= set(vars(BoltRef))


class Abstract(Bolt):
    outputs = ["x"]


class Ungroupable:
    pass


Mistake = Callable[[Topology, SpoutRef], Any]
MISTAKES: list[tuple[Mistake, str]] = [
    (lambda t, w: t.bolt("sink", Sink).shuffle(w, stream="other"),
     r"bolt 'sink' subscribes to stream 'other' of 'words', which 'words' does not declare "
     r"\(it declares: 'default', 'control'\)"),
    (lambda t, w: t.bolt("sink", Sink).fields(w, "colour", "word"),
     r"bolt 'sink' groups stream 'default' of 'words' by unknown fields \['colour'\] "
     r"\(the stream declares \['word', 'lang'\]\)"),
    (lambda t, w: t.bolt("sink", Sink).fields(w), "names no fields .*use global_"),
    (lambda t, w: t.bolt("sink", Sink).partial_key(w, "colour"),
     r"bolt 'sink' groups stream 'default' of 'words' by unknown fields \['colour'\]"),
    (lambda t, w: t.bolt("sink", Sink).partial_key(w), "bolt 'sink': partial_key grouping on 'words' names no fields"),
    (lambda t, w: t.bolt("sink", Sink).direct(w), "uses direct grouping on stream 'default' of 'words', which is "
                                                  "not declared direct"),
    (lambda t, w: t.bolt("sink", Sink).shuffle(w, stream="control"), r"which is direct: use \.direct\(\)"),
    (lambda t, w: t.bolt("sink", Sink).shuffle(w).all(w), "already subscribes to stream 'default' of 'words'"),
    (lambda t, w: t.bolt("sink", Sink).shuffle(Topology("other").spout("words", Words)),
     "pass what this topology's spout"),
    (lambda t, w: t.bolt("sink", Sink).shuffle("words"), "pass what this topology's spout"),  # type: ignore[arg-type]
    (lambda t, w: t.bolt("words", Sink), "bolt 'words': a spout with that id is already declared"),
    (lambda t, w: t.bolt("__acker", Sink), 'bolt id \'__acker\' is reserved: ids starting with "__"'),
    (lambda t, w: t.bolt("sink", Sink, outputs={"__x": ["a"]}), "stream id '__x' of bolt 'sink' is reserved"),
    (lambda t, w: t.bolt("my sink", Sink), r"bolt id 'my sink' is invalid: use 1 to 128 characters"),
    (lambda t, w: t.bolt("", Sink), "bolt id '' is invalid"),
    (lambda t, w: t.bolt("sink", Sink, parallelism=0), "bolt 'sink': parallelism must be an int >= 1, got 0"),
    (lambda t, w: t.spout("more", Words, parallelism=2.5), "parallelism must be an int >= 1, got 2.5"),
    (lambda t, w: t.bolt("sink", Sink, args=[object()]), "bolt 'sink' args must be JSON"),
    (lambda t, w: t.bolt("sink", Sink, kwargs={"shape": "x"}),
     "Sink cannot be built with these arguments: got an unexpected keyword argument 'shape'"),
    (lambda t, w: t.bolt("sink", Sink, args=[3]), "^bolt 'sink': Sink's argument prefix must be str, got 3$"),
    (lambda t, w: t.bolt("sink", Sink, kwargs={"upper": "yes"}), "Sink's argument upper must be bool, got 'yes'"),
    (lambda t, w: t.bolt("sink", Words), r"bolt 'sink': <class '.*Words'> is not a Bolt subclass"),
    (lambda t, w: t.bolt("sink", Abstract), "Abstract does not implement execute"),
    (lambda t, w: t.bolt("sink", Sink).custom(w, Ungroupable), "must be a class with a choose_tasks"),
    (lambda t, w: t.bolt("sink", Sink).custom(w, FirstTask, {1, 2}), "custom grouping 'FirstTask' arguments must "
                                                                     "be JSON"),
    (lambda t, w: t.shell_bolt("sh", command="", script="x.py", outputs=[]), "shell command must be a non-empty"),
    (lambda t, w: t.bolt("sink", Sink, conf={"topology.tick.tuple.freq.secs": "often"}),
     "^bolt 'sink' conf: config key 'topology.tick.tuple.freq.secs' expects number > 0 or null, got 'often'"),
    (lambda t, w: t.bolt("sink", Sink, conf={"x": float("nan")}), "bolt 'sink' conf must be JSON"),
    (lambda t, w: t.conf({"topology.workers": "two"}),
     "^topology 'bad' conf: config key 'topology.workers' expects int"),
    (lambda t, w: t.bolt("sink", Sink), "bolt 'sink' subscribes to nothing"),
    (lambda t, w: t.conf({"topology.bolt.parallelism": {"split": 2}}),
     "topology.bolt.parallelism names 'split', which is not a bolt of this topology"),
]


def test_mistyped_argument_judges_only_the_types_json_arguments_come_as() -> None:
    def topology(rounds: int | None, rate: float = 1.0, *more: int, flag: bool = False, **conf: str) -> None: ...

    def unresolved(rounds: int, name: str) -> None: ...
    unresolved.__annotations__["name"] = "OnlyImportedForTypeCheckers"  # as under `if TYPE_CHECKING:`

    assert mistyped_argument(topology, ["abc"], {}) == "argument rounds must be int | None, got 'abc'"
    assert mistyped_argument(topology, [True], {}) == "argument rounds must be int | None, got True", "bool is no int"
    assert mistyped_argument(topology, [None, 2, "not-an-int", 4], {"conf": 1}) is None, \
        "an int is a float; *args and **kwargs are not judged"
    assert mistyped_argument(unresolved, ["abc", 1], {}) is None, "hints that do not resolve judge nothing"
    assert mistyped_argument(Sink, ["p"], {"upper": 1}) == "argument upper must be bool, got 1"
    assert mistyped_argument(Sink, [1, 2], {}) is None, "a call the signature refuses is _check_args's to report"


@pytest.mark.parametrize("mistake, message", MISTAKES)
def test_mistakes_raise_topology_errors_that_say_what_to_fix(mistake: Mistake, message: str) -> None:
    t = Topology("bad")
    words = t.spout("words", Words)
    with pytest.raises(TopologyError, match=message):
        mistake(t, words)
        t.build()


@pytest.mark.parametrize("name, message", [("12", "all digits"), ("null", "reserved"), ("a/b", "A-Z a-z 0-9")])
def test_topology_names_follow_nimbus_rules(name: str, message: str) -> None:
    with pytest.raises(TopologyError, match=f"topology name '{name}' is invalid: .*{message}"):
        Topology(name)


def test_a_topology_needs_a_spout() -> None:
    with pytest.raises(TopologyError, match="topology 'empty' has no spout"):
        Topology("empty").build()


def test_classes_workers_cannot_import_are_refused() -> None:
    class Local(Bolt):
        def execute(self, tup: Tuple) -> None: ...

    script = type("FromScript", (Bolt,), {"__module__": "__main__", "execute": Local.execute})
    renamed = type("Renamed", (Bolt,), {"__module__": __name__, "execute": Local.execute})
    t = Topology("t")
    with pytest.raises(TopologyError, match="FromScript is defined in __main__ .* move it to a module"):
        t.bolt("a", script)
    with pytest.raises(TopologyError, match="is not defined at the top level of its module"):
        t.bolt("b", Local)
    with pytest.raises(TopologyError, match=f"{__name__}.Renamed does not name this class"):
        t.bolt("c", renamed)


# ------------------------------------------------------------------------------------------------
# The test helper, on the word count example
# ------------------------------------------------------------------------------------------------


def test_split_emits_words_anchored_to_the_sentence_and_auto_acks_it() -> None:
    run = run_bolt(SplitSentence, [("the cat sat",), ("on",)], fields=["sentence"])
    sentence, on = run.inputs
    assert run.emitted == [Emit("default", ("the",), (sentence,)), Emit("default", ("cat",), (sentence,)),
                           Emit("default", ("sat",), (sentence,)), Emit("default", ("on",), (on,))]
    assert run.acked == [sentence, on] and run.failed == [] and run.errors == []
    assert (sentence.id, on.id, sentence.component) == (1, 2, "source")


def test_count_counts_and_takes_ticks_in_its_stride() -> None:
    run = run_bolt(WordCount, [("a",), ("b",), tick_tuple(5), ("a",)], fields=["word"])
    assert run.values() == [("a", 1), ("b", 1), ("a", 2)]
    assert run.bolt.counts == {"a": 2, "b": 1}
    assert run.acked == run.inputs, "auto_ack acks every input, ticks included (a no-op for untracked tuples)"
    run.execute([("b",)])
    assert run.values()[-1] == ("b", 2)


class Picky(Bolt):
    outputs = {"default": ["x"], "odd": Stream(["x"], direct=True)}

    def execute(self, tup: Tuple) -> None:
        action = tup["action"]
        if action == "boom":
            raise ValueError("cannot handle boom")
        if action == "reject":
            self.fail(tup)
        elif action == "ack-early":
            self.ack(tup)
            self.emit(["after ack"])
        elif action == "unanchored":
            self.emit(["free"], anchors=())
        elif action == "two values":
            self.emit([1, 2])
        elif action == "undeclared":
            self.emit([1], stream="nope")
        elif action == "not direct":
            self.emit([1], direct_task=3)
        elif action == "direct":
            self.emit([1], stream="odd", direct_task=3)
        elif action == "set":
            self.emit([{1, 2}])


def test_an_exception_fails_its_tuple_is_reported_and_the_bolt_goes_on() -> None:
    run = run_bolt(Picky, [("boom",), ("direct",)], fields=["action"])
    boom, direct = run.inputs
    assert run.failed == [boom] and run.acked == [direct]
    (error,) = run.errors
    assert isinstance(error, ValueError) and str(error) == "cannot handle boom"
    assert run.emitted == [Emit("odd", (1,), (direct,), direct_task=3)]


def test_acking_or_failing_the_input_yourself_turns_auto_ack_off_for_it() -> None:
    run = run_bolt(Picky, [("reject",), ("ack-early",), ("unanchored",)], fields=["action"])
    reject, early, unanchored = run.inputs
    assert run.failed == [reject] and run.acked == [early, unanchored], "never acked and failed, never twice"
    assert [e.anchors for e in run.emitted] == [(), ()], "no anchoring to a settled input, nor with anchors=()"


@pytest.mark.parametrize("action, message", [
    ("two values", "emit of 2 values on stream 'default', which declares 1 fields ['x']"),
    ("undeclared", "emit on stream 'nope', which is not declared (declared: 'default', 'odd')"),
    ("not direct", "direct_task given but stream 'default' is not declared direct"),
    ("set", "cannot travel between workers"),
])
def test_emits_are_checked_as_a_worker_checks_them(action: str, message: str) -> None:
    run = run_bolt(Picky, [(action,)], fields=["action"])
    assert run.emitted == [] and run.failed == run.inputs
    assert message in str(run.errors[0])


class Manual(Bolt):
    outputs = ["word"]
    auto_ack = False

    def execute(self, tup: Tuple) -> None:
        self.emit([tup[0]])
        self.emit([tup[0]], anchors=tup)
        if tup[0] == "done":
            self.ack(tup)


class Holding(Bolt):
    """Holds its inputs, keeping their trees alive on every tick."""

    auto_ack = False

    def prepare(self, conf: Any, context: TopologyContext) -> None:
        self.held: list[Tuple] = []

    def execute(self, tup: Tuple) -> None:
        if tup.is_tick:
            for held in self.held:
                self.reset_timeout(held)
        else:
            self.held.append(tup)


def test_the_test_helper_records_reset_timeout_calls() -> None:
    run = run_bolt(Holding, [("a",), ("b",)], fields=["word"])
    assert run.timeouts_reset == []
    run.execute([tick_tuple(1.0), tick_tuple(1.0)])
    assert run.timeouts_reset == run.inputs[:2] * 2 and run.acked == run.failed == []


class Configured(Bolt):
    component_conf = {"sink.size": 10, "sink.name": "db"}

    def prepare(self, conf: Any, context: TopologyContext) -> None:
        self.conf = dict(conf)

    def execute(self, tup: Tuple) -> None: ...


def test_the_test_helper_gives_a_component_its_component_conf_under_the_conf_passed() -> None:
    assert run_bolt(Configured, conf={"sink.size": 2}).bolt.conf == {"sink.size": 2, "sink.name": "db"}


def test_without_auto_ack_the_bolt_anchors_and_acks_by_hand() -> None:
    run = run_bolt(Manual, [("keep",), ("done",)], fields=["w"])
    keep, done = run.inputs
    assert [e.anchors for e in run.emitted] == [(), (keep,), (), (done,)]
    assert run.acked == [done] and run.failed == []


def test_constructor_arguments_reach_the_component_as_json() -> None:
    run = run_bolt(Sink, [("x",)], fields=["w"], args=["p-"], kwargs={"upper": (1, 2)})
    assert run.values() == [("p-x",)] and run.bolt.upper == [1, 2], "a tuple arrives as a list, as in a worker"


def test_the_spout_replays_a_failed_sentence_and_forgets_acked_ones() -> None:
    run = run_spout(SentenceSpout, calls=2, args=[1])
    first, second = run.emitted
    assert (first.values, first.msg_id, second.msg_id) == ((SENTENCES[0],), 0, 1)
    run.ack(first.msg_id)
    run.fail(second.msg_id)
    assert run.next_tuple() == [Emit("default", (SENTENCES[1],), msg_id=1)]
    assert run.pending == [1]
    with pytest.raises(ValueError, match="msg id 0 is not pending"):
        run.ack(0)


def test_spout_tasks_share_out_the_sentences_exactly() -> None:
    emitted = []
    for task in (1, 2):
        context = make_context("sentences", task, component_tasks={"sentences": [1, 2]})
        run = run_spout(SentenceSpout, calls=10, args=[2], context=context)
        emitted += run.values()
    assert sorted(emitted) == sorted((s,) for s in SENTENCES * 2)


def test_the_word_count_pipeline_counts_exactly() -> None:
    sentences = run_spout(SentenceSpout, calls=len(SENTENCES), args=[1])
    words = run_bolt(SplitSentence, sentences.values(), fields=["sentence"])
    counts = run_bolt(WordCount, words.values(), fields=["word"])
    assert counts.bolt.counts == Counter(" ".join(SENTENCES).split())
