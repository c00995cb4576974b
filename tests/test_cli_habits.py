"""Storm's and JStorm's command-line habits on Squall's ``storm``: each either honoured, and shown here to do
what JStorm does, or refused before anything runs in one line that names the Squall form (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nimbus.daemon import Nimbus
from squall.cli.main import NEXT_STEP, main
from squall.core.zk import paths
from squall.core.zk.records import Assignment, StormBase
from support import wait_until
from test_cli import run, storm_cli
from test_nimbus import Cluster, cluster, leader, submit  # noqa: F401  (fixtures)

NOT_RUNNING = NEXT_STEP["NotAliveException"]

REFUSED = [  # (command line, what the one line must name)
    (["jar", "wordcount.jar", "com.example.WordCountTopology"], "storm jar FILE.py|PACKAGE [ARGS] [--topology ATTR]"),
    (["jar", "examples/wordcount.py", "storm.starter.WordCountTopology"], "storm jar FILE.py|PACKAGE"),
    (["submit", "wordcount.jar"], "storm submit FILE.py|PACKAGE"),
    (["local", "wordcount.jar", "com.example.Main"], "storm local FILE.py [--local-ttl SECS]"),
    (["kill", "wc", "10"], "storm kill wc -w 10"),
    (["zktool", "rm", "wc"], "storm zktool rm /assignments_bak/wc"),
    (["zktool", "rm", "/"], "storm zktool rm PATH"),
    (["zktool", "clean", "wc-1-1700000000"], "storm kill NAME"),
    (["rebalance", "wc", "10", "new.prop"], "give the conf as YAML (CONF.yaml) or as -t JSON"),
    (["rebalance", "wc", "soon"], "storm rebalance NAME [-w SECS] [-n WORKERS] [-e COMPONENT=N] [-t JSON]"),
    (["rebalance", "wc", "1", "a.yaml", "2"], "at most SECS and CONF.yaml"),
    (["rebalance", "wc", "missing.yaml"], "cannot read the conf file missing.yaml"),
    (["rebalance", "wc", "-w", "10", "-r", '{"split": {"cpu.pcore.percent": 50}}'], "Storm 2's -r JSON of resource"),
    (["jar", "--include-jars", "a.jar,b.jar", "wc.py"], "storm jar FILE --include PATH"),
    (["--exclude-jars", "a.jar", "list"], "storm jar FILE --include PATH"),
    (["jar", "wc.py", "--jars", "a.jar"], "storm jar FILE --include PATH"),
    (["jar", "wc.py", "--artifacts", "org.example:lib:1.0"], "pip install"),
    (["metrics_monitor", "wc", "true"], "storm monitor NAME"),
    (["blobstore", "-m"], "storm update_topology --jar"),
    (["classpath"], "storm jar FILE --include PATH"),
    (["drpc"], "no DRPC server"),
    (["drpc-client", "reach", "http://example.com"], "no DRPC server"),
    (["shell", "resources/", "python", "splitsentence.py"], "storm jar FILE.py"),
]


@pytest.mark.parametrize("argv, squall_form", REFUSED, ids=[" ".join(argv) for argv, _ in REFUSED])
def test_a_habit_squall_cannot_honour_is_refused_in_one_line_naming_the_squall_form(
        argv: list[str], squall_form: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(argv)
    except SystemExit as refused_while_parsing:
        code = refused_while_parsing.code
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert line.startswith("storm") and squall_form in line, line


# -- refused means nothing happened; honoured means it did what JStorm does ------------------------------


def said(err: str) -> list[str]:
    """What the command told its user on stderr (its JSON log lines aside)."""
    return [line for line in err.splitlines() if not line.startswith("{")]


def status(cluster: Cluster, topology_id: str) -> str | None:
    base = cluster.zk.read(paths.topology(topology_id), StormBase)
    return base.status.value if base else None


def test_jstorm_s_kill_with_a_wait_kills_nothing_and_a_lone_number_is_a_name(
        cluster: Cluster, leader: Nimbus, capsys: pytest.CaptureFixture[str]) -> None:
    topology_id = submit(cluster, leader)
    assert run(capsys, storm_cli(cluster, leader, "kill", "wc", "10"))[0] == 2
    assert status(cluster, topology_id) == "active"
    code, _, err = run(capsys, storm_cli(cluster, leader, "kill", "10"))
    assert (code, said(err)) == (1, [f"storm kill: NotAliveException: 10: {NOT_RUNNING}"])


def test_jstorm_s_rebalance_takes_the_wait_and_a_conf_file(cluster: Cluster, leader: Nimbus, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    topology_id = submit(cluster, leader)
    new_conf = tmp_path / "new.yaml"
    new_conf.write_text("topology.workers: 3\ntopology.bolt.parallelism: {count: 3}\n")
    code, out, err = run(capsys, storm_cli(cluster, leader, "rebalance", "-r", "wc", "7", str(new_conf)))
    assert (code, out) == (0, "Topology wc is rebalancing\n"), err
    assert status(cluster, topology_id) == "rebalancing"
    cluster.clock.advance(6)
    assert status(cluster, topology_id) == "rebalancing", "the wait is JStorm's 7 s"
    cluster.clock.advance(1)
    wait_until(lambda: status(cluster, topology_id) == "active", what="rebalance done")
    assignment = cluster.zk.read(paths.assignment(topology_id), Assignment)
    counts = json.loads(cluster.client(leader).getTopologyConf(topology_id))["topology.bolt.parallelism"]
    assert (len(assignment.workers), counts) == (3, {"count": 3})


def test_jstorm_s_update_topology_takes_single_dash_conf(cluster: Cluster, leader: Nimbus, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    topology_id = submit(cluster, leader)
    new_conf = tmp_path / "new.yaml"
    new_conf.write_text("topology.max.spout.pending: 50\n")
    code, out, err = run(capsys, storm_cli(cluster, leader, "update_topology", "wc", "-conf", str(new_conf)))
    assert (code, out) == (0, "Updated topology: wc\n"), err
    assert json.loads(cluster.client(leader).getTopologyConf(topology_id))["topology.max.spout.pending"] == 50


def test_jstorm_s_zktool_read_and_list_take_full_paths(cluster: Cluster, leader: Nimbus,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    topology_id = submit(cluster, leader)
    root = cluster.conf["storm.zookeeper.root"]
    assert run(capsys, storm_cli(cluster, leader, "zktool", "list", f"{root}/topology"))[1] == f"{topology_id}\n"
    shown = json.loads(run(capsys, storm_cli(cluster, leader, "zktool", "read", f"{root}/topology/{topology_id}"))[1])
    assert shown["name"] == "wc"
    code, out, err = run(capsys, storm_cli(cluster, leader, "zktool", "get", "/topology/nope"))
    assert (code, out, said(err)) == (1, "", [f"storm zktool: no node {root}/topology/nope"])


def test_storm_help_is_dash_dash_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["help"]) == 0
    listed = capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--help"])
    assert listed == capsys.readouterr().out
    assert main(["help", "kill"]) == 0
    assert "--wait-time-secs" in capsys.readouterr().out
