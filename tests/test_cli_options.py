"""``storm``'s ``--config`` and ``-c`` before and after the verb (as Storm takes them), ``storm version`` as
Storm's tools read it, and warnings for config keys that look like typos: through ``main`` as a user types
it, against a live in-process nimbus where the verb needs one."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from nimbus.daemon import Nimbus
from squall import STORM_VERSION, __version__
from squall.cli.main import build_parser, main
from squall.core.entry import run_daemon
from support import REPO, storm_on_path
from test_cli import run, storm_cli
from test_nimbus import Cluster, cluster, leader  # noqa: F401  (fixtures)

WORDCOUNT = str(REPO / "examples" / "wordcount.py")


def parse(*argv: str) -> Any:
    return build_parser()[0].parse_args(argv)


def topology_conf(cluster: Cluster, leader: Nimbus, name: str) -> dict[str, Any]:
    client = cluster.client(leader)
    return json.loads(client.getTopologyConf(client.getTopologyId(name)))


# -- where the options go -------------------------------------------------------------------------


def test_every_verb_takes_config_and_c_after_it_as_well_as_before() -> None:
    verbs = next(a for a in build_parser()[0]._actions if isinstance(a, argparse._SubParsersAction))
    for name, verb in verbs.choices.items():
        usage = verb.format_usage()
        assert "--config FILE" in usage and "-c KEY=VALUE" in usage, name


def test_every_c_applies_in_command_line_order_and_the_last_config_wins() -> None:
    args = parse("-c", "a=1", "--config", "first.yaml", "jar", "wc.py", "10", "--name", "wc2",
                 "-c", "topology.workers=3", "-c", "a=2", "--config", "second.yaml")
    assert (args.source, args.args, args.name) == ("wc.py", ["10"], "wc2")
    assert args.overrides == ["a=1", "topology.workers=3", "a=2"]
    assert args.config == "second.yaml"
    before_only = parse("--config", "first.yaml", "-c", "a=1", "list")
    assert (before_only.config, before_only.overrides) == ("first.yaml", ["a=1"])
    after_only = parse("list", "--config", "second.yaml")
    assert (after_only.config, after_only.overrides) == ("second.yaml", [])


def test_the_readme_s_jar_line_submits_with_the_option_after_the_verb(
        cluster: Cluster, leader: Nimbus, capsys: pytest.CaptureFixture[str]) -> None:
    """``storm jar wc.py 10 --name wc2 -c topology.workers=3``; a -c before the verb for the same key loses."""
    argv = storm_cli(cluster, leader, "-c", "topology.workers=2", "jar", WORDCOUNT, "10", "--name", "wc2",
                     "-c", "topology.workers=3", "-c", "topology.max.spout.pending=7")
    code, out, err = run(capsys, argv)
    assert code == 0 and out.startswith("Finished submitting topology: wc2 (wc2-"), err
    conf = topology_conf(cluster, leader, "wc2")
    assert (conf["topology.workers"], conf["topology.max.spout.pending"]) == (3, 7)


def test_config_after_the_verb_is_the_one_read(cluster: Cluster, leader: Nimbus, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The cluster's address only in a file given after the verb: the command reaches that cluster."""
    storm_yaml = tmp_path / "storm.yaml"
    storm_yaml.write_text(json.dumps({key: value for key, value in cluster.conf.items()
                                      if key.startswith("storm.zookeeper.")}
                                     | {"nimbus.seeds": [f"127.0.0.1:{leader.port}"]}))
    elsewhere = tmp_path / "elsewhere.yaml"
    elsewhere.write_text("nimbus.seeds: ['127.0.0.1:1']\n")
    code, out, err = run(capsys, ["--config", str(elsewhere), "list", "--config", str(storm_yaml)])
    assert (code, out) == (0, "No topologies running.\n"), err


# -- storm version --------------------------------------------------------------------------------


def test_version_says_storm_s_line_first_then_squall_s(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, ["version"]) == (0, f"Storm {STORM_VERSION}\nSquall {__version__}\n", "")


def test_streamparse_reads_our_storm_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """streamparse's own parser (``storm version`` on PATH, ``Storm ([0-9.]+)``) gets the Storm release we speak."""
    from streamparse.util import local_storm_version  # runs `storm version` through a shell

    for key, value in storm_on_path(tmp_path / "bin").items():
        monkeypatch.setenv(key, value)
    assert str(local_storm_version()) == STORM_VERSION


# -- keys that look like typos --------------------------------------------------------------------


TYPO = "storm: warning: unknown key topology.worker (-c topology.worker=3); did you mean topology.workers?\n"


def test_a_typo_d_c_key_warns_in_one_line_and_the_command_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, ["-c", "topology.worker=3", "localconfvalue", "topology.workers"]) == (
        0, "topology.workers: 1\n", TYPO)
    assert run(capsys, ["localconfvalue", "topology.worker", "-c", "topology.worker=3"]) == (
        0, "topology.worker: 3\n", TYPO)
    assert run(capsys, ["-c", "topology.my.threshold=5", "-c", "topology.workers=2", "version"])[2] == "", \
        "a topology.* key of the user's own, and a known key, pass silently"


def test_a_typo_in_storm_yaml_warns_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    storm_yaml = tmp_path / "storm.yaml"
    storm_yaml.write_text("nimbus.seed: [nimbus1]\n")
    code, _, err = run(capsys, ["version", "--config", str(storm_yaml)])
    assert (code, err) == (0, f"storm: warning: unknown key nimbus.seed (storm.yaml {storm_yaml}); "
                              "did you mean nimbus.seeds?\n")


def test_typos_in_a_topology_s_conf_warn_at_submit(cluster: Cluster, leader: Nimbus, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "typo_topology.py"
    source.write_text(
        "from examples.wordcount import SentenceSpout, SplitSentence\n"
        "from squall.api.dsl import Topology\n"
        "topology = Topology('typos', conf={'topology.max.spout.pendng': 10, 'topology.my.rate': 3})\n"
        "sentences = topology.spout('sentences', SentenceSpout, conf={'topology.tick.tuple.freq.sec': 1})\n"
        "topology.bolt('split', SplitSentence).shuffle(sentences)\n")
    code, out, err = run(capsys, storm_cli(cluster, leader, "jar", str(source), "--include", str(REPO / "examples")))
    assert code == 0 and out.startswith("Finished submitting topology: typos"), err
    assert [line for line in err.splitlines() if not line.startswith("{")] == [  # JSON lines: the client's log
        "storm: warning: unknown key topology.max.spout.pendng (topology typos conf); "
        "did you mean topology.max.spout.pending?",
        "storm: warning: unknown key topology.tick.tuple.freq.sec (component sentences conf); "
        "did you mean topology.tick.tuple.freq.secs?",
    ]
    assert topology_conf(cluster, leader, "typos")["topology.max.spout.pendng"] == 10, "kept, as given"


def test_a_daemon_logs_a_typo_as_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    """``storm nimbus`` / ``storm supervisor`` log it (their stderr is their log) once logging is set up."""

    class NotStarting(Exception):
        pass

    def start(_conf: dict[str, Any]) -> Any:
        raise NotStarting  # the warning is logged before the daemon starts; no need to run one

    with pytest.raises(NotStarting):
        run_daemon("nimbus", start, ["-c", "topology.worker=3", "-c", "squall.log.format=json"])
    warnings = [json.loads(line) for line in capsys.readouterr().err.splitlines()
                if '"config key looks mistyped"' in line]
    assert [(w["level"], w["detail"]) for w in warnings] == [
        ("warning", "unknown key topology.worker (-c topology.worker=3); did you mean topology.workers?")]
