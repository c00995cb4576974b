"""`storm nimbus` as real processes: two of them on one ZooKeeper, the leader killed with SIGKILL."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from squall.core.thrift.client import connect
from squall.core.zk import paths
from squall.core.zk.client import ZkClient
from squall.core.zk.records import NimbusMaster
from support import listening_port, start_nimbus, wait_until


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(10)


@pytest.mark.slow
def test_follower_takes_over_within_the_session_timeout(zk: ZkClient, zk_conf: dict[str, Any], tmp_path: Path,
                                                       processes: list[subprocess.Popen[bytes]]) -> None:
    dirs = [tmp_path / f"nimbus-{i}" for i in (1, 2)]
    processes += [start_nimbus(zk_conf, d) for d in dirs]
    ports = wait_until(lambda: all(p := [listening_port(d.with_suffix(".log")) for d in dirs]) and p, 30,
                       "both nimbuses to start")
    by_port = dict(zip(ports, processes))
    wait_until(lambda: zk.read(paths.NIMBUS_MASTER, NimbusMaster) and len(zk.children(paths.NIMBUS_SLAVES)) == 1,
               30, "one leader and one follower")
    leader = zk.read(paths.NIMBUS_MASTER, NimbusMaster)
    (follower_port,) = set(ports) - {leader.port}
    with connect("127.0.0.1", follower_port, 10_000) as client:
        assert client.getLeader().port == leader.port, "a follower names the leader"

    by_port[leader.port].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    session_secs = zk_conf["storm.zookeeper.session.timeout"] / 1000
    wait_until(lambda: (m := zk.read(paths.NIMBUS_MASTER, NimbusMaster)) is not None and m.port == follower_port,
               session_secs + 10, "the follower to take over")
    assert time.monotonic() - killed_at < session_secs + 5
    with connect("127.0.0.1", follower_port, 10_000) as client:
        assert client.getClusterInfo().nimbuses[0].port == follower_port
