"""Worker processes on a real cluster: real ZooKeeper, a nimbus, ``python -m worker`` processes that
run code from an uploaded package and talk to each other over TCP. (The supervisor daemon is the
next issue; :mod:`minicluster` starts and kills workers the way it will.)"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from examples import wordcount
from minicluster import MiniCluster
from squall.api.dsl import Topology
from squall.core.thrift import storm
from squall.core.thrift.client import connect
from squall.core.zk import paths
from squall.core.zk.records import TopologyTasks, WorkerAssignment
from support import listening, log_events, task_errors, wait_until
from scenarios import counted_word_count, final_counts, nothing_lost, reliable_stream
from topologies import Boom, Forward, Numbers, Recorder, read_records


@pytest.fixture
def cluster(zk_conf: dict[str, Any], tmp_path: Path) -> Iterator[MiniCluster]:
    with ExitStack() as stack:
        yield MiniCluster(zk_conf, tmp_path, stack)


def test_word_count_across_two_workers_is_exact(cluster: MiniCluster, tmp_path: Path) -> None:
    rounds, records = 30, tmp_path / "records"
    t, expected = counted_word_count(records, rounds, workers=2)
    topology_id = cluster.submit(t)
    workers = cluster.start_workers(topology_id)
    assert len(workers) == 2 and len({w.port for w in workers}) == 2

    wait_until(lambda: final_counts(records) == expected, 60, "exact counts")
    assert len(read_records(records, "seen")) == sum(expected.values()), "each word counted once: nothing replayed"
    for w in workers:  # worker.transfer.bind.address: 127.0.0.1 in the tests' conf
        assert listening(cluster.processes[(w.supervisor_id, w.port)].pid) == {("127.0.0.1", w.port)}
    tasks = {t for w in workers for t in w.tasks}
    wait_until(lambda: tasks <= set(cluster.nimbus.state.tracker.snapshot(topology_id, 0).beats), 30,
               "every task's heartbeat at nimbus, through the topology master")

    def all_time(info: Any, component: str, stat: str) -> int:
        total = 0
        for e in info.executors:
            if e.component_id == component and e.stats is not None:
                specific = e.stats.specific.spout or e.stats.specific.bolt
                windows = e.stats.emitted if stat == "emitted" else getattr(specific, stat)
                total += sum(windows[":all-time"].values())
        return total

    sentences, words = rounds * len(wordcount.SENTENCES), sum(expected.values())
    with connect("127.0.0.1", cluster.nimbus.port, 30_000) as client:
        def final_stats() -> Any:
            info = client.getTopologyInfo(topology_id)
            done = all_time(info, "sentences", "acked") == sentences and all_time(info, "count", "executed") == words
            return info if done else None

        info = wait_until(final_stats, 30, "the final stats at nimbus")
    assert all_time(info, "sentences", "emitted") == sentences and all_time(info, "split", "emitted") == words
    assert {(e.host, e.port) for e in info.executors} == {("127.0.0.1", w.port) for w in workers}


def test_fields_grouping_is_the_same_in_every_worker(cluster: MiniCluster, tmp_path: Path) -> None:
    records = tmp_path / "records"
    records.mkdir()
    # every tuple once (a replay after a message timeout would overshoot the 2,000 waited for): no timeout a loaded
    # machine can reach with all 2,000 in flight
    t = Topology("fields", conf={"topology.workers": 2, "topology.message.timeout.secs": 60})
    numbers = t.spout("numbers", Numbers, args=[2000, 40], parallelism=2)
    t.bolt("sink", Recorder, args=[str(records)], parallelism=4).fields(numbers, "key")
    topology_id = cluster.submit(t)
    workers = cluster.start_workers(topology_id)
    spout_tasks = cluster.zk.read(paths.tasks(topology_id), TopologyTasks)
    spouts = {task for task, info in spout_tasks.tasks.items() if info.component == "numbers"}
    assert all(spouts & set(w.tasks) for w in workers), "one spout task in each worker"

    wait_until(lambda: len(read_records(records, "seen")) == 2000, 60, "every tuple")
    owners: dict[str, set[str]] = {}
    for path in records.glob("seen-*.jsonl"):
        for line in path.read_text().splitlines():
            owners.setdefault(line.split('"')[1], set()).add(path.name)
    assert len(owners) == 40 and all(len(files) == 1 for files in owners.values())


@pytest.mark.slow
def test_at_least_once_across_a_killed_worker(cluster: MiniCluster, tmp_path: Path) -> None:
    records, count = tmp_path / "records", 20_000
    topology_id = cluster.submit(reliable_stream("crash", records, count))
    workers = cluster.start_workers(topology_id)
    layout = cluster.zk.read(paths.tasks(topology_id), TopologyTasks)
    spout_task = next(task for task, info in layout.tasks.items() if info.component == "numbers")
    (victim,) = [w for w in workers if spout_task not in w.tasks]
    assert any(layout.tasks[task].component in ("forward", "sink") for task in victim.tasks)

    wait_until(lambda: len(read_records(records, "acked")) >= count // 10, 60, "the stream under way")
    cluster.kill_worker(victim)
    assert len(set(read_records(records, "acked"))) < count, "killed mid-stream"
    cluster.start_worker(topology_id, victim)
    nothing_lost(records, count)


def test_errors_go_to_zookeeper_and_the_worker_goes_on(cluster: MiniCluster) -> None:
    t = Topology("errors", conf={"topology.workers": 1})
    t.bolt("boom", Boom, args=[3]).shuffle(t.spout("numbers", Numbers, args=[10]))
    topology_id = cluster.submit(t)
    (worker,) = cluster.start_workers(topology_id)
    layout = cluster.zk.read(paths.tasks(topology_id), TopologyTasks)
    boom = next(task for task, info in layout.tasks.items() if info.component == "boom")

    # four booms, three kept: the worker drops the oldest while the test may be reading it
    found = wait_until(lambda: [e for e in task_errors(cluster.zk, topology_id, boom) if "boom on" in e.error], 30,
                       "errors")
    assert found[0].port == worker.port and "RuntimeError" in found[0].error
    assert cluster.processes[(worker.supervisor_id, worker.port)].poll() is None, "the worker keeps running"


def test_a_worker_follows_a_rebalance_in_place_and_an_unassigned_one_exits(cluster: MiniCluster,
                                                                            tmp_path: Path) -> None:
    records = tmp_path / "records"
    records.mkdir()
    t = Topology("rebalance", conf={"topology.workers": 2, "topology.max.spout.pending": 10})
    forward = t.bolt("forward", Forward, parallelism=2).shuffle(
        t.spout("numbers", Numbers, args=[10**9], kwargs={"record_dir": str(records)}))
    t.bolt("sink", Recorder, args=[str(records)], parallelism=2).fields(forward, "key")
    topology_id = cluster.submit(t)
    before = cluster.start_workers(topology_id)
    wait_until(lambda: len(read_records(records, "acked")) > 100, 60, "the stream under way")

    with connect("127.0.0.1", cluster.nimbus.port, 30_000) as client:
        client.rebalance("rebalance", storm.RebalanceOptions(wait_secs=0, num_workers=1))
    def one_worker() -> list[WorkerAssignment] | None:
        workers = cluster.assignment(topology_id).workers
        return workers if len(workers) == 1 else None

    (after,) = wait_until(one_worker, 30, "the one-worker assignment")
    (kept,) = [w for w in before if (w.supervisor_id, w.port) == (after.supervisor_id, after.port)]
    (dropped,) = [w for w in before if w is not kept]
    gone = cluster.processes[(dropped.supervisor_id, dropped.port)]
    assert wait_until(lambda: gone.poll() is not None, 30, "the unassigned worker to exit") and gone.returncode == 0
    assert set(after.tasks) > set(kept.tasks), "the kept worker now also runs the moved tasks"

    acked = len(read_records(records, "acked"))
    wait_until(lambda: len(read_records(records, "acked")) > acked + 100, 60, "tuples flowing after the rebalance")
    assert cluster.processes[(kept.supervisor_id, kept.port)].poll() is None, "refreshed in place, not restarted"


def test_killing_the_topology_stops_its_workers_cleanly(cluster: MiniCluster) -> None:
    t = Topology("doomed", conf={"topology.workers": 2})
    t.bolt("sink", Recorder).shuffle(t.spout("numbers", Numbers, args=[10**9], kwargs={"reliable": False}))
    topology_id = cluster.submit(t)
    workers = cluster.start_workers(topology_id)
    processes = [cluster.processes[(w.supervisor_id, w.port)] for w in workers]
    wait_until(lambda: len(cluster.nimbus.state.tracker.snapshot(topology_id, 0).beats) == 4, 30, "the workers running")
    with connect("127.0.0.1", cluster.nimbus.port, 30_000) as client:
        client.killTopologyWithOpts("doomed", storm.KillOptions(wait_secs=1))
    wait_until(lambda: all(p.poll() is not None for p in processes), 30, "the workers to exit")
    assert [p.returncode for p in processes] == [0, 0]


@pytest.mark.slow
def test_a_worker_started_beside_a_dead_peer_follows_the_reassignment_that_drops_it(zk_conf: dict[str, Any],
                                                                                     tmp_path: Path) -> None:
    """A worker whose first assignment names a slot nobody listens on holds its spouts, but
    follows the assignment watch at once, not after the connection wait (120 s) or the poll (set to 10 min
    here, so only the watch can rescue it)."""
    with ExitStack() as stack:
        cluster = MiniCluster(zk_conf, tmp_path, stack, **{"task.refresh.poll.secs": 600})
        records = tmp_path / "records"
        records.mkdir()
        t = Topology("stranded", conf={"topology.workers": 2})
        t.bolt("sink", Recorder, args=[str(records)], parallelism=2).shuffle(
            t.spout("numbers", Numbers, args=[1000], kwargs={"reliable": False}))
        topology_id = cluster.submit(t)
        first = cluster.assignment(topology_id)
        live, dead = first.workers
        cluster.start_worker(topology_id, live)
        log = cluster.worker_log(topology_id, live)
        wait_until(lambda: log_events(log, "worker runtime started"), 60, "the live worker's tasks to start")
        assert not read_records(records, "seen"), "spouts are held while a peer of the assignment is unreachable"

        moved = replace(first, workers=[replace(live, tasks=sorted([*live.tasks, *dead.tasks]))],
                        timestamp_ms=first.timestamp_ms + 1)
        cluster.zk.write(paths.assignment(topology_id), moved)
        # The watch answers in milliseconds (tuples flow ~0.02 s after the write here); 30 s leaves room for a
        # loaded 2-core machine (the moved sink task starts first) and stays far below the connection wait (120 s
        # from the worker's start) and the poll (600 s).
        wait_until(lambda: read_records(records, "seen"), 30, "tuples flowing once the dead slot left the assignment")
