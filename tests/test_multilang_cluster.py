"""Shell (multilang) components on a dev cluster: a pystorm bolt shipped in the package's ``resources/`` runs
in every worker that hosts it, with exact counts; a hung one is killed after the subprocess timeout, its
error reaches nimbus (``getTopologyInfo``, what the UI shows) and its tuples are replayed."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from processcluster import REPO, ProcessCluster, shared_cluster
from squall.api.dsl import Topology
from support import wait_until
from topologies import Numbers, Recorder, read_records

RESOURCES = REPO / "tests" / "multilang" / "resources"
STREAMPARSE_RUN = str(Path(sys.executable).parent / "streamparse_run")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shared(zk_address: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    """One cluster for the module: each test runs a topology of its own on both its slots."""
    with shared_cluster(zk_address, tmp_path_factory.mktemp("cluster"), "sup-a") as cluster:
        yield cluster


@pytest.fixture
def cluster(shared: ProcessCluster) -> Iterator[ProcessCluster]:
    yield shared
    shared.kill_topologies()


def shell_topology(name: str, records: Path, count: int, bolt: str, serializer: str, **conf: Any) -> Topology:
    records.mkdir()
    t = Topology(name, conf={"topology.workers": 2, **conf})
    numbers = t.spout("numbers", Numbers, args=[count], kwargs={"record_dir": str(records)})
    passed = t.shell_bolt("pass", command=STREAMPARSE_RUN, script=f"-s {serializer} pystorm_components.{bolt}",
                          outputs=["key", "n"], parallelism=2).shuffle(numbers)
    t.bolt("sink", Recorder, kwargs={"record_dir": str(records)}).shuffle(passed)
    return t


def submit(cluster: ProcessCluster, topology: Topology) -> str:
    return cluster.submit(topology, REPO / "tests" / "topologies.py", REPO / "examples", RESOURCES)


def test_a_pystorm_bolt_from_the_package_resources_counts_exactly(cluster: ProcessCluster, tmp_path: Path) -> None:
    records, count = tmp_path / "records", 2000
    # No spout pending cap: all 2,000 are in flight at once. Exactly once holds only if none times out and replays,
    # so the message timeout is far above what a loaded machine takes (FAST's 5 s is not).
    submit(cluster, shell_topology("ml-cluster", records, count, "PassThrough", "msgpack",
                                   **{"topology.message.timeout.secs": 60}))
    wait_until(lambda: len(set(read_records(records, "acked"))) == count, 120, "every number acked")
    assert sorted(n for _, n in read_records(records, "seen")) == list(range(count))


def test_a_hung_bolt_is_reported_at_nimbus_and_its_tuples_replay(cluster: ProcessCluster, tmp_path: Path) -> None:
    records, count = tmp_path / "records", 300
    marker = tmp_path / "marker"
    marker.mkdir()
    # the hang lasts: 5 s tells it from a healthy subprocess a loaded machine answers late (2 s does not)
    topology_id = submit(cluster, shell_topology("ml-hung", records, count, "HangsOnce", "json",
                                                 **{"topology.subprocess.timeout.secs": 5,
                                                    "test.marker.dir": str(marker), "test.trouble.n": 11}))
    wait_until(lambda: len(set(read_records(records, "acked"))) == count, 120, "every number acked after the hang")
    assert set(n for _, n in read_records(records, "seen")) == set(range(count))

    def errors() -> list[str]:
        with cluster.client() as client:
            return [e.error for e in client.getTopologyInfo(topology_id).errors.get("pass", [])]
    found = wait_until(lambda: [e for e in errors() if "heartbeat timeout" in e], 30, "the hang reported at nimbus")
    assert "in-flight tuples failed" in found[0] and "restarting it" in found[0]
