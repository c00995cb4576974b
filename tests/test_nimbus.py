"""Nimbus over a real Thrift socket and a real ZooKeeper, on a simulated clock.

Supervisors are stood in for by their ZooKeeper registrations (the contract nimbus reads); the
supervisor daemon has tests of its own.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import json
import re
import threading
import time
import zipfile
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from kazoo.exceptions import ConnectionLoss
from streamparse.thrift import storm_thrift as storm_idl
from streamparse.util import nimbus_storm_version, parse_version
from structlog.testing import capture_logs
from thriftpy2.rpc import make_client
from thriftpy2.thrift import TApplicationException
from thriftpy2.transport import TTransportException
from thriftpy2.protocol import TBinaryProtocolFactory
from thriftpy2.transport import TFramedTransportFactory

from nimbus.daemon import Nimbus
from nimbus.leader import TimerChoice
from nimbus.service import NimbusService
from nimbus.takeover import Takeover
from squall import STORM_VERSION
from squall.core.clock import SimulatedClock
from squall.core.stats import WINDOWS, to_executor_stats
from squall.core.thrift import storm
from squall.core.thrift.client import connect
from squall.core.zk import paths
from squall.core.zk.client import ZkClient
from squall.core.zk.errors import record_task_error
from squall.core.zk.records import (
    Assignment, Blacklist, ComponentType, LoggerLevel, LoggerLevels, StormBase, SupervisorInfo, TaskBeat, TaskError,
    TaskInfo, TaskStats, TopologyTasks,
)
from tcpproxy import TcpProxy
from support import expire_session, listening, make_certs, other_address, tls_conf, wait_until
from worker.layout import build_layout
from worker.process import beat_requests

MESSAGE_TIMEOUT = 30


def shell(script: str) -> Any:
    return storm.ComponentObject(shell=storm.ShellComponent(execution_command="python", script=script))


def word_count(split: int = 2, count: int = 2) -> Any:
    """sentences -> split (shuffle) -> count (fields on word)."""
    def common(inputs: dict[tuple[str, str], Any], fields: list[str], parallelism: int) -> Any:
        return storm.ComponentCommon(
            inputs={storm.GlobalStreamId(componentId=c, streamId=s): g for (c, s), g in inputs.items()},
            streams={"default": storm.StreamInfo(output_fields=fields, direct=False)},
            parallelism_hint=parallelism)

    return storm.StormTopology(
        spouts={"sentences": storm.SpoutSpec(spout_object=shell("sentences.py"),
                                             common=common({}, ["sentence"], 1))},
        bolts={"split": storm.Bolt(bolt_object=shell("split.py"),
                                   common=common({("sentences", "default"): storm.Grouping(shuffle=storm.NullStruct())},
                                                 ["word"], split)),
               "count": storm.Bolt(bolt_object=shell("count.py"),
                                   common=common({("split", "default"): storm.Grouping(fields=["word"])},
                                                 ["word", "count"], count))},
        state_spouts={})


def zip_bytes() -> bytes:
    """A small topology package."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as package:
        package.writestr("wc.py", "WORDS = 1\n")
    return buffer.getvalue()


class Cluster:
    """Nimbuses sharing one ZooKeeper root, plus fake supervisor registrations."""

    def __init__(self, zk_conf: dict[str, Any], tmp: Path, stack: ExitStack) -> None:
        self.conf = zk_conf | {"nimbus.thrift.port": 0, "storm.local.hostname": "127.0.0.1",
                               "nimbus.thrift.bind.address": "127.0.0.1",
                               "topology.message.timeout.secs": MESSAGE_TIMEOUT,
                               "nimbus.task.timeout.secs": 30, "nimbus.task.launch.secs": 60,
                               "nimbus.monitor.freq.secs": 10, "nimbus.assign.timeout.secs": 60}
        self.tmp = tmp
        self.stack = stack
        self.clock = SimulatedClock()
        self.zk = ZkClient(self.conf).start()
        stack.callback(self.zk.stop)
        self.nimbuses: list[Nimbus] = []

    def nimbus(self, name: str = "n1") -> Nimbus:
        n = Nimbus(self.conf | {"storm.local.dir": str(self.tmp / name)}, self.clock,
                   host="127.0.0.1").start(NimbusService)
        self.stack.callback(n.stop)
        self.nimbuses.append(n)
        return n

    def nimbus_behind(self, proxy: TcpProxy, name: str = "n1") -> Nimbus:
        """A nimbus reaching ZooKeeper through ``proxy``, with a session that outlasts a cut of a few seconds."""
        host, port = proxy.address.rsplit(":", 1)
        n = Nimbus(self.conf | {"storm.local.dir": str(self.tmp / name), "storm.zookeeper.servers": [host],
                                "storm.zookeeper.port": int(port), "storm.zookeeper.session.timeout": 30_000,
                                "storm.zookeeper.retry.interval": 100}, self.clock,
                   host="127.0.0.1").start(NimbusService)
        self.stack.callback(n.stop)
        self.nimbuses.append(n)
        return n

    def supervisor(self, i: int, ports: tuple[int, ...] = (6700, 6701, 6702, 6703)) -> None:
        self.zk.write(paths.supervisor(f"sup-{i}"), SupervisorInfo(f"sup-{i}", f"host-{i}", list(ports)))

    def client(self, n: Nimbus) -> Any:
        return self.stack.enter_context(connect("127.0.0.1", n.port, 30_000))


@pytest.fixture
def cluster(zk_conf: dict[str, Any], tmp_path: Path) -> Iterator[Cluster]:
    with ExitStack() as stack:
        yield Cluster(zk_conf, tmp_path, stack)


@pytest.fixture
def leader(cluster: Cluster) -> Nimbus:
    n = cluster.nimbus()
    wait_until(lambda: n.is_leader, what="nimbus to lead")
    for i in (1, 2):
        cluster.supervisor(i)
    return n


def submit(cluster: Cluster, n: Nimbus, name: str = "wc", conf: dict[str, Any] | None = None, **kw: Any) -> str:
    client = cluster.client(n)
    client.submitTopology(name, "", json.dumps({"topology.workers": 2, **(conf or {})}), kw.get("topology") or word_count())
    return client.getTopologyId(name)


def test_word_count_is_accepted_assigned_and_listed(cluster: Cluster, leader: Nimbus) -> None:
    topology_id = submit(cluster, leader)
    assert topology_id.startswith("wc-")
    base = cluster.zk.read(paths.topology(topology_id), StormBase)
    assert base.status.value == "active" and base.num_workers == 2
    tasks = cluster.zk.read(paths.tasks(topology_id), TopologyTasks)
    components = sorted({t.component for t in tasks.tasks.values()})
    assert components == ["__acker", "__topology_master", "count", "sentences", "split"]
    assignment = cluster.zk.read(paths.assignment(topology_id), Assignment)
    assert sorted(t for w in assignment.workers for t in w.tasks) == sorted(tasks.tasks)

    # a Storm 1.x client (streamparse's IDL and transport) sees it
    storm_client = make_client(storm_idl.Nimbus, "127.0.0.1", leader.port, proto_factory=TBinaryProtocolFactory(),
                               trans_factory=TFramedTransportFactory(), timeout=30_000)
    try:
        (summary,) = storm_client.getClusterInfo().topologies
        assert (summary.name, summary.status, summary.num_workers) == ("wc", "ACTIVE", 2)
        # streamparse reads nimbus's Storm version to pick features (isTopologyNameAllowed from 1.1)
        assert nimbus_storm_version(storm_client) == parse_version(STORM_VERSION) >= parse_version("1.1.0")
    finally:
        storm_client.close()
    client = cluster.client(leader)
    assert "__acker" in client.getTopology(topology_id).bolts
    assert "__acker" not in client.getUserTopology(topology_id).bolts
    assert json.loads(client.getTopologyConf(topology_id))["topology.workers"] == 2
    info = client.getTopologyInfo(topology_id)
    assert {e.component_id for e in info.executors} == set(components)


@pytest.mark.parametrize("call", ["getTopologyInfo", "getTopologyConf", "getTopology", "getUserTopology"])
def test_unknown_ids_raise_not_alive_with_the_id(cluster: Cluster, leader: Nimbus, call: str) -> None:
    with pytest.raises(storm.NotAliveException) as caught:
        getattr(cluster.client(leader), call)("nope-1-1700000000")
    assert caught.value.msg == "nope-1-1700000000"


def test_unknown_names_raise_not_alive(cluster: Cluster, leader: Nimbus) -> None:
    client = cluster.client(leader)
    for call in (client.killTopology, client.activate, client.deactivate, client.getTopologyId):
        with pytest.raises(storm.NotAliveException):
            call("nope")


def test_bad_topology_is_refused_with_a_specific_message(cluster: Cluster, leader: Nimbus) -> None:
    bad = word_count()
    bad.bolts["count"].common.inputs = {storm.GlobalStreamId(componentId="split", streamId="default"):
                                        storm.Grouping(fields=["lang"])}
    with pytest.raises(storm.InvalidTopologyException, match='unknown fields "lang"'):
        submit(cluster, leader, topology=bad)
    with pytest.raises(storm.InvalidTopologyException, match="topology.workers"):
        submit(cluster, leader, conf={"topology.workers": 0})
    assert cluster.zk.children(paths.TOPOLOGIES) == []


def test_failed_assignment_leaves_nothing_behind(cluster: Cluster, leader: Nimbus) -> None:
    for i in (1, 2):
        cluster.zk.delete(paths.supervisor(f"sup-{i}"))
    with pytest.raises(storm.InvalidTopologyException, match="no free worker slot for topology wc-.*: needs 2, 0 free"):
        submit(cluster, leader)
    assert cluster.client(leader).getClusterInfo().topologies == []
    for parent in paths.TOPOLOGY_SUBTREES + (paths.TOPOLOGIES,):
        assert cluster.zk.children(parent) == [], parent
    assert list(leader.state.code.ids()) == []


def health(cluster: Cluster, n: Nimbus, name: str = "wc") -> str:
    (summary,) = [t for t in cluster.client(n).getClusterInfo().topologies if t.name == name]
    return summary.sched_status or "ok"


def test_a_submit_beyond_capacity_runs_on_the_free_slots_says_so_and_grows_as_slots_appear(
        cluster: Cluster, leader: Nimbus) -> None:
    topology_id = submit(cluster, leader, conf={"topology.workers": 9}, topology=word_count(split=8, count=8))
    assert len(cluster.zk.read(paths.assignment(topology_id), Assignment).workers) == 8
    assert health(cluster, leader) == "running 8 of 9 requested workers: no free slots"
    cluster.clock.advance(10)  # a monitor cycle with no slot free: nothing moves
    assert len(cluster.zk.read(paths.assignment(topology_id), Assignment).workers) == 8
    cluster.supervisor(3)
    cluster.clock.advance(10)
    wait_until(lambda: len(cluster.zk.read(paths.assignment(topology_id), Assignment).workers) == 9,
               what="the topology to grow onto the new supervisor")
    assert health(cluster, leader) == "ok"
    assert cluster.client(leader).getTopologyInfo(topology_id).errors == {}


def test_a_rebalance_beyond_capacity_runs_on_the_free_slots_with_no_late_error(
        cluster: Cluster, leader: Nimbus) -> None:
    topology_id = submit(cluster, leader, topology=word_count(split=8, count=8))
    client = cluster.client(leader)
    client.rebalance("wc", storm.RebalanceOptions(wait_secs=5, num_workers=99))
    cluster.clock.advance(5)
    wait_until(lambda: client.getTopologyInfo(topology_id).status == "ACTIVE", what="rebalance done")
    assignment = cluster.zk.read(paths.assignment(topology_id), Assignment)
    tasks = cluster.zk.read(paths.tasks(topology_id), TopologyTasks)
    assert len(assignment.workers) == 8
    assert sorted(t for w in assignment.workers for t in w.tasks) == sorted(tasks.tasks)
    # 18 tasks besides the topology master, which then gets a worker of its own: 19 workers wanted
    assert health(cluster, leader) == "running 8 of 19 requested workers: no free slots"
    assert client.getTopologyInfo(topology_id).errors == {}
    cluster.supervisor(3)
    cluster.clock.advance(10)
    wait_until(lambda: len(cluster.zk.read(paths.assignment(topology_id), Assignment).workers) == 12,
               what="the topology to grow onto the new supervisor")
    assert health(cluster, leader) == "running 12 of 19 requested workers: no free slots"
    assert client.getTopologyInfo(topology_id).errors == {}


def test_a_blacklisted_host_gets_no_new_workers_until_removed(cluster: Cluster, leader: Nimbus) -> None:
    client = cluster.client(leader)
    client.setHostInBlackList("host-1")
    client.setHostInBlackList("host-1")  # twice is once
    assert client.getBlacklist() == ["host-1"]
    assert cluster.zk.read(paths.BLACKLIST, Blacklist) == Blacklist(["host-1"]), "nimbus keeps it in /blacklist"
    first = submit(cluster, leader, "first")
    assert {w.host for w in cluster.zk.read(paths.assignment(first), Assignment).workers} == {"host-2"}

    client.removeHostOutBlackList("host-1")
    client.removeHostOutBlackList("never-listed")  # nothing to remove is no error
    assert client.getBlacklist() == []
    second = submit(cluster, leader, "second")
    assert "host-1" in {w.host for w in cluster.zk.read(paths.assignment(second), Assignment).workers}
    with pytest.raises(TApplicationException, match='not a host name: "bad host"'):
        client.setHostInBlackList("bad host")


def test_storm_clients_set_log_levels_merged_into_the_topologys_logconfigs_node(cluster: Cluster,
                                                                              leader: Nimbus) -> None:
    topology_id = submit(cluster, leader)
    storm_client = make_client(storm_idl.Nimbus, "127.0.0.1", leader.port, proto_factory=TBinaryProtocolFactory(),
                               trans_factory=TFramedTransportFactory(), timeout=30_000)  # Storm 1.x's IDL
    try:
        update = lambda level, secs=0: storm_idl.LogLevel(  # noqa: E731
            action=storm_idl.LogLevelAction.UPDATE, target_log_level=level, reset_log_level_timeout_secs=secs)
        storm_client.setLogConfig(topology_id, storm_idl.LogConfig(named_logger_level={
            "ROOT": update("DEBUG", 30), "wordcount": update("warn")}))
        now_ms = int(cluster.clock.time() * 1000)
        assert cluster.zk.read(paths.log_config(topology_id), LoggerLevels) == LoggerLevels({
            "ROOT": LoggerLevel("DEBUG", 30, now_ms + 30_000), "wordcount": LoggerLevel("WARN")})
        cluster.clock.advance(31)
        storm_client.setLogConfig(topology_id, storm_idl.LogConfig(named_logger_level={
            "wordcount": storm_idl.LogLevel(action=storm_idl.LogLevelAction.REMOVE), "kazoo": update("ERROR", 5)}))
        shown = storm_client.getLogConfig(topology_id).named_logger_level
        assert list(shown) == ["kazoo"], "removed, and the expired ROOT setting dropped"
        assert (shown["kazoo"].target_log_level, shown["kazoo"].reset_log_level_timeout_epoch) == (
            "ERROR", int(cluster.clock.time() * 1000) + 5_000)
        for bad_id, level, problem in (("nope-1-1", "INFO", "nope-1-1 is not a running topology id"),
                                       (topology_id, "LOUD", "logger a: unknown log level 'LOUD'")):
            with pytest.raises(TApplicationException, match=problem):
                storm_client.setLogConfig(bad_id, storm_idl.LogConfig(named_logger_level={"a": update(level)}))
    finally:
        storm_client.close()
    cluster.client(leader).killTopologyWithOpts("wc", storm.KillOptions(wait_secs=0))
    cluster.clock.advance(0)
    wait_until(lambda: not cluster.zk.exists(paths.log_config(topology_id)), what="log config removed with it")


def test_kill_marks_killed_at_once_and_removes_after_the_wait(cluster: Cluster, leader: Nimbus) -> None:
    topology_id = submit(cluster, leader)
    client = cluster.client(leader)
    client.killTopologyWithOpts("wc", storm.KillOptions(wait_secs=10))
    assert cluster.zk.read(paths.topology(topology_id), StormBase).status.value == "killed"
    with pytest.raises(storm.AlreadyAliveException):
        submit(cluster, leader)
    cluster.clock.advance(9)
    assert cluster.zk.exists(paths.assignment(topology_id))
    cluster.clock.advance(1)
    wait_until(lambda: not cluster.zk.exists(paths.topology(topology_id)), what="removal")
    for parent in paths.TOPOLOGY_SUBTREES:
        assert topology_id not in cluster.zk.children(parent)
    assert topology_id not in leader.state.code.ids()
    submit(cluster, leader)  # the name is free again


def test_kill_without_wait_uses_the_message_timeout(cluster: Cluster, leader: Nimbus) -> None:
    topology_id = submit(cluster, leader)
    cluster.client(leader).killTopology("wc")
    cluster.clock.advance(MESSAGE_TIMEOUT - 1)
    assert cluster.zk.exists(paths.topology(topology_id))
    cluster.clock.advance(1)
    wait_until(lambda: not cluster.zk.exists(paths.topology(topology_id)), what="removal")


def test_pending_kill_survives_a_nimbus_restart(cluster: Cluster, leader: Nimbus) -> None:
    topology_id = submit(cluster, leader)
    cluster.client(leader).killTopologyWithOpts("wc", storm.KillOptions(wait_secs=20))
    leader.stop()
    successor = cluster.nimbus("n1")  # the same nimbus, restarted on its own local dir
    wait_until(lambda: successor.is_leader, what="the restarted nimbus to lead")
    cluster.clock.advance(19)
    assert cluster.zk.exists(paths.topology(topology_id))
    cluster.clock.advance(1)
    wait_until(lambda: not cluster.zk.exists(paths.topology(topology_id)), what="removal by the new leader")


def leading_behind_a_proxy(cluster: Cluster, zk_address: str) -> tuple[TcpProxy, Nimbus, str]:
    """A leading nimbus whose ZooKeeper connection the test can cut, two supervisors, and a word count submitted."""
    host, port = zk_address.rsplit(":", 1)
    proxy = cluster.stack.enter_context(TcpProxy(host, int(port)))
    n = cluster.nimbus_behind(proxy)
    wait_until(lambda: n.is_leader, what="nimbus to lead")
    for i in (1, 2):
        cluster.supervisor(i)
    return proxy, n, submit(cluster, n)


def test_a_kill_due_during_a_zookeeper_blip_ends_once_the_session_resumes(cluster: Cluster, zk_address: str) -> None:
    """The kill's timer came due while the leader's connection was SUSPENDED: it was dropped, and as the session
    survived nothing re-armed it (only a takeover does): the topology stayed killed, its workers ran on, its name
    was refused, and another kill could not end it. Now it waits for the connection and runs."""
    proxy, n, topology_id = leading_behind_a_proxy(cluster, zk_address)
    session = n.state.zk.session_id
    cluster.client(n).killTopologyWithOpts("wc", storm.KillOptions(wait_secs=10))
    choices: list[TimerChoice] = []
    choose = n.transitions._delayed_action_choice
    n.transitions._delayed_action_choice = (  # type: ignore[method-assign]
        lambda: choices.append(choose()) or choices[-1])

    proxy.cut()
    wait_until(lambda: not n.state.zk.connected.is_set(), 30, "nimbus's connection lost")
    cluster.clock.advance(10)
    wait_until(lambda: choices, 30, "the due kill to look at the leadership")
    proxy.heal()

    wait_until(lambda: n.state.zk.connected.is_set(), 30, "nimbus reconnected")
    assert n.state.zk.session_id == session, "the same session resumed"
    wait_until(lambda: not cluster.zk.exists(paths.topology(topology_id)), 30, "the kill to end")
    assert choices[-1] is TimerChoice.RUN
    submit(cluster, n)  # the name is free again


def test_a_leader_s_code_sync_during_a_zookeeper_blip_drops_no_version_it_has_not_published_yet(
        cluster: Cluster, zk_address: str) -> None:
    """While SUSPENDED the leader took itself for a follower, and its code sync (every nimbus.code.sync.freq.secs)
    pruned what the manifest lacks once ZooKeeper answered: a new version stored and not yet published (a gray
    upgrade's, a submission's) was deleted under the leader."""
    proxy, n, topology_id = leading_behind_a_proxy(cluster, zk_address)
    code = n.state.code
    code.put(topology_id, package=None, conf=code.conf(topology_id), topology=code.topology(topology_id),
             system=code.system_topology(topology_id), version=2, make_current=False)  # stored, not yet published
    replication, looked, synced = n.state.replication, [], {"started": 0, "ended": 0}
    is_elected, sync = replication._is_elected, replication.sync

    def counted_sync(*, leading: bool) -> list[str]:
        synced["started"] += 1
        try:
            return sync(leading=leading)
        finally:
            synced["ended"] += 1

    replication._is_elected = lambda: looked.append(n.state.zk.connected.is_set()) or is_elected()
    replication.sync = counted_sync  # type: ignore[method-assign]

    proxy.cut()
    wait_until(lambda: not n.state.zk.connected.is_set(), 30, "nimbus's connection lost")
    cluster.clock.advance(cluster.conf["nimbus.code.sync.freq.secs"])
    wait_until(lambda: False in looked, 30, "the code sync's turn during the blip")
    proxy.heal()
    wait_until(lambda: n.state.zk.connected.is_set(), 30, "nimbus reconnected")
    wait_until(lambda: synced["ended"] == synced["started"], 30, "any sync begun to end")
    assert code.versions(topology_id) == [1, 2]


def test_activate_and_deactivate(cluster: Cluster, leader: Nimbus) -> None:
    topology_id = submit(cluster, leader)
    client = cluster.client(leader)
    client.deactivate("wc")
    assert cluster.zk.read(paths.topology(topology_id), StormBase).status.value == "inactive"
    client.activate("wc")
    assert cluster.zk.read(paths.topology(topology_id), StormBase).status.value == "active"
    client.killTopology("wc")
    with pytest.raises(TApplicationException, match="cannot activate topology 'wc' while it is killed"):
        client.activate("wc")


def test_rebalance_spreads_over_more_workers_and_rescales(cluster: Cluster, leader: Nimbus) -> None:
    topology_id = submit(cluster, leader)
    client = cluster.client(leader)
    client.deactivate("wc")
    client.rebalance("wc", storm.RebalanceOptions(wait_secs=5, num_workers=4, num_executors={"count": 4}))
    assert cluster.zk.read(paths.topology(topology_id), StormBase).status.value == "rebalancing"
    cluster.clock.advance(5)
    wait_until(lambda: cluster.zk.read(paths.topology(topology_id), StormBase).status.value == "inactive",
               what="rebalance done, previous status back")
    assignment = cluster.zk.read(paths.assignment(topology_id), Assignment)
    tasks = cluster.zk.read(paths.tasks(topology_id), TopologyTasks)
    assert len(assignment.workers) == 4
    assert sum(1 for t in tasks.tasks.values() if t.component == "count") == 4
    assert sorted(t for w in assignment.workers for t in w.tasks) == sorted(tasks.tasks)


def test_task_stats_in_heartbeats_show_in_topology_info(cluster: Cluster, leader: Nimbus) -> None:
    topology_id = submit(cluster, leader)
    client = cluster.client(leader)
    tasks = cluster.zk.read(paths.tasks(topology_id), TopologyTasks)
    spout = next(t for t, info in tasks.tasks.items() if info.component == "sentences")
    split = next(t for t, info in tasks.tasks.items() if info.component == "split")
    spout_stats = to_executor_stats(TaskStats(emitted={"default": 7}, acked={"default": 6}), spout=True)
    bad = storm.ExecutorStats(emitted={":all-time": {"default": -5}}, transferred={}, rate=1.0,
                              specific=storm.ExecutorSpecificStats(spout=storm.SpoutStats(
                                  acked={}, failed={}, complete_ms_avg={})))
    client.updateTaskHeartbeat(storm.TopologyTaskHbInfo(topologyId=topology_id, topologyMasterId=0, taskHbs={
        spout: storm.TaskHeartbeat(time_secs=1, uptime_secs=42, stats=spout_stats),
        split: storm.TaskHeartbeat(time_secs=1, uptime_secs=41, stats=bad)}))
    executors = {e.executor_info.task_start: e for e in client.getTopologyInfo(topology_id).executors}
    assert executors[spout].stats.emitted == {w: {"default": 7} for w in WINDOWS}, "younger than every window"
    assert executors[spout].stats.specific.spout.acked == {w: {"default": 6} for w in WINDOWS}
    assert executors[spout].uptime_secs == 42, "a beating task's uptime is its own"
    assert executors[split].stats is None and executors[split].uptime_secs == 41, \
        "malformed stats are dropped; the beat still counts"
    assignment = cluster.zk.read(paths.assignment(topology_id), Assignment)
    assert {t: e.supervisor_id for t, e in executors.items()} == {
        t: w.supervisor_id for w in assignment.workers for t in w.tasks}, "each executor names its supervisor"


def test_getTopologyInfo_serves_storms_windows_made_from_the_beats_nimbus_took_in(cluster: Cluster,
                                                                                 leader: Nimbus) -> None:
    """A spout acking 10 trees a second, reported every 30 s for 20 minutes: its last 10 minutes hold 6000, the
    3 h and 1 day windows all 12,000 (it is younger); a restart counts from the restart."""
    topology_id = submit(cluster, leader)
    client = cluster.client(leader)
    tasks = cluster.zk.read(paths.tasks(topology_id), TopologyTasks)
    spout = next(t for t, info in tasks.tasks.items() if info.component == "sentences")

    def beat(uptime: int, acked: int) -> Any:
        stats = to_executor_stats(TaskStats(emitted={"default": acked}, acked={"default": acked}), spout=True)
        client.updateTaskHeartbeat(storm.TopologyTaskHbInfo(topologyId=topology_id, topologyMasterId=0, taskHbs={
            spout: storm.TaskHeartbeat(time_secs=uptime, uptime_secs=uptime, stats=stats)}))
        (executor,) = [e for e in client.getTopologyInfo(topology_id).executors if e.executor_info.task_start == spout]
        return executor.stats.specific.spout.acked

    for uptime in range(0, 1200, 30):
        beat(uptime, 10 * uptime)
    assert beat(1200, 12_000) == {"600": {"default": 6000}, "10800": {"default": 12_000},
                                  "86400": {"default": 12_000}, ":all-time": {"default": 12_000}}
    assert beat(3, 20) == {w: {"default": 20} for w in ("600", "10800", "86400", ":all-time")}, "restarted"


def test_dead_worker_moves_after_the_timeout_and_beating_ones_stay(cluster: Cluster, leader: Nimbus) -> None:
    """Launch grace 60 s, task timeout 30 s, monitor every 10 s (see Cluster)."""
    topology_id = submit(cluster, leader)
    client = cluster.client(leader)
    before = cluster.zk.read(paths.assignment(topology_id), Assignment)
    alive, dead = before.workers
    tick = 0

    def run_for(secs: int) -> Assignment:
        nonlocal tick
        for _ in range(secs // 10):
            tick += 1
            client.updateTaskHeartbeat(storm.TopologyTaskHbInfo(
                topologyId=topology_id, topologyMasterId=0,
                taskHbs={t: storm.TaskHeartbeat(time_secs=tick, uptime_secs=tick) for t in alive.tasks}))
            cluster.clock.advance(10)
        return cluster.zk.read(paths.assignment(topology_id), Assignment)

    assert run_for(60) == before, "never-heard tasks are protected for the launch grace"
    run_for(10)
    wait_until(lambda: cluster.zk.read(paths.assignment(topology_id), Assignment) != before,
               what="reassignment one monitor period after the grace")
    after = cluster.zk.read(paths.assignment(topology_id), Assignment)
    assert alive in after.workers
    moved = next(w for w in after.workers if w != alive)
    assert moved.tasks == dead.tasks and (moved.supervisor_id, moved.port) != (dead.supervisor_id, dead.port)
    assert run_for(60) == after, "a freshly moved task gets a new launch grace"
    run_for(10)
    wait_until(lambda: cluster.zk.read(paths.assignment(topology_id), Assignment) != after,
               what="the still-silent worker to move again")


def test_a_leader_elected_again_after_its_session_expired_gives_every_task_a_full_timeout_from_its_first_look(
        cluster: Cluster, leader: Nimbus, zk_address: str) -> None:
    """A CI run's 30 s ZooKeeper outage expired nimbus's session; elected again, it restored a ``/taskbeats``
    written before the tasks' first beats, and its first monitor cycle moved every task as never heard from.
    Storm starts each task at the leader's first look. Launch grace 60 s, task timeout 30 s, monitor every 10 s."""
    topology_id = submit(cluster, leader)
    before = cluster.zk.read(paths.assignment(topology_id), Assignment)
    cluster.clock.advance(50)  # the monitor persists /taskbeats every 10 s: no task has beaten yet
    cluster.client(leader).updateTaskHeartbeat(storm.TopologyTaskHbInfo(
        topologyId=topology_id, topologyMasterId=0,
        taskHbs={t: storm.TaskHeartbeat(time_secs=1, uptime_secs=1) for w in before.workers for t in w.tasks}))
    with capture_logs() as logs:
        expire_session(leader.state.zk, zk_address)
        wait_until(lambda: any(e["event"] == "nimbus leading" for e in logs), 30, "the same nimbus elected again")
        first_look = cluster.clock.time() + 10
        while not any(e["event"] == "reassigning dead workers" for e in logs):
            assert cluster.clock.time() < first_look + 60, "the silent tasks are moved in the end"
            cluster.clock.advance(10)
    moved_at = cluster.clock.time()
    assert moved_at - first_look > 30, "no task is judged before a full timeout from the leader's first look"
    (moving,) = [e for e in logs if e["event"] == "reassigning dead workers"]
    assert moving["tasks"] == sorted(t for w in before.workers for t in w.tasks)
    wait_until(lambda: cluster.zk.read(paths.assignment(topology_id), Assignment) != before, what="the reassignment")


def test_follower_refuses_writes_and_takes_over(cluster: Cluster, leader: Nimbus) -> None:
    follower = cluster.nimbus("n2")
    wait_until(lambda: cluster.zk.children(paths.NIMBUS_SLAVES) == [f"127.0.0.1:{follower.port}"],
               what="follower registered")
    client = cluster.client(follower)
    with pytest.raises(TApplicationException, match=f"the leader is 127.0.0.1:{leader.port}"):
        client.submitTopology("wc", "", "{}", word_count())
    assert len(client.getClusterInfo().nimbuses) == 2
    leader.stop()
    wait_until(lambda: follower.is_leader, what="takeover")
    submit(cluster, follower)


def test_a_nimbus_deposed_while_its_workers_stay_connected_refuses_their_beats_naming_the_leader(
        cluster: Cluster, leader: Nimbus, zk_address: str) -> None:
    """A leader whose session expired while its process and its workers' connections stayed up took their beats and
    dropped them: the new leader heard nothing and judged every task dead. Refused, a worker looks the leader up."""
    topology_id = submit(cluster, leader)
    tasks = cluster.zk.read(paths.tasks(topology_id), TopologyTasks)
    other = cluster.nimbus("n2")
    wait_until(lambda: len(cluster.zk.children(paths.NIMBUS_SLAVES)) == 1, what="follower registered")
    old_client = cluster.client(leader)

    expire_session(leader.state.zk, zk_address)

    wait_until(lambda: leader.is_leader != other.is_leader and leader.state.zk.connected.is_set(), 30,
               "one nimbus leading after the expiry")
    new, deposed = (leader, other) if leader.is_leader else (other, leader)
    client = old_client if deposed is leader else cluster.client(deposed)
    beats = storm.TopologyTaskHbInfo(topologyId=topology_id, topologyMasterId=0,
                                     taskHbs={t: storm.TaskHeartbeat(time_secs=7, uptime_secs=7) for t in tasks.tasks})
    with pytest.raises(TApplicationException, match=f"not the leader; the leader is 127.0.0.1:{new.port}"):
        client.updateTaskHeartbeat(beats)
    cluster.client(new).updateTaskHeartbeat(beats)
    assert {t: b.uptime_secs for t, b in new.watching.latest_beats(topology_id).items()} == {t: 7 for t in tasks.tasks}


def test_a_takeover_that_fails_half_way_is_tried_again_while_elected(cluster: Cluster, leader: Nimbus,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The takeover's thread died on the first exception (a ZooKeeper read out of retries): the nimbus held
    /nimbus_master and was never ready, so it served nothing and no other nimbus could take over."""
    topology_id = submit(cluster, leader)
    leader.stop()
    take_over_code, failures = Takeover._take_over_code, []

    def fails_once(self: Takeover) -> None:
        if not failures:
            failures.append(self)
            raise ConnectionLoss("ZooKeeper went away half-way through the takeover")
        take_over_code(self)

    monkeypatch.setattr(Takeover, "_take_over_code", fails_once)
    with capture_logs() as logs:
        successor = cluster.nimbus("n2")
        wait_until(lambda: successor.is_leader, 30, "the successor to lead after a failed first try")
    assert failures == [successor.takeover]
    assert [e["event"] for e in logs].count("nimbus takeover failed; trying again") == 1
    assert cluster.client(successor).getTopologyInfo(topology_id).name == "wc"


def test_orphaned_state_is_cleaned_by_the_monitor(cluster: Cluster, leader: Nimbus) -> None:
    orphan = "ghost-7-1700000000"
    cluster.zk.write(paths.tasks(orphan), TopologyTasks({1: TaskInfo("s", ComponentType.SPOUT)}))
    cluster.clock.advance(10)
    wait_until(lambda: orphan not in cluster.zk.children(paths.TASKS), what="orphan cleanup")


def test_every_validation_rule_reaches_a_thrift_client(cluster: Cluster, leader: Nimbus) -> None:
    """The rules of tests/test_topology.py, submitted for real: each comes back with its own message."""
    import copy

    from test_topology import CONF_RULES, RULES, word_count as valid_topology

    client = cluster.client(leader)
    for rule, edit, message in RULES:
        topology = copy.deepcopy(valid_topology())
        edit(topology)
        with pytest.raises(storm.InvalidTopologyException) as caught:
            client.submitTopology("wc", "", json.dumps({"topology.workers": 2}), topology)
        assert caught.value.msg == message, rule
    for rule, conf, message in CONF_RULES:
        with pytest.raises(storm.InvalidTopologyException) as caught:
            client.submitTopology("wc", "", json.dumps(conf), valid_topology())
        assert message in caught.value.msg, rule
    with pytest.raises(storm.InvalidTopologyException, match="topology name"):
        client.submitTopology("bad/name", "", "{}", valid_topology())
    assert cluster.zk.children(paths.TOPOLOGIES) == [] and client.getClusterInfo().topologies == []
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as package:  # the package of the Python bolts that every rule names
        package.writestr("wordcount/__init__.py", "")
        package.writestr("wordcount/bolts.py", "class Split: ...\nclass Count: ...\n")
    location = client.beginFileUpload()
    client.uploadChunk(location, buffer.getvalue())
    client.finishFileUpload(location)
    client.submitTopology("wc", location, json.dumps({"topology.workers": 2}), valid_topology())  # still serving


def test_pending_rebalance_survives_a_nimbus_restart(cluster: Cluster, leader: Nimbus) -> None:
    topology_id = submit(cluster, leader)
    cluster.client(leader).rebalance("wc", storm.RebalanceOptions(wait_secs=20, num_workers=4))
    leader.stop()
    successor = cluster.nimbus("n1")
    wait_until(lambda: successor.is_leader, what="the restarted nimbus to lead")
    cluster.clock.advance(20)
    wait_until(lambda: cluster.zk.read(paths.topology(topology_id), StormBase).status.value == "active",
               what="rebalance completed by the restarted nimbus")
    assert len(cluster.zk.read(paths.assignment(topology_id), Assignment).workers) == 4


def test_znodes_of_a_submit_exist_before_its_topology_node(cluster: Cluster, leader: Nimbus) -> None:
    seen: list[tuple[str, bool, bool]] = []

    def on_topologies(ids: list[str]) -> None:
        for topology_id in ids:
            seen.append((topology_id, cluster.zk.exists(paths.tasks(topology_id)),
                         cluster.zk.exists(paths.assignment(topology_id))))

    cluster.zk.watch_children(paths.TOPOLOGIES, on_topologies)
    topology_id = submit(cluster, leader)
    wait_until(lambda: seen, what="the topology node")
    assert seen[0] == (topology_id, True, True)


def test_code_is_uploaded_stored_and_downloadable(cluster: Cluster, leader: Nimbus) -> None:
    client = cluster.client(leader)
    package = zip_bytes()
    location = client.beginFileUpload()
    for part in (package[:10], package[10:]):
        client.uploadChunk(location, part)
    client.finishFileUpload(location)
    client.submitTopology("wc", location, json.dumps({"topology.workers": 2}), word_count())
    topology_id = client.getTopologyId("wc")
    for artifact, expected in (("code", package),
                               ("conf", json.dumps(leader.state.code.conf(topology_id), sort_keys=True).encode())):
        session = client.beginCodeDownload(topology_id, artifact)
        data = b""
        while chunk := client.downloadChunk(session):
            data += chunk
        assert data == expected
    with pytest.raises(storm.NotAliveException, match="unknown artifact"):
        client.beginCodeDownload(topology_id, "../../etc/passwd")
    with pytest.raises(storm.InvalidTopologyException, match="no finished upload"):
        client.submitTopology("wc2", location, "{}", word_count())  # an upload is claimed once
    assert list(leader.state.inbox.root.iterdir()) == [], "the claimed upload does not linger in the inbox"


def test_workers_of_a_vanished_supervisor_stay_while_they_beat(cluster: Cluster, leader: Nimbus) -> None:
    topology_id = submit(cluster, leader)
    client = cluster.client(leader)
    before = cluster.zk.read(paths.assignment(topology_id), Assignment)
    cluster.supervisor(3)
    all_tasks = [t for w in before.workers for t in w.tasks]
    lost = before.workers[0].supervisor_id
    cluster.zk.delete(paths.supervisor(lost))

    def beat(tick: int, tasks: list[int]) -> None:
        client.updateTaskHeartbeat(storm.TopologyTaskHbInfo(
            topologyId=topology_id, topologyMasterId=0,
            taskHbs={t: storm.TaskHeartbeat(time_secs=tick, uptime_secs=tick) for t in tasks}))

    for tick in range(1, 13):
        beat(tick, all_tasks)
        cluster.clock.advance(10)
    assert cluster.zk.read(paths.assignment(topology_id), Assignment) == before, "beating workers are not moved"
    stranded = [t for w in before.workers if w.supervisor_id == lost for t in w.tasks]
    for tick in range(13, 18):  # now the lost supervisor's workers go quiet
        beat(tick, [t for t in all_tasks if t not in stranded])
        cluster.clock.advance(10)
    wait_until(lambda: cluster.zk.read(paths.assignment(topology_id), Assignment) != before, what="reassignment")
    after = cluster.zk.read(paths.assignment(topology_id), Assignment)
    assert all(w.supervisor_id != lost for w in after.workers)


def test_follower_refuses_every_write_with_the_leaders_address(cluster: Cluster, leader: Nimbus) -> None:
    submit(cluster, leader)
    follower = cluster.nimbus("n2")
    wait_until(lambda: len(cluster.zk.children(paths.NIMBUS_SLAVES)) == 1, what="follower registered")
    client = cluster.client(follower)
    writes = [lambda: client.killTopology("wc"), lambda: client.activate("wc"), lambda: client.deactivate("wc"),
              lambda: client.rebalance("wc", storm.RebalanceOptions(wait_secs=1)), client.beginFileUpload,
              lambda: client.setHostInBlackList("h"), lambda: client.removeHostOutBlackList("h"),
              lambda: client.setLogConfig(client.getTopologyId("wc"), storm.LogConfig(named_logger_level={}))]
    for write in writes:
        with pytest.raises(TApplicationException, match=f"not the leader; the leader is 127.0.0.1:{leader.port}"):
            write()
    assert [t.name for t in client.getClusterInfo().topologies] == ["wc"], "reads are served"


def test_rebalance_never_shares_a_slot_with_another_topology(cluster: Cluster, leader: Nimbus) -> None:
    first = submit(cluster, leader, "wc")
    second = submit(cluster, leader, "wc2", conf={"topology.workers": 3})
    cluster.client(leader).rebalance("wc", storm.RebalanceOptions(wait_secs=0, num_workers=5, reassign=True))
    cluster.clock.advance(0)
    wait_until(lambda: len(cluster.zk.read(paths.assignment(first), Assignment).workers) == 5, what="rebalance")
    slots = [(w.supervisor_id, w.port) for tid in (first, second)
             for w in cluster.zk.read(paths.assignment(tid), Assignment).workers]
    assert len(slots) == len(set(slots)) == 8


def test_garbage_on_the_port_does_not_stop_nimbus_answering(cluster: Cluster, leader: Nimbus) -> None:
    import os
    import socket
    import struct

    silent = socket.create_connection(("127.0.0.1", leader.port))
    huge = socket.create_connection(("127.0.0.1", leader.port))
    huge.sendall(struct.pack("!i", 2_000_000_000))
    noise = socket.create_connection(("127.0.0.1", leader.port))
    noise.sendall(struct.pack("!i", 64) + os.urandom(64))
    try:
        assert cluster.client(leader).getClusterInfo().topologies == []
    finally:
        for s in (silent, huge, noise):
            s.close()


def test_nimbus_listens_on_its_bind_address_only(cluster: Cluster, leader: Nimbus) -> None:
    """``nimbus.thrift.bind.address: 127.0.0.1`` (the tests' conf): nimbus listens on loopback, and a client that
    comes through this host's other address is refused; the default listens on every interface."""
    import os
    import socket

    assert ("127.0.0.1", leader.port) in listening(os.getpid())
    assert ("0.0.0.0", leader.port) not in listening(os.getpid())
    if (outside := other_address()) is not None:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((outside, leader.port), timeout=5).close()
    cluster.conf["nimbus.thrift.bind.address"] = "0.0.0.0"
    everywhere = cluster.nimbus("n2")
    assert ("0.0.0.0", everywhere.port) in listening(os.getpid())


def test_a_tls_listener_beside_the_plain_port_leaves_storm_1_clients_working(cluster: Cluster,
                                                                            tmp_path: Path) -> None:
    """``nimbus.thrift.tls.port`` without ``server.only``: a Storm 1.x client (streamparse's IDL and transport)
    still lists topologies on the plain port, while Squall's client with a certificate uses the TLS port, found
    through ZooKeeper and getLeader; both listeners serve the same nimbus."""
    from squall.core.nimbus_client import leader_address, nimbus_client

    certs = make_certs(tmp_path / "certs", "alice")
    cluster.conf.update(tls_conf(certs, "alice"), **{"nimbus.thrift.tls.port": 0})
    n = cluster.nimbus()
    wait_until(lambda: n.is_leader, what="nimbus to lead")
    storm_1 = make_client(storm_idl.Nimbus, "127.0.0.1", n.port, proto_factory=TBinaryProtocolFactory(),
                          trans_factory=TFramedTransportFactory(), timeout=5000)
    try:
        assert storm_1.getClusterInfo().topologies == []
        assert storm_1.getLeader().port == n.port
    finally:
        storm_1.close()
    tls_port = n.tls_server.port
    assert tls_port != n.port and leader_address(cluster.conf, cluster.zk) == ("127.0.0.1", tls_port)
    with nimbus_client({**cluster.conf, "nimbus.seeds": [f"127.0.0.1:{tls_port}"]}) as client:
        assert client.getLeader().tlsPort == tls_port
        assert [s.tlsPort for s in client.getClusterInfo().nimbuses] == [tls_port]


def holds(n: Nimbus, topology_id: str, version: int, leader: Nimbus) -> bool:
    """``n`` stores ``version`` of the topology as ``leader`` does (same digest)."""
    return version in n.state.code.versions(topology_id) and \
        n.state.code.digest(topology_id, version) == leader.state.code.digest(topology_id, version)


def test_submit_waits_for_a_follower_to_hold_the_code_which_then_follows_every_change(
        cluster: Cluster, leader: Nimbus) -> None:
    follower = cluster.nimbus("n2")
    wait_until(lambda: len(cluster.zk.children(paths.CODE_HOLDERS)) == 2, what="both nimbuses announce their code")
    topology_id = submit(cluster, leader, conf={"topology.min.replication.count": 2})
    assert holds(follower, topology_id, 1, leader)  # before the submit returned, so before it was scheduled
    client = cluster.client(follower)  # a follower serves the code, to readers and to supervisors
    assert json.loads(client.getTopologyConf(topology_id))["topology.min.replication.count"] == 2
    session = client.beginCodeDownload(topology_id, "v1/conf")
    assert json.loads(client.downloadChunk(session))["topology.id"] == topology_id

    cluster.client(leader).rebalance("wc", storm.RebalanceOptions(wait_secs=0, num_workers=3))
    cluster.clock.advance(0)  # rewrites version 1's conf in place: the follower copies it again
    wait_until(lambda: leader.state.code.conf(topology_id)["topology.workers"] == 3
               and holds(follower, topology_id, 1, leader), what="the follower to copy the rebalanced conf")
    assert follower.state.code.conf(topology_id)["topology.workers"] == 3
    cluster.client(leader).killTopologyWithOpts("wc", storm.KillOptions(wait_secs=0))
    cluster.clock.advance(0)
    wait_until(lambda: not follower.state.code.has(topology_id), what="the follower to drop a killed topology's code")


def test_with_too_few_nimbuses_submit_schedules_once_the_max_replication_wait_passed(
        cluster: Cluster, leader: Nimbus) -> None:
    submitted: list[str] = []
    conf = {"topology.min.replication.count": 2, "topology.max.replication.wait.time.sec": 30}
    thread = threading.Thread(target=lambda: submitted.append(submit(cluster, leader, conf=conf)))
    armed = cluster.clock.pending()
    thread.start()
    # The code is published before the wait arms its timer: advancing the clock in between would start the 30 s
    # after the advance. Wait for the timer itself.
    wait_until(lambda: cluster.zk.children(paths.CODE) and cluster.clock.pending() > armed,
               what="the code published, the wait's timer armed")
    (topology_id,) = cluster.zk.children(paths.CODE)
    cluster.clock.advance(29)
    thread.join(0.5)  # a submit that did not wait would be done by now
    assert thread.is_alive() and cluster.zk.read(paths.assignment(topology_id), Assignment) is None
    cluster.clock.advance(1)
    thread.join(30)
    assert submitted == [topology_id] and cluster.zk.read(paths.assignment(topology_id), Assignment) is not None


def test_a_new_leader_copies_the_code_it_lacks_from_any_nimbus_holding_it(cluster: Cluster, leader: Nimbus) -> None:
    follower = cluster.nimbus("n2")
    topology_id = submit(cluster, leader)
    wait_until(lambda: holds(follower, topology_id, 1, leader), what="the follower to copy the code")
    follower.state.code.remove(topology_id)  # the follower's disk lost it; nothing tells its sync thread
    leader.state.election.stop()  # steps down, still serving what it holds
    wait_until(lambda: follower.is_leader, what="takeover")
    assert holds(follower, topology_id, 1, leader)
    assert cluster.client(follower).getUserTopology(topology_id).spouts.keys() == {"sentences"}


def test_a_new_leader_without_the_code_says_so(cluster: Cluster, leader: Nimbus) -> None:
    topology_id = submit(cluster, leader)
    follower = cluster.nimbus("n2")
    wait_until(lambda: holds(follower, topology_id, 1, leader), what="the follower to copy the code")
    follower.state.code.remove(topology_id)  # lost on the follower, and the leader goes away with its copy
    leader.stop()
    wait_until(lambda: follower.is_leader, what="takeover")
    client = cluster.client(follower)
    with pytest.raises(TApplicationException, match="has no code for"):
        client.getUserTopology(topology_id)
    client.rebalance("wc", storm.RebalanceOptions(wait_secs=0, num_workers=3))
    cluster.clock.advance(0)
    wait_until(lambda: client.getTopologyInfo(topology_id).status == "ACTIVE", what="rebalance to give up")
    (error,) = client.getTopologyInfo(topology_id).errors["__topology_master"]
    assert "no nimbus holding it could serve it" in error.error
    client.killTopologyWithOpts("wc", storm.KillOptions(wait_secs=0))
    cluster.clock.advance(0)
    wait_until(lambda: cluster.zk.children(paths.TOPOLOGIES) == [], what="kill works without the code")


def test_a_kill_racing_error_writers_removes_everything_and_frees_the_name(cluster: Cluster, leader: Nimbus) -> None:
    topology_id = submit(cluster, leader)
    stop = threading.Event()
    writers = [ZkClient(cluster.conf).start() for _ in range(4)]

    def write_errors(zk: ZkClient, task: int) -> None:
        """As workers and supervisors do: on until a while after the assignment is gone (the workers stopped)."""
        second, stop_at = 0, float("inf")
        while not stop.is_set() and time.monotonic() < stop_at:
            if stop_at == float("inf") and not zk.exists(paths.assignment(topology_id)):
                stop_at = time.monotonic() + 1.0
            second += 1
            with contextlib.suppress(Exception):
                record_task_error(zk, topology_id, task, TaskError(f"boom {second}", second))

    threads = [threading.Thread(target=write_errors, args=(zk, task), daemon=True) for task, zk in enumerate(writers)]
    try:
        for thread in threads:
            thread.start()
        wait_until(lambda: len(cluster.zk.children(paths.task_errors_root(topology_id))) == len(writers),
                   what="every writer writing")
        cluster.client(leader).killTopologyWithOpts("wc", storm.KillOptions(wait_secs=1))
        cluster.clock.advance(1)
        wait_until(lambda: not cluster.zk.exists(paths.topology(topology_id)), 30, "the kill to finish")
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
        for zk in writers:
            zk.stop()
    cluster.clock.advance(leader.state.conf["nimbus.monitor.freq.secs"])  # late writes are orphans: the monitor's
    wait_until(lambda: not any(topology_id in cluster.zk.children(p) for p in paths.TOPOLOGY_SUBTREES),
               what="nothing of the topology left in ZooKeeper")
    submit(cluster, leader)  # the name is free again


def test_upload_refusals_are_typed_and_name_no_server_path(cluster: Cluster, leader: Nimbus) -> None:
    client = cluster.client(leader)
    location = client.beginFileUpload()
    client.uploadChunk(location, b"#!/bin/sh\necho not a package\n")
    with pytest.raises(storm.AuthorizationException, match="is not a zip file") as refused:
        client.finishFileUpload(location)
    assert str(leader.state.inbox.root) not in refused.value.msg
    with pytest.raises(storm.AuthorizationException, match="unknown or expired upload") as refused:
        client.uploadChunk(location, b"more")
    assert str(leader.state.inbox.root) not in refused.value.msg


def test_an_upload_flood_does_not_keep_storm_jar_out(cluster: Cluster, leader: Nimbus) -> None:
    client = cluster.client(leader)
    flood = []
    with pytest.raises(storm.AuthorizationException, match="nimbus.upload.max.per.client"):
        while len(flood) <= 256:  # one host opens uploads and never sends a chunk
            flood.append(client.beginFileUpload())
    assert len(flood) == leader.state.conf["nimbus.upload.max.per.client"]
    cluster.clock.advance(leader.state.conf["nimbus.upload.idle.secs"] + 1)
    package = zip_bytes()  # storm jar from that host, half a minute later
    location = client.beginFileUpload()
    client.uploadChunk(location, package)
    client.finishFileUpload(location)
    client.submitTopology("wc", location, json.dumps({"topology.workers": 2}), word_count())
    assert leader.state.code.package(client.getTopologyId("wc")).read_bytes() == package
    assert [p.name for p in leader.state.inbox.root.iterdir()] == [], "the idle uploads were dropped"


def test_a_topology_too_large_for_a_zookeeper_value_is_refused_with_a_typed_error(cluster: Cluster,
                                                                                   leader: Nimbus) -> None:
    """30,000 tasks make a task list over ZooKeeper's value limit: the client gets InvalidTopologyException naming
    the limit (it was an untyped TApplicationException), and nothing of the topology is left behind."""
    with pytest.raises(storm.InvalidTopologyException, match=r"too large for ZooKeeper: .* over the 819200-byte limit"):
        submit(cluster, leader, topology=word_count(split=30_000, count=1))
    assert cluster.client(leader).getClusterInfo().topologies == []
    for parent in paths.TOPOLOGY_SUBTREES + (paths.TOPOLOGIES,):
        assert cluster.zk.children(parent) == [], parent
    assert list(leader.state.code.ids()) == []


def test_the_info_of_a_ten_thousand_task_topology_reaches_squalls_own_client(cluster: Cluster,
                                                                             leader: Nimbus) -> None:
    """A 10,000-task topology's beats, sent as its topology master sends them, all reach nimbus (in one
    request they are ~4 MB, over nimbus.thrift.max_buffer_size, and nimbus refused them all), and
    getTopologyInfo with every task's stats (~5 MB) reaches the client whole (it refused the frame)."""
    topology_id = submit(cluster, leader, topology=word_count(split=9_990, count=8))
    tasks = cluster.zk.read(paths.tasks(topology_id), TopologyTasks)
    assert len(tasks.tasks) >= 10_000
    conf = leader.state.code.conf(topology_id)
    layout = build_layout(topology_id, leader.state.code.system_topology(topology_id), tasks, conf)
    out = {"emitted": {"default": 7, "__ack_ack": 7}, "transferred": {"default": 7, "__ack_ack": 7}}
    spout, bolt = TaskStats(**out, acked={"default": 7}), TaskStats(
        **out, acked={"sentences:default": 7}, executed={"sentences:default": 7}, latency_ms={"sentences:default": 0.5})
    beats = {t: TaskBeat(1, 5, spout if info.type is ComponentType.SPOUT else bolt) for t, info in tasks.tasks.items()}
    requests = beat_requests(topology_id, layout, beats)
    whole = storm.TopologyTaskHbInfo(topologyId=topology_id, topologyMasterId=0,
                                     taskHbs={t: hb for r in requests for t, hb in r.taskHbs.items()})
    with pytest.raises((TTransportException, ConnectionError)):  # what one request for every task met
        cluster.client(leader).updateTaskHeartbeat(whole)
    client = cluster.client(leader)
    for request in requests:
        client.updateTaskHeartbeat(request)
    info = cluster.client(leader).getTopologyInfo(topology_id)
    assert [e.executor_info.task_start for e in info.executors] == sorted(tasks.tasks)
    bad = [(e.executor_info.task_start, e.component_id, e.stats) for e in info.executors
           if e.stats is None or e.stats.emitted != {w: {"default": 7, "__ack_ack": 7} for w in WINDOWS}]
    assert bad == []


def test_a_package_without_the_topologys_module_is_refused_at_submit(cluster: Cluster, leader: Nimbus) -> None:
    """A zip that holds no ``wc_bolts`` while the topology's bolt is ``wc_bolts.Split``: refused with a typed error
    naming the module and the component (it was accepted, and every worker would crash-loop on the import);
    the same topology with the module in its package is accepted."""
    topology = word_count()
    topology.bolts["split"].bolt_object = storm.ComponentObject(
        python_object=storm.PythonComponent(module_name="wc_bolts", class_name="Split"))
    client = cluster.client(leader)

    def upload(package: bytes) -> str:
        location = client.beginFileUpload()
        client.uploadChunk(location, package)
        client.finishFileUpload(location)
        return location

    with pytest.raises(storm.InvalidTopologyException, match="no module 'wc_bolts', which bolt 'split' is imported"):
        client.submitTopology("wc", upload(zip_bytes()), json.dumps({"topology.workers": 2}), topology)
    assert client.getClusterInfo().topologies == [] and list(leader.state.code.ids()) == []
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as package:
        package.writestr("wc_bolts/__init__.py", "class Split: ...\n")
    client.submitTopology("wc", upload(buffer.getvalue()), json.dumps({"topology.workers": 2}), topology)
    assert client.getTopologyId("wc")


def python(module: str, name: str, *args: Any) -> Any:
    return storm.ComponentObject(python_object=storm.PythonComponent(module, name, args_json=json.dumps(list(args))))


def test_a_topology_naming_anything_but_a_component_class_is_refused_at_submit(cluster: Cluster,
                                                                              leader: Nimbus) -> None:
    """The issue's attack and its variants, over Thrift: a spout that names ``os.system`` with a command (no
    package at all), a spout that names ``subprocess.Popen``, a package module that only imports ``system``,
    a custom grouping naming ``os.system``, a bolt class named as a spout. Each is an InvalidTopologyException
    naming the component and what the name is, and nothing is stored. Installed component classes and a
    package's own classes are still accepted."""
    client = cluster.client(leader)

    def upload(files: dict[str, str]) -> str:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as package:
            for name, text in files.items():
                package.writestr(name, text)
        location = client.beginFileUpload()
        client.uploadChunk(location, buffer.getvalue())
        client.finishFileUpload(location)
        return location

    def with_spout(obj: Any) -> Any:
        topology = word_count()
        topology.spouts["sentences"].spout_object = obj
        return topology

    custom = word_count()
    custom.bolts["split"].common.inputs = {storm.GlobalStreamId("sentences", "default"): storm.Grouping(
        custom_serialized=json.dumps({"module": "os", "class": "system", "args": ["id"]}).encode())}
    bolt_as_spout = with_spout(python("squall.api.spark", "SparkBolt"))  # installed with squall, as users' are
    refused = [
        (with_spout(python("os", "system", "id > proof.txt")), "",
         "spout 'sentences' names os.system, a builtin function, not a Spout subclass"),
        (with_spout(python("subprocess", "Popen", ["id"])), "",
         "spout 'sentences' names subprocess.Popen, the class subprocess.Popen, not a Spout subclass"),
        (with_spout(python("wc", "system", "id")), upload({"wc.py": "from os import system\n"}),
         "spout 'sentences' names wc.system, which wc.py in the package does not define with a class statement"),
        (custom, "", "the custom grouping of bolt 'split' names os.system, a builtin function, not a class with "
                     "a choose_tasks"),
        (bolt_as_spout, "", "spout 'sentences' names squall.api.spark.SparkBolt, the class squall.api.spark.SparkBolt, "
                            "not a Spout subclass"),
    ]
    for topology, location, message in refused:
        with pytest.raises(storm.InvalidTopologyException, match=re.escape(message)):
            client.submitTopology("wc", location, json.dumps({"topology.workers": 2}), topology)
    assert client.getClusterInfo().topologies == [] and list(leader.state.code.ids()) == []

    accepted = with_spout(python("wc", "Sentences"))
    accepted.bolts["split"].bolt_object = python("squall.api.spark", "SparkBolt")  # installed, not in the package
    package = upload({"wc.py": "import os\nif os:\n    class Sentences: ...\n"})
    client.submitTopology("wc", package, json.dumps({"topology.workers": 2}), accepted)
    running = client.getTopologyId("wc")
    with pytest.raises(storm.InvalidTopologyException, match="names os.system"):  # as a hot deploy of it
        client.submitTopology("wc", "", json.dumps({"topology.workers": 2, "topology.hot.deploy.enable": True}),
                              refused[0][0])
    assert client.getTopologyId("wc") == running, "a refused replacement leaves the running topology alone"


def test_each_topology_gets_a_transfer_secret_kept_across_a_gray_upgrade_and_never_shown(
        cluster: Cluster, leader: Nimbus) -> None:
    """Nimbus generates a topology's ``topology.transfer.secret`` at submit: stored with its conf (supervisors hand
    it to its workers), masked by getTopologyConf, the same in the gray upgrade's new version (old and new workers
    talk to each other), and another topology's own."""
    topology_id = submit(cluster, leader)
    secret = leader.state.code.conf(topology_id)["topology.transfer.secret"]
    assert len(secret) >= 32
    client = cluster.client(leader)
    assert json.loads(client.getTopologyConf(topology_id))["topology.transfer.secret"] == "***"
    client.graySubmit("wc", "", json.dumps({"topology.workers": 2}), word_count(),
                      storm.GrayUpgradeOptions(worker_num=1))
    versions = leader.state.code.versions(topology_id)
    assert len(versions) == 2 and {leader.state.code.conf(topology_id, v)["topology.transfer.secret"]
                                   for v in versions} == {secret}
    other = submit(cluster, leader, "other")
    assert leader.state.code.conf(other)["topology.transfer.secret"] not in (secret, None)


def test_nimbus_is_a_thin_daemon_over_modules_of_one_job_each() -> None:
    """Each module of nimbus opens with a docstring saying its job and stays under 600 lines; ``help(Nimbus)`` says
    what its parts are and shows how it is used."""
    root = Path(__file__).resolve().parent.parent / "nimbus"
    for path in sorted(root.rglob("*.py")):
        module = importlib.import_module(".".join(path.relative_to(root.parent).with_suffix("").parts))
        assert inspect.getdoc(module), f"{path.name}: no docstring saying its job"
        assert len(path.read_text().splitlines()) <= 600, f"{path.relative_to(root.parent)} is over 600 lines"
    doc = inspect.getdoc(Nimbus) or ""
    assert "Why" in doc and "::\n\n    nimbus = Nimbus(conf).start(NimbusService)" in doc
