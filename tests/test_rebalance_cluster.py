"""Rebalance with new parallelism on a process cluster: a fields-grouped bolt goes from 2 tasks to 4 and
back to 1 while a reliable spout keeps emitting; workers refresh their tasks in place. The word count at full
speed without a pending cap rides out a rebalance onto more workers."""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from examples import wordcount
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
        cluster.start("sup")
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
        cluster.start("sup")  # two slots

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


def spout_acked(cluster: ProcessCluster, topology_id: str, component: str) -> dict[tuple[int, str, int], int]:
    """All-time acked trees of each task of ``component`` as nimbus shows them, by (task, host, port)."""
    with cluster.client() as client:
        info = client.getTopologyInfo(topology_id)
    return {(e.executor_info.task_start, e.host, e.port): sum(e.stats.specific.spout.acked[":all-time"].values())
            for e in info.executors if e.component_id == component and e.stats is not None}


class AckedRate:
    """The acked rate of a spout over the last seconds, from samples of nimbus's counts by task and
    worker: a task missing from one answer keeps its last count, and one whose count went down (its worker
    restarted) adds from 0."""

    def __init__(self, read: Any) -> None:
        self._read = read
        self._latest: dict[tuple[int, str, int], int] = {}
        self._banked = 0  # the last counts of restarted workers
        self._totals: list[tuple[float, int]] = []

    def sample(self, window: float = 10) -> float:
        """Take a sample; the rate over the ``window`` seconds that end with it (0 until they have passed)."""
        for key, count in self._read().items():
            if count < self._latest.get(key, 0):
                self._banked += self._latest[key]
            self._latest[key] = count
        now, total = time.monotonic(), self._banked + sum(self._latest.values())
        self._totals.append((now, total))
        earlier = [(at, old) for at, old in self._totals if at <= now - window]
        return (total - earlier[-1][1]) / (now - earlier[-1][0]) if earlier else 0.0


@pytest.mark.slow
def test_the_word_count_without_a_pending_cap_rides_out_a_rebalance_at_full_speed(
        zk_conf: dict[str, Any], tmp_path: Path) -> None:
    """The documentation's word count, no ``topology.max.spout.pending`` (Storm's default), as fast as it goes on 2
    workers; ``storm rebalance wc -w 0 -n 3 -e count=8`` while it runs. Nimbus reassigns no worker as dead in the
    2 minutes after, and the acked rate is back to at least half of what it was within 60 s and still there over
    the last 30 s: backpressure paces the spout at what the topology acks instead of every tree timing out. Rates
    are this run's own (a busy machine moves them all alike), each over 10 s of nimbus's counts."""
    with ExitStack() as stack:
        cluster = ProcessCluster(zk_conf, tmp_path / "cluster", stack, **{
            "nimbus.task.timeout.secs": 10, "topology.message.timeout.secs": 30})
        cluster.start("sup", slots=3)
        topology_id = cluster.submit(wordcount.topology(name="wc"), REPO / "examples")
        rate = AckedRate(lambda: spout_acked(cluster, topology_id, "sentences"))
        wait_until(lambda: sum(spout_acked(cluster, topology_id, "sentences").values()) > 0, 90,
                   "the word count acking")
        for _ in range(10):  # samples every 2 s: the rate over the 10 s after 10 s of warming up, at full speed
            time.sleep(2)
            before = rate.sample()
        assert before > 0
        assert cluster.cli("rebalance", "wc", "-w", "0", "-n", "3", "-e", "count=8") == 0
        rebalanced = time.monotonic()
        wait_until(lambda: len(cluster.assignment(topology_id).workers) == 3, 30, "three workers assigned")
        rates: list[tuple[int, int]] = []  # (seconds after the rebalance, acked/s over the 10 s before)
        while time.monotonic() < rebalanced + 120:
            time.sleep(2)
            rates.append((round(time.monotonic() - rebalanced), round(rate.sample())))
        dead = [(e["timestamp"], e["workers"]) for e in log_events(cluster.log_file("nimbus"), "reassigning dead workers")]
        final = rate.sample(window=30)
        seen = f"acked {before:.0f}/s before the rebalance, then {rates}; {final:.0f}/s over the last 30 s"
        print(seen)
        assert dead == [], f"workers reassigned as dead after the rebalance: {dead}"
        assert any(after <= 60 and acked >= before / 2 for after, acked in rates), seen
        assert final >= before / 2, seen
