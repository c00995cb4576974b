"""Gray upgrade on a process cluster: nimbus, two supervisors with two slots each, four workers. A Tag bolt on
every worker stamps each tuple with the ``release`` its code package brings, so the sink shows which
workers run which code version; a reliable spout shows that nothing is lost on the way."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from processcluster import ProcessCluster, shared_cluster
from scenarios import release_package, tagged_stream
from squall.api.submitter import submit_topology
from squall.core.thrift import storm
from squall.core.zk import paths
from squall.core.zk.records import Assignment, GrayUpgradeConf
from support import wait_until
from topologies import read_records

#: topology.max.spout.pending: bounds how far emitted numbers run ahead of those recorded.
PENDING = 100
SUPERVISORS = ("sup-a", "sup-b")


pytestmark = pytest.mark.slow  # process-cluster fault scenarios of a minute each


@pytest.fixture(scope="module")
def shared(zk_address: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    """One cluster for the module: each test upgrades a canary of its own on its four slots (no slot free for a
    worker to move to)."""
    # Restarts for the upgrade must not look like dead tasks: give nimbus more than a worker restart takes.
    with shared_cluster(zk_address, tmp_path_factory.mktemp("cluster"), *SUPERVISORS,
                        **{"nimbus.task.timeout.secs": 10}) as cluster:
        yield cluster


@pytest.fixture
def cluster(shared: ProcessCluster) -> Iterator[ProcessCluster]:
    yield shared
    shared.kill_topologies()


class Canary:
    """The test topology (``name``) and what its sink saw."""

    def __init__(self, cluster: ProcessCluster, tmp: Path, name: str) -> None:
        self.cluster, self.tmp, self.name = cluster, tmp, name
        self.records = tmp / "records"
        self.records.mkdir()
        self.topology = tagged_stream(name, self.records, workers=4, pending=PENDING, tags=4)
        self.topology_id = self.submit("v1")

    def submit(self, release: str, **upgrade: Any) -> str:
        overrides = {"topology.upgrade": True, **{f"topology.upgrade.{k.replace('_', '.')}": v
                                                 for k, v in upgrade.items()}} if upgrade else {}
        return submit_topology(self.cluster.conf, self.topology, package=release_package(self.tmp, release),
                               conf_overrides=overrides, zk=self.cluster.zk)

    # -- what can be observed ---------------------------------------------------------------------

    def seen(self) -> list[tuple[int, str, int]]:
        """(n, release, tag task) of every tuple the sink recorded, in order."""
        return [(n, release, task) for _, n, release, task in read_records(self.records, "seen")]

    def latest_n(self) -> int:
        return max((n for n, _, _ in self.seen()), default=-1)

    def releases_after(self, n: int) -> dict[int, set[str]]:
        """Tag task → the releases it stamped on numbers above ``n``."""
        found: dict[int, set[str]] = {}
        for m, release, task in self.seen():
            if m > n:
                found.setdefault(task, set()).add(release)
        return found

    def assignment(self) -> Assignment:
        assignment = self.cluster.assignment(self.topology_id)
        assert assignment is not None
        return assignment

    def tag_worker(self) -> dict[int, str]:
        """Tag task → host:port of its worker."""
        tags = self.component_tasks("tag")
        return {t: w.host_port for w in self.assignment().workers for t in w.tasks if t in tags}

    def component_tasks(self, component: str) -> set[int]:
        with self.cluster.client() as client:
            info = client.getTopologyInfo(self.topology_id)
        return {e.executor_info.task_start for e in info.executors if e.component_id == component}

    def worker_versions(self) -> dict[str, int]:
        """host:port → code version of the worker process running there, from the supervisors' records."""
        return {f"127.0.0.1:{r.port}": r.version for name in SUPERVISORS for r in self.cluster.workers(name)
                if r.topology_id == self.topology_id}

    def marks(self, kind: str) -> set[str]:
        path = paths.upgraded_workers if kind == "upgraded" else paths.upgrading_workers
        return set(self.cluster.zk.children(path(self.topology_id)))

    def gray_conf(self) -> GrayUpgradeConf | None:
        return self.cluster.zk.read(paths.gray_upgrade_conf(self.topology_id), GrayUpgradeConf)

    def status(self) -> str:
        with self.cluster.client() as client:
            return client.getTopologyInfo(self.topology_id).status

    def listed_status(self) -> str:
        with self.cluster.client() as client:
            return {t.name: t.status for t in client.getClusterInfo().topologies}[self.name]

    # -- waiting ----------------------------------------------------------------------------------

    def wait_releases(self, expected: dict[str, str], what: str) -> None:
        """Wait until tuples emitted from now on carry, per tag task, the release its worker should run."""
        tag_worker = self.tag_worker()
        want = {task: {expected[worker]} for task, worker in tag_worker.items()}
        start = self.latest_n() + PENDING
        wait_until(lambda: self.releases_after(start) == want, 90, what)

    def wait_all_acked(self) -> None:
        """Nothing lost: every number below what the sink has now seen gets acked (replays included)."""
        settled = self.latest_n()
        wait_until(lambda: set(range(settled)) <= set(read_records(self.records, "acked")), 90,
                   f"every number below {settled} acked")


def versions_of(workers: dict[str, int], version: int) -> set[str]:
    return {w for w, v in workers.items() if v == version}


def test_upgrade_one_worker_then_two_more_then_the_rest(cluster: ProcessCluster, tmp_path: Path) -> None:
    canary = Canary(cluster, tmp_path, "canary-steps")
    workers = sorted(w.host_port for w in canary.assignment().workers)
    assert len(workers) == 4 and set(canary.tag_worker().values()) == set(workers), "a tag task on every worker"
    canary.wait_releases(dict.fromkeys(workers, "v1"), "every worker stamping v1")

    assert canary.submit("v2", worker_num=1) == canary.topology_id, "a gray submit keeps the topology id"
    assert canary.status() == "UPGRADING" and canary.listed_status() == "UPGRADING"
    wait_until(lambda: len(canary.marks("upgraded")) == 1 and not canary.marks("upgrading"), 60,
               "one worker upgraded")
    first = canary.marks("upgraded")
    assert versions_of(canary.worker_versions(), 2) == first
    canary.wait_releases({w: "v2" if w in first else "v1" for w in workers}, "one worker on v2, three on v1")
    assert canary.status() == "UPGRADING"

    with cluster.client() as client:
        client.grayUpgrade(canary.name, None, None, 2)
    wait_until(lambda: len(canary.marks("upgraded")) == 3, 60, "three workers upgraded")
    three = canary.marks("upgraded")
    assert first < three and versions_of(canary.worker_versions(), 2) == three
    canary.wait_releases({w: "v2" if w in three else "v1" for w in workers}, "three workers on v2")

    with cluster.client() as client:
        client.grayUpgrade(canary.name, None, None, 1)
    wait_until(lambda: canary.status() == "ACTIVE", 60, "the upgrade complete")
    assert canary.assignment().code_version == 2 and versions_of(canary.worker_versions(), 2) == set(workers)
    conf = canary.gray_conf()
    assert conf is not None and conf.complete_ms and not conf.rollback
    assert canary.marks("upgraded") == canary.marks("upgrading") == set()
    canary.wait_releases(dict.fromkeys(workers, "v2"), "every worker stamping v2")
    with cluster.client() as client, pytest.raises(storm.NotAliveException):
        client.beginCodeDownload(canary.topology_id, "v1/code")  # the old code is gone from nimbus
    stormdist = [cluster.root / name / "supervisor" / "stormdist" / canary.topology_id for name in SUPERVISORS]
    wait_until(lambda: sorted(p.name for d in stormdist for p in d.iterdir()) == ["2", "2"], 30,
               "the supervisors to drop the old code")
    canary.wait_all_acked()

    # Each worker was restarted exactly once, to switch versions.
    with cluster.client() as client, pytest.raises(storm.InvalidTopologyException, match="already complete"):
        client.grayUpgrade(canary.name, None, None, 1)


def test_selection_rollback_crash_and_expiry(cluster: ProcessCluster, tmp_path: Path) -> None:
    canary = Canary(cluster, tmp_path, "canary-choices")
    workers = sorted(w.host_port for w in canary.assignment().workers)
    canary.wait_releases(dict.fromkeys(workers, "v1"), "every worker stamping v1")
    sink_worker = {w.host_port for w in canary.assignment().workers if canary.component_tasks("sink") & set(w.tasks)}
    assert len(sink_worker) == 1

    # By component: exactly the worker hosting the sink.
    canary.submit("v2", component="sink")
    wait_until(lambda: canary.marks("upgraded") == sink_worker, 60, "the sink's worker upgraded")
    assert versions_of(canary.worker_versions(), 2) == sink_worker
    # Explicitly: exactly the named worker.
    named = next(w for w in workers if w not in sink_worker)
    with cluster.client() as client:
        with pytest.raises(storm.InvalidTopologyException, match="not workers of this topology"):
            client.grayUpgrade(canary.name, None, ["127.0.0.1:1"], 0)
        client.grayUpgrade(canary.name, None, [named], 0)
    two = sink_worker | {named}
    wait_until(lambda: canary.marks("upgraded") == two, 60, "the named worker upgraded too")
    assert versions_of(canary.worker_versions(), 2) == two
    canary.wait_releases({w: "v2" if w in two else "v1" for w in workers}, "two workers on v2")
    with cluster.client() as client, pytest.raises(storm.InvalidTopologyException, match="is in progress"):
        client.graySubmit(canary.name, "", json.dumps({}), canary.topology.build()[0], storm.GrayUpgradeOptions())

    # Rollback after two of four: everything back on v1.
    with cluster.client() as client:
        client.rollbackTopology(canary.name)
    wait_until(lambda: canary.status() == "ACTIVE", 60, "the rollback over")
    assert versions_of(canary.worker_versions(), 1) == set(workers)
    assert canary.gray_conf().rollback and canary.gray_conf().reason == "asked by the operator"
    canary.wait_releases(dict.fromkeys(workers, "v1"), "every worker back on v1")

    # A version that cannot start is never counted upgraded; the topology rolls back by itself.
    canary.submit("crash", worker_num=1)
    wait_until(lambda: canary.gray_conf().rollback, 90, "the automatic rollback")
    assert canary.marks("upgraded") == set()
    assert "tasks died during the upgrade" in canary.gray_conf().reason
    wait_until(lambda: canary.status() == "ACTIVE", 60, "the rollback over")
    assert versions_of(canary.worker_versions(), 1) == set(workers) and canary.assignment().code_version == 1
    canary.wait_releases(dict.fromkeys(workers, "v1"), "still processing on v1")

    # An upgrade left open past its ttl cannot be continued, and rolls back.
    canary.submit("v4", ttl=10_000)  # long enough that the status read right after cannot see it expired already
    assert canary.status() == "UPGRADING"
    wait_until(lambda: canary.gray_conf().complete_ms, 30, "the expired upgrade to end")
    with cluster.client() as client, pytest.raises(storm.InvalidTopologyException, match="it expired"):
        client.grayUpgrade(canary.name, None, None, 1)
    assert canary.status() == "ACTIVE"
    canary.wait_all_acked()
