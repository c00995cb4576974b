"""Rebalance with new parallelism on a process cluster: a fields-grouped bolt goes from 2 tasks to 4 and
back to 1 while a reliable spout keeps emitting; workers refresh their tasks in place."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from processcluster import ProcessCluster
from squall.thrift import storm
from squall.topology import component_tasks
from squall.zk import paths
from squall.zk.records import TopologyTasks
from support import log_events, wait_until
from topologies import read_records, recorded_numbers

#: topology.max.spout.pending: bounds how far emitted numbers run ahead of those recorded.
PENDING = 200


def seen_by_task(record_dir: Path) -> dict[int, list[tuple[str, int]]]:
    """(key, n) of every tuple each sink task recorded, by task id."""
    return {int(path.stem.split("-")[1]): [tuple(json.loads(line)) for line in path.read_text().splitlines()
                                           if line.endswith("]")]
            for path in record_dir.glob("seen-*.jsonl")}


def refreshes(cluster: ProcessCluster) -> list[int]:
    """How many times each worker refreshed its tasks in place, by worker log."""
    return sorted(len(log_events(log, "worker refreshed")) for log in (cluster.root / "sup" / "logs").glob("*worker*.log"))


def test_rebalance_grows_and_shrinks_a_bolt_keeping_fields_grouping_and_losing_nothing(
        zk_conf: dict[str, Any], tmp_path: Path) -> None:
    records = tmp_path / "records"
    t = recorded_numbers("rescale", records, workers=2, sinks=2, conf={"topology.max.spout.pending": PENDING})
    with ExitStack() as stack:
        cluster = ProcessCluster(zk_conf, tmp_path / "cluster", stack)
        cluster.start_nimbus()
        cluster.start_supervisor("sup")
        cluster.wait_supervisors(1)
        topology_id = cluster.submit(t)

        def tasks() -> dict[str, list[int]]:
            return component_tasks(cluster.zk.read(paths.tasks(topology_id), TopologyTasks))

        def rebalance(parallelism: int) -> None:
            with cluster.client() as client:
                client.rebalance("rescale", storm.RebalanceOptions(wait_secs=0, num_executors={"sink": parallelism}))

        def latest_n() -> int:
            return max((n for seen in seen_by_task(records).values() for _, n in seen), default=-1)

        before = tasks()
        two = before["sink"]
        wait_until(lambda: set(seen_by_task(records)) == set(two), 60, "both sink tasks receiving")

        rebalance(4)
        wait_until(lambda: len(tasks()["sink"]) == 4, 30, "four sink tasks in /tasks")
        four = tasks()["sink"]
        assert four[:2] == two and min(four[2:]) > max(t for ids in before.values() for t in ids)
        assert {c: ids for c, ids in tasks().items() if c != "sink"} == {c: ids for c, ids in before.items()
                                                                        if c != "sink"}
        wait_until(lambda: set(seen_by_task(records)) == set(four), 60, "all four sink tasks receiving")
        # Numbers emitted after this read are routed by the new layout: at most PENDING were in flight.
        start = latest_n() + PENDING
        wait_until(lambda: latest_n() >= start + 2000, 60, "2,000 more numbers")
        owners: dict[str, set[int]] = {}
        for task, seen in seen_by_task(records).items():
            for key, n in seen:
                if start < n <= start + 2000:
                    owners.setdefault(key, set()).add(task)
        assert all(len(tasks_of_key) == 1 for tasks_of_key in owners.values()), owners
        assert len(owners) == 20 and len(set().union(*owners.values())) == 4, "the 20 keys spread over 4 tasks"

        rebalance(1)
        wait_until(lambda: tasks()["sink"] == [two[0]], 30, "one sink task, the lowest id, in /tasks")
        wait_until(lambda: refreshes(cluster) == [2, 2], 30, "both workers refreshed in place twice")
        settled = latest_n() + PENDING
        wait_until(lambda: latest_n() >= settled + 2000, 60, "2,000 more numbers after the shrink")
        late = {task for task, seen in seen_by_task(records).items() for _, n in seen if n > settled}
        assert late == {two[0]}, "after the shrink only the remaining task gets tuples"
        assert len(cluster.workers("sup")) == 2 and len(log_events(cluster.log_file("sup"), "worker launched")) == 2, "no worker was restarted"
        # Nothing lost: every number up to here is acked, tuples dropped at removed tasks were replayed.
        wait_until(lambda: set(range(settled)) <= set(read_records(records, "acked")), 60,
                   f"every number below {settled} acked")
