"""The user-facing API: tuples, components, the topology DSL, and the component test helper."""

from __future__ import annotations

import json

import pytest

from examples.wordcount import SENTENCES, Sentences, SplitSentence, WordCount, topology
from nimbus.topology import validate_topology
from squall.component import Bolt, Spout, Stream
from squall.dsl import Topology, TopologyError
from squall.testing import make_tuple, run_bolt, run_spout
from squall.thrift import storm
from squall.tuple import Fields, Tuple


class Words(Spout):
    outputs = {"default": ["word", "lang"], "control": Stream(["cmd"], direct=True)}


class Sink(Bolt):
    outputs = ["word"]


class Grouper:
    def prepare(self, fields, targets):
        self.targets = targets

    def choose_tasks(self, values):
        return self.targets[:1]


def test_tuple_access_by_index_and_name() -> None:
    fields = Fields(["word", "count"])
    t = Tuple(("cat", 3), fields, "count", "default", 4, id=9)
    assert (t[0], t["count"], t.get("missing", "-"), len(t)) == ("cat", 3, "-", 2)
    assert not hasattr(t, "__dict__"), "slotted: no per-tuple dict"
    assert Tuple(("x", 1), fields, "c", "default", 1).fields is fields
    with pytest.raises(KeyError, match=r"no field 'lang'; the stream has \['word', 'count'\]"):
        t["lang"]
    with pytest.raises(ValueError, match="1 values for fields"):
        Tuple(("x",), fields, "count", "default", 4)


def test_wordcount_builds_the_thrift_topology_nimbus_accepts() -> None:
    built, conf = topology(rounds=1, workers=2).build()
    assert conf == {"topology.workers": 2}
    assert sorted(built.spouts) == ["sentences"] and sorted(built.bolts) == ["count", "split"]
    spout = built.spouts["sentences"]
    assert spout.spout_object.python_object == storm.PythonComponent(
        module_name="examples.wordcount", class_name="Sentences", args_json="[1]", kwargs_json="{}")
    assert spout.common.streams == {"default": storm.StreamInfo(output_fields=["sentence"], direct=False)}
    count = built.bolts["count"].common
    assert count.parallelism_hint == 2
    assert count.inputs == {storm.GlobalStreamId("split", "default"): storm.Grouping(fields=["word"])}
    validate_topology("wordcount", built, {"topology.workers": 2})


def test_every_grouping_kind_and_component_conf() -> None:
    t = Topology("g")
    words = t.spout("words", Words)
    sink = t.bolt("sink", Sink, conf={"topology.tick.tuple.freq.secs": 5})
    (sink.shuffle(words).all(words).global_(words).none(words).local_or_shuffle(words)
         .fields(words, "lang").direct(words, stream="control").custom(words, Grouper))
    built, _ = t.build()
    groupings = [g for g in built.bolts["sink"].common.inputs.values()]
    # one input per (component, stream): the last subscription to words:default wins, as in Storm's map
    assert len(built.bolts["sink"].common.inputs) == 2
    assert json.loads(built.bolts["sink"].common.json_conf) == {"topology.tick.tuple.freq.secs": 5}
    custom = built.bolts["sink"].common.inputs[storm.GlobalStreamId("words", "default")]
    assert json.loads(custom.custom_serialized) == {"module": __name__, "class": "Grouper", "args": []}
    assert storm.Grouping(direct=storm.NullStruct()) in groupings
    validate_topology("g", built, {})


@pytest.mark.parametrize("declare, message", [
    (lambda t, w: t.bolt("sink", Sink).shuffle("nope"), "subscribes to unknown component 'nope'"),
    (lambda t, w: t.bolt("sink", Sink).shuffle(w, stream="other"), "stream 'other' which 'words' does not declare"),
    (lambda t, w: t.bolt("sink", Sink).fields(w, "colour"), r"by fields \['colour'\] which the stream does not"),
    (lambda t, w: t.bolt("sink", Sink).shuffle(w, stream="control"), "the stream is direct: use .direct()"),
    (lambda t, w: t.bolt("sink", Sink).direct(w), "direct grouping, but the stream is not direct"),
    (lambda t, w: t.bolt("words", Sink), "duplicate component id 'words'"),
    (lambda t, w: t.bolt("__acker", Sink), "is reserved"),
    (lambda t, w: t.bolt("my sink", Sink), "is invalid"),
    (lambda t, w: t.bolt("sink", Sink, parallelism=0), "parallelism must be >= 1"),
    (lambda t, w: t.bolt("sink", Sink, object()), "must be JSON-serialisable"),
    (lambda t, w: t.bolt("sink", Words), "is not a Bolt subclass"),
    (lambda t, w: w.shuffle("words"), "cannot subscribe to streams"),
])
def test_mistakes_are_caught_at_build_time(declare, message: str) -> None:
    t = Topology("bad")
    words = t.spout("words", Words)
    with pytest.raises(TopologyError, match=message):
        declare(t, words)
        t.build()


def test_classes_workers_cannot_import_are_refused() -> None:
    class Local(Bolt):
        outputs = ["x"]

    with pytest.raises(TopologyError, match="must be defined at the top level of an importable module"):
        Topology("t").bolt("local", Local)
    with pytest.raises(TopologyError, match="has no spout"):
        Topology("t").build()


def test_shell_components() -> None:
    t = Topology("shell")
    s = t.shell_spout("s", "python3", "spout.py", ["line"])
    t.shell_bolt("b", "python3", "bolt.py", ["word"]).shuffle(s)
    built, _ = t.build()
    assert built.bolts["b"].bolt_object.shell == storm.ShellComponent(execution_command="python3", script="bolt.py")
    validate_topology("shell", built, {})


def test_split_emits_words_anchored_to_the_sentence_and_acks_it() -> None:
    run = run_bolt(SplitSentence, [("the cat sat",)], fields=["sentence"])
    assert run.values() == [("the",), ("cat",), ("sat",)]
    assert all(e.anchors == (run.inputs[0],) for e in run.emitted)
    assert run.acked == run.inputs and run.failed == []


def test_count_counts() -> None:
    words = [("a",), ("b",), ("a",)]
    run = run_bolt(WordCount, words, fields=["word"])
    assert run.values() == [("a", 1), ("b", 1), ("a", 2)]
    assert run.bolt.counts == {"a": 2, "b": 1}


class Broken(Bolt):
    outputs = ["x"]

    def execute(self, tup):
        if tup.is_tick:
            return
        if tup["x"] == "boom":
            raise ValueError("cannot handle boom")
        self.emit([tup["x"]])


def test_an_exception_fails_the_tuple_is_reported_and_the_bolt_goes_on() -> None:
    run = run_bolt(Broken, [("boom",), ("ok",)], fields=["x"], ticks_after=True)
    assert run.failed == [run.inputs[0]] and run.acked == [run.inputs[1]], "tick tuples are never acked"
    (error,) = run.errors
    assert "ValueError: cannot handle boom" in error and "Traceback" in error
    assert run.values() == [("ok",)]


def test_emits_are_checked_against_declared_streams() -> None:
    class Wrong(Bolt):
        outputs = ["x"]

        def execute(self, tup):
            self.emit([1, 2])

    run = run_bolt(Wrong, [make_tuple([1])])
    assert "emit of 2 values on stream 'default'" in run.errors[0]


def test_spout_replays_a_failed_sentence() -> None:
    run = run_spout(Sentences, calls=2, args=[1])
    first, second = run.emitted
    assert first.values == (SENTENCES[0],) and first.msg_id == "0-0"
    run.ack_message(first.msg_id)
    run.fail_message(second.msg_id)
    run.next()
    assert run.emitted[-1].values == second.values and run.emitted[-1].msg_id == second.msg_id
