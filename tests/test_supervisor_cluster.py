"""The running cluster end to end: ``storm nimbus`` and ``storm supervisor`` processes on a real
ZooKeeper, workers started by the supervisors from code downloaded from nimbus."""

from __future__ import annotations

import json
from collections import Counter
import os
import signal
import time
from datetime import datetime
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from processcluster import ProcessCluster
from squall.api.dsl import Topology
from squall.core.local_state import stormdist_dir
from squall.core.thrift import storm
from squall.core.worker_records import WorkerRecord, running
from squall.core.zk import paths
from squall.core.zk.errors import MAX_ERRORS_PER_TASK
from squall.core.zk.records import SupervisorInfo, TopologyTasks
from squall.dev.zookeeper import ZooKeeperUnavailable
from support import log_events, task_errors, wait_until
from scenarios import counted_word_count, final_counts, nothing_lost, reliable_stream
from topologies import BrokenPrepare, Forward, Numbers, read_records


def two_supervisors(zk_conf: dict[str, Any], tmp_path: Path, stack: ExitStack, *, own_zookeeper: bool = False,
                    **conf: Any) -> ProcessCluster:
    cluster = ProcessCluster(zk_conf, tmp_path, stack, **conf)
    if own_zookeeper:
        try:
            cluster.start_zookeeper()
        except ZooKeeperUnavailable as exc:
            pytest.skip(f"needs a ZooKeeper of its own: {exc}")
    cluster.start("sup-a", "sup-b")
    return cluster


@pytest.fixture
def cluster(zk_conf: dict[str, Any], tmp_path: Path) -> Iterator[ProcessCluster]:
    with ExitStack() as stack:
        yield two_supervisors(zk_conf, tmp_path, stack)


def all_beating(cluster: ProcessCluster, topology_id: str) -> bool:
    """Every assigned task has a beat at nimbus (through the topology master)."""
    assignment = cluster.assignment(topology_id)
    if assignment is None:
        return False
    with cluster.client() as client:
        info = client.getTopologyInfo(topology_id)
    beating = {e.executor_info.task_start for e in info.executors if e.stats is not None}
    return beating == {t for w in assignment.workers for t in w.tasks}


def worker_without_spout(cluster: ProcessCluster, topology_id: str, spout: str = "numbers") -> tuple[str, WorkerRecord]:
    """(supervisor name, record) of a worker that runs none of ``spout``'s tasks."""
    tasks = cluster.zk.read(paths.tasks(topology_id), TopologyTasks)
    spout_tasks = {task for task, info in tasks.tasks.items() if info.component == spout}
    return next((name, r) for name in ("sup-a", "sup-b") for r in cluster.workers(name)
                if not spout_tasks & set(r.tasks))


def replacements(cluster: ProcessCluster, owner: str, victim: WorkerRecord) -> list[WorkerRecord]:
    """Workers the owner started on ``victim``'s port after it."""
    return [r for r in cluster.workers(owner) if r.port == victim.port and r.worker_id != victim.worker_id]


def error_texts(cluster: ProcessCluster, topology_id: str, task: int) -> list[str]:
    return [e.error for e in task_errors(cluster.zk, topology_id, task)]


def test_word_count_on_two_supervisors_and_three_workers(cluster: ProcessCluster, tmp_path: Path) -> None:
    records = tmp_path / "records"
    t, expected = counted_word_count(records, rounds=30, workers=3)
    topology_id = cluster.submit(t)
    wait_until(lambda: final_counts(records) == expected, 90, "exact counts")
    assignment = cluster.assignment(topology_id)
    assert assignment is not None and len(assignment.workers) == 3
    assert len({w.supervisor_id for w in assignment.workers}) == 2, "the workers spread over both supervisors"
    running = {(r.topology_id, r.port) for name in ("sup-a", "sup-b") for r in cluster.workers(name)}
    assert running == {(topology_id, w.port) for w in assignment.workers}

    wait_until(lambda: all_beating(cluster, topology_id), 30, "every task beating at nimbus")
    with cluster.client() as client:
        summary = client.getClusterInfo()
        info = client.getTopologyInfo(topology_id)
    ids = {cluster.supervisor_id("sup-a"), cluster.supervisor_id("sup-b")}
    assert {s.supervisor_id for s in summary.supervisors} == ids
    assert sorted(s.num_used_workers for s in summary.supervisors) == [1, 2]
    assert all(s.host == "127.0.0.1" and s.num_workers == 2 for s in summary.supervisors)
    located = {e.executor_info.task_start: (e.host, e.port) for e in info.executors}
    assert located == {t: ("127.0.0.1", w.port) for w in assignment.workers for t in w.tasks}


@pytest.mark.slow
def test_a_killed_worker_is_restarted_within_three_seconds_and_nothing_is_lost(
        cluster: ProcessCluster, tmp_path: Path) -> None:
    records, count = tmp_path / "records", 20_000
    topology_id = cluster.submit(reliable_stream("crash", records, count))
    wait_until(lambda: len(read_records(records, "acked")) >= count // 10, 90, "the stream under way")

    owner, victim = worker_without_spout(cluster, topology_id)
    os.killpg(victim.pid, signal.SIGKILL)
    killed = time.monotonic()
    restarted = wait_until(lambda: replacements(cluster, owner, victim), 10, "the supervisor to restart it")
    assert time.monotonic() - killed < 3, "restarted within 3 s"
    assert restarted[0].tasks == victim.tasks
    nothing_lost(records, count)
    reported = error_texts(cluster, topology_id, victim.tasks[0])
    assert any("exited" in e for e in reported), "the crash is in /taskerrors"


@pytest.mark.slow
def test_a_frozen_worker_is_killed_after_the_worker_timeout_and_restarted(
        zk_conf: dict[str, Any], tmp_path: Path) -> None:
    with ExitStack() as stack:  # nimbus waits longer than the supervisor, so the tasks stay where they are
        cluster = two_supervisors(zk_conf, tmp_path, stack, **{"supervisor.worker.timeout.secs": 3,
                                                               "nimbus.task.timeout.secs": 60})
        records, count = tmp_path / "records", 20_000
        topology_id = cluster.submit(reliable_stream("frozen", records, count))
        wait_until(lambda: len(read_records(records, "acked")) >= count // 10, 90, "the stream under way")
        owner, victim = worker_without_spout(cluster, topology_id)
        before = cluster.assignment(topology_id)

        os.kill(victim.pid, signal.SIGSTOP)
        frozen = time.monotonic()
        wait_until(lambda: replacements(cluster, owner, victim), 30, "a new worker on the frozen one's port")
        assert time.monotonic() - frozen > 3, "not before the worker timeout"
        wait_until(lambda: not running(victim.pid), 10, "the frozen process killed")
        nothing_lost(records, count)
        reported = error_texts(cluster, topology_id, victim.tasks[0])
        assert any("stopped heartbeating for more than 3s" in e for e in reported)
        assert cluster.assignment(topology_id) == before, "the supervisor alone recovered it: no reassignment"


def test_killing_the_topology_stops_its_workers_and_removes_its_code(cluster: ProcessCluster) -> None:
    t = Topology("doomed", conf={"topology.workers": 3})
    numbers = t.spout("numbers", Numbers, args=[10**9], kwargs={"reliable": False})
    t.bolt("forward", Forward, parallelism=2).shuffle(numbers)
    topology_id = cluster.submit(t)
    wait_until(lambda: all_beating(cluster, topology_id), 60, "the topology running")
    names = ("sup-a", "sup-b")
    pids = [r.pid for name in names for r in cluster.workers(name)]
    assert len(pids) == 3
    code = [stormdist_dir(cluster.daemon_conf(name)) / topology_id for name in names]
    assert any(c.exists() for c in code)

    wait_secs = 1
    with cluster.client() as client:
        client.killTopologyWithOpts("doomed", storm.KillOptions(wait_secs=wait_secs))
    killed = time.monotonic()
    grace = cluster.conf["supervisor.worker.shutdown.sleep.secs"]
    monitor = cluster.conf["supervisor.monitor.frequency.secs"]

    wait_until(lambda: all(not running(p) for p in pids), 30, "every worker process gone")
    assert time.monotonic() - killed < wait_secs + grace + monitor + 2, "within the kill wait plus the grace"
    wait_until(lambda: not any(c.exists() for c in code), 10, "the supervisors to delete the code")

    def used_slots() -> list[list[int]]:
        return [info.used_ports for sid in cluster.zk.children(paths.SUPERVISORS)
                if (info := cluster.zk.read(paths.supervisor(sid), SupervisorInfo)) is not None]

    wait_until(lambda: used_slots() == [[], []], 10, "both supervisors to report their slots free")


@pytest.mark.slow
def test_a_lost_supervisor_s_tasks_move_to_the_other_and_it_rejoins_with_its_id(
        cluster: ProcessCluster, tmp_path: Path) -> None:
    records, count = tmp_path / "records", 30_000
    topology_id = cluster.submit(reliable_stream("stream", records, count))
    wait_until(lambda: len(read_records(records, "acked")) >= count // 10, 90, "the stream under way")
    before = cluster.assignment(topology_id)
    lost = cluster.supervisor_id("sup-b")
    assert before is not None and lost in {w.supervisor_id for w in before.workers}

    cluster.kill("sup-b")
    cluster.kill_workers("sup-b")
    moved = wait_until(lambda: (a := cluster.assignment(topology_id)) is not None
                       and all(w.supervisor_id != lost for w in a.workers) and a, 60, "the tasks moved")
    assert sorted(t for w in moved.workers for t in w.tasks) == sorted(t for w in before.workers for t in w.tasks)
    nothing_lost(records, count)

    cluster.start_supervisor("sup-b")
    wait_until(lambda: lost in cluster.zk.children(paths.SUPERVISORS), 30, "the supervisor back")
    assert cluster.supervisor_id("sup-b") == lost


@pytest.mark.slow
def test_workers_go_on_without_nimbus_and_a_restarted_nimbus_keeps_the_assignment(
        cluster: ProcessCluster, tmp_path: Path) -> None:
    records, count = tmp_path / "records", 40_000
    topology_id = cluster.submit(reliable_stream("stream", records, count))
    wait_until(lambda: all_beating(cluster, topology_id), 60, "the topology running")
    before = cluster.assignment(topology_id)
    pids = sorted(r.pid for name in ("sup-a", "sup-b") for r in cluster.workers(name))

    cluster.kill("nimbus")
    acked = len(read_records(records, "acked"))
    wait_until(lambda: len(read_records(records, "acked")) > acked + 1000, 30, "processing without nimbus")
    cluster.start_nimbus()
    wait_until(lambda: all_beating(cluster, topology_id), 30, "beats at the new nimbus")
    nothing_lost(records, count)
    assert cluster.assignment(topology_id) == before, "no reassignment"
    assert sorted(r.pid for name in ("sup-a", "sup-b") for r in cluster.workers(name)) == pids, "no restart"


@pytest.mark.slow
def test_a_worker_failing_in_prepare_is_reported_with_its_traceback_and_retried_with_backoff(
        cluster: ProcessCluster, tmp_path: Path) -> None:
    t = Topology("broken", conf={"topology.workers": 1})
    t.bolt("enrich", BrokenPrepare).shuffle(t.spout("numbers", Numbers, args=[10**9], kwargs={"reliable": False}))
    topology_id = cluster.submit(t)
    assignment = wait_until(lambda: cluster.assignment(topology_id), 30, "the assignment")
    (slot,) = assignment.workers
    owner = next(name for name in ("sup-a", "sup-b") if cluster.supervisor_id(name) == slot.supervisor_id)
    tasks = cluster.zk.read(paths.tasks(topology_id), TopologyTasks)
    enrich = next(task for task, info in tasks.tasks.items() if info.component == "enrich")

    def events() -> list[tuple[float, str]]:
        return [(datetime.fromisoformat(e["timestamp"]).timestamp(), e["event"])
                for e in log_events(cluster.log_file(owner), "worker launched", "worker problem")
                if e.get("port") == slot.port or e.get("topology_id") == topology_id and "port" not in e]

    def backoffs() -> list[float]:
        """From each failure seen to the next launch: the back-off alone, whatever a worker takes to fail."""
        found, failed_at = [], None
        for at, event in events():
            if event == "worker problem" and failed_at is None:
                failed_at = at
            elif event == "worker launched" and failed_at is not None:
                found.append(at - failed_at)
                failed_at = None
        return found

    delays = wait_until(lambda: len(found := backoffs()) >= 4 and found, 60, "four relaunches of the failing worker")
    # 0 s, then 1, 2, 4 s, each rounded up to the supervisor's next sync (supervisor.monitor.frequency.secs: 1 s)
    assert delays[0] < 1.0 and delays[3] > 3.5 and delays[3] > delays[1] + 1.5, f"retries back off: {delays}"
    reported = error_texts(cluster, topology_id, enrich)
    assert any("Traceback" in e and "in prepare" in e and "cannot reach the feature store" in e
               for e in reported), "the traceback is in /taskerrors"
    assert any("exited; restarting it in" in e for e in reported), "the supervisor says when it retries"
    assert all(len(error_texts(cluster, topology_id, task)) <= MAX_ERRORS_PER_TASK for task in slot.tasks), \
        "ZooKeeper keeps a bounded few"
    worker_log = (tmp_path / owner / "logs" / f"{topology_id}-worker-{slot.port}.log").read_text().splitlines()
    reports = [line for line in worker_log if line.startswith("{") and json.loads(line)["event"] == "task error"]
    assert len(reports) <= sum(event == "worker launched" for _, event in events()), "one traceback per attempt"


@pytest.mark.slow
def test_daemons_ride_out_a_zookeeper_restart(zk_conf: dict[str, Any], tmp_path: Path) -> None:
    with ExitStack() as stack:
        cluster = two_supervisors(zk_conf, tmp_path, stack, own_zookeeper=True, **{"storm.zookeeper.port": 0})
        server = cluster.zookeeper
        assert server is not None
        records, count = tmp_path / "records", 40_000
        topology_id = cluster.submit(reliable_stream("stream", records, count))
        wait_until(lambda: all_beating(cluster, topology_id), 60, "the topology running")
        # processing, not only beating: a worker still starting (waiting for its peers) needs ZooKeeper
        wait_until(lambda: len(read_records(records, "acked")) > 1000, 60, "messages acked")
        before = cluster.assignment(topology_id)
        pids = sorted(r.pid for name in ("sup-a", "sup-b") for r in cluster.workers(name))
        ids = sorted(cluster.zk.children(paths.SUPERVISORS))

        server.stop()
        acked = len(read_records(records, "acked"))

        def noticed(name: str) -> bool:
            return '"state": "suspended"' in cluster.log_file(name).read_text()

        wait_until(lambda: all(noticed(name) for name in ("nimbus", "sup-a", "sup-b")), 30, "the daemons cut off")
        wait_until(lambda: len(read_records(records, "acked")) > acked + 1000, 30, "processing without ZooKeeper")
        server.start()
        wait_until(lambda: sorted(cluster.zk.children(paths.SUPERVISORS)) == ids, 30, "both supervisors re-registered")

        def beating_again() -> bool:
            try:
                return all_beating(cluster, topology_id)
            except RuntimeError:  # "no nimbus leads": the leader's node flickers while old sessions expire
                return False

        wait_until(beating_again, 30, "nimbus leading, beats at nimbus again")
        nothing_lost(records, count)
        assert cluster.assignment(topology_id) == before, "no reassignment"
        assert sorted(r.pid for name in ("sup-a", "sup-b") for r in cluster.workers(name)) == pids, "no restart"


@pytest.mark.slow
def test_a_thirty_second_zookeeper_outage_kills_no_worker_and_loses_nothing(
        zk_conf: dict[str, Any], tmp_path: Path) -> None:
    """ZooKeeper away for 30 s, six times ``supervisor.worker.timeout.secs`` and longer than
    ``nimbus.task.timeout.secs``. Storm keeps workers through it: they process on their last assignment and beat
    locally, supervisors keep them. Afterwards every daemon is back in ZooKeeper, nimbus has every task's beat,
    no worker was restarted or moved, and every message of the reliable stream was acked exactly once."""
    with ExitStack() as stack:
        cluster = two_supervisors(zk_conf, tmp_path, stack, own_zookeeper=True, **{"storm.zookeeper.port": 0})
        server = cluster.zookeeper
        assert server is not None
        records, count = tmp_path / "records", 60_000
        topology_id = cluster.submit(reliable_stream("outage", records, count))
        wait_until(lambda: all_beating(cluster, topology_id), 60, "the topology running")
        # processing, not only beating: a worker still starting (waiting for its peers) needs ZooKeeper
        wait_until(lambda: len(read_records(records, "acked")) > 1000, 60, "messages acked")
        before = cluster.assignment(topology_id)
        pids = sorted(r.pid for name in ("sup-a", "sup-b") for r in cluster.workers(name))
        ids = sorted(cluster.zk.children(paths.SUPERVISORS))

        server.stop()
        stopped, acked = time.monotonic(), len(read_records(records, "acked"))
        outage = 30.0
        wait_until(lambda: len(read_records(records, "acked")) > acked + 1000, outage, "processing without ZooKeeper")
        wait_until(lambda: time.monotonic() - stopped >= outage, outage + 1, "the outage to last 30 s")
        assert sorted(r.pid for name in ("sup-a", "sup-b") for r in cluster.workers(name)) == pids, \
            "no worker killed during the outage"
        server.start()
        wait_until(lambda: sorted(cluster.zk.children(paths.SUPERVISORS)) == ids, 60, "both supervisors re-registered")

        def beating_again() -> bool:
            try:
                return all_beating(cluster, topology_id)
            except RuntimeError:  # "no nimbus leads": the leader's node flickers while old sessions expire
                return False
            except TimeoutError:  # nimbus's ZooKeeper client is not back yet: its reconnect backoff grows to
                return False      # storm.zookeeper.retry.intervalceiling.millis (30 s), so a read can wait that long

        wait_until(beating_again, 90, "nimbus leading, beats at nimbus again")
        nothing_lost(records, count)
        acks = Counter(read_records(records, "acked"))
        assert [n for n, times in acks.items() if times > 1] == [], "every message acked exactly once"
        assert cluster.assignment(topology_id) == before, "no reassignment"
        assert sorted(r.pid for name in ("sup-a", "sup-b") for r in cluster.workers(name)) == pids, "no restart"
