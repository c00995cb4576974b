"""How the CLI and daemons reach the leading nimbus: ZooKeeper's ``/nimbus_master`` or ``nimbus.seeds``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from thriftpy2.thrift import TClient

from squall.thrift import connect, find_leader
from squall.zk import paths
from squall.zk.client import ZkClient
from squall.zk.records import NimbusMaster


def leader_address(conf: Mapping[str, Any], zk: ZkClient | None = None) -> tuple[str, int]:
    """The leader's (host, port): from ``/nimbus_master`` when a ZooKeeper client is at hand
    (daemons have one; it needs no round trip to a nimbus), else by asking ``nimbus.seeds``."""
    if zk is not None:
        master = zk.read(paths.NIMBUS_MASTER, NimbusMaster)
        if master is not None:
            return master.host, master.port
    return find_leader(conf["nimbus.seeds"], conf["nimbus.thrift.port"], _timeout(conf, cap_ms=10_000))


@contextlib.contextmanager
def nimbus_client(conf: Mapping[str, Any], zk: ZkClient | None = None) -> Iterator[TClient]:
    """A client connected to the leading nimbus, closed on exit."""
    host, port = leader_address(conf, zk)
    with connect(host, port, _timeout(conf), max_frame_bytes=conf["nimbus.thrift.client.max_buffer_size"]) as client:
        yield client


def _timeout(conf: Mapping[str, Any], cap_ms: int | None = None) -> int:
    timeout = int(conf["storm.thrift.socket.timeout.ms"])
    return min(timeout, cap_ms) if cap_ms else timeout
