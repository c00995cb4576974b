"""Issue 21 on a process cluster (``storm nimbus`` + ``storm supervisor`` processes, real ZooKeeper): what user code
in a worker can see of the daemons' credentials, and Thrift over mutual TLS only."""

from __future__ import annotations

import json
import secrets
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from kazoo.exceptions import NoAuthError
from streamparse.thrift import storm_thrift as sp
from thriftpy2.protocol import TBinaryProtocolFactory
from thriftpy2.rpc import make_client
from thriftpy2.transport import TFramedTransportFactory, TTransportException

from processcluster import ProcessCluster
from squall.dsl import Topology
from squall.zk import paths
from squall.zk.client import ZkClient
from squall.zk.errors import record_task_error
from squall.zk.records import TaskError
from scenarios import counted_word_count, final_counts
from support import listening, make_certs, tls_conf, wait_until
from topologies import Snoop, read_records


def test_user_code_in_a_worker_finds_no_daemon_credential(zk_conf: dict[str, Any], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemons authenticate to ZooKeeper (digest) and their environment holds a cloud secret. A spout reads
    its conf, its environment and the conf file its worker was started with: none holds the ZooKeeper password
    or the secret, while the allow-listed variables (PATH) are there. The worker still files its task errors,
    with its topology's own credential; an anonymous ZooKeeper session cannot add one; killing the topology
    removes everything the worker wrote."""
    password, cloud = secrets.token_hex(12), f"daemon-only-{secrets.token_hex(8)}"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", cloud)  # the daemons' environment (DevCluster passes its own on)
    records = tmp_path / "records"
    records.mkdir()
    topology = Topology("snoop")
    topology.spout("snoop", Snoop, args=[str(records)])
    with ExitStack() as stack, ZkClient(zk_conf) as anonymous:  # first, so the fixture can clean the root up
        cluster = ProcessCluster(zk_conf, tmp_path / "cluster", stack, **{
            "storm.zookeeper.auth.scheme": "digest", "storm.zookeeper.auth.payload": f"squall:{password}"})
        cluster.start_nimbus()
        cluster.start_supervisor("sup")
        cluster.wait_supervisors(1)
        topology_id = cluster.submit(topology)
        seen = wait_until(lambda: read_records(records, "seen"), 60, "the spout's report")[0]

        everything = json.dumps(seen)
        assert password not in everything and cloud not in everything
        assert not [key for key in seen["conf"] if key.endswith("auth.payload")]
        assert seen["env"]["PATH"] and "PYTHONPATH" in seen["env"]

        root = paths.task_errors_root(topology_id)
        [task] = wait_until(lambda: anonymous.children(root), 30, "the spout's error in ZooKeeper")
        [key] = anonymous.children(paths.task_errors(topology_id, int(task)))
        assert anonymous.read(paths.task_error(topology_id, int(task), int(key)), TaskError).error == "snooped"
        with pytest.raises(NoAuthError):
            record_task_error(anonymous, topology_id, int(task), TaskError("forged", 1_700_000_000))

        assert cluster.cli("kill", "snoop", "-w", "0") == 0
        wait_until(lambda: not anonymous.exists(root), 60, "the topology's errors removed by nimbus")


def test_the_word_count_runs_with_thrift_over_mutual_tls_only(zk_conf: dict[str, Any], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The secure profile's Thrift: nimbus listens only on its TLS port. Submitting, the supervisor's code
    download and the workers' heartbeats all go through it with the daemons' certificate; the word count
    reaches its exact counts and its stats reach nimbus. ``storm list`` with alice's certificate works; without a
    certificate, and from a Storm 1.x client (streamparse), nimbus cannot be reached."""
    certs = make_certs(tmp_path / "certs", "squall-daemons", "alice")
    secure = {**tls_conf(certs, "squall-daemons"), "nimbus.thrift.tls.port": 0, "nimbus.thrift.tls.server.only": True}
    records = tmp_path / "records"
    topology, expected = counted_word_count(records, rounds=10, workers=2)
    with ExitStack() as stack:
        cluster = ProcessCluster(zk_conf, tmp_path / "cluster", stack, **secure)
        cluster.start_nimbus()
        cluster.start_supervisor("sup")
        cluster.wait_supervisors(1)
        topology_id = cluster.submit(topology)
        wait_until(lambda: final_counts(records) == expected, 90, "exact counts")
        tls_port = cluster.tls_ports["nimbus"]
        assert {port for _, port in listening(cluster.daemons["nimbus"].pid)} == {tls_port}, "no plain listener"

        def executed_at_nimbus() -> bool:
            with cluster.client() as client:
                info = client.getTopologyInfo(topology_id)
            return any(e.stats is not None and e.component_id == "count" for e in info.executors)
        wait_until(executed_at_nimbus, 60, "the workers' stats at nimbus (heartbeats over TLS)")

        seeds = {"nimbus.seeds": [f"127.0.0.1:{tls_port}"]}
        capsys.readouterr()
        assert cluster.cli("list", conf={**seeds, **tls_conf(certs, "alice")}) == 0
        assert "wordcount" in capsys.readouterr().out
        assert cluster.cli("list", conf=seeds) == 1
        assert "cannot reach nimbus" in capsys.readouterr().err
        storm_1 = make_client(sp.Nimbus, "127.0.0.1", tls_port, proto_factory=TBinaryProtocolFactory(),
                              trans_factory=TFramedTransportFactory(), timeout=5000)
        with pytest.raises(TTransportException):
            storm_1.getClusterInfo()
        storm_1.close()
