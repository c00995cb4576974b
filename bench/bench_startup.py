"""How fast the cluster starts a topology and brings back a lost worker, with real daemons.

A :class:`~squall.dev.cluster.DevCluster` — ZooKeeper (its own, or ``--zookeeper HOST:PORT``), one nimbus
and ``--supervisors`` supervisors as processes, default timings — runs ``--rounds`` rounds of:

* submit the word count (``--workers`` workers; packaging not counted, upload counted) and time, from
  the submit call: the assignment in ZooKeeper, every worker process beating locally, and every task's
  heartbeat at nimbus (``getTopologyInfo`` shows stats for every executor) — "submit to running";
* SIGKILL one worker (not the spouts') and time until its replacement beats locally and its tasks
  beat at nimbus again (newer uptime than before the kill);
* kill the topology (``wait_secs`` 0) and time until every worker process is gone.

    python bench/bench_startup.py [--rounds 5] [--workers 3] [--supervisors 2]

Not a test: numbers depend on the machine. docs/performance.md records them.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from clusterbench import dev_cluster, print_rounds, run_rounds
from examples import wordcount
from squall import build_package, submit_topology
from squall.core.local_state import workers_dir
from squall.core.thrift import storm
from squall.core.worker_records import WorkerRecords, running
from squall.core.zk import paths
from squall.core.zk.records import Assignment, TopologyTasks
from squall.dev.cluster import DevCluster, wait_for

REPO = Path(__file__).resolve().parent.parent
COLUMNS = ["assigned", "workers up", "all tasks at nimbus", "worker restart", "restarted at nimbus", "kill → gone"]


def uptimes(cluster: DevCluster, topology_id: str) -> dict[int, int]:
    """Task → uptime of its latest beat at nimbus, for the executors nimbus has beats of."""
    with cluster.client() as client:
        info = client.getTopologyInfo(topology_id)
    return {e.executor_info.task_start: e.uptime_secs for e in info.executors if e.stats is not None}


def one_round(cluster: DevCluster, package: Path, workers: int, names: list[str]) -> dict[str, float]:
    t = wordcount.topology(workers=workers, name=f"startup-{uuid.uuid4().hex[:6]}")
    times: dict[str, float] = {}
    start = time.monotonic()

    def mark(column: str) -> None:
        times[column] = (time.monotonic() - start) * 1000

    topology_id = submit_topology(cluster.conf, t, package=package, zk=cluster.zk)
    assignment = wait_for(lambda: cluster.zk.read(paths.assignment(topology_id), Assignment), 60, "the assignment")
    mark("assigned")
    every_task = {task for w in assignment.workers for task in w.tasks}

    def records() -> list[Any]:
        return [(name, r) for name in names for r in cluster.workers(name) if r.topology_id == topology_id]

    def beating_locally(name: str, worker_id: str) -> bool:
        return WorkerRecords(workers_dir(cluster.daemon_conf(name))).last_beat(worker_id) is not None

    wait_for(
        lambda: len(found := records()) == workers and all(beating_locally(n, r.worker_id) for n, r in found),
        60,
        "every worker beating locally",
    )
    mark("workers up")
    wait_for(lambda: set(uptimes(cluster, topology_id)) == every_task, 60, "every task's heartbeat at nimbus")
    mark("all tasks at nimbus")

    tasks = wait_for(lambda: cluster.zk.read(paths.tasks(topology_id), TopologyTasks), 60, "the task ids")
    spouts = {task for task, info in tasks.tasks.items() if info.component == "sentences"}
    victim = next(r for _, r in records() if not spouts & set(r.tasks))
    before = wait_for(
        lambda: min((u := uptimes(cluster, topology_id)).values()) >= 2 and u,
        60,
        "two seconds of uptime, to tell the replacement's beats apart",
    )
    os.killpg(victim.pid, signal.SIGKILL)
    start = time.monotonic()
    wait_for(
        lambda: any(
            r.port == victim.port and r.worker_id != victim.worker_id and beating_locally(n, r.worker_id)
            for n, r in records()
        ),
        60,
        "a replacement worker",
    )
    mark("worker restart")
    wait_for(
        lambda: all(uptimes(cluster, topology_id).get(task, before[task]) < before[task] for task in victim.tasks),
        60,
        "the replacement's tasks beating at nimbus",
    )
    mark("restarted at nimbus")

    pids = [r.pid for _, r in records()]
    with cluster.client() as client:
        client.killTopologyWithOpts(t.name, storm.KillOptions(wait_secs=0))
    start = time.monotonic()
    wait_for(lambda: not any(running(pid) for pid in pids), 60, "every worker gone")
    mark("kill → gone")
    wait_for(lambda: not records(), 30, "the supervisors to forget the workers")
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--supervisors", type=int, default=2)
    parser.add_argument(
        "--zookeeper",
        metavar="HOST:PORT",
        default=os.environ.get("SQUALL_TEST_ZK"),
        help="an existing ZooKeeper (default: start one)",
    )
    args = parser.parse_args()

    names = [f"supervisor-{i}" for i in range(args.supervisors)]
    with dev_cluster(names, args.zookeeper) as (cluster, tmp):
        package = build_package([REPO / "examples"], tmp / "code.zip")
        rows = run_rounds(args.rounds, lambda: one_round(cluster, package, args.workers, names))
    print_rounds(
        f"word count on {args.workers} workers, {args.supervisors} supervisors, default timings", COLUMNS, rows
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
