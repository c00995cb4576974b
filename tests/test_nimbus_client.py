"""Finding the leading nimbus: /nimbus_master in ZooKeeper first, nimbus.seeds otherwise."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from squall.core.nimbus_client import leader_address, nimbus_client
from squall.core.thrift import storm
from squall.core.thrift.client import NimbusUnavailable
from squall.core.thrift.server import ThriftServer, make_server
from squall.core.zk import paths
from squall.core.zk.client import ZkClient
from squall.core.zk.records import NimbusMaster


class Leader:
    """A nimbus stand-in that says it leads, at whatever port it was bound to."""

    port = 0

    def getLeader(self) -> Any:
        return storm.NimbusSummary(host="127.0.0.1", port=self.port, uptime_secs=5, isLeader=True, version="0.1.0")

    def getClusterInfo(self) -> Any:
        return storm.ClusterSummary(supervisors=[], topologies=[], nimbuses=[self.getLeader()])


@pytest.fixture
def leader() -> Iterator[ThriftServer]:
    handler = Leader()
    server = make_server(handler, "127.0.0.1", 0, client_timeout_ms=5_000).start()
    handler.port = server.port
    try:
        yield server
    finally:
        server.stop()


def test_zookeeper_names_the_leader(zk: ZkClient, zk_conf: dict[str, Any], leader: ThriftServer) -> None:
    zk.write(paths.NIMBUS_MASTER, NimbusMaster("127.0.0.1", leader.port))
    conf = zk_conf | {"nimbus.seeds": ["127.0.0.1:1"]}  # a dead seed: ZooKeeper alone must suffice
    assert leader_address(conf, zk) == ("127.0.0.1", leader.port)
    with nimbus_client(conf, zk) as client:
        assert client.getClusterInfo().nimbuses[0].isLeader


def test_seeds_are_asked_when_zookeeper_has_no_leader(zk: ZkClient, zk_conf: dict[str, Any],
                                                       leader: ThriftServer) -> None:
    conf = zk_conf | {"nimbus.seeds": ["127.0.0.1:1", f"127.0.0.1:{leader.port}"]}
    assert leader_address(conf, zk) == ("127.0.0.1", leader.port)
    assert leader_address(conf) == ("127.0.0.1", leader.port)


def test_no_leader_anywhere_names_the_seeds_tried(zk: ZkClient, zk_conf: dict[str, Any]) -> None:
    conf = zk_conf | {"nimbus.seeds": ["127.0.0.1:1"]}
    with pytest.raises(NimbusUnavailable, match=r"seeds \['127.0.0.1:1'\]"):
        leader_address(conf, zk)
