"""Rebalance with new parallelism on a process cluster: a fields-grouped bolt goes from 2 tasks to 4 and
back to 1 while a reliable spout keeps emitting; workers refresh their tasks in place."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from processcluster import REPO, ProcessCluster
from squall.core.thrift import storm
from squall.core.topology import component_tasks
from squall.core.zk import paths
from squall.core.zk.records import TopologyTasks
from squall.dev.zookeeper import free_port
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


@pytest.mark.slow
def test_beyond_capacity_a_topology_runs_on_the_free_slots_is_told_so_at_once_and_grows_when_slots_appear(
        zk_conf: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with ExitStack() as stack:
        cluster = ProcessCluster(zk_conf, tmp_path / "cluster", stack)
        cluster.start_nimbus()
        cluster.start_supervisor("sup")  # two slots
        cluster.wait_supervisors(1)

        def storm_(*argv: str) -> tuple[int, str, str]:
            code = cluster.cli(*argv)
            out, err = capsys.readouterr()
            return code, out, err

        def health() -> str:
            (entry,) = json.loads(storm_("list", "--json")[1])
            return str(entry["health"])

        def errors() -> dict[str, str]:
            return json.loads(storm_("get-errors", "cap")[1])["Comp-Errors"]

        code, out, err = storm_("-c", "topology.workers=3", "jar", str(REPO / "examples" / "wordcount.py"), "null",
                                "--name", "cap")
        assert code == 0, err
        assert out.splitlines()[-2].startswith("Finished submitting topology: cap (cap-")
        assert out.splitlines()[-1] == ("cap: 3 workers requested, 2 slots free: it runs on 2 and adds workers as "
                                        "slots free up (storm list's Health shows it until then)")
        topology_id = cluster.zk.children(paths.TOPOLOGIES)[0]
        assert len(cluster.assignment(topology_id).workers) == 2
        assert health() == "running 2 of 3 requested workers: no free slots"

        code, out, err = storm_("rebalance", "cap", "-w", "1", "-n", "5")
        assert (code, out) == (0, "Topology cap is rebalancing\ncap: 5 workers requested, 2 slots free: it runs on 2 "
                                  "and adds workers as slots free up (storm list's Health shows it until then)\n"), err
        wait_until(lambda: health() == "running 2 of 5 requested workers: no free slots", 30,
                   "the rebalance done on the two slots there are")
        assert len(cluster.assignment(topology_id).workers) == 2
        wait_until(lambda: len(cluster.workers("sup")) == 2, 30, "both workers running")
        assert errors() == {} and health() == "running 2 of 5 requested workers: no free slots"

        cluster.start_supervisor("more", [free_port() for _ in range(4)])
        wait_until(lambda: len(cluster.assignment(topology_id).workers) == 5, 30,
                   "nimbus to add workers on the new supervisor's slots")
        wait_until(lambda: len(cluster.workers("more")) == 3, 60, "the new supervisor running three of them")
        assert health() == "ok" and errors() == {}
