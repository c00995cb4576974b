"""`storm` operator commands: parsing, and end to end against a live nimbus (real Thrift, real ZooKeeper)."""

from __future__ import annotations

import argparse
import json

import pytest

from nimbus.daemon import Nimbus
from squall import STORM_VERSION, __version__
from squall.cli.main import NEXT_STEP, main
from squall.cli.options import parse_executor
from squall.core.thrift import storm
from squall.core.zk import paths
from squall.core.zk.records import Assignment, StormBase
from support import wait_until
from test_nimbus import Cluster, cluster, leader, submit  # noqa: F401  (fixtures)

NOT_RUNNING = NEXT_STEP["NotAliveException"]


def storm_cli(cluster: Cluster, n: Nimbus, *argv: str) -> list[str]:
    """`storm -c ... <argv>` pointed at this cluster's nimbus and ZooKeeper."""
    conf = cluster.conf | {"nimbus.seeds": [f"127.0.0.1:{n.port}"], "squall.log.format": "json"}
    options = []
    for key in ("nimbus.seeds", "storm.zookeeper.servers", "storm.zookeeper.port", "storm.zookeeper.root",
                "squall.log.format"):
        options += ["-c", f"{key}={json.dumps(conf[key])}"]
    return [*options, *argv]


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_executor_argument_parsing() -> None:
    assert parse_executor("comp=3") == ("comp", 3)
    assert parse_executor("a=b=2") == ("a=b", 2)
    for bad in ("comp 3", "comp=", "=3", "comp=0", "comp=x"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_executor(bad)


def test_list_when_empty_and_as_storm_formats_it(cluster: Cluster, leader: Nimbus,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, storm_cli(cluster, leader, "list"))[1] == "No topologies running.\n"
    submit(cluster, leader)
    code, out, _ = run(capsys, storm_cli(cluster, leader, "list"))
    header, dashes, row = out.splitlines()
    assert code == 0
    assert header.startswith(f"{'Topology_name':<20} {'Status':<10} {'Num_tasks':<10} {'Num_workers':<12} "
                             f"{'Uptime_secs':<10}"), "Storm's columns where Storm has them"
    assert header.split()[5:] == ["Health", "Owner"] and dashes == "-" * len(header)
    assert row.split() == ["wc", "ACTIVE", "7", "2", "0", "ok"]
    (entry,) = json.loads(run(capsys, storm_cli(cluster, leader, "list", "--json"))[1])
    assert (entry["name"], entry["status"], entry["num_workers"], entry["health"]) == ("wc", "ACTIVE", 2, "ok")


def test_deactivate_activate_rebalance_kill(cluster: Cluster, leader: Nimbus,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    topology_id = submit(cluster, leader)
    status = lambda: cluster.zk.read(paths.topology(topology_id), StormBase).status.value  # noqa: E731
    assert run(capsys, storm_cli(cluster, leader, "deactivate", "wc"))[1] == "Deactivated topology: wc\n"
    assert status() == "inactive"
    assert run(capsys, storm_cli(cluster, leader, "activate", "wc"))[1] == "Activated topology: wc\n"
    assert status() == "active"
    code, out, _ = run(capsys, storm_cli(cluster, leader, "rebalance", "wc", "-w", "0", "-n", "3", "-e", "count=3"))
    assert (code, out) == (0, "Topology wc is rebalancing\n")
    cluster.clock.advance(0)
    wait_until(lambda: status() == "active", what="rebalance done")
    assert len(cluster.zk.read(paths.assignment(topology_id), Assignment).workers) == 3
    assert run(capsys, storm_cli(cluster, leader, "kill", "wc", "-w", "5"))[1] == "Killed topology: wc\n"
    assert status() == "killed"
    cluster.clock.advance(5)
    wait_until(lambda: cluster.zk.children(paths.TOPOLOGIES) == [], what="removal")


def test_errors_print_one_line_and_exit_non_zero(cluster: Cluster, leader: Nimbus,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, storm_cli(cluster, leader, "kill", "nope"))
    assert code == 1 and out == ""
    assert err.strip().splitlines()[-1] == f"storm kill: NotAliveException: nope: {NOT_RUNNING}"
    code, out, _ = run(capsys, storm_cli(cluster, leader, "get-errors", "nope"))
    assert code == 1 and json.loads(out) == {"Failure": "No topologies running with name nope"}


def test_a_name_taken_says_what_to_do_and_a_killed_one_says_when_it_frees(
        cluster: Cluster, leader: Nimbus, capsys: pytest.CaptureFixture[str]) -> None:
    """Storm's AlreadyAliveException names the way out; during a kill's wait the name is not 'alive' to the user."""
    submit(cluster, leader)
    with pytest.raises(storm.AlreadyAliveException) as taken:
        submit(cluster, leader)
    assert taken.value.msg == "topology 'wc' is already alive"
    assert run(capsys, storm_cli(cluster, leader, "kill", "wc", "-w", "30"))[0] == 0
    with pytest.raises(storm.AlreadyAliveException) as taken:
        submit(cluster, leader)
    assert taken.value.msg == ("topology 'wc' is being killed: submit it again once storm list no longer shows it "
                               "(after the kill's wait, storm kill -w), or now under another --name")


def test_get_errors_shows_the_latest_error_per_component(cluster: Cluster, leader: Nimbus,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    topology_id = submit(cluster, leader)
    leader.state.record_error(topology_id, "first")
    cluster.clock.advance(1)
    leader.state.record_error(topology_id, "second")
    code, out, _ = run(capsys, storm_cli(cluster, leader, "get-errors", "wc"))
    assert json.loads(out) == {"Topology Name": "wc", "Comp-Errors": {"__topology_master": "second"}}


def test_conf_values_and_version(cluster: Cluster, leader: Nimbus, capsys: pytest.CaptureFixture[str]) -> None:
    argv = storm_cli(cluster, leader, "localconfvalue", "supervisor.slots.ports")
    assert run(capsys, argv)[1] == "supervisor.slots.ports: 6700 6701 6702 6703\n"
    argv = storm_cli(cluster, leader, "remoteconfvalue", "topology.message.timeout.secs")
    assert run(capsys, argv)[1] == "topology.message.timeout.secs: 30\n"
    assert run(capsys, ["version"])[1] == f"Storm {STORM_VERSION}\nSquall {__version__}\n"


def test_zktool_lists_shows_and_removes(cluster: Cluster, leader: Nimbus, capsys: pytest.CaptureFixture[str]) -> None:
    topology_id = submit(cluster, leader)
    assert topology_id in run(capsys, storm_cli(cluster, leader, "zktool", "ls", "/topology"))[1].split()
    code, out, err = run(capsys, storm_cli(cluster, leader, "zktool", "ls", "/topolgy"))
    root = cluster.conf["storm.zookeeper.root"]
    assert (code, out, err.strip().splitlines()[-1]) == (1, "", f"storm zktool: no node {root}/topolgy"), "not ''"
    shown = json.loads(run(capsys, storm_cli(cluster, leader, "zktool", "get", f"/topology/{topology_id}"))[1])
    assert shown["name"] == "wc" and shown["v"] == 1
    tree = run(capsys, storm_cli(cluster, leader, "zktool", "tree", "/assignments"))[1].splitlines()
    assert tree == ["assignments", f"  {topology_id}"]
    run(capsys, storm_cli(cluster, leader, "zktool", "rm", "/assignments_bak/wc"))
    assert not cluster.zk.exists(paths.assignment_bak("wc"))
