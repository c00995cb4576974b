"""A Storm user's first hour with ``storm``, typed wrong on purpose: each mistake gets one line on stderr that
names the fix, and a non-zero exit. Commands run as a shell runs them (``storm`` on PATH, relative paths from
the repository) where the process matters: a closed pipe, a daemon's port, what a command logs."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from examples import wordcount
from processcluster import REPO
from squall.cli.main import main
from squall.core.thrift.server import make_server
from support import make_certs, storm_on_path, tls_conf


@pytest.fixture
def shell(tmp_path: Path) -> dict[str, str]:
    """A user's environment: this checkout's ``storm`` on PATH, no storm.yaml of the machine's."""
    env = storm_on_path(tmp_path / "bin")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "storm.yaml").write_text("# the defaults\n")
    return {**env, "STORM_CONF_DIR": str(tmp_path / "conf")}


def typed(env: dict[str, str], line: str) -> subprocess.CompletedProcess[str]:
    """``line`` as typed at a shell prompt in the repository's directory."""
    return subprocess.run(["sh", "-c", line], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port some other program listens on."""
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        yield holder.getsockname()[1]


def said(capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    out, err = capsys.readouterr()
    return out, err.strip()


def test_a_mistyped_verb_names_the_closest_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lsit"]) == 2
    assert said(capsys) == ("", "storm: unknown command 'lsit'; did you mean list? (storm help lists the commands)")
    assert main(["-c", "topology.workers=2", "kil", "wc"]) == 2, "the verb is found behind options"
    assert said(capsys)[1].startswith("storm: unknown command 'kil'; did you mean kill?")
    assert main(["help", "rebalnce"]) == 2
    assert said(capsys)[1].startswith("storm help: unknown command 'rebalnce'; did you mean rebalance?")
    assert main(["help", "drpc"]) == 2
    assert said(capsys)[1] == "storm help: Squall has no DRPC server"


def test_a_mistyped_option_names_the_closest_one_of_that_verb(capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    assert main(["jar", "examples/wordcount.py", "--nmae", "wc2"]) == 2
    assert said(capsys) == ("", "storm jar: unrecognized arguments: --nmae wc2; did you mean --name? (storm help jar)")
    assert main(["list", "--jsn"]) == 2
    assert said(capsys)[1] == "storm list: unrecognized arguments: --jsn; did you mean --json? (storm help list)"


def test_a_missing_file_is_named_as_missing(shell: dict[str, str]) -> None:
    for line, expected in (("storm jar wordcont.py", "storm jar: wordcont.py: no such file or directory"),
                           ("storm local wordcont.py", "storm local: wordcont.py: no such file or directory"),
                           ("storm jar examples/wordcount.py --include lib/", "storm jar: cannot build the package: "
                                                                              "lib: no such file or directory")):
        done = typed(shell, line)
        assert (done.returncode, done.stdout) == (1, ""), line
        assert done.stderr.strip().startswith(expected), done.stderr


def test_a_shell_component_whose_script_is_left_out_is_refused_before_upload(shell: dict[str, str]) -> None:
    """``storm local examples/multilang.py`` runs its Node.js bolt from examples/resources; ``storm jar`` without
    ``--include`` would ship a package without it and every worker's bolt would die at start."""
    done = typed(shell, "storm jar examples/multilang.py -c 'nimbus.seeds=[\"127.0.0.1:1\"]'")  # none listens
    assert (done.returncode, done.stderr.strip()) == (
        1, "storm jar: shell bolt 'split' runs splitsentence.js, which is in examples/resources but not in the "
           "package: add --include examples/resources")
    done = typed(shell, "storm jar examples/multilang.py --include examples/resources "
                        "-c 'nimbus.seeds=[\"127.0.0.1:1\"]'")
    assert "cannot reach nimbus" in done.stderr, "with the resources it gets as far as nimbus"


OFFLINE = "-c 'nimbus.seeds=[\"127.0.0.1:1\"]'"  # none listens: refused before nimbus is asked, nothing uploaded


def test_a_topology_argument_its_function_refuses_is_named_at_submit_not_on_the_workers(shell: dict[str, str]) -> None:
    """``storm jar examples/wordcount.py abc`` built, and its spouts then raised in ``open`` on every worker
    ('str' object cannot be interpreted as an integer): the annotation ``rounds: int | None`` says so first."""
    done = typed(shell, f"storm jar examples/wordcount.py abc {OFFLINE}")
    assert (done.returncode, done.stdout, done.stderr) == (
        1, "", f"storm jar: examples/wordcount.py:{wordcount.topology.__code__.co_firstlineno}: topology()'s "
               "argument rounds must be int | None, got 'abc' "
               "(arguments are JSON when they parse: 10, 2.5, true, null, else text)\n")
    done = typed(shell, f"storm jar examples/wordcount.py 10 {OFFLINE}")
    assert "cannot reach nimbus" in done.stderr, "a number gets as far as nimbus"


def test_an_argument_a_component_refuses_is_named_at_the_line_declaring_it(shell: dict[str, str],
                                                                            tmp_path: Path) -> None:
    """A topology function without annotations passes its argument on to a spout whose constructor has them."""
    (tmp_path / "counted.py").write_text(
        "from examples.wordcount import SentenceSpout\n"
        "from squall.api.dsl import Topology\n"
        "\n"
        "def topology(rounds):\n"
        "    t = Topology('counted')\n"
        "    t.spout('sentences', SentenceSpout, args=[rounds])\n"
        "    return t\n")
    done = typed(shell, f"storm jar {tmp_path / 'counted.py'} abc {OFFLINE}")
    assert (done.returncode, done.stderr) == (
        1, f"storm jar: {tmp_path / 'counted.py'}:6: spout 'sentences': SentenceSpout's argument rounds must be "
           "int | None, got 'abc'\n")


def test_storm_local_tells_a_mistake_in_a_topology_file_as_storm_jar_does(shell: dict[str, str],
                                                                          tmp_path: Path) -> None:
    """The same one line, ``file:line`` first, from both: a syntax error (not a traceback under ``storm local``),
    a grouping by a field the stream does not declare (its line kept); ``--verbose`` adds the traceback."""
    (tmp_path / "typo.py").write_text("from squall.api.dsl import Topology\n\ndef topology(:\n    pass\n")
    (tmp_path / "fields.py").write_text(
        "from examples.wordcount import SentenceSpout, SplitSentence, WordCount\n"
        "from squall.api.dsl import Topology\n"
        "\n"
        "topology = Topology('fields')\n"
        "split = topology.bolt('split', SplitSentence).shuffle(topology.spout('sentences', SentenceSpout))\n"
        "topology.bolt('count', WordCount).fields(split, 'wrd')\n")
    for file, line in (("typo.py", "typo.py:3: invalid syntax"),
                       ("fields.py", "fields.py:6: bolt 'count' groups stream 'default' of 'split' by unknown fields "
                                     "['wrd'] (the stream declares ['word'])")):
        for verb in ("jar", "local"):
            done = typed(shell, f"cd {tmp_path} && storm {verb} {file} {OFFLINE}")
            assert (done.returncode, done.stdout, done.stderr) == (1, "", f"storm {verb}: {line}\n"), (verb, file)
    verbose = typed(shell, f"cd {tmp_path} && storm local typo.py --verbose")
    assert verbose.returncode == 1 and "Traceback (most recent call last)" in verbose.stderr
    assert verbose.stderr.endswith("storm local: typo.py:3: invalid syntax\n")


def test_storm_local_logs_readable_lines_and_json_when_asked(shell: dict[str, str]) -> None:
    """A person reads ``storm local``'s lines (time, level, logger, message, context), in a terminal or not;
    ``--json`` is the workers' JSON lines, for tools."""
    done = typed(shell, "storm local examples/wordcount.py --local-ttl 1")
    assert done.returncode == 0, done.stderr
    started = next(line for line in done.stderr.splitlines() if "local topology running" in line)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z INFO  \S+  local topology running  "
                        r"topology_id=wordcount-1-\d+ ttl_secs=1\.0 tasks=\d+ daemon=local", started), started
    done = typed(shell, "storm local examples/wordcount.py --local-ttl 1 --json")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert any(r["event"] == "local topology running" for r in records), done.stderr


def test_a_closed_pipe_ends_the_command_quietly(shell: dict[str, str]) -> None:
    """``storm list | head -1``: the reader is gone. No 'cannot reach nimbus', no traceback: SIGPIPE's status."""
    reader, writer = os.pipe()
    os.close(reader)  # gone before storm writes a byte
    try:
        done = subprocess.run(["storm", "version"], cwd=REPO, env=shell, stdout=writer, stderr=subprocess.PIPE,
                              text=True, timeout=60)
    finally:
        os.close(writer)
    assert (done.returncode, done.stderr) == (128 + signal.SIGPIPE, "")


def test_one_shot_commands_print_their_answer_and_no_info_logs(shell: dict[str, str], zk_conf: dict[str, Any]) -> None:
    """``storm zktool`` talks to ZooKeeper; its client's "connected"/"lost" lines are a daemon's business."""
    options = " ".join(f"-c {key}='{json.dumps(zk_conf[key])}'"
                       for key in ("storm.zookeeper.servers", "storm.zookeeper.port", "storm.zookeeper.root"))
    done = typed(shell, f"storm zktool ls / {options}")
    assert (done.returncode, done.stderr) == (0, "")
    debug = typed(shell, f"storm zktool ls / {options} -c squall.log.level=DEBUG")
    assert "zookeeper state" in debug.stderr, "DEBUG still shows everything"


@pytest.mark.parametrize("verb, key, title", [("ui", "ui.port", "the UI"),
                                              ("logviewer", "logviewer.port", "the logviewer")])
def test_a_daemon_whose_port_is_taken_says_so_in_one_line(shell: dict[str, str], taken_port: int, verb: str,
                                                          key: str, title: str) -> None:
    done = typed(shell, f"storm {verb} -c {key}={taken_port}")
    assert (done.returncode, done.stderr.strip()) == (
        1, f"storm {verb}: {title} cannot listen on 0.0.0.0:{taken_port} ({verb}.host, {key}): Address already in use")


def test_a_nimbus_whose_port_is_taken_says_so_and_exits(shell: dict[str, str], taken_port: int,
                                                        zk_conf: dict[str, Any], tmp_path: Path) -> None:
    options = " ".join(f"-c {key}='{json.dumps(zk_conf[key])}'"
                       for key in ("storm.zookeeper.servers", "storm.zookeeper.port", "storm.zookeeper.root"))
    done = typed(shell, f"storm nimbus -c nimbus.thrift.port={taken_port} -c storm.local.dir={tmp_path / 'local'} "
                        f"-c squall.log.format=json {options}")
    last = done.stderr.strip().splitlines()[-1]
    assert (done.returncode, last) == (
        1, f"storm nimbus: nimbus cannot listen on 0.0.0.0:{taken_port} (nimbus.thrift.bind.address, "
           "nimbus.thrift.port): Address already in use; is another nimbus running?")
    assert "Traceback" not in done.stderr


def test_a_conf_value_of_a_mistyped_key_names_the_known_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["localconfvalue", "topology.worker"]) == 1
    assert said(capsys) == ("", "storm localconfvalue: topology.worker is not set; did you mean topology.workers?")
    assert main(["localconfvalue", "topology.my.rate"]) == 1
    assert said(capsys)[1].startswith("storm localconfvalue: topology.my.rate is not set (not a key Squall knows")
    assert main(["localconfvalue", "topology.my.rate", "-c", "topology.my.rate=5"]) == 0
    assert said(capsys) == ("topology.my.rate: 5\n", "")
    assert main(["localconfvalue", "topology.max.spout.pending"]) == 0
    assert said(capsys) == ("topology.max.spout.pending: null\n", ""), "unset is Storm's null, not Python's None"


def test_the_pipeline_report_of_a_mistyped_out_dir_says_so(shell: dict[str, str]) -> None:
    """``python -m examples.weblogs report OUT_DIR`` (docs/getting-started/install.md) with a typo: not '0 windows'."""
    done = typed(shell, f"{sys.executable} -m examples.weblogs report weblogs-ot")  # the virtualenv's python
    assert (done.returncode, done.stdout, done.stderr.strip()) == (
        1, "", "weblogs-ot: no such directory (the OUT_DIR given to storm jar examples/weblogs.py)")


def test_a_monitor_interval_within_the_heartbeat_warns_that_rates_will_read_zero(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["monitor", "wc", "-i", "1", "-n", "1", "-c", 'nimbus.seeds=["127.0.0.1:1"]']) == 1
    warning, unreachable = said(capsys)[1].splitlines()
    assert warning == ("storm monitor: warning: counts reach nimbus every 3 s (task.heartbeat.frequency.secs), so "
                       "rounds of -i 1 s often see no change: use -i 4 or more")
    assert unreachable.startswith("storm monitor: cannot reach nimbus")
    assert main(["monitor", "wc", "-n", "1", "-c", 'nimbus.seeds=["127.0.0.1:1"]']) == 1
    assert "warning" not in said(capsys)[1], "Storm's default of 4 s is fine"


def test_a_mistyped_topology_attribute_names_the_closest_one(capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    offline = ["-c", 'nimbus.seeds=["127.0.0.1:1"]']  # refused before nimbus is asked
    assert main(["jar", "examples/wordcount.py", "--topology", "topolgy", *offline]) == 1
    assert said(capsys)[1] == ("storm jar: examples/wordcount.py: wordcount has no 'topolgy'; did you mean topology? "
                               "(--topology ATTR names the Topology or the function returning it)")
    assert main(["jar", "examples", *offline]) == 1
    assert said(capsys)[1] == ("storm jar: examples: examples has no 'topology' (--topology MODULE:ATTR names a "
                               "module's Topology or the function returning it)")


def test_an_unreachable_nimbus_asks_whether_it_runs_and_a_refused_handshake_says_why(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["list", "-c", 'nimbus.seeds=["127.0.0.1:1"]']) == 1
    assert said(capsys)[1].endswith("; is it running? (storm dev-cluster starts a cluster here; nimbus.seeds says "
                                    "where to look)")
    certs = make_certs(tmp_path, "alice")
    with make_server(object(), "127.0.0.1", 0).start() as plain:  # a plain Thrift port, dialled with TLS
        options = [f"{key}={json.dumps(value)}" for key, value in tls_conf(certs, "alice").items()]
        code = main(["list", *(word for option in options for word in ("-c", option)),
                     "-c", f'nimbus.seeds=["127.0.0.1:{plain.port}"]'])
    line = said(capsys)[1]
    assert code == 1 and f"TLS handshake with 127.0.0.1:{plain.port} failed" in line, line
    assert "is it running?" not in line, "something answered: the hint would mislead"
