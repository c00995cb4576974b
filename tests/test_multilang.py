"""Shell (multilang) components: the protocol codec, and real subprocesses — pystorm spouts and bolts run
by streamparse_run (JSON and msgpack), a Node.js bolt speaking the protocol — in local mode, with exact
counts; a hung subprocess killed after the timeout with its tuples replayed; a crashed one restarted with
the crash backoff. Waits are on conditions with deadlines."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import msgpack
import pytest
from structlog.testing import capture_logs

from examples import multilang, wordcount
from squall.api.dsl import Topology
from squall.core.config.validation import ConfigError
from squall.core.local_state import CODE_FILES, resources_dir
from squall.core.package import build_package
from squall.core.restarts import restart_delay_secs
from squall.core.thrift import storm
from scenarios import expected_word_counts, word_counts
from support import wait_until
from topologies import Numbers, Recorder
from squall.dev.local import LocalTopology, compile_topology
from worker.multilang.process import resolve_command
from worker.multilang.protocol import (JSON, MSGPACK, JsonDecoder, MsgpackDecoder, MultilangError, codec_for, command,
                                       context_for, emit_target, grouping_json, heartbeat_message)

REPO = Path(__file__).resolve().parent.parent
RESOURCES = REPO / "tests" / "multilang" / "resources"
EXAMPLE_RESOURCES = Path(multilang.__file__).resolve().parent / "resources"
#: streamparse's runner of pystorm components, beside this interpreter (the test extra installs it).
STREAMPARSE_RUN = str(Path(sys.executable).parent / "streamparse_run")
FAST = {"task.heartbeat.frequency.secs": 0.05, "topology.message.timeout.secs": 30}
NODE = shutil.which("node")


def local(topology: Topology, **conf: Any) -> LocalTopology:
    return LocalTopology(topology, {**FAST, **conf}, resources=RESOURCES)


def pystorm(component: str, serializer: str = "json") -> dict[str, str]:
    return {"command": STREAMPARSE_RUN, "script": f"-s {serializer} pystorm_components.{component}"}


def seen_n(local_topology: LocalTopology, component: str = "sink") -> list[int]:
    return [values[-1] for e in local_topology.tasks(component) for _, _, values in e.bolt.seen]


# -- codec ------------------------------------------------------------------------------------------


def test_json_framing_splits_messages_at_end_lines_whatever_the_chunks() -> None:
    wire = (b'{"command": "emit",\n "tuple": ["a\\nend"]}\nend\n'  # multi-line JSON; "end" inside a string
            b"\nend\n"                                              # an empty message: skipped
            b"[3, 4]\nend\n" + JSON.encode({"command": "sync"}))
    whole = JsonDecoder().feed(wire)
    assert whole == [{"command": "emit", "tuple": ["a\nend"]}, [3, 4], {"command": "sync"}]
    decoder = JsonDecoder()
    assert [m for i in range(len(wire)) for m in decoder.feed(wire[i:i + 1])] == whole  # byte by byte


def test_json_framing_refuses_what_is_not_json() -> None:
    with pytest.raises(MultilangError, match="not a JSON message"):
        JsonDecoder().feed(b"hello from print()\nend\n")


def test_msgpack_objects_are_read_back_to_back_across_chunks() -> None:
    messages = [{"command": "emit", "tuple": ["x", 1, b"raw"]}, [7], {"pid": 42}]
    wire = b"".join(map(MSGPACK.encode, messages))
    decoder = MsgpackDecoder()
    got = decoder.feed(wire[:5]) + decoder.feed(wire[5:])
    assert got == messages
    assert msgpack.unpackb(MSGPACK.encode({"command": "next"})) == {"command": "next"}


def test_json_sends_what_json_cannot_hold_as_text_as_storm_does() -> None:
    assert JsonDecoder().feed(JSON.encode({"tuple": [Path("/x")]})) == [{"tuple": ["/x"]}]


def test_the_serializer_comes_from_storms_key_or_streamparse_runs_flag() -> None:
    assert codec_for({}) is JSON
    assert codec_for({"topology.multilang.serializer": "org.apache.storm.multilang.JsonSerializer"}) is JSON
    assert codec_for({"topology.multilang.serializer": "org.apache.storm.multilang.MessagePackSerializer"}) is MSGPACK
    assert codec_for({"topology.multilang.serializer": "msgpack"}) is MSGPACK
    assert codec_for({}, "-s msgpack pkg.bolts.Count") is MSGPACK
    assert codec_for({}, "--serializer=json pkg.bolts.Count") is JSON
    with pytest.raises(ConfigError, match="make them agree"):
        codec_for({"topology.multilang.serializer": "msgpack"}, "-s json pkg.bolts.Count")
    with pytest.raises(ConfigError, match="not a serializer Squall speaks"):
        codec_for({"topology.multilang.serializer": "com.example.ThriftSerializer"})


def test_emit_messages_default_as_storm_reads_them() -> None:
    assert emit_target({"command": "emit", "tuple": ["a"]}) == (("a",), "default", None, True)
    assert emit_target({"command": "emit", "tuple": ["a"], "stream": "s", "need_task_ids": False}) == \
        (("a",), "s", None, False)
    assert emit_target({"command": "emit", "tuple": ["a"], "task": 7}) == (("a",), "default", 7, False)
    assert emit_target({"command": "emit", "tuple": ["a"], "task": 0}) == (("a",), "default", None, True)
    with pytest.raises(MultilangError, match="without a 'tuple'"):
        emit_target({"command": "emit"})
    assert heartbeat_message("9") == {"id": "9", "comp": None, "stream": "__heartbeat", "task": -1, "tuple": []}
    assert command("ack", 5) == {"command": "ack", "id": 5} and command("next") == {"command": "next"}


def test_the_handshake_context_has_storms_keys() -> None:
    t = Topology("ctx")
    s = t.spout("sentences", wordcount.SentenceSpout)
    split = t.shell_bolt("split", command="node", script="splitsentence.js", outputs=["word"]).shuffle(s)
    t.bolt("count", wordcount.WordCount).fields(split, "word")
    layout, _ = compile_topology(t)
    task = layout.component_tasks["split"][0]
    context = context_for(layout, "split", task)
    assert context["taskid"] == task and context["componentid"] == "split"
    assert context["task->component"][str(task)] == "split"
    assert "__acker" in context["task->component"].values()
    assert context["streams"] == ["default"] and context["stream->outputfields"] == {"default": ["word"]}
    assert context["stream->target->grouping"] == {"default": {"count": {"type": "FIELDS", "fields": ["word"]}}}
    assert context["source->stream->grouping"] == {"sentences": {"default": {"type": "SHUFFLE"}}}
    assert context["source->stream->fields"] == {"sentences": {"default": ["sentence"]}}
    assert grouping_json(storm.Grouping(local_or_shuffle=storm.NullStruct())) == {"type": "LOCAL_OR_SHUFFLE"}


def test_commands_are_found_on_path() -> None:
    assert resolve_command("sh", {"PATH": "/nonexistent:/bin:/usr/bin"}) in ("/bin/sh", "/usr/bin/sh")
    assert resolve_command("./run.sh", {"PATH": ""}) == "./run.sh"
    with pytest.raises(FileNotFoundError, match="not on the worker's PATH"):
        resolve_command("no-such-command-xyz", {"PATH": "/bin"})


def test_the_package_carries_resources_unpacked_once_with_their_modes(tmp_path: Path) -> None:
    source = tmp_path / "src" / "resources"
    source.mkdir(parents=True)
    (source / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (source / "run.sh").chmod(0o755)
    (source / "data").mkdir()
    (source / "data" / "words.txt").write_text("a b\n")
    code = tmp_path / "code"
    code.mkdir()
    build_package([source, REPO / "tests" / "topologies.py"], code / CODE_FILES["code"])
    unpacked = resources_dir(code)
    assert unpacked == code / "resources" and (unpacked / "data" / "words.txt").read_text() == "a b\n"
    assert os.access(unpacked / "run.sh", os.X_OK)
    assert resources_dir(code) == unpacked  # once: the second worker finds it there
    bare = tmp_path / "bare"
    bare.mkdir()
    build_package([REPO / "tests" / "topologies.py"], bare / CODE_FILES["code"])
    assert resources_dir(bare) == bare  # no resources/: shell components run in the code directory


# -- real subprocesses ----------------------------------------------------------------------------


@pytest.mark.parametrize("serializer", ["json", "msgpack"])
def test_a_pystorm_bolt_passes_every_tuple_exactly_once(serializer: str) -> None:
    count = 300
    t = Topology("ml-bolt")
    numbers = t.spout("numbers", Numbers, args=[count])
    passed = t.shell_bolt("pass", **pystorm("PassThrough", serializer), outputs=["key", "n"],
                          parallelism=2).shuffle(numbers)
    t.bolt("sink", Recorder).shuffle(passed)
    with local(t) as running:
        spout = running.component("numbers")
        wait_until(lambda: len(spout.acked) == count, 30, "every number acked")
        assert sorted(seen_n(running)) == list(range(count))
        assert spout.failed == [] and running.errors == []
        assert sum(e.stats.acked for e in running.tasks("pass")) == count
        assert all(e.launches == 1 for e in running.tasks("pass"))
        pids = [e.pid for e in running.tasks("pass")]
    assert all(pid and not _alive(pid) for pid in pids)  # stopping the topology stopped its subprocesses


@pytest.mark.parametrize("serializer", ["json", "msgpack"])
def test_a_pystorm_spout_emits_reliably_and_hears_its_acks(serializer: str) -> None:
    count = 200
    t = Topology("ml-spout", conf={"test.count": count, "topology.multilang.serializer":
                                   "org.apache.storm.multilang.MessagePackSerializer" if serializer == "msgpack"
                                   else "org.apache.storm.multilang.JsonSerializer"})
    flag = "-s msgpack " if serializer == "msgpack" else ""  # as streamparse's "serializer" setting adds it
    numbers = t.shell_spout("numbers", command=STREAMPARSE_RUN, script=f"{flag}pystorm_components.NumberSpout",
                            outputs=["n"])
    t.bolt("sink", Recorder).shuffle(numbers)
    with local(t) as running:
        spout = running.tasks("numbers")[0]
        wait_until(lambda: spout.stats.acked == count, 30, "every number acked")
        assert sorted(seen_n(running)) == list(range(count))
        assert spout.stats.failed == 0 and running.errors == []


def test_task_ids_come_back_unless_declined_and_metrics_become_user_gauges() -> None:
    count = 20
    t = Topology("ml-ids")
    numbers = t.spout("numbers", Numbers, args=[count])
    ids = t.shell_bolt("ids", **pystorm("TaskIds"), outputs=["n", "task"]).shuffle(numbers)
    t.bolt("sink", Recorder, parallelism=2).shuffle(ids)
    with capture_logs() as logs, local(t) as running:
        spout = running.component("numbers")
        wait_until(lambda: len(spout.acked) == count, 30, "every number acked")
        ready = [e for e in logs if "TaskIds ready in" in e["event"]]
        assert ready and ready[0]["log_level"] == "info" and ready[0]["component"] == "ids"  # pystorm's log
        rows = [values for e in running.tasks("sink") for _, _, values in e.bolt.seen]
        sinks = set(running.layout.component_tasks["sink"])
        assert sorted(n for n, task in rows if task != -1) == list(range(count))
        assert all(task in sinks for n, task in rows if task != -1)  # where the first emit went
        wait_until(lambda: running.tasks("ids")[0].metrics.read() == ({}, {"last": count - 1}, []), 10,
                   "the last metric, read as the heartbeat reads user gauges")


@pytest.mark.skipif(NODE is None, reason="needs node (deploy/install-system-deps.sh --for-tests)")
def test_a_nodejs_bolt_counts_words_exactly() -> None:
    rounds = 10
    expected = expected_word_counts(rounds)

    with LocalTopology(multilang.topology(rounds=rounds), FAST, resources=EXAMPLE_RESOURCES) as running:
        wait_until(lambda: word_counts(running) == expected, 30, "exact word counts")
        sent = rounds * len(wordcount.SENTENCES)
        wait_until(lambda: sum(e.stats.acked for e in running.tasks("sentences")) == sent, 20, "sentences acked")
        assert running.errors == []
        assert sum(e.stats.acked for e in running.tasks("split")) == sent  # acked by Node after its task ids came


def test_a_shell_script_bolt_runs_in_resources_with_the_allow_listed_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "the worker's secret")  # not on the allow-list
    count = 30
    t = Topology("ml-sh")
    numbers = t.spout("numbers", Numbers, args=[count])
    env = t.shell_bolt("env", command="sh", script="envbolt.sh", outputs=["cwd", "home", "secret"]).shuffle(numbers)
    t.bolt("sink", Recorder).shuffle(env)
    with local(t) as running:
        spout = running.component("numbers")
        wait_until(lambda: len(spout.acked) == count, 30, "every number acked")
        rows = {values for e in running.tasks("sink") for _, _, values in e.bolt.seen}
        assert rows == {("resources dir", "home" if "HOME" in os.environ else "", "no secret")}
        assert running.errors == []


@pytest.mark.slow
def test_a_hung_subprocess_is_killed_its_tuples_fail_and_replay(tmp_path: Path) -> None:
    count = 60
    t = Topology("ml-hang", conf={"test.marker.dir": str(tmp_path), "test.trouble.n": 7})
    numbers = t.spout("numbers", Numbers, args=[count])
    passed = t.shell_bolt("pass", **pystorm("HangsOnce"), outputs=["key", "n"]).shuffle(numbers)
    t.bolt("sink", Recorder).shuffle(passed)
    with local(t, **{"topology.subprocess.timeout.secs": 2}) as running:
        spout, bolt = running.component("numbers"), running.tasks("pass")[0]
        hung = wait_until(lambda: bolt.pid, 60, "the first subprocess")  # a start-up that may be slow
        wait_until(lambda: sorted(set(spout.acked)) == list(range(count)), 90, "every number acked after the hang")
        assert 7 in spout.failed  # the input it hung on failed, and was replayed
        assert set(seen_n(running)) == set(range(count))
        assert bolt.launches >= 2 and not _alive(hung)  # (more than 2 only if load stalls a healthy one as long)
        (task, error), *_ = [(task, text) for task, text in running.errors if f"pid {hung}," in text]
        assert task == bolt.task and "heartbeat timeout" in error and "in-flight tuples failed" in error


def test_a_crashed_subprocess_reports_its_error_and_is_restarted(tmp_path: Path) -> None:
    count = 40
    t = Topology("ml-crash", conf={"test.marker.dir": str(tmp_path), "test.trouble.n": 5})
    numbers = t.spout("numbers", Numbers, args=[count])
    passed = t.shell_bolt("pass", **pystorm("CrashesOnce", "msgpack"), outputs=["key", "n"]).shuffle(numbers)
    t.bolt("sink", Recorder).shuffle(passed)
    with local(t) as running:
        spout, bolt = running.component("numbers"), running.tasks("pass")[0]
        wait_until(lambda: sorted(set(spout.acked)) == list(range(count)), 30, "every number acked after the crash")
        assert 5 in spout.failed and set(seen_n(running)) == set(range(count))
        assert bolt.launches == 2
        assert bolt.stats.failed_exception >= 1 and bolt.stats.failed - bolt.stats.failed_exception == 1, \
            "pystorm fails the tuple it raised on itself (explicit); what the dead subprocess held fails as exceptions"
        texts = [text for _, text in running.errors]
        assert any("Shell Process Exception" in text and "cannot handle 5" in text for text in texts)
        assert any("exited with code 1" in text and "restarting it now" in text for text in texts)


@pytest.mark.slow
@pytest.mark.parametrize("trouble", ["hang", "crash"])
def test_a_shell_spout_in_trouble_is_restarted_and_emits_again(trouble: str, tmp_path: Path) -> None:
    count = 50
    t = Topology("ml-spout-" + trouble, conf={"test.count": count, "test.trouble": trouble, "test.trouble.n": 20,
                                              "test.marker.dir": str(tmp_path)})
    numbers = t.shell_spout("numbers", command=STREAMPARSE_RUN, script="pystorm_components.NumberSpoutInTrouble",
                            outputs=["n"])
    t.bolt("sink", Recorder).shuffle(numbers)
    with local(t, **{"topology.subprocess.timeout.secs": 2}) as running:
        spout = running.tasks("numbers")[0]
        wait_until(lambda: set(seen_n(running)) == set(range(count)), 90, "every number after the restart")
        assert spout.launches >= 2
        texts = [text for _, text in running.errors]
        reason = "heartbeat timeout" if trouble == "hang" else "exited with code 1"
        assert any(reason in text and "shell spout 'numbers'" in text for text in texts), texts


def test_a_crash_loop_backs_off_as_workers_do() -> None:
    t = Topology("ml-loop")
    numbers = t.spout("numbers", Numbers, args=[10])
    t.shell_bolt("false", command="false", script="", outputs=["n"]).shuffle(numbers)
    with local(t) as running:
        wait_until(lambda: len(running.errors) >= 3, 20, "three deaths")
        texts = [text for _, text in running.errors[:3]]
    assert [restart_delay_secs(n) for n in (1, 2, 3)] == [0.0, 1.0, 2.0]
    assert "restarting it now" in texts[0] and "in 1s" in texts[1] and "in 2s" in texts[2]
    assert all("'false'" in text or "/false" in text for text in texts)


def test_a_missing_command_stops_the_task_with_a_clear_error() -> None:
    t = Topology("ml-missing")
    numbers = t.spout("numbers", Numbers, args=[1])
    t.shell_bolt("nope", command="no-such-command-xyz", script="x", outputs=["n"]).shuffle(numbers)
    running = local(t)
    running.start()
    try:
        assert running.runtime.failed.wait(10)
        assert "not on the worker's PATH" in running.errors[0][1]
    finally:
        running.stop()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
